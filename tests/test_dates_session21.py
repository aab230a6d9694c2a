"""Twenty-first session: days written as people write them in chats and questions (a day of the
month spelled out, a misspelled month, a two-digit year after the month), a plan's "on the 17th",
and a timeline a wrongly stamped message or a note for a day to come no longer ends in the future."""

from __future__ import annotations

from datetime import date
from pathlib import Path

import pytest

from memory_core.config import load_settings
from memory_core.index.pipeline import run_index
from memory_core.query.dates import latest_day, mentions, query_date_range, timeline_end
from memory_core.query.search import Searcher
from memory_core.storage.store import connect_reader
from tests.test_conversation_dates import _session  # (ISO UTC stamp, role, text) messages

ANCHOR = date(2024, 1, 20)  # the memory's newest day: questions are asked on the 21st


@pytest.mark.parametrize(("query", "day", "phrase"), [
    ("what did we do on the seventeenth?", date(2024, 1, 17), "the seventeenth"),
    ("what happened on the seventeenth of January?", date(2024, 1, 17), "seventeenth of january"),
    ("what did Kate say on January seventeenth?", date(2024, 1, 17), "january seventeenth"),
    ("what did we do on January the twenty-first?", date(2024, 1, 21), "january the twenty-first"),
    ("the twenty first of December", date(2023, 12, 21), "twenty first of december"),
    ("what did we do on the thirty-first?", date(2023, 12, 31), "the thirty-first"),
    ("what did we do on the first of May?", date(2023, 5, 1), "first of may"),
    ("what did we plan for May the fourth?", date(2023, 5, 4), "may the fourth"),
    ("what did we do on 17 Janaury?", date(2024, 1, 17), "17 janaury"),
    ("plans for Feburary 3rd 2023?", date(2023, 2, 3), "feburary 3rd 2023"),
    ("what did we do on 17 Jan 24?", date(2024, 1, 17), "17 jan 24"),
    ("what did we do on 17 January 23.", date(2023, 1, 17), "17 january 23"),
])
def test_a_day_as_people_write_it(query: str, day: date, phrase: str) -> None:
    got = query_date_range(query, anchor=ANCHOR)
    assert got is not None and (got.start, got.end) == (day, day), got
    assert got.phrase == phrase  # the words stripped from the keyword query: whole words, as written
    assert phrase not in got.strip(query).lower()


def test_a_span_of_spelled_out_days() -> None:
    got = query_date_range("what came up between the fifteenth and the seventeenth of January?", anchor=ANCHOR)
    assert got is not None and (got.start, got.end) == (date(2024, 1, 15), date(2024, 1, 17))
    question = "what came up between the fifteenth and the seventeenth of January?"
    assert got.strip(question) == "what came up ?"


@pytest.mark.parametrize(("query", "phrase"), [
    ("what did we say in our first conversation about money", None),  # the conversation's place, not a day
    ("the first may be better than the second", None),
    ("you may first ask Kate", None),
    ("what did I say the fourth time we met", None),
    ("the third option", None),
    ("which books are on the fifth floor", None),
    ("who came second", None),
    ("17 Jan 24 hours later", "17 jan"),  # a duration, not a year
    ("on Jan 17, 24 people came", "jan 17"),
    ("meet on 3 June 10:30", "3 june"),  # a time, not a year
    ("meet on 3 June 10.30", "3 june"),
])
def test_what_is_no_day_or_no_year_stays_so(query: str, phrase: str | None) -> None:
    got = query_date_range(query, anchor=ANCHOR)
    assert (got.phrase if got is not None else None) == phrase, got
    if got is not None:  # the latest such day up to the memory's "today", no year read
        assert got.start == got.end and date(2023, 1, 21) <= got.start <= date(2024, 1, 21)


@pytest.mark.parametrize("query", [
    # the audit's: an ordinal after a day's word, numbering a noun, is no day
    "what did the therapist say after the fifth session?",
    "before the seventh lesson",
    "since the fourth grade",
    "on the fourth day of the trip",
    "on the fifth attempt",
    # ordinals listed together are read or left as one
    "the fifth or sixth time",
    "what did we think of the fourth and fifth chapters?",
    # a spelled-out day beside a month's whole name only: Jan is a name too
    "I asked Jan the second question",
    "Jan first said no",
    # twenty-second session: the idiom, a list's item asked for, "and final"
    "I'll take the fifth",
    "he pleaded the fifth",
    "which was the fifth?",
    "which one is the fifth?",
    "we watched the fifth and final season",
    "the 5th and final season",
    # "march" after "first" to "third" is the word, unless "of" or a year makes it the month
    "the second march on washington was bigger",
])
def test_an_ordinal_of_something_else_is_no_day(query: str) -> None:
    assert query_date_range(query, anchor=ANCHOR) is None


@pytest.mark.parametrize(("query", "start", "end"), [
    ("the fourth, fifth and sixth of May", date(2023, 5, 4), date(2023, 5, 6)),
    ("what happened on the seventeenth and eighteenth?", date(2024, 1, 17), date(2024, 1, 18)),
    ("between the seventeenth and eighteenth", date(2024, 1, 17), date(2024, 1, 18)),
    ("May fourth, fifth and sixth", date(2023, 5, 4), date(2023, 5, 6)),
    ("on the twenty-fifth and twenty-sixth", date(2023, 12, 25), date(2023, 12, 26)),
    ("what did we do on the twenty-second?", date(2023, 12, 22), date(2023, 12, 22)),  # no digit in it
    ("what did we do in Ocotber?", date(2023, 10, 1), date(2023, 10, 31)),
    ("the third of Ocotber", date(2023, 10, 3), date(2023, 10, 3)),
    # two-digit years: the last century's when this one's would be far ahead; a range of them
    ("I was born on 3 March 95, what else?", date(1995, 3, 3), date(1995, 3, 3)),
    ("on 17/01/95", date(1995, 1, 17), date(1995, 1, 17)),
    ("between 17 Jan 24 and 19 Jan 24", date(2024, 1, 17), date(2024, 1, 19)),
    ("from 17 Jan 24 to 19 Jan 24?", date(2024, 1, 17), date(2024, 1, 19)),
    ("on 29 Feb 23?", date(2020, 2, 29), date(2020, 2, 29)),  # no such day in 2023: 23 is no year
    ("runs: 3 May 10, 4 May 12", date(2023, 5, 3), date(2023, 5, 3)),  # 10 is no year before a digit
    # twenty-second session: "the <ordinal>" wherever it stands (the helper's audit of a first
    # version that asked for "on"/"until" before it); "of", a year or an ordinal from "fourth" on
    # makes "march" the month; a month's ordinal numbering a week is no day (the month is named)
    ("what about the twenty-first?", date(2024, 1, 21), date(2024, 1, 21)),
    ("what happened the seventeenth?", date(2024, 1, 17), date(2024, 1, 17)),
    ("is the party still the twenty-first?", date(2024, 1, 21), date(2024, 1, 21)),
    ("what happened Wednesday the seventeenth?", date(2024, 1, 17), date(2024, 1, 17)),
    ("is it the fifteenth or the sixteenth?", date(2024, 1, 15), date(2024, 1, 16)),
    ("what happened the seventeenth march", date(2023, 3, 17), date(2023, 3, 17)),
    ("what happened on second march 2023", date(2023, 3, 2), date(2023, 3, 2)),
    ("what did we eat the night of the fifth?", date(2024, 1, 5), date(2024, 1, 5)),
    ("we met on the fourth, fifth and sixth", date(2024, 1, 4), date(2024, 1, 6)),
    ("the second of march", date(2023, 3, 2), date(2023, 3, 2)),
    ("March the second", date(2023, 3, 2), date(2023, 3, 2)),
    ("what was planned in October third week?", date(2023, 10, 1), date(2023, 10, 31)),
])
def test_days_the_audit_found_misread(query: str, start: date, end: date) -> None:
    got = query_date_range(query, anchor=ANCHOR)
    assert got is not None and (got.start, got.end) == (start, end), got


def _day(text: str) -> object:
    return query_date_range(text, anchor=ANCHOR)


@pytest.mark.parametrize(("text", "written", "named", "not_named"), [
    # a plan: the 17th to come; a past event: the 17th before
    ("see you on the 17th!", date(2024, 1, 10), "17 January 2024", "17 December 2023"),
    ("see you on the seventeenth!", date(2024, 1, 10), "17 January 2024", "17 December 2023"),
    ("we met on the 17th", date(2024, 1, 10), "17 December 2023", "17 January 2024"),
    ("the party on the seventeenth of January", date(2024, 1, 10), "17 January 2024", "17 December 2023"),
    # a past word before a comma is another clause's (the audit's)
    ("Kate booked the escape room for us, see you on the 17th!", date(2024, 1, 10), "17 January 2024",
     "17 December 2023"),
    ("I called the vet, appointment is on the 17th", date(2024, 1, 10), "17 January 2024", "17 December 2023"),
    ("Yesterday, we met Kate on the 17th", date(2024, 1, 20), "17 January 2024", "17 February 2024"),
    # a plan written on the very day it names is that day, not the next month's (F8, twenty-third session)
    ("see you on the 17th!", date(2024, 1, 17), "17 January 2024", "17 February 2024"),
    ("see you on the 17th!", date(2024, 1, 18), "17 February 2024", "17 January 2024"),
    # a month without the day is skipped, forward as backward
    ("see you on the 31st!", date(2024, 4, 10), "31 May 2024", "31 March 2024"),
])
def test_a_messages_day_of_the_month_is_a_plan_or_a_past_day_by_its_clause(
        text: str, written: date, named: str, not_named: str) -> None:
    assert mentions(text, written, _day(f"what happened on {named}?"))  # type: ignore[arg-type]
    assert not mentions(text, written, _day(f"what happened on {not_named}?"))  # type: ignore[arg-type]


def _memory(ws: Path) -> None:
    (ws / "sessions").mkdir(parents=True)
    (ws / "memory").mkdir()
    _session(ws / "sessions" / "s0119.jsonl", [
        ("2024-01-19T19:00:00Z", "user", "What a dinner! We had dinner at the pizza place, best dinner in weeks."),
        ("2024-01-19T19:01:00Z", "assistant", "Glad the dinner was good."),
    ])
    _session(ws / "sessions" / "s0120.jsonl", [
        ("2024-01-20T18:00:00Z", "user", "We tried the new Thai place on Elm Street for dinner."),
        ("2024-01-20T18:01:00Z", "assistant", "How was the green curry?"),
    ])
    # a device whose clock was wrong: one message stamped decades ahead
    _session(ws / "sessions" / "skew.jsonl", [
        ("2099-05-01T08:00:00Z", "user", "Test message from the tablet."),
    ])
    # a note for a day to come (a trip's packing list)
    (ws / "memory" / "2031-07-01.md").write_text("# Trip\n\n- pack the tent and the stove\n")


def test_a_message_naming_its_day_in_words_is_fetched_for_that_day(tmp_path: Path) -> None:
    """The audit's: a chunk saying "on the seventeenth of January" or "17 Janaury" was never fetched
    for a question naming 17 January (the full-text look for mentions searched digits and the
    months' right spellings only), unlike one saying "17 January"."""
    ws = tmp_path / "ws"
    (ws / "sessions").mkdir(parents=True)
    _session(ws / "sessions" / "plan.jsonl", [
        ("2024-01-05T10:00:00Z", "user", "Party at Kate's flat on the seventeenth of January, bring snacks."),
        ("2024-01-05T10:01:00Z", "assistant", "Noted."),
    ])
    _session(ws / "sessions" / "typo.jsonl", [
        ("2024-01-06T10:00:00Z", "user", "Dentist moved to 17 Janaury, 9am."),
        ("2024-01-06T10:01:00Z", "assistant", "Got it."),
    ])
    for i in range(8):  # other days' talk
        _session(ws / "sessions" / f"other{i}.jsonl", [
            (f"2024-01-{10 + i:02d}T10:00:00Z", "user", f"Ordinary day number {i}, nothing planned."),
        ])
    s = load_settings(None, {"workspace": str(ws), "provider": "none", "sources": ["sessions"]})
    run_index(s)
    with Searcher(s) as searcher:
        hits = searcher.search("what is happening on 17 January 2024?", max_results=5)
        paths = [h.path for h in hits]
        assert "sessions/plan.jsonl" in paths and "sessions/typo.jsonl" in paths, [h.citation for h in hits]


def test_a_future_stamp_does_not_end_the_timeline(tmp_path: Path) -> None:
    """One message stamped 2099 (a device's wrong clock) or a note named for a day to come ended
    the memory's timeline in the future, so "today" became the clock's and "yesterday" named a day
    nothing was said on; the memory's own last day (20 January 2024) is the end."""
    ws = tmp_path / "ws"
    _memory(ws)
    s = load_settings(None, {"workspace": str(ws), "provider": "none", "sources": ["memory", "sessions"]})
    run_index(s)
    conn = connect_reader(s.index_file)
    try:
        assert timeline_end(conn, today=date(2026, 11, 30)) == date(2024, 1, 20)
        # a day after the clock's tomorrow is left out; the clock's tomorrow (another time zone) is not
        assert timeline_end(conn, today=date(2099, 4, 30)) == date(2099, 5, 1)
        assert timeline_end(conn, today=date(2099, 4, 29)) == date(2031, 7, 1)
    finally:
        conn.close()
    with Searcher(s) as searcher:
        # the 19th says "dinner" four times, the 20th once: "yesterday" (the 20th) decides
        hits = searcher.search("what did we have for dinner yesterday?", max_results=3)
        assert hits and hits[0].path == "sessions/s0120.jsonl", [h.citation for h in hits]


def test_latest_day_leaves_out_days_to_come() -> None:
    days = [date(2024, 1, 19), date(2024, 1, 20), date(2099, 5, 1)]
    assert latest_day(days, today=date(2026, 11, 30)) == date(2024, 1, 20)
    assert latest_day(days, today=date(2099, 4, 30)) == date(2099, 5, 1)
    assert latest_day([date(2099, 5, 1)], today=date(2026, 11, 30)) is None
    assert latest_day([], today=date(2026, 11, 30)) is None
