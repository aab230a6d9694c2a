"""Small value types shared by the batch modules: job specs, records, results, statuses.

Everything here is a plain dataclass of strings and numbers, so Prefect tasks can take and
return them without walking large inputs: a job's texts live in its JSONL file, its chunk
hashes in a sidecar file and in the ledger.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar

T = TypeVar("T")

# Normalised job statuses (each provider's names are mapped onto these).
PENDING = "pending"  # validating / queued
RUNNING = "running"  # in_progress / finalizing / cancelling
COMPLETED = "completed"
FAILED = "failed"
EXPIRED = "expired"
CANCELLED = "cancelled"
MISSING = "missing"  # the provider does not know the job (deleted, wrong account)
MiB = 1024 * 1024

TIMEOUT = "timeout"  # our poll deadline passed while the job was still running
TERMINAL = frozenset({COMPLETED, FAILED, EXPIRED, CANCELLED, MISSING})


@dataclass(frozen=True)
class JobLimits:
    """What one provider batch job may hold (a provider's fact: ``EmbeddingProvider.batch_limits``;
    ``[batch] max_*_per_job`` may lower it)."""

    max_requests: int
    max_bytes: int
    max_tokens: int | None = None


@dataclass
class JobSpec:
    """A job to submit: its JSONL input and the chunk hashes (and token estimates) it covers."""

    local_id: str
    provider: str
    path: str  # JSONL input, one request line per chunk; custom id = chunk hash
    hashes_path: str  # "hash<TAB>tokens" per line, in the JSONL's order
    requests: int
    tokens: int
    bytes: int
    owner: str = ""  # the owner token of the run submitting it (``batch_ledger.RunOwner``)
    owner_info: str = ""

    def hash_tokens(self) -> list[tuple[str, int]]:
        out = []
        with open(self.hashes_path, encoding="ascii") as fh:
            for line in fh:
                h, _, t = line.rstrip("\n").partition("\t")
                if h:
                    out.append((h, int(t or 0)))
        return out

    def hashes(self) -> list[str]:
        return [h for h, _ in self.hash_tokens()]

    def remove_files(self) -> None:
        for p in (self.path, self.hashes_path):
            Path(p).unlink(missing_ok=True)


@dataclass
class RemoteJob:
    """A provider's view of a job, in normalised terms."""

    job_id: str
    status: str
    provider_status: str
    output_file_id: str | None = None
    error_file_id: str | None = None
    error: str = ""
    total: int = 0
    done: int = 0
    failed: int = 0
    local_id: str | None = None  # metadata / display name we gave it
    input_file_id: str | None = None


@dataclass
class JobRecord:
    """A job this run knows about (submitted now or re-attached from the ledger)."""

    local_id: str
    provider: str
    job_id: str | None
    status: str = PENDING
    provider_status: str = ""
    requests: int = 0
    tokens: int = 0
    input_file_id: str | None = None
    output_file_id: str | None = None
    error_file_id: str | None = None
    error: str = ""
    timeouts: int = 0
    reattached: bool = False
    progress: float = 0.0  # 0..1 from the provider's request counts when it reports them

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL

    def update(self, remote: RemoteJob) -> None:
        self.status = remote.status
        self.provider_status = remote.provider_status
        self.output_file_id = remote.output_file_id or self.output_file_id
        self.error_file_id = remote.error_file_id or self.error_file_id
        if remote.error:
            self.error = remote.error
        if remote.total:
            self.progress = min(1.0, (remote.done + remote.failed) / remote.total)
        elif remote.status in TERMINAL:
            self.progress = 1.0

    @property
    def label(self) -> str:
        return f"{self.provider} batch {self.job_id or self.local_id}"


@dataclass
class CollectResult:
    """What reading one job's output gave: vectors stored, and the chunks still without one."""

    local_id: str
    job_id: str | None
    status: str
    stored: int = 0
    tokens: int = 0
    lines: int = 0  # the job's inputs
    # tokens of inputs the provider answered with a vector that could not be used (billed, not stored)
    tokens_unusable: int = 0
    stored_hashes: list[str] = field(default_factory=list)  # the inputs given a vector (``stored`` of them)
    failed_hashes: list[str] = field(default_factory=list)
    problems: dict[str, int] = field(default_factory=dict)
    examples: list[str] = field(default_factory=list)

    def summary(self) -> str:
        bits = ", ".join(f"{k} {v}" for k, v in sorted(self.problems.items()) if v)
        return f"{self.stored} vectors stored" + (f"; {bits}" if bits else "")


@dataclass
class BatchFigures:
    """Batch mode in one run: what :class:`memory_core.index.batch_runner.BatchRun` did with the jobs
    (``memory_core.index.stages.embed_stats`` adds the chunks sent through sync calls and the mode).

    ``jobs`` False: the run used no job (batch mode on, a provider without a Batch API): only
    ``mode`` is said. :meth:`to_dict` is the run summary's ``batch`` in JSON.
    """

    mode: str = "batch"
    jobs_submitted: int = 0
    jobs_reattached: int = 0
    jobs_collected: int = 0
    jobs_failed: int = 0
    jobs_timed_out: int = 0
    jobs_cancelled: int = 0
    jobs_pending: int = 0
    pending_job_ids: list[str | None] = field(default_factory=list)
    chunks_via_batch: int = 0
    chunks_via_sync: int = 0
    lines_failed: int = 0
    requeued_chunks: int = 0
    failure_points: int = 0
    disabled: bool = False  # batch mode was switched off during the run (failure points)
    disabled_reason: str = ""
    errors: list[str] = field(default_factory=list)  # the first 10
    chunks_left_to_sync: int = 0
    seconds: float = 0.0
    jobs: bool = True
    # requests and tokens in the jobs this run submitted (sent, and billed when a job completes,
    # whoever collects it); ``stopped``: the run was cancelled or failed with jobs open at the
    # provider (``jobs_pending``, ``pending_job_ids``): the next run re-attaches to them
    requests_submitted: int = 0
    tokens_submitted: int = 0
    stopped: bool = False
    # part vectors (transcript exchanges, note windows; the keys predate windows), counted apart from the chunks above
    # (after the earlier keys: the JSON keeps their order)
    exchanges_via_batch: int = 0
    exchanges_via_sync: int = 0
    exchanges_left_to_sync: int = 0
    # tokens of lines a job returned (and the provider billed) with an unusable vector: counted in
    # the batch tokens spent, not in what an all-sync run would have sent
    tokens_unusable: int = 0
    # vectors a job (re-attached, or no longer needed) stored for chunks this run does not need (a
    # note deleted or changed since it was submitted): in the cache, not counted as embedded
    surplus_via_batch: int = 0
    # open jobs of another live run (a cache file shared by several indexes) covering chunks this
    # run needs: waited for, never touched; the chunks their run put in the cache count here
    jobs_of_other_runs: int = 0
    chunks_from_other_runs: int = 0

    @classmethod
    def sync_only(cls, mode: str) -> BatchFigures:
        return cls(mode=mode, jobs=False)

    def to_dict(self) -> dict[str, object]:
        if not self.jobs:
            return {"mode": self.mode}
        out = asdict(self)
        del out["jobs"]
        return out


@dataclass
class EarlierJobs:
    """What a run that does not use the Batch API did with the jobs earlier runs left open for its
    provider configuration (:class:`memory_core.index.batch_runner.LookOnce`); each list holds the jobs' provider ids (the local id
    of a job never created)."""

    collected: list[str] = field(default_factory=list)  # completed: their output read into the cache
    closed: list[str] = field(default_factory=list)  # failed, expired, cancelled, gone: closed as a batch run closes them
    cancelled: list[str] = field(default_factory=list)  # cancelled and closed, their output unread (--re-embed)
    dropped: list[str] = field(default_factory=list)  # over already: closed, their output unread (--re-embed)
    running: list[str] = field(default_factory=list)  # still running when looked at: left open
    unreached: list[str] = field(default_factory=list)  # not looked at or not cancelled (a provider error): left open
    others: list[str] = field(default_factory=list)  # another live run's, or another index's: not touched
    errors: list[str] = field(default_factory=list)  # the provider's errors while looking (the first is said)
    vectors: int = 0  # vectors the collected jobs put in the cache
    tokens: int = 0  # their tokens, billed at the batch price when they completed

    @property
    def left_open(self) -> list[str]:
        return self.running + self.unreached + self.others

    def notes(self, re_embed: bool) -> list[str]:
        """The run's warnings about them, one a kind (a Batch API that fails is said once)."""
        def ids(jobs: list[str]) -> str:
            return ", ".join(jobs[:5]) + (", ..." if len(jobs) > 5 else "")

        out: list[str] = []
        if self.collected:
            out.append(f"{len(self.collected)} batch job(s) of earlier runs had completed at the provider"
                       f" ({ids(self.collected)}): collected, {self.vectors} vector(s) into the embedding cache"
                       " (billed to those jobs), so this run did not embed their chunks again")
        if self.closed:
            out.append(f"{len(self.closed)} batch job(s) of earlier runs had failed, expired or were cancelled at"
                       f" the provider ({ids(self.closed)}): closed, what they finished taken into the cache; the"
                       " rest of their chunks go through sync calls")
        if self.cancelled or self.dropped:
            over = (f"; {len(self.dropped)} more were over already ({ids(self.dropped)}): closed the same way"
                    if self.dropped else "")
            out.append(f"index --re-embed cancelled {len(self.cancelled)} batch job(s) of earlier runs at the"
                       f" provider ({ids(self.cancelled)}) and closed them without reading their output (vectors"
                       f" of what the re-embed replaces){over}")
        left = self.left_open
        if left:
            why = ["index --re-embed does not take their vectors (they predate it)" if re_embed
                   else "batch mode is off ([batch] enabled = false)"]
            if self.running:
                why.append(f"{len(self.running)} still running when this run looked (it does not wait for them)")
            if self.unreached:
                what = "could not be cancelled" if re_embed else "could not be looked at"
                why.append(f"{len(self.unreached)} {what} ({self.errors[0] if self.errors else 'a provider error'})")
            if self.others:
                why.append(f"{len(self.others)} belong to another live run, or another index, on this cache file"
                           " (left to it)")
            out.append(f"{len(left)} batch job(s) of earlier runs are still open at the provider ({ids(left)}):"
                       f" {'; '.join(why)}; this run embeds their chunks through sync calls and the provider bills"
                       " the jobs as well when they complete; a run with batch mode on collects them (and cancels"
                       " those no longer needed)")
        return out


@dataclass
class Cost:
    """The estimated cost of a run's tokens and the saving against all-sync
    (:func:`memory_core.embeddings.cost.estimate_cost`). USD per 1M tokens; None: no price."""

    currency: str
    provider: str
    model: str
    tokens_sync: int
    tokens_batch: int
    sync_per_mtok: float | None
    batch_discount: float
    prices_checked: str
    priced: bool
    batch_per_mtok: float | None = None  # only when priced
    estimated_usd: float | None = None
    sync_only_usd: float | None = None
    saving_usd: float | None = None
    saving_pct: float | None = None

    def to_dict(self) -> dict[str, object]:
        out = asdict(self)
        if not self.priced:
            del out["batch_per_mtok"]
        return out


# -- a provider's Batch API client (memory_core.embeddings.batch_clients; EmbeddingProvider.batch_client) --

class ParsedLine:
    """One output line: the custom id and either a vector or an error (kind, message)."""

    __slots__ = ("custom_id", "vector", "kind", "message")

    def __init__(self, custom_id: str | None, vector: Any = None, kind: str = "ok", message: str = "") -> None:
        self.custom_id = custom_id
        self.vector = vector
        self.kind = kind
        self.message = message


class BatchClient(Protocol):
    provider: str
    completion_window: str

    def request_line(self, custom_id: str, text: str) -> dict[str, object]: ...
    def upload(self, path: str, local_id: str) -> str: ...
    def create(self, input_file_id: str, local_id: str) -> RemoteJob: ...
    def get(self, job_id: str) -> RemoteJob: ...
    def cancel(self, job_id: str) -> None: ...
    def find(self, local_id: str, input_file_id: str | None) -> RemoteJob | None: ...
    def download(self, file_id: str) -> bytes: ...
    def delete_file(self, file_id: str) -> None: ...
    def parse_line(self, obj: Any) -> ParsedLine: ...
    def retry(self, fn: Callable[[], T]) -> T: ...
    def classify(self, exc: Exception) -> Exception: ...
