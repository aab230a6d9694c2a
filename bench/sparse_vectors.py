"""The quick vector scan on sparse vectors: recall@10 and query time, before and after the self-check.

    python -m bench.sparse_vectors                       # 20k x 1536, sparse and dense
    python -m bench.sparse_vectors --rows 200000         # the issue's size (~2.5 GB of temp files)

Some OpenAI-compatible endpoints return feature-hashed vectors: ~94% zeros at 1536 dimensions,
the others +-counts. Their sign bits say little (a zero and a negative value both give 0), and the
quick scan (memory_core.storage.vectors: Hamming distance, then an asymmetric score, then exact
cosines of 400 candidates) missed the nearest rows: recall@10 0.108 at 200k (issue 39).

Per kind of vectors (sparse: :func:`sparse_vectors`; dense: clustered Gaussian), an index is
written directly through the real :class:`memory_core.index.writer.IndexWriter` (no provider),
its quick scan measured as a build measures it (:func:`memory_core.storage.vectors.measure_scan`),
then the same queries (other vectors of the same kind, not in the index) are answered by
``vector_hits`` twice in the same run: with the plan the build recorded, and with the old path
(the default quick scan, what an index without the record gets). Reported: the plan, recall@10 of
each against an exact numpy scan, p50 query time of each and their ratio, and the measurement's
own time. Results: bench/results/sparse-vectors-<rows>.md.
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent


def sparse_vectors(n: int, dims: int, seed: int = 0, *, words: int = 30000, topics: int = 200,
                   per: int = 100) -> np.ndarray:
    """``n`` unit vectors as a feature-hashing endpoint makes them: ``per`` tokens of a text
    (half common words, Zipf; half its topic's words), each adding +-1 to one of ``dims``
    buckets (94% zeros at 1536 dims). Texts of the same topic are each other's neighbours."""
    rng = np.random.default_rng(seed)
    h1 = np.random.default_rng(7).integers(0, dims, words)
    h2 = np.random.default_rng(8).choice([-1.0, 1.0], words)
    tw = np.random.default_rng(9).integers(0, words, (topics, 300))
    zipf = 1 / np.arange(1, words + 1)
    zipf /= zipf.sum()
    out = np.zeros((n, dims), np.float32)
    for lo in range(0, n, 20000):
        hi = min(n, lo + 20000)
        t = rng.integers(topics, size=hi - lo)
        a = rng.choice(words, (hi - lo, per // 2), p=zipf)
        b = tw[t[:, None], rng.integers(0, 300, (hi - lo, per // 2))]
        toks = np.concatenate([a, b], axis=1)
        np.add.at(out[lo:hi], (np.repeat(np.arange(hi - lo), per), h1[toks].ravel()), h2[toks].ravel())
    out /= np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-9)
    return out


def dense_vectors(n: int, dims: int, seed: int = 0, clusters: int = 200) -> np.ndarray:
    """Clustered Gaussian unit vectors (what a neural embedding model's look like to the scan)."""
    rng = np.random.default_rng(seed)
    centres = np.random.default_rng(11).standard_normal((clusters, dims)).astype(np.float32)
    m = centres[rng.integers(clusters, size=n)] + 0.9 * rng.standard_normal((n, dims)).astype(np.float32)
    return m / np.linalg.norm(m, axis=1, keepdims=True)


def write_index(path: Path, vecs: np.ndarray, *, measure: bool = True) -> dict[str, Any]:
    """An index of one chunk per vector, written by the real IndexWriter (full build); the
    quick scan measured as a build does (``measure``). Returns its meta."""
    from memory_core.index.writer import FileRow, IndexWriter
    from memory_core.storage import vectors
    from memory_core.storage.store import SCHEMA_VERSION

    n, dims = vecs.shape
    meta: dict[str, Any] = {"schema_version": SCHEMA_VERSION, "provider": "openai", "model": "sparse-bench",
                            "provider_key": "bench", "dims": int(dims), "sources": ["memory"]}
    w = IndexWriter(path, full=True, dims=int(dims))
    w.open()
    try:
        step = 4096
        for lo in range(0, n, step):
            rows = []
            for i in range(lo, min(n, lo + step)):
                text = f"chunk {i}"
                h = hashlib.sha256(text.encode()).hexdigest()
                rows.append((f"c{i}", f"memory/f{i // 100}.md", "memory", i % 100 + 1, i % 100 + 1, h, "m", text,
                             None, vecs[i].astype("<f4").tobytes(), 0))
            w.insert_tuples(rows)
        w.upsert_files(FileRow(path=f"memory/f{f}.md", source="memory", hash="x", mtime_ms=0, size=1,
                               chunks=min(100, n - f * 100), lines=100) for f in range((n + 99) // 100))
        w.verify(expect_vectors=True)
        if measure:
            plan = w.measure_scan()
            assert plan is not None
            meta["vector_scan"] = plan.to_meta()
        w.set_meta(meta)
        w.swap()
    except BaseException:
        w.abort()
        raise
    assert vectors.ScanPlan.from_meta(meta).measured == measure
    return meta


def _run(kind: str, n: int, dims: int, queries: int, tmp: Path) -> dict[str, Any]:
    from memory_core.query import retrieval
    from memory_core.storage import vectors

    make = sparse_vectors if kind == "sparse" else dense_vectors
    allv = make(n + queries, dims, seed=1)
    vecs, qs = allv[:n], allv[n:]
    path = tmp / f"{kind}.sqlite"
    t0 = time.perf_counter()
    write_index(path, vecs, measure=False)
    build_s = time.perf_counter() - t0
    from memory_core.storage.store import connect

    conn = connect(path)
    t0 = time.perf_counter()
    plan = vectors.measure_scan(conn, dims)
    measure_s = time.perf_counter() - t0
    conn.close()
    exact = [set(np.argsort(-(vecs @ q))[:10].tolist()) for q in qs]
    out: dict[str, Any] = {"kind": kind, "rows": n, "dims": dims, "zeros": float((vecs == 0).mean()),
                           "plan": plan.to_meta(), "build_s": build_s, "measure_s": measure_s}
    for label, use in (("old", vectors.ScanPlan(measured=False)), ("new", plan)):
        for reader in ("one-shot", "long-lived"):
            times: list[float] = []
            found = 0
            idx = retrieval._Index(path)
            idx.scan_plan = use
            for i, q in enumerate(qs):
                if reader == "one-shot":
                    idx.close()
                    idx = retrieval._Index(path)
                    idx.scan_plan = use
                t = time.perf_counter()
                hits, _ = retrieval.vector_hits(idx, q, 10, None)
                times.append(time.perf_counter() - t)
                found += len({int(h.id[1:]) for h in hits} & exact[i])
            idx.close()
            out[f"{label}_{reader}_p50_ms"] = 1000 * statistics.median(times)
            out[f"{label}_recall"] = found / (10 * len(qs))
    return out


def render(results: list[dict[str, Any]]) -> str:
    lines = ["# The quick vector scan on sparse vectors (issue 39)", "",
             "`python -m bench.sparse_vectors " + " ".join(sys.argv[1:]) + "`; same run, same queries (other vectors of"
             " the same kind, not in the index); recall@10 against an exact numpy scan; p50 of `vector_hits`."
             " old = the default quick scan (an index without the record); new = the plan the build recorded.", "",
             "| vectors | rows x dims | zeros | plan (measured recall@10: default -> chosen) | measure s |"
             " old recall | new recall | one-shot old / new ms (ratio) | long-lived old / new ms (ratio) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        p = r["plan"]
        how = "exact" if p["mode"] == "exact" else f"bits x{p['widen']}"
        lines.append(
            f"| {r['kind']} | {r['rows']} x {r['dims']} | {r['zeros']:.2f} | {how} ({p['recall_at_10_default']:.3f}"
            f" -> {p['recall_at_10']:.3f}) | {r['measure_s']:.1f} | {r['old_recall']:.3f} | {r['new_recall']:.3f} |"
            f" {r['old_one-shot_p50_ms']:.1f} / {r['new_one-shot_p50_ms']:.1f}"
            f" ({r['new_one-shot_p50_ms'] / r['old_one-shot_p50_ms']:.1f}x) |"
            f" {r['old_long-lived_p50_ms']:.1f} / {r['new_long-lived_p50_ms']:.1f}"
            f" ({r['new_long-lived_p50_ms'] / r['old_long-lived_p50_ms']:.1f}x) |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=20000)
    ap.add_argument("--dims", type=int, default=1536)
    ap.add_argument("--queries", type=int, default=30)
    ap.add_argument("--kinds", nargs="+", default=["sparse", "dense"])
    a = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="sparse-bench-") as tmp:
        results = [_run(k, a.rows, a.dims, a.queries, Path(tmp)) for k in a.kinds]
    text = render(results)
    out = ROOT / "bench" / "results" / f"sparse-vectors-{a.rows}.md"
    out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
