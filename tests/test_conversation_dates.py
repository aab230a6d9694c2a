"""Issue 37: dates in conversations are first-class.

Day forms in any common order, ranges, year-less and relative days against the memory's own
timeline (not today's clock), and a named day as a ranking signal over transcripts and notes
(the answer stamped the day after the named day still wins; chunks that match the words win over
chunks that match only on their date). A memory of January 2024, far from today's date, so a
day resolved against today's clock lands on nothing.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from memory_core.config import Settings, load_settings
from memory_core.index.pipeline import run_index
from memory_core.query.dates import (
    DateRange,
    _note_clock,
    conversation_days,
    looks_ahead,
    memory_has_days,
    mentions,
    nearness,
    query_date_range,
)
from memory_core.query.search import Searcher
from memory_core.storage.indexmeta import MESSAGE_DAYS_VERSION

REF = date(2024, 1, 20)  # a Saturday


def _one_message_session(ws: Path, name: str, ts: object, text: str) -> None:
    """``sessions/<name>.jsonl`` in ``ws``: one user message, it and its session stamped ``ts``."""
    lines = [{"type": "session", "version": 3, "id": name, "timestamp": ts},
             {"type": "message", "id": name + "-1", "timestamp": ts,
              "message": {"role": "user", "content": [{"type": "text", "text": text}]}}]
    (ws / "sessions" / f"{name}.jsonl").write_text("\n".join(json.dumps(r) for r in lines) + "\n")


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        # numeric, day first, with "." "/" "-"; with and without the year
        ("what did we plan on 17.01.2024?", date(2024, 1, 17)),
        ("what did we plan on 17.01.24?", date(2024, 1, 17)),
        ("what did we plan on 17.01.?", date(2024, 1, 17)),
        ("what did we plan on 17.01?", date(2024, 1, 17)),
        ("what did we plan on 17/01/24?", date(2024, 1, 17)),
        ("what did we plan on 17/01?", date(2024, 1, 17)),
        ("what did we plan on 17-01-2024?", date(2024, 1, 17)),
        # month first when the day (> 12) proves it
        ("what did we plan on 1/17?", date(2024, 1, 17)),
        ("what did we plan on 01/17/2024?", date(2024, 1, 17)),
        ("what did we plan on 01-17-2024?", date(2024, 1, 17)),
        # year first
        ("what did we plan on 2024-01-17?", date(2024, 1, 17)),
        ("what did we plan on 2024/01/17?", date(2024, 1, 17)),
        ("what did we plan on 2024.01.17?", date(2024, 1, 17)),
        # written months
        ("what did we plan on Jan 17th?", date(2024, 1, 17)),
        ("what did we plan on Jan. 17?", date(2024, 1, 17)),
        ("what did we plan on 17 January?", date(2024, 1, 17)),
        ("what did we plan on the 17th of January?", date(2024, 1, 17)),
        ("what did we plan on January 17, 2024?", date(2024, 1, 17)),
        ("what did we plan on January the 17th?", date(2024, 1, 17)),
        # ambiguous: the setting's order (default day first)
        ("what did we plan on 05/01?", date(2024, 1, 5)),
        ("what did we plan on 05.01.2024?", date(2024, 1, 5)),
        # a day of the month alone: the latest such day
        ("what did we plan on the 17th?", date(2024, 1, 17)),
        # a year-less day after the reference day is last year's
        ("what did we plan on 25 December?", date(2023, 12, 25)),
        ("what did we plan on 12/25?", date(2023, 12, 25)),
    ],
)
def test_day_forms(query: str, expected: date) -> None:
    got = query_date_range(query, REF)
    assert got is not None and (got.start, got.end) == (expected, expected), got
    assert not any(ch.isdigit() for ch in got.strip(query)), got.strip(query)  # the day's words are gone


def test_a_day_of_the_month_alone_looks_back_and_skips_short_months() -> None:
    assert query_date_range("what happened after the 15th?", REF) == DateRange(date(2024, 1, 16), date(9999, 12, 30))
    assert query_date_range("how did it go on the 25th?", REF) == DateRange(date(2023, 12, 25), date(2023, 12, 25))
    assert query_date_range("on the 31st", date(2024, 5, 10)) == DateRange(date(2024, 3, 31), date(2024, 3, 31))
    assert query_date_range("the 4th of December", REF) == DateRange(date(2023, 12, 4), date(2023, 12, 4))
    for not_a_day in ("for the 3rd time", "on the 2nd floor", "the 19th century", "the 45th"):
        assert query_date_range(not_a_day, REF) is None, not_a_day


def test_a_question_about_plans_reads_a_yearless_day_as_the_coming_one() -> None:
    """Asked of a memory ending 20 January, "what happens on Feb 1st?" names the coming 1 February
    (conversations plan the weeks ahead), "what did we decide on 1 February?" the past one; a day
    more than QUERY_AHEAD_DAYS ahead is last year's either way."""
    coming = DateRange(date(2024, 2, 1), date(2024, 2, 1))
    assert query_date_range("What happens on Feb 1st?", REF) == coming
    assert query_date_range("what is due on 01/02?", REF) == coming
    assert query_date_range("what did we decide on 1 February?", REF) == DateRange(date(2023, 2, 1), date(2023, 2, 1))
    assert query_date_range("what happens on 1 March?", REF) == DateRange(date(2023, 3, 1), date(2023, 3, 1))
    assert looks_ahead("what is planned for Friday") and not looks_ahead("what did Kate say on 14 February")
    assert looks_ahead("what do I need for 1 February") and not looks_ahead("what we decided on 1 February")


def test_the_date_order_setting_reads_ambiguous_days() -> None:
    assert query_date_range("on 05/01", REF, date_order="mdy") == DateRange(date(2023, 5, 1), date(2023, 5, 1))
    assert query_date_range("on 05/01/2024", REF, date_order="mdy") == DateRange(date(2024, 5, 1), date(2024, 5, 1))
    # proven orders and dotted days do not depend on it
    assert query_date_range("on 17/01", REF, date_order="mdy") == DateRange(date(2024, 1, 17), date(2024, 1, 17))
    assert query_date_range("on 1/17", REF, date_order="dmy") == DateRange(date(2024, 1, 17), date(2024, 1, 17))
    assert query_date_range("on 05.01.", REF, date_order="mdy") == DateRange(date(2024, 1, 5), date(2024, 1, 5))


def test_a_question_reads_its_ambiguous_days_in_the_order_its_other_days_prove() -> None:
    """1/20 can only be 20 January: so 1/10 beside it is 10 January, whatever the setting."""
    assert query_date_range("between 1/10 and 1/20", REF) == DateRange(date(2024, 1, 10), date(2024, 1, 20))
    assert query_date_range("between 3/1 and 20/1", REF, date_order="mdy") == DateRange(date(2024, 1, 3),
                                                                                     date(2024, 1, 20))
    # a number range is no day and proves nothing ("12-25 people"); a day with its year does
    assert query_date_range("we had 12-25 people on 05/01", REF) == DateRange(date(2024, 1, 5), date(2024, 1, 5))
    assert query_date_range("on 05/01 and 01-17-2024", REF) == DateRange(date(2023, 5, 1), date(2023, 5, 1))
    # two proofs that disagree prove nothing: the setting reads the ambiguous one
    assert query_date_range("on 05/01 (not 1/17 or 17/1)", REF) == DateRange(date(2024, 1, 5), date(2024, 1, 5))


def test_an_ambiguous_day_reads_as_the_memorys_timeline_holds_it() -> None:
    """01/07 in a memory of January 2024 is 7 January, not 1 July 2023, in either setting; where both
    readings (or neither) fall near the memory's days, the setting decides."""
    january = [date(2024, 1, d) for d in range(3, 20)]
    july = [date(2023, 7, d) for d in range(1, 5)]
    for order in ("dmy", "mdy"):
        assert query_date_range("what happened on 1/7?", REF, date_order=order,
                                timeline=january) == DateRange(date(2024, 1, 7), date(2024, 1, 7))
        assert query_date_range("what happened on 7/1?", REF, date_order=order,
                                timeline=january) == DateRange(date(2024, 1, 7), date(2024, 1, 7))
        assert query_date_range("what happened on 01/07/2024?", REF, date_order=order,
                                timeline=january) == DateRange(date(2024, 1, 7), date(2024, 1, 7))
    assert query_date_range("what happened on 1/7?", REF, timeline=july) == DateRange(date(2023, 7, 1), date(2023, 7, 1))
    assert query_date_range("what happened on 1/7?", REF, timeline=[*july, *january]) == DateRange(date(2023, 7, 1),
                                                                                                date(2023, 7, 1))
    assert query_date_range("what happened on 1/7?", REF, timeline=[]) == DateRange(date(2023, 7, 1), date(2023, 7, 1))
    assert query_date_range("what happened on 1/7?", REF, date_order="mdy") == DateRange(date(2024, 1, 7), date(2024, 1, 7))
    # a fraction is still no day; after a day's word it is one
    assert query_date_range("add 1/2 cup", REF, timeline=january) is None
    assert query_date_range("before 1/7", REF, timeline=january) == DateRange(date(1, 1, 2), date(2024, 1, 6))
    assert query_date_range("between 3/1 and 5/1", REF, timeline=january) == DateRange(date(2024, 1, 3),
                                                                                    date(2024, 1, 5))


@pytest.mark.parametrize("query", ["add 1/2 cup of flour", "3-4 people came", "ran 12.5 km", "took 1.5 hours",
                                   "v1.2.3 is out", "meet at 10.30", "before we left", "I told you before",
                                   "score was 3/4", "3/4 of the team came", "cut the budget to 1/2",
                                   "rent went up by 1/3", "31/02/2024", "13/13",
                                   # fourteenth session: an idiom and ordinals of other things
                                   "a 24/7 support line", "we are open 24/7", "the 3rd option was best",
                                   "my favourite is the 2nd song", "the 5th floor flat", "the 1st draft of the essay"])
def test_numbers_that_are_not_days(query: str) -> None:
    assert query_date_range(query, REF) is None


@pytest.mark.parametrize(
    ("query", "start", "end"),
    [
        ("what did we talk about this month?", date(2024, 1, 1), date(2024, 1, 20)),
        ("what did we do in December?", date(2023, 12, 1), date(2023, 12, 31)),
        ("what happened during the month of November?", date(2023, 11, 1), date(2023, 11, 30)),
        ("what did I say in early March 2022?", date(2022, 3, 1), date(2022, 3, 31)),
        ("anything from February 2023?", date(2023, 2, 1), date(2023, 2, 28)),
        ("what are we doing in February?", date(2024, 2, 1), date(2024, 2, 29)),  # a plan: the coming one
        ("what did we decide in February?", date(2023, 2, 1), date(2023, 2, 28)),  # the past one
        ("the 4th of May", date(2023, 5, 4), date(2023, 5, 4)),  # a day of it stays a day
    ],
)
def test_months(query: str, start: date, end: date) -> None:
    got = query_date_range(query, REF)
    assert got is not None and (got.start, got.end) == (start, end), got


def test_a_month_named_whole_is_still_searched_as_a_word() -> None:
    """A plan made in January names February in its text: the month's name stays a query word (a
    day's words do not: its numbers would match every number)."""
    q = "What is everyone doing in February?"
    assert query_date_range(q, REF).strip(q) == "What is everyone doing february ?"
    assert query_date_range(q, REF).strip(q, keep=False) == "What is everyone doing ?"
    q = "what did we do on 4 February?"
    assert query_date_range(q, REF).strip(q) == "what did we do on ?"
    q = "what did we talk about this month?"
    assert query_date_range(q, REF).strip(q) == "what did we talk about ?"


@pytest.mark.parametrize(
    ("query", "start", "end"),
    [  # REF is Saturday 20 January 2024
        ("what did Kate do last weekend?", date(2024, 1, 13), date(2024, 1, 14)),
        ("what are we doing this weekend?", date(2024, 1, 20), date(2024, 1, 21)),
        ("what did I say last night?", date(2024, 1, 19), date(2024, 1, 19)),
        ("what did we discuss this morning?", date(2024, 1, 20), date(2024, 1, 20)),
        ("what did we talk about two days ago?", date(2024, 1, 18), date(2024, 1, 18)),
        ("what did I say two weeks ago?", date(2024, 1, 3), date(2024, 1, 9)),
        ("anything from the past 3 days?", date(2024, 1, 17), date(2024, 1, 20)),
        ("what came up over the last two weeks?", date(2024, 1, 6), date(2024, 1, 20)),
        ("what's happening tomorrow?", date(2024, 1, 21), date(2024, 1, 21)),
        ("what is planned for the day after tomorrow?", date(2024, 1, 22), date(2024, 1, 22)),
        ("what are we doing next week?", date(2024, 1, 22), date(2024, 1, 28)),
        ("what's on next Tuesday?", date(2024, 1, 23), date(2024, 1, 23)),
        ("what did we do last year?", date(2023, 1, 1), date(2023, 12, 31)),
        ("what happened in 2022?", date(2022, 1, 1), date(2022, 12, 31)),
    ],
)
def test_relative_days_and_spans(query: str, start: date, end: date) -> None:
    got = query_date_range(query, REF)
    assert got is not None and (got.start, got.end) == (start, end), got


@pytest.mark.parametrize("query", ["last year", "in 9 days", "next week", "tomorrow", "two weeks ago", "this weekend"])
def test_relative_days_at_the_calendars_edge_name_nothing_or_a_day(query: str) -> None:
    for today in (date(1, 1, 3), date(9999, 12, 29)):
        got = query_date_range(query, today)  # never raises
        assert got is None or got.start <= got.end


def test_the_weekend_on_a_weekday() -> None:
    monday = date(2024, 1, 22)
    assert (query_date_range("what did we do last weekend?", monday).start,
            query_date_range("what did we do this weekend?", monday).start,
            query_date_range("what are we doing this weekend?", monday).start) == (
        date(2024, 1, 20), date(2024, 1, 20), date(2024, 1, 27))


@pytest.mark.parametrize("query", ["what did we get done over the weekend?", "the weekend after her birthday",
                                   "a few days ago I mentioned the park", "a couple of days ago"])
def test_some_weekend_or_some_days_are_no_day(query: str) -> None:
    assert query_date_range(query, REF) is None


@pytest.mark.parametrize("query", ["the march in London", "we may go", "what is the month of the year", "I marched",
                                   "the night shift", "good morning", "ran in 1990s style", "a few weeks of rain"])
def test_words_that_are_not_months(query: str) -> None:
    assert query_date_range(query, REF) is None


@pytest.mark.parametrize(
    ("query", "start", "end"),
    [
        ("what happened before 17 January?", None, date(2024, 1, 16)),
        ("what happened until 17.01.?", None, date(2024, 1, 17)),
        ("what happened after 17 January?", date(2024, 1, 18), None),
        ("what happened since Jan 17th?", date(2024, 1, 17), None),
        ("what happened between 10 January and 17 January?", date(2024, 1, 10), date(2024, 1, 17)),
        ("what happened between 17/01 and 10/01?", date(2024, 1, 10), date(2024, 1, 17)),
        ("what happened from 28 December to 3 January?", date(2023, 12, 28), date(2024, 1, 3)),
        ("what happened from 2024-01-10 to 2024-01-12?", date(2024, 1, 10), date(2024, 1, 12)),
        # the month written once, after both days or before them
        ("what happened between 12 and 16 January?", date(2024, 1, 12), date(2024, 1, 16)),
        ("what happened from the 12th to the 16th of January?", date(2024, 1, 12), date(2024, 1, 16)),
        ("what happened 12-16 Jan 2023?", date(2023, 1, 12), date(2023, 1, 16)),
        ("what happened January 12–16?", date(2024, 1, 12), date(2024, 1, 16)),
        ("what happened between Jan 12th and 16th?", date(2024, 1, 12), date(2024, 1, 16)),
        ("what happened 28-31 December?", date(2023, 12, 28), date(2023, 12, 31)),
        # two days of one month: the span holding both, not the latest 12th of another month
        ("what did we do on the 12th and 16th of December?", date(2023, 12, 12), date(2023, 12, 16)),
    ],
)
def test_ranges(query: str, start: date | None, end: date | None) -> None:
    got = query_date_range(query, REF)
    assert got is not None
    assert (start is None and got.is_open() and got.start < date(1000, 1, 1)) or got.start == start, got
    assert (end is None and got.is_open() and got.end > date(9000, 1, 1)) or got.end == end, got
    assert "before" not in got.strip(query) and "since" not in got.strip(query)


def test_relative_days_resolve_against_the_memorys_timeline_not_today() -> None:
    newest = date(2024, 1, 19)  # the memory's newest day (a Friday); today is years later
    today = date(2026, 11, 28)
    calls = []

    def anchor() -> date:
        calls.append(1)
        return newest

    # the question is taken as asked the day after the last conversation
    assert query_date_range("what did we do yesterday?", today, anchor=anchor) == DateRange(newest, newest)
    assert query_date_range("what did we do on Friday?", today, anchor=anchor) == DateRange(newest, newest)
    assert query_date_range("what did we do on Wednesday?", today,
                            anchor=anchor) == DateRange(date(2024, 1, 17), date(2024, 1, 17))
    assert query_date_range("what did we do last week?", today,
                            anchor=anchor) == DateRange(date(2024, 1, 13), date(2024, 1, 19))
    assert query_date_range("what did we do on 17 March?", today,
                            anchor=anchor) == DateRange(date(2023, 3, 17), date(2023, 3, 17))
    # a live memory (its newest day is today) keeps today's clock
    assert query_date_range("yesterday", today, anchor=today) == DateRange(date(2026, 11, 27), date(2026, 11, 27))
    # no anchor (an empty memory): today's clock
    assert query_date_range("yesterday", today, anchor=lambda: None) == DateRange(date(2026, 11, 27),
                                                                                 date(2026, 11, 27))
    # the anchor is read only when a day needs it (it reads transcripts)
    calls.clear()
    assert query_date_range("what did we do on 2024-01-17?", today, anchor=anchor) is not None
    assert query_date_range("the boiler pressure", today, anchor=anchor) is None
    assert not calls


def test_nearness() -> None:
    day = DateRange(date(2024, 1, 17), date(2024, 1, 17), tolerance=6)
    assert nearness([datetime(2024, 1, 17, 23, 59)], day) == 1.0
    assert nearness([datetime(2024, 1, 18, 0, 30)], day) == pytest.approx(1 - 0.5 / 6)  # a message past midnight
    assert nearness([datetime(2024, 1, 18, 5, 0)], day) == pytest.approx(1 / 6)
    assert nearness([datetime(2024, 1, 18, 19, 0)], day) == 0.0  # the next evening: another conversation
    assert nearness([datetime(2024, 1, 16, 23, 0)], day) == 0.0  # before the day: not lifted
    assert nearness([date(2024, 1, 18)], day) == 0.0  # a daily note's day is its name
    assert nearness([datetime(2024, 1, 16, 23, 50), datetime(2024, 1, 17, 0, 10)], day) == 1.0  # across midnight
    assert nearness([datetime(2024, 1, 18, 0, 30)], DateRange(day.start, day.end)) == 0.0  # no tolerance


# ------------------------------------------------------------------------------------------------
# Search over a memory of January 2024: transcripts and daily notes
# ------------------------------------------------------------------------------------------------
def _session(path: Path, messages: list[tuple[str, str, str]]) -> None:
    """messages: (ISO UTC timestamp, role, text)."""
    first = messages[0][0]
    lines = [json.dumps({"type": "session", "version": 3, "id": path.stem, "timestamp": first})]
    for i, (ts, role, text) in enumerate(messages):
        lines.append(json.dumps({"type": "message", "id": f"{path.stem}-{i}", "timestamp": ts,
                                 "message": {"role": role, "content": [{"type": "text", "text": text}]}}))
    path.write_text("\n".join(lines) + "\n")


FILLER = {
    "15": ("the garden", "We talked about pruning the apple tree and the compost heap."),
    "16": ("a film", "We watched an old western and argued about the ending."),
    "17": ("the bakery", "The sourdough starter finally doubled overnight, bread on Sunday."),
    "18": ("running", "Ran ten kilometres along the river, knee felt fine."),
    "19": ("the budget", "Moved the savings into the fixed deposit account."),
}


def _filler_days(ws: Path) -> None:
    """One session a day, 15-19 January 2024, each about its FILLER topic."""
    for d, (topic, text) in FILLER.items():
        _session(ws / "sessions" / f"day-{d}.jsonl", [
            (f"2024-01-{d}T18:00:00Z", "user", f"Let me tell you about {topic}. {text}"),
            (f"2024-01-{d}T18:01:00Z", "assistant", f"Thanks for telling me about {topic}."),
        ])


def _filler_and(tmp_path: Path, sessions: dict[str, list[tuple[str, str, str]]]) -> Settings:
    """A keyword-only memory of :func:`_filler_days` and these sessions (name -> messages), indexed."""
    ws = tmp_path / "ws"
    (ws / "sessions").mkdir(parents=True)
    _filler_days(ws)
    for name, messages in sessions.items():
        _session(ws / "sessions" / f"{name}.jsonl", messages)
    s = load_settings(None, {"workspace": str(ws), "provider": "none", "sources": ["sessions"]})
    run_index(s)
    return s


@pytest.fixture(scope="module")
def january(tmp_path_factory: pytest.TempPathFactory):
    ws = tmp_path_factory.mktemp("january") / "ws"
    (ws / "sessions").mkdir(parents=True)
    (ws / "memory").mkdir()
    _filler_days(ws)
    # the answer to a question about the 17th, sent just past midnight: stamped the 18th
    _session(ws / "sessions" / "late-17.jsonl", [
        ("2024-01-18T00:40:00Z", "user", "The plumber finally came about the boiler: the pressure valve is "
                                         "broken and the boiler needs a new expansion vessel."),
        ("2024-01-18T00:41:00Z", "assistant", "So the boiler repair means a new expansion vessel."),
    ])
    # the 17th's own second session, on something else
    _session(ws / "sessions" / "day-17b.jsonl", [
        ("2024-01-17T20:00:00Z", "user", "Called my aunt, nobody answered."),
        ("2024-01-17T20:01:00Z", "assistant", "Try again tomorrow."),
    ])
    # a topic spoken of before the 17th and after it
    _session(ws / "sessions" / "kayak-a.jsonl", [
        ("2024-01-12T10:00:00Z", "user", "Booked the kayak course at the lake for the spring."),
        ("2024-01-12T10:01:00Z", "assistant", "A kayak course sounds fun."),
    ])
    _session(ws / "sessions" / "kayak-b.jsonl", [
        ("2024-01-19T10:00:00Z", "user", "Cancelled the kayak course, the lake is frozen."),
        ("2024-01-19T10:01:00Z", "assistant", "A pity about the kayak course."),
    ])
    (ws / "memory" / "2024-01-16.md").write_text("# 2024-01-16\n\n- Lunch with Ottilie, she moves to Lisbon.\n")
    (ws / "memory" / "2024-01-10.md").write_text("# 2024-01-10\n\n- Dentist appointment, all fine.\n")
    s = load_settings(None, {"workspace": str(ws), "provider": "none", "sources": ["memory", "sessions"]})
    run_index(s)
    return s


@pytest.mark.parametrize("form", ["17.01.2024", "17.01.", "17/01/24", "1/17", "2024-01-17", "Jan 17th",
                                  "17 January", "January 17, 2024", "Wednesday"])
def test_each_day_form_finds_that_days_transcript(january, form: str) -> None:
    """A question whose other words are generic is answered by its day, whatever the day's form,
    a year-less one against the memory's timeline (January 2024), not today's."""
    with Searcher(january) as s:
        hits = s.search(f"what did I tell you on {form}?", max_results=3)
    assert hits and hits[0].path in ("sessions/day-17.jsonl", "sessions/day-17b.jsonl"), [h.citation for h in hits]
    assert {h.path for h in hits[:2]} == {"sessions/day-17.jsonl", "sessions/day-17b.jsonl"}


def test_whether_memory_has_days_in_a_range_agrees_with_its_list_of_days(january) -> None:
    """memory_has_days (two index seeks: what an ambiguous day asks) says what conversation_days
    (every day listed) says, for daily notes and transcripts alike."""
    with Searcher(january) as s:
        conn = s._current().conn
        days = conversation_days(conn)
        assert date(2024, 1, 10) in days and date(2024, 1, 12) in days  # a daily note, a transcript
        for lo in (date(2023, 12, 1) + timedelta(days=k) for k in range(0, 60, 2)):
            for width in (0, 1, 3):
                hi = lo + timedelta(days=width)
                assert memory_has_days(conn, lo, hi) == any(lo <= d <= hi for d in days), (lo, hi)


def test_an_ambiguous_day_is_read_as_the_memorys_timeline_holds_it(january) -> None:
    """1/12 with the default day-first order is 1 December 2023, when nothing was written: the memory
    (January 2024) holds 12 January, so that is the day asked about (before: ranked as naming no day)."""
    with Searcher(january) as s:
        assert s.settings.query.date_order == "dmy"
        hits = s.search("what did I tell you on 1/12?", max_results=3)
        assert hits and hits[0].path == "sessions/kayak-a.jsonl", [h.citation for h in hits]
        notes = s.search("what did I write on 1/10?", max_results=3, sources=["memory"])
        assert notes and notes[0].path == "memory/2024-01-10.md", [h.citation for h in notes]


@pytest.mark.parametrize("form", ["16.01.2024", "16/01", "1/16", "2024-01-16", "Jan 16th", "16 January",
                                  "Tuesday"])
def test_each_day_form_finds_that_days_note(january, form: str) -> None:
    with Searcher(january) as s:
        hits = s.search(f"what did I write on {form}?", max_results=3, sources=["memory"])
    assert hits and hits[0].path == "memory/2024-01-16.md", [h.citation for h in hits]


def test_the_answer_stamped_the_day_after_wins_over_the_days_date_only_chunks(january) -> None:
    """The answer was sent past midnight (stamped the 18th): it matches the words and lies within
    the tolerance, so it ranks above the 17th's own chunks, which match only on their date.
    Before: the 17th's chunks were lifted to 0.5 and every other chunk capped, the answer at 0.28."""
    with Searcher(january) as s:
        hits = s.search("what did the plumber say about the boiler on 17 January?")
    assert hits and hits[0].path == "sessions/late-17.jsonl", [(h.citation, h.score) for h in hits]
    assert hits[0].match != "date"
    # without tolerance the named day's chunks come first again (the setting is honoured)
    strict = january.model_copy(update={"query": january.query.model_copy(update={"day_tolerance_hours": 0})})
    with Searcher(strict) as s:
        hits = s.search("what did the plumber say about the boiler on 17 January?")
    assert hits and hits[0].path in ("sessions/day-17.jsonl", "sessions/day-17b.jsonl"), [h.citation for h in hits]


@pytest.mark.parametrize(("query", "want", "other"), [
    ("what about the kayak course before 17 January?", "sessions/kayak-a.jsonl", "sessions/kayak-b.jsonl"),
    ("what about the kayak course after 17 January?", "sessions/kayak-b.jsonl", "sessions/kayak-a.jsonl"),
    ("what about the kayak course since 17.01.?", "sessions/kayak-b.jsonl", "sessions/kayak-a.jsonl"),
    ("what about the kayak course between 10/01 and 14/01?", "sessions/kayak-a.jsonl", "sessions/kayak-b.jsonl"),
    ("what about the kayak course between 10 and 14 January?", "sessions/kayak-a.jsonl", "sessions/kayak-b.jsonl"),
])
def test_ranges_rank_the_range_first_and_keep_the_rest(january, query: str, want: str, other: str) -> None:
    with Searcher(january) as s:
        paths = [h.path for h in s.search(query)]
    assert paths and paths[0] == want, paths
    assert other in paths  # a ranking signal, not a filter


def test_a_plan_and_a_day_of_the_month_are_found_over_transcripts(tmp_path: Path) -> None:
    """A memory ending 19 January 2024. "What happens on Feb 1st?" finds the session that names the
    coming 2024-02-01 in its text (before: read as 1 February 2023, a day no chunk names or was
    written on, so nothing was lifted); "the 13th" is the 13th's session (before: not read as a day)."""
    s = _filler_and(tmp_path, {
        "plans": [("2024-01-12T09:00:00Z", "user", "Signed the lease, moving in on 2024-02-01."),
                  ("2024-01-12T09:01:00Z", "assistant", "Congratulations on the new flat.")],
        "day-13": [("2024-01-13T19:00:00Z", "user", "Scored twice at five-a-side tonight."),
                   ("2024-01-13T19:01:00Z", "assistant", "Nice one.")],
    })
    with Searcher(s) as searcher:
        hits = searcher.search("What happens on Feb 1st?", max_results=3)
        assert hits and hits[0].path == "sessions/plans.jsonl", [h.citation for h in hits]
        hits = searcher.search("what did I tell you on the 13th?", max_results=3)
        assert hits and hits[0].path == "sessions/day-13.jsonl", [h.citation for h in hits]


def test_a_plan_said_the_day_before_counts_for_the_day_it_names(tmp_path: Path) -> None:
    """"The piano tuner comes tomorrow" written on the 16th is about the 17th: a question naming the
    17th finds it beside the 17th's own session (before: only a chunk written on or after the day
    was read for its relative words, so the day before's plan was another day's)."""
    assert mentions("see you tomorrow at the garage", date(2024, 1, 16), DateRange(date(2024, 1, 17), date(2024, 1, 17)))
    assert not mentions("see you tomorrow", date(2024, 1, 15), DateRange(date(2024, 1, 17), date(2024, 1, 17)))
    assert not mentions("we went on saturday", date(2024, 1, 14), DateRange(date(2024, 1, 17), date(2024, 1, 17)))
    s = _filler_and(tmp_path, {
        "tuner": [("2024-01-16T21:00:00Z", "user", "The piano tuner comes tomorrow morning, I have to stay home."),
                  ("2024-01-16T21:01:00Z", "assistant", "Good, the piano needed it.")],
        # another day's piano, which matches the question's word better
        "lesson": [("2024-01-12T18:00:00Z", "user", "Piano lesson today: my piano teacher liked the scales."),
                   ("2024-01-12T18:01:00Z", "assistant", "Practice pays off on the piano.")],
    })
    with Searcher(s) as searcher:
        hits = searcher.search("what about the piano on 17 January?", max_results=3)
        assert hits and hits[0].path == "sessions/tuner.jsonl", [(h.citation, h.score) for h in hits]
        assert hits[0].score > 0.5 >= max(h.score for h in hits if h.path == "sessions/lesson.jsonl")


def test_a_weekday_resolves_against_the_memorys_timeline(january) -> None:
    """"on Friday": the memory's newest day is Friday 19 January 2024 (the kayak session): the
    question is taken as asked the day after, so Friday is the 19th, not a Friday before today."""
    with Searcher(january) as s:
        hits = s.search("what did I say on Friday?", max_results=3)
        assert hits and hits[0].date is not None and hits[0].date.startswith("2024-01-19"), [h.citation for h in hits]
        hits = s.search("what did I say yesterday?", max_results=3)
        assert hits and hits[0].date is not None and hits[0].date.startswith("2024-01-19"), [h.citation for h in hits]


def test_a_named_day_with_nothing_matching_returns_nothing(january) -> None:
    """A day with no conversation, next to days that have one: their chunks that do not match
    the words are not lifted (the tolerance is for answers, not for filler)."""
    with Searcher(january) as s:
        assert s.search("what did the accountant say about taxes on 14 January?") == []


def test_a_transcript_chunk_across_midnight_carries_both_days(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / "sessions").mkdir(parents=True)
    _session(ws / "sessions" / "s.jsonl", [
        ("2024-03-01T23:50:00Z", "user", "Still awake, thinking about the move."),
        ("2024-03-02T00:10:00Z", "user", "Decided: the piano goes to my cousin Malte."),
    ])
    s = load_settings(None, {"workspace": str(ws), "provider": "none", "sources": ["sessions"]})
    run_index(s)
    strict = s.model_copy(update={"query": s.query.model_copy(update={"day_tolerance_hours": 0})})
    with Searcher(strict) as searcher:
        hits = searcher.search("what did I decide about the piano on 2 March 2024?")
    # its first message is of the 1st; its answer of the 2nd, which it is lifted for (before: dated by
    # its first message only, so capped at 0.5 as another day's chunk)
    assert hits and hits[0].path == "sessions/s.jsonl" and hits[0].score > 0.5, hits


def test_a_chunk_that_names_the_day_in_its_text_counts_as_that_days(tmp_path: Path) -> None:
    """Real chats write days in their text ("see you on 17.01", "yesterday"): a chunk that names
    the day is found for it (through the FTS index, verified by the same parser) and lifted, though
    it was written on another day."""
    ws = tmp_path / "ws"
    (ws / "sessions").mkdir(parents=True)
    _session(ws / "sessions" / "plan.jsonl", [
        ("2024-01-10T09:00:00Z", "user", "The landlord comes on 17.01 to read the meters."),
        ("2024-01-10T09:01:00Z", "assistant", "Noted."),
    ])
    _session(ws / "sessions" / "after.jsonl", [
        ("2024-01-18T09:00:00Z", "user", "Yesterday I finally repainted the hallway."),
        ("2024-01-18T09:01:00Z", "assistant", "Nice."),
    ])
    for d in ("12", "14", "16", "17", "19"):
        _session(ws / "sessions" / f"day-{d}.jsonl", [
            (f"2024-01-{d}T12:00:00Z", "user", f"Nothing special on the {d}th, read a book."),
        ])
    s = load_settings(None, {"workspace": str(ws), "provider": "none", "sources": ["sessions"]})
    run_index(s)
    with Searcher(s) as searcher:
        paths = [h.path for h in searcher.search("what happened on 17 January?", max_results=4)]
        assert "sessions/plan.jsonl" in paths and "sessions/after.jsonl" in paths, paths
        assert paths[0] in ("sessions/day-17.jsonl", "sessions/plan.jsonl", "sessions/after.jsonl"), paths
        assert all(p not in paths for p in ("sessions/day-12.jsonl", "sessions/day-14.jsonl")), paths


@pytest.mark.parametrize("query", ["before 0001-01-10 meeting", "after 9999-12-20 meeting", "the day before yesterday",
                                   "999 days ago", "last month", "on Friday", "what happened on 1/1",
                                   "between 1/1/0001 and 31/12/9999", "until 0001-01-02"])
def test_days_at_the_calendars_edge_never_crash_a_search(tmp_path_factory: pytest.TempPathFactory,
                                                         query: str) -> None:
    """A transcript stamped in year 1 (the memory's newest day) and one that names days in its text:
    open ranges (their fetch window), relative days counted back from it, days read from its text and
    year 1's stamp (``strftime`` wrote ``1-01-01T00:00``) stay in the calendar: a guard for the new
    arithmetic, which raised OverflowError / ValueError here while it was written."""
    ws = tmp_path_factory.mktemp("edge") / "ws"
    (ws / "sessions").mkdir(parents=True)
    _session(ws / "sessions" / "x.jsonl", [("0001-01-01T00:00:00Z", "user", "on 1/1 and 31.12. yesterday we met")])
    s = load_settings(None, {"workspace": str(ws), "provider": "none", "sources": ["sessions"]})
    run_index(s)
    with Searcher(s) as searcher:
        for mode in ("hybrid", "keyword"):
            searcher.search(query, min_score=0, mode=mode)  # no exception
        assert searcher.search("we met", min_score=0)


def test_a_range_nothing_was_written_in_changes_nothing(january) -> None:
    """Nothing of March is in this memory: the named month neither lifts nor caps anything (capping
    every score at 0.5 tied the best matches, which then ranked by BM25 alone)."""
    with Searcher(january) as s:
        plain = s.search("the boiler expansion vessel repair", min_score=0)
        march = s.search("the boiler expansion vessel repair in March", min_score=0)
    assert plain and plain[0].score > 0.5
    assert [(h.citation, h.score) for h in march] == [(h.citation, h.score) for h in plain]


@pytest.mark.parametrize(("line", "clock"), [
    ("## Chat with Jorge (00:45)", "00:45"), ("## 23:40 call with Mo", "23:40"), ("00:45 Jorge: home now", "00:45"),
    ("- [00:45] home", "00:45"), ("- 12:45am still up", "00:45"), ("### [9:05 pm] late", "21:05"),
    ("## Score 3:2", None), ("## Match at 10:30", None), ("Jorge: see you at 10:30", None), ("# 2024-01-18", None),
    ("- 13:30pm", None),
])
def test_the_clock_a_note_states(line: str, clock: str | None) -> None:
    got = _note_clock(line)
    assert (got.strftime("%H:%M") if got else None) == clock


def _notes_of_the_17th_and_18th(tmp_path: Path, clock: str) -> Settings:
    """Daily notes: the 17th's evening on other things; the 18th's begins with a section headed
    ``clock`` whose talk reaches the boiler only 60 lines down (another chunk than its heading)."""
    mem = tmp_path / "ws" / "memory"
    mem.mkdir(parents=True)
    (mem / "2024-01-17.md").write_text("# 2024-01-17\n\n## Chat with Ana (20:00)\n\nAna: called my aunt, nobody answered\n"
                                       "Ana: try again tomorrow\n")
    small_talk = [f"Jorge: still thinking about song number {i} for the setlist, the chorus is long" for i in range(60)]
    (mem / "2024-01-18.md").write_text("\n".join([
        "# 2024-01-18", "", f"## Chat with Jorge ({clock})", "", *small_talk,
        "Jorge: the plumber came about the boiler, it needs a new expansion vessel", ""]))
    s = load_settings(None, {"workspace": str(tmp_path / "ws"), "provider": "none", "sources": ["memory"]})
    run_index(s)
    return s


def test_a_note_written_past_midnight_counts_for_the_evening_before(tmp_path: Path) -> None:
    """The next day's note says when it was written: a section headed 00:40 is the night of the
    17th, as a transcript message stamped 00:40 on the 18th is. Its chunk (which does not hold the
    heading) matches the words and ranks above the 17th's own note, which matches only on its date.
    Before, a daily note's day was its name alone, and the answer was capped below the 17th's note."""
    s = _notes_of_the_17th_and_18th(tmp_path, "00:40")
    with Searcher(s) as se:
        hits = se.search("what did the plumber say about the boiler on 17 January?")
    assert hits and hits[0].path == "memory/2024-01-18.md" and hits[0].start_line > 3, \
        [(h.citation, h.score) for h in hits]
    assert "boiler" in hits[0].snippet
    # no tolerance: the note's day is its name again
    strict = s.model_copy(update={"query": s.query.model_copy(update={"day_tolerance_hours": 0})})
    with Searcher(strict) as se:
        hits = se.search("what did the plumber say about the boiler on 17 January?")
    assert hits and hits[0].path == "memory/2024-01-17.md", [(h.citation, h.score) for h in hits]


def test_the_next_days_evening_note_is_another_day(tmp_path: Path) -> None:
    """The same note headed 19:00 is the 18th's evening: past the tolerance, not lifted."""
    s = _notes_of_the_17th_and_18th(tmp_path, "19:00")
    with Searcher(s) as se:
        hits = se.search("what did the plumber say about the boiler on 17 January?")
    assert hits and hits[0].path == "memory/2024-01-17.md", [(h.citation, h.score) for h in hits]


@pytest.mark.parametrize(("query", "day"), [
    ("what did we do on the 13th?", date(2024, 1, 13)),
    ("what did we do the 13th?", date(2024, 1, 13)),  # no day word, but nothing it numbers after it
    ("the 13th at the pub, who came?", date(2024, 1, 13)),
    ("anything planned the 6th and later?", date(2024, 1, 6)),
    ("what was on 24/7/2023?", date(2023, 7, 24)),  # with a year it is a day
])
def test_ordinal_and_numeric_days_still_read(query: str, day: date) -> None:
    got = query_date_range(query, REF)
    assert got is not None and got.start == day and got.end == day


# -- the fourteenth session's date audit ---------------------------------------------------------

@pytest.mark.parametrize(("query", "today", "lo", "hi"), [
    # across New Year, year-less: from the latest 28 December into the January after it (was: the
    # 359 days from 3 January to 28 December, which lifted everything but the days asked about)
    ("where did we go between Dec 28 and Jan 3?", date(2025, 12, 31), date(2025, 12, 28), date(2026, 1, 3)),
    ("between Dec 28 and Jan 2", date(2027, 1, 1), date(2026, 12, 28), date(2027, 1, 2)),
    ("from Dec 30 to Jan 2", date(2026, 1, 5), date(2025, 12, 30), date(2026, 1, 2)),
    # in the order written, within the first day's year (was: 5 December 2025 to 25 November 2026)
    ("what did we do between Nov 25 and Dec 5?", date(2026, 11, 29), date(2026, 11, 25), date(2026, 12, 5)),
    # written backwards: still the days between them
    ("between 20 Jan and 3 Jan", date(2026, 3, 1), date(2026, 1, 3), date(2026, 1, 20)),
    # 29 February without a year: the latest leap year's (was: not read, or the range cut to one day)
    ("what happened on Feb 29?", date(2026, 3, 10), date(2024, 2, 29), date(2024, 2, 29)),
    ("what happened on 29/2?", date(2026, 3, 10), date(2024, 2, 29), date(2024, 2, 29)),
    ("between Feb 27 and Feb 29", date(2026, 3, 10), date(2024, 2, 27), date(2024, 2, 29)),
    # two whole days joined by a dash are a range (was: the first day only)
    ("what happened Jan 5 - Jan 9?", date(2026, 3, 10), date(2026, 1, 5), date(2026, 1, 9)),
    ("notes of 2026-11-01 - 2026-11-05", date(2026, 12, 10), date(2026, 11, 1), date(2026, 11, 5)),
    ("Nov 1–Nov 5", date(2026, 12, 10), date(2026, 11, 1), date(2026, 11, 5)),
    # "this Sunday" asked on a Sunday is that day (was: the Sunday before); "on Sunday": the last one
    ("what are we doing this Sunday?", date(2026, 11, 29), date(2026, 11, 29), date(2026, 11, 29)),
    ("what did we do on Sunday?", date(2026, 11, 29), date(2026, 11, 22), date(2026, 11, 22)),
    # a dotted day without a day word is still one
    ("what did we plan for 17.01?", date(2026, 3, 10), date(2026, 1, 17), date(2026, 1, 17)),
])
def test_ranges_across_new_year_leap_days_and_dashes(query: str, today: date, lo: date, hi: date) -> None:
    got = query_date_range(query, today)
    assert got is not None and (got.start, got.end) == (lo, hi), got


@pytest.mark.parametrize("query", ["what is new in python 3.12?", "node 20.11 is out", "running 5.10 km was hard",
                                   "I got 9/10 on the quiz", "rated it 4.5 stars", "section 3.11 of the spec",
                                   "a 12.10 kg parcel"])
def test_versions_scores_and_measures_are_not_days(query: str) -> None:
    got = query_date_range(query, date(2026, 3, 10))
    assert got is None, got


def test_a_long_query_reads_its_days_in_its_first_characters_only() -> None:
    """A query is read for days in its first MAX_DATE_SCAN_CHARS characters, each day's qualifying
    words looked for just before it (a 100 KB query of "1/1 " was quadratic: ~5 s at 25 KB, ~70 s
    at 100 KB by extrapolation; bench figures in docs/search.md)."""
    from memory_core.query.dates import MAX_DATE_SCAN_CHARS

    filler = "blah " * (MAX_DATE_SCAN_CHARS // 5 + 10)
    assert query_date_range(filler + "what happened on 3 January?", date(2026, 3, 10)) is None
    got = query_date_range("what happened on 3 January? " + filler, date(2026, 3, 10))
    assert got is not None and got.start == date(2026, 1, 3)
    many = "on 1/1 " * 15_000  # 105 KB, every pair a day: the first is the answer
    got = query_date_range(many, date(2026, 3, 10))
    assert got is not None and got.start == date(2026, 1, 1)


def test_placeholder_timestamps_date_nothing_and_never_fail_a_search(tmp_path: Path) -> None:
    """Go's zero time (``0001-01-01T00:00:00Z``, what Go tools write for an unset time) and epoch
    0 / -1 are placeholders: they date nothing. Before, a transcript stamped so made every
    question naming a day that reached it fail (``ValueError: year 0 is out of range``: its "last
    year" counted from year 1), and an epoch-0 transcript was "our first conversation"."""
    from memory_core.query.dates import mentions
    from memory_core.sources.sessions import stamp

    assert stamp("0001-01-01T00:00:00Z") is None and stamp(0) is None and stamp(-1) is None
    assert stamp("1970-01-01T00:00:00Z") is None and stamp("2026-11-02T10:00:00Z") == "2026-11-02T10:00"
    assert mentions("we went 2 times last year", date(1, 1, 1), DateRange(date(2026, 11, 2), date(2026, 11, 2))) is False
    ws = tmp_path / "ws"
    (ws / "sessions").mkdir(parents=True)

    def session(name: str, ts: object, text: str) -> None:
        _one_message_session(ws, name, ts, text)

    session("good", "2026-11-02T10:00:00Z", "Booked the ski trip for the winter.")
    session("zero", "0001-01-01T00:00:00Z", "The ski trip: we went 2 times last year.")
    session("epoch", 0, "The ski trip budget is 400 euros.")
    s = load_settings(None, {"workspace": str(ws), "provider": "none", "sources": ["sessions"]})
    run_index(s)
    with Searcher(s) as se:
        got = se.search("what did we say about the ski trip on 2 November?", min_score=0)
        assert got and got[0].path == "sessions/good.jsonl"
        first = se.search("what did we say in our first conversation about the ski trip?", min_score=0)
        assert first and first[0].path == "sessions/good.jsonl"  # the only dated one


# -- the fifteenth session: the fourteenth audit's leftovers ---------------------------------------

@pytest.mark.parametrize("query", [
    "what is the 16/9 ratio?", "a 16/9 aspect ratio", "the screen ratio of 16/9", "the aspect ratio is 16/9",
    "ratio: 16/9", "12/15 of patients recovered", "12/15 of them came back", "my score was 12/15",
    "I scored about 12/15 on the quiz", "12/15 patients recovered", "what did 9/10 Dentists say?",
    "how many of them said 3/4 people came", "12/15 women and 3/15 men replied",
])
def test_ratios_and_parts_of_a_whole_are_not_days(query: str) -> None:
    """A ratio (``16/9``: was 16 September) or a part of a whole (``12/15 of patients``: was 15
    December) is no day: a pair before a ratio's word or ``of`` and what it counts, or after a
    ratio's or score's word and a verb or ``of`` (D4 refused only the word right before it)."""
    got = query_date_range(query, date(2026, 3, 10))
    assert got is None, got


@pytest.mark.parametrize(("query", "lo", "hi"), [
    ("what did we do on 12/15?", date(2025, 12, 15), date(2025, 12, 15)),
    ("what changed since 16/9", date(2025, 9, 16), date(9999, 12, 30)),
    ("12/15?", date(2025, 12, 15), date(2025, 12, 15)),
    ("what happened 16/9", date(2025, 9, 16), date(2025, 9, 16)),
    ("between 1/10 and 1/20", date(2026, 1, 10), date(2026, 1, 20)),
    ("what did we decide before 12/15", date(1, 1, 2), date(2025, 12, 14)),
    ("what did we do 12/15 of last year", date(2025, 12, 15), date(2025, 12, 15)),  # "of" a year: a day
    ("what was the ratio on 16/9?", date(2025, 9, 16), date(2025, 9, 16)),  # a day's word first
    ("what was the score on 12/15?", date(2025, 12, 15), date(2025, 12, 15)),
    # a plural after the pair: a day with a determiner before it, a verb-like -s word after it, or
    # nothing after the plural (a chat's "12/15 plans?"); a day's word first
    ("what came of the 12/15 meeting notes", date(2025, 12, 15), date(2025, 12, 15)),
    ("how did our 12/15 sales go", date(2025, 12, 15), date(2025, 12, 15)),
    ("12/15 was busy, who came?", date(2025, 12, 15), date(2025, 12, 15)),
    ("12/15 plans?", date(2025, 12, 15), date(2025, 12, 15)),
    ("on 12/15 patients were moved", date(2025, 12, 15), date(2025, 12, 15)),
    ("12/15 does it work for dinner", date(2025, 12, 15), date(2025, 12, 15)),
])
def test_numeric_days_beside_ratios_and_parts_still_read(query: str, lo: date, hi: date) -> None:
    got = query_date_range(query, date(2026, 3, 10))
    assert got is not None and (got.start, got.end) == (lo, hi), got


def test_a_pair_that_is_no_day_proves_no_order() -> None:
    """``I got 12/15`` (a score) no longer proves the question's other days month first: ``on 3/4``
    stays 3 April (``query.date_order`` "dmy"), as it was without the score."""
    got = query_date_range("I got 12/15 and then on 3/4 we met", date(2026, 11, 29))
    assert got is not None and got.start == date(2026, 4, 3), got


@pytest.mark.parametrize(("value", "want"), [
    ("2026-01-05t19:22:00z", "2026-01-05T19:22"),  # RFC 3339 allows a lowercase t and z
    ("2026-01-05T19:22:00z", "2026-01-05T19:22"),
    ("2026-01-05T19:22:00.123456z", "2026-01-05T19:22"),
    ("1736100000", "2025-01-05T18:00"),  # an epoch written as a string: seconds
    (" 1736100000.5 ", "2025-01-05T18:00"),
    ("1736100000000", "2025-01-05T18:00"),  # milliseconds
    (1736100000, "2025-01-05T18:00"),
    (1736100000000, "2025-01-05T18:00"),
    (1736100000000000, "2025-01-05T18:00"),  # microseconds
    ("1736100000000000", "2025-01-05T18:00"),
    (1736100000000000000, "2025-01-05T18:00"),  # nanoseconds
    (99999999999, "1973-03-03T09:46"),  # past 2200 in seconds: milliseconds (was the year 5138)
    # placeholders and times no message was said at: nothing
    ("0", None), ("-1", None), (0, None), ("1970-01-01t00:00:00z", None), ("9999-12-31T23:59:59Z", None),
    (10**20, None), ("99999999999999999999", None), (float("nan"), None), (True, None),
])
def test_transcript_timestamps_in_any_case_and_unit(value: object, want: str | None) -> None:
    from memory_core.sources.sessions import stamp

    assert stamp(value) == want


def test_transcripts_stamped_in_lowercase_or_string_or_fine_epochs_are_found_by_their_day(tmp_path: Path) -> None:
    """A transcript whose timestamps have a lowercase ``z``, are epochs written as strings or count
    microseconds or nanoseconds dates its chunks (it dated nothing: the day named found none of
    them); one stamped in the far future (``9999-12-31``, "never") dates nothing (was: 9999)."""
    ws = tmp_path / "ws"
    (ws / "sessions").mkdir(parents=True)

    def session(name: str, ts: object, text: str) -> None:
        _one_message_session(ws, name, ts, text)

    day = "2025-01-05"  # 1736100000 is 2025-01-05T18:00Z
    session("lower", "2025-01-05t10:00:00z", "Lunch with Priya at the noodle bar.")
    session("text", "1736100000", "Called the landlord about the boiler.")
    session("micro", 1736100000 * 10**6, "Bought a new bike helmet.")
    session("nano", 1736100000 * 10**9, "Planted the tulip bulbs.")
    session("never", "9999-12-31T23:59:59Z", "The heron budget is 10 euros.")
    session("other", "2025-01-02T10:00:00Z", "Nothing much, read a book.")
    s = load_settings(None, {"workspace": str(ws), "provider": "none", "sources": ["sessions"]})
    run_index(s)
    with Searcher(s) as se:
        got = se.search("what did we talk about on 5 January 2025?", min_score=0, max_results=10)
        dated = {h.path for h in got if h.date and h.date.startswith(day)}
        assert dated == {f"sessions/{n}.jsonl" for n in ("lower", "text", "micro", "nano")}, [(h.path, h.date) for h in got]
        never = [h.date for h in se.search("heron budget", min_score=0) if h.path.endswith("never.jsonl")]
        assert never == [None], never  # undated (its file's modification day is no day it was said)


@pytest.mark.parametrize(("query", "lo", "hi"), [
    ("what did we do on the 1st and 2nd?", date(2024, 1, 1), date(2024, 1, 2)),  # was: the 1st only
    ("the 3rd, 4th and 5th", date(2024, 1, 3), date(2024, 1, 5)),
    ("what happened the 3rd, 4th and 5th?", date(2024, 1, 3), date(2024, 1, 5)),
    ("was it the 1st or 2nd?", date(2024, 1, 1), date(2024, 1, 2)),
    ("did we meet on 1st or 2nd?", date(2024, 1, 1), date(2024, 1, 2)),
    ("on the 1st or the 2nd", date(2024, 1, 1), date(2024, 1, 2)),
    ("between the 1st and 5th", date(2024, 1, 1), date(2024, 1, 5)),  # was: the 1st only
    ("what did we do on the 3rd, 4th and 5th of May?", date(2023, 5, 3), date(2023, 5, 5)),  # was: 4-5 May
    ("what did we do on the 1st or 2nd of May?", date(2023, 5, 1), date(2023, 5, 2)),  # was: the 1st of January
    ("on the 30th and 31st", date(2023, 12, 30), date(2023, 12, 31)),  # one month holding both
    # the month first (was: its first day alone)
    ("what did we do May 3rd, 4th and 5th?", date(2023, 5, 3), date(2023, 5, 5)),
    ("on May 3, 4 and 5", date(2023, 5, 3), date(2023, 5, 5)),
    ("on May 3, 4, 5 and 9 we hiked", date(2023, 5, 3), date(2023, 5, 9)),
    ("May 3, 4 and 5, 2022", date(2022, 5, 3), date(2022, 5, 5)),
    # not lists: a year after one day, a count after it, a version among them
    ("on May 3, 2022", date(2022, 5, 3), date(2022, 5, 3)),
    ("May 3, 4 people came", date(2023, 5, 3), date(2023, 5, 3)),
    ("on May 3, 4.5 and 6", date(2023, 5, 3), date(2023, 5, 3)),
])
def test_days_of_the_month_listed_are_read_together(query: str, lo: date, hi: date) -> None:
    got = query_date_range(query, REF)
    assert got is not None and (got.start, got.end) == (lo, hi), got


@pytest.mark.parametrize("query", ["the 1st and 2nd drafts of the essay", "the 1st or 2nd time we tried",
                                   "the 1st, 2nd and 3rd prizes", "on the 1st and 2nd floor", "1st or 2nd place"])
def test_ordinals_listed_before_what_they_number_are_not_days(query: str) -> None:
    got = query_date_range(query, REF)
    assert got is None, got


def test_a_listed_day_after_the_first_finds_its_transcript(january) -> None:
    """``on the 18th and 19th``: the 19th's kayak talk is the day asked about (was: the 18th only,
    so the 19th's chunk was capped with every other day's, level with the 12th's)."""
    with Searcher(january) as s:
        hits = s.search("what did we say about the kayak course on the 18th and 19th?", max_results=3)
    assert hits and hits[0].path == "sessions/kayak-b.jsonl", [(h.path, h.score) for h in hits]
    assert hits[0].score > 0.5


# -- the sixteenth session: days an older reading recorded -------------------------------------------

def _as_an_older_reading_left_it(s: Settings, days: Callable[[Any], None] | None = None) -> None:
    """The index of ``s`` as a build before MESSAGE_DAYS_VERSION left it: no version in its meta,
    and ``days`` (given the connection, in one transaction) changes its recorded days."""
    from memory_core.storage.store import connect, read_meta, write_meta

    conn = connect(s.index_file)
    try:
        with conn:
            if days is not None:
                days(conn)
            meta = read_meta(conn)
            assert meta is not None
            meta.pop("message_days", None)
            write_meta(conn, meta)
    finally:
        conn.close()


def test_an_index_whose_days_an_older_reading_recorded_rereads_those_transcripts_once(tmp_path: Path) -> None:
    """An index built before D1/D10 recorded no day for a transcript stamped ``...t10:00:00z`` or
    with an epoch written as a string, and the year 9999 for ``9999-12-31``: its transcripts kept
    those days until they changed. The next run re-reads exactly the transcripts with no day in
    1971-2200 or one outside it (as changed, vectors from the cache), records the reading's version,
    and the run after that has nothing to do."""
    from memory_core.storage.store import connect, read_meta

    ws = tmp_path / "ws"
    (ws / "sessions").mkdir(parents=True)
    _one_message_session(ws, "lower", "2025-01-05t10:00:00z", "Lunch with Priya at the noodle bar.")
    _one_message_session(ws, "text", "1736100000", "Called the landlord about the boiler.")
    _one_message_session(ws, "never", "9999-12-31T23:59:59Z", "The heron budget is 10 euros.")
    _one_message_session(ws, "other", "2025-01-02T10:00:00Z", "Nothing much, read a book.")
    s = load_settings(None, {"workspace": str(ws), "provider": "none", "sources": ["sessions"]})
    first = run_index(s)
    assert first.sessions_redated == 0

    def older_reading(conn: Any) -> None:
        rid = {p: r for r, p in conn.execute("SELECT rid, path FROM chunks")}
        for name in ("lower", "text"):
            conn.execute("DELETE FROM chunk_days WHERE rid = ?", (rid[f"sessions/{name}.jsonl"],))
        conn.execute("INSERT INTO chunk_days(day, rid, first, line) VALUES('9999-12-31', ?, "
                     "'9999-12-31T23:59:59Z', 2)", (rid["sessions/never.jsonl"],))

    _as_an_older_reading_left_it(s, older_reading)
    question = "what did we talk about on 5 January 2025?"
    with Searcher(s) as se:
        before = {h.path for h in se.search(question, min_score=0, max_results=10)
                  if h.date and h.date.startswith("2025-01-05")}
    assert before == {"sessions/text.jsonl"} or not before  # the older reading's: not the lowercase one

    # a run given the changed paths (a watcher's) looks at those alone: the reading's version stays
    # unrecorded, so the next full look still re-reads them
    (ws / "sessions" / "other.jsonl").touch()
    hinted = run_index(s, only_paths=[str(ws / "sessions" / "other.jsonl")])
    assert hinted.hinted_paths == 1, hinted.hint_fallback
    assert hinted.sessions_redated == 0
    conn = connect(s.index_file, readonly=True)
    try:
        assert "message_days" not in (read_meta(conn) or {})
    finally:
        conn.close()

    again = run_index(s)
    assert (again.sessions_redated, again.files_changed, again.chunks_embedded) == (3, 3, 0), again.lines()
    assert any("re-read for their messages' days: 3" in line for line in again.lines())
    from flows.report import run_figures  # the flow's summary artifact says it as the CLI does
    assert run_figures(again, s)["transcripts re-read for their messages' days"] == 3
    with Searcher(s) as se:
        dated = {h.path for h in se.search(question, min_score=0, max_results=10)
                 if h.date and h.date.startswith("2025-01-05")}
        never = [h.date for h in se.search("heron budget", min_score=0) if h.path.endswith("never.jsonl")]
    assert dated == {"sessions/lower.jsonl", "sessions/text.jsonl"}, dated
    assert never == [None], never  # undated
    conn = connect(s.index_file, readonly=True)
    try:
        assert (read_meta(conn) or {}).get("message_days") == MESSAGE_DAYS_VERSION
    finally:
        conn.close()
    third = run_index(s)
    assert (third.sessions_redated, third.files_changed) == (0, 0)


def test_an_index_with_no_transcript_to_reread_records_the_days_reading_once(tmp_path: Path) -> None:
    """When every transcript's recorded days are in range, the run with an older index records the
    reading's version alone (nothing re-read, nothing embedded), so later runs do not list the
    transcripts again."""
    from memory_core.storage.store import connect, read_meta

    ws = tmp_path / "ws"
    (ws / "sessions").mkdir(parents=True)
    _one_message_session(ws, "good", "2025-01-02T10:00:00Z", "Nothing much, read a book.")
    s = load_settings(None, {"workspace": str(ws), "provider": "none", "sources": ["sessions"]})
    run_index(s)

    def recorded() -> object:
        conn = connect(s.index_file, readonly=True)
        try:
            return (read_meta(conn) or {}).get("message_days", "absent")
        finally:
            conn.close()

    _as_an_older_reading_left_it(s)
    assert recorded() == "absent"
    again = run_index(s)
    assert (again.sessions_redated, again.files_changed, again.chunks_embedded) == (0, 0, 0)
    assert recorded() == MESSAGE_DAYS_VERSION
