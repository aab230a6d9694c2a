"""The temp index written by a child process, so SQLite runs beside the run's Python work.

A big build spends about as long in SQLite (FTS5 tokenising, B-tree and vec0 inserts) as in
Python (reading, chunking, hashing, embedding, the cache). In one process they cannot overlap:
apsw releases the GIL while SQLite works, but the inserting thread needs the GIL back for
every row, and a busy Python thread holds it for up to the switch interval each time
(measured: an insert thread ran 2.5-2.9x slower beside one busy Python thread). A child
process has its own interpreter, so both cores work.

:class:`ProcessIndexWriter` has the methods of :class:`memory_core.index.writer.IndexWriter` that a
build uses. Edits are sent without waiting: a sender thread takes them from a short queue
(``SEND_QUEUE`` messages, the back-pressure), so this process goes on reading and chunking
while a send blocks on a busy child (with the socket's ~200 KiB buffer alone, the run spent
a third of its time blocked in ``send`` while the child, at other times, sat idle).
``verify``, ``prepare`` and ``abort`` wait for the child and raise the first error it met.
The child commits and syncs the temp file; this process renames it over the live index (so
the ``before-swap`` / ``after-swap`` crash points are where they always were).
If this process dies, the child reads end-of-file, deletes the temp file and exits; a child
that dies is reported as a :class:`RunError` and its temp file is removed here (this process
names the temp file, so it knows it from the start). The child runs in a session of its own
and ignores SIGINT and SIGTERM: stopping a run (Ctrl-C at a terminal, SIGTERM to the process
group or the service's cgroup) is this process's to handle, and it ends the child.
``MEMORY_CORE_WRITER_STATS=1`` makes the child print, on exit, its CPU and wall time per message
kind and the time it sat idle waiting for rows.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import queue
import select
import signal
import socket
import struct
import subprocess
import sys
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from memory_core.errors import RunError
from memory_core.failpoints import failpoint
from memory_core.index.run_stops import stops_held
from memory_core.index.writer import FileRow, IndexWriter, publish_temp, temp_path_for
from memory_core.storage import vectors

_ENV_FAILPOINT = "MEMORY_CORE_FAILPOINT"
SEND_QUEUE = 4  # messages waiting for the sender thread (an insert batch is up to ~12 MiB: streaming.insert_rows)


class Channel:
    """Pickled messages over a stream socket, each one framed by its length.

    ``multiprocessing.connection.Connection`` reads a big message with ``os.read(fd, remaining)``
    in a loop: every call allocates a buffer the size of the whole remainder (a fresh ~12 MiB
    mapping) for the ~200 KiB the socket holds, and the pieces are copied again into a
    ``BytesIO``. Here a message lands in one buffer, read with ``recv_into``.
    """

    _HEADER = struct.Struct("!Q")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock

    def send(self, obj: Any) -> None:
        data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
        self.sock.sendall(self._HEADER.pack(len(data)))
        self.sock.sendall(data)

    # Any: an unpickled message of the writer process
    def recv(self) -> Any:
        (size,) = self._HEADER.unpack(self._read(self._HEADER.size))
        return pickle.loads(self._read(size))

    def _read(self, size: int) -> bytearray:
        buf = bytearray(size)
        view = memoryview(buf)
        got = 0
        while got < size:
            n = self.sock.recv_into(view[got:])
            if n == 0:
                raise EOFError("the other process closed the channel")
            got += n
        return buf

    def poll(self, timeout: float | None) -> bool:
        """True when a message (or end-of-file) is waiting, within ``timeout`` seconds."""
        p = select.poll()
        p.register(self.sock, select.POLLIN)
        return bool(p.poll(None if timeout is None else int(timeout * 1000)))

    def close(self) -> None:
        self.sock.close()


class ProcessIndexWriter:
    """An :class:`IndexWriter` in a child process (same use: ``with``, edits, verify, swap): a
    :class:`memory_core.index.writer.BuildWriter`."""

    def __init__(self, live_path: Path, *, full: bool, dims: int | None, use_vec: bool = True) -> None:
        self.live_path = Path(live_path)
        self.full = full or not self.live_path.exists()
        self.dims = dims
        self._use_vec = use_vec
        self.vec = False
        self.swapped = False
        self.tmp_path: Path | None = None
        self._conn: Channel | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._inserted = 0
        self._failpoint_build = os.environ.get(_ENV_FAILPOINT) == "build"
        self._queue: queue.Queue[tuple[str, tuple[Any, ...]] | None] = queue.Queue(SEND_QUEUE)
        self._sender: threading.Thread | None = None
        self._send_failed = False  # the child stopped reading (it died)
        self._dropping = False  # abort: queued edits are not sent

    # -- lifecycle ------------------------------------------------------------------------
    def __enter__(self) -> ProcessIndexWriter:
        self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        if not self.swapped:
            self.abort()

    def open(self) -> None:
        # the temp file's name is chosen here, so this process can remove it whatever becomes of
        # the child (a SIGTERM to the process group killed the child before it cleaned up, and
        # this process learnt the name only at verify: the file stayed until the next run)
        self.tmp_path = temp_path_for(self.live_path)
        parent, child = socket.socketpair()
        env = {k: v for k, v in os.environ.items() if k != _ENV_FAILPOINT}  # crash points fire here, not there
        try:
            # a session of its own: a Ctrl-C at the terminal, or a signal to the run's process
            # group, is this process's to handle (it printed a KeyboardInterrupt traceback, or
            # died before removing its temp file); the child ends when this process closes the
            # channel or tells it to (abort), or dies (end-of-file)
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "memory_core.index.writer_proc", str(child.fileno())],
                pass_fds=(child.fileno(),), env=env, stdin=subprocess.DEVNULL, start_new_session=True,
            )
        except OSError as exc:
            parent.close()
            raise RunError(f"cannot start the index writer process: {exc.strerror or exc}") from exc
        finally:
            child.close()
        self._conn = Channel(parent)
        self._sender = threading.Thread(target=self._send_loop, name="index-writer-send", daemon=True)
        self._sender.start()
        self._send("open", str(self.live_path), self.full, self.dims, self._use_vec, str(self.tmp_path))

    def _send_loop(self) -> None:
        conn = self._conn
        assert conn is not None
        while True:
            item = self._queue.get()
            try:
                if item is None:
                    return
                if not (self._send_failed or self._dropping):
                    try:
                        conn.send(item)
                    except (OSError, EOFError):  # BrokenPipe, ConnectionReset: the child is gone
                        self._send_failed = True
            finally:
                self._queue.task_done()

    def _send(self, op: str, *args: Any) -> None:
        if self._send_failed:
            self._died()
        self._queue.put((op, args))

    def _stop_sender(self) -> None:
        if self._sender is not None:
            self._queue.put(None)
            self._sender.join()
            self._sender = None

    # Any: the writer process's answer to any call
    def _call(self, op: str, *args: Any) -> Any:
        self._send(op, *args)
        self._queue.join()  # sent, in order after every queued edit
        if self._send_failed:
            self._died()
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

    def replace_paths(self, paths: Iterable[str]) -> None:
        """These files are indexed again: here their rows go at once and the run inserts them
        all (a copy of the live index is rewritten whole anyway; the in-process writer's
        :meth:`memory_core.index.writer.IndexWriter.replace_paths` keeps the unchanged chunks' rows)."""
        self.delete_paths(paths)

    def finish_replace(self) -> int:
        """Nothing left to delete (:meth:`replace_paths` deleted the rows at once)."""
        return 0

    def insert_tuples(self, rows: Sequence[tuple[Any, ...]]) -> None:
        self._send("insert", list(rows))
        self._inserted += len(rows)
        if self._failpoint_build and self._inserted:
            self._call("ping")  # the rows are in the temp DB
            failpoint("build")

    def upsert_files(self, rows: Iterable[FileRow]) -> None:
        self._send("files", [tuple(r) for r in rows])

    def set_meta(self, meta: dict[str, Any]) -> None:
        self._send("meta", meta)

    # -- waited for -----------------------------------------------------------------------
    def verify(self, *, expect_vectors: bool) -> dict[str, int]:
        counts: dict[str, int]
        tmp: str
        counts, self.vec, tmp = self._call("verify", expect_vectors)  # unpickled: what _Child.waited sends
        self.tmp_path = Path(tmp)
        return counts

    def measure_scan(self) -> vectors.ScanPlan | None:
        got = self._call("measure_scan")
        return None if got is None else vectors.ScanPlan.from_meta({"vector_scan": got})

    def swap(self) -> None:
        tmp = self._call("prepare")
        self.tmp_path = Path(tmp)
        with stops_held():
            publish_temp(self.tmp_path, self.live_path)
            self.swapped = True
        self._close(wait=True)

    def abort(self) -> None:
        self._dropping = True
        self._stop_sender()
        if self._conn is not None and self._proc is not None and self._proc.poll() is None:
            with contextlib.suppress(Exception):
                self._conn.send(("abort", ()))
                if self._conn.poll(30):
                    self._conn.recv()
        self._close(wait=False)
        self._cleanup_files()

    def _close(self, *, wait: bool) -> None:
        self._stop_sender()
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


class _Child:
    """The child's side: one temp index, the parent's edits applied in order."""

    WAITED = ("verify", "measure_scan", "prepare", "ping", "abort")

    def __init__(self, conn: Channel) -> None:
        self.conn = conn
        self.writer: IndexWriter | None = None
        self.error: str | None = None  # the first failure; reported at the next waited-for call
        self.prepared = False
        self.cpu: dict[str, float] = {}  # CPU seconds per message kind (MEMORY_CORE_WRITER_STATS)
        self.idle = 0.0  # wall seconds spent waiting for the parent's next message
        self.wall: dict[str, float] = {}

    def serve(self) -> None:
        import time

        try:
            while True:
                w0 = time.perf_counter()
                try:
                    self.conn.poll(None)  # waiting for the parent: idle time, not recv's
                    t0 = time.process_time()
                    w1 = time.perf_counter()
                    self.idle += w1 - w0
                    op, args = self.conn.recv()
                except (EOFError, OSError):
                    return  # the parent ended: abort below removes an unpublished temp file
                t1 = time.process_time()
                self.cpu["recv"] = self.cpu.get("recv", 0.0) + t1 - t0
                done = self.waited(op, args) if op in self.WAITED else self.edit(op, args)
                self.cpu[op] = self.cpu.get(op, 0.0) + time.process_time() - t1
                self.wall[op] = self.wall.get(op, 0.0) + time.perf_counter() - w1
                if done:
                    return
        finally:
            if self.writer is not None and not self.prepared:
                self.writer.abort()

    def _fail(self, exc: Exception) -> str:
        return str(exc) if isinstance(exc, RunError) else f"index writer: {exc}"

    def waited(self, op: str, args: tuple[Any, ...]) -> bool:
        """Answer a call the parent waits for; True when the child should exit."""
        if self.error is not None:
            self.conn.send(("error", self.error))
            return op == "abort"
        try:
            w = self.writer
            assert w is not None or op in ("ping", "abort")
            if op == "verify":
                assert w is not None
                counts = w.verify(expect_vectors=args[0])
                self.conn.send(("ok", (counts, w.vec, str(w.tmp_path))))
                return False
            if op == "measure_scan":
                assert w is not None
                plan = w.measure_scan()
                self.conn.send(("ok", None if plan is None else plan.to_meta()))
                return False
            if op == "prepare":
                assert w is not None
                w.prepare_swap()
                self.prepared = True
                self.conn.send(("ok", str(w.tmp_path)))
                return True
            self.conn.send(("ok", None))
            return op == "abort"
        except Exception as exc:  # noqa: BLE001 - reported to the parent
            self.error = self._fail(exc)
            self.conn.send(("error", self.error))
            return False

    def edit(self, op: str, args: tuple[Any, ...]) -> bool:
        """Apply an edit the parent does not wait for (after a failure: drop it)."""
        if self.error is not None:
            return False
        try:
            if op == "open":
                live, full, dims, use_vec, tmp = args
                self.writer = IndexWriter(Path(live), full=full, dims=dims, use_vec=use_vec, tmp_path=Path(tmp))
                self.writer.open()
                return False
            w = self.writer
            assert w is not None
            if op == "insert":
                w.insert_tuples(args[0])
            elif op == "delete":
                w.delete_paths(args[0])
            elif op == "files":
                w.upsert_files(FileRow(*r) for r in args[0])
            elif op == "meta":
                w.set_meta(args[0])
        except Exception as exc:  # noqa: BLE001 - reported at the next waited-for call
            self.error = self._fail(exc)
        return False


def main(argv: Sequence[str] | None = None) -> int:
    # Stops are the parent's: it aborts this writer (or closes the channel) and removes the temp
    # file. A signal meant for the whole run (SIGTERM from a service manager's cgroup, a Ctrl-C
    # reaching the child) must not end it half way, leaving its temp file behind.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    args = list(sys.argv[1:] if argv is None else argv)
    conn = Channel(socket.socket(fileno=int(args[0])))
    child = _Child(conn)
    try:
        child.serve()
        return 0
    finally:
        with contextlib.suppress(OSError):
            conn.close()
        if os.environ.get("MEMORY_CORE_WRITER_STATS"):  # benchmarks: where the child's CPU went
            import resource

            ru = resource.getrusage(resource.RUSAGE_SELF)
            parts = ", ".join(f"{k} {v:.2f}" for k, v in sorted(child.cpu.items(), key=lambda kv: -kv[1]))
            print(f"memory-core writer: cpu {ru.ru_utime + ru.ru_stime:.2f}s ({parts}),"
                  f" peak rss {ru.ru_maxrss / 1024:.0f} MiB; idle {child.idle:.2f}s; wall "
                  + ", ".join(f"{k} {v:.2f}" for k, v in sorted(child.wall.items(), key=lambda kv: -kv[1])),
                  file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
