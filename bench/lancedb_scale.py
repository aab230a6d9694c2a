"""The LanceDB export (issue 25, past one machine) beside the embedded index, at scale.

    python -m bench.lancedb_scale                          # 40k and 200k chunks x 384-d
    python -m bench.lancedb_scale --chunks 40000 --dims 1536

Per size: the bench corpus (bench/corpus.py) indexed with the distinct fake provider
(bench/fake_provider.DistinctProvider), then ``export_lancedb`` to a local folder (seconds, bytes),
then the same queries (2-6 corpus words, as bench/scale.py) through one warm
:class:`memory_core.query.search.Searcher` (the embedded default) and one warm
:class:`memory_core.query.lancedb.LanceSearcher`, per mode: p50 / p95, and the agreement of the
two top-10 lists (the share of the embedded index's top 10 citations the LanceDB path also
returns); recall@10 of each vector side against an exact numpy scan of the same floats.
``--chunks 1000000`` runs the 1M size (opt-in: ~7 GB of files at 384-d, ~15 min here).
Results: bench/results/lancedb-<label>.md (and .json), with the load average before each phase.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.scale import CHUNKS_PER_FILE, _all_vectors, _pct, _queries, _settings

ROOT = Path(__file__).resolve().parent.parent


def _ms(x: float) -> str:
    return f"{x * 1000:.1f}"


def _bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.is_dir() else path.stat().st_size


def run_size(tmp: Path, chunks: int, dims: int, n_queries: int) -> dict[str, Any]:
    import numpy as np

    from bench.corpus import generate
    from bench.fake_provider import DistinctProvider
    from memory_core.export.lancedb import export_lancedb
    from memory_core.index.pipeline import run_index
    from memory_core.query.lancedb import LanceSearcher
    from memory_core.query.search import Searcher

    ws, index, uri = tmp / "ws", tmp / "index.sqlite", tmp / "lancedb"
    generate(ws, max(1, round(chunks / CHUNKS_PER_FILE)))
    provider = DistinctProvider(dims)
    settings = _settings(str(ws), str(index))
    r: dict[str, Any] = {"dims": dims}
    t0 = time.perf_counter()
    r["chunks"] = run_index(settings, provider=provider, reason="bench", full=True).chunks_total
    r["build_s"] = time.perf_counter() - t0
    r["index_bytes"] = index.stat().st_size
    r["load_export"] = os.getloadavg()[0]
    summary = export_lancedb(index, str(uri))
    r["export_s"], r["lancedb_bytes"] = summary.seconds, _bytes(uri)
    queries = _queries(n_queries)
    r["load_queries"] = os.getloadavg()[0]
    with Searcher(settings, provider=provider) as emb, LanceSearcher(settings, str(uri), provider=provider) as ls:
        for s in (emb, ls):
            s.search(queries[0], min_score=0.0)  # warm
        for mode in ("hybrid", "vector", "keyword"):
            lat: dict[str, list[float]] = {"embedded": [], "lancedb": []}
            agree = []
            for q in queries:
                tops = {}
                for name, s in (("embedded", emb), ("lancedb", ls)):
                    t0 = time.perf_counter()
                    res = s.search(q, max_results=10, min_score=0.0, mode=mode)
                    lat[name].append(time.perf_counter() - t0)
                    tops[name] = [x.citation for x in res]
                if tops["embedded"]:
                    agree.append(len(set(tops["embedded"]) & set(tops["lancedb"])) / len(tops["embedded"]))
            r[mode] = {name: {"p50": statistics.median(v), "p95": _pct(v, 0.95)} for name, v in lat.items()}
            r[mode]["top10_agreement"] = statistics.mean(agree) if agree else None
        # recall@10 of the LanceDB vector side against an exact scan of the index's floats
        rids, m = _all_vectors(str(index))
        ids = {int(rid): cid for rid, cid in emb._current().conn.execute("SELECT rid, id FROM chunks")}
        recall = []
        for q in queries:
            qv = np.asarray(provider.embed_query(q), dtype=np.float32)
            qv /= np.linalg.norm(qv)
            exact = {ids[int(x)] for x in rids[np.argpartition(-(m @ qv), 10)[:10]]}
            got = [h.id for h in ls.retrieve(q, 10, keyword=False).vector][:10]
            recall.append(len(exact & set(got)) / 10)
        r["lancedb_vector_recall_at_10"] = {"mean": float(np.mean(recall)), "min": float(np.min(recall))}
    return r


def render(results: list[dict[str, Any]], label: str) -> str:
    lines = [f"# LanceDB export beside the embedded index: {label} ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())},"
             f" {os.cpu_count()} cores, shared)", "",
             "bench/lancedb_scale.py: DistinctProvider vectors, the same queries through both paths in one process,"
             " max_results 10, min_score 0. `agreement` = share of the embedded index's top-10 citations the LanceDB"
             " path also returns (the same ranking code; BM25 and the IDF come from LanceDB). LanceDB: flat (exact)"
             " vector search, its BM25 full-text index." + ("" if any(r["chunks"] >= 900_000 for r in results)
                                                              else " 1M chunks not run here."), "",
             "| chunks x dims | build s | export s | index MiB | LanceDB MiB | LanceDB vector recall@10 (mean, min) |"
             " load (export, queries) |", "|---|---|---|---|---|---|---|"]
    for r in results:
        rc = r["lancedb_vector_recall_at_10"]
        lines.append(f"| {r['chunks']} x {r['dims']} | {r['build_s']:.1f} | {r['export_s']:.1f} |"
                     f" {r['index_bytes'] / 2**20:.0f} | {r['lancedb_bytes'] / 2**20:.0f} | {rc['mean']:.3f},"
                     f" {rc['min']:.1f} | {r['load_export']:.1f}, {r['load_queries']:.1f} |")
    lines += ["", "| chunks x dims | mode | embedded p50 / p95 ms | LanceDB p50 / p95 ms | top-10 agreement |",
              "|---|---|---|---|---|"]
    for r in results:
        for mode in ("hybrid", "vector", "keyword"):
            x = r[mode]
            e, lz = x["embedded"], x["lancedb"]
            ag = "-" if x["top10_agreement"] is None else f"{x['top10_agreement']:.2f}"
            lines.append(f"| {r['chunks']} x {r['dims']} | {mode} | {_ms(e['p50'])} / {_ms(e['p95'])} |"
                         f" {_ms(lz['p50'])} / {_ms(lz['p95'])} | {ag} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--chunks", type=int, nargs="+", default=[40000, 200000])
    ap.add_argument("--dims", type=int, nargs="+", default=[384])
    ap.add_argument("--queries", type=int, default=40)
    ap.add_argument("--label", default="run")
    ap.add_argument("--tmp", help="where the corpus, index and export go (default: a temp folder)")
    a = ap.parse_args(argv)
    results = []
    out = ROOT / "bench" / "results" / f"lancedb-{a.label}"
    for chunks in a.chunks:
        for dims in a.dims:
            tmp = Path(tempfile.mkdtemp(prefix="memory-core-lance-", dir=a.tmp))
            try:
                results.append(run_size(tmp, chunks, dims, a.queries))
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
            out.with_suffix(".json").write_text(json.dumps(results, indent=2))
            out.with_suffix(".md").write_text(render(results, a.label))
            print(render(results, a.label))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
