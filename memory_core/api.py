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
    from memory_core.query.search import Searcher, SearchResult

__all__ = ["FileText", "Memory", "open_memory"]


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
    :meth:`close` (it closes the search connection, the query's embedding model and the
    indexing one)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._searcher: Searcher | None = None
        self._indexer: Indexer | None = None
        self._lock = threading.Lock()

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
                from memory_core.query.search import Searcher

                self._searcher = Searcher(self.settings)
            return self._searcher

    def search(self, query: str, *, max_results: int | None = None, min_score: float | None = None,
               sources: list[str] | None = None, mode: str | None = None) -> list[SearchResult]:
        """Results for ``query``, best first, each with its ``score`` (calibrated, in [0, 1]:
        comparable across queries), ``citation`` (``path#Lstart-Lend``), ``snippet`` and how it
        matched (``match``: ``both``, ``keyword``, ``vector`` or ``date``).

        Defaults come from the settings (``query.max_results``, ``query.min_score``,
        ``query.mode``); ``sources`` limits to ``["memory"]`` or ``["sessions"]``; ``mode`` is
        ``hybrid``, ``keyword`` or ``vector``.
        """
        return self.searcher.search(query, max_results=max_results, min_score=min_score, sources=sources,
                                    mode=mode)

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
