"""What showing transcript messages with their own line breaks costs a search (issue 39).

    PYTHONPATH=. python bench/snippet_lines.py [--messages 2000] [--rounds 9]

One workspace of transcripts (``--messages`` messages in sessions of 40, a fifth of them
multi-line), keyword-only (no model: the ranking and snippets are what is measured), a fixed set
of queries. Each round times the queries with the snippets read from the transcripts (the default)
and with the indexed text only (``messages=None``), alternating which goes first; the report is the
median per search and the ratio in the same run, first searches (a cold file cache) apart."""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from pathlib import Path

from memory_core.config import load_settings
from memory_core.index.pipeline import run_index
from memory_core.query import search as search_mod
from memory_core.query.search import Searcher

WORDS = ["deploy", "retry", "header", "cache", "index", "vector", "session", "kayak", "budget", "garden", "river", "invoice", "lease"]


def workspace(root: Path, n: int, rng: random.Random) -> Path:
    ws = root / "ws"
    (ws / "sessions").mkdir(parents=True)
    for f in range(max(1, n // 40)):
        lines = [json.dumps({"type": "session", "version": 3, "id": f"s{f}", "timestamp": "2026-01-05T10:00:00Z"})]
        for i in range(40):
            words = " ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 40)))
            text = words.replace(" ", "\n", 3) if rng.random() < 0.2 else words
            lines.append(json.dumps({"type": "message", "id": f"m{i}", "timestamp": "2026-01-05T10:00:00Z",
                                     "message": {"role": "user" if i % 2 else "assistant",
                                                 "content": [{"type": "text", "text": text}]}}))
        (ws / "sessions" / f"s{f:04d}.jsonl").write_text("\n".join(lines) + "\n")
    return ws


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=9)
    a = ap.parse_args()
    rng = random.Random(7)
    with tempfile.TemporaryDirectory() as tmp:
        ws = workspace(Path(tmp), a.messages, rng)
        s = load_settings(None, {"workspace": str(ws), "provider": "none", "sources": ["sessions"]})
        run_index(s)
        queries = [" ".join(rng.sample(WORDS, 2)) for _ in range(30)]
        real = search_mod.transcript_messages
        times: dict[str, list[float]] = {"lines": [], "indexed": []}
        with Searcher(s) as searcher:
            cold = time.perf_counter()
            searcher.search(queries[0])
            cold = time.perf_counter() - cold
            for r in range(a.rounds):
                for which in (("lines", "indexed") if r % 2 else ("indexed", "lines")):
                    search_mod.transcript_messages = real if which == "lines" else (lambda _s: lambda *_a: None)
                    t0 = time.perf_counter()
                    for q in queries:
                        searcher.search(q)
                    times[which].append((time.perf_counter() - t0) / len(queries))
            search_mod.transcript_messages = real
        med = {k: statistics.median(v) * 1000 for k, v in times.items()}
        print(f"{a.messages} messages, {len(queries)} queries x {a.rounds} rounds, 6 results a search")
        print(f"first search (cold): {cold * 1000:.1f} ms")
        print(f"median per search: with line breaks {med['lines']:.2f} ms, indexed text {med['indexed']:.2f} ms,"
              f" ratio {med['lines'] / med['indexed']:.2f}x")


if __name__ == "__main__":
    main()
