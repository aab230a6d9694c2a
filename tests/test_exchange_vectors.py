"""Exchange vectors: a transcript chunk is also embedded one exchange at a time (schema 4), and its
vector relevance is its best vector's. Real SQLite, the real local model."""

from __future__ import annotations

import json
from pathlib import Path

import apsw
import pytest

from memory_core.config import Settings, load_settings
from memory_core.index.pipeline import run_index
from memory_core.query.search import Searcher
from memory_core.sources.sessions import exchange_parts
from memory_core.storage import vectors

pytest.importorskip("sentence_transformers")

FILLER = [
    ("Any idea what to do with half a cabbage and some leftover rice?",
     "Fried rice with shredded cabbage, soy, ginger and a fried egg on top."),
    ("The sprint review moved to Thursday afternoon, the demo is not ready.",
     "Then cut the demo to the two stories that are done."),
    ("My tomato seedlings look leggy on the windowsill.", "They want more light; a cheap grow lamp helps."),
    ("Which film should we watch tonight, something light?", "A comedy from the nineties is a safe pick."),
    ("The quarterly budget spreadsheet has a broken formula in column F.",
     "Check whether the range still includes the new rows."),
    ("I ran 9 km this morning and my knee felt fine.", "Nice, keep the long run easy this week."),
]
NEEDLE = ("Sold my old road bike on Saturday, the buyer paid 180 euros in cash.",
          "Good price for a bike that age.")
QUERY = "How much did I get for the bicycle I sold?"


def _transcript(turns: list[tuple[str, str]]) -> str:
    recs = [{"type": "session", "version": 3, "id": "s1", "timestamp": "2026-10-02T09:00:00.000Z"}]
    for n, (u, a) in enumerate(turns):
        for role, text in (("user", u), ("assistant", a)):
            recs.append({"type": "message", "timestamp": f"2026-10-02T09:{n:02d}:00.000Z",
                         "message": {"role": role, "content": [{"type": "text", "text": text}]}})
    return "\n".join(json.dumps(r) for r in recs) + "\n"


def _workspace(root: Path) -> Path:
    (root / "sessions").mkdir(parents=True)
    (root / "memory").mkdir()
    (root / "MEMORY.md").write_text("# Memory\n\n- Prefers short answers.\n")
    turns = FILLER[:3] + [NEEDLE] + FILLER[3:]
    (root / "sessions" / "chat.jsonl").write_text(_transcript(turns))
    (root / "sessions" / "other.jsonl").write_text(_transcript(FILLER[::-1]))
    return root


def _settings(ws: Path, **extra: object) -> Settings:
    return load_settings(None, {"workspace": str(ws), "provider": "local", "sources": ["memory", "sessions"], **extra})


def _count(s: Settings, sql: str) -> int:
    conn = apsw.Connection(str(s.index_file), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return int(conn.execute(sql).fetchone()[0])
    finally:
        conn.close()


def test_exchange_parts_split_on_user_lines() -> None:
    text = "Assistant: (tail of an earlier reply)\nUser: one\nAssistant: a\nAssistant: b\nUser: two\nAssistant: c"
    assert exchange_parts(text) == ["Assistant: (tail of an earlier reply)", "User: one\nAssistant: a\nAssistant: b",
                                    "User: two\nAssistant: c"]
    assert exchange_parts("User: only one\nAssistant: reply") == []  # the chunk's own vector is that exchange's
    assert exchange_parts("") == []


@pytest.fixture(scope="module")
def indexes(tmp_path_factory: pytest.TempPathFactory) -> tuple[Settings, Settings]:
    root = tmp_path_factory.mktemp("xv")
    on = _settings(_workspace(root / "on"))
    off = _settings(_workspace(root / "off"), chunking={"exchange_vectors": False})
    run_index(on)
    run_index(off)
    return on, off


def test_parts_are_stored_with_their_codes(indexes: tuple[Settings, Settings]) -> None:
    on, off = indexes
    n_parts = _count(on, f"SELECT count(*) FROM {vectors.PARTS_TABLE}")
    # every exchange of every transcript chunk that holds more than one (13 exchanges in two files)
    assert n_parts >= 13
    assert _count(on, f"SELECT coalesce(sum(live), 0) FROM {vectors.PARTS_BITS_TABLE}") == n_parts
    assert _count(on, f"SELECT count(*) FROM {vectors.PARTS_TABLE} p LEFT JOIN chunks c ON c.rid = p.chunk"
                      " WHERE c.rid IS NULL OR c.source != 'sessions'") == 0
    assert _count(off, f"SELECT count(*) FROM {vectors.PARTS_TABLE}") == 0
    # the chunks themselves are the same either way
    assert _count(on, "SELECT count(*) FROM chunks") == _count(off, "SELECT count(*) FROM chunks")


def test_the_fact_is_found_by_its_exchange(indexes: tuple[Settings, Settings]) -> None:
    on, off = indexes
    with Searcher(on) as a, Searcher(off) as b:
        with_parts = a.search(QUERY, mode="vector", min_score=0)
        without = b.search(QUERY, mode="vector", min_score=0)
        assert with_parts[0].path == "sessions/chat.jsonl"
        top_off = next(r for r in without if r.path == "sessions/chat.jsonl" and r.start_line == with_parts[0].start_line)
        # the exchange about the bike matches the question far better than the chunk's blurred vector
        assert with_parts[0].vector_score > top_off.vector_score + 0.1
        hybrid = a.search(QUERY)
        assert hybrid and hybrid[0].path == "sessions/chat.jsonl"
        # the exact reference includes the exchanges: the scan finds what it finds
        assert a.vector_recall([QUERY, "tomato seedlings light", "budget spreadsheet formula"]) == 1.0


def test_removed_transcript_takes_its_parts_along(tmp_path: Path) -> None:
    ws = _workspace(tmp_path / "ws")
    s = _settings(ws)
    run_index(s)
    before = _count(s, f"SELECT count(*) FROM {vectors.PARTS_TABLE}")
    (ws / "sessions" / "other.jsonl").unlink()
    summary = run_index(s)
    assert summary.files_removed == 1 and not summary.full
    after = _count(s, f"SELECT count(*) FROM {vectors.PARTS_TABLE}")
    assert 0 < after < before
    assert _count(s, f"SELECT coalesce(sum(live), 0) FROM {vectors.PARTS_BITS_TABLE}") == after
    assert _count(s, f"SELECT count(*) FROM {vectors.PARTS_TABLE} p LEFT JOIN chunks c ON c.rid = p.chunk"
                     " WHERE c.rid IS NULL") == 0
    # turning the setting off rebuilds in full and says why
    off = run_index(_settings(ws, chunking={"exchange_vectors": False}))
    assert off.full and "exchange_vectors" in off.full_reason
    assert _count(s, f"SELECT count(*) FROM {vectors.PARTS_TABLE}") == 0
