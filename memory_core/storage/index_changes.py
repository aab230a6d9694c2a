"""The index's own change log: which chunk rows each incremental run removed and added, so that a
long-lived reader (the MCP server, ``watch``, the sync triggers) brings what it keeps in memory up
to date by the change instead of reading it all again.

A reader keeps, per opened index, every chunk's sign-bit code (:class:`memory_core.storage.vectors.BitIndex`,
192 MB at 1M x 1536) and the term frequencies of the common words its queries used
(:class:`memory_core.query.retrieval._Postings`). Before this log, every run that changed the
index made the next query read them all again: after a 0.1% change at 200k chunks the next
queries took 300-480 ms where a warm reader answers in 27 ms (issue 25).

One row per incremental run (in place or on a copy of the live file), written in the run's own
transaction, so the log and the rows it describes are committed together or not at all:

* ``before`` / ``after``: :func:`meta_digest` of the index's meta record before and after the run
  (every run that changes the index writes a new meta, ``built_at``);
* ``deleted``: the chunk row ids the run removed (little-endian int64);
* ``added_from``: the first row id the run could add; in the state right after the run the rows
  from it up are exactly the ones it added (a new row's id is one more than the highest in the file,
  so it is above every row the run found; an id can come back only there).

A full build starts a new file without a log: its readers read everything. The log keeps the
last :data:`KEEP` runs; a reader further behind reads everything.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import apsw
import numpy as np

TABLE = "index_changes"
KEEP = 32
META_KEY = "memory_index_meta_v1"  # store.META_KEY (kept here so readers need not import the writer)

_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS {TABLE} (
  seq INTEGER PRIMARY KEY,
  before TEXT NOT NULL,
  after TEXT NOT NULL,
  deleted BLOB NOT NULL,
  added_from INTEGER NOT NULL
)"""


def meta_digest(conn: apsw.Connection) -> str:
    """The digest of the index's meta record as ``conn`` sees it ("" hashed when there is none)."""
    try:
        row = conn.execute("SELECT value FROM meta WHERE key = ?", (META_KEY,)).fetchone()
    except apsw.SQLError:
        row = None
    return hashlib.sha256((row[0] if row else "").encode()).hexdigest()


def record(conn: apsw.Connection, before: str, deleted: np.ndarray, added_from: int) -> None:
    """Log one run (inside its open transaction, after its meta is written)."""
    after = meta_digest(conn)
    if after == before:
        return  # nothing a reader keeps is told apart by this state: it must not be logged as a change
    conn.execute(_SCHEMA)
    conn.execute(f"INSERT INTO {TABLE}(before, after, deleted, added_from) VALUES(?,?,?,?)",
                 (before, after, np.unique(np.asarray(deleted, dtype="<i8")).tobytes(), int(added_from)))
    conn.execute(f"DELETE FROM {TABLE} WHERE seq <= (SELECT max(seq) FROM {TABLE}) - ?", (KEEP,))


@dataclass(frozen=True)
class Delta:
    """What changed in the chunk rows between two states of one index: the rows ``deleted`` (sorted
    ids; some may have come back as new rows) and every row now at or above ``added_from`` is new."""

    deleted: np.ndarray
    added_from: int


def since(conn: apsw.Connection, before: str, now: str) -> Delta | None:
    """The change from the state ``before`` to the state ``now`` (both :func:`meta_digest`), read in
    ``conn``'s current transaction; None when the log does not link them (a full build since, a
    reader further behind than the log keeps, an index written before the log)."""
    if before == now:
        return Delta(np.zeros(0, dtype=np.int64), 1 << 62)
    try:
        rows = conn.execute(f"SELECT before, after, deleted, added_from FROM {TABLE} WHERE seq >="
                            f" (SELECT max(seq) FROM {TABLE} WHERE before = ?) ORDER BY seq", (before,)).fetchall()
    except apsw.SQLError:
        return None  # no log in this file
    state = before
    deleted: list[np.ndarray] = []
    added_from: int | None = None
    for b, a, d, f in rows:
        if b != state or not isinstance(a, str) or not isinstance(d, bytes) or not isinstance(f, int):
            return None
        deleted.append(np.frombuffer(d, dtype="<i8"))
        added_from = f if added_from is None else min(added_from, f)
        state = a
    if state != now or added_from is None:
        return None
    return Delta(np.unique(np.concatenate(deleted)).astype(np.int64), added_from)
