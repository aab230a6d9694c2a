"""What a reindex run shows in the Prefect UI: artifacts and events.

- a progress artifact (``<flow>-<index>-progress``), updated while embedding requests complete
  and while batch jobs are polled;
- a summary table artifact per run (``<flow>-<index>-summary``): first the figures a person looks
  for (``RunSummary.headline``: outcome, files, chunks, embedded, from cache, cost, duration), then
  requests, batch jobs, tokens, seconds per stage, index size;
- a markdown artifact per run (``<flow>-<index>-notes``) with the warnings and errors worth a look;
- events users can build Automations on: ``memory-core.index.swapped`` when a new index is
  swapped in, ``memory-core.fallback.batch-to-sync`` and ``memory-core.fallback.provider`` when a
  run falls back. The resource is always the index (``memory-core.index.<absolute path>``).

Everything here is best effort: a UI hiccup (API unreachable) is logged and never fails a run.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from memory_core.config import Settings
from memory_core.embeddings.batch_types import BatchFigures
from memory_core.index.runtypes import Progress, RunSummary

log = logging.getLogger("flows.report")

EVENT_SWAPPED = "memory-core.index.swapped"
EVENT_FALLBACK_BATCH = "memory-core.fallback.batch-to-sync"
EVENT_FALLBACK_PROVIDER = "memory-core.fallback.provider"

# -- names -------------------------------------------------------------------------------------

def index_label(settings: Settings) -> str:
    """A short name for the index: the file's stem, or the workspace's folder name for the
    default ``<workspace>/.memory-core/index.sqlite``; an agent's index is named by the agent."""
    if settings.agent:
        return settings.agent
    f = settings.index_file
    if f.stem == "index" and f.parent.name == ".memory-core":
        return settings.workspace_dir.name or "workspace"
    return f.stem


def slug(text: str) -> str:
    """Lowercase letters, digits and dashes (what artifact keys accept)."""
    s = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    return s or "index"


def artifact_key(flow_name: str, settings: Settings, what: str) -> str:
    return f"{slug(flow_name)}-{slug(index_label(settings))}-{what}"


def index_resource(settings: Settings) -> dict[str, str]:
    """The index as a Prefect event resource."""
    return {
        "prefect.resource.id": f"memory-core.index.{settings.index_file}",
        "prefect.resource.name": index_label(settings),
        "memory-core.index.path": str(settings.index_file),
        "memory-core.workspace": str(settings.workspace_dir),
    }


# -- progress --------------------------------------------------------------------------------

class ProgressReporter:
    """A ``ProgressFn`` that keeps one progress artifact up to date with the run's
    :class:`~memory_core.index.runtypes.Progress`: percent done, chunks/s, ETA, cost so far.

    Created lazily on the first call; updates at most every ``min_interval`` seconds (and
    always at 100 %), so a run with hundreds of request groups does not flood the API.
    Thread-safe: batch pollers may call it from task threads.
    """

    def __init__(self, key: str, *, min_interval: float = 1.0, also: Any = None) -> None:
        self.key = key
        self.also = also  # another ProgressFn (the CLI's bar, for an in-process flow run)
        self.min_interval = min_interval
        self.artifact_id: Any = None
        self.last = 0.0
        self.last_desc = ""
        self.last_pct = 0.0
        self.updates = 0
        self._lock = threading.Lock()
        self._broken = False

    def end(self, how: str) -> None:
        """A run that failed or was cancelled: the artifact says so, instead of staying at its
        last ETA for ever."""
        with self._lock:
            if self.artifact_id is None or self._broken:
                return
            desc = f"{how}: {self.last_desc.split(', ETA ')[0]}" if self.last_desc else how
            try:
                from prefect.artifacts import update_progress_artifact

                update_progress_artifact(self.artifact_id, self.last_pct, description=desc)
                self.last_desc = desc
            except Exception as exc:  # the UI must never fail a run
                log.warning("cannot update the progress artifact: %s", exc)

    def __call__(self, p: Progress) -> None:
        if self.also is not None:
            with contextlib.suppress(Exception):
                self.also(p)
        pct = round(100.0 * p.fraction, 1)
        desc = p.line()
        with self._lock:
            now = time.monotonic()
            if self._broken or (pct < 100.0 and now - self.last < self.min_interval) or desc == self.last_desc:
                return
            self.last, self.last_desc, self.last_pct = now, desc, pct
            try:
                from prefect.artifacts import create_progress_artifact, update_progress_artifact

                if self.artifact_id is None:
                    self.artifact_id = create_progress_artifact(progress=pct, key=self.key, description=desc)
                else:
                    update_progress_artifact(self.artifact_id, pct, description=desc)
                self.updates += 1
            except Exception as exc:  # the UI must never fail a run
                self._broken = True
                log.warning("cannot update the progress artifact: %s", exc)


# a figure that does not apply: an em dash (a lone "-" in a table cell renders as a list bullet)
NONE = "\u2014"


# -- summary ---------------------------------------------------------------------------------

def run_figures(summary: RunSummary, settings: Settings) -> dict[str, Any]:
    """Every figure the summary artifact shows, as a flat dict (also handy for tests): the
    headline first (``RunSummary.headline``, as the CLI and watch show it), then the details."""
    try:
        size = os.path.getsize(summary.index_path)
    except OSError:
        size = 0
    b = summary.batch if summary.batch is not None and summary.batch.jobs else None  # None: no job ran
    mode = summary.batch.mode if summary.batch is not None else ""
    cost = summary.cost
    fallback = summary.fallback
    return {
        **summary.headline(),
        "index": summary.index_path,
        "mode": (f"full rebuild ({summary.full_reason})" + (", every chunk re-embedded" if summary.re_embedded else "")
                 if summary.full else "incremental"),
        "swapped": summary.swapped,
        "provider": f"{summary.provider} / {summary.model}",
        "provider reason": summary.provider_reason,
        "provider fallback": f"{fallback.primary} -> {fallback.to}: {fallback.reason}" if fallback else NONE,
        "embedding ran on": summary.embedded_on or NONE,
        # what this run did: batch.enabled with a provider without a Batch API (the local model),
        # or a run that ended before any job, used no batch mode
        "batch mode": mode or ("off (not used by this run)" if settings.batch.enabled else "off"),
        "files scanned": summary.files_scanned,
        "files new": summary.files_new,
        "files changed": summary.files_changed,
        "files unchanged": summary.files_unchanged,
        "of which touched only (new mtime recorded)": summary.files_touched,
        "files removed": summary.files_removed,
        "files skipped": summary.files_skipped,
        "sessions carried (below delta)": summary.sessions_carried,
        # an index built before the day reading it records: transcripts re-read once for their days
        "transcripts re-read for their messages' days": summary.sessions_redated,
        "chunks in index": summary.chunks_total,
        "chunks from new/changed files": summary.chunks_indexed,
        "chunks embedded": summary.chunks_embedded,
        "chunks from cache": summary.chunks_from_cache,
        "part vectors (transcript exchanges, note windows) embedded / from cache": (
            f"{summary.exchanges_embedded} / {summary.exchanges_from_cache}"
            if summary.exchanges_embedded or summary.exchanges_from_cache else NONE),
        "embedding requests (sync)": summary.embed_requests,
        "batch jobs submitted": b.jobs_submitted if b else 0,
        "batch requests submitted": b.requests_submitted if b else 0,
        "batch jobs re-attached": b.jobs_reattached if b else 0,
        # a run stopped with jobs open at the provider: the next run re-attaches to them
        "batch jobs left open": (f"{b.jobs_pending} ({', '.join(str(i) for i in b.pending_job_ids if i)});"
                                 " the next run re-attaches to them") if b and b.stopped and b.jobs_pending else NONE,
        "batch job states": batch_states(b),
        "chunks via batch / via sync": f"{b.chunks_via_batch} / {b.chunks_via_sync}" if b else NONE,
        "part vectors via batch / via sync": (f"{b.exchanges_via_batch} / {b.exchanges_via_sync}"
                                              if b and (b.exchanges_via_batch or b.exchanges_via_sync) else NONE),
        "batch mode switched off": (b.disabled_reason or "yes") if b and b.disabled else NONE,
        "tokens sent (sync)": summary.tokens_sync,
        "tokens sent (batch)": summary.tokens_batch,
        "saving vs all-sync (USD)": cost.saving_usd if cost is not None and cost.priced else NONE,
        **{f"seconds: {k}": round(v, 2) for k, v in summary.stage_seconds.items()},
        "error": summary.error or NONE,
        "index size (bytes)": size,
        "index size (MiB)": round(size / 2**20, 2),
    }


def batch_states(b: BatchFigures | None) -> str:
    """``3 collected, 1 failed`` from the summary's batch figures; ``—`` in sync mode."""
    if b is None or not b.jobs:
        return NONE
    parts = [(b.jobs_collected, "collected"), (b.jobs_failed, "failed"),
             (b.jobs_timed_out, "timed out"), (b.jobs_pending, "pending")]
    return ", ".join(f"{n} {what}" for n, what in parts if n) or "none"


def summary_rows(figures: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"figure": k, "value": v if isinstance(v, int | float) and not isinstance(v, bool) else str(v)}
            for k, v in figures.items()]


def notes_markdown(title: str, *, warnings: Iterable[str], error: str | None = None,
                   fallbacks: Iterable[str] = (), extra: Iterable[str] = (), partial: RunSummary | None = None,
                   stopped: bool = False, index_exists: bool | None = True) -> str:
    """The run's notes artifact. ``error``: what failed, or (``stopped``) what stopped it
    ("cancelled in Prefect", "stopped by SIGTERM", "interrupted"). ``index_exists``: whether the
    run's index file is there (False: a first run, a workspace that does not exist: no index was
    written, and none was "left as it was"; None: unknown, the settings did not resolve)."""
    warnings = list(dict.fromkeys(warnings))
    fallbacks = list(fallbacks)
    extra = list(extra)
    lines = [f"# {title}", ""]
    if error:
        what = f"was {_md(error)}" if stopped or error == "cancelled" else f"failed: {_md(error)}"
        kept = ("The live index was left as it was; the next run starts again from the sources" if index_exists else
                "No index was written: there is no index yet; the next run that succeeds builds it from the sources"
                if index_exists is False else
                "No index was written or changed; the next run that succeeds starts from the sources")
        lines += ["## Error", "", f"**The run {what}**", "",
                  f"{kept} and reuses every vector already in the embedding cache.", ""]
        if partial is not None:
            lines += ["## What it had done", "",
                      f"- chunks read from the files: {partial.chunks_indexed}",
                      f"- chunks embedded and cached: {partial.chunks_embedded}"
                      + (f" ({partial.embed_requests} sync request(s))" if partial.embed_requests else "")
                      + "; they will not be embedded again",
                      "- chunks not embedded yet: embedded by the next run"]
            if partial.chunks_in_flight:
                from memory_core.index.runtypes import in_flight_note

                lines.append(f"- {in_flight_note(partial.chunks_in_flight)}")
            b = partial.batch
            if b is not None and b.jobs and (b.jobs_submitted or b.jobs_reattached):
                lines.append(f"- batch jobs: {b.jobs_submitted} submitted ({b.requests_submitted} requests,"
                             f" {b.tokens_submitted} tokens), {b.jobs_reattached} re-attached,"
                             f" {b.jobs_collected} collected ({b.chunks_via_batch} chunks"
                             + (f", {b.exchanges_via_batch} part vectors" if b.exchanges_via_batch
                                else "") + ")")
                if b.stopped and b.jobs_pending:
                    ids = ", ".join(str(i) for i in b.pending_job_ids if i)
                    lines.append(f"- **{b.jobs_pending} batch job(s) left open at the provider** ({ids}): billed"
                                 " when they complete; the next run re-attaches to them and collects their vectors"
                                 " instead of submitting them again")
            if partial.cost is not None and partial.cost.priced:
                lines.append(f"- estimated cost of what it sent: ${partial.cost.estimated_usd:.4f}")
            lines.append("")
    if fallbacks:
        lines += ["## Fallbacks", ""] + [f"- {_md(f)}" for f in fallbacks] + [""]
    if warnings:
        lines += [f"## Warnings ({len(warnings)})", ""] + [f"- {_md(w)}" for w in warnings[:200]]
        if len(warnings) > 200:
            lines.append(f"- ... and {len(warnings) - 200} more (see the run's logs)")
        lines.append("")
    if extra:
        lines += ["## Notes", ""] + [f"- {_md(e)}" for e in extra] + [""]
    if not (error or fallbacks or warnings or extra):
        lines += ["Nothing worth a look: no errors, warnings or fallbacks.", ""]
    return "\n".join(lines)


def _md(text: str) -> str:
    return str(text).replace("\n", " ").replace("|", "\\|")


def publish_summary(key: str, figures: dict[str, Any], description: str) -> None:
    try:
        from prefect.artifacts import create_table_artifact

        create_table_artifact(summary_rows(figures), key=key, description=description)
    except Exception as exc:
        log.warning("cannot create the summary artifact: %s", exc)


def publish_notes(key: str, markdown: str, description: str) -> None:
    try:
        from prefect.artifacts import create_markdown_artifact

        create_markdown_artifact(markdown, key=key, description=description)
    except Exception as exc:
        log.warning("cannot create the notes artifact: %s", exc)


# -- events ----------------------------------------------------------------------------------

def emit(event: str, settings: Settings, payload: dict[str, Any]) -> None:
    try:
        from prefect.events import emit_event

        emit_event(event=event, resource=index_resource(settings), payload=payload)
    except Exception as exc:
        log.warning("cannot emit %s: %s", event, exc)


def rename_run(flow_name: str, label: str, summary: RunSummary) -> None:
    """Rename the flow run after what it did: ``-full`` when it rebuilt in full, ``-batch``
    only when Batch API jobs were used (its name was chosen before either was known)."""
    mode = "full" if summary.full else "incremental"
    b = summary.batch
    batch = b is not None and bool(b.jobs_submitted or b.jobs_reattached)
    name = f"{flow_name}-{slug(label)}-{mode}" + ("-batch" if batch else "")
    try:
        from prefect.client.orchestration import get_client
        from prefect.runtime import flow_run

        if flow_run.id and flow_run.name != name and not (mode == "incremental" and flow_run.name.endswith("-sessions")):
            with get_client(sync_client=True) as client:
                client.update_flow_run(flow_run.id, name=name)
    except Exception as exc:
        log.warning("cannot rename the flow run: %s", exc)


def emit_swapped(settings: Settings, summary: RunSummary) -> None:
    from memory_core.storage.store import probe_index

    counts = ((probe_index(Path(summary.index_path))[0] or {}).get("counts") or {})
    try:
        size = Path(summary.index_path).stat().st_size
    except OSError:
        size = 0
    emit(EVENT_SWAPPED, settings, {
        "index_path": summary.index_path,
        "full": summary.full,
        "full_reason": summary.full_reason,
        "published": summary.published,
        "provider": summary.provider,
        "model": summary.model,
        "files": counts.get("files", 0),
        "chunks": counts.get("chunks", 0),
        "vectors": counts.get("vectors", 0),
        "files_new": summary.files_new,
        "files_changed": summary.files_changed,
        "files_removed": summary.files_removed,
        "chunks_embedded": summary.chunks_embedded,
        "chunks_from_cache": summary.chunks_from_cache,
        "tokens_sent": summary.tokens_sent,
        "index_bytes": size,
    })


def emit_fallback(settings: Settings, kind: str, reason: str, **payload: Any) -> str:
    """Emit a fallback event (kind ``batch-to-sync`` or ``provider``); returns a line for the notes."""
    event = EVENT_FALLBACK_BATCH if kind == "batch-to-sync" else EVENT_FALLBACK_PROVIDER
    emit(event, settings, {"kind": kind, "reason": reason, **payload})
    return f"{kind}: {reason}"
