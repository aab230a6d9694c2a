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
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from memory_core.embeddings.batch_types import JobRecord

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
  error TEXT NOT NULL DEFAULT ''
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
            " output_file_id, error_file_id, requests, tokens, created_at, updated_at, error")


class BatchLedger:
    """Jobs of one provider configuration (provider, model, provider_key) in the cache file.

    ``conn`` is the cache's apsw connection; ``lock`` serialises write transactions with the
    cache's own writes on that connection (pass the cache's lock when threads share it).
    """

    def __init__(self, conn: Any, provider: str, model: str, provider_key: str, *,
                 index_path: str = "", lock: threading.Lock | None = None) -> None:
        self.conn = conn
        self.provider = provider
        self.model = model
        self.provider_key = provider_key
        self.index_path = index_path
        self.lock = lock or threading.Lock()
        with self.lock:
            self.conn.execute(_SCHEMA)

    @classmethod
    def for_cache(cls, cache: Any, *, index_path: str = "") -> BatchLedger:
        """The ledger in ``cache``'s file, sharing its connection and write lock."""
        lock = getattr(cache, "_lock", None)
        return cls(cache.conn, cache.provider, cache.model, cache.provider_key, index_path=index_path, lock=lock)

    # -- writes ------------------------------------------------------------------------------
    def record_submission(self, local_id: str, chunks: Iterable[tuple[str, int]], *, requests: int,
                          tokens: int) -> None:
        """Record a job about to be submitted, with every chunk hash it covers (one transaction)."""
        now = _now()
        with self.lock, self.conn:
            self.conn.execute(
                "INSERT INTO batch_jobs(local_id, provider, model, provider_key, index_path, state, requests, tokens,"
                " created_at, updated_at) VALUES(?,?,?,?,?,?,?,?,?,?)",
                (local_id, self.provider, self.model, self.provider_key, self.index_path, SUBMITTING, requests,
                 tokens, now, now),
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
