"""A long-lived reader's queries right after an incremental run changed the index (issue 25).

    python -m bench.after_change --chunks 200000 --dims 1536
    python -m bench.after_change --tmp /work/tmp/kw200k     # reuse a corpus + index made by an earlier run

Per round, in one process: a warm :class:`memory_core.query.search.Searcher` (it has answered
the queries twice: it keeps every code and the common words' postings), then a line appended to
``--change`` of the files and an incremental run (in place), then the same queries once more,
timed. Two readers, each in its own process, side by side, round by round on the same changes:

* ``carried``: this tree (what a reader keeps is brought up to date by the index's change log,
  memory_core.storage.index_changes);
* ``reloaded``: the same code with the log ignored (every code and posting read again after a
  change: what a reader did before).

Reported: the first query after the change, the p50 of the first pass over the queries after
it, and the warm p50 before it, with the machine's load. Results: bench/results/after-change-<label>.md.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import random
import statistics
import time
from pathlib import Path
from typing import Any

from bench import reader_runs

ROOT = Path(__file__).resolve().parent.parent


def phase(tmp: str, dims: int, rounds: int, change: float, carry: bool, n: int) -> dict[str, Any]:
    from bench.fake_provider import DistinctProvider
    from bench.scale import _queries, _settings
    from memory_core.index.pipeline import run_index
    from memory_core.query import retrieval, search

    if not carry:  # the reader as it was: a changed index is read anew
        search._Index = lambda path, prev=None: retrieval._Index(path)  # type: ignore[assignment,misc]
    st = _settings(tmp + "/ws", tmp + "/index.sqlite")
    prov = DistinctProvider(dims)
    qs = _queries(n, seed=21)
    paths = sorted(glob.glob(tmp + "/ws/memory/**/*.md", recursive=True))
    out: dict[str, Any] = {"rounds": []}
    with search.Searcher(st, provider=prov) as s:
        for q in qs + qs:
            s.search(q, min_score=0.0)
        for r in range(rounds):
            warm = []
            for q in qs:
                t0 = time.perf_counter()
                s.search(q, min_score=0.0)
                warm.append(time.perf_counter() - t0)
            rng = random.Random(1000 + r)  # both readers make the same changes, round by round
            for p in rng.sample(paths, max(1, int(len(paths) * change))):
                with open(p, "a") as fh:
                    fh.write(f"\n- after-change bench {rng.random():.6f}\n")
            t0 = time.perf_counter()
            summary = run_index(st, provider=prov, reason="bench")
            run_s = time.perf_counter() - t0
            load = os.getloadavg()[0]
            after = []
            for q in qs:
                t0 = time.perf_counter()
                s.search(q, min_score=0.0)
                after.append(time.perf_counter() - t0)
            out["rounds"].append({"warm_p50": statistics.median(warm), "first": after[0],
                                  "after_p50": statistics.median(after), "after_max": max(after),
                                  "run_s": run_s, "published": summary.published, "load": load})
    return out


def main() -> None:
    ap = reader_runs.arguments(__doc__, queries=20)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--change", type=float, default=0.01, help="share of the files changed per round")
    a = ap.parse_args()
    if a.phase:
        print(json.dumps(phase(**json.loads(a.phase))))
        return
    reader_runs.in_folder(a, "mc-after-", _run)


def _run(a: argparse.Namespace, tmp: str) -> None:
    reader_runs.ensure_index(tmp, a.chunks, a.dims)
    res: dict[str, Any] = {}
    for name, carry in (("carried", True), ("reloaded", False)):  # the same changes again, each reader its own rounds
        res[name] = reader_runs.phase("bench.after_change", {"tmp": tmp, "dims": a.dims, "rounds": a.rounds,
                                                             "change": a.change, "carry": carry, "n": a.queries})
    chunks = reader_runs.chunk_count(tmp)
    ms = lambda x: f"{1000 * x:.1f}"  # noqa: E731
    lines = [f"# A warm reader after an incremental run: {a.label} ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())},"
             f" {os.cpu_count()} cores)", "",
             f"{chunks} chunks x {a.dims}-d; each round appends a line to {a.change:.1%} of the files and runs an"
             f" incremental index, then the reader answers {a.queries} queries it had answered before (hybrid)."
             " Times in ms; each reader in its own process, on its own rounds of the same changes.", "",
             "| reader | round | warm p50 before | first query after | p50 after | max after | run s (published) | load |",
             "|---|---|---|---|---|---|---|---|"]
    for name in ("carried", "reloaded"):
        for i, r in enumerate(res[name]["rounds"]):
            lines.append(f"| {name} | {i + 1} | {ms(r['warm_p50'])} | {ms(r['first'])} | {ms(r['after_p50'])} |"
                         f" {ms(r['after_max'])} | {r['run_s']:.1f} ({r['published']}) | {r['load']:.1f} |")
    c = statistics.median(r["first"] for r in res["carried"]["rounds"])
    o = statistics.median(r["first"] for r in res["reloaded"]["rounds"])
    lines += ["", f"First query after a change, median of the rounds: carried {ms(c)} ms, reloaded {ms(o)} ms"
              f" ({c / o:.2f}x)."]
    out = ROOT / "bench" / "results" / f"after-change-{a.label}.md"
    out.write_text("\n".join(lines) + "\n")
    (out.with_suffix(".json")).write_text(json.dumps(res, indent=1))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
