"""memory-core benchmark: the pipeline's own cost, as ratios against raw SQLite baselines.

    python -m bench.run --files 10000            # writes bench/results/results-10000-384d.md
    python -m bench.run --chunks 100000 --rss-check   # the issue's 100k-chunk size + RSS at 1/4 and 2x

Every phase that matters for memory runs in a child process so its peak RSS is its own.
The embedding provider is an instant fake (bench/fake_provider.py): figures measure our
code, SQLite and sqlite-vec, not a model. Baselines are measured in the same run:

* raw insert: the same chunk rows inserted into a fresh file (chunks + FTS5 + vec0) with
  the best pragmas we found, nothing else;
* stat + hash: os.stat and sha256 of every source file;
* raw vector scan and raw FTS5: an exact numpy scan of the index's float32 vectors (in RAM) and
  the bare FTS5 ``MATCH`` query.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _settings(ws: Path, index: Path, dims: int):  # type: ignore[no-untyped-def]
    from memory_core.config import load_settings

    return load_settings(None, {"workspace": str(ws), "index_path": str(index), "provider": "none"})


def phase_build(ws: str, index: str, dims: int, full: bool, writer: str = "") -> dict:
    if writer:
        os.environ["MEMORY_CORE_WRITER"] = writer
    from bench.fake_provider import InstantProvider
    from memory_core.index.pipeline import run_index

    provider = InstantProvider(dims)
    settings = _settings(Path(ws), Path(index), dims)
    c0 = time.process_time()
    t0 = time.perf_counter()
    summary = run_index(settings, provider=provider, reason="bench", full=full)
    dt = time.perf_counter() - t0
    cpu = time.process_time() - c0
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)  # the index writer process, when one ran
    return {"seconds": dt, "chunks_total": summary.chunks_total, "chunks_embedded": summary.chunks_embedded,
            "provider_calls": provider.calls, "swapped": summary.swapped, "published": summary.published,
            "stages": summary.stage_seconds,
            "cpu_s": cpu, "writer_cpu_s": kids.ru_utime + kids.ru_stime,
            "maxrss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "writer_maxrss_mb": kids.ru_maxrss / 1024}


def phase_raw_insert(index: str, out: str, dims: int) -> dict:
    """Insert the built index's rows into a fresh file with the best pragmas: the ceiling."""
    from memory_core.index.writer import BUILD_PRAGMAS, NEW_FILE_PAGE_SIZE
    from memory_core.storage import vectors
    from memory_core.storage.store import connect, create_schema

    src = connect(index, readonly=True)
    # the rows as the index stores them: the vector in chunks.embedding, its sign bits in chunks_bits
    rows = src.execute(
        "SELECT c.rid, c.id, c.path, c.source, c.start_line, c.end_line, c.hash, c.model, c.text, c.embedding,"
        " c.updated_at FROM chunks c ORDER BY c.rid").fetchall()
    # chunks_fts keeps no copy of the text (contentless, schema 5): segment it again, outside the timing
    from memory_core.storage.textsearch import segment_many

    rows = [(*r, t) for r, t in zip(rows, segment_many([r[8] for r in rows]), strict=True)]
    src.close()
    if os.path.exists(out):
        os.unlink(out)
    conn = connect(out)
    conn.execute(f"PRAGMA page_size={NEW_FILE_PAGE_SIZE}")
    for p in BUILD_PRAGMAS:  # the best we found (journal off, no syncs, 64 MiB page cache: store.py)
        conn.execute(p)
    create_schema(conn, dims, with_vec=True)
    t0 = time.perf_counter()
    c0 = time.process_time()
    conn.execute("BEGIN")
    conn.executemany("INSERT INTO chunks VALUES(?,?,?,?,?,?,?,?,?,?,?)", (r[:11] for r in rows))
    conn.executemany("INSERT INTO chunks_fts(rowid, text) VALUES(?,?)", ((r[0], r[11]) for r in rows))
    for i in range(0, len(rows), vectors.BLOCK_ROWS):
        part = rows[i:i + vectors.BLOCK_ROWS]
        vectors.append(conn, [r[0] for r in part], [r[9] for r in part], dims)
    conn.execute("COMMIT")
    dt = time.perf_counter() - t0
    cpu = time.process_time() - c0
    conn.close()
    return {"seconds": dt, "cpu_s": cpu, "rows": len(rows), "rate": len(rows) / dt}


def phase_stat_hash(ws: str) -> dict:
    t0 = time.perf_counter()
    n = 0
    for dirpath, _, files in os.walk(ws):
        for f in files:
            if f.endswith(".md"):
                p = os.path.join(dirpath, f)
                os.stat(p)
                with open(p, "rb") as fh:
                    hashlib.sha256(fh.read()).hexdigest()
                n += 1
    return {"seconds": time.perf_counter() - t0, "files": n}


def phase_queries(ws: str, index: str, dims: int, n: int) -> dict:
    import numpy as np

    from bench.fake_provider import InstantProvider
    from memory_core.query.search import Searcher
    from memory_core.storage.store import connect, load_vec

    rng = random.Random(3)
    from bench.corpus import WORDS

    queries = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 6))) for _ in range(n)]
    provider = InstantProvider(dims)
    settings = _settings(Path(ws), Path(index), dims)
    lat = []
    with Searcher(settings, provider=provider) as s:
        s.search(queries[0])  # open + warm
        for q in queries:
            t0 = time.perf_counter()
            s.search(q, min_score=0.0)
            lat.append(time.perf_counter() - t0)
    conn = connect(index, readonly=True)
    load_vec(conn)
    from memory_core.storage.textsearch import build_match_query

    knn, fts, scan = [], [], []
    qvecs = [provider.embed_query(q) for q in queries]
    blobs = [r[0] for r in conn.execute("SELECT embedding FROM chunks WHERE embedding IS NOT NULL")]
    m = np.frombuffer(b"".join(blobs), dtype="<f4").reshape(len(blobs), -1)
    del blobs
    for q, v in zip(queries, qvecs, strict=True):
        t0 = time.perf_counter()
        np.argpartition(-(m @ np.asarray(v, dtype=np.float32)), 24)[:24]  # exact scan of the same floats
        knn.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        conn.execute("SELECT rowid, bm25(chunks_fts) FROM chunks_fts WHERE chunks_fts MATCH ?"
                     " ORDER BY bm25(chunks_fts) LIMIT 24", (build_match_query(q),)).fetchall()
        fts.append(time.perf_counter() - t0)
    for v in qvecs[:5]:  # the reference's full scan, a few times (it is slow)
        blob = np.asarray(v, dtype="<f4").tobytes()
        t0 = time.perf_counter()
        conn.execute("SELECT c.id, vec_distance_cosine(c.embedding, ?) AS d FROM chunks c"
                     " ORDER BY d LIMIT 24", (blob,)).fetchall()
        scan.append(time.perf_counter() - t0)
    conn.close()

    def pct(xs: list[float], p: float) -> float:
        xs = sorted(xs)
        return xs[min(len(xs) - 1, int(p * len(xs)))]

    return {"p50": statistics.median(lat), "p95": pct(lat, 0.95), "knn_p50": statistics.median(knn),
            "fts_p50": statistics.median(fts), "scan_p50": statistics.median(scan),
            "maxrss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def phase_requests(ws: str, chunks: int) -> dict:
    """Embedding requests our grouping plans for ``chunks`` chunks of this corpus (cycled if
    the corpus has fewer) under OpenAI's limits (2048 inputs, 300k tokens per request),
    against the minimum those limits allow by the fake server's own count, ceil(len / 4)."""
    import math

    from memory_core.embeddings.base import estimate_tokens
    from memory_core.embeddings.grouping import plan_groups
    from memory_core.index.chunking import chunk_markdown

    ours: list[int] = []
    theirs: list[int] = []
    for dirpath, _, files in os.walk(ws):
        for f in sorted(files):
            if f.endswith(".md"):
                with open(os.path.join(dirpath, f), encoding="utf-8") as fh:
                    for c in chunk_markdown(fh.read(), 400, 80):
                        if c.text.strip():
                            ours.append(estimate_tokens(c.text))
                            theirs.append(math.ceil(len(c.text) / 4))
    n = len(ours)
    ours = [ours[i % n] for i in range(chunks)]
    theirs = [theirs[i % n] for i in range(chunks)]
    planned = len(plan_groups(ours, max_inputs=2048, max_tokens=300_000))
    minimum = max(math.ceil(chunks / 2048), math.ceil(sum(theirs) / 300_000))
    return {"chunks": chunks, "planned": planned, "minimum": minimum}


PHASES = {"build": phase_build, "requests": phase_requests, "raw_insert": phase_raw_insert, "stat_hash": phase_stat_hash, "queries": phase_queries}


def child(name: str, _module: str = "bench.run", _env: dict[str, str] | None = None, **kwargs: object) -> dict:
    """Run phase ``name`` of ``_module`` (``--phase``) in a fresh interpreter; returns its JSON result."""
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""), **(_env or {}))
    # Write back what earlier phases left dirty (the generated corpus, the raw insert's
    # unsynced file) before this phase starts: otherwise the kernel flushes it ~30 s later, in
    # the middle of whichever phase is running then.
    os.sync()
    out = subprocess.run([sys.executable, "-m", _module, "--phase", name, "--args", json.dumps(kwargs)],
                         capture_output=True, text=True, env=env, cwd=ROOT)
    if out.returncode != 0:
        raise SystemExit(f"phase {name} failed:\n{out.stderr[-4000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def run_phase(phases: dict, a: argparse.Namespace) -> int:
    """The child's side of :func:`child`: run the phase, print its result as JSON."""
    print(json.dumps(phases[a.phase](**json.loads(a.args))))
    return 0


def _rss(build: dict) -> float:
    """Peak RSS of a build: the run's own plus its index writer process's (both alive at once)."""
    return float(build["maxrss_mb"] + build.get("writer_maxrss_mb", 0))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--files", type=int, default=2000, help="number of Markdown files to generate")
    ap.add_argument("--dims", type=int, default=384)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--request-chunks", type=int, default=100_000,
                    help="chunks for the embedding-request count (the corpus's chunks, cycled)")
    ap.add_argument("--chunks", type=int, default=0,
                    help="size the corpus by chunks instead of files (~4.1 chunks a file; 100000 -> ~24.3k files)")
    ap.add_argument("--rss-check", action="store_true",
                    help="also build a quarter-size and a double-size corpus and compare peak RSS (memory must be"
                         " flat in corpus size)")
    ap.add_argument("--mean-chars", type=int, default=4000, help="mean file size in characters")
    ap.add_argument("--out", help="results file (default bench/results/results-<files>-<dims>d.md)")
    ap.add_argument("--keep", action="store_true", help="keep the generated corpus and index")
    ap.add_argument("--repeat", type=int, default=3,
                    help="times each timed pair is measured; ratios are medians (default 3)")
    ap.add_argument("--phase", help=argparse.SUPPRESS)
    ap.add_argument("--args", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.phase:
        return run_phase(PHASES, a)

    from bench.corpus import generate

    if a.chunks:
        a.files = max(1, round(a.chunks * 10000 / 41215))
    tmp = Path(tempfile.mkdtemp(prefix="memory-core-bench-"))
    ws, index = tmp / "ws", tmp / "index.sqlite"
    try:
        t0 = time.perf_counter()
        paths = generate(ws, a.files, mean_chars=a.mean_chars)
        gen_s = time.perf_counter() - t0
        # Each timed figure is a pair measured back to back (build + raw insert, stat+hash +
        # no-change run, no-change run + one-file run), repeated; the median ratio is reported
        # with its range, because this kind of VM changes speed between identical runs.
        builds, raws, shs, nochanges, onefiles, copies, nc2 = [], [], [], [], [], [], []
        for _ in range(a.repeat):
            for f in tmp.glob("index.*"):  # index.sqlite, index.cache.sqlite (+ -wal, -shm), the lock
                f.unlink()  # cold: no index, no embedding cache
            builds.append(child("build", ws=str(ws), index=str(index), dims=a.dims, full=False))
            raws.append(child("raw_insert", index=str(index), out=str(tmp / "raw.sqlite"), dims=a.dims))
        for r in range(a.repeat):
            shs.append(child("stat_hash", ws=str(ws)))
            nochanges.append(child("build", ws=str(ws), index=str(index), dims=a.dims, full=False))
            with open(paths[(len(paths) // 2 + r) % len(paths)], "a") as fh:
                fh.write(f"\n## 23:59 note {r}\n- the benchmark edited this file to measure a one-file reindex.\n")
            onefiles.append(child("build", ws=str(ws), index=str(index), dims=a.dims, full=False))
            nc2.append(child("build", ws=str(ws), index=str(index), dims=a.dims, full=False))
            with open(paths[(len(paths) // 3 + r) % len(paths)], "a") as fh:  # forced to build a new file
                fh.write(f"\n## 23:58 note {r}\n- edited to measure a one-file reindex that copies the index.\n")
            copies.append(child("build", ws=str(ws), index=str(index), dims=a.dims, full=False, writer="copy"))
        full, onefile, onefile_copy = builds[0], onefiles[0], copies[0]
        q = child("queries", ws=str(ws), index=str(index), dims=a.dims, n=a.queries)
        req = child("requests", ws=str(ws), chunks=a.request_chunks)
        sized = []  # (builds of other corpus sizes, for --rss-check)
        if a.rss_check:
            for name, files in (("small", max(1, a.files // 4)), ("big", a.files * 2)):
                ws_x, index_x = tmp / f"ws-{name}", tmp / f"index-{name}.sqlite"
                generate(ws_x, files, mean_chars=a.mean_chars)
                sized.append(child("build", ws=str(ws_x), index=str(index_x), dims=a.dims, full=False))
                shutil.rmtree(ws_x)
                for f in tmp.glob(f"index-{name}*"):
                    f.unlink()
        size_mb = index.stat().st_size / 2**20
    finally:
        if not a.keep:
            shutil.rmtree(tmp, ignore_errors=True)

    chunks = full["chunks_total"]

    def ratio(nums: list[float], dens: list[float]) -> str:
        rs = sorted(n / d for n, d in zip(nums, dens, strict=True))
        med = statistics.median(rs)
        return f"{med:.2f}x" + (f" (median of {len(rs)}; {rs[0]:.2f}-{rs[-1]:.2f})" if len(rs) > 1 else "")

    def med(xs: list[float]) -> float:
        return statistics.median(xs)

    rows = [
        ("corpus", f"{a.files} files, {chunks} chunks, {a.dims}-d, index {size_mb:.0f} MiB (generated in {gen_s:.1f}s)"),
        ("full build (cold cache) vs raw insert", ratio([r["seconds"] for r in raws], [b["seconds"] for b in builds])
         + f" the raw insert rate; build {med([b['seconds'] for b in builds]):.2f}s, raw insert"
           f" {med([r['seconds'] for r in raws]):.2f}s (medians); stages {full['stages']}"),
        ("full build CPU", f"run {med([b['cpu_s'] for b in builds]):.1f}s + index writer process"
                           f" {med([b['writer_cpu_s'] for b in builds]):.1f}s; raw insert"
                           f" {med([r['cpu_s'] for r in raws]):.1f}s (medians; the two processes together ="
                           f" {ratio([b['cpu_s'] + b['writer_cpu_s'] for b in builds], [r['cpu_s'] for r in raws])}"
                           " the raw insert's CPU)"),
        ("full build peak RSS", "; ".join(
            f"{b['chunks_total']} chunks: {_rss(b):.0f} MiB (run {b['maxrss_mb']:.0f} + writer {b['writer_maxrss_mb']:.0f})"
            for b in sorted([full, *sized], key=lambda b: b["chunks_total"]))
         + (f"; {sized[1]['chunks_total']} vs {full['chunks_total']} chunks: {_rss(sized[1]) / _rss(full):.2f}x"
            if sized else "")),
        ("embedding requests", f"{req['planned']} for {req['chunks']} chunks = {req['planned'] / req['minimum']:.3f}x"
                               f" the minimum under OpenAI's limits ({req['minimum']}: 2048 inputs, 300k tokens"
                               " per request, tokens = ceil(len/4))"),
        ("no-change reindex vs stat+hash", ratio([n["seconds"] for n in nochanges], [x["seconds"] for x in shs])
         + f"; {med([n['seconds'] for n in nochanges]):.3f}s vs {med([x['seconds'] for x in shs]):.3f}s; provider"
           f" calls {sum(n['provider_calls'] for n in nochanges)}; swapped {any(n['swapped'] for n in nochanges)}"),
        ("one-file change vs no-change", ratio([o["seconds"] for o in onefiles], [n["seconds"] for n in nochanges])
         + f"; chunks embedded {onefile['chunks_embedded']}; published {onefile['published']}"),
        ("one-file change forced to build a new file vs no-change",
         ratio([c["seconds"] for c in copies], [n["seconds"] for n in nc2])
         + f" (MEMORY_CORE_WRITER=copy: copy, edit, fsync, rename; published {onefile_copy['published']})"),
        ("query p50 / p95", f"{q['p50'] * 1000:.1f} / {q['p95'] * 1000:.1f} ms; p50 = "
                            f"{q['p50'] / (q['knn_p50'] + q['fts_p50']):.2f}x (exact numpy scan {q['knn_p50'] * 1000:.1f} ms"
                            f" + raw FTS {q['fts_p50'] * 1000:.1f} ms)"),
        ("reference full-scan query", f"{q['scan_p50'] * 1000:.1f} ms = {q['scan_p50'] / q['p50']:.0f}x our hybrid p50"),
        ("searcher peak RSS", f"{q['maxrss_mb']:.0f} MiB"),
    ]
    text = "| measure | result |\n|---|---|\n" + "\n".join(f"| {k} | {v} |" for k, v in rows) + "\n"
    out = Path(a.out) if a.out else ROOT / "bench" / "results" / f"results-{a.files}-{a.dims}d.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(f"# memory-core benchmark ({time.strftime('%Y-%m-%d %H:%M')}, {os.cpu_count()} cores)\n\n" + text)
    print(text)
    print(f"written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
