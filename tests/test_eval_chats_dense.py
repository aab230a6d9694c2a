"""eval/chats.py's chats-dense set (issue 37), without a model: the committed labels are what the
generator writes (so it is deterministic across processes), every evidence line holds a planted
message as memory-core's own session parser reads it, and each edge-next question's message is
the last line of a chunk at the local model's chunking with its answer the very next message."""

from __future__ import annotations

import csv
import filecmp
import sys
from pathlib import Path
from typing import Any

import pytest

from memory_core.index.chunking import chunk_markdown, remap_chunk_lines
from memory_core.sources.sessions import parse_session_file
from tests.conftest import ROOT
from tests.test_eval_sets import assert_evidence_is_planted

sys.path.insert(0, str(ROOT / "eval"))

import chats  # noqa: E402  (eval/chats.py)


@pytest.fixture(scope="module")
def dense_ws(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return chats.build_workspace(tmp_path_factory.mktemp("dense") / "ws", dense=True)


def _tsv(path: Path) -> list[dict[str, str]]:
    with open(path, encoding="utf-8", newline="") as fh:
        return list(csv.DictReader(fh, delimiter="\t", quoting=csv.QUOTE_NONE))


def _planted(p: dict[str, Any]) -> set[str]:
    return {f"{sender}: {text}" for s in p["sessions"].values() for sender, text, tag in s["msgs"] if tag}


def test_chats_dense_labels_are_the_generators(tmp_path: Path) -> None:
    counts = chats.write_labels(tmp_path, dense=True)
    for name in ("queries.jsonl", "qrels.tsv", "labels.tsv", "evidence.tsv", "negatives.tsv", "qrels-notes.tsv",
                 "evidence-notes.tsv"):
        assert filecmp.cmp(tmp_path / name, chats.DENSE_HERE / name, shallow=False), f"eval/chats-dense/{name} is stale"
    assert counts["questions"] == 228 and counts["labelled"] == 210 and counts["negative"] == 18
    assert counts["edge-next"] == 12 and counts["multi"] == 32 and counts["paraphrase"] == 32
    a, b = chats.plan_dense(), chats.plan_dense()
    assert [(s["file"], s["msgs"], s["stamps"]) for s in a["sessions"].values()] == [
        (s["file"], s["msgs"], s["stamps"]) for s in b["sessions"].values()]
    # about 4x the base set's volume, every day busy
    per_day: dict[str, int] = {}
    for s in a["sessions"].values():
        per_day[s["start"].date().isoformat()] = per_day.get(s["start"].date().isoformat(), 0) + len(s["msgs"])
    assert 4000 <= sum(per_day.values()) <= 6000 and len(per_day) == 21 and min(per_day.values()) >= 120


def test_chats_dense_evidence_lines_hold_the_planted_messages(dense_ws: Path) -> None:
    p = chats.plan_dense()
    planted = _planted(p)
    files = {f.name for f in (dense_ws / "sessions").iterdir()}
    assert len(files) == len(p["sessions"])
    evidence = _tsv(chats.DENSE_HERE / "evidence.tsv")
    assert len(evidence) >= 210
    assert_evidence_is_planted(dense_ws, files, evidence, planted)
    # the notes variant: the same questions, its evidence lines hold the same messages
    ws = chats.build_workspace(dense_ws.parent / "notes", "notes", dense=True)
    notes = {f"memory/{f.name}": f.read_text(encoding="utf-8").split("\n") for f in (ws / "memory").iterdir()}
    for r in _tsv(chats.DENSE_HERE / "evidence-notes.tsv"):
        assert notes[r["corpus-id"]][int(r["line"]) - 1] in planted, r


def test_chats_dense_edge_next_answer_starts_past_the_questions_chunk(dense_ws: Path) -> None:
    """The question's message ends a chunk; the answer is the next message, the first line the
    next chunk adds past its overlap (which repeats the question's line: the chunker always
    carries a chunk's last line)."""
    by_key = chats.plan_dense()["sessions"]
    for key, ((_, q_text, _), (_, a_text, _)) in chats.EDGE_NEXT:
        doc = parse_session_file(dense_ws / "sessions" / by_key[key]["file"])
        lines = doc.content.split("\n")
        q = next(i for i, t in enumerate(lines) if t.endswith(q_text))
        assert lines[q + 1].endswith(a_text), key  # the very next message
        chunks = remap_chunk_lines(chunk_markdown(doc.content, chats.CHUNK_TOKENS, chats.CHUNK_OVERLAP), doc.line_map)
        q_line, a_line = doc.line_map[q], doc.line_map[q + 1]
        ends = [n for n, c in enumerate(chunks) if c.end_line == q_line]
        assert ends and ends[0] + 1 < len(chunks), (key, q_line, [(c.start_line, c.end_line) for c in chunks])
        nxt = chunks[ends[0] + 1]
        assert nxt.start_line <= q_line < a_line <= nxt.end_line, key
        assert not any(c.start_line <= a_line <= c.end_line for c in chunks[:ends[0] + 1]), key
