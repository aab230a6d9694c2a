"""Common phrases beside the vector side: the same hybrid queries, two ways (issue 25).

    python -m bench.common_phrases --chunks 200000 --dims 1536
    python -m bench.common_phrases --tmp /work/tmp/kw200k     # reuse a corpus + index made by an earlier run
    python -m bench.common_phrases --tmp /work/tmp/kw200k --keyword-only

On the scale bench's corpus (bench/corpus.py: ~120 words, each in most chunks), each reader in a
fresh process of its own answers the same hybrid queries twice (a first pass of words it has
not seen, then warm):

* ``skipped``: this tree, where the phrases in half of the rows or more do not choose the
  keyword candidates when the vector side runs (memory_core.query.retrieval.keyword_hits);
* ``all phrases``: the same code with every phrase choosing them (what the keyword side did
  before).

``--keyword-only``: keyword-only queries (``mode="keyword"``) of one rarer word (a CJK phrase of
the corpus, in a minority of the chunks) and 2-4 common ones, two ways:

* ``skipped``: this tree, where the top k comes from the rarer phrases' best rows rescored by the
  whole query, when a bound proves it is FTS5's (retrieval._exact_top_by_rarer);
* ``all phrases``: every phrase ranking every row that holds any of them.

Reported: the p50 / p95 of each pass, and how many queries got the same top 10 both ways (paths,
lines, order, scores). Results: bench/results/common-phrases-<label>.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

from bench import reader_runs
from bench.scale import _pct

ROOT = Path(__file__).resolve().parent.parent


def keyword_queries(n: int, seed: int = 33) -> list[str]:
    """``n`` queries of one rarer phrase (the corpus's CJK phrases: in ~8% of the chunks) and 2-4
    of its common words."""
    import random

    from bench.corpus import CJK, WORDS

    rng = random.Random(seed)
    return [" ".join([rng.choice(CJK)] + [rng.choice(WORDS) for _ in range(rng.randint(2, 4))]) for _ in range(n)]


def phase(tmp: str, dims: int, n: int, skip: bool, keyword: bool = False) -> dict[str, Any]:
    from bench.fake_provider import DistinctProvider
    from bench.scale import _queries, _settings
    from memory_core.query import retrieval, search

    if not skip and keyword:  # every phrase ranks every row
        retrieval._exact_top_by_rarer = lambda *args, **kw: None
    elif not skip:  # every phrase chooses the keyword candidates
        keyword_hits = retrieval.keyword_hits

        def every_phrase(*args: Any, beside_vectors: bool = False, **kw: Any) -> Any:
            return keyword_hits(*args, **kw)

        retrieval.keyword_hits = every_phrase
    qs = keyword_queries(n) if keyword else _queries(n, seed=33)
    mode = "keyword" if keyword else "hybrid"
    out: dict[str, Any] = {"first": [], "warm": [], "top": []}
    with search.Searcher(_settings(tmp + "/ws", tmp + "/index.sqlite"), provider=DistinctProvider(dims)) as s:
        for key in ("first", "warm"):
            for q in qs:
                t0 = time.perf_counter()
                res = s.search(q, min_score=0.0, max_results=10, mode=mode)
                out[key].append(time.perf_counter() - t0)
                if key == "first":
                    out["top"].append([(r.path, r.start_line, r.end_line, r.score) for r in res])
    out["load"] = os.getloadavg()[0]
    return out


def main() -> None:
    ap = reader_runs.arguments(__doc__, queries=30)
    ap.add_argument("--keyword-only", action="store_true", help="keyword-only queries of a rarer and common words")
    a = ap.parse_args()
    if a.phase:
        print(json.dumps(phase(**json.loads(a.phase))))
        return
    reader_runs.in_folder(a, "mc-common-", _run)


def _run(a: argparse.Namespace, tmp: str) -> None:
    reader_runs.ensure_index(tmp, a.chunks, a.dims)
    res: dict[str, Any] = {}
    for name, skip in (("skipped", True), ("all phrases", False), ("skipped ", True), ("all phrases ", False)):
        res[name] = reader_runs.phase("bench.common_phrases", {"tmp": tmp, "dims": a.dims, "n": a.queries,
                                                               "skip": skip, "keyword": a.keyword_only})
    chunks = reader_runs.chunk_count(tmp)
    ms = lambda x: f"{1000 * x:.1f}"  # noqa: E731
    same = sum(x == y for x, y in zip(res["skipped"]["top"], res["all phrases"]["top"], strict=True))
    what = ("keyword-only queries of one rarer phrase (a CJK phrase of the corpus) and 2-4 of its common words"
            if a.keyword_only else "hybrid queries of 2-6 of the corpus's words (each in most chunks)")
    title = "Common phrases in keyword-only queries" if a.keyword_only else "Common phrases beside the vector side"
    lines = [f"# {title}: {a.label} ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())},"
             f" {os.cpu_count()} cores)", "",
             f"{chunks} chunks x {a.dims}-d, {a.queries} {what}, 10 results, min_score 0. Each reader in a fresh"
             " process; the two ways alternate, twice.", "",
             "| reader | first pass p50 / p95 ms | warm p50 / p95 ms | load |", "|---|---|---|---|"]
    for name, r in res.items():
        lines.append(f"| {name.strip()} | {ms(statistics.median(r['first']))} / {ms(_pct(r['first'], 0.95))} |"
                     f" {ms(statistics.median(r['warm']))} / {ms(_pct(r['warm'], 0.95))} | {r['load']:.1f} |")
    lines += ["", f"The same top 10 (paths, lines, order, scores) both ways: {same} of {a.queries} queries."]
    text = "\n".join(lines) + "\n"
    out = ROOT / "bench" / "results" / f"common-phrases-{a.label}.md"
    out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
