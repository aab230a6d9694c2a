"""What the twenty-seventh session's name rules cost a search: a nickname searched as the form memory
writes (``retrieval.nickname_in_memory``) and a hyphenated name joined (``retrieval._joined_names``).

    PYTHONPATH=. python bench/name_forms.py [--rounds 5]

Builds eval/chats.py's dense workspace (the real local model), then, each round, opens a searcher
and asks its name questions (eval/chats-dense's ``name`` category and the same questions naming
Kate asked as "Katherine") twice: the first time (cold: every rule reads memory once per opened
index) and again (warm: the answers are kept). The rules on and switched off alternate which goes
first; the report is the median per search and the ratio in the same run. Everything else a
question asks of memory is the same both ways."""

from __future__ import annotations

import argparse
import json
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.paired import EVAL, eval_module, ms_per_search, print_ratios
from memory_core.config import load_settings
from memory_core.index.pipeline import run_index
from memory_core.query import retrieval
from memory_core.query.search import Searcher


def _questions() -> list[str]:
    rows = [json.loads(line) for line in (EVAL / "chats-dense" / "queries.jsonl").read_text().splitlines()]
    names = [r["text"] for r in rows if r.get("category") == "name"]
    kate = [r["text"].replace("Kate", "Katherine") for r in rows if "Kate" in r["text"]][:20]
    return names + kate


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    chats = eval_module("chats")
    questions = _questions()
    on: dict[str, Callable[..., Any]] = {"nickname_in_memory": retrieval.nickname_in_memory,
                                          "_joined_names": retrieval._joined_names}
    off: dict[str, Callable[..., Any]] = {"nickname_in_memory": lambda *args, **kw: None,
                                           "_joined_names": lambda idx, query, conn=None: query}
    times: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        ws = chats.build_workspace(Path(tmp) / "ws", dense=True)
        s = load_settings(ws / "memory-core.toml" if (ws / "memory-core.toml").exists() else None,
                          {"workspace": str(ws), "provider": "local", "sources": ["sessions"]})
        run_index(s)
        with Searcher(s) as warm_up:  # the model and its tokenizer, once per process
            for q in questions:
                warm_up.search(q)
        for r in range(a.rounds):
            for which in (("on", "off") if r % 2 else ("off", "on")):
                for name, fn in (on if which == "on" else off).items():
                    setattr(retrieval, name, fn)
                with Searcher(s) as searcher:
                    for phase in ("cold", "warm"):
                        times.setdefault(f"{phase} {which}", []).append(ms_per_search(searcher, questions))
        for name, fn in on.items():
            setattr(retrieval, name, fn)
    print(f"{len(questions)} questions naming someone, {a.rounds} rounds, median ms per search")
    print()
    print_ratios(("asked", "name rules on", "switched off"),
                 [(phase, times[f"{phase} on"], times[f"{phase} off"]) for phase in ("cold", "warm")])


if __name__ == "__main__":
    main()
