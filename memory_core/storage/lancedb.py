"""The LanceDB table format an export writes and its searcher reads (docs/lancedb-index.md).

``chunks``: the index's chunks (the columns of :mod:`memory_core.export.files`, plus each file's
``mtime`` and the chunk's ``date``), a full-text index on ``text`` (LanceDB's BM25, plain
lower-cased words as FTS5 sees them) and a B-tree on ``id``; ``terms``: each word's document
frequency. Written by :mod:`memory_core.export.lancedb`, read by :mod:`memory_core.query.lancedb`
and the memory store.
"""

from __future__ import annotations

import re
import threading
import unicodedata
from typing import TYPE_CHECKING, Any

import apsw

from memory_core.errors import UsageError
from memory_core.storage import textsearch

if TYPE_CHECKING:
    pass

TABLE = "chunks"
TERMS = "terms"
MARK = b"memory_core.lancedb_export"
EXPORT_ID = "memory_core.export_id"  # in both tables' schema metadata: the same for the two tables of one export
_COLS = ["id", "path", "source", "start_line", "end_line", "text", "mtime", "date"]
WORDS = "words"  # the chunk's tokens as the index's FTS5 holds them (index_words), space-joined: the full-text index
_WORD_RE = re.compile(r"[^\W_]+")
MAX_TOKEN_CHARS = 40  # LanceDB's tokenizer drops longer tokens


def doc_tokens(text: str) -> list[str]:
    """Words as LanceDB's ``simple`` tokenizer makes them: letter/digit runs, lower-cased, ASCII-folded
    (an export made before the ``words`` column had its full-text index on ``text``, unstemmed)."""
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


_local = threading.local()


def _tokenizer() -> apsw.FTS5Tokenizer:
    """FTS5's own tokenizer as the index's ``chunks_fts`` uses it (``porter unicode61
    remove_diacritics 2``, :data:`memory_core.storage.textsearch.FTS_TOKENIZER`), one per thread
    (apsw's ``fts5_tokenizer`` on an in-memory connection)."""
    tok: apsw.FTS5Tokenizer | None = getattr(_local, "tok", None)
    if tok is None:
        conn = apsw.Connection(":memory:")
        name, *args = textsearch.FTS_TOKENIZER.split()
        tok = conn.fts5_tokenizer(name, args)
        _local.conn, _local.tok = conn, tok
    return tok


def index_words(text: str) -> list[str]:
    """The tokens the index's FTS5 holds for a chunk's ``text``: CJK characters split
    (:func:`memory_core.storage.textsearch.segment_for_index`), then FTS5's tokenizer (unicode61
    words, diacritics removed, Porter stems): what the export's ``words`` column holds, space-joined."""
    got = _tokenizer()(textsearch.segment_for_index(text).encode(), apsw.FTS5_TOKENIZE_DOCUMENT, None,
                       include_offsets=False, include_colocated=False)
    # without offsets or colocated tokens apsw returns the tokens alone
    return [w for w in got if isinstance(w, str)]


def query_words(term: str) -> list[str]:
    """The tokens FTS5 makes of one query term (a word, or a CJK run), as the index's MATCH does."""
    got = _tokenizer()(textsearch.segment_for_index(term).encode(), apsw.FTS5_TOKENIZE_QUERY, None,
                       include_offsets=False, include_colocated=False)
    # without offsets or colocated tokens apsw returns the tokens alone
    return [w for w in got if isinstance(w, str)]


# Any: lancedb's FTS config (no stubs)
def _fts_config() -> Any:
    """The full-text index on ``words``: the tokens are FTS5's already (lower-cased, folded, stemmed),
    so LanceDB only splits them at the spaces and keeps every one (no stemming, stop words or length
    limit of its own)."""
    from lancedb.index import FTS

    return FTS(base_tokenizer="whitespace", lower_case=False, stem=False, remove_stop_words=False,
               ascii_folding=False, max_token_length=None)


def is_export_table(table: Any, name: str) -> bool:
    """Whether the LanceDB table ``name`` (``chunks`` or ``terms``) was written by an export: our
    marker in its schema metadata (an export before the marker was put on ``terms``: its counts)."""
    md = table.schema.metadata or {}
    return MARK in md or (name == TERMS and b"memory_core.n_chunks" in md)


def _tables(db: Any) -> list[str]:
    res = db.list_tables()
    return list(getattr(res, "tables", res))


