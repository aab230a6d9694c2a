"""The Python API: open a memory, index it, search it, read a citation.

Everything the CLI, the MCP server and the flows do goes through the same library calls; this
module puts the four a program needs behind one object, with typed results::

    from memory_core import open_memory

    with open_memory("examples/workspace") as memory:
        summary = memory.index()                      # RunSummary: what the run did
        for r in memory.search("replication lag"):    # list[SearchResult], best first
            print(f"{r.score:.2f} {r.citation}")
        text = memory.read(r.citation)                # FileText: the cited lines

Settings resolve as the CLI's do, by the one function every entry point calls
(:func:`memory_core.runtime.resolve.resolve_settings`): the keyword arguments given here (nested
settings as dicts, e.g. ``query={"min_score": 0.3}``), ``MEMORY_CORE_*`` variables, the config
file (``config``, ``$MEMORY_CORE_CONFIG`` or ``<workspace>/memory-core.toml``), what the live
index recorded, the defaults. A :class:`Memory` keeps its search connections open between
queries and notices a reindex published by anyone (this object, the CLI, a Prefect deployment)
at its next query. It is the one front door: the CLI's ``index``, ``search``, ``get`` and
``status``, the MCP server and ``watch`` go through it.

A :class:`Memory` is a long-lived reader and keeps its index fresh as the seeds do (the
``[sync]`` settings, all three on by default): its first call is a session start (a dirty index
is reindexed in the background), it watches the sources (a change is indexed once they have
been quiet ``sync.watch_debounce_ms``), and a search on a dirty index waits for the refresh at
most ``sync.search_wait_ms`` (1 s), then answers from the index as it is. :meth:`Memory.answer`
says when that index is stale (``stale``, ``stale_reason``, ``refreshing``, ``note``). Turn the
triggers off with ``sync={"on_search": False, "watch": False, "on_session_start": False}``.

Errors are the library's own: :class:`memory_core.errors.ConfigError` for bad settings,
:class:`memory_core.errors.IndexMissingError` when searching before the first index,
:class:`memory_core.errors.PathError` for a path that is not an indexed file, and
:class:`memory_core.errors.RunError` (its subclasses) when a run fails; a failed run leaves the
live index as it was.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from memory_core.config import Settings
from memory_core.query.results import FileText, MemoryStatus, SearchAnswer

if TYPE_CHECKING:
    from memory_core.index.indexer import Indexer
    from memory_core.index.runtypes import Progress, RunSummary
    from memory_core.notes.memory_store import MemoryStore
    from memory_core.query.search import ResultSource, Searcher, SearchResult
    from memory_core.runtime.sync import Freshness, SyncManager

__all__ = ["FileText", "Memory", "MemoryStatus", "SearchAnswer", "open_memory"]


MAX_SEARCHERS = 4  # searchers open at once: the calls a Memory answers side by side
_PENDING: Any = object()  # a searcher being opened


class Memory:
    """One memory: a workspace, its index and its settings. Use it as a context manager, or call
    :meth:`close` (it closes the search connections, the query's embedding model, the indexing
    one and the sync triggers).

    The one front door: the CLI's ``index`` / ``search`` / ``get`` / ``status``, the MCP server
    and ``watch`` go through it, over settings resolved as :func:`open_memory` resolves them
    (:func:`memory_core.runtime.resolve.resolve_settings`).

    Thread-safe: concurrent calls each borrow a searcher of their own (opened on demand, at most
    ``max_searchers``), so a search waiting on a slow embedding provider holds up no other call.

    ``refresh`` (default True): run the ``[sync]`` triggers (module docstring); False: a one-shot
    reader (the CLI) that starts no reindex and no watch but still says when the index is stale.
    ``auto_start`` (default True): the triggers start at the first call (the session start);
    False: the caller starts them (:meth:`start_session`; the MCP server does at a client's
    ``initialize``). ``searcher``: the first searcher (else opened on first use)."""

    def __init__(self, settings: Settings, *, refresh: bool = True, auto_start: bool = True,
                 searcher: Searcher | None = None, max_searchers: int = MAX_SEARCHERS) -> None:
        self.settings = settings
        self.refresh = refresh
        self.auto_start = auto_start
        self._first: Searcher | None = searcher
        self._free: list[Searcher] = [searcher] if searcher is not None else []
        self._all: list[Searcher] = list(self._free)
        self._max = max(1, max_searchers)
        self._indexer: Indexer | None = None
        self._sync: SyncManager | None = None
        self._started = False
        self._lock = threading.Lock()
        self._returned = threading.Condition(self._lock)
        # read and status never wait for the search pool: a search can wait seconds on a stalled
        # provider, a read or status embeds nothing (issue 39 M1). One searcher of their own.
        self._reader: Searcher | None = None
        self._reader_lock = threading.Lock()
        self.last_freshness: Freshness | None = None  # of the index the last search read
        self._store: MemoryStore | None = None  # the agent's LanceDB memory store, opened when named

    # -- indexing ---------------------------------------------------------------------------
    def index(self, *, full: bool = False, progress: Callable[[Progress], None] | None = None,
              re_embed: bool = False) -> RunSummary:
        """Run one reindex in this process and return what it did.

        Incremental by default: unchanged files are carried over, changed ones re-chunked, and
        only chunks with no cached vector are embedded; a transcript that grew is indexed however
        little it grew (the session delta is for the runs this object's triggers start).
        ``full=True`` rebuilds every file (still reusing cached vectors); ``re_embed=True`` rebuilds
        every file and embeds every chunk again, reading no vector from the embedding cache or the
        live index, and the fresh vectors replace the cached ones (bad vectors a provider once
        answered, e.g. one vector for every text). ``progress`` is called
        as files are chunked and vectors return. Raises :class:`memory_core.errors.RunError` when
        the run fails (the live index stays).
        """
        return self.indexer.run(full=full, progress=progress, appends=True, re_embed=re_embed)

    @property
    def indexer(self) -> Indexer:
        """The :class:`memory_core.index.indexer.Indexer` behind :meth:`index`: its embedding provider is
        created at the first run and reused by the next ones (each with a fresh retry budget)."""
        with self._lock:
            if self._indexer is None:
                from memory_core.index.indexer import Indexer

                self._indexer = Indexer(self.settings)
            return self._indexer

    # -- searching --------------------------------------------------------------------------
    @property
    def searcher(self) -> Searcher:
        """The first :class:`memory_core.query.search.Searcher` behind :meth:`search` (builtin, or
        qmd: ``backend``), for its other calls in one thread (``search_response()``,
        ``retrieve()`` and ``rank()``: evaluations)."""
        with self._lock:
            if self._first is None:
                from memory_core.query.backends import open_searcher

                self._first = open_searcher(self.settings)
                self._free.append(self._first)
                self._all.append(self._first)
            return self._first

    @contextlib.contextmanager
    def _borrow(self) -> Iterator[Searcher]:
        """A searcher for one call: a free one, else a new one (up to ``max_searchers``), else
        the next one returned."""
        self.searcher  # noqa: B018 - the first one is opened in the caller's thread, errors and all
        with self._lock:
            while not self._free and len(self._all) >= self._max:
                self._returned.wait()
            s = self._free.pop() if self._free else None
            if s is None:
                self._all.append(s := _PENDING)  # reserve the place while it opens
        if s is _PENDING:
            try:
                from memory_core.query.backends import open_searcher

                s = open_searcher(self.settings)
            except BaseException:
                with self._lock:
                    self._all.remove(_PENDING)
                    self._returned.notify()
                raise
            with self._lock:
                self._all[self._all.index(_PENDING)] = s
        try:
            yield s
        finally:
            with self._lock:
                self._free.append(s)
                self._returned.notify()

    def search(self, query: str, *, max_results: int | None = None, min_score: float | None = None,
               sources: list[str] | None = None, mode: str | None = None) -> list[SearchResult]:
        """Results for ``query``, best first, each with its ``score`` (calibrated, in [0, 1]:
        comparable across queries), ``citation`` (``path#Lstart-Lend``), ``snippet`` and how it
        matched (``match``: ``both``, ``keyword``, ``vector`` or ``date``).

        Defaults come from the settings (``query.max_results``, ``query.min_score``,
        ``query.mode``; ``max_results`` at most 50, as every door); ``sources`` limits to ``["memory"]`` or ``["sessions"]``; ``mode`` is
        ``hybrid``, ``keyword`` or ``vector``. A dirty index is refreshed first (``sync.on_search``,
        waiting at most ``sync.search_wait_ms``); :attr:`last_freshness` says whether the index
        read was stale (:meth:`answer` carries it).
        """
        _check_search_args(max_results, min_score, query, sources, mode, allowed=("memory", "sessions"))
        from memory_core.query.answers import clamp_results

        max_results, _ = clamp_results(max_results)  # at most 50, as answer(), MCP and the CLI give
        self.last_freshness = self._before_search()
        with self._borrow() as s:
            return s.search(query, max_results=max_results, min_score=min_score, sources=sources, mode=mode)

    def answer(self, query: str, *, max_results: int | None = None, min_score: float | None = None,
               sources: list[str] | None = None, mode: str | None = None, chat_type: str | None = None,
               extra: ResultSource | None = None) -> SearchAnswer:
        """What an agent is handed for ``query`` (the ``memory_search`` tool's answer): the
        results shaped for ``chat_type`` (citations mode, injection budget), what embedded the
        query, any fallback, notes, and whether the index was stale. ``extra``: a source searched
        beside the index when ``sources`` names it (the LanceDB memory store)."""
        _check_search_args(max_results, min_score, query, sources, mode)
        if extra is None and sources and "store" in sources:  # the agent's memory store, merged by score
            extra = self.store
        fresh = self._before_search()
        self.last_freshness = fresh
        with self._borrow() as s:
            out = s.search_response(query, max_results=max_results, min_score=min_score, sources=sources, mode=mode,
                                    chat_type=chat_type, extra=extra)
        return fresh.apply(out)

    @contextlib.contextmanager
    def _reading(self) -> Iterator[Searcher]:
        """The searcher that answers :meth:`read` and :meth:`status`, apart from the search pool,
        so a read never waits behind searches waiting on a provider."""
        with self._reader_lock:
            if self._reader is None:
                from memory_core.query.backends import open_searcher

                self._reader = open_searcher(self.settings)
            yield self._reader

    def read(self, citation: str, *, from_line: int | None = None, lines: int | None = None) -> FileText:
        """The lines a citation points at (``path#L10-L20``), or ``lines`` lines of ``path`` from
        ``from_line``. Only indexed files can be read; anything else raises
        :class:`memory_core.errors.PathError`."""
        if isinstance(citation, str) and citation.startswith("store:"):  # a memory of the store (answer's citation)
            return self.store.read_citation(citation)
        self._session()
        with self._reading() as s:
            return s.read_file(citation, from_line=from_line, lines=lines)

    @property
    def store(self) -> MemoryStore:
        """The agent's LanceDB memory store (``lancedb_path``), opened at first use and closed
        with this memory: what ``answer(sources=[..., "store"])`` merges and ``read("store:<id>")``
        reads; the MCP server's store tools (memory_store, memory_forget, ...) use this one too."""
        with self._lock:
            if self._store is None:
                from memory_core.notes.memory_store import MemoryStore

                self._store = MemoryStore(self.settings)
            return self._store

    def status(self, *, measure: bool = False) -> MemoryStatus:
        """What the index holds (files, chunks, provider, model, sizes, whether search can embed,
        whether it is dirty) and what it was built from; ``measure``: also split its bytes by
        purpose (reads the whole file)."""
        self._session()
        with self._reading() as s:
            return s.status(measure=measure)

    # -- freshness --------------------------------------------------------------------------
    @property
    def sync(self) -> SyncManager | None:
        """The sync triggers (:class:`memory_core.runtime.sync.SyncManager`), created on first use;
        None for a one-shot reader (``refresh=False``)."""
        if not self.refresh:
            return None
        with self._lock:
            if self._sync is None:
                from memory_core.runtime.sync import SyncManager

                self._sync = SyncManager(self.settings)
            return self._sync

    def start_session(self) -> None:
        """Start the triggers (``watch``, ``interval_minutes``) and reindex a dirty index in the
        background (``on_session_start``). Done once; the first call does it unless ``auto_start``
        is False."""
        sync = self.sync
        with self._lock:
            if sync is None or self._started:
                return
            self._started = True
        sync.start()
        sync.on_session_start()

    def _session(self) -> SyncManager | None:
        if self.auto_start:
            self.start_session()
        return self.sync

    def _before_search(self) -> Freshness:
        from memory_core.runtime.sync import current_freshness

        sync = self._session()
        return sync.before_search() if sync is not None else current_freshness(self.settings)

    def freshness(self) -> Freshness:
        """Whether the index is stale now (what changed, whether a reindex is running); starts nothing."""
        from memory_core.runtime.sync import current_freshness

        sync = self.sync
        return sync.freshness() if sync is not None else current_freshness(self.settings)

    # -- lifecycle --------------------------------------------------------------------------
    def close(self) -> None:
        with self._lock:
            sync, self._sync = self._sync, None
        if sync is not None:
            sync.close()  # the watch and the interval stop; a run going is waited for (30 s), then stopped
        with self._lock:
            searchers = [s for s in self._all if s is not _PENDING]
            self._all, self._free, self._first = [], [], None
        with self._reader_lock:
            if self._reader is not None:
                searchers.append(self._reader)
            self._reader = None
        with self._lock:
            indexer, self._indexer = self._indexer, None
            store, self._store = self._store, None
        if store is not None:
            with contextlib.suppress(Exception):
                store.close()
        for s in searchers:
            with contextlib.suppress(Exception):
                s.close()
        if indexer is not None:
            indexer.close()

    def __enter__(self) -> Memory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Memory(workspace={str(self.settings.workspace)!r}, index={str(self.settings.index_file)!r})"


def open_memory(workspace: str | os.PathLike[str] | None = None, *, config: str | os.PathLike[str] | None = None,
                agent: str | None = None, **settings: Any) -> Memory:
    """A :class:`Memory` for ``workspace`` (default: the config's, ``$MEMORY_CORE_WORKSPACE``,
    the one the index was built from, else the current directory).

    Settings resolve exactly as the CLI's (:func:`memory_core.runtime.resolve.resolve_settings`),
    each from the first of: the keyword arguments here (any setting, ``provider="openai"``,
    ``index_path="/tmp/mem.sqlite"``, nested ones as dicts: ``query={"min_score": 0.3}``);
    ``MEMORY_CORE_*`` variables; the config file (``config``, else ``$MEMORY_CORE_CONFIG``, else
    ``<workspace>/memory-core.toml``); what the live index recorded (provider, model, sources,
    chunking, ...); the defaults. So a workspace indexed by ``memory-core index`` is opened with
    the settings it was indexed with, and :meth:`Memory.index` rebuilds nothing that is not told to
    change. ``agent``: an agent of the config's ``[agents]`` table (else ``$MEMORY_CORE_AGENT``).
    Only the config file and the index's record are read here; nothing is built until
    :meth:`Memory.index` or :meth:`Memory.search` is called. Bad settings raise
    :class:`memory_core.errors.ConfigError`; an empty ``workspace``, ``index_path`` or ``config``
    (``""``: a script's unset variable) :class:`memory_core.errors.UsageError`.
    """
    from memory_core.runtime.resolve import refuse_empty_config, resolve_settings

    refuse_empty_config(config, "open_memory argument config")  # "" is no config file, not "not told"
    told = dict(settings)
    if workspace is not None:
        told["workspace"] = os.fspath(workspace)
    return Memory(resolve_settings(told, config_file=config, told_by="open_memory argument {}", agent=agent).settings)


SEARCH_SOURCES = ("memory", "sessions", "store")
"""What ``sources`` may name (the MCP tool's schema): notes, transcripts, the memory store."""


def _check_search_args(max_results: object, min_score: object, query: object = "", sources: object = None,
                       mode: object = None, allowed: tuple[str, ...] = SEARCH_SOURCES) -> None:
    """What the CLI and the MCP server refuse, refused here too: ``max_results`` a whole number
    of at least 1, ``min_score`` a number from 0 to 1 (``nan``, ``True``, ``1.5`` are not), a
    ``query`` that is text, ``sources`` a list of :data:`SEARCH_SOURCES` (``"memory"`` alone, a
    string, and ``["memroy"]`` returned nothing and said nothing: the thirty-eighth session's
    audit) and a ``mode`` of ``hybrid``, ``keyword`` or ``vector``."""
    from memory_core.errors import UsageError
    from memory_core.query.search import MODES

    if not isinstance(query, str):
        raise UsageError(f"query must be text, not {type(query).__name__}")
    if sources is not None:
        if isinstance(sources, str) or not isinstance(sources, list | tuple):
            raise UsageError(f"sources must be a list such as ['memory'], not {sources!r}")
        unknown = [x for x in sources if x not in allowed]
        if unknown:
            raise UsageError(f"unknown source(s) {unknown!r}: sources are {', '.join(allowed)}"
                             + (" (the store is searched by answer())" if "store" in unknown else ""))
    if mode is not None and mode not in MODES:
        raise UsageError(f"mode must be one of {', '.join(MODES)}, not {mode!r}")
    if max_results is not None and (isinstance(max_results, bool) or not isinstance(max_results, int)
                                    or max_results < 1):
        raise UsageError(f"max_results must be a whole number of at least 1, not {max_results!r}")
    if min_score is not None and (isinstance(min_score, bool) or not isinstance(min_score, int | float)
                                  or not 0 <= min_score <= 1):  # nan fails both sides
        raise UsageError(f"min_score must be a number from 0 to 1, not {min_score!r}")
