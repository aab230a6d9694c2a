"""Exchange vectors: a transcript chunk is also embedded one exchange at a time (schema 4), an
exchange of more than 4 messages as overlapping windows of 4, and its vector relevance is its best
vector's. Real SQLite, the real local model."""

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
from tests.conftest import forget_meta_key, model_cosines

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


def test_an_exchange_of_more_than_four_messages_is_embedded_in_windows_of_four() -> None:
    """A group chat's one User line with many replies (or a burst of short messages) is one
    exchange: its parts are overlapping windows of 4 messages, 2 apart, the last ending at its
    last message; a message the chunker cut in pieces (lines without a role label) stays whole."""
    long_one = ["User: q", "Assistant: r0", "Assistant: r1 first half", "of r1", "Assistant: r2",
                "Assistant: r3", "Assistant: r4"]
    text = "\n".join(["User: short", "Assistant: answer", *long_one])
    assert exchange_parts(text) == [
        "User: short\nAssistant: answer",
        "User: q\nAssistant: r0\nAssistant: r1 first half\nof r1\nAssistant: r2",
        "Assistant: r1 first half\nof r1\nAssistant: r2\nAssistant: r3\nAssistant: r4",
    ]
    # one exchange of 7 messages in the whole chunk: 3 windows, every message in one
    seven = "\n".join(["User: q", *(f"Assistant: r{i}" for i in range(6))])
    parts = exchange_parts(seven)
    assert [p.split("\n")[0] for p in parts] == ["User: q", "Assistant: r1", "Assistant: r2"]
    assert all(len(p.split("\n")) == 4 for p in parts)
    # up to 4 messages an exchange is what it was
    four = "\n".join(["User: q", "Assistant: a", "Assistant: b", "Assistant: c"])
    assert exchange_parts(four) == [] and exchange_parts(four + "\nUser: next") == [four, "User: next"]


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


GROUP = ["Jorge: the rehearsal room smells of old beer again", "Siobhan: who has the setlist for Friday",
         "Kate: my manager is off so its quiet for once", "Muhammad: so much traffic on the ring road",
         "Anneliese: made pretzels, wonky but good", "Jorge: sold my old road bike on Saturday, the buyer paid 180 euros",
         "Siobhan: practice the outro please", "Kate: cant decide what to watch tonight",
         "Muhammad: running late sorry", "Anneliese: the tram was packed this morning"]


def test_a_group_chats_long_exchange_finds_its_message_through_a_window(tmp_path: Path) -> None:
    """One User line then ten replies on ten subjects: one exchange, which before had no vector but
    the chunk's blurred one. Its windows make the bike message findable: the chunk's cosine is the
    best of its windows', each computed here from the model itself."""
    import numpy as np

    recs = [{"type": "session", "version": 3, "id": "g", "timestamp": "2026-10-03T18:00:00.000Z"},
            {"type": "message", "timestamp": "2026-10-03T18:00:00.000Z",
             "message": {"role": "user", "content": [{"type": "text", "text": "Ben: anyone around tonight?"}]}}]
    for n, text in enumerate(GROUP, 1):
        recs.append({"type": "message", "timestamp": f"2026-10-03T18:{n:02d}:00.000Z",
                     "message": {"role": "assistant", "content": [{"type": "text", "text": text}]}})
    ws = tmp_path / "ws"
    (ws / "sessions").mkdir(parents=True)
    (ws / "sessions" / "group.jsonl").write_text("\n".join(json.dumps(r) for r in recs) + "\n")
    on, off = _settings(ws), _settings(tmp_path / "off", chunking={"exchange_vectors": False})
    (tmp_path / "off").mkdir()
    (tmp_path / "off" / "sessions").mkdir()
    (tmp_path / "off" / "sessions" / "group.jsonl").write_text((ws / "sessions" / "group.jsonl").read_text())
    run_index(on)
    run_index(off)
    assert _count(on, "SELECT count(*) FROM chunks") == 1  # the whole chat is one chunk, one exchange
    with Searcher(on) as a, Searcher(off) as b:
        (text,) = [r[0] for r in a._current().conn.execute("SELECT text FROM chunks")]
        msgs = text.split("\n")
        assert len(msgs) == 11 and msgs[0].startswith("User: Ben")
        windows = ["\n".join(msgs[i:i + 4]) for i in (0, 2, 4, 6, 7)]
        assert exchange_parts(text) == windows
        cos = model_cosines(on, QUERY, windows)
        best = int(np.argmax(cos))
        assert "road bike" in windows[best]
        with_parts = a.search(QUERY, mode="vector", min_score=0)[0]
        without = b.search(QUERY, mode="vector", min_score=0)[0]
        assert with_parts.vector_score == pytest.approx(float(cos[best]), abs=1e-4)
        assert with_parts.vector_score > without.vector_score + 0.1


def test_an_index_of_exchanges_alone_is_rebuilt_once_with_windows_and_says_why(tmp_path: Path) -> None:
    """An index built before windows (its meta has no ``exchange_parts``) holds other part vectors
    than this code makes: the next run rebuilds it in full, says why, and records the version."""
    ws = _workspace(tmp_path / "ws")
    s = _settings(ws)
    run_index(s)
    assert forget_meta_key(s.index_file, "exchange_parts") == 2
    again = run_index(s)
    assert again.full and "windows of 4" in again.full_reason
    assert not run_index(s).full  # recorded: the run after is incremental
    # a notes-only index records nothing for it, so it is never rebuilt for it
    notes = _settings(ws, sources=["memory"])
    run_index(notes)
    assert not run_index(notes).full


def test_a_sessions_support_keeps_its_chunks_best_exchange(indexes: tuple[Settings, Settings]) -> None:
    """A session's relevance as a whole (``query.file_support``) counts each transcript chunk by
    its best exchange, as the vector side found it: an exchange is a unit of the conversation, and
    a chunk of unrelated chat counted as a whole hides the one exchange that answers (here 0.16
    against 0.67). A note's chunk counts as a whole (tests/test_file_support.py)."""
    on, _ = indexes
    with Searcher(on) as s:
        cands = s.retrieve(QUERY, 24)
    found = max(h.vector_score for h in cands.union if h.path == "sessions/chat.jsonl")
    assert cands.file_cosines["sessions/chat.jsonl"][0] == pytest.approx(found, abs=1e-5)
