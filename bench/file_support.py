"""What reading each candidate file's every chunk for its relevance as a whole costs a search
(``query.file_support``, issue 37).

    PYTHONPATH=. python bench/file_support.py [--messages 4000] [--dims 384] [--rounds 7] [--local] [--notes]

One workspace of transcripts (``--messages`` messages in sessions of 40, as bench/snippet_lines.py
writes them; with ``--notes`` the same lines as daily notes of 40 bullets, note windows on: a
note's chunks are read as wholes, a transcript's by their best exchange), hybrid search, a fixed
set of queries. The vectors come from the distinct fake provider (bench/fake_provider.py, any
``--dims``) or with ``--local`` the real local model (384-d; the query's embedding is then most of
a search). Each round times the queries with ``file_support`` 0.5 (the default: up to 20 files'
chunks, at most 600 vectors, read per search) and 0 (nothing read), alternating which goes first;
the report is the median per search and the ratio in the same run."""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from datetime import date, timedelta
from pathlib import Path

from bench.fake_provider import DistinctProvider
from bench.snippet_lines import WORDS, workspace
from memory_core.config import load_settings
from memory_core.index.pipeline import run_index
from memory_core.query.search import Searcher


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=4000)
    ap.add_argument("--dims", type=int, default=384)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--local", action="store_true", help="the real local model instead of the fake provider")
    ap.add_argument("--notes", action="store_true", help="daily notes with note windows instead of transcripts")
    a = ap.parse_args()
    rng = random.Random(7)
    with tempfile.TemporaryDirectory() as tmp:
        ws = workspace(Path(tmp), a.messages, rng)
        extra: dict[str, object] = {"sources": ["sessions"]}
        if a.notes:
            _as_notes(ws)
            extra = {"sources": ["memory"], "chunking": {"note_windows": True}}
        s = load_settings(None, {"workspace": str(ws), "provider": "local" if a.local else "none", **extra})
        provider = None if a.local else DistinctProvider(a.dims)
        run_index(s, provider=provider)
        queries = [" ".join(rng.sample(WORDS, rng.randint(2, 4))) for _ in range(30)]
        on = s
        off = s.model_copy(update={"query": s.query.model_copy(update={"file_support": 0.0})})
        times: dict[str, list[float]] = {"on": [], "off": []}
        with Searcher(s, provider=provider) as searcher:
            chunks = sum(searcher.indexed_chunks().values())
            searcher.search(queries[0])  # warm: the model, the file cache
            for r in range(a.rounds):
                for which in (("on", "off") if r % 2 else ("off", "on")):
                    searcher.settings = on if which == "on" else off
                    t0 = time.perf_counter()
                    for q in queries:
                        searcher.search(q, max_results=10)
                    times[which].append((time.perf_counter() - t0) / len(queries))
        med = {k: statistics.median(v) * 1000 for k, v in times.items()}
        model = "local model" if a.local else f"fake provider {a.dims}-d"
        kind = "notes' lines" if a.notes else "messages"
        print(f"{a.messages} {kind} ({chunks} chunks), {model}; {len(queries)} hybrid queries x {a.rounds} rounds,"
              " 10 results a search")
        print(f"median per search: file_support 0.5 {med['on']:.2f} ms, 0 {med['off']:.2f} ms,"
              f" ratio {med['on'] / med['off']:.2f}x")


def _as_notes(ws: Path) -> None:
    """The transcripts' messages as daily notes, one bullet a message (a message's line breaks
    kept as continuation lines), and the transcripts removed."""
    (ws / "memory").mkdir()
    for n, f in enumerate(sorted((ws / "sessions").glob("*.jsonl"))):
        bullets = []
        for line in f.read_text().splitlines()[1:]:
            text = json.loads(line)["message"]["content"][0]["text"]
            bullets.append("- " + text.replace("\n", "\n  "))
        day = (date(2026, 1, 1) + timedelta(days=n)).isoformat()
        (ws / "memory" / f"{day}.md").write_text(f"# {day}\n\n" + "\n".join(bullets) + "\n")
        f.unlink()


if __name__ == "__main__":
    main()
