"""Owner files of flow runs: whether the process running a flow run of an index is alive, exactly.

Each ``reindex`` / ``backfill`` flow run holds an exclusive ``flock`` for its whole life on a small
owner file named after its flow run id, in ``<index>.flow-runs/`` beside the index (:func:`hold`);
a ``fleet-reindex`` run holds one in each of its agents' folders. The kernel drops the lock when
the process dies, however it dies, so "is that run alive" is "can its file be locked": no pid
(pids are reused), no clock, no heartbeat to miss under a slow provider. The lock belongs to the
open file, so two runs in one process (a fleet's agents) are told apart too. The file is created
under a temporary name, locked and written, then renamed into place: under its final name it is
always locked by a live owner or left by a dead one.

A run cancelled through its runner or worker (``prefect flow-run cancel``, the UI's Cancel: the
runner kills the run's process, then sets it Cancelled) is no run "killed without reporting": its
process marks its file cancelled when it handles the cancel (:func:`mark_cancelled`), and the
flows' ``on_cancellation`` hook, which Prefect runs in the runner's or worker's process once the
run's process is gone, removes it (:func:`remove_dead`).

This module is the files alone (no Prefect): flows/owners.py marks the dead runs Crashed on their
Prefect server (:func:`dead_owners` hands it each dead file, locked); ``memory-core status``
lists them (:func:`stopped_runs`, which only looks, and leaves out the cancelled).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import logging
import os
import stat
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger("memory_core.flow_runs")

FLEET_FLOW = "fleet-reindex"  # its runs hold an owner file in every agent's folder (flows/fleet.py)
OWNERS_SUFFIX = ".flow-runs"  # <index>.flow-runs/<flow run id>
_NEW = ".new-"  # an owner file being made (locked, written, then renamed into place)

# flow run id -> its owner files (one per index: a fleet's run holds one in each agent's), while held here
_held: dict[str, dict[Path, RunOwner]] = {}
_held_lock = threading.Lock()


def owners_dir(index_file: str | os.PathLike[str]) -> Path:
    return Path(os.fspath(index_file) + OWNERS_SUFFIX)


@dataclass
class RunOwner:
    """A live run's owner file, its exclusive lock held until :meth:`release`."""

    flow_run_id: str
    path: Path
    fd: int | None
    record: dict[str, Any] | None = None

    def mark_cancelled(self, why: str) -> None:
        """Say in the file that the run is being cancelled by its runner or worker (which sets its
        final state): rewritten in place, under the lock this owner holds (nobody reads it meanwhile)."""
        if self.fd is None or self.record is None:
            return
        self.record = {**self.record, "cancelled": why, "cancelled_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
        data = json.dumps(self.record).encode()
        with contextlib.suppress(OSError):
            os.ftruncate(self.fd, 0)
            os.pwrite(self.fd, data, 0)

    def release(self) -> None:
        """Unlink, then unlock (a sweeper looking meanwhile finds no file, or a final run)."""
        if self.fd is None:
            return
        with contextlib.suppress(OSError):
            self.path.unlink()
        with contextlib.suppress(OSError):
            os.close(self.fd)
        self.fd = None


def hold(index_file: str | os.PathLike[str], flow_run_id: str, *, api_url: str, flow_name: str = "",
         run_name: str = "") -> RunOwner | None:
    """Create and lock the owner file of flow run ``flow_run_id`` for index ``index_file``; None
    (and a log line) when it cannot be made: the run goes on, as before, without one."""
    import socket  # only a run holding a file needs it (a search imports this module: tests/test_startup.py)

    folder = owners_dir(index_file)
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)  # <workspace>/.memory-core/ at a first run
        folder.mkdir(mode=0o700, exist_ok=True)
        fields: dict[str, Any] = {
            "flow_run_id": flow_run_id, "api_url": api_url, "host": socket.gethostname(), "pid": os.getpid(),
            "flow": flow_name, "run": run_name, "index": os.fspath(index_file),
            "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        }
        record = json.dumps(fields).encode()
        for _ in range(4):
            tmp = folder / f"{_NEW}{uuid.uuid4().hex}"
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                os.write(fd, record)
                os.rename(tmp, folder / flow_run_id)  # the same inode, locked: never seen unlocked
            except OSError:  # a sweep removed the new file between its create and its lock: again
                os.close(fd)
                with contextlib.suppress(OSError):
                    tmp.unlink()
                continue
            owner = RunOwner(flow_run_id, folder / flow_run_id, fd, fields)
            with _held_lock:
                files = _held.setdefault(flow_run_id, {})
                old = files.pop(owner.path, None)
                files[owner.path] = owner
            if old is not None and old.fd is not None:  # the same run again in this process (a retry)
                with contextlib.suppress(OSError):
                    os.close(old.fd)
            return owner
    except OSError as exc:
        log.warning("cannot create the flow run's owner file in %s (%s): if this process is killed, the next"
                    " run cannot tell that this flow run stopped", folder, exc)
    return None


def release(flow_run_id: str) -> None:
    """Remove and unlock this process's owner files of ``flow_run_id``, if it holds any."""
    with _held_lock:
        files = _held.pop(str(flow_run_id), {})
    for owner in files.values():
        owner.release()


def release_all(flow_run_ids: set[str] | None = None) -> None:
    """Release the owner files this process holds (of ``flow_run_ids`` only, when given)."""
    with _held_lock:
        ids = [i for i in _held if flow_run_ids is None or i in flow_run_ids]
    for i in ids:
        release(i)


def held_ids() -> set[str]:
    with _held_lock:
        return set(_held)


def mark_cancelled(flow_run_ids: set[str] | None, why: str) -> None:
    """Mark this process's owner files (of ``flow_run_ids`` only, when given) as those of runs its
    runner or worker is cancelling (:meth:`RunOwner.mark_cancelled`): when the process is gone,
    status does not call them killed, and a sweep that finds one still not final sets it Cancelled."""
    with _held_lock:
        held = [o for i, files in _held.items() if flow_run_ids is None or i in flow_run_ids for o in files.values()]
    for owner in held:
        owner.mark_cancelled(why)


def remove_dead(index_file: str | os.PathLike[str], flow_run_id: str, *,
                wait_s: float = 0.0) -> dict[str, Any] | None:
    """Remove ``flow_run_id``'s owner file of ``index_file`` once no live process holds it (its
    runner killed the run's process and is finishing it: the flows' ``on_cancellation`` hook),
    waiting up to ``wait_s`` for the lock of a process still exiting; its record, or None when
    there is no such file, or it is still held then (left as it is)."""
    path = owners_dir(index_file) / str(flow_run_id)
    deadline = time.monotonic() + wait_s
    while True:
        if not os.path.lexists(path):
            return None
        fd = _take(path)
        if fd is not None:
            break
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.05)
    try:
        record = _record(fd, path.name)
        with contextlib.suppress(OSError):
            path.unlink()
    finally:
        os.close(fd)
    return record if record is not None else {"flow_run_id": str(flow_run_id)}


# -- finding the dead -----------------------------------------------------------------------

@dataclass
class Dead:
    """A dead run's owner file, its lock held by the sweeper (so no other sweeper acts on it)."""

    path: Path
    fd: int
    record: dict[str, Any]

    @property
    def flow_run_id(self) -> str:
        return str(self.record.get("flow_run_id") or self.path.name)

    def done(self) -> None:
        """Remove the file (the run is settled), then let go of it."""
        with contextlib.suppress(OSError):
            self.path.unlink()
        self.keep()

    def keep(self) -> None:
        """Let go of the file and leave it for a later sweep."""
        with contextlib.suppress(OSError):
            os.close(self.fd)


def _take(path: Path) -> int | None:
    """The file's exclusive lock, if no live run holds it (and the file is still at ``path``)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None  # gone (released, or swept by another run), or not ours to read
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        here, mine = os.stat(path, follow_symlinks=False), os.fstat(fd)
        if (here.st_dev, here.st_ino) != (mine.st_dev, mine.st_ino):
            raise FileNotFoundError(errno.ENOENT, "replaced", os.fspath(path))
    except OSError:  # held by a live run (EWOULDBLOCK), or replaced/removed meanwhile
        os.close(fd)
        return None
    return fd


def dead_owners(index_file: str | os.PathLike[str], *, skip: set[str] | None = None) -> Iterator[Dead]:
    """The owner files of ``index_file`` whose runs are dead, each locked by the caller until it
    calls ``done()`` or ``keep()``. Leftover temporary files of killed runs are removed."""
    folder = owners_dir(index_file)
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        return
    for name in names:
        if skip and name in skip:
            continue
        path = folder / name
        fd = _take(path)
        if fd is None:
            continue
        if name.startswith(_NEW):  # a run killed while it made its file, before the rename
            with contextlib.suppress(OSError):
                path.unlink()
            os.close(fd)
            continue
        record = _record(fd, name)
        if record is None:
            log.warning("unreadable flow run owner file %s: removed", path)
            with contextlib.suppress(OSError):
                path.unlink()
            os.close(fd)
            continue
        yield Dead(path, fd, record)


def _record(fd: int, name: str) -> dict[str, Any] | None:
    """The record of owner file ``name`` (its flow run id: the record's, else the name; checked),
    or None when it is not one."""
    try:
        record = json.loads(os.read(fd, 65536) or b"{}")
        if not isinstance(record, dict):
            return None
        record["flow_run_id"] = str(record.get("flow_run_id") or name)
        uuid.UUID(record["flow_run_id"])
    except (OSError, ValueError):
        return None
    return record


@dataclass(frozen=True)
class StoppedRun:
    """A flow run whose process stopped without removing its owner file (:func:`stopped_runs`)."""

    flow_run_id: str
    run: str | None = None  # its flow run's name
    flow: str | None = None
    host: str | None = None
    pid: int | None = None
    started: str | None = None
    api_url: str | None = None  # the Prefect API it reported to ("" : a temporary server)

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> StoppedRun:
        def text(key: str) -> str | None:
            v = record.get(key)
            return None if v is None else str(v)

        pid = record.get("pid")
        return cls(str(record["flow_run_id"]), text("run"), text("flow"), text("host"),
                   pid if isinstance(pid, int) else None, text("started"), text("api_url"))


def stopped_runs(index_file: str | os.PathLike[str]) -> list[StoppedRun]:
    """``index_file``'s flow runs whose process stopped without removing its owner file (killed:
    still ``Running`` in Prefect until the next Prefect run of the index marks them), oldest
    first. A run whose file says it was being cancelled by its runner or worker
    (:func:`mark_cancelled`: the runner reports it Cancelled) is not one. Only looks: a shared
    lock taken and dropped at once (a live run's exclusive lock refuses it), nothing removed or
    written. A sweep that looks at the same moment leaves that file for a later run."""
    folder = owners_dir(index_file)
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        return []
    out: list[StoppedRun] = []
    for name in names:
        if name.startswith(_NEW):
            continue
        try:
            fd = os.open(folder / name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
        except OSError:
            continue
        try:
            if not _regular(fd):
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except OSError:
                continue  # held: a live run
            record = _record(fd, name)
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)
        if record is not None and not record.get("cancelled"):
            out.append(StoppedRun.from_record(record))
    out.sort(key=lambda r: r.started or "")
    return out


def _regular(fd: int) -> bool:
    try:
        return stat.S_ISREG(os.fstat(fd).st_mode)
    except OSError:
        return False
