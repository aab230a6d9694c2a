"""Watching the sources of an index, and the scheduler that turns their changes into runs.

The library part of keeping an index fresh, shared by ``memory-core watch``
(:mod:`memory_core.apps.watch`) and the sync triggers of the MCP server (:mod:`memory_core.runtime.sync`):

- **watchers** (``watchfiles``, one thread per recursive/non-recursive group) report file
  events that can change the index: ``MEMORY.md``/``memory.md``, ``*.md`` under ``memory/``
  and the extra paths, ``*.jsonl`` directly in the sessions directory (when sessions are a
  source), and the creation or removal of those directories. Everything else (the index's
  own files, editor droppings that are not ``.md``) is filtered out before it wakes anyone.
  Directories that appear or disappear later are picked up: the set of watched roots is
  recomputed every few seconds and on events that touch a root.
- **the scheduler** (:class:`Watcher`) debounces: a run starts once the sources have been
  quiet for ``debounce`` seconds (default 1.5), or at the latest ``max_wait`` seconds after
  the first unprocessed change, so a file that is written continuously still gets indexed.
  At most one run is in flight; changes that arrive during a run are coalesced into exactly
  one follow-up run. A failed run is retried with backoff (10 s doubling to 5 min) even if
  nothing changes, because its changes are not in the index yet.
- **hinted runs**: the scheduler keeps every path its events named since the last complete
  run and hands them to a runner that takes them (``run_changed``, :class:`memory_core.index.indexer.HintedRunner`,
  e.g. :class:`~memory_core.index.indexer.Indexer`): the run looks at those paths only instead
  of walking and stat-ing every source. It gives None instead (the run scans everything) for
  the first run since the watches were in place, the run after a failed, skipped or unfinished
  one, a run asked for by the interval timer or by re-planned watches, when an event named a
  folder (made or moved in: one event for many files) or a source root (a folder removed or
  moved away is gone: the run checks whether indexed files were under it; a gone path that
  starts no run, e.g. ``memory/old.v2`` moved away, is still handed to the next run), when more than
  ``MAX_HINTED_PATHS`` paths changed, and when the last full scan is older than
  ``full_scan_every_s`` (default 30 min). Lost events cannot be seen: ``watchfiles`` drops the
  kernel's queue-overflow notice (an inotify ``IN_Q_OVERFLOW`` arrives as an event without a
  path, which it ignores), so a burst past ``fs.inotify.max_queued_events`` can go unnoticed
  until the next full scan; that periodic full scan bounds how long.
- **the interval timer** (:func:`start_interval`): a call every N minutes (``sync.interval_minutes``).

What a run does is the runner's (:class:`memory_core.index.indexer.Runner`): an
:class:`memory_core.index.indexer.Indexer` in this process, or a deployment run
(:class:`memory_core.apps.watch.DeploymentRunner`). Each finished run is a
:class:`memory_core.index.indexer.RunRecord`.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memory_core.config import Settings
from memory_core.errors import IndexLockedError, MemoryCoreError, UsageError

if TYPE_CHECKING:  # the indexer is imported by a run: a one-shot reader's sync (its freshness) needs none
    from memory_core.index.indexer import DeploymentOutcome, Runner, RunRecord
    from memory_core.index.runtypes import RunSummary

log = logging.getLogger("memory_core.apps.watch")

DEFAULT_DEBOUNCE_S = 1.5
MAX_DEBOUNCE_S = 3600.0  # the longest debounce (sync.watch_debounce_ms: at most 3,600,000): a wait past it is no watch
ROOT_CHECK_S = 2.0
RETRY_INITIAL_S = 10.0
WATCHFILES_GROUP_MS = 200  # watchfiles yields a group of events after 200 ms at most...
WATCHFILES_STEP_MS = 30  # ...or 30 ms without new events; the scheduler does the real debouncing
WATCHFILES_TIMEOUT_MS = 500  # idle wake-up: bounds how soon a new watch reports it is in place
RETRY_MAX_S = 300.0
WATCH_RETRY_INITIAL_S = 1.0  # a file watcher that failed is set up again after this, doubling...
WATCH_RETRY_MAX_S = 60.0  # ...up to this, while it keeps failing
MAX_REPORTED_PATHS = 100
MAX_HINTED_PATHS = 2000  # more changed paths than this: the run scans everything
FULL_SCAN_EVERY_S = 1800.0  # a full scan at least this often: bounds what lost events can hide

# -- what to watch -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class WatchPlan:
    """Existing directories to watch, and the rules that say which events matter."""

    recursive: frozenset[str]
    flat: frozenset[str]


class SourceFilter:
    """Which paths are (or contain) index sources, from the same rules as discovery."""

    def __init__(self, settings: Settings) -> None:
        ws = str(settings.workspace_dir)
        self.ws = ws
        self.root_files = {os.path.join(ws, "MEMORY.md"), os.path.join(ws, "memory.md")}
        self.md_dirs = [os.path.join(ws, "memory")] if "memory" in settings.sources else []
        self.md_files: set[str] = set()
        if "memory" in settings.sources:
            for raw in settings.extra_paths:
                p = os.path.expanduser(raw)
                p = os.path.abspath(p if os.path.isabs(p) else os.path.join(ws, p))
                if p.lower().endswith(".md") and not os.path.isdir(p):
                    self.md_files.add(p)
                else:
                    self.md_dirs.append(p)
        else:
            self.root_files = set()
        self.sessions_dir = str(settings.sessions_dir) if "sessions" in settings.sources else None
        # [sessions] recursive: the sessions folder is watched, and judged, as memory/ is
        self.sessions_recursive = self.sessions_dir is not None and settings.sessions.recursive
        # the index's own files, wherever the index lives: its runs must never trigger runs
        index = str(settings.index_file)
        self.own_prefixes = (index, str(settings.cache_file),
                             os.path.join(os.path.dirname(index), f".{os.path.basename(index)}.tmp-"),
                             os.path.join(os.path.dirname(index), ".memory-core-work"))

    @staticmethod
    def _under(path: str, root: str) -> bool:
        return path == root or path.startswith(root.rstrip(os.sep) + os.sep)

    def relevant(self, path: str) -> bool:
        p = os.path.abspath(path)
        if p.startswith(self.own_prefixes):
            return False
        if p in self.root_files or p in self.md_files:
            return True
        for d in self.md_dirs:
            if self._under(p, d):
                if p == d or p.lower().endswith(".md") or os.path.isdir(p):
                    return True
                # a removed or renamed directory no longer exists: no suffix is our best hint
                return not os.path.exists(p) and not os.path.splitext(os.path.basename(p))[1]
        sd = self.sessions_dir
        if sd is not None:
            if p == sd:
                return True
            if self.sessions_recursive and self._under(p, sd):
                if p.endswith(".jsonl") or os.path.isdir(p):
                    return True
                return not os.path.exists(p) and not os.path.splitext(os.path.basename(p))[1]
            if os.path.dirname(p) == sd and p.endswith(".jsonl"):
                return True
        return False

    def maybe_folder(self, path: str) -> bool:
        """A path under a source folder that is gone: a file that was no source, or a folder
        (with a dot in its name) that held sources. It starts no run, but the next run is given
        it: a run given the paths checks whether indexed files were under it."""
        p = os.path.abspath(path)
        dirs = [*self.md_dirs, self.sessions_dir] if self.sessions_recursive and self.sessions_dir else self.md_dirs
        return (not p.startswith(self.own_prefixes) and any(self._under(p, d) for d in dirs)
                and not os.path.lexists(p))

    def roots(self) -> tuple[object, ...]:
        """What this filter watches for: two filters with the same roots see the same events."""
        return (frozenset(self.root_files), tuple(self.md_dirs), frozenset(self.md_files), self.sessions_dir,
                self.sessions_recursive)

    def plan(self) -> WatchPlan:
        """The directories to watch now: source dirs recursively, their parents and the
        workspace flat (to see top-level files and source dirs appear or disappear)."""
        recursive: set[str] = set()
        flat: set[str] = {self.ws}

        def existing_dir(p: str) -> bool:
            return os.path.isdir(p) and not os.path.islink(p)

        for d in self.md_dirs:
            if existing_dir(d):
                recursive.add(d)
            parent = os.path.dirname(d)
            if existing_dir(parent):
                flat.add(parent)
        for f in self.md_files:
            parent = os.path.dirname(f)
            if existing_dir(parent):
                flat.add(parent)
        if self.sessions_dir is not None:
            if existing_dir(self.sessions_dir):
                (recursive if self.sessions_recursive else flat).add(self.sessions_dir)
            parent = os.path.dirname(self.sessions_dir)
            if existing_dir(parent):
                flat.add(parent)
        # one watch per place: drop roots nested in a recursive root
        recursive = {r for r in recursive if not any(o != r and self._under(r, o) for o in recursive)}
        flat = {f for f in flat if not any(self._under(f, r) for r in recursive)}
        return WatchPlan(frozenset(recursive), frozenset(flat))



# -- the scheduler --------------------------------------------------------------------------------

@dataclass
class _State:
    pending: bool = False
    first_change: float = 0.0
    last_change: float = 0.0
    not_before: float = 0.0
    reason: str = ""
    changed: set[str] = field(default_factory=set)
    running: bool = False
    failures: int = 0
    # the next run must scan everything: ``changed`` may not name every change since the last
    # complete run (none yet, a failed run, a folder event, re-planned watches, the interval)
    full_scan: bool = True
    scan_reason: str = "first run"


class Watcher:
    """Watches the sources of ``settings`` and calls ``runner`` (debounced, one at a time).

    :meth:`run_forever` blocks (Ctrl-C or :meth:`stop` ends it); :meth:`start` runs it in
    a daemon thread. ``on_run`` is called with a :class:`RunRecord` after each run.
    """

    def __init__(self, settings: Settings, runner: Runner, *,
                 debounce: float = DEFAULT_DEBOUNCE_S, max_wait: float | None = None, initial_run: bool = True,
                 on_run: Callable[[RunRecord], None] | None = None, force_polling: bool | None = None,
                 root_check_s: float = ROOT_CHECK_S, retry_initial_s: float = RETRY_INITIAL_S,
                 retry_max_s: float = RETRY_MAX_S, max_hinted_paths: int = MAX_HINTED_PATHS,
                 full_scan_every_s: float = FULL_SCAN_EVERY_S) -> None:
        if not 0 <= debounce <= MAX_DEBOUNCE_S:  # nan and inf too: a nan wait never ran, inf crashed the wait
            raise UsageError(f"--debounce must be between 0 and {MAX_DEBOUNCE_S:.0f} seconds")
        self.settings = settings
        self.runner = runner
        self.debounce = float(debounce)
        self.max_wait = float(max_wait) if max_wait is not None else max(20 * self.debounce, 10.0)
        self.initial_run = initial_run
        self.on_run = on_run
        self.force_polling = force_polling
        self.root_check_s = root_check_s
        self.retry_initial_s = retry_initial_s
        self.retry_max_s = retry_max_s
        self.max_hinted_paths = max_hinted_paths
        self.full_scan_every_s = full_scan_every_s
        self._last_full_scan: float | None = None  # monotonic start of the last complete full-scan run
        self.filter = SourceFilter(settings)
        self._filter_of: tuple[int, int, int] | None = None  # the index file (inode, mtime, size) it was made for
        self.runs: list[RunRecord] = []
        self._st = _State()
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._watching = threading.Event()
        # set once the watches are first in place, or by stop(): what the start-up waits for
        self._started = threading.Event()
        # the watch loop's current wake-up (its ``replan``): stop() sets it, so no wait outlives a stop
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        # why file watching stopped for good (a source path watchfiles cannot take), or None
        self.watch_error: str | None = None
        self._watch_failures = 0  # watcher failures in a row: the wait before the next try doubles

    # -- events -------------------------------------------------------------------------------
    def notify(self, paths: Iterable[str], *, reason: str | None = None, full_scan: str = "") -> None:
        """Record changes; the next run starts once they have been quiet for ``debounce``.
        ``full_scan``: why the paths do not say everything that changed (the next run scans
        every source)."""
        now = time.monotonic()
        with self._cond:
            st = self._st
            if not st.pending:
                st.pending, st.first_change = True, now
                st.reason = reason or ""
            st.last_change = now
            st.changed.update(paths)
            if full_scan:
                self._scan_next(full_scan)
            self._cond.notify_all()

    def remember(self, paths: list[str]) -> None:
        """Paths the next run is given without starting one (:meth:`SourceFilter.maybe_folder`)."""
        if paths:
            with self._cond:
                self._st.changed.update(paths)

    def _scan_next(self, why: str) -> None:
        """The next run scans everything (called with the lock held)."""
        if not self._st.full_scan:
            self._st.full_scan, self._st.scan_reason = True, why

    def _take_hint(self, changed: set[str]) -> frozenset[str] | None:
        """The paths the run about to start is given, or None: it scans everything. Resets the
        state for the next run (called with the lock held)."""
        st = self._st
        last = self._last_full_scan
        why = (st.scan_reason if st.full_scan
               else f"{len(changed)} paths changed" if len(changed) > self.max_hinted_paths
               else "no full scan yet" if last is None
               else "the last full scan is old" if time.monotonic() - last > self.full_scan_every_s
               else "")
        st.full_scan, st.scan_reason = False, ""
        if why:
            log.debug("this run scans every source: %s", why)
            return None
        return frozenset(changed)

    # -- lifecycle ----------------------------------------------------------------------------
    def start(self) -> threading.Thread:
        self._thread = threading.Thread(target=self.run_forever, name="memory-core-watch", daemon=True)
        self._thread.start()
        return self._thread

    def stop(self, timeout: float | None = 10.0) -> None:
        """Stop watching and running, and wait (up to ``timeout``) for the watch thread to end.
        Every wait of the watcher is woken: a stop returns as soon as a run going ends (closing a
        ``Memory`` or the MCP server took 1.5-5 s with no run going: the start-up's wait for the
        watches, up to 5 s, and the watch loop's root check, 2 s, did not look at the stop)."""
        self._stop.set()
        self._started.set()
        self._wake.set()  # after _stop: a loop that made a new one sees _stop before it waits
        with self._cond:
            self._cond.notify_all()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def wait_ready(self, timeout: float = 10.0) -> bool:
        """True once the file watches are in place and the initial run (if any) is done."""
        deadline = time.monotonic() + timeout
        return self._ready.wait(timeout) and self._watching.wait(max(0.0, deadline - time.monotonic()))

    def wait_idle(self, timeout: float = 30.0) -> bool:
        """True once no run is running or pending; False on timeout."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._st.pending or self._st.running:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
        return True

    def run_forever(self) -> None:
        watcher = threading.Thread(target=self._watch_loop, name="memory-core-watchfiles", daemon=True)
        watcher.start()
        try:
            # watches first, then the initial run: a change made during that run is not lost
            self._started.wait(5.0)
            watching = self._watching.is_set()
            if self.initial_run and not self._stop.is_set():
                with self._cond:
                    self._take_hint(set())
                self._run_once("startup", [], None)
            if not watching:
                with self._cond:  # changes made before the watches were in place were not seen
                    self._scan_next("the watches were not in place")
            self._ready.set()
            while not self._stop.is_set():
                job = self._next_job()
                if job is None:
                    break
                self._run_once(*job)
        finally:
            self._stop.set()
            with self._cond:
                self._cond.notify_all()
            watcher.join(5)
            close = getattr(self.runner, "close", None)
            if close is not None:
                close()

    # -- scheduling ---------------------------------------------------------------------------
    def _due(self) -> float:
        st = self._st
        due = min(st.last_change + self.debounce, st.first_change + self.max_wait)
        return max(due, st.not_before)

    def _next_job(self) -> tuple[str, list[str], frozenset[str] | None] | None:
        with self._cond:
            st = self._st
            while not self._stop.is_set():
                if st.pending:
                    now = time.monotonic()
                    due = self._due()
                    if now >= due:
                        hint = self._take_hint(st.changed)
                        changed = sorted(st.changed)
                        reason = st.reason or f"{len(changed)} change{'s' if len(changed) != 1 else ''}"
                        changed = changed[:MAX_REPORTED_PATHS]
                        st.pending, st.changed, st.reason = False, set(), ""
                        st.running = True
                        return reason, changed, hint
                    self._cond.wait(due - now)
                else:
                    self._cond.wait()
            return None

    def _run_once(self, reason: str, changed: list[str], hint: frozenset[str] | None) -> None:
        from memory_core.index.indexer import RunRecord, run_hinted

        with self._cond:
            self._st.running = True
        started, t0, m0 = time.time(), time.perf_counter(), time.monotonic()
        summary: RunSummary | DeploymentOutcome | None = None
        error: str | None = None
        skipped = False
        try:
            summary = run_hinted(self.runner, hint)
        except MemoryCoreError as exc:
            error, skipped = str(exc), isinstance(exc, IndexLockedError)
        except Exception as exc:  # a watcher must survive one bad run
            log.exception("reindex run failed")
            error = f"{exc.__class__.__name__}: {exc}"
        except BaseException as exc:  # Ctrl-C, SIGTERM (``watch``'s): the run is reported as stopped, then the stop goes on
            self._report_stopped(exc, reason, changed, started, time.perf_counter() - t0)
            raise
        rec = RunRecord(number=len(self.runs) + 1, reason=reason, changed=changed, started_at=started,
                        seconds=time.perf_counter() - t0, ok=error is None, skipped=skipped, summary=summary, error=error)
        with self._cond:
            st = self._st
            st.running = False
            if not _complete(rec):
                # its changes may not be in the index: the next run cannot trust the paths alone
                self._scan_next("the last run did not finish")
            elif not getattr(summary, "hinted", False):
                self._last_full_scan = m0  # it scanned every source
            # a run skipped because another holds the index (a deployment's run ended Skipped or
            # Cancelled by its concurrency limit: "another run is on it") is retried as a failed one
            # is: its changes were never indexed, and no event may come to trigger another run (it
            # waited for the 15-minute schedule: the thirty-ninth session's audit E)
            if rec.ok and not _skipped(rec):
                st.failures = 0
                st.not_before = 0.0
            else:
                st.failures += 1
                delay = min(self.retry_max_s, self.retry_initial_s * 2 ** (st.failures - 1))
                st.not_before = time.monotonic() + delay
                if not st.pending:  # its changes are not indexed: retry even if nothing else changes
                    now = time.monotonic()
                    st.pending, st.first_change, st.last_change = True, now, now
                    st.reason = "retry"
                st.changed.update(changed)
            self.runs.append(rec)
            self._cond.notify_all()
        self._tell(rec)

    def _tell(self, rec: RunRecord) -> None:
        """A run's line in the log (a failure as a warning) and to ``on_run``."""
        log.log(logging.INFO if rec.ok or rec.stopped else logging.WARNING, "%s", rec.line())
        if self.on_run is not None:
            try:
                self.on_run(rec)
            except Exception:  # a reporting bug must not stop the watcher
                log.exception("on_run callback failed")

    def _report_stopped(self, exc: BaseException, reason: str, changed: list[str], started: float,
                        seconds: float) -> None:
        """A run a stop ended (``watch`` stopped by Ctrl-C or SIGTERM while it ran): one record
        like every run's, saying what the stop left (before: nothing; ``watch stopped``, whether the
        run had published its index or not)."""
        from memory_core.index.indexer import RunRecord, takes_hints
        from memory_core.index.pipeline import stop_word
        from memory_core.index.run_stops import signal_stop

        if not signal_stop(exc):  # not a SystemExit or GeneratorExit
            return
        partial = getattr(exc, "run_summary", None)
        # a runner that takes no hints runs a deployment, out of this process: its run goes on
        going = ("a deployment run it started goes on at its worker (the watcher no longer waits for it)"
                 if not takes_hints(self.runner) and partial is None else None)
        rec = RunRecord(number=len(self.runs) + 1, reason=reason, changed=changed, started_at=started,
                        seconds=seconds, ok=False, summary=partial, error=going,
                        stopped=stop_word(exc))
        with self._cond:
            self._st.running = False
            self.runs.append(rec)
            self._cond.notify_all()
        self._tell(rec)

    # -- file watching ------------------------------------------------------------------------
    def _refilter(self) -> bool:
        """Make :attr:`filter` from the sources the live index records now, when the index file
        changed since it was made; True when it changed. Another process's ``index --sessions``
        or ``--extra-path`` adds a source to the index a long-lived reader (the MCP server,
        ``Memory``, ``watch``) was started on: its runs and its dirty checks follow the index's
        record (:func:`memory_core.storage.indexmeta.as_built`), and so must its watches, or a
        transcript written there went unseen for a minute (the MCP server said ``stale: false``)
        or, by ``watch``, until its half-hourly full scan (the thirty-eighth session's audit)."""
        from memory_core.storage.indexmeta import as_built_now

        try:
            st = os.stat(self.settings.index_file)
            key: tuple[int, int, int] | None = (st.st_ino, st.st_mtime_ns, st.st_size)
        except OSError:
            key = None
        if key is None or key == self._filter_of:
            return False
        self._filter_of = key
        try:
            settings = as_built_now(self.settings)[0]
        except Exception as exc:  # a damaged or busy index: the sources as told, until it reads again
            log.debug("the live index's sources could not be read (%s); watching the sources as told", exc)
            return False
        new = SourceFilter(settings)
        if new.roots() == self.filter.roots():
            return False
        self.filter = new
        return True

    def _watch_loop(self) -> None:
        """Watch the current roots; re-plan when a root appears or disappears. A watcher that
        fails is set up again after a wait that doubles while it keeps failing (one traceback,
        then one line each); a source path watchfiles can never take ends the watching."""
        while not self._stop.is_set():
            self._refilter()
            plan = self.filter.plan()
            bad = _not_utf8(plan.recursive | plan.flat)
            if bad is not None:
                self._give_up(f"the path {bad} is not UTF-8, which watchfiles cannot watch")
                return
            gen_stop = threading.Event()
            replan = self._wake = threading.Event()
            if self._stop.is_set():  # stopped while the old one was replaced: stop() set that one
                break
            roots = [(sorted(plan.recursive), True), (sorted(plan.flat), False)]
            groups = [(paths, rec, threading.Event()) for paths, rec in roots if paths]
            failed: list[BaseException] = []  # what each group's watcher failed with
            self._watching.clear()
            threads = [
                threading.Thread(target=self._watch_group,
                                 args=(paths, rec, ready, gen_stop, replan, plan, failed),
                                 name="memory-core-watchfiles-group", daemon=True)
                for paths, rec, ready in groups
            ]
            for t in threads:
                t.start()
            changed_roots = False
            while not self._stop.is_set():
                if not self._watching.is_set() and not failed and all(ready.is_set() for _, _, ready in groups):
                    self._watching.set()
                    self._started.set()
                replan.wait(0.05 if not self._watching.is_set() else self.root_check_s)
                if not replan.is_set() and not self._watching.is_set():
                    continue
                if self._stop.is_set():
                    break
                replan.clear()
                if self._refilter() or self.filter.plan() != plan or any(not t.is_alive() for t in threads):
                    changed_roots = True
                    break
            gen_stop.set()
            for t in threads:
                t.join(5)
            if self._stop.is_set():
                break
            self._watching.clear()
            if failed:
                exc = failed[0]
                if isinstance(exc, UnicodeError):  # a path watchfiles cannot take: it never will
                    self._give_up(f"watchfiles cannot take its paths ({exc})")
                    return
                self._watch_failures += 1
                delay = min(WATCH_RETRY_MAX_S, WATCH_RETRY_INITIAL_S * 2 ** (self._watch_failures - 1))
                if self._watch_failures == 1:
                    log.error("file watcher failed; watching again in %gs", delay, exc_info=exc)
                else:
                    log.warning("file watcher failed again (%s: %s; %d times in a row); watching again in %gs",
                                exc.__class__.__name__, exc, self._watch_failures, delay)
                if self._stop.wait(delay):
                    break
            else:
                self._watch_failures = 0
            if changed_roots:
                log.info("watched directories changed; re-planning")
                # files may have appeared before the new watches were in place
                self.notify([], reason="source directories changed", full_scan="the watches were re-planned")

    def _give_up(self, why: str) -> None:
        """Stop watching for good: the scheduler goes on (runs asked for by the interval timer or
        by ``notify``), and a search still checks whether the index is stale."""
        self.watch_error = why
        self._watching.clear()
        self._started.set()  # the start-up waits for the watches no longer
        log.warning("not watching the sources for changes: %s; changes are still seen when a search checks"
                    " whether the index is stale (sync.on_search) and at the interval (sync.interval_minutes)", why)

    def _watch_group(self, paths: list[str], recursive: bool, ready: threading.Event, gen_stop: threading.Event,
                     replan: threading.Event, plan: WatchPlan, failed: list[BaseException]) -> None:
        import watchfiles

        roots = plan.recursive | plan.flat
        relevant, maybe_folder = self.filter.relevant, self.filter.maybe_folder

        def keep(change: Any, path: str) -> bool:
            return relevant(path) or maybe_folder(path)

        stop_any = _AnyEvent(gen_stop, self._stop)
        try:
            # yield_on_timeout: the first (empty) yield tells that the watches are in place
            for changes in watchfiles.watch(*paths, watch_filter=keep, stop_event=stop_any, recursive=recursive,
                                            debounce=WATCHFILES_GROUP_MS, step=WATCHFILES_STEP_MS,
                                            rust_timeout=WATCHFILES_TIMEOUT_MS, yield_on_timeout=True,
                                            force_polling=self.force_polling, raise_interrupt=False,
                                            ignore_permission_denied=True):
                ready.set()
                if not changes:
                    continue
                touched = [p for _, p in changes if relevant(p)]
                self.remember([p for _, p in changes if not relevant(p)])
                if not touched:
                    continue
                if any(os.path.abspath(p) in roots or os.path.isdir(p) or not os.path.exists(p) for p in touched):
                    replan.set()  # a directory came or went: maybe a new root
                folder = next((p for p in touched if _folder_event(p, roots)), None)
                self.notify(touched, full_scan=f"an event for the folder {folder}" if folder else "")
        except FileNotFoundError:
            replan.set()  # a root vanished between planning and watching
        except Exception as exc:
            if not (gen_stop.is_set() or self._stop.is_set()):
                if not self.force_polling and not isinstance(exc, UnicodeError):
                    # typically the inotify watch limit: polling works everywhere
                    log.warning("file watching failed (%s); polling the sources instead", exc)
                    self.force_polling = True
                else:  # the watch loop waits (longer each time) or gives up
                    failed.append(exc)
                replan.set()
        finally:
            ready.set()


def _not_utf8(paths: Iterable[str]) -> str | None:
    """The first path that is not UTF-8 (its undecodable bytes shown escaped), or None:
    ``watchfiles`` takes only UTF-8 paths, and a Python path keeps such bytes as surrogates."""
    for p in sorted(paths):
        try:
            p.encode("utf-8")
        except UnicodeEncodeError:
            return os.fsencode(p).decode("utf-8", "backslashreplace")
    return None


def _folder_event(path: str, roots: frozenset[str]) -> bool:
    """An event a run given the changed paths cannot take alone: a folder was made or moved in
    (one event for all the files in it), or a watched root changed. A path that is gone may
    have been a folder too (removed, moved away): the run given it checks whether indexed files
    were under it, and scans everything if so."""
    p = os.path.abspath(path)
    return p in roots or os.path.isdir(p)


def _skipped(rec: RunRecord) -> bool:
    """A run that did nothing because another run held the index."""
    from memory_core.index.indexer import DeploymentOutcome

    s = rec.summary
    return rec.skipped or (isinstance(s, DeploymentOutcome) and bool(s.note)) or bool(getattr(s, "skipped", False))


def _complete(rec: RunRecord) -> bool:
    """A run that brought the index up to date with what it saw (not failed, skipped, nor
    waiting for batch jobs that are still running)."""
    from memory_core.index.indexer import DeploymentOutcome

    s = rec.summary
    if not rec.ok or rec.skipped:
        return False
    if isinstance(s, DeploymentOutcome):
        return not s.note
    return s is None or not (s.skipped or s.error or s.batch_pending)


class _AnyEvent:
    """``is_set`` of either event: what ``watchfiles`` polls to stop."""

    def __init__(self, *events: threading.Event) -> None:
        self.events = events

    def is_set(self) -> bool:
        return any(e.is_set() for e in self.events)


def watch_roots(settings: Settings) -> WatchPlan:
    """The directories :class:`Watcher` would watch now (for messages and tests)."""
    return SourceFilter(settings).plan()


def describe(plan: WatchPlan) -> str:
    parts = [f"{p} (recursive)" for p in sorted(plan.recursive)] + sorted(plan.flat)
    return ", ".join(str(Path(p)) for p in parts)


# -- the interval timer ---------------------------------------------------------------------------

def start_interval(minutes: float, callback: Callable[[], Any]) -> Callable[[], None]:
    """Call ``callback`` every ``minutes`` in a daemon thread; returns the function that stops it."""
    stop = threading.Event()
    if minutes <= 0:
        return stop.set

    def loop() -> None:
        while not stop.wait(minutes * 60):
            try:
                callback()
            except Exception:  # a timer must survive one bad call
                logging.getLogger("memory_core.runtime.sync").exception("interval sync failed")

    threading.Thread(target=loop, name="memory-core-sync-interval", daemon=True).start()
    return stop.set
