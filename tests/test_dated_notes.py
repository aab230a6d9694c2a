"""Dated notes beyond the seeds' ``memory/YYYY-MM-DD.md``: a note named for its day alone in any
subfolder (``memory/work/2024-01-17.md``); a name that starts with the day in ``memory/`` or in
year, month or journal folders (``memory/2024-01-17-vendor-pitch.md``, as a session's summary is
often named; ``memory/daily/2024-01-17_standup.md``); year and month folders
(``memory/2024/01/17.md``). Each is that day's note for a question naming the day, for the
memory's timeline ("yesterday", "our first conversation") and for temporal decay; before, each
was undated (evergreen, dated by its modification time). A reference note named for a date in
another folder (``memory/people/1990-05-17 alice birthday.md``) stays undated (the twenty-second
session's audit: it became "our first conversation")."""

from __future__ import annotations

import os
from datetime import date
from pathlib import Path

import pytest

from memory_core.config import load_settings
from memory_core.index.pipeline import run_index
from memory_core.query.dates import (
    conversation_days,
    date_from_path,
    dated_notes,
    is_evergreen,
    memory_has_days,
    timeline_end,
)
from memory_core.query.search import Searcher
from memory_core.storage.store import connect_reader


@pytest.mark.parametrize(("path", "expected"), [
    ("memory/2024-01-17.md", date(2024, 1, 17)),  # the seeds' daily note
    ("memory/2024-01-17-vendor-pitch.md", date(2024, 1, 17)),
    ("memory/2024-01-17_standup.md", date(2024, 1, 17)),
    ("memory/2024-01-17 standup.md", date(2024, 1, 17)),
    ("memory/daily/2024-01-17.md", date(2024, 1, 17)),
    ("memory/work/2024-01-17.md", date(2024, 1, 17)),  # a day's name alone: any folder
    ("memory/Journal/2024-01-17-call.md", date(2024, 1, 17)),
    ("memory/2024/2024-01-17-call.md", date(2024, 1, 17)),
    ("memory/2024-01/2024-01-17 retro.md", date(2024, 1, 17)),
    ("memory/2024/01/17.md", date(2024, 1, 17)),
    ("memory/2024/01/17-retro.md", date(2024, 1, 17)),
    ("memory/log/2024/01/17.md", date(2024, 1, 17)),
    ("ws/memory/daily/2024-02-29.md", date(2024, 2, 29)),
    ("/ext/memory/2024-01-17-call.md", date(2024, 1, 17)),  # an extra path's memory folder
    ("memory\\daily\\2024-01-17.md", date(2024, 1, 17)),
    # undated
    ("memory/people/1990-05-17 alice birthday.md", None),  # a reference note named for a date
    ("memory/reference/2019-06-01-company-policy.md", None),
    ("memory/clients/1234/05/06.md", None),  # an id's folders, not a calendar
    ("memory/0042/03/12.md", None),
    ("memory/2024-01-170.md", None),  # digits after the day: not a day
    ("memory/2024-01-17.5.md", None),
    ("memory/2024-01-17.md.md", None),
    ("memory/2024-01-1.md", None),
    ("memory/notes-2024-01-17.md", None),  # the day elsewhere in the name
    ("memory/daily/2024-02-30.md", None),  # no such day
    ("memory/2024/13/01.md", None),
    ("memory/2024/01/17/notes.md", None),
    ("memory/2024-01-17-vendor-pitch.txt", None),
    ("memory/\u0662\u0660\u0662\u0664-\u0660\u0661-\u0661\u0667.md", None),  # digits of another script
    ("notes/daily/2024-01-17.md", None),  # not under a memory folder
    ("memory/people/alice.md", None),
])
def test_which_notes_are_dated(path: str, expected: date | None) -> None:
    assert date_from_path(path) == expected
    if path.startswith("memory/"):  # a dated note decays (when decay is on); an undated one is evergreen
        assert is_evergreen(path) is (expected is None)


def _note(ws: Path, rel: str, text: str, mtime: float) -> None:
    p = ws / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text, encoding="utf-8")
    os.utime(p, (mtime, mtime))


LATE = 1_790_000_000.0  # every note last touched in 2026 (a sync, a copy): only its name dates it


@pytest.fixture
def memory(tmp_path: Path):  # type: ignore[no-untyped-def]
    ws = tmp_path / "ws"
    _note(ws, "memory/daily/2024-01-15.md", "# Monday\n\n- Dinner at the Thai place on Elm Street.\n", LATE)
    _note(ws, "memory/2024-01-16-vendor-pitch.md",
          "# Vendor pitch\n\n- Acme pitched their dinner booking tool; too pricey.\n", LATE)
    _note(ws, "memory/2024/01/17.md", "# Wednesday\n\n- Dinner with Kate, she starts pottery classes.\n", LATE)
    _note(ws, "memory/projects.md", "# Projects\n\n- Dinner planner app: idea only.\n", LATE)
    # a reference note named for a date long ago: no conversation of that day
    _note(ws, "memory/people/1990-05-17 alice birthday.md", "# Alice\n\n- Born 17 May 1990, likes dinner parties.\n",
          LATE)
    s = load_settings(None, {"workspace": str(ws), "provider": "none", "sources": ["memory"]})
    run_index(s)
    return s


def test_dated_notes_make_the_memorys_timeline(memory) -> None:  # type: ignore[no-untyped-def]
    conn = connect_reader(memory.index_file)
    try:
        assert dated_notes(conn) == [
            (date(2024, 1, 15), "memory/daily/2024-01-15.md"),
            (date(2024, 1, 16), "memory/2024-01-16-vendor-pitch.md"),
            (date(2024, 1, 17), "memory/2024/01/17.md"),
        ]
        assert conversation_days(conn) == [date(2024, 1, 15), date(2024, 1, 16), date(2024, 1, 17)]
        assert timeline_end(conn, today=date(2026, 11, 30)) == date(2024, 1, 17)
        assert memory_has_days(conn, date(2024, 1, 16), date(2024, 1, 16))
        assert not memory_has_days(conn, date(2024, 1, 18), date(2024, 2, 1))
    finally:
        conn.close()


@pytest.mark.parametrize(("query", "path"), [
    ("what about dinner on 15 January?", "memory/daily/2024-01-15.md"),
    ("what did we say about dinner on 16 January?", "memory/2024-01-16-vendor-pitch.md"),
    ("dinner on 17 January", "memory/2024/01/17.md"),
    # "yesterday" is the day before the memory's "today", the day after its last note (the 17th)
    ("who did I have dinner with yesterday?", "memory/2024/01/17.md"),
    ("what did I note the day before yesterday?", "memory/2024-01-16-vendor-pitch.md"),
    # the first conversation is the first dated note's, not the birthday's of 1990
    ("what was our first conversation about?", "memory/daily/2024-01-15.md"),
])
def test_a_question_naming_a_day_finds_that_days_note(memory, query: str, path: str) -> None:  # type: ignore[no-untyped-def]
    with Searcher(memory) as searcher:
        hits = searcher.search(query, max_results=3)
    assert hits and hits[0].path == path, [(h.path, h.score) for h in hits]
    assert hits[0].date == date_from_path(path).isoformat()  # type: ignore[union-attr]  # the day it shows


def test_a_dated_note_of_an_extra_path_is_found_for_its_day(tmp_path: Path) -> None:
    """The audit's: a dated note reached through ``extra_paths`` (outside the workspace) was dated
    by its name but fetched for a named day only from the workspace's ``memory/``, so nothing found
    it (before the change it was found by its modification day)."""
    ws, ext = tmp_path / "ws", tmp_path / "ext"
    _note(ws, "MEMORY.md", "# Memory\n\n- Nothing dated here.\n", LATE)
    _note(ext, "memory/2024-01-17-call.md", "# Call\n\n- Talked to the landlord about the boiler.\n", LATE)
    _note(ext, "memory/2024-01-18.md", "# Thursday\n\n- Groceries.\n", LATE)
    s = load_settings(None, {"workspace": str(ws), "provider": "none", "sources": ["memory"],
                             "extra_paths": [str(ext / "memory")]})
    run_index(s)
    with Searcher(s) as searcher:
        hits = searcher.search("what happened on 17 January 2024?", max_results=3)
    assert hits and hits[0].path.endswith("memory/2024-01-17-call.md"), [h.path for h in hits]


def test_a_long_range_over_many_dated_notes(tmp_path: Path) -> None:
    """The audit's: every dated note of a long range went into one ``IN (...)`` (past SQLite's
    variables per statement on some builds); the notes of the range's first 62 days are fetched, in
    statements of at most 500 paths, as the seeds' daily notes were."""
    ws = tmp_path / "ws"
    for i in range(1, 29):
        for k in range(40):  # 40 notes a day in a journal folder
            _note(ws, f"memory/daily/2012-02-{i:02d}-{k:02d}.md", f"# Note {k}\n\n- Item {i} {k}.\n", LATE)
    s = load_settings(None, {"workspace": str(ws), "provider": "none", "sources": ["memory"]})
    run_index(s)
    with Searcher(s) as searcher:
        hits = searcher.search("what happened in February 2012?", max_results=5)
    assert len(hits) == 5 and all(h.path.startswith("memory/daily/2012-02-") for h in hits), [h.path for h in hits]


def test_a_long_lived_reader_sees_a_new_dated_note(tmp_path: Path) -> None:
    """The dated notes are kept per connection until the index changes: a searcher open across a
    run that adds a note (committed on the live file or swapped in) reads the new note's day for
    the timeline ("yesterday") and for the named day."""
    ws = tmp_path / "ws"
    _note(ws, "memory/daily/2024-01-15.md", "# Monday\n\n- Dinner at the Thai place.\n", LATE)
    s = load_settings(None, {"workspace": str(ws), "provider": "none", "sources": ["memory"]})
    run_index(s)
    with Searcher(s) as searcher:
        before = searcher.search("what did I have for dinner yesterday?", max_results=3)
        assert before and before[0].path == "memory/daily/2024-01-15.md"  # "today" is the 16th
        _note(ws, "memory/daily/2024-01-16.md", "# Tuesday\n\n- Dinner: leftovers again.\n", LATE)
        run_index(s)
        after = searcher.search("what did I have for dinner yesterday?", max_results=3)
        assert after and after[0].path == "memory/daily/2024-01-16.md", [h.path for h in after]
        named = searcher.search("dinner on 16 January 2024", max_results=3)
        assert named and named[0].path == "memory/daily/2024-01-16.md"


def test_the_kept_dated_notes_follow_a_commit_on_the_live_file(tmp_path: Path) -> None:
    """A small change commits in place on the live file: a reader's connection stays open on it,
    and its kept list of dated notes is read again (``PRAGMA data_version`` moved)."""
    ws = tmp_path / "ws"
    for i in range(1, 30):
        _note(ws, f"memory/daily/2024-01-{i:02d}.md", f"# Day {i}\n\n" + f"- note {i} about the garden.\n" * 5, LATE)
    s = load_settings(None, {"workspace": str(ws), "provider": "none", "sources": ["memory"]})
    run_index(s)
    conn = connect_reader(s.index_file)
    try:
        assert len(dated_notes(conn)) == 29
        _note(ws, "memory/daily/2024-01-30.md", "# Day 30\n\n- new.\n", LATE)
        assert run_index(s).published == "in place"  # the same file, the same open connection
        assert dated_notes(conn)[-1] == (date(2024, 1, 30), "memory/daily/2024-01-30.md")
    finally:
        conn.close()
