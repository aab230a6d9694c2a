"""The steps of one batch job, as functions of small arguments: plan, submit, poll, collect, cancel.

Each step takes a :class:`BatchContext` (settings, provider, Batch API client, cache, ledger,
work directory) and a :class:`~memory_core.embeddings.batch_types.JobSpec` or
:class:`~memory_core.embeddings.batch_types.JobRecord`, so a Prefect task can wrap exactly one step of one
job, and the in-process runner can call them from a thread pool.

- :func:`plan_jobs` streams the run's misses (Parquet) into JSONL job files split at the
  provider's limits (requests, bytes, optional tokens); custom id = chunk hash.
- :func:`submit_job` records the job in the ledger, uploads, creates; a retried create first
  looks for the job it may already have created.
- :func:`poll_job` polls with its own deadline (a blocking task cannot be interrupted).
- :func:`collect_job` downloads the output and error files (a failed download raises with the
  job left open), matches lines by custom id,
  validates vectors and commits them to the cache in slices as they are read; it returns the
  chunks that still have no vector (error lines, missing lines, malformed or bad vectors).
- :func:`cancel_job` cancels and waits briefly for the final state so partial output (paid
  for) can still be collected.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import numpy as np
import pyarrow.parquet as pq

from memory_core.config import Settings
from memory_core.embeddings import batch_types as st
from memory_core.embeddings.base import (
    SAME_VECTOR_MIN_TEXTS,
    EmbeddingProvider,
    same_vector_message,
    unit_rows,
)
from memory_core.embeddings.batch_clients import OutputTooLarge, client_for, parse_jsonl
from memory_core.embeddings.batch_types import BatchClient, CollectResult, JobLimits, JobRecord, JobSpec
from memory_core.embeddings.retry import Abandoned, Retryable, RetryBudget
from memory_core.errors import ProviderError
from memory_core.failpoints import failpoint
from memory_core.index import batch_ledger as lg
from memory_core.index.batch_ledger import BatchLedger
from memory_core.storage.cache import EmbeddingCache

log = logging.getLogger("memory_core.batch")

STORE_SLICE = 2000  # vectors committed to the cache per transaction while reading an output file
CANCEL_WAIT_S = 30.0


class LookupUnknown(ProviderError):
    """Looking a job up at the provider failed (after retries): whether it exists is unknown.
    Its ledger row is left open as it is (a later run looks again); never closed, abandoned or
    created a second time on this answer."""


@dataclass
class BatchContext:
    """Everything a job step needs; cheap to build in each Prefect task."""

    settings: Settings
    provider: EmbeddingProvider
    client: BatchClient
    cache: EmbeddingCache
    ledger: BatchLedger
    workdir: Path
    sleep: Callable[[float], None] = field(default=time.sleep)

    @property
    def limits(self) -> JobLimits:
        base = self.provider.batch_limits
        if base is None:  # a provider with supports_batch states its limits; no job may be planned without them
            raise ProviderError(f"{self.provider.name} states no Batch API job limits")
        b = self.settings.batch
        return JobLimits(
            max_requests=min(base.max_requests, b.max_requests_per_job or base.max_requests),
            max_bytes=min(base.max_bytes, b.max_bytes_per_job or base.max_bytes),
            max_tokens=b.max_tokens_per_job or base.max_tokens,
        )

    @property
    def normalise(self) -> bool:
        return not self.provider.batch_vectors_unit_length


def open_context(settings: Settings, provider: EmbeddingProvider, cache: EmbeddingCache,
                 workdir: str | os.PathLike[str], *, client: BatchClient | None = None) -> BatchContext:
    wd = Path(workdir) / "batch"
    wd.mkdir(parents=True, exist_ok=True)
    ledger = BatchLedger.for_cache(cache, index_path=str(settings.index_file))
    return BatchContext(settings, provider, client or client_for(provider), cache, ledger, wd)


def new_local_id() -> str:
    return "mc-" + uuid.uuid4().hex[:20]


# -- plan ------------------------------------------------------------------------------------

def _private(path: Path, mode: str) -> IO[Any]:
    """A new work file only its owner can read (0600; never through a symlink): it holds note text."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    return os.fdopen(fd, mode)


@dataclass
class _OpenJob:
    """A job file being filled: its request lines (``fh``) and its chunk hashes (``hfh``)."""

    id: str
    path: Path
    hpath: Path
    fh: IO[Any]
    hfh: IO[Any]
    n: int = 0
    tokens: int = 0
    bytes: int = 0


def plan_jobs(ctx: BatchContext, misses_path: str, *, include: set[str] | None = None,
              exclude: set[str] | frozenset[str] = frozenset()) -> list[JobSpec]:
    """Write JSONL job files for the misses (optionally only ``include``, never ``exclude``).

    Jobs are filled greedily in file order up to the provider's limits.
    """
    limits = ctx.limits
    specs: list[JobSpec] = []
    cur: _OpenJob | None = None

    def open_job() -> _OpenJob:
        lid = new_local_id()
        path = ctx.workdir / f"{lid}.jsonl"
        hpath = ctx.workdir / f"{lid}.hashes"
        return _OpenJob(lid, path, hpath, _private(path, "wb"), _private(hpath, "w"))

    def close_job(job: _OpenJob) -> None:
        job.fh.close()
        job.hfh.close()
        specs.append(JobSpec(job.id, ctx.provider.name, str(job.path), str(job.hpath), job.n, job.tokens,
                             job.bytes))

    try:
        pf = pq.ParquetFile(misses_path)
        for batch in pf.iter_batches(batch_size=4096, columns=["hash", "text", "tokens"]):
            hs = batch.column("hash").to_pylist()
            texts = batch.column("text").to_pylist()
            toks = batch.column("tokens").to_pylist()
            for h, text, t in zip(hs, texts, toks, strict=True):
                if h in exclude or (include is not None and h not in include):
                    continue
                line = (json.dumps(ctx.client.request_line(h, text), ensure_ascii=False,
                                   separators=(",", ":")) + "\n").encode()
                if cur is not None and cur.n and (
                    cur.n + 1 > limits.max_requests or cur.bytes + len(line) > limits.max_bytes
                    or (limits.max_tokens is not None and cur.tokens + t > limits.max_tokens)
                ):
                    close_job(cur)
                    cur = None
                if cur is None:
                    cur = open_job()
                cur.fh.write(line)
                cur.hfh.write(f"{h}\t{int(t)}\n")
                cur.n += 1
                cur.tokens += int(t)
                cur.bytes += len(line)
        if cur is not None:
            close_job(cur)
            cur = None
    finally:
        if cur is not None:
            cur.fh.close()
            cur.hfh.close()
    return specs


# -- submit ----------------------------------------------------------------------------------

def submit_job(ctx: BatchContext, spec: JobSpec) -> JobRecord:
    """Record, upload and create one job. Raises ProviderError (the job is then abandoned)."""
    chunks = spec.hash_tokens()
    ctx.ledger.record_submission(spec.local_id, chunks, requests=spec.requests, tokens=spec.tokens,
                                 owner=spec.owner, owner_info=spec.owner_info)
    rec = JobRecord(spec.local_id, ctx.provider.name, None, requests=spec.requests, tokens=spec.tokens)
    try:
        rec.input_file_id = ctx.client.upload(spec.path, spec.local_id)
        ctx.ledger.set_input_file(spec.local_id, rec.input_file_id)
        remote = _create_once(ctx, spec.local_id, rec.input_file_id)
    except LookupUnknown:
        raise  # the job may exist at the provider: its row stays open for a later run to find
    except ProviderError as exc:
        ctx.ledger.close(spec.local_id, lg.ABANDONED, str(exc))
        if rec.input_file_id:
            _delete_quietly(ctx, rec.input_file_id)
        raise
    rec.job_id = remote.job_id
    ctx.ledger.set_submitted(spec.local_id, remote.job_id, remote.provider_status)
    rec.update(remote)
    log.info("%s: submitted %s (%d requests, ~%d tokens)", ctx.provider.name, remote.job_id, spec.requests,
             spec.tokens)
    return rec


def _create_once(ctx: BatchContext, local_id: str, input_file_id: str) -> st.RemoteJob:
    """``create`` with retries that never start a second job: before each retry, and after the
    last failure, look for a job carrying our local id. When that lookup fails, raises
    :class:`LookupUnknown` rather than risk creating (and paying for) a second job."""
    remote_settings = ctx.settings.remote
    attempts = remote_settings.max_attempts
    delay = remote_settings.backoff_initial_s
    # the run's retry budget, shared with every other call (a Retry-After: 3600 slept 300 s an
    # attempt, whatever the budget: audit I, M2); a wait the server asks for that does not fit it
    # ends the retries at once, as for a sync call
    budget = getattr(ctx.provider, "retry_budget", None) or RetryBudget(remote_settings.retry_budget_s)
    last: Exception | None = None
    why = f"gave up after {attempts} attempts"
    for attempt in range(1, attempts + 1):
        if attempt > 1:
            found = _lookup(ctx, local_id, input_file_id)
            if found is not None:
                return found
        try:
            return ctx.client.create(input_file_id, local_id)
        except Exception as exc:
            err = ctx.client.classify(exc)
            if not isinstance(err, Retryable):
                raise err from None
            last = err
            if attempt >= attempts:
                break
            wait = min(remote_settings.backoff_max_s, delay)
            required = err.retry_after is not None and err.retry_after > wait
            if required:
                wait = float(err.retry_after)  # type: ignore[arg-type]
            granted = budget.take(wait, required=required)
            if granted is None:
                asked = f"the provider asked to wait {wait:g} s; " if required else ""
                why = f"gave up after {attempt} attempts: {asked}the retry budget is spent; {budget.describe()}"
                break
            log.warning("%s batch create: %s; retry %d/%d in %.1fs", ctx.provider.name, err, attempt,
                        attempts - 1, granted)
            ctx.sleep(granted)
            delay = min(remote_settings.backoff_max_s, delay * 2)
    found = _lookup(ctx, local_id, input_file_id)  # (a create that failed may still have made the job)
    if found is not None:
        return found
    raise ProviderError(f"{ctx.provider.name} batch create: {last} ({why})")


def _lookup(ctx: BatchContext, local_id: str, input_file_id: str | None) -> st.RemoteJob | None:
    """The provider's job for ``local_id`` (found), None (the provider's list has no such job), or
    :class:`LookupUnknown` raised (the list could not be read, after the client's retries)."""
    try:
        return ctx.client.find(local_id, input_file_id)
    except Exception as exc:
        err = ctx.client.classify(exc) if not isinstance(exc, ProviderError) else exc
        log.warning("%s batch: cannot list jobs to look for %s: %s", ctx.provider.name, local_id, err)
        raise LookupUnknown(f"{ctx.provider.name} batch: cannot tell whether job {local_id} exists at the"
                            f" provider (listing its jobs failed: {err})") from None


def recover_job(ctx: BatchContext, rec: JobRecord) -> JobRecord | None:
    """A ledger job whose create never returned (run killed mid-submit): find it at the
    provider by its local id, or close it as abandoned (its chunks are then submitted again).
    Raises :class:`LookupUnknown` (the row stays open) when the provider's list cannot be read."""
    found = _lookup(ctx, rec.local_id, rec.input_file_id)
    if found is None:
        ctx.ledger.close(rec.local_id, lg.ABANDONED, "not found at the provider after an interrupted submit")
        if rec.input_file_id:
            _delete_quietly(ctx, rec.input_file_id)
        return None
    rec.job_id = found.job_id
    ctx.ledger.set_submitted(rec.local_id, found.job_id, found.provider_status)
    rec.update(found)
    return rec


# -- poll ------------------------------------------------------------------------------------

def poll_job(ctx: BatchContext, rec: JobRecord, *, timeout_s: float | None = None, max_polls: int | None = None,
             on_progress: Callable[[JobRecord], None] | None = None) -> JobRecord:
    """Poll until the job is terminal, ``timeout_s`` passes (status ``timeout``) or
    ``max_polls`` polls were made (status as last seen). Transient errors are polled through."""
    if rec.job_id is None:
        raise ProviderError(f"{rec.label}: no provider job id to poll")
    interval = ctx.settings.batch.poll_interval_s
    timeout = ctx.settings.batch.timeout_minutes * 60 if timeout_s is None else timeout_s
    deadline = time.monotonic() + timeout
    polls = 0
    while True:
        failpoint("batch-poll")
        try:
            remote = ctx.client.get(rec.job_id)  # (within remote.timeout_s: a dripping answer is cut off)
        except Abandoned:
            raise  # the run stopped: the job stays open in the ledger as last seen
        except Exception as exc:
            err = ctx.client.classify(exc)
            if isinstance(err, Retryable):
                log.warning("%s: poll failed (%s); polling on", rec.label, err)
            elif "404" in str(err) or "not found" in str(err).lower():
                rec.status, rec.error = st.MISSING, str(err)
                ctx.ledger.set_status(rec)
                return rec
            else:
                raise err from None
        else:
            before = (rec.status, rec.provider_status)
            rec.update(remote)
            if (rec.status, rec.provider_status) != before or rec.terminal:
                ctx.ledger.set_status(rec)
            if on_progress is not None:
                on_progress(rec)
            if rec.terminal:
                return rec
        polls += 1
        if max_polls is not None and polls >= max_polls:
            return rec
        if time.monotonic() + interval > deadline:
            rec.status = st.TIMEOUT
            rec.timeouts += 1
            rec.error = f"still {rec.provider_status or 'running'} after {timeout:.1f}s"
            return rec
        ctx.sleep(interval)


# -- collect ---------------------------------------------------------------------------------

def _vector(ctx: BatchContext, value: Any, dims: int | None) -> np.ndarray | None:
    try:
        arr = np.asarray(value, dtype=np.float32)
    except (TypeError, ValueError):
        return None
    if arr.ndim != 1 or arr.size == 0 or (dims is not None and arr.size != dims) or not np.isfinite(arr).all():
        return None
    norm = float(np.linalg.norm(arr))
    if norm == 0.0:
        return None
    if ctx.normalise:
        arr = unit_rows(arr[None, :])[0]
    return np.ascontiguousarray(arr, dtype="<f4")


def collect_job(ctx: BatchContext, rec: JobRecord) -> CollectResult:
    """Read a terminal job's output and error files into the cache and close it in the ledger.

    Returns the job's chunks that still have no vector, with counts of what went wrong.
    """
    chunks = ctx.ledger.chunks(rec.local_id)
    tokens_of = dict(chunks)
    res = CollectResult(rec.local_id, rec.job_id, rec.status)
    problems = {"error": 0, "http_error": 0, "malformed": 0, "bad_vector": 0, "unknown": 0, "duplicate": 0,
                "conflicting": 0, "missing": 0, "same_vector": 0}
    stored: dict[str, bytes] = {}  # chunk hash -> digest of the vector stored for it
    conflicts: set[str] = set()  # returned twice with different vectors: neither is trusted
    unusable: set[str] = set()  # answered with a vector that cannot be used (billed all the same)
    dims = ctx.provider.dims
    pending: list[tuple[str, bytes]] = []
    # While every vector read is the first one, nothing is stored: a job whose lines (chunk
    # hashes, so different texts) all got one vector is refused whole (check_not_one_vector).
    first: tuple[bytes, bytes] | None = None  # (digest, vector) of the first vector read
    one_vector = True

    def flush() -> None:
        if pending and not one_vector:
            ctx.cache.put_many(list(pending), dims=len(pending[0][1]) // 4)
            pending.clear()

    # Every file is downloaded before anything is read or closed: a download that fails (after
    # retries) raises out of here with the job still open in the ledger and its files kept at the
    # provider (the output was paid for); a later run re-attaches and reads it.
    files: list[bytes] = []
    for file_id in (rec.output_file_id, rec.error_file_id):
        if not file_id:
            continue
        try:
            files.append(ctx.client.download(file_id))
        except OutputTooLarge as exc:
            return _refused(ctx, rec, res, chunks, exc)
        except ProviderError as exc:
            raise ProviderError(f"cannot download {file_id}: {exc}; the job stays open for a later run") from None
    for data in files:
        for obj in parse_jsonl(data):
            if obj is None:
                problems["malformed"] += 1
                continue
            try:
                line = ctx.client.parse_line(obj)
            except (ValueError, TypeError, AttributeError, RecursionError):  # a shape no client expects
                problems["malformed"] += 1
                continue
            cid = line.custom_id
            if cid is None or cid not in tokens_of:
                problems["unknown" if line.kind == "ok" else line.kind] += 1
                continue
            if cid in stored or cid in conflicts:
                problems["duplicate"] += 1
                if line.kind == "ok" and cid in stored:
                    again = _vector(ctx, line.vector, dims)
                    if again is None or hashlib.sha256(again.tobytes()).digest() != stored[cid]:
                        conflicts.add(cid)  # two answers for one input: re-embedded by a sync call
                        del stored[cid]
                continue
            if line.kind != "ok":
                problems[line.kind] += 1
                if len(res.examples) < 5:
                    res.examples.append(f"{cid[:12]}: {line.message}")
                continue
            vec = _vector(ctx, line.vector, dims)
            if vec is None:
                problems["bad_vector"] += 1
                unusable.add(cid)
                if len(res.examples) < 5:
                    res.examples.append(f"{cid[:12]}: bad vector")
                continue
            if dims is None:
                dims = int(vec.size)
            raw = vec.tobytes()
            digest = hashlib.sha256(raw).digest()
            if first is None:
                first = (digest, raw)
            elif one_vector and digest == first[0]:
                raw = first[1]  # one copy of the one vector while they are all the same
            else:
                one_vector = False
            stored[cid] = digest
            pending.append((cid, raw))
            if len(pending) >= STORE_SLICE:
                flush()
    if one_vector and len(stored) >= SAME_VECTOR_MIN_TEXTS:
        # one vector for every line: a gateway or cache answering one vector, never the model
        pending.clear()
        problems["same_vector"] = len(stored)
        unusable.update(stored)
        res.examples.insert(0, same_vector_message(rec.label, len(stored)))
        stored.clear()
    one_vector = False
    flush()
    if conflicts:
        ctx.cache.delete_many(sorted(conflicts))
        problems["conflicting"] = len(conflicts)
        if len(res.examples) < 5:
            res.examples.append(f"{len(conflicts)} inputs returned twice with different vectors")
    res.stored = len(stored)
    res.stored_hashes = list(stored)
    res.tokens = sum(tokens_of[h] for h in stored)
    res.lines = len(chunks)
    res.tokens_unusable = sum(tokens_of[h] for h in (unusable | conflicts) if h not in stored)
    left = [h for h, _ in chunks if h not in stored]
    if left:
        have = ctx.cache.has_many(left, ctx.provider.dims)  # e.g. embedded meanwhile by another job or run
        left = [h for h in left if h not in have]
    returned_bad = sum(problems[k] for k in ("error", "http_error", "bad_vector", "conflicting"))
    # never returned (malformed lines cannot be attributed to a chunk: they are in ``malformed``)
    problems["missing"] = (max(0, len(left) - returned_bad - problems["malformed"])
                           if rec.status == st.COMPLETED else 0)
    res.failed_hashes = left
    res.problems = {k: v for k, v in problems.items() if v}
    state = {st.COMPLETED: lg.COLLECTED, st.CANCELLED: lg.CANCELLED}.get(rec.status, lg.FAILED)
    ctx.ledger.close(rec.local_id, state, rec.error or res.summary())
    if ctx.settings.batch.delete_files:
        for fid in (rec.input_file_id, rec.output_file_id, rec.error_file_id):
            if fid:
                _delete_quietly(ctx, fid)
    log.info("%s: collected (%s): %s", rec.label, rec.status, res.summary())
    return res


def _refused(ctx: BatchContext, rec: JobRecord, res: CollectResult, chunks: list[tuple[str, int]],
             exc: OutputTooLarge) -> CollectResult:
    """A job whose output file is too large to read (it will be at every run: left open, it was
    downloaded again, and refused again, by every later run, its chunks paid twice each time):
    closed as failed, its chunks left to sync calls, its tokens counted as billed (a completed job
    is paid for, read or not)."""
    hashes = [h for h, _ in chunks]
    have = ctx.cache.has_many(hashes, ctx.provider.dims) if hashes else set()
    res.failed_hashes = [h for h in hashes if h not in have]
    res.lines = len(chunks)
    res.tokens_unusable = sum(t for _, t in chunks) if rec.status == st.COMPLETED else 0
    res.problems = {"too_large": len(chunks)}
    why = (f"{exc}; job closed (its output cannot be read, now or by a later run); its"
           f" {len(res.failed_hashes)} chunk(s) go through sync calls")
    res.examples = [why]
    ctx.ledger.close(rec.local_id, lg.FAILED, why)
    log.info("%s: %s", rec.label, why)  # (the run says it, as a failure of the job)
    return res


def _delete_quietly(ctx: BatchContext, file_id: str) -> None:
    with contextlib.suppress(Exception):
        ctx.client.delete_file(file_id)


# -- cancel ----------------------------------------------------------------------------------

def cancel_job(ctx: BatchContext, rec: JobRecord, *, wait_s: float = CANCEL_WAIT_S, discard: str = "") -> JobRecord:
    """Ask the provider to cancel, then poll briefly for the final state (partial output of
    a cancelled job was paid for and is worth collecting). The job stays open in the ledger
    until it is collected.

    ``discard`` (why its output is not wanted: ``index --re-embed`` replaces the vectors it holds):
    once the provider has taken the cancel, the job is closed in the ledger as cancelled, its output
    never read, without waiting for the final state. A cancel the provider refuses is looked at
    with one poll: a job over already (or being cancelled) is closed the same way; otherwise
    :class:`ProviderError` is raised and its row stays open."""
    if rec.job_id is None:
        ctx.ledger.close(rec.local_id, lg.ABANDONED, "cancelled before it was created")
        rec.status = st.CANCELLED
        return rec
    try:
        ctx.client.cancel(rec.job_id)
    except Exception as exc:  # e.g. 409/400: already terminal
        if discard and isinstance(exc, Abandoned):
            raise  # the run stopped: the row stays open
        err = ctx.client.classify(exc)
        log.info("%s: cancel: %s", rec.label, err)
        if discard:
            rec = poll_job(ctx, rec, max_polls=1)
            if not (rec.terminal or "cancel" in (rec.provider_status or "").lower()):
                raise ProviderError(f"{rec.label}: cancel failed ({err}); still {rec.provider_status or rec.status}"
                                    " at the provider, left open in the ledger") from None
    if discard:
        return _discarded(ctx, rec, discard)
    polls = max(1, int(wait_s / max(ctx.settings.batch.poll_interval_s, 0.01)))
    rec = poll_job(ctx, rec, timeout_s=wait_s, max_polls=polls)
    if not rec.terminal:
        # The provider has not finished cancelling: leave the job open in the ledger; a later
        # run re-attaches and collects (or cancels) it.
        log.warning("%s: still %s after cancel; left in the ledger", rec.label, rec.provider_status)
    return rec


def _discarded(ctx: BatchContext, rec: JobRecord, why: str) -> JobRecord:
    """Close a cancelled job whose output is not wanted, that output unread; the job's files at the
    provider are deleted (``batch.delete_files``) once it is over (a job still cancelling keeps its
    input until the provider is done with it)."""
    was = f" (it was {rec.provider_status or rec.status} already)" if rec.terminal else ""
    ctx.ledger.close(rec.local_id, lg.CANCELLED, f"{why}{was}")
    if rec.terminal and ctx.settings.batch.delete_files:
        for fid in (rec.input_file_id, rec.output_file_id, rec.error_file_id):
            if fid:
                _delete_quietly(ctx, fid)
    if not rec.terminal:
        rec.status = st.CANCELLED
    log.info("%s: cancelled and closed, its output not read: %s", rec.label, why)
    return rec
