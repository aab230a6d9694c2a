"""``memory-core export``: the index's chunks as Parquet or JSON Lines, for data tools.

One row per chunk::

    id          string      not null   chunk id (as in the index)
    path        string      not null   indexed path, e.g. memory/2026-11-02.md or sessions/abc.jsonl
    source      string      not null   "memory" or "sessions"
    start_line  int32       not null   1-based, inclusive
    end_line    int32       not null   1-based, inclusive
    text        string      not null   the chunk text (transcripts: redacted as indexed)
    model       string      not null   embedding model ("none" in keyword-only indexes)
    vector      fixed_size_list<float32>[dims]   the embedding (cosine space, not normalised);
                list<float32>, all null, in keyword-only indexes

The export reads a read-only snapshot of the live index (a reindex that swaps a new file in
does not disturb it) and streams: rows are fetched and written one row group at a time
(about 32 MiB), so memory stays flat in the index size. Parquet is zstd-compressed, carries
the provider, model and dims in its schema metadata, and is written to a temp file that is
renamed into place, so a failed export leaves no partial file. The file is private (0600),
like the index: it holds the memory's text.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import stat
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal, TextIO

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from memory_core.embeddings.base import CHARS_PER_TOKEN, DEFAULT_CHUNK_TOKENS
from memory_core.errors import IndexDamagedError, RunCancelled, RunError, UsageError
from memory_core.index.run_stops import stops_held
from memory_core.storage.indexmeta import IndexRecord, newer_error, newer_writer
from memory_core.storage.store import (
    SQLITE_SIDECARS,
    connect_reader,
    has_table,
    load_vec,
    lstat_unless_link,
    read_meta,
    require_index,
    safe_open,
)

ExportFormat = Literal["parquet", "jsonl"]
FORMATS: tuple[str, ...] = ("parquet", "jsonl")
EXPORT_VERSION = 1
TARGET_GROUP_BYTES = 32 * 1024 * 1024
MIN_GROUP_ROWS, MAX_GROUP_ROWS = 1024, 65536
TEXT_BYTES_ESTIMATE = DEFAULT_CHUNK_TOKENS * CHARS_PER_TOKEN  # a default chunk: 400 tokens of 4 characters
COLUMNS = ("id", "path", "source", "start_line", "end_line", "text", "model")


class ExportStopped(RunError):
    """An export stopped by SIGTERM (a cron or systemd timeout, ``kill``): its output was left as it
    was, its temp file or staging folder removed on the way out; or, once the export had published
    (its ``command_done`` says what), the new export is in place."""


class ExportStops:
    """What a stop of an export says: ``done`` is set (:meth:`published`) once the new export is in
    place, and a stop after that carries it as ``command_done`` (the CLI says ``interrupted after
    <done>``, or ``stopped by SIGTERM after <done>``), not that the output was left as it was."""

    def __init__(self, target: str) -> None:
        self.target = target
        self.done: str | None = None

    def published(self, what: str) -> None:
        self.done = f"publishing the export at {self.target} ({what})"

    def sigterm(self) -> ExportStopped:
        if self.done is None:
            return ExportStopped(f"stopped by SIGTERM; {self.target} was left as it was")
        exc = ExportStopped("stopped by SIGTERM")
        exc.command_done = self.done  # type: ignore[attr-defined]
        return exc


STOPS = (KeyboardInterrupt, ExportStopped, RunCancelled)
"""The stops of an export: Ctrl-C, its own SIGTERM, and the SIGTERM of a caller that handles it."""


@contextlib.contextmanager
def sigterm_stops(target: str) -> Iterator[ExportStops]:
    """SIGTERM ends the export like Ctrl-C: an :class:`ExportStopped` unwinds the stack, so the
    ``finally`` blocks remove the temp file (which holds the memory's text) or the staging folder.
    Main thread only, and only where nobody else handles SIGTERM (a Prefect flow run has its own).
    A stop that comes once the export has published (:meth:`ExportStops.published`) leaves with
    ``command_done``: a stop right after the replace or the swap said the output was left as it
    was, though the new export was in place (docs/reliability.md, E1 and E2)."""
    stops = ExportStops(target)
    try:
        if threading.current_thread() is not threading.main_thread() or \
                signal.getsignal(signal.SIGTERM) not in (signal.SIG_DFL, None):
            yield stops
            return

        def stop(signum: int, frame: object) -> None:
            raise stops.sigterm()

        previous = signal.signal(signal.SIGTERM, stop)
        try:
            yield stops
        finally:
            signal.signal(signal.SIGTERM, previous)
    except STOPS as exc:
        if stops.done is not None and getattr(exc, "command_done", None) is None:
            if isinstance(exc, ExportStopped):  # not its "left as it was"
                raise stops.sigterm() from exc
            exc.command_done = stops.done  # type: ignore[union-attr]
        raise


def export_schema(dims: int | None, *, vectors: bool = True, metadata: dict[str, str] | None = None) -> pa.Schema:
    fields = [
        pa.field("id", pa.string(), nullable=False),
        pa.field("path", pa.string(), nullable=False),
        pa.field("source", pa.string(), nullable=False),
        pa.field("start_line", pa.int32(), nullable=False),
        pa.field("end_line", pa.int32(), nullable=False),
        pa.field("text", pa.string(), nullable=False),
        pa.field("model", pa.string(), nullable=False),
    ]
    if vectors:
        fields.append(pa.field("vector", pa.list_(pa.float32(), dims) if dims else pa.list_(pa.float32())))
    return pa.schema(fields, metadata=metadata)


def rows_per_group(dims: int | None, *, vectors: bool = True) -> int:
    per_row = TEXT_BYTES_ESTIMATE + (4 * dims if (vectors and dims) else 0)
    return max(MIN_GROUP_ROWS, min(MAX_GROUP_ROWS, TARGET_GROUP_BYTES // per_row))


@dataclass
class ExportSummary:
    path: str
    format: str
    rows: int
    dims: int | None
    vectors: bool
    row_groups: int
    bytes: int
    seconds: float
    provider: str | None = None
    model: str | None = None

    def to_dict(self) -> dict[str, object]:
        return asdict(self)

    def line(self) -> str:
        vec = f"{self.dims}-d vectors" if (self.vectors and self.dims) else "no vectors"
        size = f", {_human_size(self.bytes)}" if self.bytes else ""
        return f"exported {self.rows} chunks ({vec}) to {self.path} as {self.format}{size} in {self.seconds:.2f}s"


def _human_size(n: float) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"  # pragma: no cover


class _Snapshot:
    """A read-only connection to the live index file as it is now."""

    def __init__(self, index_path: Path) -> None:
        index_path = Path(index_path)
        require_index(index_path)
        self.conn = connect_reader(index_path)
        # one read transaction for the meta and every row: a small reindex that updates the
        # file in place waits for it (briefly), then builds a new file instead
        self.conn.execute("BEGIN")
        self.meta = read_meta(self.conn) or {}  # as stored: the LanceDB export carries it along
        if (newer := newer_writer(self.meta)) is not None:  # its layout may not be what we read
            self.conn.close()
            raise newer_error(index_path, newer)
        self.record = IndexRecord.from_meta(self.meta) or IndexRecord()
        self.vec_table = has_table(self.conn, "chunks_vec")
        self.vec = self.vec_table and load_vec(self.conn)
        dims = self.record.dims
        if not dims:  # keyword-only index; older files may still carry vectors
            row = self.conn.execute(
                "SELECT length(embedding) FROM chunks WHERE embedding IS NOT NULL LIMIT 1").fetchone()
            dims = row[0] // 4 if row else None
        self.dims: int | None = int(dims) if dims else None

    def metadata(self) -> dict[str, str]:
        r = self.record
        out = {"memory_core.export_version": str(EXPORT_VERSION), "memory_core.provider": str(r.provider),
               "memory_core.model": str(r.model), "memory_core.dims": str(self.dims or ""),
               "memory_core.distance": "cosine",
               "memory_core.built_at": str(r.built_at) if r.built_at is not None else "",
               "memory_core.exported_at": str(int(time.time() * 1000))}
        return out

    def rows(self, *, vectors: bool) -> Iterator[tuple[Any, ...]]:
        cols = ", ".join(f"c.{c}" for c in COLUMNS)
        if not vectors:
            yield from self.conn.execute(f"SELECT {cols} FROM chunks c ORDER BY c.rid")
        elif self.vec:  # vectors live in chunks_vec (or, in indexes of schema 1, in both)
            yield from self.conn.execute(f"SELECT {cols}, coalesce(c.embedding, v.embedding) FROM chunks c"
                                         " LEFT JOIN chunks_vec v ON v.rowid = c.rid ORDER BY c.rid")
        elif self.vec_table and self.dims and self.record.vector_store == "vec0":
            raise UsageError("this index keeps its vectors in sqlite-vec's vec0 table, which cannot be loaded"
                             " here; export without vectors (--no-vectors) or where sqlite-vec loads")
        else:
            yield from self.conn.execute(f"SELECT {cols}, c.embedding FROM chunks c ORDER BY c.rid")

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.conn.close()


def _vector_array(blobs: list[bytes | None], dims: int | None) -> pa.Array:
    n = len(blobs)
    if not dims:
        return pa.nulls(n, type=pa.list_(pa.float32()))
    width = dims * 4
    zero = bytes(width)
    valid = [b is not None for b in blobs]
    for b in blobs:
        if b is not None and len(b) != width:
            raise IndexDamagedError(f"a vector in the index has {len(b) // 4} dims, expected {dims};"
                                    " rebuild it with `memory-core index --full`")
    data = b"".join(b if b is not None else zero for b in blobs)
    values = pa.array(np.frombuffer(data, dtype="<f4").astype(np.float32, copy=False), type=pa.float32())
    typ = pa.list_(pa.float32(), dims)
    if all(valid):
        return pa.FixedSizeListArray.from_arrays(values, type=typ)
    bitmap = pa.array(valid, type=pa.bool_()).buffers()[1]
    return pa.Array.from_buffers(typ, n, [bitmap], children=[values])


def iter_export_batches(index_path: Path, *, vectors: bool = True,
                        batch_rows: int | None = None) -> Iterator[pa.RecordBatch]:
    """The chunks of the index at ``index_path`` as record batches of :func:`export_schema`."""
    snap = _Snapshot(index_path)
    try:
        yield from _batches(snap, vectors=vectors, batch_rows=batch_rows)
    finally:
        snap.close()


def _batches(snap: _Snapshot, *, vectors: bool, batch_rows: int | None) -> Iterator[pa.RecordBatch]:
    schema = export_schema(snap.dims, vectors=vectors)
    size = batch_rows or rows_per_group(snap.dims, vectors=vectors)
    buf: list[tuple[Any, ...]] = []

    def make() -> pa.RecordBatch:
        cols = list(zip(*buf, strict=True))
        arrays: list[pa.Array] = [
            pa.array(cols[0], pa.string()), pa.array(cols[1], pa.string()), pa.array(cols[2], pa.string()),
            pa.array(cols[3], pa.int32()), pa.array(cols[4], pa.int32()), pa.array(cols[5], pa.string()),
            pa.array(cols[6], pa.string()),
        ]
        if vectors:
            arrays.append(_vector_array(list(cols[7]), snap.dims))
        return pa.RecordBatch.from_arrays(arrays, schema=schema)

    for row in snap.rows(vectors=vectors):
        buf.append(row)
        if len(buf) >= size:
            yield make()
            buf.clear()
    if buf:
        yield make()


def _temp_beside(path: Path) -> Path:
    return path.with_name(f".{path.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}")


def _create_private(path: Path) -> None:
    os.close(safe_open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, what="export temp file"))


def _is_our_export(path: Path, fd: int) -> bool:
    """Whether the regular file open as ``fd`` is an earlier export: Parquet with our schema
    metadata, or JSON Lines whose first line is a record with our columns."""
    head = os.pread(fd, 4, 0)
    if head == b"PAR1":
        try:
            return "memory_core.export_version" in read_parquet_metadata(path)
        except Exception:  # not a readable Parquet file: not ours
            return False
    first = os.pread(fd, 1 << 20, 0).split(b"\n", 1)[0]
    try:
        rec = json.loads(first)
    except (ValueError, RecursionError):
        return False
    return isinstance(rec, dict) and set(COLUMNS) <= set(rec)


def _check_output(out: Path, index_path: Path, protect: tuple[Path, ...], force: bool) -> None:
    """Refuse an output path whose file must not be replaced.

    Never replaced: a symlink, anything but a regular file (a device, a FIFO), the index, its
    journals, its lock and the embedding cache (by file identity, whatever the name). An existing
    regular file is replaced only when it is an earlier export, or with ``force``."""
    # (PathError and UnsafePathError are UsageErrors: exit status 2)
    st = lstat_unless_link(out, cannot=f"cannot write {out}", link=f"refusing to write {out}: it is a symbolic link")
    if st is None:
        return
    if stat.S_ISDIR(st.st_mode):
        raise UsageError(f"{out} is a directory; give a file name")
    if not stat.S_ISREG(st.st_mode):
        raise UsageError(f"refusing to write {out}: it is not a regular file")
    idx = os.fspath(index_path)
    ours = [idx, *(idx + s for s in SQLITE_SIDECARS), idx + ".lock", *map(os.fspath, protect)]
    for q in ours:
        with contextlib.suppress(OSError):
            o = os.stat(q)
            if (o.st_dev, o.st_ino) == (st.st_dev, st.st_ino):
                raise UsageError(f"refusing to write {out}: it is memory-core's own file ({q})")
    if force:
        return
    try:
        fd = os.open(out, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise UsageError(f"cannot read {out}: {exc.strerror or exc}") from None
    try:
        mine = _is_our_export(out, fd)
    finally:
        os.close(fd)
    if not mine:
        raise UsageError(f"refusing to replace {out}: it exists and is not an earlier export"
                         " (give another name, or --force to replace it)")


def export_index(index_path: Path, output: str | os.PathLike[str], fmt: ExportFormat = "parquet", *,
                 vectors: bool = True, batch_rows: int | None = None, stdout: TextIO | None = None,
                 force: bool = False, protect: tuple[Path, ...] = ()) -> ExportSummary:
    """Write every chunk of the index to ``output`` (``"-"``: stdout, JSON Lines only).

    An existing ``output`` is replaced only when it is an earlier export (or with ``force``),
    and never when it is the index, its journals or lock, or a file in ``protect`` (the cache)."""
    if fmt not in FORMATS:
        raise UsageError(f"unknown export format {fmt!r}; choose one of {', '.join(FORMATS)}")
    to_stdout = os.fspath(output) == "-"
    if to_stdout and fmt == "parquet":
        raise UsageError("Parquet cannot be written to stdout; give a file name (or use --format jsonl)")
    t0 = time.perf_counter()
    snap = _Snapshot(Path(index_path))
    try:
        # the summary's "vectors": whether the rows carry vectors (a keyword-only index's column is all null)
        has_vectors = vectors and snap.dims is not None
        if to_stdout:
            rows, groups = _write_jsonl(snap, stdout or sys.stdout, vectors=vectors, batch_rows=batch_rows)
            return ExportSummary(path="-", format=fmt, rows=rows, dims=snap.dims, vectors=has_vectors, row_groups=groups,
                                 bytes=0, seconds=round(time.perf_counter() - t0, 3),
                                 provider=snap.record.provider, model=snap.record.model)
        out = Path(os.path.abspath(os.path.expanduser(os.fspath(output))))
        if not out.parent.is_dir():
            raise UsageError(f"directory not found: {out.parent}")
        _check_output(out, Path(os.path.abspath(index_path)), protect, force)
        tmp = _temp_beside(out)
        with sigterm_stops(str(out)) as stops:  # a SIGTERM unwinds to the finally below: no temp file is left
            try:
                _create_private(tmp)
                if fmt == "parquet":
                    rows, groups = _write_parquet(snap, tmp, vectors=vectors, batch_rows=batch_rows)
                else:
                    with open(tmp, "w", encoding="utf-8", newline="\n") as fh:
                        rows, groups = _write_jsonl(snap, fh, vectors=vectors, batch_rows=batch_rows)
                with stops_held():  # a stop in the replace comes after it, and says the file is in place
                    os.replace(tmp, out)
                    stops.published("the new export is in place")
            except OSError as exc:
                raise UsageError(f"cannot write {out}: {exc.strerror or exc}") from None
            finally:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp)
            return ExportSummary(path=str(out), format=fmt, rows=rows, dims=snap.dims, vectors=has_vectors,
                                 row_groups=groups,
                                 bytes=out.stat().st_size, seconds=round(time.perf_counter() - t0, 3),
                                 provider=snap.record.provider, model=snap.record.model)
    finally:
        snap.close()


def _write_parquet(snap: _Snapshot, path: Path, *, vectors: bool, batch_rows: int | None) -> tuple[int, int]:
    schema = export_schema(snap.dims, vectors=vectors, metadata=snap.metadata())
    size = batch_rows or rows_per_group(snap.dims, vectors=vectors)
    rows = groups = 0
    with pq.ParquetWriter(
        str(path), schema, compression="zstd" if pa.Codec.is_available("zstd") else "snappy",
        use_dictionary=["path", "source", "model"],
        write_statistics=["id", "path", "source", "start_line", "end_line", "model"],
    ) as writer:
        for batch in _batches(snap, vectors=vectors, batch_rows=size):
            writer.write_batch(batch, row_group_size=size)
            rows += batch.num_rows
            groups += 1
    return rows, groups


def _write_jsonl(snap: _Snapshot, fh: TextIO, *, vectors: bool, batch_rows: int | None) -> tuple[int, int]:
    """One JSON object per line with the Parquet columns; ``vector`` is a list of numbers or null."""
    rows = 0
    size = batch_rows or rows_per_group(snap.dims, vectors=vectors)
    width = 4 * (snap.dims or 0)
    lines: list[str] = []
    for row in snap.rows(vectors=vectors):
        rec: dict[str, Any] = dict(zip(COLUMNS, row[:7], strict=True))
        if vectors:
            blob = row[7]
            if blob is not None and len(blob) != width:
                raise IndexDamagedError(f"a vector in the index has {len(blob) // 4} dims, expected {snap.dims};"
                                        " rebuild it with `memory-core index --full`")
            rec["vector"] = None if blob is None else np.frombuffer(blob, dtype="<f4").tolist()
        lines.append(json.dumps(rec, ensure_ascii=False))
        rows += 1
        if len(lines) >= size:
            fh.write("\n".join(lines) + "\n")
            lines.clear()
    if lines:
        fh.write("\n".join(lines) + "\n")
    fh.flush()
    return rows, 0


def read_parquet_metadata(path: str | os.PathLike[str]) -> dict[str, str]:
    """The ``memory_core.*`` schema metadata of an exported Parquet file."""
    md = pq.read_schema(path).metadata or {}
    return {k.decode(): v.decode() for k, v in md.items() if k.startswith(b"memory_core.")}
