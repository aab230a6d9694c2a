"""Past one machine: the index exported to a LanceDB table (``memory-core export --format lancedb URI``).

The index's chunks (the columns of :mod:`memory_core.export.files`, plus each file's ``mtime``
and the chunk's ``date``) go to the table ``chunks`` of the LanceDB database at ``URI``: a local
folder, or object storage (``s3://bucket/path``, ``gs://...``, ``az://...``; credentials as
LanceDB reads them), which many machines can query at once. With it: a column ``words`` (the
chunk's tokens as the index's FTS5 holds them: Porter stems) and its full-text index, a B-tree on ``id``, and a ``terms`` table of each word's document frequency (the table
format: :mod:`memory_core.storage.lancedb`). In a local folder both tables are built whole in a
staging folder and renamed into place (:func:`_swap`): a reader sees the old or the new export,
never a mix or a table without its index, and a stopped export leaves the old one as it was. On
object storage they are replaced in place and the previous export stays readable as the tables'
earlier versions until the new one is whole (:func:`_prune`). Its searcher:
:mod:`memory_core.query.lancedb`.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import time
import uuid
import warnings
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memory_core.errors import IndexLockedError, UsageError
from memory_core.query.retrieval import background_of

if TYPE_CHECKING:
    from memory_core.export.files import ExportSummary, _Snapshot

from memory_core.storage.lancedb import (
    EXPORT_ID,
    MARK,
    TABLE,
    TERMS,
    WORDS,
    _fts_config,
    _lancedb,
    _tables,
    index_words,
    is_export_table,
)
from memory_core.storage.store import IndexLock, has_table, open_lock_file, require_index


def _said(conn: Any, ids: list[str]) -> dict[str, str]:
    """Each of these transcript chunks' earliest message time (``YYYY-MM-DDTHH:MM`` UTC), by chunk
    id, from the index's ``chunk_days`` (schema 6; an older index has none: such a chunk is dated by
    its file's mtime, as before)."""
    if not ids or not has_table(conn, "chunk_days"):
        return {}
    out: dict[str, str] = {}
    for k in range(0, len(ids), 500):
        part = ids[k:k + 500]
        for cid, first in conn.execute(
                "SELECT c.id, min(d.first) FROM chunks c JOIN chunk_days d ON d.rid = c.rid"
                f" WHERE c.id IN ({','.join('?' * len(part))}) GROUP BY c.id", part):
            out[str(cid)] = str(first)
    return out


def export_lancedb(index_path: Path, uri: str, *, force: bool = False, vectors: bool = True,
                   batch_rows: int | None = None, wait: bool = True, timeout_s: float = 600.0) -> ExportSummary:
    """Write the index at ``index_path`` to the LanceDB database ``uri``; returns an
    :class:`memory_core.export.files.ExportSummary`. An existing ``chunks`` or ``terms`` table is
    replaced only when it is an earlier export (or with ``force``). ``vectors=False`` leaves out the
    vector column (its searcher then answers keyword-only).

    A local folder: both tables are built whole (rows, full-text index, B-trees) in a staging
    folder inside it, then renamed into place (:func:`_swap`), so a reader sees the old export or
    the new one, and a stopped or failed export leaves the old one as it was (a stop once the
    renames are done says the new export is live: ``command_done``). Object storage has
    no rename: the tables are replaced in place, one Lance version after another, and the earlier
    versions are removed only once the new export is whole, so a reader in between (or after a
    stopped export) opens the previous export's versions
    (:class:`memory_core.query.lancedb.LanceSearcher`).

    One export at a time per local folder (:class:`ExportLock`, held from before the index is read
    until the tables are in place): another export of the folder waits for it (``wait``, at most
    ``timeout_s``: the settings' ``lock.wait`` and ``lock.timeout_s``, as the index's writer lock)
    or fails at once naming it (:class:`memory_core.errors.IndexLockedError`, exit 1)."""
    from memory_core.export.files import ExportSummary, _Snapshot, sigterm_stops

    lancedb = _lancedb()
    local = "://" not in uri
    if local:
        uri = os.path.abspath(os.path.expanduser(uri))
        if Path(uri).resolve() == Path(index_path).resolve().parent or Path(uri).is_file():
            raise UsageError(f"{uri} is not a folder for a LanceDB database")
    require_index(Path(index_path))  # before the folder and its lock are made
    t0 = time.perf_counter()
    # a stop once the new tables are in place says so (``command_done``), not "left as it was"
    with sigterm_stops(uri) as stops, (ExportLock(Path(uri), wait=wait, timeout_s=timeout_s) if local
                                       else contextlib.nullcontext()):
        # under the lock: the index as it is once the export before this one is done
        snap = _Snapshot(Path(index_path))
        try:
            db = lancedb.connect(uri)
            if not force:  # both tables are replaced: neither may be a user's own
                for name in (TABLE, TERMS):
                    if name in _tables(db) and not is_export_table(db.open_table(name), name):
                        raise UsageError(f"{uri} already has a table {name!r} that is not a memory-core export;"
                                         " use --force to replace it")
            if local:
                root = Path(uri)
                _remove_stale(root)
                staging = root / f"{STAGING_PREFIX}{os.getpid()}-{uuid.uuid4().hex[:8]}"
                try:
                    n = _write_tables(lancedb.connect(str(staging)), snap, vectors=vectors, batch_rows=batch_rows)
                    _swap(staging, root, lambda: stops.published("the new export is live"))
                finally:
                    shutil.rmtree(staging, ignore_errors=True)
            else:
                n = _write_tables(db, snap, vectors=vectors, batch_rows=batch_rows)
            dims = snap.dims
            size = sum(f.stat().st_size for f in Path(uri).rglob("*") if f.is_file() and f.name != EXPORT_LOCK) if local else 0
            return ExportSummary(path=uri, format="lancedb", rows=n, dims=dims, vectors=vectors and bool(dims),
                                 row_groups=0, bytes=size, seconds=round(time.perf_counter() - t0, 3),
                                 provider=snap.record.provider, model=snap.record.model)
        finally:
            snap.close()


EXPORT_LOCK = ".export.lock"
"""The lock file of a local export folder, inside it (:class:`ExportLock`)."""


class ExportLock(IndexLock):
    """One export at a time into a local LanceDB folder: the index's writer lock
    (:class:`memory_core.storage.store.IndexLock`: an exclusive ``flock``, which the kernel drops
    when its process dies; a second export waits up to ``timeout_s`` or, with ``wait=False``, fails
    at once, naming the holder) on :data:`EXPORT_LOCK` inside the folder. Two exports at once
    swapped their tables in turn: one failed (``No such file or directory (.../terms.lance)``), or
    both finished with ``chunks`` of one and ``terms`` of the other, and every search of the
    folder was ``incomplete``. The lock file is refused when it is a symlink or not a regular file,
    as every lock of memory-core (:func:`memory_core.storage.store.open_lock_file`)."""

    def __init__(self, root: Path, *, wait: bool = True, timeout_s: float = 600.0) -> None:
        super().__init__(root, wait=wait, timeout_s=timeout_s)
        self.path = root / EXPORT_LOCK

    def _prepare(self) -> None:
        try:
            self.index_path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UsageError(f"cannot use {self.index_path} as a LanceDB folder: {exc.strerror or exc}") from None

    def _open(self) -> int:
        return open_lock_file(self.path, "LanceDB export")

    def _busy(self, holder: str, how: str) -> IndexLockedError:
        return IndexLockedError(f"another export is writing {self.index_path} ({holder}){how}")


def _write_tables(db: Any, snap: _Snapshot, *, vectors: bool, batch_rows: int | None) -> int:
    """Write both tables of the export of ``snap`` to the LanceDB database ``db``, with their
    indexes; returns the number of chunks. Both carry the same ``memory_core.export_id``, by which
    a reader knows it holds the two tables of one export."""
    import pyarrow as pa

    from memory_core.export.files import _batches, export_schema
    from memory_core.query.dates import chunk_date

    mtimes = dict(snap.conn.execute("SELECT path, mtime FROM files"))
    dims = snap.dims
    with_vectors = vectors and bool(dims)
    export_id = uuid.uuid4().hex
    meta = {**snap.metadata(), MARK.decode(): "1", EXPORT_ID: export_id,
            "memory_core.meta": json.dumps(snap.meta, default=str)}
    base = _batches(snap, vectors=with_vectors, batch_rows=batch_rows)
    schema = export_schema(dims, vectors=with_vectors)
    schema = (schema.append(pa.field("mtime", pa.int64())).append(pa.field("date", pa.string()))
              .append(pa.field(WORDS, pa.string())).with_metadata(meta))
    df: Counter[str] = Counter()
    n = 0

    def batches() -> Iterator[pa.RecordBatch]:
        nonlocal n
        for b in base:
            cols = b.to_pydict()
            mt = [mtimes.get(p) for p in cols["path"]]
            said = _said(snap.conn, [i for i, s in zip(cols["id"], cols["source"], strict=True) if s == "sessions"])
            dt = [said.get(i) or chunk_date(p, s, a, e, m) for i, p, s, a, e, m in
                  zip(cols["id"], cols["path"], cols["source"], cols["start_line"], cols["end_line"], mt, strict=True)]
            words = [index_words(text) for text in cols["text"]]
            for w in words:
                df.update(set(w))
            n += b.num_rows
            yield pa.RecordBatch.from_arrays(
                [*b.columns, pa.array(mt, pa.int64()), pa.array(dt, pa.string()),
                 pa.array([" ".join(w) for w in words], pa.string())],
                schema=schema)

    reader = pa.RecordBatchReader.from_batches(schema, batches())
    table = db.create_table(TABLE, data=reader, mode="overwrite")
    if n:
        table.create_index(WORDS, config=_fts_config(), replace=True)
        table.create_scalar_index("id", replace=True)
    # the embedded index's own background, so the export calibrates as it does
    bg = background_of(snap.conn) if with_vectors else None
    terms = pa.table({"term": pa.array(list(df), pa.string()), "df": pa.array(list(df.values()), pa.int64())},
                     schema=pa.schema([("term", pa.string()), ("df", pa.int64())],
                                      metadata={MARK.decode(): "1", EXPORT_ID: export_id,
                                                "memory_core.n_chunks": str(n),
                                                "memory_core.background_cosine": json.dumps(bg)}))
    tt = db.create_table(TERMS, data=terms, mode="overwrite")  # last: its export id completes the export
    if len(df):
        tt.create_scalar_index("term", replace=True)
    for t in (table, tt):
        _prune(t)
    return n


def _prune(table: Any) -> None:
    """Remove every version of ``table`` but the latest: an overwrite keeps the earlier rows on disk
    as older versions (text deleted or masked since, readable by anyone who can read the folder or
    bucket). A staged table's earlier versions are only the steps of its build; in place (object
    storage) they are the previous export, and a reader still on it reopens the tables."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "removes every version except the latest": the point
        table.optimize(cleanup_older_than=timedelta(0))


STAGING_PREFIX = ".export-"
"""The staging folder of an export under way, inside the export's folder: ``.export-PID-xxxxxxxx``."""
ASIDE_PREFIX = ".replaced-"
"""The previous export's tables, moved aside by :func:`_swap` and then removed."""


def _swap(staging: Path, root: Path, published: Callable[[], None] = lambda: None) -> None:
    """Rename the staged tables over the live ones (``terms``, then ``chunks``; each one rename,
    the previous one moved aside first and removed after). A reader that opens the tables in
    between sees two export ids and opens them again. Ctrl-C and SIGTERM wait for the renames,
    and for the removal of the previous tables; ``published`` is called once both renames are
    done, before a stop that came in them is delivered (which then says the new export is live)."""
    from memory_core.index.run_stops import stops_held

    aside = root / f"{ASIDE_PREFIX}{os.getpid()}-{uuid.uuid4().hex[:8]}"
    aside.mkdir()
    try:
        with stops_held():
            for name in (TERMS, TABLE):
                live = root / f"{name}.lance"
                if live.exists() or live.is_symlink():
                    os.rename(live, aside / live.name)
                os.rename(staging / live.name, live)
            published()
    finally:
        with stops_held():  # a stop here left the previous export's text behind until the next export
            shutil.rmtree(aside, ignore_errors=True)  # the previous export, its every version with it


def _remove_stale(root: Path) -> None:
    """Remove the staging and aside folders of exports that were killed (their process is gone)."""
    for p in (*root.glob(f"{STAGING_PREFIX}*"), *root.glob(f"{ASIDE_PREFIX}*")):
        try:
            pid = int(p.name.split("-")[1])
        except (IndexError, ValueError):
            continue
        if pid != os.getpid() and not _alive(pid):
            shutil.rmtree(p, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's: alive
        return True
    return True
