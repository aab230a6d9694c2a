"""The Python API: open a memory, index it, search it, read a citation.

Everything the CLI, the MCP server and the flows do goes through the same library calls; this
module puts the four a program needs behind one object, with typed results::

    from memory_core import open_memory

    with open_memory("examples/workspace") as memory:
        summary = memory.index()                      # RunSummary: what the run did
        for r in memory.search("replication lag"):    # list[SearchResult], best first
            print(f"{r.score:.2f} {r.citation}")
        text = memory.read(r.citation)                # FileText: the cited lines

Settings come from the same places as the CLI's, in the same order: the config file (``config``
or ``$MEMORY_CORE_CONFIG``), ``MEMORY_CORE_*`` variables, then the keyword arguments given here
(nested settings as dicts, e.g. ``query={"min_score": 0.3}``). A :class:`Memory` keeps one
search connection open between queries and notices a reindex published by anyone (this object,
the CLI, a Prefect deployment) at its next query.

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

import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from memory_core.config import Settings, load_settings

if TYPE_CHECKING:
    from memory_core.index.indexer import Indexer
    from memory_core.index.runtypes import Progress, RunSummary
    from memory_core.query.search import ResultSource, Searcher, SearchResult
    from memory_core.runtime.sync import Freshness, SyncManager

__all__ = ["FileText", "Memory", "SearchAnswer", "open_memory"]


@dataclass(frozen=True, slots=True)
class SearchAnswer:
    """One search's answer, as ``memory_search`` and ``search --json`` give it (:meth:`to_dict`).

    ``results``: best first, each in the tool's shape (``path``, ``startLine``, ``endLine``,
    ``score``, ``snippet``, ``source``, ``citation``, ``match``, ``date``, ...); ``provider`` and
    ``model``: what embedded the query (``none``: a keyword-only index); ``backend``:
    ``builtin`` or ``qmd``; ``fallback``: ``None`` or ``{from, to, reason}``; ``citations``: the
    citations mode applied; ``note``: what the caller should know (empty: nothing); ``stale``:
    the index answered from is older than its sources (``stale_reason`` says what changed,
    ``refreshing`` whether a reindex is running)."""

    results: list[dict[str, Any]]
    provider: str
    model: str | None
    backend: str
    mode: str
    fallback: dict[str, Any] | None
    citations: str
    note: str = ""
    stale: bool = False
    stale_reason: str = ""
    refreshing: bool = False

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SearchAnswer:
        return cls(results=list(data["results"]), provider=data["provider"], model=data.get("model"),
                   backend=data["backend"], mode=data["mode"], fallback=data.get("fallback"),
                   citations=data.get("citations", "auto"), note=data.get("note", ""),
                   stale=bool(data.get("stale", False)), stale_reason=data.get("stale_reason", ""),
                   refreshing=bool(data.get("refreshing", False)))

    def to_dict(self) -> dict[str, Any]:
        """The JSON answer: ``note`` only when there is one; ``stale_reason`` and ``refreshing``
        only when stale."""
        out: dict[str, Any] = {"results": self.results, "provider": self.provider, "model": self.model,
                               "backend": self.backend, "mode": self.mode, "fallback": self.fallback,
                               "citations": self.citations}
        if self.note:
            out["note"] = self.note
        out["stale"] = self.stale
        if self.stale:
            out["stale_reason"], out["refreshing"] = self.stale_reason, self.refreshing
        return out


@dataclass(frozen=True, slots=True)
class FileText:
    """Lines of an indexed file, as ``memory_get`` returns them.

    ``start_line`` is the first line returned (1-based), ``lines`` how many were returned (0 past
    the end, or for a daily note that does not exist yet). Transcript lines come back as readable,
    redacted ``User: ...`` / ``Assistant: ...`` text for the cited JSONL lines.
    """

    path: str
    source: str
    start_line: int
    lines: int
    text: str

    @property
    def end_line(self) -> int:
        """The last line returned (``start_line - 1`` when none was)."""
        return self.start_line + self.lines - 1


class Memory:
    """One memory: a workspace, its index and its settings. Use it as a context manager, or call
    :meth:`close` (it closes the search connection, the query's embedding model, the indexing
    one and the sync triggers).

    ``refresh`` (default True): run the ``[sync]`` triggers (module docstring); False: a one-shot
    reader (the CLI's ``search``) that starts no reindex and no watch but still says when the
    index is stale."""

    def __init__(self, settings: Settings, *, refresh: bool = True) -> None:
        self.settings = settings
        self.refresh = refresh
        self._searcher: Searcher | None = None
        self._indexer: Indexer | None = None
        self._sync: SyncManager | None = None
        self._lock = threading.Lock()
        self.last_freshness: Freshness | None = None  # of the index the last search read

    # -- indexing ---------------------------------------------------------------------------
    def index(self, *, full: bool = False, progress: Callable[[Progress], None] | None = None) -> RunSummary:
        """Run one reindex in this process and return what it did.

        Incremental by default: unchanged files are carried over, changed ones re-chunked, and
        only chunks with no cached vector are embedded. ``full=True`` rebuilds every file (still
        reusing cached vectors). ``progress`` is called as files are chunked and vectors return.
        Raises :class:`memory_core.errors.RunError` when the run fails (the live index stays).
        """
        return self.indexer.run(full=full, progress=progress)

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
        """The long-lived :class:`memory_core.query.search.Searcher` behind :meth:`search` (for its
        other calls: ``status()``, ``search_response()``, ``retrieve()`` and ``rank()``)."""
        with self._lock:
            if self._searcher is None:
                from memory_core.query.backends import open_searcher

                self._searcher = open_searcher(self.settings)  # builtin, or qmd (``backend``)
            return self._searcher

    def search(self, query: str, *, max_results: int | None = None, min_score: float | None = None,
               sources: list[str] | None = None, mode: str | None = None) -> list[SearchResult]:
        """Results for ``query``, best first, each with its ``score`` (calibrated, in [0, 1]:
        comparable across queries), ``citation`` (``path#Lstart-Lend``), ``snippet`` and how it
        matched (``match``: ``both``, ``keyword``, ``vector`` or ``date``).

        Defaults come from the settings (``query.max_results``, ``query.min_score``,
        ``query.mode``); ``sources`` limits to ``["memory"]`` or ``["sessions"]``; ``mode`` is
        ``hybrid``, ``keyword`` or ``vector``. A dirty index is refreshed first (``sync.on_search``,
        waiting at most ``sync.search_wait_ms``); :attr:`last_freshness` says whether the index
        read was stale (:meth:`answer` carries it).
        """
        self.last_freshness = self._before_search()
        return self.searcher.search(query, max_results=max_results, min_score=min_score, sources=sources,
                                    mode=mode)

    def answer(self, query: str, *, max_results: int | None = None, min_score: float | None = None,
               sources: list[str] | None = None, mode: str | None = None, chat_type: str | None = None,
               extra: ResultSource | None = None) -> SearchAnswer:
        """What an agent is handed for ``query`` (the ``memory_search`` tool's answer): the
        results shaped for ``chat_type`` (citations mode, injection budget), what embedded the
        query, any fallback, notes, and whether the index was stale. ``extra``: a source searched
        beside the index when ``sources`` names it (the LanceDB memory store)."""
        fresh = self._before_search()
        self.last_freshness = fresh
        out = self.searcher.search_response(query, max_results=max_results, min_score=min_score, sources=sources,
                                            mode=mode, chat_type=chat_type, extra=extra)
        return SearchAnswer.from_dict(fresh.apply(out))

    # -- freshness --------------------------------------------------------------------------
    @property
    def sync(self) -> SyncManager | None:
        """The sync triggers (:class:`memory_core.runtime.sync.SyncManager`), started at this
        memory's first call; None for a one-shot reader (``refresh=False``)."""
        if not self.refresh:
            return None
        with self._lock:
            if self._sync is not None:
                return self._sync
            from memory_core.runtime.sync import SyncManager

            sync = self._sync = SyncManager(self.settings)
        sync.start()  # [sync] watch, interval_minutes
        sync.on_session_start()  # [sync] on_session_start: this memory's first call
        return sync

    def _before_search(self) -> Freshness:
        from memory_core.runtime.sync import current_freshness

        sync = self.sync
        return sync.before_search() if sync is not None else current_freshness(self.settings)

    def freshness(self) -> Freshness:
        """Whether the index is stale now (what changed, whether a reindex is running); starts nothing."""
        from memory_core.runtime.sync import current_freshness

        sync = self.sync
        return sync.freshness() if sync is not None else current_freshness(self.settings)

    def read(self, citation: str, *, from_line: int | None = None, lines: int | None = None) -> FileText:
        """The lines a citation points at (``path#L10-L20``), or ``lines`` lines of ``path`` from
        ``from_line``. Only indexed files can be read; anything else raises
        :class:`memory_core.errors.PathError`."""
        got = self.searcher.read_file(citation, from_line=from_line, lines=lines)
        return FileText(path=got["path"], source=got["source"], start_line=int(got["from"]),
                        lines=int(got["lines"]), text=got["text"])

    def status(self) -> dict[str, Any]:
        """What ``memory-core status --json`` prints: the index's files, chunks, provider, model,
        sizes and whether the query side can embed (JSON-ready)."""
        return self.searcher.status()

    # -- lifecycle --------------------------------------------------------------------------
    def close(self) -> None:
        with self._lock:
            sync, self._sync = self._sync, None
        if sync is not None:
            sync.close()  # the watch and the interval stop; a run going is waited for (30 s at most)
        with self._lock:
            if self._searcher is not None:
                self._searcher.close()
                self._searcher = None
            indexer, self._indexer = self._indexer, None
        if indexer is not None:
            indexer.close()

    def __enter__(self) -> Memory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Memory(workspace={str(self.settings.workspace)!r}, index={str(self.settings.index_file)!r})"


def open_memory(workspace: str | os.PathLike[str] | None = None, *, config: str | os.PathLike[str] | None = None,
                **settings: Any) -> Memory:
    """A :class:`Memory` for ``workspace`` (default: the config's or ``$MEMORY_CORE_WORKSPACE``).

    ``config`` is a TOML file as for ``memory-core --config``; keyword arguments override any
    setting (``provider="openai"``, ``index_path="/tmp/mem.sqlite"``,
    ``query={"min_score": 0.3}``). Nothing is read or built until :meth:`Memory.index` or
    :meth:`Memory.search` is called; bad settings raise :class:`memory_core.errors.ConfigError`
    here.
    """
    overrides = dict(settings)
    if workspace is not None:
        overrides["workspace"] = os.fspath(workspace)
    return Memory(load_settings(config, overrides))
