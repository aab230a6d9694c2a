"""What reading a question's days costs as the question grows (``dates.query_date_range``), for
the code now and, with ``--before REV``, the code of a git revision, in one run.

    PYTHONPATH=. python bench/date_scan.py [--sizes 6250,12500,25000] [--rounds 3] [--before 23289ce~1]

Each query is one phrase repeated to the size (``1/1 ``, ``on 1/1 ``, ``on the 1st ``, ``1.12 ``,
``in may ``, ``december 1 ``: a day, or a day's words, in every few characters; and a question of
the same length naming one day at its start). The figure reported is the ratio of the time at
each size to the time at the smallest, per phrase: about 2 per doubling is linear, 4 quadratic. A
revision given with ``--before`` is exported with ``git archive`` into a temporary folder and
measured in a child process on the same phrases and sizes (its absolute times are printed too,
since both run on this machine in this run)."""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PHRASES = ["1/1 ", "on 1/1 ", "on the 1st ", "1.12 ", "in may ", "december 1 ", "what happened on 3 January? blah ",
           "on the seventeenth ", "the first may be ", "17 janaury 24 "]


def measure(sizes: list[int], rounds: int) -> dict[str, list[float]]:
    """Best-of-``rounds`` seconds of ``query_date_range`` per phrase and size."""
    from memory_core.query.dates import query_date_range

    today = date(2026, 3, 10)
    out: dict[str, list[float]] = {}
    for phrase in PHRASES:
        times = []
        for n in sizes:
            q = phrase * max(1, n // len(phrase))
            best = float("inf")
            for _ in range(rounds):
                t0 = time.perf_counter()
                query_date_range(q, today)
                best = min(best, time.perf_counter() - t0)
            times.append(best)
        out[phrase] = times
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="6250,12500,25000")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--before", default="", help="a git revision to measure beside the code now")
    ap.add_argument("--json", action="store_true", help="(internal) print the figures as JSON")
    a = ap.parse_args()
    sizes = [int(x) for x in a.sizes.split(",")]
    if a.json:
        print(json.dumps(measure(sizes, a.rounds)))
        return
    runs = {"now": measure(sizes, a.rounds)}
    if a.before:
        with tempfile.TemporaryDirectory() as tmp:
            archive = subprocess.run(["git", "-C", str(ROOT), "archive", a.before], check=True, capture_output=True)
            subprocess.run(["tar", "-x", "-C", tmp], input=archive.stdout, check=True)
            (Path(tmp) / "bench").mkdir(exist_ok=True)
            (Path(tmp) / "bench" / "date_scan.py").write_text(Path(__file__).read_text())
            got = subprocess.run([sys.executable, str(Path(tmp) / "bench" / "date_scan.py"), "--json",
                                  "--sizes", a.sizes, "--rounds", str(a.rounds)], check=True, capture_output=True,
                                 text=True, env={"PYTHONPATH": tmp, "PATH": "/usr/bin:/bin"}, cwd=tmp)
            runs[a.before] = json.loads(got.stdout)
    print(f"sizes (characters): {sizes}; each cell: seconds at the largest size, then the ratio of each size's time"
          " to the smallest's")
    print("| phrase | " + " | ".join(runs) + " |")
    print("|---|" + "---|" * len(runs))
    for phrase in PHRASES:
        cells = []
        for figures in runs.values():
            t = figures[phrase]
            ratios = " / ".join(f"x{v / t[0]:.1f}" if t[0] > 0 else "-" for v in t[1:])
            cells.append(f"{t[-1]:.4f} s ({ratios})")
        print(f"| `{phrase.strip()}` | " + " | ".join(cells) + " |")
    print("median of the now/before ratio at the largest size: "
          + (f"{statistics.median(runs['now'][p][-1] / runs[a.before][p][-1] for p in PHRASES):.3f}"
             if a.before else "-"))


if __name__ == "__main__":
    main()
