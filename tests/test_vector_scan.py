"""The index knows how well its quick vector scan works on its own vectors (issue 39).

Some OpenAI-compatible endpoints return sparse, feature-hashed vectors (~94% zeros): their sign
bits say little, and the quick scan (sign bits, then exact cosines of a few hundred candidates)
missed the nearest chunks without a word. A build now measures the quick scan against an exact
scan on a sample of the index's own vectors, records the result and the way searches read the
vectors (memory_core.storage.vectors.ScanPlan) in the index's meta, shows it in ``status``, and a
search of an index whose quick scan is below 0.98 widens its candidates or reads every vector.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from memory_core.index.pipeline import run_index
from memory_core.index.writer import FileRow, IndexWriter
from memory_core.query import retrieval
from memory_core.query.search import Searcher
from memory_core.storage import vectors
from memory_core.storage.store import SCHEMA_VERSION, connect, probe_index
from tests.conftest import openai_settings
from tests.fakes.openai_fake import OpenAIFake

DIMS = 256
TOPICS = 40


def _bucket(word: str, dims: int) -> tuple[int, float]:
    h = hashlib.sha256(word.encode()).digest()
    return int.from_bytes(h[:4], "little") % dims, 1.0 if h[4] & 1 else -1.0


def hashed_vector(text: str, dims: int) -> list[float]:
    """A feature-hashed vector of the text's words (+-1 per word in one of ``dims`` buckets),
    as some self-hosted OpenAI-compatible endpoints return: mostly zeros."""
    v = np.zeros(dims, dtype=np.float32)
    for w in re.findall(r"[a-z0-9]+", text.lower()):
        b, sign = _bucket(w, dims)
        v[b] += sign
    n = float(np.linalg.norm(v)) or 1.0
    return (v / n).astype(np.float32).tolist()


class HashingOpenAIFake(OpenAIFake):
    """The OpenAI fake, answering with feature-hashed vectors of the texts' words."""

    def vector_for(self, text: str, dims: int, model: str | None = None) -> list[float]:
        return hashed_vector(text, dims)


def _line(rng: np.random.Generator, topic: int) -> str:
    """A note line: 8 words of its topic and 8 common ones (texts of a topic are neighbours)."""
    own = [f"t{topic}w{i}" for i in rng.integers(0, 30, 8)]
    common = [f"c{i}" for i in np.minimum(rng.zipf(1.3, 8), 400)]
    return " ".join(own + common)


def _sparse_workspace(root: Path, files: int = 380, lines: int = 5) -> Path:
    ws = root / "ws"
    (ws / "memory").mkdir(parents=True)
    rng = np.random.default_rng(5)
    for f in range(files):
        body = "\n\n".join(_line(rng, int(rng.integers(TOPICS))) for _ in range(lines))
        (ws / "memory" / f"note-{f:04d}.md").write_text(body + "\n")
    return ws


def _exact_recall(index: Path, queries: list[np.ndarray], *, one_shot: bool) -> float:
    """recall@10 of the vector side of search against an exact scan of the stored vectors
    (a returned chunk counts when its cosine reaches the exact 10th's: ties are not misses)."""
    conn = connect(index)
    rows = list(conn.execute("SELECT id, embedding FROM chunks WHERE embedding IS NOT NULL"))
    conn.close()
    ids = [r[0] for r in rows]
    m = np.frombuffer(b"".join(r[1] for r in rows), dtype="<f4").reshape(len(rows), -1)
    m = m / np.maximum(np.linalg.norm(m, axis=1, keepdims=True), 1e-12)
    cos = dict(zip(ids, range(len(ids)), strict=True))
    found = 0
    idx = retrieval._Index(index)
    try:
        for q in queries:
            if one_shot:  # a CLI search: a new reader per query
                idx.close()
                idx = retrieval._Index(index)
            sims = m @ (q / np.linalg.norm(q))
            kth = np.sort(sims)[::-1][9]
            hits, _ = retrieval.vector_hits(idx, q, 10, None)
            assert len(hits) == 10
            found += sum(1 for h in hits if sims[cos[h.id]] >= kth - 1e-5)
    finally:
        idx.close()
    return found / (10 * len(queries))


@pytest.fixture
def hashing_fake() -> Any:
    with HashingOpenAIFake(dims=DIMS) as srv:
        yield srv


def test_sparse_vectors_measured_recorded_shown_and_searched_exactly(tmp_path: Path, hashing_fake: Any) -> None:
    """~1,500 chunks of feature-hashed vectors (94% zeros) through a real build: the quick scan's
    recall@10 is measured below 0.98 and recorded, ``status`` shows it, and vector search finds
    the exact nearest 10 (before: ~0.87 of them, and nothing said so)."""
    ws = _sparse_workspace(tmp_path)
    settings = openai_settings(ws, hashing_fake, remote={"dimensions": DIMS},
                               chunking={"tokens": 40, "overlap": 0})
    summary = run_index(settings, full=True)
    assert summary.chunks_total >= 1400, summary.chunks_total
    meta = probe_index(settings.index_file)[0]
    assert meta is not None
    scan = meta.get("vector_scan")
    assert isinstance(scan, dict), "the build records how well its quick scan works"
    assert scan["recall_at_10_default"] < vectors.RECALL_TARGET
    assert scan["mode"] == "exact" or scan["widen"] > 1
    assert scan["recall_at_10"] >= vectors.RECALL_TARGET
    # status says so
    with Searcher(settings) as s:
        st = s.status()
    shown = st.to_dict()["vector_scan"]  # as status --json shows it
    assert shown["measured"] is True
    assert shown["recall_at_10_default"] == scan["recall_at_10_default"]
    assert "recall@10" in shown["summary"]
    rng = np.random.default_rng(99)
    queries = [np.asarray(hashed_vector(_line(rng, int(rng.integers(TOPICS))), DIMS), dtype=np.float32)
               for _ in range(25)]
    assert _exact_recall(settings.index_file, queries, one_shot=True) >= vectors.RECALL_TARGET
    assert _exact_recall(settings.index_file, queries, one_shot=False) >= vectors.RECALL_TARGET


def _write_index(path: Path, m: np.ndarray) -> None:
    """An index of one chunk per vector through the real writer, its quick scan measured as a
    build measures it."""
    n, dims = m.shape
    w = IndexWriter(path, full=True, dims=dims)
    w.open()
    w.insert_tuples([(f"c{i}", f"memory/f{i // 100}.md", "memory", i % 100 + 1, i % 100 + 1, f"h{i}", "m",
                      f"chunk {i}", None, m[i].astype("<f4").tobytes(), 0) for i in range(n)])
    w.upsert_files(FileRow(path=f"memory/f{f}.md", source="memory", hash="x", mtime_ms=0, size=1,
                           chunks=min(100, n - f * 100), lines=100) for f in range((n + 99) // 100))
    w.verify(expect_vectors=True)
    plan = w.measure_scan()
    assert plan is not None
    w.set_meta({"schema_version": SCHEMA_VERSION, "provider": "openai", "model": "m", "provider_key": "k",
                "dims": int(dims), "sources": ["memory"], "vector_scan": plan.to_meta()})
    w.swap()


def _clustered(n: int, dims: int, seed: int) -> np.ndarray:
    c = np.random.default_rng(0).standard_normal((200, dims)).astype(np.float32)
    rng = np.random.default_rng(seed)
    m = c[rng.integers(0, 200, n)] + 0.9 * rng.standard_normal((n, dims)).astype(np.float32)
    return m / np.linalg.norm(m, axis=1, keepdims=True)


def test_dense_vectors_keep_the_quick_scan(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Clustered dense vectors measure at recall 1.0: the plan is the default quick scan, and a
    search never reads every vector."""
    path = tmp_path / "dense.sqlite"
    m = _clustered(3000, 128, 1)
    _write_index(path, m)
    plan = vectors.ScanPlan.from_meta(probe_index(path)[0])
    assert plan.measured and plan.mode == "bits" and plan.widen == 1
    assert plan.recall_default >= vectors.RECALL_TARGET

    def never(*a: Any, **k: Any) -> Any:
        raise AssertionError("a dense index's search read every vector")

    monkeypatch.setattr(vectors, "exact_nearest", never)
    monkeypatch.setattr(vectors, "FloatRows", never)
    idx = retrieval._Index(path)
    try:
        for q in _clustered(5, 128, 2):
            hits, _ = retrieval.vector_hits(idx, q, 10, None)
            assert len(hits) == 10
    finally:
        idx.close()


def test_a_quick_scan_that_widening_fixes_is_widened(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """When wider candidates meet the target, the plan widens them (cheaper than reading every
    vector) and the search takes that many: the quick scan made narrow here (44 rescored of 3,000
    noisy clustered rows) finds 0.41 of the nearest 10; wider finds them."""
    monkeypatch.setattr(vectors, "RESCORE_MIN", 10)
    monkeypatch.setattr(vectors, "SCAN_MIN", 100)
    monkeypatch.setattr(vectors, "RESCORE_FACTOR", 1)
    monkeypatch.setattr(vectors, "SCAN_FACTOR", 4)
    path = tmp_path / "w.sqlite"
    c = np.random.default_rng(0).standard_normal((200, 64)).astype(np.float32)
    rng = np.random.default_rng(1)
    m = c[rng.integers(0, 200, 3000)] + 1.5 * rng.standard_normal((3000, 64)).astype(np.float32)
    m /= np.linalg.norm(m, axis=1, keepdims=True)
    _write_index(path, m)
    plan = vectors.ScanPlan.from_meta(probe_index(path)[0])
    assert plan.recall_default < vectors.RECALL_TARGET
    assert plan.mode == "bits" and plan.widen > 1 and plan.recall >= vectors.RECALL_TARGET
    seen: list[int] = []
    real = vectors.BitIndex.candidates

    def spy(self: vectors.BitIndex, qvec: np.ndarray, want: int, keep: Any = None, widen: int = 1) -> np.ndarray:
        seen.append(widen)
        return real(self, qvec, want, keep, widen)

    monkeypatch.setattr(vectors.BitIndex, "candidates", spy)
    idx = retrieval._Index(path)
    try:
        idx._streamed = True  # the loaded codes' path (a long-lived reader)
        retrieval.vector_hits(idx, m[7], 10, None)
    finally:
        idx.close()
    assert seen == [plan.widen]


def test_scan_plan_record_and_when_it_is_measured_again() -> None:
    """An index built before the check keeps the default quick scan and says it is unmeasured; a
    recorded plan reads back as written; a change of more than a tenth of the rows measures again."""
    old = vectors.ScanPlan.from_meta({"dims": 8})
    assert not old.measured and old.mode == "bits" and old.widen == 1 and old.stale(100)
    assert "not measured" in old.describe()
    plan = vectors.ScanPlan(mode="exact", widen=1, recall=1.0, recall_default=0.4, rows=1000, sample=64)
    back = vectors.ScanPlan.from_meta({"vector_scan": plan.to_meta()})
    assert back == plan
    assert not back.stale(1050) and back.stale(1200) and back.stale(850)
    assert "exact" in back.describe() and "0.400" in back.describe()
    # a damaged record falls back to the default scan, never a crash
    assert vectors.ScanPlan.from_meta({"vector_scan": {"mode": "warp", "widen": "x"}}).mode == "bits"


def test_incremental_run_keeps_or_measures_again(tmp_path: Path, hashing_fake: Any,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """A small change keeps the recorded plan (no new measurement); growing the index by more
    than a tenth measures it again."""
    ws = _sparse_workspace(tmp_path, files=60, lines=5)
    settings = openai_settings(ws, hashing_fake, remote={"dimensions": DIMS},
                               chunking={"tokens": 40, "overlap": 0})
    monkeypatch.setenv("MEMORY_CORE_WRITER", "process")  # the build's writer in its own process measures too
    run_index(settings, full=True)
    monkeypatch.delenv("MEMORY_CORE_WRITER")
    first = probe_index(settings.index_file)[0]["vector_scan"]
    assert first["rows"] >= 200 and first["sample"] == 0  # at most 400 rows: every row is rescored, exact
    calls: list[int] = []
    real = vectors.measure_scan

    def counted(*a: Any, **k: Any) -> vectors.ScanPlan:
        calls.append(1)
        return real(*a, **k)

    monkeypatch.setattr(vectors, "measure_scan", counted)
    with (ws / "memory" / "note-0001.md").open("a") as f:
        f.write("\nc1 c2 t3w4 t3w5\n")
    run_index(settings)
    assert calls == [] and probe_index(settings.index_file)[0]["vector_scan"] == first
    rng = np.random.default_rng(8)
    for f in range(20):
        (ws / "memory" / f"more-{f}.md").write_text(
            "\n\n".join(_line(rng, int(rng.integers(TOPICS))) for _ in range(5)) + "\n")
    run_index(settings)
    assert calls == [1]
    assert probe_index(settings.index_file)[0]["vector_scan"]["rows"] > first["rows"]


def test_part_vectors_get_their_own_measured_scan(tmp_path: Path, hashing_fake: Any) -> None:
    """300 one-chunk notes of 12 list lines (5 windows each: 1,500 part vectors of feature-hashed,
    sparse vectors): the chunks are few enough to be read exactly, but the windows are searched by
    the quick scan from their own codes. Their scan is measured and recorded beside the chunks'
    (before: never measured, 'exact: nothing to measure', and its recall@10 about 0.85), status
    says it, and the vector side finds the exact nearest chunks by their best cosine."""
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    rng = np.random.default_rng(7)
    for f in range(300):
        body = "\n".join("- " + _line(rng, int(rng.integers(TOPICS))) for _ in range(12))
        (ws / "memory" / f"note-{f:04d}.md").write_text(body + "\n")
    settings = openai_settings(ws, hashing_fake, remote={"dimensions": DIMS},
                               chunking={"tokens": 400, "overlap": 0, "note_windows": True})
    run_index(settings, full=True)
    scan = probe_index(settings.index_file)[0]["vector_scan"]
    parts = scan.get("parts")
    assert isinstance(parts, dict), "the part vectors' scan is measured and recorded"
    assert parts["rows"] >= 1400 and parts["sample"] > 0
    assert parts["recall_at_10_default"] < vectors.RECALL_TARGET
    assert parts["mode"] == "exact" or parts["widen"] > 1
    assert parts["recall_at_10"] >= vectors.RECALL_TARGET
    with Searcher(settings) as s:
        summary = s.status().to_dict()["vector_scan"]["summary"]
    assert "part vectors:" in summary and "recall@10" in summary.split("part vectors:")[1]
    conn = connect(settings.index_file)
    own = {r: np.frombuffer(e, "<f4") for r, e in conn.execute("SELECT rid, embedding FROM chunks")}
    part_rows = [(c, np.frombuffer(e, "<f4")) for c, e in conn.execute(f"SELECT chunk, embedding FROM {vectors.PARTS_TABLE}")]
    conn.close()
    found = total = 0
    idx = retrieval._Index(settings.index_file)
    try:
        for _ in range(30):
            q = np.asarray(hashed_vector(_line(rng, int(rng.integers(TOPICS)))[:60], DIMS), dtype=np.float32)
            q = q / np.linalg.norm(q)
            best = {r: float(v @ q / (np.linalg.norm(v) or 1.0)) for r, v in own.items()}
            for c, v in part_rows:
                best[c] = max(best[c], float(v @ q / (np.linalg.norm(v) or 1.0)))
            kth = sorted(best.values(), reverse=True)[9]
            got = idx.nearest(q, 10)
            found += sum(1 for r, _ in got if best[r] >= kth - 1e-6)
            total += 10
    finally:
        idx.close()
    assert found / total >= vectors.RECALL_TARGET, found / total


def test_damaged_stored_vectors_do_not_fail_the_background_cosine(tmp_path: Path) -> None:
    """Twentieth session's audit: rows whose stored vector is shorter than the index's (or NaN, or
    infinite) made the background cosine (a model with no measured calibration) raise a reshape
    error, so every hybrid or vector search of that index failed with a traceback. A damaged row is
    left out, as a search scores it 0; the figure is the sound rows'."""
    path = tmp_path / "bg.sqlite"
    m = _clustered(600, 64, 3)
    _write_index(path, m)
    conn = connect(path)
    try:
        sound = retrieval.background_of(conn)
        ids = [r[0] for r in conn.execute(retrieval.BACKGROUND_SAMPLE_SQL.replace("SELECT embedding", "SELECT rowid"))]
        assert sound is not None and len(ids) >= 20
        with conn:
            for k, rowid in enumerate(ids[:12]):
                bad = [m[0][:50], np.full(64, np.nan), np.full(64, np.inf), np.zeros(64)][k % 4]
                conn.execute("UPDATE chunks SET embedding = ? WHERE rowid = ?", (bad.astype("<f4").tobytes(), rowid))
        damaged = retrieval.background_of(conn)
    finally:
        conn.close()
    assert damaged is not None and np.isfinite(damaged)
    assert abs(damaged - sound) < 0.05
    idx = retrieval._Index(path)
    try:
        assert idx.background_cosine() is not None
        hits, _ = retrieval.vector_hits(idx, m[5], 10, None)
        assert hits
    finally:
        idx.close()
