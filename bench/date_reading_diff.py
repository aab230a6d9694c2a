"""Which eval questions read other days after a change to how days are read
(``dates.query_date_range``): the code now against a git revision's, over every query text of
``eval/`` (``queries*.jsonl``) and of any folder given with ``--extra`` (the docstring set, which
``eval/docstring_corpus.py`` writes outside the repository).

    PYTHONPATH=. python bench/date_reading_diff.py --before main [--extra /tmp/docs-eval] [--today 2026-11-29]

Each text is read with the same "today" (no memory anchor or timeline, ``query.date_order``
"dmy" and "mdy"); a question whose (first day, last day, words naming them) differ in either
order is printed with both readings. The revision is exported with ``git archive`` into a
temporary folder and read in a child process, so both readers run on the same texts in one run."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def query_files(extra: list[str]) -> list[Path]:
    files = sorted((ROOT / "eval").rglob("queries*.jsonl"))
    for folder in extra:
        files += sorted(Path(folder).rglob("queries*.jsonl"))
    return files


def read_all(files: list[str], today: str) -> dict[str, list[object]]:
    """{file|id: [reading per order]}, each reading [start, end, phrase] or None."""
    from datetime import date

    from memory_core.query.dates import query_date_range

    ref = date.fromisoformat(today)
    out: dict[str, list[object]] = {}
    for name in files:
        for line in Path(name).read_text(encoding="utf-8").splitlines():
            if not line.strip():
                continue
            rec = json.loads(line)
            readings: list[object] = []
            for order in ("dmy", "mdy"):
                got = query_date_range(str(rec.get("text", "")), ref, date_order=order)
                readings.append(None if got is None else [got.start.isoformat(), got.end.isoformat(), got.phrase])
            out[f"{name}|{rec.get('_id')}|{rec.get('text', '')}"] = readings
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", default="main", help="the git revision to compare with")
    ap.add_argument("--extra", action="append", default=[], help="another folder of queries*.jsonl")
    ap.add_argument("--today", default="2026-11-29")
    ap.add_argument("--child", nargs="*", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child is not None:
        print(json.dumps(read_all(a.child, a.today)))
        return 0
    files = [str(f) for f in query_files(a.extra)]
    now = read_all(files, a.today)
    with tempfile.TemporaryDirectory() as tmp:
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", a.before, "memory_core"], check=True,
                                 capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
        child = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--today", a.today, "--child", *files],
                               check=True, capture_output=True, text=True, env={"PYTHONPATH": tmp, "PATH": ""})
    before = json.loads(child.stdout)
    changed = [k for k in now if now[k] != before.get(k)]
    print(f"{len(now)} questions in {len(files)} files, {len(changed)} read differently (before {a.before}, today {a.today})")
    for k in changed:
        name, qid, text = k.split("|", 2)
        print(f"- {Path(name).relative_to(ROOT) if name.startswith(str(ROOT)) else name} {qid}: {text!r}")
        for order, b, n in zip(("dmy", "mdy"), before.get(k, [None, None]), now[k], strict=True):
            if b != n:
                print(f"    {order}: before {b} -> now {n}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
