"""Running a reindex in this process, and the record of one finished run.

:class:`Indexer` is the one in-process indexer: ``memory-core index --engine local``, the
in-process runs of ``memory-core watch``, the sync triggers of the MCP server
(:class:`memory_core.runtime.sync.SyncManager`) and :meth:`memory_core.api.Memory.index` all run their
reindexes through it. It keeps one embedding provider for its lifetime (a local model is loaded
once), gives the provider a fresh retry budget before every run, and calls the orchestrator
(:func:`memory_core.index.pipeline.run_index`), which also updates qmd's collections when
``backend = "qmd"``. Runs of one :class:`Indexer` never overlap; runs of different ones (or
processes) are kept apart by the index's writer lock.

:class:`RunRecord` is one finished run as the schedulers keep it (the watcher, the sync
triggers): when, why, how long, and what it returned or why it failed.

Usage::

    with Indexer(settings) as indexer:
        summary = indexer.run()            # a RunSummary
        again = indexer.run(full=True)     # the same provider, a fresh retry budget
"""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeGuard

from memory_core.config import Settings
from memory_core.index.run_stops import Cancel

if TYPE_CHECKING:
    from collections.abc import Collection

    from memory_core.embeddings.base import EmbeddingProvider
    from memory_core.index.pipeline import IfBusy
    from memory_core.index.runtypes import ProgressFn, RunSummary

__all__ = ["DeploymentOutcome", "HintedRunner", "Indexer", "RunRecord", "Runner", "run_hinted"]


def asked_for(settings: Settings) -> Settings:
    """``settings`` for a run someone asked for: no session delta, so every transcript that grew
    is indexed now (its new messages searchable). The delta (``[sessions] delta_bytes`` /
    ``delta_messages``, the seeds' 100 KB / 50 messages) is for the runs a trigger starts on its
    own, which would otherwise re-chunk a transcript at every message."""
    if settings.sessions.delta_bytes == 0 and settings.sessions.delta_messages == 0:
        return settings
    return settings.model_copy(update={"sessions": settings.sessions.model_copy(
        update={"delta_bytes": 0, "delta_messages": 0})})


class Indexer:
    """Runs reindexes of ``settings``' index in this process, with one embedding provider.

    ``wait_for_lock``: what a run does when another run (another process) holds the index's
    writer lock: ``True`` waits up to ``lock.timeout_s``, ``False`` fails at once with
    :class:`memory_core.errors.IndexLockedError`; ``None`` (default) as ``lock.wait`` says.
    ``provider`` (with its ``reason``): use this provider instead of creating one; the caller
    keeps it and closes it. Otherwise the provider is created on first use (:attr:`provider`,
    or the first :meth:`run`) and closed by :meth:`close`.
    """

    def __init__(self, settings: Settings, *, wait_for_lock: bool | None = None,
                 provider: EmbeddingProvider | None = None, reason: str = "") -> None:
        self.settings = settings
        self.wait_for_lock = wait_for_lock
        self._provider = provider
        self._reason = reason
        self._owns_provider = provider is None
        self._run_lock = threading.Lock()  # one run at a time per indexer: they share the provider
        self._provider_lock = threading.Lock()
        self._cancel: Cancel | None = None  # the run going's stop (:meth:`stop`)

    @property
    def provider(self) -> EmbeddingProvider:
        """The embedding provider every run uses, created on first use (a bad provider
        configuration raises :class:`memory_core.errors.ConfigError` here)."""
        with self._provider_lock:
            if self._provider is None:
                from memory_core.embeddings.registry import create_provider

                self._provider, self._reason = create_provider(self.settings)
            return self._provider

    @property
    def reason(self) -> str:
        """Why this provider (``auto``'s choice, a fallback at start-up); "" when it was configured."""
        return self._reason

    @property
    def description(self) -> str:
        """One line for a start-up message: ``in-process runs, provider openai``."""
        return f"in-process runs, provider {self.provider.name}"

    def run(self, *, full: bool = False, progress: ProgressFn | None = None,
            only_paths: Collection[str] | None = None, appends: bool = False, re_embed: bool = False) -> RunSummary:
        """One reindex: incremental, or ``full`` (cached vectors are still reused), or ``re_embed``
        (a full rebuild that embeds every chunk again, reading no cached vector). ``progress``
        is called as files are chunked and vectors return. ``only_paths`` (incremental runs): the
        absolute paths that changed since the last complete run, all of them (a watcher's events);
        the run looks at those only and takes every other indexed file as recorded, or scans
        everything when a path cannot be judged alone (:func:`memory_core.index.stages.discover_stage`).
        ``appends``: a run someone asked for (``memory-core index``, :meth:`memory_core.api.Memory.index`)
        indexes every transcript that grew, however little (:func:`asked_for`); the triggers'
        runs (on search, on session start, a watcher, an interval) keep the session delta. Raises
        :class:`memory_core.errors.MemoryCoreError` subclasses when the run fails (the live
        index stays as it was; ``exc.run_summary`` says what was done and cached)."""
        from memory_core.index.pipeline import run_index
        from memory_core.index.stages import preflight

        if_busy: IfBusy | None = None if self.wait_for_lock is None else ("wait" if self.wait_for_lock else "fail")
        with self._run_lock:
            self._as_built_now()
            if self._provider is None:
                preflight(self.settings)  # a missing workspace is reported before any provider error
            provider = self.provider
            provider.start_run()  # a fresh retry budget per run (issue 17)
            self._cancel = Cancel()
            try:
                return run_index(asked_for(self.settings) if appends else self.settings, full=full, provider=provider,
                                 reason=self._reason, progress=progress, if_busy=if_busy, only_paths=only_paths,
                                 cancel=self._cancel, re_embed=re_embed)
            finally:
                self._cancel = None

    def stop(self, why: str = "stopped: the memory was closed while the run ran") -> bool:
        """Stop the run going, from another thread: it ends at its next check (between files, in
        its waits, before it publishes: :mod:`memory_core.index.run_stops`) with ``RunCancelled(why)``,
        the live index as it was; requests to the provider get the stop's grace, then are
        abandoned. True if a run was going."""
        cancel = self._cancel
        if cancel is None:
            return False
        cancel.set(why)
        return True

    def _as_built_now(self) -> None:
        """Before a run: take what these settings were not told from the live index as it is now
        (:func:`memory_core.storage.indexmeta.as_built`): a long-lived reader (the MCP server,
        ``watch``, the API's ``Memory``) read them once, and a later ``memory-core index --sessions``
        or a rebuild on another provider was undone by its next refresh. A provider this indexer
        made for the old settings is closed; the next one is made for the new (a provider handed in
        stays: the run itself then makes one for the index as built, see ``pipeline._as_built_now``)."""
        from memory_core.storage.indexmeta import PROVIDER_KEYS, as_built_now

        fresh, changed = as_built_now(self.settings)
        if not changed:
            return
        self.settings = fresh
        if any(k in PROVIDER_KEYS for k in changed) and self._owns_provider:
            with self._provider_lock:
                old, self._provider = self._provider, None
            if old is not None:
                with contextlib.suppress(Exception):
                    old.close()

    def __call__(self) -> RunSummary:
        """One incremental run: the :class:`Runner` the watcher and the sync triggers call."""
        return self.run()

    def run_changed(self, changed: frozenset[str] | None) -> RunSummary:
        """One incremental run given what changed (:class:`HintedRunner`): ``changed`` is every
        path that changed since the last complete run, or None (not known: scan everything)."""
        return self.run(only_paths=changed)

    def close(self) -> None:
        """Close the provider this indexer created (its clients, threads, worker processes); a run
        still going is not waited for (a server shutting down), the next run creates a new one."""
        with self._provider_lock:
            if not self._owns_provider:
                return  # a provider handed in stays the caller's
            provider, self._provider = self._provider, None
        if provider is not None:
            with contextlib.suppress(Exception):
                provider.close()

    def __enter__(self) -> Indexer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# -- one finished run ------------------------------------------------------------------------------

@dataclass(frozen=True)
class DeploymentOutcome:
    """What a run of a Prefect deployment returned (``memory-core watch --deployment``):
    ``note`` is set when it did not run because another run was on it."""

    deployment: str
    flow_run: str
    state: str
    flow_run_id: str | None = None  # set when it ran to completion
    note: str = ""

    def to_dict(self) -> dict[str, object]:
        out: dict[str, Any] = {"deployment": self.deployment, "flow_run": self.flow_run}
        if self.flow_run_id is not None:
            out["flow_run_id"] = self.flow_run_id
        out["state"] = self.state
        if self.note:
            out["note"] = self.note
        return out


class Runner(Protocol):
    """One incremental reindex run, for a scheduler (:class:`memory_core.runtime.watching.Watcher`,
    :class:`memory_core.runtime.sync.SyncManager`): :class:`Indexer` in this process, or a deployment
    run. Returns what the run did (None: nothing to report), raises on failure."""

    def __call__(self) -> RunSummary | DeploymentOutcome | None: ...


class HintedRunner(Runner, Protocol):
    """A :class:`Runner` that can also be told which paths changed: the watcher calls
    ``run_changed`` with every path that changed since the last complete run, or None when it
    does not know them all (the runner then scans everything). :class:`Indexer` is one; a
    runner without ``run_changed`` (a deployment run) is called as a plain :class:`Runner`."""

    def run_changed(self, changed: frozenset[str] | None) -> RunSummary | DeploymentOutcome | None: ...


def takes_hints(runner: Runner) -> TypeGuard[HintedRunner]:
    """``runner`` takes the paths that changed (a :class:`HintedRunner`, an in-process indexer); a
    plain :class:`Runner` (a deployment run) scans everything."""
    return callable(getattr(runner, "run_changed", None))


def run_hinted(runner: Runner, changed: frozenset[str] | None) -> RunSummary | DeploymentOutcome | None:
    """One run of ``runner``, given the paths that changed when it takes them (:func:`takes_hints`)."""
    return runner.run_changed(changed) if takes_hints(runner) else runner()


@dataclass
class RunRecord:
    """One finished run, as a scheduler keeps it: its number, why it ran (``reason``; the
    watcher also lists the ``changed`` paths), when and for how long, and either what it
    returned (``summary``) or why it failed (``error``; ``skipped`` when another run held the
    index's writer lock). A run a stop (Ctrl-C, SIGTERM) ended in ``watch`` says so (``stopped``:
    "interrupted", "stopped by SIGTERM"), with what it had done: its ``summary`` is the run's
    partial one, ``swapped`` when the stop came after the new index was published."""

    number: int
    reason: str
    started_at: float
    seconds: float
    ok: bool
    changed: list[str] = field(default_factory=list)
    skipped: bool = False
    error: str | None = None
    summary: RunSummary | DeploymentOutcome | None = None
    stopped: str | None = None

    def to_dict(self) -> dict[str, object]:
        """The record as JSON (``watch --json``, ``memory_status``'s ``sync.last_run``)."""
        return {"number": self.number, "reason": self.reason, "changed": list(self.changed),
                "started_at": self.started_at, "seconds": self.seconds, "ok": self.ok, "skipped": self.skipped,
                "summary": self.summary.to_dict() if self.summary is not None else None, "error": self.error,
                "stopped": self.stopped}

    def line(self) -> str:
        """One line for a log or a terminal: ``run 2 (1 change, 0.31s): swapped in; files ...``."""
        head = f"run {self.number} ({self.reason}, {self.seconds:.2f}s)"
        if self.stopped:
            part = None if isinstance(self.summary, DeploymentOutcome) else self.summary  # the run's partial summary
            if part is not None and part.swapped:  # the stop came after the publish
                return f"{head}: {part.stop_note()}"
            tail = part.unfinished_note() if part is not None else ""
            return f"{head}: {self.stopped}; {self.error or 'the live index was left as it was'}{tail}"
        if not self.ok:
            return f"{head}: failed: {self.error}"
        s = self.summary
        if s is None:
            return head
        if isinstance(s, DeploymentOutcome):
            return f"{head}: deployment run {s.flow_run} {s.state.lower()}"
        h = s.headline()  # the figures the CLI and the flow's summary artifact open with
        line = f"{head}: {h['outcome']}; files {h['files']}; {h['chunks']} chunks"
        if s.swapped:
            line += f", {h['embedded']} embedded, {h['from cache']} from cache"
        if s.sessions_carried:
            line += f"; {s.sessions_carried} transcripts below the delta"
        if s.hinted or s.hint_fallback:
            line += f"; {s.discovery()}"
        return line

    @property
    def warnings(self) -> list[str]:
        """The run's warnings (a run summary's; none for a deployment run or a failure)."""
        s = self.summary
        return [] if s is None or isinstance(s, DeploymentOutcome) else list(s.warnings)
