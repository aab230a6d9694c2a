"""The SQLite files this process has open: its connections and its own descriptors, by file.

POSIX record locks, which SQLite takes, belong to a (process, file) pair: closing *any* descriptor
of a file drops every lock the process holds on it, also those of a live connection in another
thread. SQLite guards its own descriptors against that; ours it cannot. Two bugs of this class
(docs/reliability.md BP8, N7, N8): a second embedding cache's open-and-close of the cache file
dropped the first one's locks (another process then deleted the WAL under it), and the index
header read (every new reader, every search's freshness probe) dropped a search's SHARED lock (a
writer in another process then committed under it).

So every descriptor memory-core opens on an SQLite file it may have connections on (the index
header, the cache's safe create and truncation check, the copy of the live index) is taken with
:func:`kept`, and every connection is a :class:`Connection`. Both are counted here by file
(``st_dev``, ``st_ino``), under one lock. A descriptor of ours is closed only while no connection
of this process is on its file: right after its use when there is none (so none is kept for a
file without a connection), else once the last connection closes; until then it is reused. A
file replaced or removed since changes nothing: its descriptor waits for its connections too.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import threading
import weakref
from collections.abc import Iterator

import apsw

Key = tuple[int, int]  # (st_dev, st_ino)


class _File:
    __slots__ = ("conns", "fds", "users")

    def __init__(self) -> None:
        self.conns = 0  # this process's open connections on the file
        self.fds: list[int] = []  # our descriptors of it (more than one only after a race)
        self.users = 0  # uses of fds[0] in progress (outside the lock)


_FILES: dict[Key, _File] = {}
_LOCK = threading.Lock()


def key_of(st: os.stat_result) -> Key:
    return st.st_dev, st.st_ino


def _release(key: Key, f: _File) -> None:
    """Close ``f``'s descriptors if nothing of this process uses its file any more; under _LOCK."""
    if f.conns or f.users:
        return
    for fd in f.fds:
        os.close(fd)  # no connection of ours is on the file: no lock of ours to drop
    del _FILES[key]


def _opened(keys: tuple[Key, ...]) -> None:
    with _LOCK:
        for key in keys:
            _FILES.setdefault(key, _File()).conns += 1


def _closed(keys: tuple[Key, ...]) -> None:
    with _LOCK:
        for key in keys:
            f = _FILES.get(key)
            if f is not None:
                f.conns -= 1
                _release(key, f)


def _stat_key(path: str) -> Key | None:
    try:
        return key_of(os.stat(path))
    except OSError:
        return None


class Connection(apsw.Connection):
    """An apsw connection counted on its file while it is open (closed, or garbage collected).

    The file is the one at ``path`` just before and just after SQLite opened it (both, should it
    have been replaced in between: counting one too many only keeps a descriptor longer). Counted
    before any statement runs, so before the connection holds any lock."""

    def __init__(self, name: str, *, flags: int, path: str) -> None:
        before = _stat_key(path)
        super().__init__(name, flags=flags)
        after = _stat_key(path)
        keys = tuple(k for k in {before, after} if k is not None)
        _opened(keys)
        self._counted = weakref.finalize(self, _closed, keys)  # once: at close() or when collected
        self._counted.atexit = False  # not at exit, under a daemon thread's connection still in use

    def close(self, force: bool = False) -> None:
        super().close(force)
        self._counted()


@contextlib.contextmanager
def kept(path: str | os.PathLike[str], *, same_as: os.stat_result | None = None,
         create: bool = False) -> Iterator[int]:
    """A descriptor (read-only) of the regular file at ``path``, never closed under a connection of
    this process (see the module doc): use it with ``os.pread`` (it is shared), never close it.

    ``same_as``: the file's lstat, just taken by the caller; OSError EAGAIN when another file is
    there by the time it is opened. Otherwise ``path`` is looked at here: a symbolic link raises
    OSError ELOOP, a file of another kind OSError EINVAL (never opened: a FIFO is never waited
    on). ``create``: a missing file is created (mode 0600)."""
    p = os.fspath(path)
    st = same_as
    if st is None:
        try:
            st = os.lstat(p)
        except FileNotFoundError:
            if not create:
                raise
    if st is not None and stat.S_ISLNK(st.st_mode):
        raise OSError(errno.ELOOP, "a symbolic link", p)
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise OSError(errno.EINVAL, "not a regular file", p)
    with _LOCK:
        key = key_of(st) if st is not None else None
        f = _FILES.get(key) if key is not None else None
        if f is None or not f.fds:
            flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK | (os.O_CREAT if create else 0)
            fd = os.open(p, flags, 0o600)
            mine = os.fstat(fd)
            if not stat.S_ISREG(mine.st_mode):  # swapped in since the lstat: no SQLite file, no lock
                os.close(fd)
                raise OSError(errno.EINVAL, "not a regular file", p)
            got = key_of(mine)
            f = _FILES.setdefault(got, _File())
            f.fds.append(fd)  # from now on closed only by _release
            if key is not None and got != key:  # replaced between the lstat and the open
                _release(got, f)
                raise OSError(errno.EAGAIN, "the file was replaced while it was opened", p)
            key = got
        assert key is not None
        f.users += 1
    try:
        yield f.fds[0]
    finally:
        with _LOCK:
            f.users -= 1
            _release(key, f)


def connected(path: str | os.PathLike[str]) -> bool:
    """True when a connection of this process is open on the file at ``path``."""
    key = _stat_key(os.fspath(path))
    with _LOCK:
        f = _FILES.get(key) if key is not None else None
        return f is not None and f.conns > 0

