"""Where a chats set's missed evidence sits, and what ranks above it (the ranking on PYTHONPATH).

    PYTHONPATH=. python eval/where_missed.py [--set chats-dense] [--mode hybrid] [--category multi,edge]
                                             [--show 3] [--tally-only]

Uses run_sets' cached index (built first if missing). For every labelled question, each evidence
line (``evidence.tsv``) is put in one of four places in the default-sized answer's top 10 chunks:
``hit``, ``one line past`` (the line right after the end of a top-10 chunk of its file: the answer
is the next message), ``same file`` (another chunk of its file is in the top 10) or ``file
missed``; then, per missed question (of ``--category``), the rank of the evidence's chunk and of
its file's first chunk, and the ``--show`` best chunks with their side scores.
"""

from __future__ import annotations

import argparse
import collections
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import run_sets  # noqa: E402  (eval/run_sets.py)

PLACES = ("hit", "one line past", "same file", "file missed")


def evidence_index(name: str, cache: Path) -> tuple[Any, Any, Any]:
    """(the set, the local model, its index's settings) of a set with evidence; its index built
    first if run_sets' cache lacks it."""
    from memory_core.config import load_settings
    from memory_core.embeddings.registry import create_provider

    s = run_sets.make_set(name, False)
    if not s.evidence:
        raise SystemExit(f"{name} has no evidence.tsv")
    provider, _ = create_provider(load_settings(None, {"workspace": str(cache), "provider": "local"}))
    settings = run_sets.ensure_index(s, next(iter(s.groups)), cache, run_sets.indexer_version(), provider, False,
                                     lambda m: print(m, file=sys.stderr))
    return s, provider, settings


def place(res: list[Any], path: str, line: int) -> str:
    mine = [r for r in res[:10] if r.path == path]
    if any(r.start_line <= line <= r.end_line for r in mine):
        return "hit"
    if any(line == r.end_line + 1 for r in mine):
        return "one line past"
    return "same file" if mine else "file missed"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--set", default="chats-dense", help="a set with evidence: chats, chats-dense (and -notes)")
    ap.add_argument("--mode", default="hybrid", choices=("hybrid", "keyword", "vector"))
    ap.add_argument("--category", default="", help="comma-separated categories to list (default: all)")
    ap.add_argument("--show", type=int, default=3, help="best chunks shown per missed question")
    ap.add_argument("--tally-only", action="store_true", help="only the places, no questions")
    ap.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "memory-core-eval")
    a = ap.parse_args(argv)

    from memory_core.apps.evaluation import resolve_corpus_ids
    from memory_core.query.search import Searcher

    s, provider, settings = evidence_index(a.set, a.cache)
    cats = {c for c in a.category.split(",") if c}
    tally: collections.Counter[str] = collections.Counter()
    by_cat: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    with Searcher(settings, provider=provider) as se:
        mapping, _ = resolve_corpus_ids([c for c, _ in (e for ev in s.evidence.values() for e in ev)],
                                        se.indexed_paths())
        n_cand = se.candidate_count(run_sets.MAX_RESULTS)
        for qid in sorted(s.evidence):
            res = se.rank(se.retrieve(s.queries[qid], n_cand), max_results=run_sets.MAX_RESULTS, mode=a.mode)
            ev = [(mapping.get(c, c), n) for c, n in s.evidence[qid]]
            places = [place(res, p, n) for p, n in ev]
            cat = s.category.get(qid, "?")
            tally.update(places)
            by_cat[cat].update(places)
            if a.tally_only or all(p == "hit" for p in places) or (cats and cat not in cats):
                continue
            print(f"\n== {qid} [{cat}] {s.queries[qid]}")
            for (p, n), where in zip(ev, places, strict=True):
                rank = next((i for i, r in enumerate(res, 1) if r.path == p and r.start_line <= n <= r.end_line), None)
                first = next((i for i, r in enumerate(res, 1) if r.path == p), None)
                print(f"   evidence {p}:{n} {where}: its chunk at {rank}, its file's first chunk at {first}")
            for i, r in enumerate(res[:a.show], 1):
                snip = " | ".join(x.strip() for x in r.snippet.split("\n") if x.strip())[:160]
                print(f"   {i}. {r.path}:{r.start_line}-{r.end_line} {r.score:.3f} ({r.match},"
                      f" v={r.vector_score:.2f} t={r.text_score:.2f}) {snip}")
    n = sum(tally.values())
    print(f"\n{a.set}, {a.mode}: {n} evidence lines: "
          + ", ".join(f"{k} {tally[k]} ({tally[k] / n:.0%})" for k in PLACES))
    for cat, t in sorted(by_cat.items()):
        print(f"   {cat}: " + ", ".join(f"{k} {t[k]}" for k in PLACES if t[k]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
