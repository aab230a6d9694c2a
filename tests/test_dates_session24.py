"""Questions about days the twenty-third session's audit 2 found read wrongly or not at all:
"this Saturday" in a question about plans was the Saturday gone; "on Tuesday last week" was the
whole week before; "a fortnight ago", "at Christmas", "on New Year's Eve" read no day. Each
reading test fails on the code before (the search test too: the Saturday gone was lifted)."""

from __future__ import annotations

from datetime import date
from pathlib import Path

import pytest

from memory_core.config import load_settings
from memory_core.index.pipeline import run_index
from memory_core.query.dates import mentions, query_date_range
from memory_core.query.search import Searcher
from tests.test_conversation_dates import _session  # (ISO UTC stamp, role, text) messages
from tests.test_dates_audit23 import ordinary_evenings

WEDNESDAY = date(2026, 11, 25)  # the question is asked on Wednesday 25 November


@pytest.mark.parametrize(("query", "start", "end"), [
    # "this <weekday>": the coming one in a question that may look ahead, the one gone in the past tense
    ("what are we doing this Saturday?", date(2026, 11, 28), date(2026, 11, 28)),
    ("what is happening this Saturday?", date(2026, 11, 28), date(2026, 11, 28)),
    ("this Wednesday?", date(2026, 11, 25), date(2026, 11, 25)),  # today's, on a Wednesday
    ("what did we do this Saturday?", date(2026, 11, 21), date(2026, 11, 21)),
    # a weekday of a named calendar week (weeks begin on Monday)
    ("what did I say on Tuesday last week?", date(2026, 11, 17), date(2026, 11, 17)),
    ("what did I say last week on Tuesday?", date(2026, 11, 17), date(2026, 11, 17)),
    ("what did Kate say Friday of last week?", date(2026, 11, 20), date(2026, 11, 20)),
    ("what is on Tuesday next week?", date(2026, 12, 1), date(2026, 12, 1)),
    ("what was on Monday this week?", date(2026, 11, 23), date(2026, 11, 23)),
    # as "two weeks ago": about then
    ("what did we talk about a fortnight ago?", date(2026, 11, 8), date(2026, 11, 14)),
    # a holiday named as when something was: the latest one (or, asked ahead, the coming one)
    ("what did we do at Christmas?", date(2025, 12, 25), date(2025, 12, 25)),
    ("what did we eat on Christmas Eve 2024?", date(2024, 12, 24), date(2024, 12, 24)),
    ("what happened on New Year's Eve?", date(2025, 12, 31), date(2025, 12, 31)),
    ("who came over on boxing day?", date(2025, 12, 26), date(2025, 12, 26)),
])
def test_days_a_question_names(query: str, start: date, end: date) -> None:
    got = query_date_range(query, WEDNESDAY)
    assert got is not None and (got.start, got.end) == (start, end), got


def test_a_holiday_asked_about_ahead_is_the_coming_one() -> None:
    got = query_date_range("what are we doing at Christmas?", date(2026, 12, 10))
    assert got is not None and got.start == date(2026, 12, 25)


@pytest.mark.parametrize("query", [
    "what are we getting Kate for Christmas?",  # what a present is for: talked about before the day
    "the christmas tree lights broke", "last week was a fortnight of rain",
])
def test_words_that_name_no_such_day(query: str) -> None:
    got = query_date_range(query, WEDNESDAY)
    assert got is None or got.phrase in ("last week",), got


def test_a_message_planning_this_saturday_mentions_the_coming_one() -> None:
    """In a text: "see you this Saturday" written on Wednesday 25 November names the 28th (a plan);
    "we climbed this Saturday" written on Sunday the 29th names the 28th too (the one just gone)."""
    saturday = query_date_range("on 28 November 2026", WEDNESDAY)
    assert saturday is not None
    assert mentions("see you this Saturday at the climbing gym", WEDNESDAY, saturday)
    assert mentions("we climbed this Saturday, great session", date(2026, 11, 29), saturday)
    assert not mentions("we climbed this Saturday, great session", WEDNESDAY, saturday)


def test_a_question_about_this_saturday_finds_the_plan_not_last_saturdays_talk(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / "sessions").mkdir(parents=True)
    _session(ws / "sessions" / "sat21.jsonl", [  # last Saturday: an ordinary day's talk
        ("2026-11-21T10:00:00Z", "user", "Kate: we are doing nothing much, just the laundry."),
        ("2026-11-21T10:01:00Z", "assistant", "A quiet Saturday then."),
    ])
    _session(ws / "sessions" / "plan.jsonl", [  # Tuesday: the plan for the coming Saturday
        ("2026-11-24T18:00:00Z", "user", "Kate: this Saturday we are doing the climbing gym with Jorge."),
        ("2026-11-24T18:01:00Z", "assistant", "Noted: climbing gym on the 28th."),
    ])
    s = load_settings(None, {"workspace": str(ws), "provider": "none", "sources": ["sessions"]})
    run_index(s)
    with Searcher(s) as searcher:  # the memory ends on Tuesday the 24th: "today" is Wednesday the 25th
        hits = searcher.search("what are we doing this Saturday?", max_results=2)
    assert hits and hits[0].path == "sessions/plan.jsonl", [(h.citation, h.score) for h in hits]


def test_a_yearless_day_asked_in_the_past_tense_is_the_coming_one_when_memory_holds_nothing_near_the_last() -> None:
    """Asked on 30 November of a memory that began in October, "what did Kate say about 12
    December?" named 12 December of last year, a day memory holds nothing of; the party Kate talked
    about is the coming one (within QUERY_AHEAD_DAYS). A memory that holds last December keeps it;
    so does a day further ahead than that, and a day of the month alone (the 12th: it looks back)."""
    from datetime import timedelta

    today = date(2026, 11, 30)
    autumn = [date(2026, 10, 1) + timedelta(days=i) for i in range(60)]
    years = [date(2025, 9, 1) + timedelta(days=i) for i in range(450)]
    for q in ("what did Kate say about 12 December?", "what happened on 12/12?", "what did we decide for Dec 12th?"):
        got = query_date_range(q, today, timeline=autumn)
        assert got is not None and got.start == date(2026, 12, 12), (q, got)
        got = query_date_range(q, today, timeline=years)
        assert got is not None and got.start == date(2025, 12, 12), (q, got)
        held = query_date_range(q, today, days_in=lambda lo, hi: lo <= date(2025, 12, 12) <= hi)
        assert held is not None and held.start == date(2025, 12, 12), (q, held)
    assert query_date_range("what happened on 3 March?", today, timeline=autumn).start == date(2026, 3, 3)
    assert query_date_range("what did we do on the 12th?", today, timeline=autumn).start == date(2026, 11, 12)
    assert query_date_range("what happened on 12 December 2025?", today, timeline=autumn).start == date(2025, 12, 12)
    assert query_date_range("what did Kate say about 12 December?", today).start == date(2025, 12, 12)  # no timeline


def test_a_question_about_a_coming_day_finds_the_message_that_planned_it(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / "sessions").mkdir(parents=True)
    _session(ws / "sessions" / "plan.jsonl", [
        ("2026-11-20T18:00:00Z", "user", "Kate: the office party is on 12 December at the boathouse."),
        ("2026-11-20T18:01:00Z", "assistant", "Noted."),
    ])
    ordinary_evenings(ws, (10, 14, 18, 24, 27), "party games on TV")
    s = load_settings(None, {"workspace": str(ws), "provider": "none", "sources": ["sessions"]})
    run_index(s)
    with Searcher(s) as searcher:
        hits = searcher.search("what did Kate say about the party on 12 December?", max_results=2)
    assert hits and hits[0].path == "sessions/plan.jsonl", [(h.citation, h.score) for h in hits]


@pytest.mark.parametrize("provider", ["none", "local"])
def test_a_holiday_memory_holds_nothing_of_yet_is_searched_as_its_word(tmp_path: Path, provider: str) -> None:
    """"what are we doing at Christmas?" asked in November names 25 December, which memory holds
    nothing of yet (no message written then, none naming the day by its date). Its words were
    taken out to match by date all the same, so the question searched "what are we doing" (stop
    words: nothing) and the plan that says "Christmas" was not found. Now the query is searched
    again with every word when memory holds nothing of the day it names."""
    ws = tmp_path / "ws"
    (ws / "sessions").mkdir(parents=True)
    _session(ws / "sessions" / "plan.jsonl", [
        ("2026-11-20T18:00:00Z", "user", "We're doing Christmas at my mum's this year, I'll bring the pudding."),
        ("2026-11-20T18:01:00Z", "assistant", "Noted: Christmas at your mum's, with the pudding."),
    ])
    ordinary_evenings(ws, (22, 23, 24, 25), "the garden this weekend")
    s = load_settings(None, {"workspace": str(ws), "provider": provider, "sources": ["sessions"]})
    run_index(s)
    with Searcher(s) as searcher:
        cands = searcher.retrieve("what are we doing at Christmas?", searcher.candidate_count(2))
        assert cands.dates is None  # ranked as a query naming no day
        hits = searcher.search("what are we doing at Christmas?", max_results=2)
    assert hits and hits[0].path == "sessions/plan.jsonl", [(h.citation, h.score) for h in hits]
    if provider == "local":  # the embedded LanceDB export searches it the same way
        pytest.importorskip("lancedb")
        from memory_core.export.lancedb import export_lancedb
        from memory_core.query.lancedb import LanceSearcher

        export_lancedb(s.index_file, str(tmp_path / "lance"))
        with LanceSearcher(s, str(tmp_path / "lance")) as ls:
            assert ls.retrieve("what are we doing at Christmas?", 12).dates is None
            hits = ls.search("what are we doing at Christmas?", max_results=2)
        assert hits and hits[0].path == "sessions/plan.jsonl", [(h.citation, h.score) for h in hits]
