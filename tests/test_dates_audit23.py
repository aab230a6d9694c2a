"""The twenty-third session's second audit (a daily conversational user): a weekday asked without
"on" ("what did Kate say Tuesday?", "what did we discuss Wednesday evening?") or in its short form
("on Tues?") was no day at all, so the question's weekday was searched as a word memory never
writes and the answer was empty or another day's. Each test fails on the code before."""

from __future__ import annotations

from datetime import date
from pathlib import Path

import pytest

from memory_core.config import load_settings
from memory_core.index.pipeline import run_index
from memory_core.query.dates import query_date_range
from memory_core.query.search import Searcher
from tests.test_conversation_dates import _session  # (ISO UTC stamp, role, text) messages

MONDAY = date(2026, 11, 30)  # the question is asked on Monday 30 November (today: not the clock's)


@pytest.mark.parametrize(("query", "day"), [
    ("what did Kate say Tuesday?", date(2026, 11, 24)),
    ("what did we discuss Wednesday evening?", date(2026, 11, 25)),
    ("Friday?", date(2026, 11, 27)),
    ("what did I tell you Monday about the car?", date(2026, 11, 23)),
    ("notes from Tuesday's meeting", date(2026, 11, 24)),
    ("what did Kate say on Tues?", date(2026, 11, 24)),
    ("what did we do last fri", date(2026, 11, 27)),
    ("Kate's wedding on Sat", date(2026, 11, 28)),
])
def test_a_weekday_without_on_or_in_short_is_a_day(query: str, day: date) -> None:
    got = query_date_range(query, MONDAY)
    assert got is not None and (got.start, got.end) == (day, day), got


@pytest.mark.parametrize("query", [
    "Mondays are hard", "who sat next to Kate?", "the sat nav broke", "what did we talk about wed?",
    "Sun cream tips?", "c'mon, what was it?",
    # a weekday that names an event ("Friday drinks": maybe every week's, maybe one to come)
    "Which pub are we going to for Friday drinks?", "how was the Tuesday rehearsal",
])
def test_words_that_are_no_weekday_stay_none(query: str) -> None:
    assert query_date_range(query, MONDAY) is None


@pytest.mark.parametrize(("query", "start", "end"), [
    ("since Wed", date(2026, 11, 25), None),
    ("before Thurs", None, date(2026, 11, 25)),
    ("next Friday", date(2026, 12, 4), date(2026, 12, 4)),  # read as before: not a bare weekday
    ("on Sunday 7 January", date(2026, 1, 7), date(2026, 1, 7)),
])
def test_a_bare_or_short_weekday_keeps_the_range_words(query: str, start: date | None, end: date | None) -> None:
    got = query_date_range(query, MONDAY)
    assert got is not None
    if start is not None:
        assert got.start == start, got
    if end is not None:
        assert got.end == end, got


def ordinary_evenings(ws: Path, days: tuple[int, ...], words: str = "nothing much") -> None:
    """A transcript per day of November 2026, one exchange at 18:00 UTC about nothing in particular."""
    for day in days:
        _session(ws / "sessions" / f"d{day}.jsonl", [
            (f"2026-11-{day}T18:00:00Z", "user", f"Kate: ordinary evening number {day}, {words}."),
            (f"2026-11-{day}T18:01:00Z", "assistant", "Sounds quiet."),
        ])


def test_a_question_naming_a_weekday_without_on_finds_that_days_talk(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / "sessions").mkdir(parents=True)
    _session(ws / "sessions" / "tue.jsonl", [
        ("2026-11-24T18:00:00Z", "user", "Kate: I finally booked the flat viewing."),
        ("2026-11-24T18:01:00Z", "assistant", "Great news."),
    ])
    ordinary_evenings(ws, (23, 25, 26, 27, 28, 29))
    s = load_settings(None, {"workspace": str(ws), "provider": "none", "sources": ["sessions"]})
    run_index(s)
    with Searcher(s) as searcher:
        hits = searcher.search("what did Kate say Tuesday?", max_results=3)
    assert hits and hits[0].path == "sessions/tue.jsonl", [h.citation for h in hits]
