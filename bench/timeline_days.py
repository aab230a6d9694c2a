"""What a conversation named by its place costs ("our first conversation", "the last time we
talked": ``dates.conversation_days``), against the same question naming a calendar day, in one run.

    PYTHONPATH=. python bench/timeline_days.py [--sessions 400] [--messages 120] [--rounds 7] [--imported]

A workspace of ``--sessions`` transcripts of ``--messages`` messages each, one day apart (each last
modified on its day, or with ``--imported`` all the same second under random names), indexed
with no provider (keyword side and dates only: the model's time is not what is measured). Each
round times, alternating which goes first, a search asking about "our first conversation" (the
memory's conversation days, from the index's ``chunk_days``) and one naming the first day as a
date ("on 2 March 2025": that day's chunks found by their recorded days), and the same question
naming no day (what any search costs here), and the first day written as an ambiguous numeric
day, ``3/2/2025`` (day first, the default, it is 3 February 2025, a day before the memory: read as
the memory holds it, which asks the index whether memory has days near each reading). The first
search of a new searcher is reported apart
("cold": a new connection; with an index of schema 5 the transcripts' message times were read from
the files then); later ones reuse the searcher ("warm")."""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import tempfile
import time
from datetime import date, datetime, timedelta
from pathlib import Path

from memory_core.config import load_settings
from memory_core.index.pipeline import run_index
from memory_core.query import dates
from memory_core.query.search import Searcher

TOPICS = ["the hiking trip", "the cello lessons", "the boiler in the flat", "the band's setlist",
          "the garden allotment", "the marathon training", "the new job", "the car repairs"]
FIRST = date(2025, 3, 2)
WORDS = ["good", "bad", "odd", "late", "early", "quick", "slow", "big", "small", "funny", "sad", "new", "old"]  # no digits:
# a day written in the text ("2 March") is found by its words too, which is not what is measured


def _workspace(dest: Path, sessions: int, messages: int, imported: bool = False) -> Path:
    (dest / "sessions").mkdir(parents=True)
    (dest / "MEMORY.md").write_text("# Memory\n\n- Prefers short answers.\n")
    for k in range(sessions):
        day = (FIRST + timedelta(days=k)).isoformat()
        recs: list[dict[str, object]] = [{"type": "session", "version": 3, "id": f"s{k}", "timestamp": f"{day}T08:00:00.000Z"}]
        for n in range(messages):
            topic = TOPICS[(k + n) % len(TOPICS)]
            recs.append({"type": "message", "timestamp": f"{day}T{8 + n // 60:02d}:{n % 60:02d}:00.000Z",
                         "message": {"role": "user" if n % 2 == 0 else "assistant",
                                     "content": [{"type": "text", "text": f"{WORDS[(k * 7 + n) % len(WORDS)]} news about"
                                                                          f" {topic}, {WORDS[(k + n * 3) % len(WORDS)]} again"}]}})
        name = f"{random.Random(k).getrandbits(64):016x}.jsonl" if imported else f"s{k:04d}.jsonl"
        f = dest / "sessions" / name
        f.write_text("\n".join(json.dumps(r) for r in recs) + "\n")
        t = datetime.fromisoformat(f"{day}T22:00:00").timestamp()  # last modified that evening
        os.utime(f, (t, t))
    if imported:  # copied in at once: every file modified the same second, names in no day order
        same = time.time() - 3600
        for f in (dest / "sessions").iterdir():
            os.utime(f, (same, same))
    return dest


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sessions", type=int, default=400)
    ap.add_argument("--messages", type=int, default=120)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--imported", action="store_true", help="every transcript modified the same second, random names")
    a = ap.parse_args()
    asks = {"first conversation": "what did we talk about in our first conversation?",
            "a calendar day": f"what did we talk about on {FIRST.day} March {FIRST.year}?",
            # day first (the default) it is 3 February 2025, before the memory: read as the memory holds it
            "ambiguous": f"what did we talk about on {FIRST.month}/{FIRST.day}/{FIRST.year}?",
            "no day": "what did we talk about the cello lessons?"}
    with tempfile.TemporaryDirectory() as tmp:
        ws = _workspace(Path(tmp) / "ws", a.sessions, a.messages, a.imported)
        s = load_settings(None, {"workspace": str(ws), "provider": "none", "sources": ["sessions"]})
        run_index(s)
        cold: dict[str, float] = {}
        for name, q in asks.items():  # a new searcher and no times kept: the first search of a process
            dates._CACHE.clear()
            with Searcher(s) as se:
                t0 = time.perf_counter()
                got = se.search(q, max_results=10)
                cold[name] = time.perf_counter() - t0
                assert name == "no day" or (got and (got[0].date or "").startswith(FIRST.isoformat())), (name, got[:1])
        warm: dict[str, list[float]] = {k: [] for k in asks}
        with Searcher(s) as se:
            for q in asks.values():
                se.search(q, max_results=10)
            for r in range(a.rounds):
                for name in (list(asks) if r % 2 else list(asks)[::-1]):
                    t0 = time.perf_counter()
                    se.search(asks[name], max_results=10)
                    warm[name].append(time.perf_counter() - t0)
    med = {k: statistics.median(v) * 1000 for k, v in warm.items()}
    f, d, n, m = "first conversation", "a calendar day", "no day", "ambiguous"
    how = "copied in at once (one mtime, random names)" if a.imported else "each modified on its day"
    print(f"{a.sessions} transcripts x {a.messages} messages, one a day, {how}; no provider; {a.rounds} rounds")
    print("| search | our first conversation | on the first day's date | on 3/2/2025 (ambiguous) | no day"
          " | first / date | 3/2/2025 / date | first / no day |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    print(f"| cold: a new searcher, no message times read yet (ms) | {cold[f] * 1000:.1f} | {cold[d] * 1000:.1f} |"
          f" {cold[m] * 1000:.1f} | {cold[n] * 1000:.1f} | {cold[f] / cold[d]:.2f}x | {cold[m] / cold[d]:.2f}x |"
          f" {cold[f] / cold[n]:.2f}x |")
    print(f"| warm: median of {a.rounds} (ms) | {med[f]:.1f} | {med[d]:.1f} | {med[m]:.1f} | {med[n]:.1f} |"
          f" {med[f] / med[d]:.2f}x | {med[m] / med[d]:.2f}x | {med[f] / med[n]:.2f}x |")


if __name__ == "__main__":
    main()
