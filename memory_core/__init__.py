"""memory-core: indexing and hybrid search for agents' Markdown memory and chat transcripts.

The Python API (:mod:`memory_core.api`)::

    from memory_core import open_memory

    with open_memory("examples/workspace") as memory:
        memory.index()
        for r in memory.search("replication lag"):
            print(r.score, r.citation, memory.read(r.citation).text)

``Indexer`` (:mod:`memory_core.index.indexer`) is the in-process indexer behind ``Memory.index``, the
CLI's ``index --engine local``, ``watch`` and the MCP server's sync triggers, for a program that
reindexes on its own schedule.

Names are imported on first use, so ``import memory_core`` (and the CLI's start-up) stays cheap.
"""

from __future__ import annotations

import importlib
import os
from typing import TYPE_CHECKING, Any

# LanceDB's native code logs "WARN ... No existing dataset at ..., it will be created" for every
# table it creates (each export, the memory store's first write): noise on a user's terminal. Its
# errors still show, and a user's own LANCEDB_LOG wins.
os.environ.setdefault("LANCEDB_LOG", "error")

if TYPE_CHECKING:
    from memory_core.api import FileText, Memory, SearchAnswer, open_memory
    from memory_core.config import Settings, load_settings
    from memory_core.errors import (
        ConfigError,
        IndexMissingError,
        MemoryCoreError,
        PathError,
        ProviderError,
        RunError,
        UsageError,
    )
    from memory_core.index.indexer import Indexer, RunRecord
    from memory_core.index.runtypes import RunSummary
    from memory_core.query.search import SearchResult

_EXPORTS = {
    "open_memory": "memory_core.api",
    "Memory": "memory_core.api",
    "FileText": "memory_core.api",
    "SearchAnswer": "memory_core.api",
    "Settings": "memory_core.config",
    "load_settings": "memory_core.config",
    "RunSummary": "memory_core.index.runtypes",
    "Indexer": "memory_core.index.indexer",
    "RunRecord": "memory_core.index.indexer",
    "SearchResult": "memory_core.query.search",
    "MemoryCoreError": "memory_core.errors",
    "UsageError": "memory_core.errors",
    "ConfigError": "memory_core.errors",
    "PathError": "memory_core.errors",
    "IndexMissingError": "memory_core.errors",
    "RunError": "memory_core.errors",
    "ProviderError": "memory_core.errors",
}

__all__ = [
    "ConfigError", "FileText", "IndexMissingError", "Indexer", "Memory", "MemoryCoreError", "PathError", "SearchAnswer",
    "ProviderError", "RunError", "RunRecord", "RunSummary", "SearchResult", "Settings", "UsageError", "load_settings", "open_memory",
]
assert sorted(__all__) == sorted(_EXPORTS)


# Any: the package's lazy exports (PEP 562), any of its public names
def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'memory_core' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
