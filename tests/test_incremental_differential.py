"""Incremental runs give the index a full build gives: a differential test over random edits.

A workspace (the example notes and transcripts) goes through random steps: notes appended to,
rewritten, added, deleted, renamed or only touched; transcripts appended to, added or deleted.
After each step an incremental run publishes (in place, or as a new file when the step is big or
the in-place bound is lowered), and the live index must hold what a full build of the same files
into another file holds: the same files rows, the same chunks (lines, hash, text, source, date),
the same vector and sign-bit code for each, the same exchange vectors, and FTS5 the same bm25()
for each chunk on probe queries. A searcher opened before the first step and kept across all of
them (carrying its codes and postings by the change log) must answer as a fresh one.

Real SQLite, FTS5, the openai SDK against the fake server (deterministic vectors).
"""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path
from typing import Any

import pytest

from memory_core.index.pipeline import run_index
from memory_core.query import retrieval
from memory_core.query.search import Searcher
from tests.conftest import index_content, openai_settings

PROBES = ["postgres replication lag", "rate limit", "lisbon", "deploy", "the gateway quorum", "ingest 502",
          "note", "memory", "sourdough starter", "LRK-812", "pg-replica-1", "hotel"]
WORDS = ["postgres", "replication", "lag", "deploy", "gateway", "quorum", "lisbon", "hotel", "rate", "limit",
         "sourdough", "starter", "ingest", "backlog", "retry", "window", "friday", "review", "incident",
         "cluster", "staging", "note", "memory"]


def _sentence(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 30))).capitalize() + "."


def _message(rng: random.Random) -> str:
    role = rng.choice(["user", "assistant"])
    return json.dumps({"type": "message", "message": {"role": role, "content": _sentence(rng)}}) + "\n"


def _step(ws: Path, rng: random.Random, n: int) -> str:
    notes = sorted(p for p in (ws / "memory").rglob("*.md"))
    sessions = sorted((ws / "sessions").glob("*.jsonl"))
    op = rng.choice(["append", "rewrite", "add", "delete", "rename", "touch", "session-append", "session-add",
                     "session-delete", "several"])
    if op == "several":
        return "+".join(_step(ws, rng, n * 100 + i) for i in range(rng.randint(2, 4)))
    if op == "append" and notes:
        with open(rng.choice(notes), "a") as fh:
            fh.write("\n" + "\n".join(f"- {_sentence(rng)}" for _ in range(rng.randint(1, 12))) + "\n")
    elif op == "rewrite" and notes:
        p = rng.choice(notes)
        lines = p.read_text().splitlines()
        if lines:
            lines[rng.randrange(len(lines))] = _sentence(rng)
        p.write_text("\n".join(lines) + "\n")
    elif op == "add":
        (ws / "memory" / f"added-{n}.md").write_text(f"# Added {n}\n\n" + "\n\n".join(
            _sentence(rng) for _ in range(rng.randint(1, 20))) + "\n")
    elif op == "delete" and len(notes) > 3:
        rng.choice(notes).unlink()
    elif op == "rename" and notes:
        p = rng.choice(notes)
        p.rename(p.with_name(f"renamed-{n}-{p.name}"))
    elif op == "touch" and notes:
        p = rng.choice(notes)
        p.write_bytes(p.read_bytes())
    elif op == "session-append" and sessions:
        with open(rng.choice(sessions), "a") as fh:
            fh.writelines(_message(rng) for _ in range(rng.randint(1, 8)))
    elif op == "session-add":
        (ws / "sessions" / f"added-{n}.jsonl").write_text("".join(_message(rng) for _ in range(rng.randint(1, 8))))
    elif op == "session-delete" and len(sessions) > 1:
        rng.choice(sessions).unlink()
    return op


def _answers(searcher: Searcher, mode: str) -> list[list[tuple[str, int, float]]]:
    return [[(r.path, r.start_line, round(r.score, 12)) for r in searcher.search(q, min_score=0.0, mode=mode)]
            for q in PROBES]


@pytest.mark.parametrize("seed", [1, pytest.param(2, marks=pytest.mark.slow)])  # one seed by default (35 s each)
def test_random_incremental_runs_give_the_index_of_a_full_build(workspace: Path, openai_fake: Any, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch, seed: int) -> None:
    monkeypatch.setattr(retrieval, "KEYWORD_POSTINGS_MIN", 0)  # keyword queries on kept postings, carried
    monkeypatch.delenv("MEMORY_CORE_WRITER", raising=False)
    rng = random.Random(seed)
    # a transcript that grew by less than the delta thresholds keeps its rows on purpose: 0 here
    s = openai_settings(workspace, openai_fake, sources=["memory", "sessions"], sessions={"delta_bytes": 0})
    run_index(s)
    published: list[str] = []
    with Searcher(s) as warm:
        _answers(warm, "hybrid")
        for n in range(12):
            op = _step(workspace, rng, n)
            with pytest.MonkeyPatch.context() as mp:
                if n % 4 == 3:  # now and then a copy run, whatever the size
                    mp.setattr("memory_core.index.writer.IN_PLACE_MAX_BYTES", 0)
                summary = run_index(s)
            published.append(summary.published)
            fresh_ws = tmp_path / f"fresh-{n}"
            shutil.copytree(workspace, fresh_ws, ignore=shutil.ignore_patterns(".memory-core"))
            fresh = openai_settings(workspace, openai_fake, sources=["memory", "sessions"],
                                    sessions={"delta_bytes": 0}, index_path=str(fresh_ws / "index.sqlite"))
            assert run_index(fresh, full=True).published, op
            got, want = index_content(s.index_file, PROBES), index_content(fresh.index_file, PROBES)
            for key in ("files", "chunks", "parts", "fts"):
                assert got[key] == want[key], (n, op, key)
            with Searcher(fresh) as other:
                for mode in ("hybrid", "keyword", "vector"):
                    assert _answers(warm, mode) == _answers(other, mode), (n, op, mode)
    assert "in place" in published and any(p and p != "in place" for p in published), published
