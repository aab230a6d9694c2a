"""CPU time per query, this tree's vector store against the previous one (vec0), same vectors.

    python -m bench.scale_cpu --chunks 40000 --dims 1536 --old-code /tmp/old   # `git archive <rev> memory_core`

On a shared machine wall times follow the load of others; the CPU time a query's thread uses
does not (much). Builds one index with this tree (bench/fake_provider.DistinctProvider), copies
it and rewrites the copy as schema 2 wrote it (vectors in a sqlite-vec vec0 table only, as
tests/test_vectors._to_schema_2), then in two child processes, one per code base, times the
same queries: the vector side alone, the cosines of 40 keyword candidates, a vector-mode and a
hybrid search (keyword side on the same thread). Prints medians of thread CPU ms and wall ms.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def measure(ws: str, index: str, dims: int, n: int) -> dict[str, list[float]]:
    import numpy as np

    import memory_core.query.search as ms
    from bench.fake_provider import DistinctProvider
    from bench.scale import _queries, _settings
    from memory_core.query import retrieval

    provider = DistinctProvider(dims)
    texts = _queries(n)
    qs = [np.asarray(provider.embed_query(q), dtype=np.float32) for q in texts]
    out: dict[str, list[float]] = {"code": [ms.__file__]}  # type: ignore[list-item]
    with ms.Searcher(_settings(ws, index), provider=provider) as s:
        s.search("warm up", mode="vector")
        idx = s._current()
        some = [int(r) for r in np.linspace(1, idx.n_chunks(), 40)]

        def t(name: str, f, xs) -> None:  # type: ignore[no-untyped-def]
            cpu, wall = [], []
            for x in xs:
                c, w = time.thread_time(), time.perf_counter()
                f(x)
                cpu.append(time.thread_time() - c)
                wall.append(time.perf_counter() - w)
            out[name] = [statistics.median(cpu) * 1000, statistics.median(wall) * 1000]

        t("vector side", lambda q: s._vector_hits(idx, q, 40, None), qs)
        t("cosines of 40 keyword candidates", lambda q: retrieval.cosines(idx, q, some), qs)
        s.parallel = False
        t("search, vector mode", lambda q: s.search(q, mode="vector", min_score=0), texts)
        t("search, hybrid (serial)", lambda q: s.search(q, mode="hybrid", min_score=0), texts)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--chunks", type=int, default=40000)
    ap.add_argument("--dims", type=int, default=1536)
    ap.add_argument("--queries", type=int, default=30)
    ap.add_argument("--old-code", required=True)
    ap.add_argument("--measure", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.measure:
        print(json.dumps(measure(**json.loads(a.measure))))
        return 0
    from bench.corpus import generate
    from bench.scale import CHUNKS_PER_FILE, phase_build
    from tests.test_vectors import _to_schema_2

    tmp = Path(tempfile.mkdtemp(prefix="memory-core-scale-cpu-"))
    try:
        ws, new, old = tmp / "ws", tmp / "new.sqlite", tmp / "old.sqlite"
        generate(ws, max(1, round(a.chunks / CHUNKS_PER_FILE)))
        built = phase_build(str(ws), str(new), a.dims, True)
        shutil.copyfile(new, old)
        _to_schema_2(old)
        res = {}
        for label, code, index in (("before (vec0)", a.old_code, old), ("after (bits)", None, new)):
            env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (code, str(ROOT)) if p))
            args = json.dumps({"ws": str(ws), "index": str(index), "dims": a.dims, "n": a.queries})
            load = os.getloadavg()[0]
            p = subprocess.run([sys.executable, "-m", "bench.scale_cpu", "--old-code", "-", "--measure", args],
                               capture_output=True, text=True, env=env, cwd=ROOT, check=True)
            res[label] = json.loads(p.stdout.strip().splitlines()[-1])
            res[label]["load"] = [load]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"{built['chunks']} chunks x {a.dims}; median thread CPU ms / wall ms per query; {a.queries} queries\n")
    print("| measure | " + " | ".join(res) + " |\n|---|" + "---|" * len(res))
    for key in ("vector side", "cosines of 40 keyword candidates", "search, vector mode", "search, hybrid (serial)"):
        print(f"| {key} | " + " | ".join(f"{r[key][0]:.1f} / {r[key][1]:.1f}" for r in res.values()) + " |")
    print("| load before | " + " | ".join(f"{r['load'][0]:.1f}" for r in res.values()) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
