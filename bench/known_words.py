"""What asking the local model's tokenizer whether it knows a question's missing words costs a
search (``retrieval.model_reads_absent_words``, issue 37, twenty-fifth session).

    PYTHONPATH=. python bench/known_words.py [--rounds 7]

Builds eval/convo.py's workspace (40 transcripts, the real local model), then times each round's
searches of questions that share no word with memory (where the tokenizer is asked) and of
questions that do (where it is not), with the tokenizer's answer used and with it switched off
(``knows_words`` returning None: the rule of before), alternating which goes first. The report is
the median per search and the ratio in the same run. The tokenizer's first load (~50 ms, once per
process) is outside the rounds: a warm-up search loads it."""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from bench.paired import eval_module, ms_per_search, print_ratios
from memory_core.config import load_settings
from memory_core.index.pipeline import run_index
from memory_core.query.search import Searcher

ABSENT = ["Who has my power tool at the moment?", "What is my brother-in-law's job?",
          "Which friend got hurt?", "What gear problems did the band have?", "okonomiyaki recipe ideas"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=7)
    a = ap.parse_args()
    convo = eval_module("convo")
    with tempfile.TemporaryDirectory() as tmp:
        ws = convo.build_workspace(Path(tmp) / "ws")
        s = load_settings(ws / "memory-core.toml", {"workspace": str(ws)})
        run_index(s)
        queries, _ = convo.labels()
        shared = list(queries.values())[:20]
        times: dict[str, list[float]] = {}
        with Searcher(s) as searcher:
            for q in [*ABSENT, *shared]:  # warm: the model, the tokenizer, the index's caches
                searcher.search(q)
            provider = searcher._provider
            assert provider is not None
            asked = provider.knows_words
            for r in range(a.rounds):
                for which in (("on", "off") if r % 2 else ("off", "on")):
                    provider.knows_words = asked if which == "on" else (lambda words: None)  # type: ignore[method-assign]
                    for label, qs in (("absent", ABSENT), ("shared", shared)):
                        times.setdefault(f"{label} {which}", []).append(ms_per_search(searcher, qs))
    print_ratios(("questions", "tokenizer asked (ms / search)", "switched off (ms / search)"),
                 [(f"absent ({len(ABSENT)})", times["absent on"], times["absent off"]),
                  ("shared (20)", times["shared on"], times["shared off"])])


if __name__ == "__main__":
    main()
