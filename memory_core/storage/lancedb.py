"""The LanceDB table format an export writes and its searcher reads (docs/lancedb-index.md).

``chunks``: the index's chunks (the columns of :mod:`memory_core.export.files`, plus each file's
``mtime`` and the chunk's ``date``), a full-text index on ``text`` (LanceDB's BM25, plain
lower-cased words as FTS5 sees them) and a B-tree on ``id``; ``terms``: each word's document
frequency. Written by :mod:`memory_core.export.lancedb`, read by :mod:`memory_core.query.lancedb`
and the memory store.
"""

from __future__ import annotations

import re
import unicodedata
from typing import TYPE_CHECKING, Any

from memory_core.errors import UsageError

if TYPE_CHECKING:
    pass

TABLE = "chunks"
TERMS = "terms"
MARK = b"memory_core.lancedb_export"
EXPORT_ID = "memory_core.export_id"  # in both tables' schema metadata: the same for the two tables of one export
_COLS = ["id", "path", "source", "start_line", "end_line", "text", "mtime", "date"]
_WORD_RE = re.compile(r"[^\W_]+")
MAX_TOKEN_CHARS = 40  # LanceDB's tokenizer drops longer tokens


def doc_tokens(text: str) -> list[str]:
    """Words as LanceDB's ``simple`` tokenizer makes them: letter/digit runs, lower-cased, ASCII-folded."""
    folded = unicodedata.normalize("NFKD", text.lower())
    folded = "".join(c for c in folded if not unicodedata.combining(c))
    return [w for w in _WORD_RE.findall(folded) if len(w) <= MAX_TOKEN_CHARS]


# Any: the optional lancedb module (no stubs)
def _lancedb() -> Any:
    try:
        import lancedb
    except ModuleNotFoundError:
        raise UsageError("LanceDB export and search need the lancedb package: pip install 'memory-core[lancedb]'"
                         ) from None
    return lancedb


# Any: lancedb's FTS config (no stubs)
def _fts_config() -> Any:
    from lancedb.index import FTS

    return FTS(stem=False, remove_stop_words=False)


def is_export_table(table: Any, name: str) -> bool:
    """Whether the LanceDB table ``name`` (``chunks`` or ``terms``) was written by an export: our
    marker in its schema metadata (an export before the marker was put on ``terms``: its counts)."""
    md = table.schema.metadata or {}
    return MARK in md or (name == TERMS and b"memory_core.n_chunks" in md)


def _tables(db: Any) -> list[str]:
    res = db.list_tables()
    return list(getattr(res, "tables", res))


