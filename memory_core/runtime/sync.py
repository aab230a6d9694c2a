"""Sync triggers: keep an agent's index fresh without a scheduler (the seeds' ``sync`` settings).

- **dirty**: :func:`dirty_state` compares the sources (discovery: path, size, mtime) with the
  index's ``files`` table: a new, changed or removed file makes the index dirty. A transcript
  that grew by less than ``sessions.delta_bytes`` does not (a reindex would carry it as it
  is). ``status`` reports it.
- ``on_search``: :meth:`SyncManager.before_search`, called before a search, starts a reindex
  when the index is dirty and waits for it at most ``search_wait_ms`` (default 1 s); then the
  search answers from the index as it is, and the :class:`Freshness` it returns says whether
  that index is stale (``stale``, ``stale_reason``, ``refreshing``, and a ``note``): an answer
  from an index known to be stale always says so, with ``on_search`` off too.
- ``on_session_start``: :meth:`SyncManager.on_session_start`, called on an MCP client's
  ``initialize`` (a :class:`memory_core.api.Memory`'s first call), starts one in the background.
- ``watch`` with ``watch_debounce_ms``: file changes start a reindex once quiet (the
  :class:`memory_core.runtime.watching.Watcher` scheduler, shared with ``memory-core watch``).
- ``interval_minutes``: a reindex every N minutes (:func:`memory_core.runtime.watching.start_interval`,
  also used by ``memory-core watch``).

``on_search``, ``on_session_start`` and ``watch`` are on by default, as the seeds'. They refresh
an index that exists, and build again one this process read that was deleted since (``rm -rf
.memory-core`` to start over with the MCP server running), with the settings it was read with; a
damaged one, or one never built, is left to ``memory-core index`` (a reader never starts a first
build with whatever provider ``auto`` picks).

This is library code, not an entry point: the MCP server (:mod:`memory_core.apps.mcp_server`) and
:class:`memory_core.api.Memory` run the triggers, and any long-lived program over the library could. The runs are
:class:`memory_core.index.indexer.Indexer` runs (one provider, created at the first run, a fresh retry
budget per run) and each is kept as a :class:`memory_core.index.indexer.RunRecord`.

Never two reindexes of one index at once: in this process, runs are serialised and requests
made while one runs coalesce into one follow-up run; across processes, the runs take the
index's writer lock (:class:`memory_core.storage.store.IndexLock`) without waiting, so a run that finds
another process writing is recorded as skipped and the index stays dirty for the next trigger.
With ``backend = "qmd"`` a run also runs ``qmd update`` (and ``qmd embed`` when the search mode
needs vectors).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from memory_core.config import Settings
from memory_core.errors import IndexLockedError, MemoryCoreError, RunError
from memory_core.runtime.watching import Watcher, start_interval
from memory_core.sources.freshness import DirtyState, dirty_state  # noqa: F401 (part of this module's API)

if TYPE_CHECKING:  # the indexer is imported when a SyncManager is made: a one-shot reader's freshness needs none
    from memory_core.index.indexer import DeploymentOutcome, Runner, RunRecord
    from memory_core.index.runtypes import RunSummary
    from memory_core.query.results import SearchAnswer

log = logging.getLogger("memory_core.runtime.sync")

DIRTY_CHECK_MIN_S = 1.0  # a burst of searches re-scans the sources at most once a second
WATCHED_MAX_AGE_S = 60.0  # a clean check made while watching stands this long unless an event forgets it


@dataclass(frozen=True, slots=True)
class Freshness:
    """Whether the index an answer was read from is known to be stale (its sources changed since
    it was built: :func:`memory_core.sources.freshness.dirty_state`).

    ``reason``: what changed (``1 new, 2 changed``); ``refreshing``: a reindex is running or
    queued in this process; ``waited_ms``: how long the search waited for it (``on_search``,
    at most ``sync.search_wait_ms``)."""

    stale: bool
    reason: str = ""
    refreshing: bool = False
    waited_ms: int = 0
    # transcripts that grew below the session delta (:attr:`DirtyState.below_delta`): the triggers'
    # runs keep their indexed rows, so their newest messages are in no answer. Not a reason to run
    # (a run would keep them again), but the index is older than its sources: the answer says so
    below_delta: tuple[str, ...] = ()

    @property
    def note(self) -> str:
        """One sentence for an answer's ``note`` ("" when fresh)."""
        grown = self._grown_note()
        if not self.stale:
            return grown
        what = f"the index is stale ({self.reason})" if self.reason else "the index is stale"
        if self.refreshing:
            said = f"{what}: a reindex is running; these results may miss the newest changes"
        else:
            said = (f"{what}: these results may miss the newest changes (`memory-core index` refreshes it; a"
                    " long-lived reader with [sync] on_search does so by itself)")
        return "; ".join(n for n in (said, grown) if n)

    def _grown_note(self) -> str:
        if not self.below_delta:
            return ""
        first = self.below_delta[0]
        more = f" and {len(self.below_delta) - 1} more" if len(self.below_delta) > 1 else ""
        return (f"the newest messages of {first}{more} are not indexed yet: it grew below the session delta"
                " (sessions.delta_bytes / delta_messages), which the automatic runs keep; `memory-core index`"
                " indexes them")

    @property
    def grown_reason(self) -> str:
        n = len(self.below_delta)
        return f"{n} transcript{'s' if n != 1 else ''} grew below the session delta" if n else ""

    def apply(self, answer: SearchAnswer) -> SearchAnswer:
        """``answer`` with ``stale`` and, when stale, ``stale_reason``, ``refreshing`` and the note
        added. Stale too when transcripts grew below the session delta: the index it was read from
        is older than its sources (an agent's session was searched for its own newest messages
        and the answer said ``stale: false``: the twenty-third session's audit)."""
        if not self.stale and not self.below_delta:
            return replace(answer, stale=False)
        reason = ", ".join(r for r in ((self.reason if self.stale else ""), self.grown_reason) if r)
        return replace(answer, stale=True, stale_reason=reason, refreshing=self.refreshing and self.stale,
                       note="; ".join(n for n in (self.note, answer.note) if n))  # first: it may explain the rest


def current_freshness(settings: Settings) -> Freshness:
    """The freshness of ``settings``' index as it stands (a one-shot reader: no reindex started)."""
    st = dirty_state(settings)
    return Freshness(st.dirty and _refreshable(st), st.reason, below_delta=tuple(st.below_delta))


def _can_watch() -> bool:
    import importlib.util

    return importlib.util.find_spec("watchfiles") is not None


def _refreshable(st: DirtyState) -> bool:
    """A dirty state a trigger acts on: an index exists and is readable (a missing or damaged one
    is ``memory-core index``'s to build; searching it fails with its own message)."""
    return st.dirty and st.reason != "no index yet" and not st.reason.startswith("index damaged")


CLOSE_WAIT_S = 30.0
"""How long closing a long-lived reader waits for its background reindex to finish before it stops it."""
CLOSE_STOP_WAIT_S = 20.0
"""How long it then waits for the stopped run to end (the grace of its requests: ``STOP_GRACE_S``, 10 s)."""


class SyncManager:
    """The sync triggers of one long-lived process (the MCP server) over one index."""

    def __init__(self, settings: Settings, *, runner: Runner | None = None) -> None:
        self.settings = settings
        # in this process, never waiting for another process's run: the index stays dirty for the next trigger
        from memory_core.index.indexer import Indexer

        self.runner: Runner = runner if runner is not None else Indexer(settings, wait_for_lock=False)
        self.runs: list[RunRecord] = []
        self._run_lock = threading.Lock()  # one run at a time in this process
        self._cond = threading.Condition()
        self._active = False  # a request thread is running or about to
        self._again: str | None = None  # reason of the follow-up run asked for meanwhile
        self._dirty: tuple[float, DirtyState, bool] | None = None  # checked at, state, sources watched then
        self._dirty_gen = 0  # bumped by every watch event and run: a check that spans one is not kept
        self._had_index = False  # a check found the index: one missing later was deleted (``_gone``)
        self._watcher: _SyncWatcher | None = None
        self._stop_interval: Callable[[], None] | None = None

    # -- triggers ----------------------------------------------------------------------------------
    def start(self) -> None:
        """Start the file watch and the interval timer, as the settings ask."""
        sync = self.settings.sync
        if sync.watch and self._watcher is None and not _can_watch():
            log.warning("sync.watch is on but the watchfiles package is not installed: file changes are seen at the"
                        " next search (on_search) instead")
        elif sync.watch and self._watcher is None:
            self._watcher = _SyncWatcher(self, self.settings, _WatchRuns(self), debounce=sync.watch_debounce_ms / 1000,
                                         initial_run=False)
            self._watcher.start()
        if sync.interval_minutes > 0 and self._stop_interval is None:
            self._stop_interval = start_interval(sync.interval_minutes, lambda: self.request("interval"))

    def on_search(self) -> bool:
        """Before a search: reindex in the background when the index is dirty (``on_search``);
        True if a run started. :meth:`before_search` also waits for it."""
        return self.settings.sync.on_search and self._request_if_dirty("search on a dirty index")

    def before_search(self) -> Freshness:
        """Before a search: with ``on_search``, a dirty index starts a reindex (or queues one
        after the run going) and this waits for it at most ``sync.search_wait_ms``; then the
        freshness of the index the search will read. The dirty check (a stat of the sources) is
        made at most once a second (``DIRTY_CHECK_MIN_S``)."""
        st = self.dirty()
        if not self._acts_on(st):
            return Freshness(False, below_delta=tuple(st.below_delta))
        if not self.settings.sync.on_search:
            return Freshness(True, self._reason(st), refreshing=self.busy, below_delta=tuple(st.below_delta))
        self.request(f"search on a dirty index ({self._what(st)})")
        t0 = time.monotonic()
        self.wait_idle(timeout=self.settings.sync.search_wait_ms / 1000)
        waited = int((time.monotonic() - t0) * 1000)
        st = self.dirty(max_age_s=0.0) if not self.busy else st
        return Freshness(self._acts_on(st), self._reason(st), refreshing=self.busy, waited_ms=waited,
                         below_delta=tuple(st.below_delta))

    def _gone(self, st: DirtyState) -> bool:
        """The index this process saw is gone (deleted under a reader that answers from the file
        it opened before). One never built is not "gone": a search of it fails with its own
        message, and a reader does not build an index it never had."""
        return st.reason == "no index yet" and self._had_index

    def _acts_on(self, st: DirtyState) -> bool:
        """A dirty state the triggers act on: a readable index whose sources changed, or one this
        process read that was deleted since (``rm -rf .memory-core`` to start again, with the MCP
        server running: the next trigger builds it again, as a first ``memory-core index`` would;
        its embeddings come from the cache, kept beside it)."""
        return _refreshable(st) or self._gone(st)

    def _what(self, st: DirtyState) -> str:
        """What a run this state starts is for, in its reason."""
        return "the index file was deleted" if self._gone(st) else st.reason

    def _reason(self, st: DirtyState) -> str:
        """What a stale answer's note says of this state."""
        if not self._gone(st):
            return st.reason
        what = "the index file is gone (deleted?); answers come from the copy opened before it was"
        if self.busy:
            return f"{what} until it is built again"
        if self.settings.sync.on_search:
            return f"{what}; the next search builds it again"
        return f"{what}; `memory-core index` builds it again"

    def freshness(self) -> Freshness:
        """The freshness of the index now, starting nothing."""
        st = self.dirty()
        if not self._acts_on(st):
            return Freshness(False, below_delta=tuple(st.below_delta))
        return Freshness(True, self._reason(st), refreshing=self.busy, below_delta=tuple(st.below_delta))

    def on_session_start(self) -> bool:
        """A client's ``initialize``: reindex in the background when dirty (``on_session_start``)."""
        return self.settings.sync.on_session_start and self._request_if_dirty("session start")

    def dirty(self, *, max_age_s: float | None = None) -> DirtyState:
        """The index's dirty state, re-checked when older than ``max_age_s``. By default: a
        state checked while the sources were watched stands until a watch event or a run
        forgets it (``WATCHED_MAX_AGE_S`` at most, a bound on lost events), so a search on a
        watched, unchanged workspace stats nothing; otherwise ``DIRTY_CHECK_MIN_S`` (a burst of
        searches stats the sources at most once a second)."""
        now = time.monotonic()
        with self._cond:
            cached, gen = self._dirty, self._dirty_gen
        if cached is not None:
            at, st, watched = cached
            limit = max_age_s if max_age_s is not None else (
                WATCHED_MAX_AGE_S if watched and self._watching() else DIRTY_CHECK_MIN_S)
            # a state stands only while the index is as it found it, there or not: the watcher sees the
            # sources, not the index folder, and a deleted index answered from its open file as fresh
            # (one stat)
            if now - at < limit and os.path.exists(self.settings.index_file) != (st.reason == "no index yet"):
                return st
        watched = self._watching()  # before the scan: an event during it forgets what it finds
        st = dirty_state(self.settings)
        if st.reason != "no index yet":
            self._had_index = True
        with self._cond:
            if self._dirty_gen == gen:  # nothing forgot it meanwhile
                self._dirty = (now, st, watched)
        return st

    def _watching(self) -> bool:
        w = self._watcher
        return w is not None and w.watching

    def forget_dirty(self) -> None:
        with self._cond:
            self._dirty = None
            self._dirty_gen += 1

    def _request_if_dirty(self, reason: str) -> bool:
        st = self.dirty()
        if not self._acts_on(st):
            return False
        return self.request(f"{reason} ({self._what(st)})")

    def request(self, reason: str) -> bool:
        """Start a background reindex, or queue one follow-up if one is running. True if started."""
        with self._cond:
            if self._active:
                self._again = reason
                return False
            self._active = True
        threading.Thread(target=self._loop, args=(reason,), name="memory-core-sync", daemon=True).start()
        return True

    def _loop(self, reason: str) -> None:
        current: str | None = reason
        while current is not None:
            self._run_serialised(current)
            with self._cond:
                current, self._again = self._again, None
                if current is None:
                    self._active = False
                    self._cond.notify_all()

    def _run_serialised(self, reason: str, changed: frozenset[str] | None = None) -> RunRecord:
        with self._run_lock:
            started, t0 = time.time(), time.perf_counter()
            from memory_core.index.indexer import RunRecord, run_hinted

            rec = RunRecord(len(self.runs) + 1, reason, started, 0.0, ok=True)
            try:
                rec.summary = run_hinted(self.runner, changed)
            except IndexLockedError as exc:
                rec.ok, rec.skipped, rec.error = False, True, str(exc)
            except MemoryCoreError as exc:
                rec.ok, rec.error = False, str(exc)
            except Exception as exc:  # a server must survive one bad run
                log.exception("background reindex failed")
                rec.ok, rec.error = False, f"{exc.__class__.__name__}: {exc}"
            rec.seconds = time.perf_counter() - t0
            with self._cond:
                self.runs.append(rec)
                self._dirty = None
                self._dirty_gen += 1
                self._cond.notify_all()
        if rec.ok:
            log.info("sync: reindexed (%s) in %.1fs", reason, rec.seconds)
        else:
            log.warning("sync: reindex (%s) %s: %s", reason, "skipped" if rec.skipped else "failed", rec.error)
        return rec

    def reindex_now(self, reason: str) -> RunRecord:
        """Reindex now, in this thread (after any run in progress here): ``memory_write`` uses it
        so the text it wrote is searchable when it answers."""
        with self._cond:
            before = len(self.runs)
        self._run_serialised(reason)
        with self._cond:
            return next(r for r in reversed(self.runs[before:]) if r.reason == reason)

    # -- state --------------------------------------------------------------------------------------
    def wait_idle(self, timeout: float = 60.0) -> bool:
        """True once no requested run is running or queued (watch runs aside)."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._active:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
        return True

    @property
    def running(self) -> bool:
        return self._run_lock.locked()

    @property
    def busy(self) -> bool:
        """A run is going, or asked for and about to."""
        with self._cond:
            return self._active or self._run_lock.locked()

    def status(self) -> dict[str, object]:
        """What ``memory_status`` adds: the triggers, whether a run is going, the last run."""
        s = self.settings.sync
        last = self.runs[-1] if self.runs else None
        return {
            "on_search": s.on_search, "on_session_start": s.on_session_start, "watch": s.watch,
            "watch_debounce_ms": s.watch_debounce_ms, "search_wait_ms": s.search_wait_ms,
            "interval_minutes": s.interval_minutes,
            "running": self.running, "runs": len(self.runs), "last_run": last.to_dict() if last else None,
            # why the file watch stopped (a path it cannot watch), else None: searches still sync
            "watch_error": self._watcher.watch_error if self._watcher is not None else None,
        }

    def close(self) -> None:
        """Stop the triggers; a run going is waited for (``CLOSE_WAIT_S``), then stopped: it ends
        at its next check with the live index as it was, its requests to the provider abandoned
        after their grace (a run waiting on a stalled provider held the server's exit for as long
        as the provider took: each attempt up to ``remote.timeout_s``, and its retries)."""
        if self._stop_interval is not None:
            self._stop_interval()
        if self._watcher is not None:
            self._watcher.stop()
        if not self.wait_idle(timeout=CLOSE_WAIT_S):
            stop = getattr(self.runner, "stop", None)
            if callable(stop) and stop():
                log.warning("sync: the reindex going did not finish within %gs; stopping it", CLOSE_WAIT_S)
                self.wait_idle(timeout=CLOSE_STOP_WAIT_S)
        close = getattr(self.runner, "close", None)
        if close is not None:
            close()


class _SyncWatcher(Watcher):
    """The file watch of a :class:`SyncManager`: every event also forgets the manager's last
    dirty check, so a search right after a change sees it (and says the index is stale)."""

    def __init__(self, manager: SyncManager, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self._manager = manager

    @property
    def watching(self) -> bool:
        """The watches are in place (not re-planning, not stopped)."""
        return self._watching.is_set() and not self._stop.is_set()

    def notify(self, paths: Iterable[str], *, reason: str | None = None, full_scan: str = "") -> None:
        super().notify(paths, reason=reason, full_scan=full_scan)
        self._manager.forget_dirty()


class _WatchRuns:
    """The file watch's runner (a :class:`memory_core.index.indexer.HintedRunner`): a run of the
    manager, serialised with the other triggers' runs, given the paths the watcher saw change. A
    run that failed or was skipped raises, so the watcher knows its changes are not in the index
    (it retries, and its next run scans everything)."""

    def __init__(self, manager: SyncManager) -> None:
        self.manager = manager

    def __call__(self) -> RunSummary | DeploymentOutcome | None:
        return self.run_changed(None)

    def run_changed(self, changed: frozenset[str] | None) -> RunSummary | DeploymentOutcome | None:
        if not self.manager.settings.index_file.exists():
            return None  # the triggers refresh an index that exists; the first build is `memory-core index`'s
        rec = self.manager._run_serialised("watch", changed)
        if not rec.ok:
            if rec.skipped:
                raise IndexLockedError(rec.error or "another run holds the index")
            raise RunError(rec.error or "the run failed")
        return rec.summary
