"""What an incremental run that edits the live index in place costs when it rewrites notes.

    PYTHONPATH=<tree> python -m bench.in_place_edits [--notes 2000] [--edit 40] [--rounds 7] [--out FILE]

Since the twenty-third session an in-place run zeroes the pages of the rows it removes
(``PRAGMA secure_delete``: a removed note's text is no longer left in the file's free space).
This times, per round, ``--edit`` notes rewritten (every one of their chunks removed and written
anew) and one ``run_index`` (keyword-only, provider ``none``: no model), median over the rounds,
and the index file's size after them. Run it with PYTHONPATH at each tree, alternating, in one
sitting, and compare the two as a ratio (machines here are noisy).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

WORDS = ["heron", "pond", "river", "budget", "meeting", "deploy", "replica", "kernel", "garden", "recipe", "invoice", "travel", "vendor", "laptop", "rehearsal", "guitar", "climbing", "pottery", "bakery", "thesis", "chapter", "mechanic", "garage", "football"]


def _note(rng: random.Random, i: int, salt: int) -> str:
    lines = [f"# note {i} ({salt})", ""]
    for _ in range(40):
        lines.append(" ".join(rng.choice(WORDS) for _ in range(10)) + f" {rng.randrange(10**6)}.")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--notes", type=int, default=2000)
    ap.add_argument("--edit", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    from memory_core.config import load_settings
    from memory_core.index.pipeline import run_index

    rng = random.Random(7)
    with tempfile.TemporaryDirectory() as tmp:
        ws = Path(tmp) / "ws"
        (ws / "memory").mkdir(parents=True)
        for i in range(a.notes):
            (ws / "memory" / f"n{i:05d}.md").write_text(_note(rng, i, 0))
        s = load_settings(None, {"workspace": str(ws), "provider": "none"})
        run_index(s)
        times, kinds = [], []
        for r in range(1, a.rounds + 1):
            for i in rng.sample(range(a.notes), a.edit):
                (ws / "memory" / f"n{i:05d}.md").write_text(_note(rng, i, r))
            t0 = time.perf_counter()
            summary = run_index(s)
            times.append(time.perf_counter() - t0)
            kinds.append(summary.published)
        out = {"tree": sys.path[0] if sys.path else "", "notes": a.notes, "edit": a.edit, "rounds": a.rounds,
               "median_s": statistics.median(times), "min_s": min(times), "max_s": max(times),
               "published": sorted(set(kinds)), "index_bytes": Path(s.index_file).stat().st_size}
    line = json.dumps(out)
    print(line)
    if a.out:
        with open(a.out, "a") as f:
            f.write(line + "\n")


if __name__ == "__main__":
    main()
