"""Dated notes beyond the seeds' ``memory/YYYY-MM-DD.md``: a name that starts with the day
(``memory/2024-01-17-vendor-pitch.md``, as a session's summary is often named), a subfolder
(``memory/daily/2024-01-17.md``) and year and month folders (``memory/2024/01/17.md``). Each is
that day's note for a question naming the day, for the memory's timeline ("yesterday") and for
temporal decay; before, each was undated (evergreen, dated by its modification time)."""

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
    is_evergreen,
    memory_has_days,
    other_dated_notes,
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
    ("memory/journal/2024/2024-01-17-call.md", date(2024, 1, 17)),
    ("memory/2024/01/17.md", date(2024, 1, 17)),
    ("memory/2024/01/17-retro.md", date(2024, 1, 17)),
    ("memory/log/2024/01/17.md", date(2024, 1, 17)),
    ("ws/memory/daily/2024-02-29.md", date(2024, 2, 29)),
    ("memory\\daily\\2024-01-17.md", date(2024, 1, 17)),
    # undated
    ("memory/2024-01-170.md", None),  # digits after the day: not a day
    ("memory/2024-01-1.md", None),
    ("memory/notes-2024-01-17.md", None),  # the day elsewhere in the name
    ("memory/daily/2024-02-30.md", None),  # no such day
    ("memory/2024/13/01.md", None),
    ("memory/2024/01/17/notes.md", None),
    ("memory/2024-01-17-vendor-pitch.txt", None),
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


@pytest.fixture
def memory(tmp_path: Path):  # type: ignore[no-untyped-def]
    ws = tmp_path / "ws"
    late = 1_790_000_000.0  # every note last touched in 2026 (a sync, a copy): only its name dates it
    _note(ws, "memory/daily/2024-01-15.md", "# Monday\n\n- Dinner at the Thai place on Elm Street.\n", late)
    _note(ws, "memory/2024-01-16-vendor-pitch.md",
          "# Vendor pitch\n\n- Acme pitched their dinner booking tool; too pricey.\n", late)
    _note(ws, "memory/2024/01/17.md", "# Wednesday\n\n- Dinner with Kate, she starts pottery classes.\n", late)
    _note(ws, "memory/projects.md", "# Projects\n\n- Dinner planner app: idea only.\n", late)
    s = load_settings(None, {"workspace": str(ws), "provider": "none", "sources": ["memory"]})
    run_index(s)
    return s


def test_dated_notes_make_the_memorys_timeline(memory) -> None:  # type: ignore[no-untyped-def]
    conn = connect_reader(memory.index_file)
    try:
        assert sorted(other_dated_notes(conn)) == [
            ("memory/2024-01-16-vendor-pitch.md", date(2024, 1, 16)),
            ("memory/2024/01/17.md", date(2024, 1, 17)),
            ("memory/daily/2024-01-15.md", date(2024, 1, 15)),
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
])
def test_a_question_naming_a_day_finds_that_days_note(memory, query: str, path: str) -> None:  # type: ignore[no-untyped-def]
    with Searcher(memory) as searcher:
        hits = searcher.search(query, max_results=3)
    assert hits and hits[0].path == path, [(h.path, h.score) for h in hits]
    assert hits[0].date == date_from_path(path).isoformat()  # type: ignore[union-attr]  # the day it shows
