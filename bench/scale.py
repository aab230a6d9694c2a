"""memory-core at scale: build, incremental runs, queries, recall and size at 40k-1M chunks.

    python -m bench.scale                                # 40k and 200k chunks x 1536-d
    python -m bench.scale --chunks 40000 --dims 384 1536
    python -m bench.scale --chunks 1000000 --dims 1536   # opt-in: ~16 GB of files, long
    python -m bench.scale --code /tmp/old --label before # another memory_core (e.g. `git archive`)

Per size and dimension, each phase in a fresh interpreter (so peak RSS and I/O are its own):

* build: a cold full build (no index, no cache) with the distinct fake provider
  (bench/fake_provider.DistinctProvider: clustered, deterministic, one vector per text);
* no change: an incremental run with nothing to do;
* 1% change: a line appended to 1% of the files, then an incremental run (``published`` says
  whether it was applied in place or as a new file); bytes written from ``ru_oublock``;
* 1% change, hinted: the same append to another 1% of the files, then an incremental run given
  exactly those paths (``only_paths``, as ``memory-core watch`` hands over its events): it looks
  at those files only instead of walking and stat-ing the workspace;
* queries: ``--queries`` queries of 2-6 corpus words per mode (hybrid, vector, keyword) through
  one warm :class:`memory_core.query.search.Searcher`, p50/p95, then the hybrid queries once more (what
  a long-lived reader answers once it keeps the common words' frequencies); recall@10 of the vector side against
  an exact search (numpy over every float32 vector of the index, in RAM); and the same-run
  baselines: that exact numpy scan and the bare FTS5 ``MATCH`` of the same queries;
* readers: ``--readers`` processes, each with its own Searcher, querying (hybrid) at once:
  total queries/s and per-query p50; with ``--warm-readers`` once more after each reader has
  answered its queries once (a long-lived reader: MCP server, watch);
* rebuild (``--rebuild``): a ``--full`` rebuild alone, then the same beside the warm readers
  querying without pause (its time against the time alone, and the readers' q/s meanwhile);
  ``--reader-rate Q`` adds the same rebuild beside the readers offering Q queries/s in total
  (paced and staggered: a steady load, not all the CPU they can take);
* sizes: index file, embedding cache (+ WAL).

The machine's load average is recorded before each phase. Results: bench/results/scale-<label>.md
(and .json).
"""

from __future__ import annotations

import argparse
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
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CHUNKS_PER_FILE = 41215 / 10000  # bench/corpus.py at the default chunk size


def _settings(ws: str, index: str):  # type: ignore[no-untyped-def]
    from memory_core.config import load_settings

    return load_settings(None, {"workspace": ws, "index_path": index, "provider": "none"})


def _io() -> dict[str, float]:
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    # the run process writes the embedding cache; the index writer (a child process) the temp index
    return {"written_bytes": (me.ru_oublock + kids.ru_oublock) * 512, "written_run_bytes": me.ru_oublock * 512,
            "written_children_bytes": kids.ru_oublock * 512, "cpu_s": me.ru_utime + me.ru_stime
            + kids.ru_utime + kids.ru_stime, "maxrss_mb": me.ru_maxrss / 1024}


def phase_build(ws: str, index: str, dims: int, full: bool, only_paths: list[str] | None = None,
                only_paths_file: str | None = None) -> dict[str, Any]:
    import inspect

    from bench.fake_provider import DistinctProvider
    from memory_core.index.pipeline import run_index

    provider = DistinctProvider(dims)
    hints: dict[str, Any] = {}
    if only_paths_file is not None:  # thousands of paths: too long for one argument
        only_paths = json.loads(Path(only_paths_file).read_text())
    if only_paths is not None:
        if "only_paths" not in inspect.signature(run_index).parameters:
            return {"unsupported": "this memory_core takes no only_paths"}
        hints["only_paths"] = frozenset(only_paths)
    t0 = time.perf_counter()
    summary = run_index(_settings(ws, index), provider=provider, reason="bench", full=full, **hints)
    return {"seconds": time.perf_counter() - t0, "chunks": summary.chunks_total,
            "embedded": summary.chunks_embedded, "published": summary.published,
            "discover_s": summary.stage_seconds.get("discover"), "changed": summary.files_changed,
            "hinted": getattr(summary, "hinted", False), "hinted_paths": getattr(summary, "hinted_paths", 0), **_io()}


def _queries(n: int, seed: int = 3) -> list[str]:
    from bench.corpus import WORDS

    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 6))) for _ in range(n)]


def _pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * len(xs)))]


def _all_vectors(index: str):  # type: ignore[no-untyped-def]
    """(rids, float32 matrix) of every vector in the index, whichever schema wrote it."""
    import numpy as np

    from memory_core.storage.store import connect, has_table, load_vec

    conn = connect(index, readonly=True)
    load_vec(conn)
    sql = "SELECT rid, embedding FROM chunks WHERE embedding IS NOT NULL"
    if has_table(conn, "chunks_vec") and not conn.execute(sql + " LIMIT 1").fetchone():
        sql = "SELECT rowid, embedding FROM chunks_vec"
    n = conn.execute("SELECT count(*) FROM chunks").fetchone()[0]
    rids = np.zeros(n, dtype=np.int64)
    m = None
    i = 0
    for r, b in conn.execute(sql):  # filled in place: no second copy of a 6 GB matrix
        if m is None:
            m = np.zeros((n, len(b) // 4), dtype=np.float32)
        rids[i] = r
        m[i] = np.frombuffer(b, dtype="<f4")
        i += 1
    conn.close()
    assert m is not None and i == n
    m /= np.linalg.norm(m, axis=1, keepdims=True)
    return rids, m


def phase_queries(ws: str, index: str, dims: int, n: int) -> dict[str, Any]:
    import numpy as np

    from bench.fake_provider import DistinctProvider
    from memory_core.query.search import Searcher
    from memory_core.storage.store import connect
    from memory_core.storage.textsearch import build_match_query

    provider = DistinctProvider(dims)
    queries = _queries(n)
    out: dict[str, Any] = {}
    with Searcher(_settings(ws, index), provider=provider) as s:
        t0 = time.perf_counter()
        s.search(queries[0], min_score=0.0)  # open + warm (loads what a long-lived reader keeps)
        out["first_query_s"] = time.perf_counter() - t0
        for mode in ("hybrid", "vector", "keyword"):
            lat, cpu = [], []
            for q in queries:
                t0, c0 = time.perf_counter(), time.process_time()
                s.search(q, min_score=0.0, mode=mode)
                lat.append(time.perf_counter() - t0)
                cpu.append(time.process_time() - c0)  # the searcher's threads: robust to others' load
            out[mode] = {"p50": statistics.median(lat), "p95": _pct(lat, 0.95), "cpu_p50": statistics.median(cpu)}
        lat, cpu = [], []  # the same hybrid queries again: what a long-lived reader (MCP server) answers
        for q in queries:
            t0, c0 = time.perf_counter(), time.process_time()
            s.search(q, min_score=0.0, mode="hybrid")
            lat.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
        out["hybrid_again"] = {"p50": statistics.median(lat), "p95": _pct(lat, 0.95), "cpu_p50": statistics.median(cpu)}
        # recall@10 of the vector side against an exact scan of the same floats
        rids, m = _all_vectors(index)
        idx = s._current()
        k = s.candidate_count(10)
        qvs = [np.asarray(provider.embed_query(q), dtype=np.float32) for q in queries]
        side_t, got = [], []
        for qv in qvs:  # timed on its own: the exact scans below evict every cache
            t0 = time.perf_counter()
            got.append([h.rid for h in s._vector_hits(idx, qv, k, None)][:10])
            side_t.append(time.perf_counter() - t0)
        recall, exact_t = [], []
        for qv, ours in zip(qvs, got, strict=True):
            t0 = time.perf_counter()
            sims = m @ (qv / np.linalg.norm(qv))
            top = rids[np.argpartition(-sims, 10)[:10]]
            exact_t.append(time.perf_counter() - t0)
            recall.append(len(set(ours) & set(top.tolist())) / 10)
        out["recall_at_10"] = {"mean": float(np.mean(recall)), "min": float(np.min(recall))}
        out["exact_numpy_p50"] = statistics.median(exact_t)
        out["vector_side_p50"] = statistics.median(side_t)
    conn = connect(index, readonly=True)
    fts = []
    for q in queries:
        t0 = time.perf_counter()
        conn.execute("SELECT rowid, bm25(chunks_fts) FROM chunks_fts WHERE chunks_fts MATCH ?"
                     " ORDER BY bm25(chunks_fts) LIMIT 24", (build_match_query(q),)).fetchall()
        fts.append(time.perf_counter() - t0)
    conn.close()
    out["raw_fts_p50"] = statistics.median(fts)
    out.update(_io())
    return out


def phase_reader(ws: str, index: str, dims: int, n: int, seed: int, start_at: float,
                 warm: bool = False, until: str | None = None, rate: float = 0.0, phase: float = 0.0) -> dict[str, Any]:
    from bench.fake_provider import DistinctProvider
    from memory_core.query.search import Searcher

    provider = DistinctProvider(dims)
    queries = _queries(n, seed)
    with Searcher(_settings(ws, index), provider=provider) as s:
        # open and load, then start together; ``warm``: a long-lived reader (MCP server, watch) that
        # has answered these queries' words before, so the measured pass reads nothing new
        for q in queries if warm else queries[:1]:
            s.search(q, min_score=0.0)
        time.sleep(max(0.0, start_at - time.time()))
        t_start = time.time()
        lat = []
        i = 0  # ``until``: the queries over and over until that file exists (a rebuild running beside)
        while i < len(queries) or (until is not None and not os.path.exists(until)):
            if rate > 0:  # paced: query i is due at (i + phase) / rate s from the start (readers staggered)
                time.sleep(max(0.0, t_start + (i + phase) / rate - time.time()))
            t0 = time.perf_counter()
            s.search(queries[i % len(queries)], min_score=0.0)
            lat.append(time.perf_counter() - t0)
            i += 1
    return {"lat": lat, "start": t_start, "end": time.time()}


def phase_cold_query(ws: str, index: str, dims: int) -> dict[str, Any]:
    """One query from a fresh process: what a one-shot CLI search pays (open, load, answer)."""
    from bench.fake_provider import DistinctProvider
    from memory_core.query.search import Searcher

    provider = DistinctProvider(dims)  # its tables are made before the clock starts
    t0 = time.perf_counter()
    with Searcher(_settings(ws, index), provider=provider) as s:
        s.search("postgres replication lag", min_score=0.0)
    return {"seconds": time.perf_counter() - t0, **_io()}


PHASES = {"build": phase_build, "queries": phase_queries, "reader": phase_reader, "cold_query": phase_cold_query}


def _env(code: str | None) -> dict[str, str]:
    path = os.pathsep.join([p for p in (code, str(ROOT)) if p])
    return dict(os.environ, PYTHONPATH=path, MEMORY_CORE_WRITER=os.environ.get("MEMORY_CORE_WRITER", "auto"))


def _spawn(name: str, code: str | None, **kwargs: Any) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "bench.scale", "--phase", name, "--args", json.dumps(kwargs)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(code),
                            # `-m` puts the working folder first on sys.path: with --code, that folder's
                            # memory_core must win over this tree's (bench comes from PYTHONPATH)
                            cwd=code or ROOT)


def _result(p: subprocess.Popen[str], name: str) -> dict[str, Any]:
    out, err = p.communicate()
    if p.returncode != 0:
        raise SystemExit(f"phase {name} failed:\n{err[-4000:]}")
    return json.loads(out.strip().splitlines()[-1])


def child(name: str, code: str | None, **kwargs: Any) -> dict[str, Any]:
    os.sync()  # write back what the previous phase left dirty before this one starts
    load = os.getloadavg()[0]
    r = _result(_spawn(name, code, **kwargs), name)
    r["load_before"] = load
    return r


def _bytes(*paths: Path) -> int:
    return sum(p.stat().st_size for p in paths if p.exists())


def run_size(tmp: Path, chunks: int, dims: int, a: argparse.Namespace) -> dict[str, Any]:
    from bench.corpus import generate

    ws, index = tmp / "ws", tmp / "index.sqlite"
    cache = tmp / "index.cache.sqlite"
    files = max(1, round(chunks / CHUNKS_PER_FILE))
    paths = generate(ws, files)
    code = a.code
    r: dict[str, Any] = {"chunks_target": chunks, "dims": dims, "files": files}
    r["build"] = child("build", code, ws=str(ws), index=str(index), dims=dims, full=True)
    r["index_bytes"] = _bytes(index)
    r["cache_bytes"] = _bytes(cache, Path(str(cache) + "-wal"))
    r["no_change"] = child("build", code, ws=str(ws), index=str(index), dims=dims, full=False)
    r["bytes_after_no_change"] = {"index": _bytes(index), "cache": _bytes(cache, Path(str(cache) + "-wal"))}
    rng = random.Random(5)
    sample = rng.sample(paths, 2 * max(1, len(paths) // 100))
    first, second = sample[:len(sample) // 2], sample[len(sample) // 2:]
    for p in first:
        with open(p, "a") as fh:
            fh.write(f"\n## 23:59 scale bench\n- edited by the scale benchmark {rng.random():.6f}.\n")
    r["change_1pct"] = child("build", code, ws=str(ws), index=str(index), dims=dims, full=False)
    r["bytes_after_change"] = {"index": _bytes(index), "cache": _bytes(cache, Path(str(cache) + "-wal"))}
    for p in second:  # another 1%, and the run told exactly which (as the watcher tells it)
        with open(p, "a") as fh:
            fh.write(f"\n## 23:59 scale bench\n- edited by the scale benchmark {rng.random():.6f}.\n")
    hinted = tmp / "hinted-paths.json"
    hinted.write_text(json.dumps([os.path.abspath(p) for p in second]))
    r["change_1pct_hinted"] = child("build", code, ws=str(ws), index=str(index), dims=dims, full=False,
                                    only_paths_file=str(hinted))
    r["bytes_after_hinted_change"] = {"index": _bytes(index), "cache": _bytes(cache, Path(str(cache) + "-wal"))}
    if a.rebuild:  # a `--full` rebuild over the live index and its cache (vectors from the cache or the index)
        r["rebuild"] = child("build", code, ws=str(ws), index=str(index), dims=dims, full=True)
        r["bytes_after_rebuild"] = {"index": _bytes(index), "cache": _bytes(cache, Path(str(cache) + "-wal"))}
    r["queries"] = child("queries", code, ws=str(ws), index=str(index), dims=dims, n=a.queries)
    r["cold_query"] = child("cold_query", code, ws=str(ws), index=str(index), dims=dims)
    if a.readers:
        r["readers"] = _readers(ws, index, chunks, dims, a, warm=False)
        if a.warm_readers:
            r["readers_warm"] = _readers(ws, index, chunks, dims, a, warm=True)
        if a.rebuild:  # the same `--full` rebuild with the warm readers querying beside it all along
            r["rebuild_beside_readers"] = _rebuild_beside_readers(ws, index, chunks, dims, a)
            if a.reader_rate:  # the readers offering a steady load instead of all the CPU they can get
                r["rebuild_beside_paced_readers"] = _rebuild_beside_readers(ws, index, chunks, dims, a, a.reader_rate)
    r["index_bytes_after"] = _bytes(index)
    return r


def _readers(ws: Path, index: Path, chunks: int, dims: int, a: argparse.Namespace,
             warm: bool) -> dict[str, Any]:
    """``a.readers`` reader processes querying at once (see :func:`phase_reader`)."""
    os.sync()
    load = os.getloadavg()[0]
    start_at = time.time() + 25 + chunks * dims / 1e8 * (1 + a.reader_queries * warm)
    procs = [_spawn("reader", a.code, ws=str(ws), index=str(index), dims=dims, n=a.reader_queries, seed=100 + i,
                    start_at=start_at, warm=warm) for i in range(a.readers)]
    rs = [_result(p, "reader") for p in procs]
    lat = [x for x in rs for x in x["lat"]]
    wall = max(x["end"] for x in rs) - min(x["start"] for x in rs)
    return {"n": a.readers, "queries": len(lat), "qps": len(lat) / wall, "p50": statistics.median(lat),
            "p95": _pct(lat, 0.95), "load_before": load, "warm": warm}


def _rebuild_beside_readers(ws: Path, index: Path, chunks: int, dims: int, a: argparse.Namespace,
                            rate: float = 0.0) -> dict[str, Any]:
    """A `--full` rebuild while ``a.readers`` warm readers query without pause (or, with ``rate``, offer
    that many queries/s in total, paced): its seconds against the same rebuild alone (``rebuild``), and
    what the readers got meanwhile."""
    stop = index.parent / "bench-readers-stop"
    stop.unlink(missing_ok=True)
    load = os.getloadavg()[0]
    start_at = time.time() + 25 + chunks * dims / 1e8 * (1 + a.reader_queries)
    procs = [_spawn("reader", a.code, ws=str(ws), index=str(index), dims=dims, n=a.reader_queries, seed=100 + i,
                    start_at=start_at, warm=True, until=str(stop), rate=rate / a.readers, phase=i / a.readers)
             for i in range(a.readers)]
    time.sleep(max(0.0, start_at - time.time()) + 1)
    build = child("build", a.code, ws=str(ws), index=str(index), dims=dims, full=True)
    stop.touch()
    rs = [_result(p, "reader") for p in procs]
    stop.unlink(missing_ok=True)
    lat = [x for x in rs for x in x["lat"]]
    wall = max(x["end"] for x in rs) - min(x["start"] for x in rs)
    return {"build": build, "readers": {"n": a.readers, "queries": len(lat), "qps": len(lat) / wall,
                                         "p50": statistics.median(lat), "p95": _pct(lat, 0.95)},
            "load_before": load, "rate": rate}


def _ms(x: float) -> str:
    return f"{x * 1000:.1f}"


def render(results: list[dict[str, Any]], label: str, code: str | None) -> str:
    lines = [f"# memory-core at scale: {label} ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())},"
             f" {os.cpu_count()} cores)", "",
             f"Code: {code or 'this tree'}. Distinct clustered fake vectors (bench/fake_provider.DistinctProvider);"
             " each phase a fresh process; `load` = 1-min load average before the phase. Times in ms unless"
             " said; baselines measured in the same run.", ""]
    lines += ["| chunks x dims | build s | no-change s | 1% change s (published, written) | 1% change, hinted s"
              " (published, written) | index MiB | cache MiB |",
              "|---|---|---|---|---|---|---|"]

    def change(c: dict[str, Any] | None) -> str:
        if c is None or "unsupported" in c:
            return "-"
        discover = f", discover {c['discover_s']:.2f} s" if c.get("discover_s") is not None else ""
        return f"{c['seconds']:.2f} ({c['published']}, {c['written_bytes'] / 2**20:.0f} MiB{discover})"

    for r in results:
        b = r["build"]
        lines.append(f"| {b['chunks']} x {r['dims']} | {b['seconds']:.1f} (load {b['load_before']:.1f}) |"
                     f" {r['no_change']['seconds']:.2f} | {change(r['change_1pct'])} |"
                     f" {change(r.get('change_1pct_hinted'))} | {r['index_bytes'] / 2**20:.0f} |"
                     f" {r['cache_bytes'] / 2**20:.0f} |")
    if any("written_run_bytes" in r["build"] for r in results):
        lines += ["", "| chunks x dims | cold build: written MiB (run process: cache / index writer: temp index)"
                  " | final index + cache MiB | written / final |", "|---|---|---|---|"]
        for r in results:
            b = r["build"]
            if "written_run_bytes" not in b:
                continue
            final = r["index_bytes"] + r["cache_bytes"]
            lines.append(f"| {b['chunks']} x {r['dims']} | {b['written_bytes'] / 2**20:.0f}"
                         f" ({b['written_run_bytes'] / 2**20:.0f} / {b['written_children_bytes'] / 2**20:.0f}) |"
                         f" {final / 2**20:.0f} | {b['written_bytes'] / max(1, final):.2f}x |")
    if any("bytes_after_change" in r for r in results):
        lines += ["", "| chunks x dims | index + cache MiB after: build | no change | 1% change | --full rebuild"
                  " (s, embedded) |", "|---|---|---|---|---|"]
        mib = lambda d: f"{d['index'] / 2**20:.0f} + {d['cache'] / 2**20:.0f}"  # noqa: E731
        for r in results:
            if "bytes_after_change" in r:
                rb = (f"{mib(r['bytes_after_rebuild'])} ({r['rebuild']['seconds']:.1f} s, {r['rebuild']['embedded']})"
                      if "rebuild" in r else "-")
                lines.append(f"| {r['build']['chunks']} x {r['dims']} | {mib({'index': r['index_bytes'], 'cache': r['cache_bytes']})}"
                             f" | {mib(r['bytes_after_no_change'])} | {mib(r['bytes_after_change'])} | {rb} |")
    lines += ["", "| chunks x dims | CPU p50 hybrid / vector / keyword |", "|---|---|"]
    for r in results:
        q = r["queries"]
        if "cpu_p50" in q["hybrid"]:
            lines.append(f"| {r['build']['chunks']} x {r['dims']} | " + " / ".join(
                _ms(q[m]["cpu_p50"]) for m in ("hybrid", "vector", "keyword")) + " |")
    lines += ["", "| chunks x dims | hybrid p50 / p95 | vector p50 / p95 | keyword p50 / p95 | vector side p50 |"
              " exact numpy scan p50 (baseline) | raw FTS5 p50 (baseline) | recall@10 vs exact (mean, min) |"
              " one-shot query s | load |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        q = r["queries"]
        lines.append(
            f"| {r['build']['chunks']} x {r['dims']} | {_ms(q['hybrid']['p50'])} / {_ms(q['hybrid']['p95'])} |"
            f" {_ms(q['vector']['p50'])} / {_ms(q['vector']['p95'])} | {_ms(q['keyword']['p50'])} /"
            f" {_ms(q['keyword']['p95'])} | {_ms(q['vector_side_p50'])} ({q['vector_side_p50'] / q['exact_numpy_p50']:.2f}x"
            f" the exact scan) | {_ms(q['exact_numpy_p50'])} | {_ms(q['raw_fts_p50'])} |"
            f" {q['recall_at_10']['mean']:.3f}, {q['recall_at_10']['min']:.1f} | {r['cold_query']['seconds']:.2f} |"
            f" {q['load_before']:.1f} |")
    if any("hybrid_again" in r["queries"] for r in results):
        lines += ["", "| chunks x dims | hybrid p50 / p95, the same queries again (warm searcher) | its CPU p50 |",
                  "|---|---|---|"]
        for r in results:
            if "hybrid_again" in r["queries"]:
                x = r["queries"]["hybrid_again"]
                lines.append(f"| {r['build']['chunks']} x {r['dims']} | {_ms(x['p50'])} / {_ms(x['p95'])} |"
                             f" {_ms(x['cpu_p50'])} |")
    if any("readers" in r for r in results):
        lines += ["", "| chunks x dims | concurrent readers | queries | total q/s | p50 / p95 | load |", "|---|---|---|---|---|---|"]
        for r in results:
            for key, kind in (("readers", "processes"), ("readers_warm", "processes, warm")):
                if key in r:
                    x = r[key]
                    lines.append(f"| {r['build']['chunks']} x {r['dims']} | {x['n']} {kind} | {x['queries']} |"
                                 f" {x['qps']:.1f} | {_ms(x['p50'])} / {_ms(x['p95'])} | {x['load_before']:.1f} |")
    if any("rebuild_beside_readers" in r for r in results):
        lines += ["", "| chunks x dims | `--full` rebuild alone s | beside warm readers s (ratio) | the readers"
                  " | what they got meanwhile: q/s, p50 / p95 | load |", "|---|---|---|---|---|---|"]
        for r in results:
            for key in ("rebuild_beside_readers", "rebuild_beside_paced_readers"):
                if key not in r or "rebuild" not in r:
                    continue
                x, alone = r[key], r["rebuild"]["seconds"]
                rd = x["readers"]
                how = f"offering {x['rate']:g} q/s in total" if x.get("rate") else "querying without pause"
                lines.append(f"| {r['build']['chunks']} x {r['dims']} | {alone:.1f} | {x['build']['seconds']:.1f}"
                             f" ({x['build']['seconds'] / alone:.2f}x) | {rd['n']} processes {how} | {rd['qps']:.1f},"
                             f" {_ms(rd['p50'])} / {_ms(rd['p95'])} | {x['load_before']:.1f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--chunks", type=int, nargs="+", default=[40000, 200000])
    ap.add_argument("--dims", type=int, nargs="+", default=[1536])
    ap.add_argument("--queries", type=int, default=60)
    ap.add_argument("--readers", type=int, default=8)
    ap.add_argument("--reader-queries", type=int, default=15)
    ap.add_argument("--warm-readers", action="store_true",
                    help="also measure the readers after each has answered its queries once (long-lived readers)")
    ap.add_argument("--code", help="a folder holding another memory_core package to measure (default: this tree)")
    ap.add_argument("--label", default="run")
    ap.add_argument("--tmp", help="where the corpus and index go (default: a temp folder)")
    ap.add_argument("--rebuild", action="store_true", help="also time a `--full` rebuild after the 1%% change, alone and (with --readers)"
                    " beside the warm readers querying without pause")
    ap.add_argument("--reader-rate", type=float, default=0.0,
                    help="with --rebuild: also time the rebuild beside the readers offering this many queries/s in"
                    " total (paced), e.g. 20, issue 25's target for 8 readers")
    ap.add_argument("--phase", help=argparse.SUPPRESS)
    ap.add_argument("--args", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.phase:
        print(json.dumps(PHASES[a.phase](**json.loads(a.args))))
        return 0
    results = []
    out = ROOT / "bench" / "results" / f"scale-{a.label}"
    for chunks in a.chunks:
        for dims in a.dims:
            tmp = Path(tempfile.mkdtemp(prefix="memory-core-scale-", dir=a.tmp))
            try:
                results.append(run_size(tmp, chunks, dims, a))
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
            text = render(results, a.label, a.code)
            out.with_suffix(".md").write_text(text)
            out.with_suffix(".json").write_text(json.dumps(results, indent=1))
            print(text, flush=True)
    print(f"written to {out}.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
