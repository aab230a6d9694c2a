"""A conversation named by its place in the memory's own timeline (issue 37): "our first
conversation" is the memory's oldest conversation day, "the last time we talked" its newest before
today, as a named day is (a ranking signal: that day's chunks first). Real index (SQLite, FTS5)."""

from __future__ import annotations

import json
import os
from datetime import date, datetime, timedelta
from pathlib import Path

import pytest

from memory_core.config import Settings, load_settings
from memory_core.index.pipeline import run_index
from memory_core.query.dates import DateRange, query_date_range
from memory_core.query.search import Searcher

TODAY = date(2026, 11, 28)
TIMELINE = [date(2026, 3, 2), date(2026, 3, 9), date(2026, 11, 28), date(2026, 3, 20)]


@pytest.mark.parametrize(
    ("query", "day", "phrase"),
    [
        ("Do you remember what we talked about during our first conversation?", date(2026, 3, 2),
         "our first conversation"),
        ("what did we discuss the first time we spoke", date(2026, 3, 2), "the first time we spoke"),
        ("when we first chatted, what was my job?", date(2026, 3, 2), "when we first chatted"),
        ("你还记得我们第一次对话的时候，聊了什么话题吗？", date(2026, 3, 2), "第一次对话"),
        # the newest before today: today's conversation is the one going on
        ("what did we say the last time we talked?", date(2026, 3, 20), "the last time we talked"),
        ("in our most recent chat, which film did I mention", date(2026, 3, 20), "our most recent chat"),
        ("上次聊天我说了什么", date(2026, 3, 20), "上次聊天"),
    ],
)
def test_a_conversation_named_by_its_place(query: str, day: date, phrase: str) -> None:
    got = query_date_range(query, TODAY, timeline=TIMELINE)
    assert got == DateRange(day, day) and got.phrase == phrase


@pytest.mark.parametrize("query", ["the first time I met Kate", "the first session of the workshop",
                                   "our first apartment", "last time I checked the boiler"])
def test_other_firsts_and_lasts_are_no_day(query: str) -> None:
    assert query_date_range(query, TODAY, timeline=TIMELINE) is None


def test_without_a_timeline_nothing_is_named() -> None:
    assert query_date_range("what did we talk about in our first conversation?", TODAY) is None
    assert query_date_range("our first conversation", TODAY, timeline=[]) is None
    # a memory whose only conversation is today's has no last one before it
    assert query_date_range("the last time we talked", TODAY, timeline=[TODAY]) is None


def _session(day: str, said: list[str]) -> str:
    recs: list[dict[str, object]] = [{"type": "session", "version": 3, "id": day, "timestamp": f"{day}T18:00:00.000Z"}]
    for n, text in enumerate(said):
        recs.append({"type": "message", "timestamp": f"{day}T18:{n + 1:02d}:00.000Z",
                     "message": {"role": "user" if n % 2 == 0 else "assistant",
                                 "content": [{"type": "text", "text": text}]}})
    return "\n".join(json.dumps(r) for r in recs) + "\n"


@pytest.fixture(scope="module")
def talks(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    ws = tmp_path_factory.mktemp("timeline") / "ws"
    (ws / "sessions").mkdir(parents=True)
    (ws / "MEMORY.md").write_text("# Memory\n\n- Prefers short answers.\n")
    # the files' names and write order say nothing of their days: the days come from the messages
    for name, day, said in (
        ("b.jsonl", "2026-03-20", ["Planning the hiking trip to the Dolomites in June.",
                                   "Pack a light rain jacket for the Dolomites."]),
        ("c.jsonl", "2026-03-02", ["I started learning the cello, my teacher is called Ines.",
                                   "The cello is a lovely instrument to start with."]),
        ("a.jsonl", "2026-03-09", ["The landlord finally fixed the boiler in the flat.",
                                   "Good, a warm flat makes a difference."]),
    ):
        (ws / "sessions" / name).write_text(_session(day, said))
    settings = load_settings(None, {"workspace": str(ws), "provider": "none", "sources": ["memory", "sessions"]})
    run_index(settings)
    return settings


def test_the_first_and_the_last_conversation_are_found_by_their_day(talks: Settings) -> None:
    with Searcher(talks) as s:
        first = s.search("Do you remember what we talked about during our first conversation?", max_results=3)
        assert first and first[0].path == "sessions/c.jsonl" and "cello" in first[0].snippet
        assert first[0].date and first[0].date.startswith("2026-03-02")
        zh = s.search("你还记得我们第一次对话的时候，聊了什么话题吗？", max_results=3)
        assert zh and zh[0].path == "sessions/c.jsonl"
        last = s.search("what did we talk about the last time we talked?", max_results=3)
        assert last and last[0].path == "sessions/b.jsonl" and "Dolomites" in last[0].snippet
        # the same words without the conversation's place find neither first
        plain = s.search("what did we talk about?", max_results=3, min_score=0)
        assert [h.path for h in plain][:1] != ["sessions/c.jsonl"] or not plain


def test_an_old_day_of_a_long_memory_is_found_by_its_day(tmp_path: Path) -> None:
    """70 daily transcripts, each last modified on its own day: a question whose only clue is its
    day finds the first day's chunks, though that transcript is not among the 64 most recently
    modified (which alone were read for their message times before)."""
    ws = tmp_path / "ws"
    (ws / "sessions").mkdir(parents=True)
    first = date(2025, 3, 2)
    for k in range(70):
        day = first + timedelta(days=k)
        f = ws / "sessions" / f"s{k:03d}.jsonl"
        f.write_text(_session(day.isoformat(), [f"{w} news about the garden, {v} again" for w, v in
                                                 (("good", "odd"), ("late", "quick"), ("slow", "sad"))]))
        t = datetime(day.year, day.month, day.day, 22, 0).timestamp()
        os.utime(f, (t, t))
    settings = load_settings(None, {"workspace": str(ws), "provider": "none", "sources": ["sessions"]})
    run_index(settings)
    with Searcher(settings) as s:
        for q in ("what did we talk about on 2 March 2025?", "what did we talk about in our first conversation?"):
            got = s.search(q, max_results=3)
            assert got and got[0].path == "sessions/s000.jsonl" and (got[0].date or "").startswith("2025-03-02"), q


def test_a_memory_copied_in_at_once_finds_its_days_by_when_each_transcript_began(tmp_path: Path) -> None:
    """140 transcripts under random names, every one modified the same second (copied in at once):
    their modification times say nothing, so the day a question names, and the memory's first
    conversation, come from when each transcript began (its first lines)."""
    import random

    ws = tmp_path / "ws"
    (ws / "sessions").mkdir(parents=True)
    first = date(2025, 3, 2)
    rng = random.Random(7)
    names = [f"{rng.getrandbits(64):016x}.jsonl" for _ in range(140)]
    same = datetime(2026, 11, 1, 12, 0).timestamp()
    for k, name in enumerate(names):
        day = first + timedelta(days=k)
        f = ws / "sessions" / name
        f.write_text(_session(day.isoformat(), [f"{w} news about the garden, {v} again" for w, v in
                                                 (("good", "odd"), ("late", "quick"), ("slow", "sad"))]))
        os.utime(f, (same, same))
    settings = load_settings(None, {"workspace": str(ws), "provider": "none", "sources": ["sessions"]})
    run_index(settings)
    with Searcher(settings) as s:
        for q, k in (("what did we talk about on 2 March 2025?", 0), ("what did we talk about on 9 April 2025?", 38),
                     ("what did we talk about in our first conversation?", 0)):
            got = s.search(q, max_results=3)
            want = (first + timedelta(days=k)).isoformat()
            assert got and got[0].path == f"sessions/{names[k]}" and (got[0].date or "").startswith(want), q
