"""The per-run journal of an :class:`memory_core.storage.cache.EmbeddingCache` (see that module's docstring).

One file per cache instance, ``<cache file>-journal-<uuid>``, created (0600, never through a
symlink) at the instance's first write and held under an exclusive ``flock`` until it is folded
into the cache's SQLite file and deleted. Its owner dying releases the lock: the file is then an
orphan, folded by the next instance that opens the cache.

Layout (little-endian): a file header ``MCJ1``, the identity's length, its crc32, then the
identity (JSON ``[provider, model, provider_key]``); then records, each written with one
``pwritev``: a 24-byte header (kind ``MCJV`` put or ``MCJD`` drop, count n, dims, time in ms,
crc32 of the header's first 20 bytes and of everything after it), the n 32-byte digests, and for
a put the n float32 vectors. A record that is cut short (the process killed inside the write) or
whose crc32 does not match ends the replay: the records before it count.
"""

from __future__ import annotations

import bisect
import contextlib
import errno
import fcntl
import glob
import json
import logging
import os
import struct
import uuid
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from memory_core.storage.store import safe_open

log = logging.getLogger(__name__)

FILE_MAGIC = b"MCJ1"
PUT = b"MCJV"
DROP = b"MCJD"
DIGEST = 32
_FHEAD = struct.Struct("<4sII")  # magic, identity length, crc32 of the identity
_RHEAD = struct.Struct("<4sIIq")  # kind, count, dims (0: a drop), time in ms; then the crc32 (4 bytes)
RECORD_HEAD = _RHEAD.size + 4
MAX_RECORD = 1 << 30  # a header claiming more is garbage: the replay ends there
# New digests wait in a dict until this many, then join the sorted arrays (np.insert: one copy of
# the arrays per merge, ~0.3 GB of memcpy in all at 1M entries).
TAIL_MAX = 65536


def journal_paths(cache_path: Path) -> list[Path]:
    """The journal files beside the cache file at ``cache_path`` (any owner, any state)."""
    return sorted(Path(p) for p in glob.glob(glob.escape(os.fspath(cache_path)) + "-journal-*"))


def identity_bytes(provider: str, model: str, provider_key: str) -> bytes:
    return json.dumps([provider, model, provider_key]).encode()


def _pwrite_all(fd: int, bufs: Sequence[Any], offset: int) -> int:
    total = sum(memoryview(b).nbytes for b in bufs)
    done = os.pwritev(fd, bufs, offset)
    if done < total:  # only a full disk (which then raises) or a signal cuts a regular file's write short
        rest = memoryview(b"".join(bytes(memoryview(b)) for b in bufs))[done:]
        while rest:
            n = os.pwrite(fd, rest, offset + done)
            done += n
            rest = rest[n:]
    return total


def _crc(head: bytes, parts: Sequence[Any]) -> int:
    crc = zlib.crc32(head)
    for p in parts:
        crc = zlib.crc32(p, crc)
    return crc


# -- replay: what a journal file holds, up to its first damaged record --------------------------

@dataclass
class Scan:
    """A journal's entries after replay: one per digest (the last record naming it wins; a drop
    record removes it), in digest order."""

    identity: tuple[str, str, str] | None
    digests: np.ndarray  # dtype S32, sorted
    offsets: np.ndarray  # int64: where each vector starts in the file
    dims: np.ndarray  # int64
    times: np.ndarray  # int64, ms
    records: int = 0
    damaged_at: int | None = None  # the offset where replay stopped early, if it did

    def __len__(self) -> int:
        return len(self.digests)


def _read_identity(fd: int) -> tuple[tuple[str, str, str] | None, int]:
    head = os.pread(fd, _FHEAD.size, 0)
    if len(head) < _FHEAD.size:
        return None, 0
    magic, n, crc = _FHEAD.unpack(head)
    if magic != FILE_MAGIC or n > 65536:
        return None, 0
    ident = os.pread(fd, n, _FHEAD.size)
    if len(ident) < n or zlib.crc32(ident) != crc:
        return None, 0
    try:
        provider, model, key = json.loads(ident)
    except (ValueError, TypeError):
        return None, 0
    return (str(provider), str(model), str(key)), _FHEAD.size + n


def records(fd: int, start: int, *, check: bool = True) -> Iterator[tuple[bytes, int, int, int, int, bytes]]:
    """(kind, n, dims, time, offset of the vectors, the n digests) of each whole record from
    ``start``; the last item has kind b"" and the offset where the replay stopped when it
    stopped before the end of the file (a torn or damaged record). ``check``: verify crc32s."""
    size = os.fstat(fd).st_size
    pos = start
    while pos < size:
        head = os.pread(fd, RECORD_HEAD, pos)
        if len(head) < RECORD_HEAD:
            break
        kind, n, dims, when = _RHEAD.unpack_from(head)
        body = n * DIGEST + (n * dims * 4 if kind == PUT else 0)
        if kind not in (PUT, DROP) or not n or (kind == PUT and not dims) or body > MAX_RECORD \
                or pos + RECORD_HEAD + body > size:
            break
        if check:
            data = os.pread(fd, body, pos + RECORD_HEAD)
            if zlib.crc32(data, zlib.crc32(head[:_RHEAD.size])) != int.from_bytes(head[_RHEAD.size:], "little"):
                break
            digests = data[:n * DIGEST]
        else:
            digests = os.pread(fd, n * DIGEST, pos + RECORD_HEAD)
        yield kind, n, dims, when, pos + RECORD_HEAD + n * DIGEST, digests
        pos += RECORD_HEAD + body
    if pos < size:
        yield b"", 0, 0, 0, pos, b""


def scan(fd: int) -> Scan:
    """Replay the journal open as ``fd`` (see :class:`Scan`)."""
    identity, start = _read_identity(fd)
    empty = np.empty(0, dtype=np.int64)
    out = Scan(identity, np.empty(0, dtype="S32"), empty, empty, empty)
    if identity is None:
        return out
    digs, offs, dims, times = [], [], [], []
    for kind, n, d, when, at, digests in records(fd, start):
        if not kind:
            out.damaged_at = at
            break
        out.records += 1
        digs.append(np.frombuffer(digests, dtype="S32"))
        if kind == PUT:
            offs.append(at + np.arange(n, dtype=np.int64) * (d * 4))
        else:
            offs.append(np.full(n, -1, dtype=np.int64))
        dims.append(np.full(n, d, dtype=np.int64))
        times.append(np.full(n, when, dtype=np.int64))
    if not digs:
        return out
    dig = np.concatenate(digs)
    order = np.argsort(dig, kind="stable")  # equal digests keep their record order: the last wins
    dig = dig[order]
    last = np.ones(len(dig), dtype=bool)
    last[:-1] = dig[1:] != dig[:-1]
    keep = order[last]
    off = np.concatenate(offs)[keep]
    put = off >= 0
    out.digests = dig[last][put]
    out.offsets = off[put]
    out.dims = np.concatenate(dims)[keep][put]
    out.times = np.concatenate(times)[keep][put]
    return out


def entry_count(path: Path) -> int:
    """Vectors in the journal at ``path`` without checking crc32s or duplicates (a status figure)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return 0
    try:
        identity, start = _read_identity(fd)
        if identity is None:
            return 0
        return sum(n if kind == PUT else 0 for kind, n, *_ in records(fd, start, check=False))
    except OSError:
        return 0
    finally:
        os.close(fd)


def take_orphan(path: Path) -> int | None:
    """An fd of the journal at ``path`` holding its lock, when its owner is gone (None: it is
    held by a live instance, or was folded and deleted meanwhile)."""
    try:
        fd = safe_open(path, os.O_RDWR, what="embedding cache journal")
    except FileNotFoundError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        os.close(fd)
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            return None
        raise
    if os.fstat(fd).st_nlink == 0:  # another instance folded and deleted it before we locked it
        os.close(fd)
        return None
    return fd


# -- the writing side ------------------------------------------------------------------------------

class Journal:
    """The journal of one cache instance and the map of what it holds: digest -> where its
    vector starts in the file (sorted numpy arrays, ~41 bytes an entry measured at 1M, plus a
    dict of the newest, up to :data:`TAIL_MAX`, read first). Not thread-safe: the cache calls it
    under its lock."""

    def __init__(self, cache_path: Path, identity: bytes) -> None:
        self.cache_path = Path(cache_path)
        self.identity = identity
        self.path: Path | None = None
        self.fd: int | None = None
        self.end = 0
        self.appended = 0  # bytes written to journals by this instance (all of them, over its life)
        self._reset()

    def _reset(self) -> None:
        self.keys = np.empty(0, dtype="S32")
        self.offs = np.empty(0, dtype=np.int64)
        self.live_main = 0
        self.tail: dict[bytes, int] = {}
        self.rec_starts: list[int] = []
        self.rec_dims: list[int] = []
        self.rec_times: list[int] = []

    # -- file ---------------------------------------------------------------------------
    def _create(self) -> None:
        head = _FHEAD.pack(FILE_MAGIC, len(self.identity), zlib.crc32(self.identity)) + self.identity
        while True:
            path = Path(f"{self.cache_path}-journal-{uuid.uuid4().hex}")
            fd = safe_open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, what="embedding cache journal")
            try:
                # An instance recovering orphans may open it before we lock it: it then either
                # fails to lock it, or locks it first (and deletes it as empty): we start again.
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                if os.fstat(fd).st_nlink == 0:
                    raise BlockingIOError(errno.EWOULDBLOCK, "deleted")
                _pwrite_all(fd, [head], 0)
            except BlockingIOError:
                os.close(fd)
                continue
            except BaseException:
                os.close(fd)
                with contextlib.suppress(OSError):
                    os.unlink(path)
                raise
            self.path, self.fd, self.end = path, fd, len(head)
            self.appended += len(head)
            return

    def _append(self, kind: bytes, n: int, dims: int, when: int, parts: Sequence[Any]) -> int:
        """Write one record; the offset of its body (after the header)."""
        if self.fd is None:
            self._create()
        assert self.fd is not None
        head = _RHEAD.pack(kind, n, dims, when)
        bufs = [head, _crc(head, parts).to_bytes(4, "little"), *parts]
        try:
            written = _pwrite_all(self.fd, bufs, self.end)
        except BaseException:
            with contextlib.suppress(OSError):
                os.ftruncate(self.fd, self.end)  # a torn record would end the replay of later ones
            raise
        body = self.end + RECORD_HEAD
        self.end += written
        self.appended += written
        return body

    def release(self) -> None:
        """Close the file, keeping it (an orphan for the next instance to fold)."""
        if self.fd is not None:
            os.close(self.fd)
        self.fd, self.path, self.end = None, None, 0
        self._reset()

    def discard(self) -> None:
        """Delete the file (its entries are folded or not wanted), then let its lock go."""
        if self.path is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path)
        self.release()

    # -- map ------------------------------------------------------------------------------
    def _find(self, arr: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        pos = np.searchsorted(self.keys, arr)
        ok = pos < len(self.keys)
        ok[ok] = self.keys[pos[ok]] == arr[ok]
        return pos, ok

    def _merge(self) -> None:
        """Move the dict's entries into the sorted arrays (a digest already there: its offset)."""
        if not self.tail:
            return
        tk = np.array(list(self.tail), dtype="S32")
        to = np.fromiter(self.tail.values(), dtype=np.int64, count=len(self.tail))
        order = np.argsort(tk)
        tk, to = tk[order], to[order]
        pos, dup = self._find(tk)
        if dup.any():
            at = pos[dup]
            self.live_main += int((self.offs[at] < 0).sum())
            self.offs[at] = to[dup]
        new = ~dup
        self.keys = np.insert(self.keys, pos[new], tk[new])
        self.offs = np.insert(self.offs, pos[new], to[new])
        self.live_main += int(new.sum())
        self.tail.clear()

    def put(self, digests: Sequence[bytes], vectors: Any, dims: int, when: int) -> None:
        """Append one put record (``vectors``: the n float32 vectors, packed) and map its digests."""
        n = len(digests)
        body = self._append(PUT, n, dims, when, [b"".join(digests), vectors])
        self.rec_starts.append(body)
        self.rec_dims.append(dims)
        self.rec_times.append(when)
        first = body + n * DIGEST
        size = dims * 4
        # the dict is read before the arrays: a digest in both has its newest offset here
        self.tail.update(zip(digests, range(first, first + n * size, size), strict=True))
        if len(self.tail) >= TAIL_MAX:
            self._merge()

    def drop(self, digests: Sequence[bytes], when: int) -> None:
        """Forget ``digests``; a drop record keeps a replay from bringing them back."""
        held = [d for d, off in zip(digests, self.lookup(digests), strict=True) if off >= 0]
        if not held:
            return
        self._append(DROP, len(held), 0, when, [b"".join(held)])
        for d in held:
            self.tail.pop(d, None)
        arr = np.array(held, dtype="S32")
        pos, ok = self._find(arr)
        for p in pos[ok]:
            if self.offs[p] >= 0:
                self.offs[p] = -1
                self.live_main -= 1

    def lookup(self, digests: Sequence[bytes]) -> list[int]:
        """Where each digest's vector starts (-1: not in the journal)."""
        if not digests or not self:
            return [-1] * len(digests)
        out = [self.tail.get(d, -1) for d in digests]
        if len(self.keys):
            pos, ok = self._find(np.array(digests, dtype="S32"))
            for i in np.flatnonzero(ok):
                if out[i] < 0:
                    out[i] = int(self.offs[pos[i]])
        return out

    def _record_of(self, off: int) -> int:
        return bisect.bisect_right(self.rec_starts, off) - 1

    def dims_at(self, off: int) -> int:
        """The dimension of the vector stored at ``off`` (a :meth:`lookup` offset)."""
        return self.rec_dims[self._record_of(off)]

    def vector(self, off: int) -> bytes:
        assert self.fd is not None
        return os.pread(self.fd, self.rec_dims[self._record_of(off)] * 4, off)

    def get(self, digests: Sequence[bytes]) -> dict[bytes, bytes]:
        return {d: self.vector(off) for d, off in zip(digests, self.lookup(digests), strict=True) if off >= 0}

    def __len__(self) -> int:
        """Entries (exact: merges the dict into the arrays first)."""
        self._merge()
        return self.live_main

    def __bool__(self) -> bool:
        return bool(self.tail) or self.live_main > 0

    def entries(self) -> tuple[np.ndarray, np.ndarray]:
        """(digests, offsets) of every entry, in digest order."""
        self._merge()
        keep = self.offs >= 0
        return self.keys[keep], self.offs[keep]

    def rows(self, digests: np.ndarray, offsets: np.ndarray) -> Iterator[tuple[bytes, bytes, int, int]]:
        """(digest, vector, dims, time) of each entry given, in the order given."""
        raw = digests.tobytes()
        for i, off in enumerate(offsets.tolist()):
            r = self._record_of(off)
            assert self.fd is not None
            yield raw[i * DIGEST:(i + 1) * DIGEST], os.pread(self.fd, self.rec_dims[r] * 4, off), \
                self.rec_dims[r], self.rec_times[r]

    def map_bytes(self) -> int:
        """Memory of the map: the arrays, the dict and its keys and values (sys.getsizeof)."""
        import sys

        tail = sys.getsizeof(self.tail) + sum(sys.getsizeof(k) + sys.getsizeof(v) for k, v in self.tail.items())
        return self.keys.nbytes + self.offs.nbytes + tail + sys.getsizeof(self.rec_starts) * 3


def scan_rows(fd: int, sc: Scan) -> Iterator[tuple[bytes, bytes, int, int]]:
    """(digest, vector, dims, time) of each entry of a replayed orphan, in digest order."""
    raw = sc.digests.tobytes()
    for i, (off, d, t) in enumerate(zip(sc.offsets.tolist(), sc.dims.tolist(), sc.times.tolist(), strict=True)):
        yield raw[i * DIGEST:(i + 1) * DIGEST], os.pread(fd, d * 4, off), d, t
