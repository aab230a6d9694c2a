"""The batch job ledger: every provider job we submit, recorded before it can cost money.

It lives in the embedding cache's SQLite file (WAL), next to the vectors it will produce, so
"what was paid for" is one durable place. A job goes through these states:

``submitting``  written *before* the input is uploaded, with the chunk hashes it covers and a
                local id that is also given to the provider (OpenAI/Voyage ``metadata``,
                Gemini ``display_name``): a run killed between "create" and "record" can still
                find its job at the provider by that id.
``submitted``   the provider's job id is known (written the moment ``create`` returns).
closed          ``collected`` (output read into the cache), ``failed`` (failed, expired or
                lost; whatever output existed was read), ``cancelled`` (we cancelled it),
                ``abandoned`` (it never reached the provider). The chunk rows of a closed job
                are deleted; the job row stays as a small history.

A later run re-attaches to every open job of the same provider configuration that covers a
chunk it needs, polls it and collects it, instead of submitting those chunks again.

Owners (a cache file shared by several indexes or agents, ``cache.path`` set for each): every job
row names the run that owns it (``owner``, a random token; ``owner_info`` says host and pid, for
people). A run holds an exclusive ``flock`` on ``<cache file>-batch-owner-<token>`` from its start
to its end (:class:`RunOwner`); the kernel drops it when the process dies, however it dies, so
"is the owner alive" is "can that file be locked" (:meth:`BatchLedger.owner_alive`): no pid that
may be reused, no clock, no heartbeat to expire under a slow upload, and a long-lived process
(an MCP server, a Prefect worker) whose run ended no longer holds its jobs. ``flock`` locks
belong to an open file, so two runs in one process are told apart too. A run never recovers,
abandons, cancels or collects a job whose owner is alive and not itself; it takes over a dead
owner's job with a compare-and-swap on ``owner`` (:meth:`BatchLedger.claim`), so two runs never
adopt the same job. Rows written before owners existed (``owner = ''``) are a dead run's. The
cache file is SQLite in WAL mode, so all its users are on one host, where the lock is exact.
"""

from __future__ import annotations

import contextlib
import fcntl
import glob
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memory_core.embeddings.batch_types import JobRecord

log = logging.getLogger("memory_core.batch")

SUBMITTING = "submitting"
SUBMITTED = "submitted"
COLLECTED = "collected"
FAILED = "failed"
CANCELLED = "cancelled"
ABANDONED = "abandoned"
OPEN_STATES = (SUBMITTING, SUBMITTED)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS batch_jobs (
  local_id TEXT PRIMARY KEY,
  job_id TEXT,
  provider TEXT NOT NULL,
  model TEXT NOT NULL,
  provider_key TEXT NOT NULL,
  index_path TEXT NOT NULL DEFAULT '',
  state TEXT NOT NULL,
  provider_status TEXT NOT NULL DEFAULT '',
  input_file_id TEXT,
  output_file_id TEXT,
  error_file_id TEXT,
  requests INTEGER NOT NULL DEFAULT 0,
  tokens INTEGER NOT NULL DEFAULT 0,
  created_at INTEGER NOT NULL,
  updated_at INTEGER NOT NULL,
  error TEXT NOT NULL DEFAULT '',
  owner TEXT NOT NULL DEFAULT '',
  owner_info TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS idx_batch_jobs_config ON batch_jobs(provider, model, provider_key, state);
CREATE TABLE IF NOT EXISTS batch_job_chunks (
  local_id TEXT NOT NULL,
  hash TEXT NOT NULL,
  tokens INTEGER NOT NULL DEFAULT 0,
  PRIMARY KEY (local_id, hash)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS idx_batch_job_chunks_hash ON batch_job_chunks(hash);
"""


def _now() -> int:
    return int(time.time() * 1000)


@dataclass
class LedgerJob:
    local_id: str
    job_id: str | None
    provider: str
    model: str
    provider_key: str
    index_path: str
    state: str
    provider_status: str
    input_file_id: str | None
    output_file_id: str | None
    error_file_id: str | None
    requests: int
    tokens: int
    created_at: int
    updated_at: int
    error: str
    owner: str = ""  # the token of the run that owns it ('' : written before owners, or no lock)
    owner_info: str = ""  # "host=... pid=..." of that run, for people

    @property
    def open(self) -> bool:
        return self.state in OPEN_STATES

    def record(self) -> JobRecord:
        from memory_core.embeddings.batch_types import PENDING

        return JobRecord(
            local_id=self.local_id, provider=self.provider, job_id=self.job_id, status=PENDING,
            provider_status=self.provider_status, requests=self.requests, tokens=self.tokens,
            input_file_id=self.input_file_id, output_file_id=self.output_file_id,
            error_file_id=self.error_file_id, reattached=True,
        )


_COLUMNS = ("local_id, job_id, provider, model, provider_key, index_path, state, provider_status, input_file_id,"
            " output_file_id, error_file_id, requests, tokens, created_at, updated_at, error, owner, owner_info")
_OWNER_COLUMNS = (("owner", "TEXT NOT NULL DEFAULT ''"), ("owner_info", "TEXT NOT NULL DEFAULT ''"))
OWNER_LOCK = "-batch-owner-"  # <cache file>-batch-owner-<token>: held by the run that owns the token


def owner_lock_path(cache_path: str | os.PathLike[str], token: str) -> Path:
    return Path(f"{os.fspath(cache_path)}{OWNER_LOCK}{token}")


class RunOwner:
    """This run's owner token and the lock that says it is alive (see the module docstring).

    :meth:`acquire` never fails a run: when the lock file cannot be made (a read-only folder, a
    file system without locks), the token is ``''`` and the run's rows look like a dead run's to
    others (the behaviour before owners)."""

    def __init__(self, token: str, fd: int | None, path: Path | None) -> None:
        self.token = token
        self.info = f"host={socket.gethostname()} pid={os.getpid()}"
        self._fd = fd
        self._path = path

    @classmethod
    def acquire(cls, cache_path: str | os.PathLike[str] | None) -> RunOwner:
        if cache_path is None:
            return cls("", None, None)
        _sweep(cache_path)
        for _ in range(8):
            token = uuid.uuid4().hex[:16]
            path = owner_lock_path(cache_path, token)
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            except OSError as exc:
                log.warning("batch: cannot create the run's owner lock %s (%s); its jobs look unowned", path, exc)
                return cls("", None, None)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                # a sweep may have locked, unlinked and closed it between our create and lock:
                # a lock on a file no longer at ``path`` says nothing to others
                here, mine = os.stat(path, follow_symlinks=False), os.fstat(fd)
                if (here.st_dev, here.st_ino) != (mine.st_dev, mine.st_ino):
                    raise FileNotFoundError(path)
            except OSError:  # a sweep of another run has it (or had it): take another token
                os.close(fd)
                continue
            return cls(token, fd, path)
        return cls("", None, None)

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        """Unlink, then unlock (a run looking at it meanwhile sees the owner gone: it is)."""
        if self._fd is None:
            return
        if self._path is not None:
            with contextlib.suppress(OSError):
                self._path.unlink()
        os.close(self._fd)
        self._fd = None

    def __enter__(self) -> RunOwner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def owner_alive(cache_path: str | os.PathLike[str] | None, token: str) -> bool:
    """Whether the run owning ``token`` is alive: its lock file exists and is locked. A dead
    owner's file is removed on the way."""
    if not token or cache_path is None:
        return False
    path = owner_lock_path(cache_path, token)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    except OSError:
        return True  # there, but cannot be looked at: never take a job on a guess
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)  # shared: two runs looking do not block each other
        except BlockingIOError:
            return True
        except OSError:
            return True
        with contextlib.suppress(OSError):
            path.unlink()  # the owner is dead and its token never comes back
        return False
    finally:
        os.close(fd)


def _sweep(cache_path: str | os.PathLike[str]) -> None:
    """Remove owner lock files of dead runs (killed ones leave theirs). Exclusive and non-blocking;
    a run that has just created its file and not yet locked it loses this race: its lock fails,
    or lands on the unlinked file, which :meth:`RunOwner.acquire` sees and retries with a new token."""
    for name in glob.glob(glob.escape(os.fspath(cache_path)) + OWNER_LOCK + "*"):
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            continue
        with contextlib.suppress(OSError):
            os.unlink(name)
        os.close(fd)


class BatchLedger:
    """Jobs of one provider configuration (provider, model, provider_key) in the cache file.

    ``conn`` is the cache's apsw connection; ``lock`` serialises write transactions with the
    cache's own writes on that connection (pass the cache's lock when threads share it).
    """

    def __init__(self, conn: Any, provider: str, model: str, provider_key: str, *,
                 index_path: str = "", lock: threading.Lock | None = None,
                 path: str | os.PathLike[str] | None = None) -> None:
        self.conn = conn
        self.provider = provider
        self.model = model
        self.provider_key = provider_key
        self.index_path = index_path
        self.path = path  # the cache file (owner locks live beside it); None: owners are never alive
        self.lock = lock or threading.Lock()
        with self.lock:
            self.conn.execute(_SCHEMA)
            self._add_owner_columns()

    def _add_owner_columns(self) -> None:
        """A ledger written before owners: add the columns (its rows get ``owner = ''``)."""
        have = {r[1] for r in self.conn.execute("PRAGMA table_info(batch_jobs)")}
        for name, decl in _OWNER_COLUMNS:
            if name not in have:
                try:
                    self.conn.execute(f"ALTER TABLE batch_jobs ADD COLUMN {name} {decl}")
                except Exception as exc:  # another process added it first
                    if "duplicate column" not in str(exc).lower():
                        raise

    @classmethod
    def for_cache(cls, cache: Any, *, index_path: str = "") -> BatchLedger:
        """The ledger in ``cache``'s file, sharing its connection and write lock."""
        lock = getattr(cache, "_lock", None)
        return cls(cache.conn, cache.provider, cache.model, cache.provider_key, index_path=index_path, lock=lock,
                   path=getattr(cache, "path", None))

    # -- writes ------------------------------------------------------------------------------
    def record_submission(self, local_id: str, chunks: Iterable[tuple[str, int]], *, requests: int,
                          tokens: int, owner: str = "", owner_info: str = "") -> None:
        """Record a job about to be submitted, with every chunk hash it covers (one transaction),
        owned by the run holding ``owner``'s lock."""
        now = _now()
        with self.lock, self.conn:
            self.conn.execute(
                "INSERT INTO batch_jobs(local_id, provider, model, provider_key, index_path, state, requests, tokens,"
                " created_at, updated_at, owner, owner_info) VALUES(?,?,?,?,?,?,?,?,?,?,?,?)",
                (local_id, self.provider, self.model, self.provider_key, self.index_path, SUBMITTING, requests,
                 tokens, now, now, owner, owner_info),
            )
            self.conn.executemany(
                "INSERT OR IGNORE INTO batch_job_chunks(local_id, hash, tokens) VALUES(?,?,?)",
                ((local_id, h, t) for h, t in chunks),
            )

    def _update(self, local_id: str, **fields: object) -> None:
        fields["updated_at"] = _now()
        cols = ", ".join(f"{k} = ?" for k in fields)
        with self.lock, self.conn:
            self.conn.execute(f"UPDATE batch_jobs SET {cols} WHERE local_id = ?", (*fields.values(), local_id))

    def set_input_file(self, local_id: str, file_id: str) -> None:
        self._update(local_id, input_file_id=file_id)

    def set_submitted(self, local_id: str, job_id: str, provider_status: str = "") -> None:
        self._update(local_id, job_id=job_id, state=SUBMITTED, provider_status=provider_status)

    def set_status(self, rec: JobRecord) -> None:
        self._update(rec.local_id, provider_status=rec.provider_status or "", output_file_id=rec.output_file_id,
                     error_file_id=rec.error_file_id, error=rec.error[:500])

    def claim(self, local_id: str, was: str, owner: str, owner_info: str = "") -> bool:
        """Take over an open job from the owner ``was`` (dead, or ''): True if this call did, False
        if the row changed owner meanwhile (another run took it) or was closed."""
        if owner == was:
            return True
        marks = ",".join("?" * len(OPEN_STATES))
        with self.lock, self.conn:
            self.conn.execute(
                f"UPDATE batch_jobs SET owner = ?, owner_info = ?, updated_at = ? WHERE local_id = ? AND owner = ?"
                f" AND state IN ({marks})", (owner, owner_info, _now(), local_id, was, *OPEN_STATES))
            return bool(self.conn.changes())

    def owner_alive(self, token: str) -> bool:
        return owner_alive(self.path, token)

    def close(self, local_id: str, state: str, error: str = "") -> None:
        """Close a job (collected, failed, cancelled, abandoned) and drop its chunk rows."""
        now = _now()
        with self.lock, self.conn:
            self.conn.execute("UPDATE batch_jobs SET state = ?, error = ?, updated_at = ? WHERE local_id = ?",
                              (state, error[:500], now, local_id))
            self.conn.execute("DELETE FROM batch_job_chunks WHERE local_id = ?", (local_id,))

    # -- reads -------------------------------------------------------------------------------
    def get(self, local_id: str) -> LedgerJob | None:
        row = self.conn.execute(f"SELECT {_COLUMNS} FROM batch_jobs WHERE local_id = ?", (local_id,)).fetchone()
        return LedgerJob(*row) if row else None

    def open_jobs(self) -> list[LedgerJob]:
        """Open jobs of this provider configuration, oldest first."""
        marks = ",".join("?" * len(OPEN_STATES))
        rows = self.conn.execute(
            f"SELECT {_COLUMNS} FROM batch_jobs WHERE provider = ? AND model = ? AND provider_key = ?"
            f" AND state IN ({marks}) ORDER BY created_at, local_id",
            (self.provider, self.model, self.provider_key, *OPEN_STATES),
        ).fetchall()
        return [LedgerJob(*r) for r in rows]

    def jobs(self) -> list[LedgerJob]:
        rows = self.conn.execute(f"SELECT {_COLUMNS} FROM batch_jobs ORDER BY created_at, local_id").fetchall()
        return [LedgerJob(*r) for r in rows]

    def chunks(self, local_id: str) -> list[tuple[str, int]]:
        return [(h, t) for h, t in self.conn.execute(
            "SELECT hash, tokens FROM batch_job_chunks WHERE local_id = ?", (local_id,))]

    def hashes(self, local_id: str) -> list[str]:
        return [h for h, _ in self.chunks(local_id)]
