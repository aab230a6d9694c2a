"""The streamed build (memory_core/index/streaming.py) that both executors run, and its writer process
(memory_core/index/writer_proc.py), on real SQLite + sqlite-vec, with the openai SDK talking to the
fake OpenAI server. A build with the default batch sizes is the reference: tiny request
groups, lookups and insert batches must produce the same index from the same sources."""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from memory_core.embeddings.registry import create_provider
from memory_core.errors import RunError
from memory_core.index import streaming
from memory_core.index.pipeline import LocalExecutor, run_index
from memory_core.index.runtypes import Progress
from memory_core.query.search import Searcher
from memory_core.storage.cache import EmbeddingCache
from memory_core.storage.store import SCHEMA_VERSION, connect, probe_index
from tests.conftest import openai_settings, vector_rows

SHARED = "## Standing rule\nAlways page the on-call engineer before touching the primary database.\n"


def _add_duplicates(ws: Path, n: int = 12) -> None:
    """Files that share a chunk (same text, same hash) so the stream meets hashes again."""
    for i in range(n):
        (ws / "memory" / f"dup-{i:02d}.md").write_text(SHARED if i % 3 else SHARED + f"\nnote {i}: unique tail {i}\n")


def _snapshot(index: Path) -> dict[str, Any]:
    conn = connect(index, readonly=True)
    try:
        chunks = sorted(conn.execute(
            "SELECT c.id, c.path, c.source, c.start_line, c.end_line, c.hash, c.model, c.text, c.embedding, f.text,"
            " c.rid FROM chunks c JOIN chunks_fts f ON f.rowid = c.rid").fetchall())
        codes = vector_rows(conn)  # each vector's sign bits, checked against it
        chunks = [(*r[:10], codes[r[10]][1]) for r in chunks]
        files = sorted(conn.execute("SELECT path, source, hash, mtime, size, chunks, lines FROM files").fetchall())
    finally:
        conn.close()
    meta, problem = probe_index(index)
    assert problem is None
    assert meta is not None
    for k in ("built_at",):
        meta.pop(k, None)
    return {"chunks": chunks, "files": files, "meta": meta}


@pytest.mark.parametrize("writer", ["inline", "process"])
def test_tiny_batches_build_the_same_index_as_the_defaults(workspace, openai_fake, tmp_path, monkeypatch, writer):
    _add_duplicates(workspace)
    remote = {"max_inputs_per_request": 5}
    staged = openai_settings(workspace, openai_fake, index_path=str(tmp_path / "staged" / "index.sqlite"),
                             remote=remote, cache={"path": str(tmp_path / "staged" / "cache.sqlite")})
    streamed = openai_settings(workspace, openai_fake, index_path=str(tmp_path / "streamed" / "index.sqlite"),
                               remote=remote)
    run_index(staged)
    staged_inputs = list(openai_fake.input_texts)
    # tiny groups and batches: many requests in flight, rows waiting on several of them,
    # vectors dropped and read back from the cache when a hash comes back
    monkeypatch.setattr(streaming, "INSERT_ROWS", 3)
    monkeypatch.setattr(streaming, "LOOKUP_ROWS", 2)
    monkeypatch.setenv("MEMORY_CORE_WRITER", writer)
    summary = run_index(streamed)
    streamed_inputs = openai_fake.input_texts[len(staged_inputs):]
    assert summary.swapped and "index" in summary.stage_seconds
    # the same texts were embedded, each unique text once, in as many requests
    assert sorted(streamed_inputs) == sorted(staged_inputs)
    assert len(set(streamed_inputs)) == len(streamed_inputs)
    assert summary.chunks_embedded == len(staged_inputs)
    assert summary.embed_requests == -(-len(staged_inputs) // 5)
    a, b = _snapshot(staged.index_file), _snapshot(streamed.index_file)
    assert a["files"] == b["files"]
    assert a["meta"] == b["meta"]
    assert len(a["chunks"]) == len(b["chunks"]) == summary.chunks_total
    assert a["chunks"] == b["chunks"]
    # and every vector is held once: by the published index, which the cache was trimmed of (issue 25)
    meta = b["meta"]
    with EmbeddingCache(streamed.cache_file, "openai", "text-embedding-3-small", meta["provider_key"]) as cache:
        assert cache.count() == 0
    assert len({r[5] for r in b["chunks"]}) == len(set(staged_inputs))


def test_finished_requests_are_taken_in_without_waiting_for_more(workspace, openai_fake, tmp_path):
    """A response that has arrived makes its rows ready at once, even while fewer requests are
    in flight than the stream would wait for (it used to sit there until 2 x workers groups
    were out, holding the writer's first batch back)."""
    s = openai_settings(workspace, openai_fake)
    provider, _ = create_provider(s)
    with EmbeddingCache(tmp_path / "c.sqlite", provider.name, provider.model, provider.provider_key) as cache:
        ex = LocalExecutor(4)
        st = streaming._Stream(provider, cache, ex, Progress())
        try:
            text = "the replica lag alert fired twice"
            h = hashlib.sha256(text.encode()).hexdigest()
            st.add_row(["id", "memory/a.md", "memory", 1, 1, h, provider.model, text, None, None, 0], text)
            st.resolve()
            st.submit()  # (a fast answer is taken in by submit's own drain: nothing left in flight)
            assert len(st.inflight) <= 1
            for fut in list(st.inflight):
                fut.result(timeout=60)
            st.drain(len(st.inflight))  # nothing to wait for: only take in what is there
            assert not st.inflight and h in st.vecs
            (row,) = st.ready_rows(10)
            assert row[5] == h and len(row[9]) == 4 * len(np.frombuffer(cache.get_many([h])[h], dtype="<f4"))
            assert st.progress.ready == 1 and st.progress.embedded == 1
        finally:
            st.close()
            ex.close()


def test_stream_survives_colliding_seen_keys(workspace, openai_fake, tmp_path, monkeypatch):
    """The run remembers the hashes it has seen by hash() only. Were two chunk hashes to
    share one (here: all of them), the later one is refetched from the cache, not found, and
    embedded like a new one: the same index, each unique text embedded once."""
    _add_duplicates(workspace)
    monkeypatch.setattr(streaming, "INSERT_ROWS", 3)
    monkeypatch.setattr(streaming, "LOOKUP_ROWS", 2)
    remote = {"max_inputs_per_request": 5}
    normal = openai_settings(workspace, openai_fake, index_path=str(tmp_path / "normal" / "index.sqlite"),
                             remote=remote)
    run_index(normal)
    normal_inputs = list(openai_fake.input_texts)
    monkeypatch.setattr(streaming, "hash", lambda _h: 0, raising=False)
    colliding = openai_settings(workspace, openai_fake, index_path=str(tmp_path / "colliding" / "index.sqlite"),
                                remote=remote)
    summary = run_index(colliding)
    sent = openai_fake.input_texts[len(normal_inputs):]
    assert sorted(sent) == sorted(normal_inputs) and len(set(sent)) == len(sent)
    assert summary.chunks_embedded == len(normal_inputs)
    a, b = _snapshot(normal.index_file), _snapshot(colliding.index_file)
    assert a["chunks"] == b["chunks"] and a["files"] == b["files"]


def test_stream_incremental_run_matches_a_full_build(workspace, openai_fake, tmp_path, monkeypatch):
    monkeypatch.setenv("MEMORY_CORE_WRITER", "process")
    s = openai_settings(workspace, openai_fake)
    run_index(s)
    _add_duplicates(workspace, 4)
    (workspace / "memory" / "2026-09-04.md").write_text("## 09:00\nThe replica lag threshold is now 45s.\n")
    (workspace / "MEMORY.md").unlink()
    n_before = len(openai_fake.input_texts)
    inc = run_index(s)
    assert inc.swapped and not inc.full and inc.files_removed == 1
    sent = openai_fake.input_texts[n_before:]
    assert "The replica lag threshold is now 45s." in "".join(sent)
    full = openai_settings(workspace, openai_fake, index_path=str(tmp_path / "full" / "index.sqlite"))
    run_index(full)
    a, b = _snapshot(s.index_file), _snapshot(full.index_file)
    assert a["files"] == b["files"] and a["chunks"] == b["chunks"]


def _writer_children() -> list[int]:
    pids = []
    for task in Path(f"/proc/{os.getpid()}/task").iterdir():
        try:  # a thread may end between the listing and the read
            with open(task / "children") as fh:
                pids += [int(p) for p in fh.read().split()]
        except FileNotFoundError:
            continue
    out = []
    for pid in pids:
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if b"memory_core.index.writer_proc" in cmd:
            out.append(pid)
    return out


def kill_writer_on_first_embed(provider: Any, monkeypatch: Any, ready: Any = None) -> list[int]:
    """Patch ``provider.embed_documents`` so its first call SIGKILLs the run's writer process (an
    OOM kill while the run embeds), once ``ready()`` holds (up to 60 s); the killed pids."""
    real = provider.embed_documents
    killed: list[int] = []

    def embed(texts: list[str]) -> object:
        if not killed:
            deadline = time.monotonic() + 60
            while ready is not None and not ready() and time.monotonic() < deadline:
                time.sleep(0.01)
            killed.extend(_writer_children())
            assert killed, "no writer process"
            for pid in killed:
                os.kill(pid, signal.SIGKILL)
        return real(texts)

    monkeypatch.setattr(provider, "embed_documents", embed)
    return killed


def test_writer_process_death_fails_the_run_and_keeps_the_live_index(workspace, openai_fake, monkeypatch):
    monkeypatch.setenv("MEMORY_CORE_WRITER", "process")
    s = openai_settings(workspace, openai_fake, remote={"max_inputs_per_request": 4})
    run_index(s)
    before = hashlib.sha256(s.index_file.read_bytes()).hexdigest()
    for i in range(6):
        (workspace / "memory" / f"new-{i}.md").write_text(f"## note {i}\nfresh text number {i} about deploys\n" * 3)

    provider, reason = create_provider(s)
    kill_writer_on_first_embed(provider, monkeypatch)  # the writer process dies while the run embeds
    with pytest.raises(RunError, match="index writer process died"):
        run_index(s, provider=provider, reason=reason)
    assert hashlib.sha256(s.index_file.read_bytes()).hexdigest() == before
    n_before = len(openai_fake.input_texts)
    rerun = run_index(s)
    assert rerun.swapped and rerun.files_new == 6
    assert len(openai_fake.input_texts) == n_before  # what the failed run received was cached
    assert not [p for p in s.index_file.parent.iterdir() if ".tmp-" in p.name]
    assert not _writer_children()


def test_writer_process_error_is_one_clear_message(workspace, openai_fake, monkeypatch):
    """A failure inside the child (here: two rows with one chunk id, a UNIQUE violation on the
    first insert) reaches the run as one RunError with the child's message, after the edits
    sent behind it were drained; the live index and the directory are as they were."""
    monkeypatch.setenv("MEMORY_CORE_WRITER", "process")
    monkeypatch.setattr(streaming, "INSERT_ROWS", 2)
    s = openai_settings(workspace, openai_fake)
    run_index(s)
    before = hashlib.sha256(s.index_file.read_bytes()).hexdigest()
    for i in range(5):
        (workspace / "memory" / f"new-{i}.md").write_text(f"## note {i}\nfresh text number {i}\n")
    monkeypatch.setattr(streaming, "chunk_id", lambda *a: "same-id")
    with pytest.raises(RunError, match="UNIQUE constraint failed"):
        run_index(s)
    assert hashlib.sha256(s.index_file.read_bytes()).hexdigest() == before
    assert not [p for p in s.index_file.parent.iterdir() if ".tmp-" in p.name]
    assert not _writer_children()


def test_over_window_chunks_are_counted_per_file_and_survive_incremental_runs(workspace, openai_fake):
    s = openai_settings(workspace, openai_fake)
    provider, reason = create_provider(s)
    provider.max_tokens_per_input = 60  # a small window: many chunks are over it
    first = run_index(s, provider=provider, reason=reason)
    meta, _ = probe_index(s.index_file)
    assert meta is not None
    by_path = meta["over_window_by_path"]
    assert first.chunks_over_window == meta["chunks_over_window"] == sum(by_path.values()) > 0
    assert any("over the model's input window" in line for line in first.lines())
    with Searcher(s, provider=provider) as searcher:
        assert searcher.status().chunks_over_window == first.chunks_over_window
    gone = max(by_path, key=by_path.get)
    (workspace / gone).unlink()
    second = run_index(s, provider=provider, reason=reason)
    assert second.swapped and not second.full
    assert second.chunks_over_window == first.chunks_over_window - by_path[gone]
    meta2, _ = probe_index(s.index_file)
    assert gone not in meta2["over_window_by_path"]
    # a run with nothing to do reports the index's count
    third = run_index(s, provider=provider, reason=reason)
    assert not third.swapped and third.chunks_over_window == second.chunks_over_window


def test_small_runs_write_in_process_large_ones_in_a_child(monkeypatch):
    monkeypatch.delenv("MEMORY_CORE_WRITER", raising=False)
    assert not streaming.use_process_writer(10_000)
    assert streaming.use_process_writer(streaming.PROCESS_WRITER_BYTES)
    monkeypatch.setenv("MEMORY_CORE_WRITER", "inline")
    assert not streaming.use_process_writer(10**12)


def test_keyword_only_stream(workspace, monkeypatch, tmp_path):
    monkeypatch.setenv("MEMORY_CORE_WRITER", "process")
    from memory_core.config import load_settings

    s = load_settings(None, {"workspace": str(workspace), "provider": "none"})
    summary = run_index(s)
    assert summary.swapped and summary.chunks_total > 0 and summary.embed_requests == 0
    with Searcher(s) as searcher:
        assert searcher.search("replica lag", mode="keyword")
    shutil.rmtree(tmp_path / "ws" / ".memory-core", ignore_errors=True)


@pytest.mark.parametrize("schema", [1, 2])
def test_a_cache_of_an_older_schema_is_converted_and_keeps_its_vectors(tmp_path, schema):
    """Caches written by schema 1 (WITHOUT ROWID) or 2 (rowid, text keys) are converted to
    schema 3 (model ids and 32-byte digests) when opened, keeping every vector, its age and
    the other models' entries."""
    import numpy as np

    from memory_core.storage.cache import cache_entry_count
    from memory_core.storage.store import connect as sqlite_connect

    path = tmp_path / "old.cache.sqlite"
    conn = sqlite_connect(path)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(
        "CREATE TABLE embedding_cache (provider TEXT NOT NULL, model TEXT NOT NULL, provider_key TEXT NOT NULL,"
        " hash TEXT NOT NULL, embedding BLOB NOT NULL, dims INTEGER, updated_at INTEGER NOT NULL,"
        " PRIMARY KEY (provider, model, provider_key, hash))" + (" WITHOUT ROWID;" if schema == 1 else ";")
        + " CREATE INDEX idx_embedding_cache_updated_at ON embedding_cache(updated_at);")
    h = [hashlib.sha256(str(i).encode()).hexdigest() for i in range(4)]
    vecs = np.arange(16, dtype="<f4").reshape(4, 4)
    with conn:
        conn.executemany("INSERT INTO embedding_cache VALUES('openai', 'm', 'k', ?, ?, 4, ?)",
                         [(h[i], vecs[i].tobytes(), i) for i in range(3)])
        conn.execute("INSERT INTO embedding_cache VALUES('voyage', 'v', 'k2', ?, ?, 4, 5)", (h[0], vecs[3].tobytes()))
    conn.close()
    assert cache_entry_count(path) == 4
    with EmbeddingCache(path, "openai", "m", "k") as cache:
        tables = {r[0] for r in cache.conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        assert "embedding_cache" not in tables and "cache_vectors" in tables
        assert cache.conn.execute("PRAGMA freelist_count").fetchone()[0] == 0  # the old table's pages went back
        assert cache.get_many(h[:3]) == {h[i]: vecs[i].tobytes() for i in range(3)}
        assert cache.hashes() == set(h[:3]) and cache.count(all_models=True) == 4
        cache.put_array([h[1], h[3]], vecs[:2] + 1)  # upsert still works on the new key
        assert cache.get_many([h[1]])[h[1]] == (vecs[0] + 1).tobytes()
        assert cache.count() == 4 and not cache.is_empty()
        assert cache.evict(3) == 2  # the oldest first: h0 and h2 of this model (updated_at 0 and 2)
        assert set(cache.get_many(h)) == {h[1], h[3]}
    with EmbeddingCache(path, "voyage", "v", "k2") as other:  # the other model's vector kept its key
        assert other.get_many([h[0]]) == {h[0]: vecs[3].tobytes()}
    assert cache_entry_count(path) == 3


def test_cache_keys_must_be_sha256_digests(tmp_path):
    import numpy as np

    with EmbeddingCache(tmp_path / "c.sqlite", "openai", "m", "k") as cache:
        with pytest.raises(ValueError, match="sha256"):
            cache.put_array(["h1"], np.ones((1, 4), dtype="<f4"))
        with pytest.raises(ValueError, match="sha256"):
            cache.get_many(["ab" * 16])  # hex, but not 32 bytes
        assert cache.count(all_models=True) == 0


def test_vectors_are_stored_once_as_float32_with_their_sign_bits(workspace, openai_fake, monkeypatch, tmp_path):
    """Each vector is stored once at full precision (chunks.embedding) and once as sign bits
    (chunks_bits), with or without sqlite-vec (no extension is needed to write or search it)."""
    import memory_core.query.retrieval as retrieval_mod
    import memory_core.storage.store as store_mod

    monkeypatch.setenv("MEMORY_CORE_WRITER", "inline")
    with_vec = openai_settings(workspace, openai_fake, index_path=str(tmp_path / "vec" / "index.sqlite"))
    run_index(with_vec)
    conn = connect(with_vec.index_file, readonly=True)
    n = conn.execute("SELECT count(*) FROM chunks").fetchone()[0]
    assert len(vector_rows(conn)) == n > 0  # one float32 vector and its code per chunk
    assert not conn.execute("SELECT count(*) FROM sqlite_master WHERE name LIKE 'chunks_vec%'").fetchone()[0]
    conn.close()
    meta = probe_index(with_vec.index_file)[0]
    assert (meta["vector_store"], meta["schema_version"]) == ("blob+bits", SCHEMA_VERSION)
    with Searcher(with_vec) as s:
        vec_hits = [(h.path, h.start_line, h.vector_score) for h in s.search("replica lag alert", mode="vector",
                                                                              max_results=5, min_score=0)]
        assert vec_hits and s.status().vector_search.startswith("sign bits")

    monkeypatch.setattr(store_mod, "load_vec", lambda conn: False)
    monkeypatch.setattr(retrieval_mod, "load_vec", lambda conn: False)
    blob = openai_settings(workspace, openai_fake, index_path=str(tmp_path / "blob" / "index.sqlite"))
    run_index(blob)
    assert probe_index(blob.index_file)[0]["vector_store"] == "blob+bits"
    with Searcher(blob) as s:
        assert [(h.path, h.start_line, h.vector_score) for h in s.search(
            "replica lag alert", mode="vector", max_results=5, min_score=0)] == vec_hits
        assert s.status().vector_search.startswith("sign bits")
