"""The types one reindex run passes between its layers: the plan, the progress, the summary.

This is the bottom layer of the indexing code: it imports nothing of memory-core's engine, so
the stage functions (:mod:`memory_core.index.stages`), the streamed build (:mod:`memory_core.index.streaming`),
the Batch API coordinator (:mod:`memory_core.index.batch_runner`), the orchestrator
(:mod:`memory_core.index.pipeline`) and the Prefect flows all share one definition of each.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Protocol, TypeVar

import pyarrow as pa

from memory_core.embeddings.batch_types import BatchFigures, Cost
from memory_core.index.run_stops import is_stop as is_stop  # (one rule: run_stops')
from memory_core.sources.discovery import FileEntry

T = TypeVar("T")

# ``exchange``: the text is a part vector's (a transcript exchange, chunking.exchange_vectors, or a
# note's window of lines, chunking.note_windows; the name predates windows) when it was first met, not a chunk's own (MissResult.part_chunks lists those a chunk had as its own after all)
MISS_SCHEMA = pa.schema([("hash", pa.string()), ("text", pa.large_string()), ("tokens", pa.int32()),
                         ("exchange", pa.bool_())])


@dataclass
class Progress:
    """Where a run is, moved by every file chunked and by every embedding request that returns.

    The unit is the chunk: ``ready`` counts chunks whose vector is there (a cache hit or a
    returned request; every chunk when the index is keyword-only). The run's total is not known
    before every file is chunked, so it is extrapolated from the bytes chunked so far.
    """

    files_total: int = 0
    bytes_total: int = 0
    files_done: int = 0
    bytes_done: int = 0
    chunks: int = 0
    ready: int = 0
    cached: int = 0  # of ``ready``: read from the embedding cache (or a twin chunk), no provider call
    # chunks whose vector a lookup found (the live index, the cache): the summary's ``from cache``,
    # kept as the run goes so the partial summary of a run that stops says it too (it said 0)
    cache_hits: int = 0
    embedded: int = 0
    requests: int = 0
    tokens: int = 0
    tokens_batch: int = 0  # tokens of the batch jobs' collected output (priced at the batch rate)
    # a run that stopped: chunks in embedding requests still running when it did (cached if they return)
    in_flight: int = 0
    phase: str = "index"
    cost_usd: float | None = None
    started: float = field(default_factory=time.monotonic)
    finished: bool = False

    @property
    def total_estimate(self) -> int:
        """Chunks this run will have: exact once every file is chunked."""
        if self.files_done >= self.files_total or self.bytes_done >= self.bytes_total:
            return self.chunks
        if self.bytes_done <= 0:
            return max(self.chunks, self.files_total)
        return max(self.chunks, round(self.chunks * self.bytes_total / self.bytes_done))

    @property
    def fraction(self) -> float:
        if self.finished:
            return 1.0
        total = self.total_estimate
        return 0.0 if total <= 0 else min(1.0, self.ready / total)

    @property
    def elapsed_s(self) -> float:
        return time.monotonic() - self.started

    @property
    def rate(self) -> float:
        """Chunks ready per second since the run started."""
        t = self.elapsed_s
        return self.ready / t if t > 0 else 0.0

    @property
    def work_rate(self) -> float:
        """Chunks per second that cost work (embedded, or indexed keyword-only): what the rest
        of the run will go at. Cache hits come at thousands a second and say nothing about it
        (a resumed run showed an ETA of 6 s with ~3 minutes left)."""
        t = self.elapsed_s
        return max(0, self.ready - self.cached) / t if t > 0 else 0.0

    @property
    def eta_s(self) -> float | None:
        rate = self.work_rate
        if self.finished:
            return 0.0
        if rate <= 0:
            return None
        return max(0.0, (self.total_estimate - self.ready) / rate)

    def line(self) -> str:
        """One line for logs and the Prefect progress artifact."""
        total = self.total_estimate
        exact = self.files_done >= self.files_total
        out = f"{self.phase}: {self.ready:,} of {'' if exact else '~'}{total:,} chunks ({100 * self.fraction:.0f}%)"
        out += f", {self.rate:,.0f} chunks/s"
        eta = self.eta_s
        if eta is not None and not self.finished:
            out += f", ETA {_duration(eta)}"
        out += f"; {self.files_done:,} of {self.files_total:,} files, {self.embedded:,} embedded"
        if self.cost_usd is not None:
            out += f", ${self.cost_usd:.4f} so far"
        return out


def _duration(seconds: float) -> str:
    s = int(round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


ProgressFn = Callable[[Progress], None]


# -- plan ------------------------------------------------------------------------------------

@dataclass
class RunPlan:
    """What discovery decided: which files to (re)index or drop; every other indexed file keeps
    its rows as they are (``counts["unchanged"]``, ``counts["sessions_carried"]``)."""

    run_id: str
    workdir: str
    index_path: str
    full: bool
    full_reason: str
    meta: dict[str, Any]
    to_index: list[FileEntry]
    removed: list[str]
    counts: dict[str, int]
    warnings: list[str] = field(default_factory=list)
    # a run given the changed paths (memory_core.sources.discovery.discover_changed): how many it
    # looked at (None: it scanned every source), or why it scanned everything instead
    hinted_paths: int | None = None
    hint_fallback: str = ""
    # the files earlier runs skipped that are as they were then (path -> [source, mtime ms, size,
    # kind]: memory_core.sources.freshness.SKIPPED_KEY); the build's meta keeps them
    skips: dict[str, list[Any]] = field(default_factory=dict)
    # the meta records what the live index's does not, and the run commits it even with no file
    # to index: a skip it lacks (an indexed file that changed and cannot be read, its rows kept:
    # so freshness learns it), or how message days are read (indexmeta.MESSAGE_DAYS_VERSION,
    # when no transcript needed re-reading: so the next run does not look again)
    new_meta: bool = False
    # indexed files whose bytes are as indexed but whose mtime is new (a touch, a checkout, a copy):
    # path -> their files row with the new mtime (LiveFile's fields). The run records the mtime so
    # freshness stops calling them changed (it did for ever: every search of a long-lived reader
    # started a run that found nothing to do)
    touched: dict[str, dict[str, Any]] = field(default_factory=dict)
    # ``index --re-embed``: every chunk is embedded again; the run's cache reads only what the run
    # itself stored (EmbeddingCache.renew), never the cache file's or the live index's vectors
    re_embed: bool = False

    @property
    def nothing_to_do(self) -> bool:
        return not self.full and not self.to_index and not self.removed and not self.new_meta and not self.touched


@dataclass
class ChunkResult:
    """What chunking found: the ``files`` rows of the files it read, and chunk counts."""

    files: dict[str, dict[str, Any]]  # indexed path -> FileRow fields
    chunks: int
    warnings: list[str]
    over_window: dict[str, int] = field(default_factory=dict)  # path -> chunks over the model's window


@dataclass
class MissResult:
    """The unique texts of a run with no cached vector (what Batch API jobs are planned from),
    chunks and transcript exchange vectors counted apart (a job's figures once mixed them)."""

    path: str  # parquet file of unique (hash, text, tokens, exchange) not in the cache
    misses: int  # chunks and exchange vectors
    hits: int  # chunks
    exchanges: int = 0  # of ``misses``: exchange vectors no chunk of the run has as its own
    exchange_hits: int = 0  # exchange vectors found in the cache
    # hashes flagged ``exchange`` in the file that a chunk has as its own too (counted as chunks)
    part_chunks: list[str] = field(default_factory=list)

    @property
    def chunk_misses(self) -> int:
        return self.misses - self.exchanges


@dataclass
class EmbedCounts:
    """Requests sent, chunks embedded and tokens sent by one part of a run (the stream's sync
    requests, or the batch jobs)."""

    requests: int = 0
    embedded: int = 0  # chunks
    tokens: int = 0
    # part vectors (transcript exchanges, note windows; "exchanges" predates windows): embedded, and
    # read from the cache; counted apart from the chunks (a summary said "198 total ... 237 embedded")
    exchanges: int = 0
    exchanges_cached: int = 0

    def add(self, texts: int, tokens: int, exchanges: int = 0) -> None:
        self.requests += 1
        self.embedded += texts - exchanges
        self.exchanges += exchanges
        self.tokens += tokens


@dataclass
class Fallback:
    """The primary provider kept failing during the run, which was rebuilt in full with the
    fallback (``"provider/model"`` each): vectors of two providers are never mixed."""

    primary: str
    to: str
    reason: str

    def to_dict(self) -> dict[str, object]:
        return {"from": self.primary, "to": self.to, "reason": self.reason}

    def full_reason(self) -> str:
        return f"provider fallback from {self.primary} to {self.to}"


@dataclass
class EmbedStats:
    """A run's embedding figures, as the summary reports them."""

    requests: int = 0
    embedded: int = 0
    tokens_sync: int = 0
    tokens_batch: int = 0
    # batch mode: jobs submitted / re-attached / collected / failed / pending, whether batch mode
    # was switched off and why (memory_core.index.batch_runner); None when batch mode is off
    batch: BatchFigures | None = None
    cost: Cost | None = None  # memory_core.embeddings.cost.estimate_cost; None for an on-machine provider
    fallback: Fallback | None = None

    @property
    def tokens(self) -> int:
        return self.tokens_sync + self.tokens_batch

    def warnings(self) -> list[str]:
        out = []
        fb = self.fallback
        if fb is not None:
            out.append(f"provider {fb.primary} kept failing ({fb.reason}); the index was rebuilt in full"
                       f" with the fallback {fb.to}")
        b = self.batch
        if b is not None and b.disabled:
            out.append(f"batch mode was switched off for this run: {b.disabled_reason}")
        if b is not None and b.jobs_pending and b.stopped:
            ids = ", ".join(str(i) for i in b.pending_job_ids if i)
            out.append(f"{b.jobs_pending} batch job(s) left open at the provider ({ids or 'not yet submitted'});"
                       " their requests are billed when they complete; the next run re-attaches to them and"
                       " collects their vectors instead of submitting them again")
        elif b is not None and b.jobs_pending:
            out.append(f"{b.jobs_pending} batch job(s) still running (batch.wait = false); the index was not"
                       " updated; run again to collect them")
        return out


@dataclass
class BuildResult:
    """A published index: its verified counts and how it went live."""

    counts: dict[str, int]
    dims: int | None
    vector_store: str | None
    chunks_over_window: int
    in_place: bool


@dataclass
class RunSummary:
    index_path: str
    provider: str
    model: str
    provider_reason: str
    full: bool
    full_reason: str
    swapped: bool
    # how the new index went live: "replaced" (a new file renamed over the old) or "in place"
    # (one transaction on the live file); "" when nothing was published
    published: str = ""
    files_scanned: int = 0
    files_new: int = 0
    files_changed: int = 0
    files_unchanged: int = 0
    files_removed: int = 0
    files_skipped: int = 0
    sessions_carried: int = 0
    # transcripts re-read (as changed) because the index recorded their days by an older reading
    # (indexmeta.MESSAGE_DAYS_VERSION); included in files_changed
    sessions_redated: int = 0
    files_touched: int = 0  # of the unchanged: same bytes, a new mtime, recorded (RunPlan.touched)
    chunks_total: int = 0
    chunks_indexed: int = 0
    chunks_embedded: int = 0
    chunks_from_cache: int = 0
    # part vectors (transcript exchanges, note windows), apart from the chunks; the JSON keys keep
    # the name they had before note windows
    exchanges_embedded: int = 0
    exchanges_from_cache: int = 0
    # chunks longer than the model's input window (embedded from their head), whole index
    chunks_over_window: int = 0
    embed_requests: int = 0
    tokens_sent: int = 0
    tokens_sync: int = 0
    tokens_batch: int = 0
    # batch mode: jobs submitted / re-attached / collected / failed / pending, whether batch mode
    # was switched off and why (see memory_core.index.batch_runner); None when batch mode is off
    batch: BatchFigures | None = None
    # estimated cost of the tokens sent and the saving against all-sync (memory_core.embeddings.cost)
    cost: Cost | None = None
    # set when the primary provider kept failing and the run was rebuilt with the fallback
    fallback: Fallback | None = None
    stage_seconds: dict[str, float] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    # where embedding requests ran ("this process, 4 threads", "Prefect tasks on threads (4)", ...)
    embedded_on: str = ""
    # set when the run did not run: another run held the index and if_busy = "skip"
    skipped: str = ""
    # set on the partial summary of a run that was cancelled or failed (what was cached is kept)
    error: str = ""
    # of a run that stopped: chunks in embedding requests still running when it did; their vectors
    # reach the cache if they return, after this summary (a cancelled run said 448 embedded, the
    # rerun found all 593 cached)
    chunks_in_flight: int = 0
    # an incremental run given the paths that changed (a watcher's events): it looked at those
    # paths only (``hinted_paths`` of them) and took every other indexed file as recorded;
    # ``hint_fallback``: why a run given paths scanned every source instead
    hinted: bool = False
    hinted_paths: int = 0
    hint_fallback: str = ""
    # a run stopped (Ctrl-C, SIGTERM, a cancelled flow run) after its new index was published:
    # what stopped it ("interrupted", "stopped by SIGTERM", "cancelled") and the steps after the
    # publish it cut short; the summary is whole (``swapped``), the stop still ends the run
    stopped: str = ""
    cut_short: list[str] = field(default_factory=list)
    # ``index --re-embed``: every chunk was embedded again, no cached vector read
    re_embedded: bool = False
    # ``backend = "qmd"``: the qmd step that failed and why ("qmd update failed (...)"); searches
    # answer from the builtin index until a run brings qmd up to date (the write tool reads it)
    qmd_failed: str = ""

    def discovery(self) -> str:
        """How the run found what changed: ``hinted: 3 paths looked at``, ``full scan (...)``."""
        if self.hinted:
            return f"hinted: {self.hinted_paths} path{'s' if self.hinted_paths != 1 else ''} looked at"
        return f"full scan ({self.hint_fallback})" if self.hint_fallback else "full scan"

    def to_dict(self) -> dict[str, object]:
        """The summary as JSON (``index --json``, the flow's result, watch and MCP): ``batch``,
        ``cost`` and ``fallback`` are ``{}`` when unset."""
        out = asdict(self)
        out["batch"] = self.batch.to_dict() if self.batch is not None else {}
        out["cost"] = self.cost.to_dict() if self.cost is not None else {}
        out["fallback"] = self.fallback.to_dict() if self.fallback is not None else {}
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunSummary:
        """A summary read back from its JSON (:meth:`to_dict`): a flow run's result."""
        d = {k: v for k, v in data.items() if k in {f.name for f in fields(cls)}}
        b, c, fb = d.get("batch") or {}, d.get("cost") or {}, d.get("fallback") or {}
        d["batch"] = ((BatchFigures(**b) if "jobs_submitted" in b else BatchFigures.sync_only(b.get("mode", "")))
                      if b else None)
        d["cost"] = Cost(**c) if c else None
        d["fallback"] = Fallback(primary=fb["from"], to=fb["to"], reason=fb["reason"]) if fb else None
        return cls(**d)

    @property
    def batch_pending(self) -> int:
        """Batch jobs still running (``batch.wait = false``)."""
        return self.batch.jobs_pending if self.batch is not None else 0

    def outcome(self) -> str:
        """What the run did to the index, in a few words (CLI summary, flow summary table)."""
        if self.error:
            return f"not updated: {self.error}"
        if self.skipped:
            return f"skipped: {self.skipped}"
        if self.swapped:
            done = "updated in place" if self.published == "in place" else "swapped in"
            return f"{done}, then {self.stopped}" if self.stopped else done
        pending = self.batch_pending
        if pending:
            return f"not updated: {pending} batch job(s) still running"
        if self.sessions_carried:  # a changed file, not indexed by rule: not "nothing to do"
            return (f"unchanged: {self.sessions_carried} transcript(s) grew below the session delta and keep"
                    " their indexed rows")
        return "unchanged, nothing to do"

    def stop_note(self) -> str:
        """What a run stopped after its publish did, in one line (the CLI's, the flow's log and
        notes): the live index is the new one, and what was cut short."""
        done = "updated in place" if self.published == "in place" else "swapped in"
        line = (f"{self.stopped or 'stopped'} after the new index was published ({done}): the live index holds this"
                f" run's update (files: {self.files_new} new, {self.files_changed} changed, {self.files_removed}"
                f" removed; {self.chunks_total} chunks in all)")
        return line + ("; cut short: " + "; ".join(self.cut_short) if self.cut_short else "")

    def unfinished_note(self) -> str:
        """What a run that did not finish had embedded (kept in the embedding cache) and the batch
        jobs it left open, as the end of the line that says it stopped (the CLI's, ``watch``'s);
        empty when it had done neither."""
        b = self.batch
        jobs = (f"; {b.jobs_pending} batch job(s) left open at the provider"
                f" ({', '.join(str(i) for i in b.pending_job_ids if i)}): the next run re-attaches to them"
                if b is not None and b.stopped and b.jobs_pending else "")
        if not (self.chunks_embedded or self.chunks_in_flight):
            return jobs
        late = f" ({self.chunks_in_flight} more were in requests that had not returned)" if self.chunks_in_flight else ""
        return (f"; the {self.chunks_embedded} chunk(s) it embedded{late} are in the embedding cache and will not be"
                " embedded again" + jobs)

    def cost_figure(self) -> float | str | None:
        """Estimated US dollars, 0.0 for the local model or keyword-only, else why there is none."""
        cost = self.cost
        if cost is None:
            from memory_core.embeddings.catalog import provider_on_machine

            # an em dash: a lone "-" renders as a list bullet in the summary table
            return 0.0 if provider_on_machine(self.provider) or not self.tokens_sent else "\u2014"
        if not cost.priced:
            return f"no price for {cost.provider}/{cost.model} (set batch.prices)"
        return cost.estimated_usd

    def headline(self) -> dict[str, object]:
        """The figures a person looks for first: the top of the CLI's summary and of the flow's
        summary artifact, and ``memory-core watch``'s line per run."""
        seconds = self.stage_seconds.get("total", sum(v for k, v in self.stage_seconds.items() if k != "total"))
        return {
            "outcome": self.outcome(),
            "files": f"{self.files_scanned} scanned, {self.files_new} new, {self.files_changed} changed,"
                     f" {self.files_removed} removed",
            "chunks": self.chunks_total,
            "embedded": self.chunks_embedded,
            "from cache": self.chunks_from_cache,
            "estimated cost (USD)": self.cost_figure(),
            "duration (s)": round(seconds, 2),
        }

    def lines(self) -> list[str]:
        s = self
        mode = f"full rebuild ({s.full_reason})" if s.full else "incremental"
        if s.re_embedded:
            mode += ", every chunk re-embedded (--re-embed: no cached vector read)"
        state = s.outcome() + ("; run again to collect them" if not s.swapped and s.batch_pending else "")
        out = [
            f"index: {s.index_path} ({mode}; {state})",
            f"provider: {s.provider} / {s.model} ({s.provider_reason})",
        ]
        if s.fallback is not None:
            out.append(f"fallback: {s.fallback.primary} -> {s.fallback.to} because {s.fallback.reason};"
                       " full rebuild with the fallback (vectors of two providers are never mixed)")
        if s.hinted or s.hint_fallback:
            out.append(f"discovery: {s.discovery()}")
        out += [
            f"files: {s.files_scanned} scanned, {s.files_new} new, {s.files_changed} changed,"
            f" {s.files_unchanged} unchanged, {s.files_removed} removed, {s.files_skipped} skipped"
            + (f", {s.sessions_carried} grown below the session delta" if s.sessions_carried else ""),
            f"chunks: {s.chunks_total} total, {s.chunks_indexed} from new/changed files,"
            f" {s.chunks_embedded} embedded, {s.chunks_from_cache} from cache",
        ]
        if s.sessions_carried:
            out.append(f"transcripts grown below the session delta: {s.sessions_carried}, their indexed rows kept"
                       " (new messages are indexed once a transcript grows by [sessions] delta_bytes or"
                       " delta_messages; `memory-core index` indexes them now)")
        if s.files_touched:
            out.append(f"files touched only (same bytes, a new mtime): {s.files_touched}, their mtime recorded"
                       " (nothing re-read or embedded)")
        if s.sessions_redated:
            out.append(f"transcripts re-read for their messages' days: {s.sessions_redated} (recorded by an older"
                       " reading of timestamps; once, from the cache)")
        if s.exchanges_embedded or s.exchanges_from_cache:
            out.append(f"part vectors (transcript exchanges, note windows): {s.exchanges_embedded} embedded,"
                       f" {s.exchanges_from_cache} from cache (beside the chunks: chunking.exchange_vectors,"
                       " chunking.note_windows)")
        if s.chunks_over_window:
            out.append(f"chunks over the model's input window: {s.chunks_over_window} (their vectors cover the head"
                       " only; a smaller chunking.tokens avoids it, see docs/search.md)")
        out.append(f"requests: {s.embed_requests}" + (" sync (the jobs: batch below)" if s.batch is not None and s.batch.jobs
                                                        else "") + f", tokens sent: {s.tokens_sent}")
        if s.chunks_in_flight:
            out.append(in_flight_note(s.chunks_in_flight))
        if s.batch is not None:
            out.append(_batch_line(s.batch))
        if s.cost is not None:
            from memory_core.embeddings.cost import cost_line

            out.append(cost_line(s.cost))
        out.append("seconds: " + ", ".join(f"{k} {v:.2f}" for k, v in s.stage_seconds.items()))
        if s.embedded_on:
            out.append(f"embedding ran on: {s.embedded_on}")
        return out


def in_flight_note(n: int) -> str:
    """What a stopped run says of the embedding requests still running when it stopped."""
    return (f"{n} more chunk(s) were in embedding requests that had not returned when the run stopped; if they"
            " return, the next run finds them cached")


def _batch_line(b: BatchFigures) -> str:
    if not b.jobs:
        return f"batch: {b.mode or 'off'}"
    sent = f" ({b.requests_submitted} requests, {b.tokens_submitted} tokens)" if b.requests_submitted else ""
    line = (f"batch: {b.mode}; jobs {b.jobs_submitted} submitted{sent}, {b.jobs_reattached} re-attached,"
            f" {b.jobs_collected} collected, {b.jobs_failed} failed, {b.jobs_timed_out} timed out,"
            f" {b.jobs_pending} pending; chunks {b.chunks_via_batch} via batch, {b.chunks_via_sync} via sync"
            + (f"; part vectors {b.exchanges_via_batch} via batch, {b.exchanges_via_sync} via sync"
               if b.exchanges_via_batch or b.exchanges_via_sync else "")
            + f" ({b.lines_failed} failed lines re-sent)")
    if b.surplus_via_batch:
        line += (f"; {b.surplus_via_batch} more vector(s) from re-attached jobs for chunks this run no longer"
                 " needs (cached, not counted as embedded)")
    if b.jobs_of_other_runs:
        line += (f"; {b.jobs_of_other_runs} job(s) of another live run on the shared cache file covered chunks"
                 f" this run needs: left to that run, {b.chunks_from_other_runs} chunk(s) taken from them")
    if b.disabled:
        line += f"; batch mode switched off: {b.disabled_reason}"
    if b.stopped and b.jobs_pending:
        line += f"; {b.jobs_pending} left open for the next run to re-attach to"
    return line



#: Embedding requests in flight at once, unless a run is told otherwise (``run_index(concurrency=)``,
#: the flows' ``embed_concurrency``): the one default, read by both executors and the flows.
EMBED_CONCURRENCY = 4


def embed_parallelism(provider: Any, concurrency: int) -> int:
    """Embedding requests one process runs at once: ``concurrency``, capped by the provider's
    ``max_parallel_requests`` (1 for the local model, whose own threads use every core)."""
    concurrency = max(1, concurrency)
    return min(concurrency, provider.max_parallel_requests or concurrency)


class JobOps(Protocol):  # the Batch API steps' executor (memory_core.index.batch_runner)
    """How job steps run: ``start`` returns a handle, ``wait_any`` the handles that finished."""

    def start(self, step: str, obj: Any, **kw: Any) -> object: ...
    def wait_any(self, handles: list[Any]) -> list[Any]: ...
    # Any: each Batch API step returns its own type
    def result(self, handle: Any) -> Any: ...
    def close(self) -> None: ...


class Executor(Protocol):
    """Runs the work the orchestrator (:func:`memory_core.index.pipeline.run_index`) decides.

    Two implementations: :class:`memory_core.index.pipeline.LocalExecutor` (this process, a thread
    pool) and ``flows.executor.PrefectExecutor`` (Prefect tasks on a thread pool or a Dask
    cluster, with artifacts). Speed, memory, crash and cancel behaviour belong to the
    orchestrator, so both have the same ones.
    """

    def bind(self, settings: Any) -> None:
        """The settings of the run (or of its fallback provider) about to start."""
        ...

    def describe(self, provider: Any) -> str:
        """Where embedding requests run, in a few words (the run summary's ``embedded_on``)."""
        ...

    def parallelism(self, provider: Any) -> int:
        """How many embedding requests may run at once (twice as many are kept in flight)."""
        ...

    def embed(self, provider: Any, cache: Any, hashes: list[str], texts: list[str],
              index: int) -> Future[Any]:
        """Start one embedding request group; the future's result is its vectors (float32,
        one row per text), committed to ``cache`` the moment they were received."""
        ...

    def stage(self, name: str, fn: Callable[..., T], *args: Any) -> T:
        """Run one stage of the run (``discover``, ``batch``, ``build``): a Prefect task, or a call."""
        ...

    def batch_ops(self, ctx: Any, progress: Callable[[str, int, int], None] | None) -> JobOps:
        """The :class:`JobOps` that runs Batch API job steps."""
        ...

    def hold(self) -> None:
        """The run is ending: a request not started yet is never sent (one the executor could not
        cancel, queued behind its own runner: it ends unsent). Requests already sent go on."""
        ...

    def abandon(self) -> None:
        """The run stopped and gave the requests already sent their grace: those still waiting on
        the provider (an attempt, or a backoff between attempts) end now
        (:class:`memory_core.embeddings.retry.Abandoned`), so the run ends without them."""
        ...

    def close(self) -> None: ...


