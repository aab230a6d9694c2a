"""The temp index written by a child process, so SQLite runs beside the run's Python work.

A big build spends about as long in SQLite (FTS5 tokenising, B-tree and vec0 inserts) as in
Python (reading, chunking, hashing, embedding, the cache). In one process they cannot overlap:
apsw releases the GIL while SQLite works, but the inserting thread needs the GIL back for
every row, and a busy Python thread holds it for up to the switch interval each time
(measured: an insert thread ran 2.5-2.9x slower beside one busy Python thread). A child
process has its own interpreter, so both cores work.

:class:`ProcessIndexWriter` has the methods of :class:`memory_core.store.IndexWriter` that a
build uses. Edits are sent without waiting (the socket's buffer and the child's pace are the
back-pressure); ``verify``, ``prepare`` and ``abort`` wait for the child and raise the first
error it met. The child commits and syncs the temp file; this process renames it over the
live index (so the ``before-swap`` / ``after-swap`` crash points are where they always were).
If this process dies, the child reads end-of-file, deletes the temp file and exits; a child
that dies is reported as a :class:`RunError` and its temp file is removed here.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
from collections.abc import Iterable, Sequence
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from memory_core.errors import RunError
from memory_core.failpoints import failpoint
from memory_core.store import FileRow, IndexWriter, publish_temp

_ENV_FAILPOINT = "MEMORY_CORE_FAILPOINT"


class ProcessIndexWriter:
    """An :class:`IndexWriter` in a child process (same use: ``with``, edits, verify, swap)."""

    def __init__(self, live_path: Path, *, full: bool, dims: int | None, use_vec: bool = True) -> None:
        self.live_path = Path(live_path)
        self.full = full or not self.live_path.exists()
        self.dims = dims
        self._use_vec = use_vec
        self.vec = False
        self.swapped = False
        self.tmp_path: Path | None = None
        self._conn: Connection | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._inserted = 0
        self._failpoint_build = os.environ.get(_ENV_FAILPOINT) == "build"

    # -- lifecycle ------------------------------------------------------------------------
    def __enter__(self) -> ProcessIndexWriter:
        self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        if not self.swapped:
            self.abort()

    def open(self) -> None:
        parent, child = socket.socketpair()
        env = {k: v for k, v in os.environ.items() if k != _ENV_FAILPOINT}  # crash points fire here, not there
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "memory_core.writer_proc", str(child.fileno())],
                pass_fds=(child.fileno(),), env=env, stdin=subprocess.DEVNULL,
            )
        except OSError as exc:
            parent.close()
            raise RunError(f"cannot start the index writer process: {exc.strerror or exc}") from exc
        finally:
            child.close()
        self._conn = Connection(parent.detach())
        self._send("open", str(self.live_path), self.full, self.dims, self._use_vec)

    def _send(self, op: str, *args: Any) -> None:
        assert self._conn is not None
        try:
            self._conn.send((op, args))
        except (BrokenPipeError, ConnectionResetError, EOFError):
            self._died()

    def _call(self, op: str, *args: Any) -> Any:
        self._send(op, *args)
        assert self._conn is not None
        try:
            status, value = self._conn.recv()
        except (EOFError, ConnectionResetError):
            self._died()
        if status == "error":
            raise RunError(value)
        return value

    def _died(self) -> None:
        code = self._proc.wait() if self._proc is not None else None
        self._cleanup_files()
        raise RunError(f"the index writer process died (exit status {code}); the live index is unchanged")

    # -- edits (not waited for) -------------------------------------------------------------
    def delete_paths(self, paths: Iterable[str]) -> None:
        self._send("delete", list(paths))

    def insert_tuples(self, rows: Sequence[tuple[Any, ...]]) -> None:
        self._send("insert", list(rows))
        self._inserted += len(rows)
        if self._failpoint_build and self._inserted:
            self._call("ping")  # the rows are in the temp DB
            failpoint("build")

    def upsert_files(self, rows: Iterable[FileRow]) -> None:
        self._send("files", [(r.path, r.source, r.hash, r.mtime_ms, r.size, r.chunks, r.lines) for r in rows])

    def set_meta(self, meta: dict[str, Any]) -> None:
        self._send("meta", meta)

    # -- waited for -----------------------------------------------------------------------
    def verify(self, *, expect_vectors: bool) -> dict[str, int]:
        counts, self.vec, tmp = self._call("verify", expect_vectors)
        self.tmp_path = Path(tmp)
        return counts

    def swap(self) -> None:
        tmp = self._call("prepare")
        self.tmp_path = Path(tmp)
        publish_temp(self.tmp_path, self.live_path)
        self.swapped = True
        self._close(wait=True)

    def abort(self) -> None:
        if self._conn is not None and self._proc is not None and self._proc.poll() is None:
            with contextlib.suppress(Exception):
                self._conn.send(("abort", ()))
                if self._conn.poll(30):
                    self._conn.recv()
        self._close(wait=False)
        self._cleanup_files()

    def _close(self, *, wait: bool) -> None:
        if self._conn is not None:
            with contextlib.suppress(OSError):
                self._conn.close()
            self._conn = None
        if self._proc is not None:
            try:
                self._proc.wait(timeout=30 if wait else 10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
            self._proc = None

    def _cleanup_files(self) -> None:
        if self.tmp_path is None or self.swapped:
            return
        for suffix in ("", "-journal", "-wal", "-shm"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(str(self.tmp_path) + suffix)


def _serve(conn: Connection) -> int:
    """The child: apply the parent's edits to one temp index; abort on any end but a swap."""
    writer: IndexWriter | None = None
    error: str | None = None
    prepared = False
    try:
        while True:
            try:
                op, args = conn.recv()
            except (EOFError, OSError):
                return 0  # the parent ended: the finally below removes an unpublished temp file
            if op in ("verify", "prepare", "ping", "abort"):
                if error is not None:
                    conn.send(("error", error))
                    if op == "abort":
                        return 0
                    continue
                try:
                    assert writer is not None
                    if op == "verify":
                        counts = writer.verify(expect_vectors=args[0])
                        conn.send(("ok", (counts, writer.vec, str(writer.tmp_path))))
                    elif op == "prepare":
                        writer.prepare_swap()
                        prepared = True
                        conn.send(("ok", str(writer.tmp_path)))
                        return 0
                    elif op == "ping":
                        conn.send(("ok", None))
                    else:
                        conn.send(("ok", None))
                        return 0
                except Exception as exc:  # noqa: BLE001 - reported to the parent
                    error = str(exc) if isinstance(exc, RunError) else f"index writer: {exc}"
                    conn.send(("error", error))
                continue
            if error is not None:
                continue  # drain edits until the parent asks
            try:
                if op == "open":
                    live, full, dims, use_vec = args
                    writer = IndexWriter(Path(live), full=full, dims=dims, use_vec=use_vec)
                    writer.open()
                elif op == "insert":
                    assert writer is not None
                    writer.insert_tuples(args[0])
                elif op == "delete":
                    assert writer is not None
                    writer.delete_paths(args[0])
                elif op == "files":
                    assert writer is not None
                    writer.upsert_files(FileRow(*r) for r in args[0])
                elif op == "meta":
                    assert writer is not None
                    writer.set_meta(args[0])
            except Exception as exc:  # noqa: BLE001 - reported at the next waited-for call
                error = str(exc) if isinstance(exc, RunError) else f"index writer: {exc}"
    finally:
        if writer is not None and not prepared:
            writer.abort()


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    conn = Connection(int(args[0]))
    try:
        return _serve(conn)
    finally:
        with contextlib.suppress(OSError):
            conn.close()
        if os.environ.get("MEMORY_CORE_WRITER_STATS"):  # benchmarks: the child's own CPU time
            import resource

            ru = resource.getrusage(resource.RUSAGE_SELF)
            print(f"memory-core writer: cpu {ru.ru_utime + ru.ru_stime:.3f}s, peak rss {ru.ru_maxrss / 1024:.0f} MiB",
                  file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
