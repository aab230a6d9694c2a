"""Shared fixtures: example workspaces, fake provider servers, settings builders."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from memory_core.config import Settings, load_settings
from memory_core.storage.store import connect_reader
from memory_core.storage.textsearch import build_match_query

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
for _var in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "GEMINI_API_KEY", "GOOGLE_API_KEY", "VOYAGE_API_KEY",
             "MISTRAL_API_KEY", "MISTRAL_BASE_URL",
             "MEMORY_CORE_CONFIG", "MEMORY_CORE_WORKSPACE", "MEMORY_CORE_INDEX", "MEMORY_CORE_PROVIDER",
             "MEMORY_CORE_AGENT"):
    os.environ.pop(_var, None)
# the tests' days are UTC's whatever the machine's zone (a transcript's "Z" message counts for its
# day in the process's zone: memory_core.sources.sessions.local_day); tests/test_time_zone.py sets others
os.environ["TZ"] = "UTC"
time.tzset()
# in each of pytest-xdist's workers (pyproject's addopts: 2), the local model's share of the cores
# (the provider reads OMP_NUM_THREADS as torch does; at least 1): two workers each running
# onnxruntime on every core embedded the example workspace at once in 41 s, with one thread each in 33 s
if os.environ.get("PYTEST_XDIST_WORKER_COUNT", "").isdigit():
    _cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, _cores // int(os.environ["PYTEST_XDIST_WORKER_COUNT"]))))

# The files that take longest (measured on a 2-core machine, 2026-12-02), handed out first:
# `--dist loadfile` gives the workers whole files in collection order, and a long file started
# last ran alone while the other worker sat idle. The suite under -n 2 there: 18.3 min before,
# 17.0 after. Order only: a stale list costs time, never a result. Every other file keeps its
# place after them.
_LONGEST_FIRST = (
    "test_deployments", "test_flow", "test_settings_source", "test_flow_cancel_owner", "test_qmd",
    "test_flow_cancel", "test_scores", "test_flow_crashed", "test_incremental_differential",
    "test_local_provider", "test_runs_say", "test_stop_audit20", "test_killpoints", "test_runs_audit",
    "test_store_attack", "test_inplace", "test_store_kills", "test_api", "test_fault_injection",
    "test_reliability",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    rank = {name: i for i, name in enumerate(_LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.stem, len(rank)))  # stable: a file's tests keep their order


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """A private copy of examples/workspace (and its sessions) to index and edit."""
    ws = tmp_path / "ws"
    shutil.copytree(EXAMPLES / "workspace", ws, ignore=shutil.ignore_patterns(".memory-core"))
    shutil.copytree(EXAMPLES / "sessions", ws / "sessions")
    return ws


@pytest.fixture
def openai_fake() -> Iterator[Any]:
    from tests.fakes.openai_fake import OpenAIFake

    with OpenAIFake(dims=64) as srv:
        yield srv


def openai_settings(ws: Path, srv: Any, **overrides: Any) -> Settings:
    """Settings for the OpenAI provider pointed at a fake server (64-d vectors, fast retries)."""
    remote = {"api_key": "sk-test-key-0123456789", "base_url": srv.base_url, "dimensions": 64,
              "backoff_initial_s": 0.01, "backoff_max_s": 0.05, "timeout_s": 10}
    remote.update(overrides.pop("remote", {}))
    data: dict[str, Any] = {"workspace": str(ws), "provider": "openai", "model": "text-embedding-3-small",
                            "remote": remote}
    data.update(overrides)
    return load_settings(None, data)


def vector_rows(conn: Any) -> dict[int, tuple[bytes, bytes]]:
    """rid -> (float32 vector, sign-bit code) of every chunk of an index (schema 3), after checking
    that each chunk has both and that each code is the sign bits of its vector."""
    import numpy as np

    from memory_core.storage import vectors

    floats = dict(conn.execute("SELECT rid, embedding FROM chunks WHERE embedding IS NOT NULL"))
    codes: dict[int, bytes] = {}
    for raw_ids, raw_codes in conn.execute(f"SELECT rids, codes FROM {vectors.BITS_TABLE}"):
        ids = np.frombuffer(raw_ids, dtype="<i8")
        c = np.frombuffer(raw_codes, dtype=np.uint8).reshape(len(ids), -1)
        for rid, code in zip(ids.tolist(), c, strict=True):
            if rid:
                assert rid not in codes, f"row {rid} has two codes"
                codes[rid] = code.tobytes()
    assert set(codes) == set(floats), "every vector has one code and every code a vector"
    for rid, f in floats.items():
        assert codes[rid] == vectors.quantize(np.frombuffer(f, dtype="<f4")[None, :])[0].tobytes()
    return {rid: (floats[rid], codes[rid]) for rid in floats}


def vector_count(conn: Any) -> int:
    """Chunks with a vector (and its code; see :func:`vector_rows`)."""
    return len(vector_rows(conn))


@pytest.fixture(scope="module")
def prefect_api(request: pytest.FixtureRequest) -> Iterator[Any]:
    """The session's one real Prefect server (tests/prefect_server.py), its settings active for
    the module, with no worker left from another module before or after."""
    from tests.prefect_server import drain_workers, shared_server

    srv = shared_server(request.config)
    with srv.settings():
        drain_workers()
        yield srv
        drain_workers()


def index_content(index: Path, probes: Sequence[str]) -> dict[str, Any]:
    """What an index says, independent of its row ids: its files rows; each chunk's lines, hash,
    text, source, vector and sign-bit code (checked by :func:`vector_rows`); its exchange vectors;
    and FTS5's bm25() of each chunk for each of ``probes``. Two indexes of the same files compare equal."""
    conn = connect_reader(index)
    try:
        vecs = vector_rows(conn)  # also: every vector has one code, and it is its sign bits
        chunks = {}
        for rid, cid, path, source, start, end, h, text in conn.execute(
                "SELECT rid, id, path, source, start_line, end_line, hash, text FROM chunks"):
            chunks[cid] = (path, source, start, end, h, text, vecs.get(rid))
        files = sorted(conn.execute("SELECT path, source, hash, size, chunks, lines FROM files"))
        parts = sorted(conn.execute("SELECT c.id, p.embedding FROM chunk_parts p JOIN chunks c ON c.rid = p.chunk")
                       ) if _has_table(conn, "chunk_parts") else []
        fts = {}
        for q in probes:
            match = build_match_query(q)
            fts[q] = sorted(conn.execute(
                "SELECT c.id, bm25(chunks_fts) FROM chunks_fts JOIN chunks c ON c.rid = chunks_fts.rowid"
                " WHERE chunks_fts MATCH ?", (match,)))
        return {"chunks": chunks, "files": files, "parts": parts, "fts": fts}
    finally:
        conn.close()


def _has_table(conn: Any, table: str) -> bool:
    return conn.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (table,)).fetchone() is not None


def model_cosines(settings: Settings, query: str, texts: Sequence[str]) -> Any:
    """The cosine of each of ``texts`` to ``query`` by the settings' embedding provider, computed
    here from the model itself (what a part vector's cosine must be)."""
    import numpy as np

    from memory_core.embeddings.registry import create_provider

    model, _ = create_provider(settings)
    q = np.asarray(model.embed_query(query), dtype=np.float32).reshape(-1)
    w = np.asarray(model.embed_documents(list(texts)), dtype=np.float32)
    return (w @ q) / (np.linalg.norm(w, axis=1) * np.linalg.norm(q))


def forget_meta_key(index: Path, key: str) -> Any:
    """Remove ``key`` from an index's meta record, as an index built before that key existed;
    returns the value it had."""
    import json

    from memory_core.storage import store

    conn = store.connect(index)
    try:
        meta = json.loads(conn.execute("SELECT value FROM meta WHERE key = ?", (store.META_KEY,)).fetchone()[0])
        value = meta.pop(key)
        conn.execute("UPDATE meta SET value = ? WHERE key = ?", (json.dumps(meta), store.META_KEY))
    finally:
        conn.close()
    return value


def set_meta_key(index: Path, key: str, value: Any) -> None:
    """Set ``key`` of an index's meta record, as a build of another version recorded it."""
    from memory_core.storage.store import connect, read_meta, write_meta

    conn = connect(index)
    try:
        with conn:
            meta = read_meta(conn)
            assert meta is not None
            meta[key] = value
            write_meta(conn, meta)
    finally:
        conn.close()
