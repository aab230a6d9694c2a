"""What a run and a freshness check cost when transcripts grew below the delta thresholds.

    PYTHONPATH=. python -m bench.transcript_appends [--files 40] [--kib 1024] [--rounds 5]

Since the seventeenth session a transcript below the thresholds is carried only when the bytes it
was indexed from are unchanged (``sources.sessions.below_delta``: the sha256 of its first N bytes,
read in the pass that counts its lines). This times, per round, a line appended to every
transcript and then ``dirty_state`` (what ``status`` and a long-lived reader's freshness check
run) and an incremental ``run_index`` (keyword-only: no model), median over rounds; ``--no-check``:
the run alone (as a CLI run in its own process: nothing read before it). Run it with
PYTHONPATH at the tree to measure; compare two trees in the same session, alternating.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=40)
    ap.add_argument("--kib", type=int, default=1024, help="size of each transcript")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--no-check", action="store_true", help="the run alone (no freshness check before it)")
    args = ap.parse_args()
    from memory_core.config import load_settings
    from memory_core.index.pipeline import run_index
    from memory_core.sources.freshness import dirty_state

    with tempfile.TemporaryDirectory() as tmp:
        ws = Path(tmp) / "ws"
        (ws / "sessions").mkdir(parents=True)
        line = json.dumps({"type": "message", "timestamp": "2026-01-05T10:00:00Z",
                           "message": {"role": "user", "content": "the walrus budget review " * 8}}) + "\n"
        per = max(1, args.kib * 1024 // len(line))
        for i in range(args.files):
            (ws / "sessions" / f"s{i}.jsonl").write_text(line * per)
        s = load_settings(None, {"workspace": str(ws), "provider": "none", "sources": ["sessions"]})
        run_index(s)
        dirty_t, run_t = [], []
        for _ in range(args.rounds):
            for i in range(args.files):
                with (ws / "sessions" / f"s{i}.jsonl").open("a") as fh:
                    fh.write(line)
            t0 = time.perf_counter()
            d = dirty_state(s) if not args.no_check else None
            t1 = time.perf_counter()
            r = run_index(s)
            t2 = time.perf_counter()
            assert (d is None or not d.dirty) and r.sessions_carried == args.files, (d, r.lines())
            dirty_t.append(t1 - t0)
            run_t.append(t2 - t1)
        check = "not run" if args.no_check else f"{statistics.median(dirty_t) * 1e3:.1f} ms"
        print(f"{args.files} transcripts of {args.kib} KiB, one line appended to each, {args.rounds} rounds:"
              f" dirty_state {check}, incremental run"
              f" {statistics.median(run_t) * 1e3:.1f} ms (medians)")


if __name__ == "__main__":
    main()
