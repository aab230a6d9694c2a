"""Chunk dates (daily notes, transcripts, other files) and queries that name a day."""

from __future__ import annotations

import os
import shutil
import time
from datetime import date, datetime, timedelta
from pathlib import Path

import pytest

from memory_core.config import load_settings
from memory_core.index.pipeline import run_index
from memory_core.query.dates import DateRange, chunk_date, query_date_range, transcript_dates
from memory_core.query.search import Searcher
from tests.conftest import EXAMPLES

TODAY = date(2026, 11, 26)  # a Thursday


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("what did we decide on 2026-09-04?", (date(2026, 9, 4), date(2026, 9, 4))),
        ("what did we decide on 4 December?", (date(2025, 12, 4), date(2025, 12, 4))),  # latest past one
        ("notes from Nov 2nd", (date(2026, 11, 2), date(2026, 11, 2))),
        ("September 4, 2026 incident", (date(2026, 9, 4), date(2026, 9, 4))),
        ("the 21st of October", (date(2026, 10, 21), date(2026, 10, 21))),
        ("what did I do yesterday?", (date(2026, 11, 25), date(2026, 11, 25))),
        ("the day before yesterday", (date(2026, 11, 24), date(2026, 11, 24))),
        ("today's standup", (TODAY, TODAY)),
        ("3 days ago", (date(2026, 11, 23), date(2026, 11, 23))),
        ("last week", (date(2026, 11, 19), date(2026, 11, 25))),
        ("this week", (date(2026, 11, 23), TODAY)),
        ("last month", (date(2026, 10, 1), date(2026, 10, 31))),
        ("on Monday", (date(2026, 11, 23), date(2026, 11, 23))),
        ("last Thursday", (date(2026, 11, 19), date(2026, 11, 19))),
        ("我5月4号做了什么菜？", (date(2026, 5, 4), date(2026, 5, 4))),  # Chinese month-day: MemoryBank cn
        ("4月27日我在公园跑了多久", (date(2026, 4, 27), date(2026, 4, 27))),
        ("2025年12月4日的会议", (date(2025, 12, 4), date(2025, 12, 4))),
    ],
)
def test_query_date_range(query: str, expected: tuple[date, date]) -> None:
    assert query_date_range(query, TODAY) == DateRange(*expected)


@pytest.mark.parametrize("query", ["replication lag", "may I ask", "2026-02-30", "31 February", "port 8080", "v1.2.3", "13月40日"])
def test_queries_without_a_day(query: str) -> None:
    assert query_date_range(query, TODAY) is None


def test_chunk_dates() -> None:
    session = str(EXAMPLES / "sessions" / "2026-11-02-rate-limit-review.jsonl")
    header, stamps = transcript_dates(session)
    assert header == "2026-11-02T15:20" and stamps[0] == (2, "2026-11-02T15:20")
    assert chunk_date("memory/2026-09-04.md", "memory", 1, 20, 0) == "2026-09-04"
    line, ts = stamps[-1]
    assert chunk_date("sessions/x.jsonl", "sessions", line, line, None, session) == ts
    # lines without a message timestamp fall back to the header
    assert chunk_date("sessions/x.jsonl", "sessions", 1, 1, None, session) == header
    mtime = int(datetime(2026, 3, 5, 12, 0).timestamp() * 1000)
    assert chunk_date("memory/projects/x.md", "memory", 1, 2, mtime) == "2026-03-05"
    assert chunk_date("MEMORY.md", "memory", 1, 2, None) is None


@pytest.fixture(scope="module")
def dated_index(tmp_path_factory: pytest.TempPathFactory):
    ws = tmp_path_factory.mktemp("dates") / "ws"
    shutil.copytree(EXAMPLES / "workspace", ws, ignore=shutil.ignore_patterns(".memory-core"))
    shutil.copytree(EXAMPLES / "sessions", ws / "sessions")
    yesterday = date.today() - timedelta(days=1)
    (ws / "memory" / f"{yesterday.isoformat()}.md").write_text(
        "## 09:10\n- Fixed the flaky checkout test; paired with Marcus on the retry budget.\n")
    old = time.time() - 400 * 86400  # undated notes last modified long ago
    for p in ws.rglob("*.md"):  # MEMORY.md too: its mtime (today) must not answer "yesterday"
        if not p.name[:4].isdigit():
            os.utime(p, (old, old))
    s = load_settings(None, {"workspace": str(ws), "provider": "none", "sources": ["memory", "sessions"]})
    run_index(s)
    return s, yesterday


def test_results_carry_their_date_and_transcript_snippets_show_it(dated_index) -> None:
    s, _ = dated_index
    with Searcher(s) as searcher:
        hits = searcher.search("GCRA Lua script review", max_results=10, min_score=0)
    dated = {h.path: h.date for h in hits}
    assert dated.get("memory/2026-09-10.md") == "2026-09-10"
    sess = [h for h in hits if h.source == "sessions"]
    assert sess and all(h.date and h.date.startswith("2026-11-02T") for h in sess)
    assert all(h.snippet.startswith(f"[{h.date.replace('T', ' ')} UTC] ") for h in sess)


def test_a_query_naming_a_day_prefers_that_day(dated_index) -> None:
    s, yesterday = dated_index
    with Searcher(s) as searcher:
        # the ingest incident: the daily note and the transcript of that day
        top = searcher.search("what broke on 2026-10-21?", max_results=4)
        assert top and all(h.date and h.date.startswith("2026-10-21") for h in top), [h.citation for h in top]
        assert {h.source for h in top} == {"memory", "sessions"}
        plain = searcher.search("what broke?", max_results=4, min_score=0)
        assert [h.citation for h in plain] != [h.citation for h in top]
        # "yesterday": the note written yesterday, found by its date alone
        if date.today() - timedelta(days=1) != yesterday:
            pytest.skip("midnight passed between indexing and searching")
        y = searcher.search("what did I do yesterday?")
        assert y and y[0].path == f"memory/{yesterday.isoformat()}.md" and y[0].match in ("date", "keyword")
        # the same words without a day do not find it
        assert all(h.path != y[0].path for h in searcher.search("what did I do?", min_score=0))
        # 2 November 2026: the rate-limit review transcript and the note of that day
        nov2 = searcher.search("what did we discuss on 2 November 2026", max_results=6)
        assert {"memory/2026-11-02.md", "sessions/2026-11-02-rate-limit-review.jsonl"} <= {h.path for h in nov2}


def test_dates_respect_the_source_filter(dated_index) -> None:
    s, _ = dated_index
    with Searcher(s) as searcher:
        hits = searcher.search("2026-10-21", sources=["memory"], min_score=0)
    assert hits and all(h.source == "memory" for h in hits)


def test_old_notes_still_found_with_decay(tmp_path: Path, dated_index) -> None:
    s, _ = dated_index
    decayed = s.model_copy(update={"query": s.query.model_copy(update={
        "temporal_decay": s.query.temporal_decay.model_copy(update={"enabled": True, "half_life_days": 7})})})
    with Searcher(decayed) as searcher:
        hits = searcher.search("pgbackrest restore point in time")  # a 400-day-old howto
    assert hits and hits[0].path == "memory/howto/restore-postgres-backup.md"


@pytest.mark.parametrize("query", ["deploy 9999-12-31", "deploy on 31 December 9999", "December 31, 9999 deploy",
                                   "0001-01-01 deploy", "1 January 0001 deploy", "0000-01-01 deploy"])
@pytest.mark.parametrize("mode", ["hybrid", "keyword"])
def test_dates_at_the_calendars_edge_never_crash_a_search(dated_index, query: str, mode: str) -> None:
    """issue 22 #7: the day after 9999-12-31 (or local midnight of 0001-01-01) does not exist:
    such a query crashed search in every mode; now it is searched as plain words."""
    s, _ = dated_index
    assert query_date_range(query) is None
    with Searcher(s) as searcher:
        assert searcher.search(query, mode=mode, min_score=0)


def test_a_deeply_nested_transcript_record_never_crashes_a_search(tmp_path: Path) -> None:
    """issue 22 #7: a record nested ~1,200 deep mentioning `timestamp` raised RecursionError in
    transcript_dates, crashing every search that returned the transcript."""
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    (ws / "sessions").mkdir()
    deep = '{"timestamp": "2026-05-01T10:00:00Z", "x": ' + "[" * 5000 + "]" * 5000 + "}"
    msg = ('{"type": "message", "timestamp": "2026-05-02T11:00:00Z", "message": {"role": "user",'
           ' "content": "the walrus migration plan"}}')
    (ws / "sessions" / "s.jsonl").write_text(deep + "\n" + msg + "\n")
    s = load_settings(None, {"workspace": str(ws), "provider": "none", "sources": ["memory", "sessions"]})
    run_index(s)
    header, stamps = transcript_dates(str(ws / "sessions" / "s.jsonl"))
    assert stamps == [(2, "2026-05-02T11:00")]
    with Searcher(s) as searcher:
        hits = searcher.search("walrus migration plan", min_score=0)
        assert hits and hits[0].date == "2026-05-02T11:00"
        assert searcher.search("walrus migration on 2026-05-02", min_score=0)


def test_a_day_of_more_than_200_changed_chunks_lifts_the_same_ones_however_the_index_was_built(tmp_path: Path) -> None:
    """A query naming a day adds the chunks of files modified that day (at most
    MAX_DATED_CANDIDATES). Which ones, when more were: the first by path and line, not the first
    the table happens to return, which after incremental runs is another set than after a full
    build of the same files."""
    day = datetime(2026, 10, 5, 12, 0).timestamp()

    def write(ws: Path, numbers: range) -> None:
        (ws / "memory" / "projects").mkdir(parents=True, exist_ok=True)
        for i in numbers:
            p = ws / "memory" / "projects" / f"p{i:03d}.md"
            p.write_text(f"# Item {i}\n\nStep {i} of the migration checklist.\n")
            os.utime(p, (day, day))

    answers = []
    for order in ([range(0, 300)], [range(150, 300), range(0, 150)]):  # a full build; two runs
        ws = tmp_path / f"ws{len(answers)}"
        s = load_settings(None, {"workspace": str(ws), "provider": "none"})
        for numbers in order:
            write(ws, numbers)
            run_index(s)
        with Searcher(s) as searcher:
            answers.append([(h.path, h.score) for h in searcher.search("what changed on 2026-10-05", max_results=300,
                                                                       min_score=0)])
    assert answers[0] == answers[1] and len(answers[0]) >= 200
