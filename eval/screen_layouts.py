"""Measure a notes set with its daily notes laid out another way: does a question naming a day still
find a note kept in a subfolder, named with a suffix or filed in year and month folders?

    PYTHONPATH=. python eval/screen_layouts.py [--sets chats-notes,chats-dense-notes] [--layouts root,daily,slug,ymd]

Each layout moves every ``memory/YYYY-MM-DD.md`` of the set's workspace (and its labels) to:
``root`` where it is (the seeds' daily note), ``daily`` ``memory/daily/YYYY-MM-DD.md``, ``slug``
``memory/YYYY-MM-DD-chat.md`` (the name OpenClaw's session summaries take), ``ymd``
``memory/YYYY/MM/DD.md``. The files are written when the workspace is built, so their
modification times are that day's, as after a copy or a sync: only a note's name can date it.
Prints each layout's rows (default hybrid, one-side modes, ``min_score`` 0) as ``eval/run_sets.py``
measures them (``run_set``), indexes cached beside run_sets' (built first if missing; the chunks
are the same, so the embeddings come from the cache). Figures: docs/search.md, "Dated notes".
"""

from __future__ import annotations

import argparse
import shutil
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import run_sets  # noqa: E402  (eval/run_sets.py)

LAYOUTS: dict[str, Callable[[str], str]] = {
    "root": lambda p: p,
    "daily": lambda p: "memory/daily/" + p[len("memory/"):],
    "slug": lambda p: p[:-len(".md")] + "-chat.md",
    "ymd": lambda p: f"memory/{p[7:11]}/{p[12:14]}/{p[15:17]}.md",
}


def _daily(path: str) -> bool:
    """``memory/YYYY-MM-DD.md``: a daily note the layouts move."""
    name = path[len("memory/"):]
    return path.startswith("memory/") and len(name) == 13 and name.endswith(".md") and name[:4].isdigit()


def laid_out(base: run_sets.EvalSet, layout: str) -> run_sets.EvalSet:
    """``base`` (one workspace) with its daily notes and their labels moved by ``layout``."""
    move = LAYOUTS[layout]

    def moved(path: str) -> str:
        return move(path) if _daily(path) else path

    (group, write), = base.groups.items()

    def writer(dest: Path) -> None:
        write(dest)
        for p in sorted((dest / "memory").glob("*.md")):
            rel = f"memory/{p.name}"
            if moved(rel) != rel:
                (dest / moved(rel)).parent.mkdir(parents=True, exist_ok=True)
                shutil.move(p, dest / moved(rel))

    name = f"{base.name}-{layout}"
    return replace(base, name=name, groups={name: writer}, inputs=[*base.inputs, Path(__file__)],
                   qrels={q: {moved(c): v for c, v in r.items()} for q, r in base.qrels.items()},
                   evidence={q: [(moved(c), n) for c, n in ev] for q, ev in base.evidence.items()})


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sets", default="chats-notes,chats-dense-notes")
    ap.add_argument("--layouts", default=",".join(LAYOUTS))
    ap.add_argument("--cache", type=Path, default=run_sets.DEFAULT_CACHE)
    a = ap.parse_args(argv)
    from memory_core.config import load_settings
    from memory_core.embeddings.registry import create_provider

    run_sets.MAX_RESULTS = 10
    provider, _ = create_provider(load_settings(None, {"workspace": str(a.cache), "provider": "local"}))
    code = run_sets.indexer_version()
    print("| set | layout | row | nDCG@10 | R@10 | evidence R@10 |\n|---|---|---|---:|---:|---:|")
    for name in a.sets.split(","):
        base = run_sets.make_set(name.strip(), False, a.cache)
        for layout in a.layouts.split(","):
            res: dict[str, Any] = run_sets.run_set(laid_out(base, layout.strip()), a.cache, code, provider, False,
                                                   lambda m: print(m, file=sys.stderr))
            for r in res["rows"]:
                if r["mode"] in ("hybrid", "keyword", "vector") and not r.get("decay"):
                    row = r["mode"] + ("@0" if r["min_score"] == 0.0 else "")
                    print(f"| {name} | {layout} | {row} | {r['ndcg@10']:.3f} | {r['recall@10']:.3f} |"
                          f" {r.get('ev@10') or 0:.3f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
