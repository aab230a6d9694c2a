"""Prefect tasks for provider Batch API jobs: one task per step of one job.

``batch-submit`` (record in the ledger, upload, create), ``batch-poll`` (poll with its own
deadline, a progress artifact per job updated as the provider reports progress),
``batch-collect`` (download output + error files, store vectors in the cache),
``batch-cancel`` and ``batch-recover`` (find a job whose submit was interrupted). Inputs are
small: the settings blob, the cache file's path, the run's work directory and a
``JobSpec``/``JobRecord`` (texts live in the job's JSONL file). Each task opens its own cache
connection, so the steps can run on any worker that sees the work directory and the cache.
``NO_CACHE`` everywhere and no automatic retries on submit: a retried create could start a
second paid job (``submit_job`` does its own safe retries).

Stopping: each task takes a ``stop_key``; :func:`stop_event` gives the coordinator's
``threading.Event`` of that key, and the steps' sleeps (between polls, between create retries)
wait on it and raise :class:`~memory_core.index.batch_runner.Stopped` once it is set, as the
in-process executor's do. A flow run cancelled (or failed) while its jobs were polled otherwise
waited for every poll task to reach its deadline (``batch.timeout_minutes``, 60 by default)
before it could end. A stopped poll returns the job as last seen (still open in the ledger, for
the next run); a stopped create leaves its row ``submitting`` (looked up by the next run). A step
in another process (a process pool or Dask task runner) has no such event: the coordinator also
writes a stop file in the run's work directory (:func:`request_stop`), which those sleeps look
for every ``STOP_POLL_S`` (the steps need that directory already: their job files are there).
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from prefect import Task, get_run_logger, task
from prefect.cache_policies import NO_CACHE

from memory_core.config import Settings
from memory_core.embeddings.batch_types import CollectResult, JobRecord, JobSpec
from memory_core.index import batch_jobs as J
from memory_core.index.batch_runner import Stopped
from memory_core.storage.cache import EmbeddingCache
from tasks.stages import _provider_for
from tasks.stops import forget_event, stop_event


def _logger() -> logging.Logger | logging.LoggerAdapter[logging.Logger]:
    try:
        return get_run_logger()
    except Exception:
        return logging.getLogger("memory_core.tasks")


def forget_stop(key: str, workdir: str | os.PathLike[str] | None = None) -> None:
    forget_event(key)
    if workdir is not None:
        with contextlib.suppress(OSError):
            stop_file(workdir, key).unlink()


STOP_POLL_S = 0.5  # how often a step's sleep looks for the stop file (steps in another process)


def stop_file(workdir: str | os.PathLike[str], key: str) -> Path:
    return Path(workdir) / f"stop-{key}"


def request_stop(key: str, workdir: str | os.PathLike[str]) -> None:
    """Stop the steps of run ``key``: those in this process at once (the event), those in other
    processes that see ``workdir`` within ``STOP_POLL_S`` (the file)."""
    stop_event(key).set()
    try:
        stop_file(workdir, key).touch()
    except OSError as exc:  # steps elsewhere then run to their deadline, as before
        _logger().warning("cannot write the batch steps' stop file in %s: %s", workdir, exc)


def _stop_sleep(key: str, workdir: str | os.PathLike[str]) -> Any:
    """A sleep that raises :class:`Stopped` once run ``key`` is stopped: its event (steps in this
    process: at once) or its stop file (steps in other processes: within ``STOP_POLL_S``)."""
    stop, flag = stop_event(key), stop_file(workdir, key)

    def sleep(seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while True:
            if stop.is_set() or flag.exists():
                raise Stopped()
            left = deadline - time.monotonic()
            if left <= 0:
                return
            if stop.wait(min(left, STOP_POLL_S)):
                raise Stopped()

    return sleep


@contextlib.contextmanager
def _context(settings_blob: str, cache_path: str, workdir: str, stop_key: str = "") -> Iterator[J.BatchContext]:
    settings = Settings.model_validate_json(settings_blob)
    provider, _ = _provider_for(settings_blob)
    cache = EmbeddingCache(Path(cache_path), provider.name, provider.model, provider.provider_key)
    try:
        ctx = J.open_context(settings, provider, cache, workdir)
        if stop_key:
            ctx.sleep = _stop_sleep(stop_key, workdir)
        yield ctx
    finally:
        cache.close()


def artifact_key(local_id: str) -> str:
    """Artifact keys are lowercase letters, digits and dashes."""
    return "batch-" + "".join(c if c.isalnum() else "-" for c in local_id.lower())


@task(name="batch-submit", task_run_name="batch-submit-{job_name}", cache_policy=NO_CACHE, retries=0)
def batch_submit_task(settings_blob: str, cache_path: str, workdir: str, spec: JobSpec, job_name: str,
                      stop_key: str = "") -> JobRecord:
    with _context(settings_blob, cache_path, workdir, stop_key) as ctx:
        rec = J.submit_job(ctx, spec)
    _logger().info("submitted %s: %d requests, ~%d tokens", rec.job_id, spec.requests, spec.tokens)
    return rec


@task(name="batch-poll", task_run_name="batch-poll-{job_name}", cache_policy=NO_CACHE, retries=1,
      retry_delay_seconds=5)
def batch_poll_task(settings_blob: str, cache_path: str, workdir: str, record: JobRecord, job_name: str,
                    timeout_s: float | None = None, max_polls: int | None = None, stop_key: str = "") -> JobRecord:
    """Poll one job until it is terminal or the deadline passes; a progress artifact shows how far
    the provider got (request counts where it reports them, else the state)."""
    from prefect.artifacts import create_progress_artifact, update_progress_artifact

    log = _logger()
    state: dict[str, Any] = {"id": None, "last": None}

    def pct(rec: JobRecord) -> float:
        if rec.terminal:
            return 100.0
        if rec.progress:
            return round(100.0 * rec.progress, 1)
        return 5.0 if rec.status == "running" else 0.0

    def on_progress(rec: JobRecord) -> None:
        value = pct(rec)
        desc = f"{rec.label}: {rec.provider_status or rec.status}"
        try:
            if state["id"] is None:
                state["id"] = create_progress_artifact(progress=value, key=artifact_key(rec.local_id), description=desc)
            elif value != state["last"]:
                update_progress_artifact(state["id"], progress=value, description=desc)
            state["last"] = value
        except Exception as exc:  # the UI is a nicety; never fail a poll for it
            log.debug("progress artifact: %s", exc)

    with _context(settings_blob, cache_path, workdir, stop_key) as ctx:
        try:
            rec = J.poll_job(ctx, record, timeout_s=timeout_s, max_polls=max_polls, on_progress=on_progress)
        except Stopped:  # the run is stopping: the job as last seen, open for the next run (no retry)
            log.info("%s: polling stopped with the run", record.label)
            return record
    log.info("%s: %s (%s)", rec.label, rec.status, rec.provider_status)
    return rec


@task(name="batch-collect", task_run_name="batch-collect-{job_name}", cache_policy=NO_CACHE)
def batch_collect_task(settings_blob: str, cache_path: str, workdir: str, record: JobRecord,
                       job_name: str, stop_key: str = "") -> CollectResult:
    with _context(settings_blob, cache_path, workdir, stop_key) as ctx:
        res = J.collect_job(ctx, record)
    _logger().info("%s: %s", record.label, res.summary())
    return res


@task(name="batch-cancel", task_run_name="batch-cancel-{job_name}", cache_policy=NO_CACHE)
def batch_cancel_task(settings_blob: str, cache_path: str, workdir: str, record: JobRecord,
                      job_name: str, stop_key: str = "", discard: str = "") -> JobRecord:
    with _context(settings_blob, cache_path, workdir, stop_key) as ctx:
        return J.cancel_job(ctx, record, discard=discard)


@task(name="batch-recover", task_run_name="batch-recover-{job_name}", cache_policy=NO_CACHE)
def batch_recover_task(settings_blob: str, cache_path: str, workdir: str, record: JobRecord,
                       job_name: str, stop_key: str = "") -> JobRecord | None:
    with _context(settings_blob, cache_path, workdir, stop_key) as ctx:
        return J.recover_job(ctx, record)


STEP_TASKS: dict[str, Task[..., Any]] = {
    "submit": batch_submit_task, "poll": batch_poll_task, "collect": batch_collect_task,
    "cancel": batch_cancel_task, "recover": batch_recover_task,
}
