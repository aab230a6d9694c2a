"""Which searcher answers: the builtin index, or qmd with the builtin index as its fallback.

Above both :mod:`memory_core.query.search` and :mod:`memory_core.query.qmd` (which builds on it), so
neither imports the other's user. The CLI and the MCP server open searchers here.
"""

from __future__ import annotations

from typing import Any

from memory_core.config import Settings
from memory_core.query.search import Searcher


def open_searcher(settings: Settings, **kw: Any) -> Searcher:
    """The searcher for ``settings.backend``: builtin, or qmd with the builtin index as its fallback."""
    if settings.backend == "qmd":
        from memory_core.query.qmd import QmdSearcher

        return QmdSearcher(settings, **kw)
    return Searcher(settings, **kw)
