"""Note windows: a note's chunk is also embedded in overlapping windows of 4 of its lines, and its
vector relevance is its best vector's (``chunking.note_windows``). Real SQLite, the real local model."""

from __future__ import annotations

from pathlib import Path

import apsw
import numpy as np
import pytest

from memory_core.config import Settings, load_settings
from memory_core.index.chunking import note_items, note_windows
from memory_core.index.pipeline import run_index
from memory_core.query.search import Searcher
from memory_core.storage import store, vectors
from memory_core.storage.indexmeta import NOTE_WINDOWS_VERSION
from tests.conftest import forget_meta_key, model_cosines

pytest.importorskip("sentence_transformers")

JOURNAL = [
    "# 2026-10-05", "", "- 08:52 standup moved to ten, Dana wants the open tickets first",
    "- oat milk x2, eggs, limes, two avocados", "- Jenkins disk full again, Owen cleared old workspaces",
    "- the dentist rescheduled the filling to next Thursday", "- watched half of the heist film, too slow",
    "- Sold my old road bike on Saturday, the buyer paid 180 euros in cash",
    "- tomato seedlings look leggy, they want more light", "- budget spreadsheet formula broken in column F",
    "- ran nine kilometres, knee felt fine", "- Mum's birthday dinner is at the Thai place on Friday",
    "- renew the parking permit before the end of the month",
]
QUERY = "How much did I get for the bicycle I sold?"


def test_a_notes_lines_are_windowed_four_at_a_time_unless_it_is_code() -> None:
    lines = [f"- item {i}" for i in range(7)]
    assert note_windows("\n".join(lines)) == ["\n".join(lines[0:4]), "\n".join(lines[2:6]), "\n".join(lines[3:7])]
    assert note_windows("# Title\n\n- one\n- two\n\n- three\n") == []  # 4 non-empty lines: the chunk is the window
    assert note_windows("- a\n\n- b\n- c\n\n- d\n- e") == ["- a\n- b\n- c\n- d", "- b\n- c\n- d\n- e"]
    code = "def other_ind(self):\n    x = 1\n    y = 2\n    return np.full(x, y)\n    pass\n"
    assert note_windows(code) == []  # indented code: not read a line at a time
    fenced = "Setup:\n```\nline one\nline two\nline three\nline four\n```\n"
    assert note_windows(fenced) == []
    mostly_prose = "\n".join([*(f"- note {i}" for i in range(6)), "```", "x = 1", "```"])
    assert len(note_windows(mostly_prose)) == 4  # 9 lines, 3 of them code: windows at 0, 2, 4 and 5


WRAPPED = """The tasks are fused into a single task that will execute the tasks in a
subgraph. The internal tasks are no longer accessible from the outside, and
every dependency of the subgraph is preserved when the fused task runs, so
the graph stays valid.

All provided tasks must form a valid subgraph that will reduce to a single
key. If the tasks do not form a valid subgraph an exception is raised when
the fused task is built."""


def test_a_paragraph_wrapped_over_lines_is_one_item_and_a_list_keeps_its_lines() -> None:
    """Windows cut a hard-wrapped paragraph mid-sentence: its lines are one item, so a chunk of
    two such paragraphs (7 lines) has no windows (before: 3 windows of line fragments)."""
    assert note_items(WRAPPED) == [WRAPPED.split("\n\n")[0], WRAPPED.split("\n\n")[1]]
    assert note_windows(WRAPPED) == []
    bullets = ["- Shadow mode first, two weeks minimum: compute the decision, emit metrics and",
               "  log, but never reject a request.", "- Limit per API key, not per IP.",
               "- 429 with Retry-After", "  in seconds", "08:52 standup moved", "Kate: see you at ten",
               "  1. numbered.", "a lower-case line after a sentence's end is its own"]
    items = note_items("\n".join(bullets))
    assert items == ["\n".join(bullets[0:2]), bullets[2], "\n".join(bullets[3:5]), bullets[5], bullets[6],
                     bullets[7], bullets[8]]
    # a heading underlined (setext) is one item with its underline; a doctest one item up to a blank line
    doc = ["Explanation", "===========", "Two pure quaternions are orthogonal.", "Parameters", "----------",
           "other : a Quaternion", "", "Examples", "--------", ">>> q = Quaternion(1, 2)", "... ", ">>> q.norm()", "5"]
    assert note_items("\n".join(doc)) == ["Explanation\n===========", doc[2], "Parameters\n----------", doc[5],
                                           "Examples\n--------", "\n".join(doc[9:])]
    chat = [f"{who}: message number {i} about the gig" for i, who in enumerate(["Ben", "Kate", "Jorge"] * 3)]
    assert note_items("\n".join(chat)) == chat  # a chat written down: one item a line, as before
    assert note_windows("\n".join(chat)) == note_windows_of_lines(chat)


def note_windows_of_lines(lines: list[str]) -> list[str]:
    from memory_core.sources.sessions import message_windows

    return message_windows(lines)


def test_an_index_of_line_windows_is_rebuilt_once_for_item_windows(tmp_path: Path) -> None:
    import json

    ws = _workspace(tmp_path / "ws")
    s = _settings(ws)
    run_index(s)
    conn = store.connect(s.index_file)
    try:  # as an index of the first note windows (version 1: a window of 4 lines)
        meta = json.loads(conn.execute("SELECT value FROM meta WHERE key = ?", (store.META_KEY,)).fetchone()[0])
        meta["note_windows"] = 1
        conn.execute("UPDATE meta SET value = ? WHERE key = ?", (json.dumps(meta), store.META_KEY))
    finally:
        conn.close()
    again = run_index(s)
    assert again.full and "note windows changed" in again.full_reason
    assert not run_index(s).full


def _settings(ws: Path, **chunking: object) -> Settings:
    return load_settings(None, {"workspace": str(ws), "provider": "local", "sources": ["memory"],
                                "chunking": chunking})


def _workspace(root: Path) -> Path:
    (root / "memory").mkdir(parents=True)
    (root / "MEMORY.md").write_text("# Memory\n\n- Prefers short answers.\n")
    (root / "memory" / "2026-10-05.md").write_text("\n".join(JOURNAL) + "\n")
    return root


def test_a_journal_line_is_found_through_its_window(tmp_path: Path) -> None:
    """One chunk of twelve unrelated lines: its one vector is a blur of them. With note windows the
    chunk's cosine is the best of its windows', each computed here from the model itself."""
    on, off = _settings(_workspace(tmp_path / "on")), _settings(_workspace(tmp_path / "off"), note_windows=False)
    run_index(on)
    run_index(off)
    conn = apsw.Connection(str(on.index_file), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        texts = [r[0] for r in conn.execute("SELECT text FROM chunks WHERE path = 'memory/2026-10-05.md'")]
        n_parts = int(conn.execute(f"SELECT count(*) FROM {vectors.PARTS_TABLE}").fetchone()[0])
    finally:
        conn.close()
    (text,) = [t for t in texts if "road bike" in t]
    lines = [ln for ln in text.split("\n") if ln.strip()]
    assert len(lines) >= 10
    starts = list(range(0, len(lines) - 3, 2))
    starts += [len(lines) - 4] if starts[-1] != len(lines) - 4 else []
    windows = ["\n".join(lines[a:a + 4]) for a in starts]
    assert note_windows(text) == windows and n_parts == sum(len(note_windows(t)) for t in texts)
    cos = model_cosines(on, QUERY, windows)
    best = int(np.argmax(cos))
    assert "road bike" in windows[best]
    with Searcher(on) as a, Searcher(off) as b:
        with_windows = a.search(QUERY, mode="vector", min_score=0)[0]
        without = b.search(QUERY, mode="vector", min_score=0)[0]
        assert with_windows.path == without.path == "memory/2026-10-05.md"
        assert with_windows.vector_score == pytest.approx(float(cos[best]), abs=1e-4)
        assert with_windows.vector_score > without.vector_score + 0.05
        # the result is still the chunk: the same citation either way
        assert with_windows.citation == without.citation


def test_an_index_without_note_windows_is_rebuilt_once_and_says_why(tmp_path: Path) -> None:
    ws = _workspace(tmp_path / "ws")
    s = _settings(ws)
    run_index(s)
    assert forget_meta_key(s.index_file, "note_windows") == NOTE_WINDOWS_VERSION  # as an index built before them
    again = run_index(s)
    assert again.full and "note windows turned on" in again.full_reason
    assert not run_index(s).full
    off = run_index(_settings(ws, note_windows=False))
    assert off.full and "note windows turned off" in off.full_reason
    conn = apsw.Connection(str(s.index_file), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        assert int(conn.execute(f"SELECT count(*) FROM {vectors.PARTS_TABLE}").fetchone()[0]) == 0
    finally:
        conn.close()


def test_unset_note_windows_are_on_with_the_local_model_only() -> None:
    """A hosted provider's 400-token chunks hold about 30 lines: windows would bill about 14 more
    inputs a chunk, so unset means the local model only; a setting decides for every provider."""
    from types import SimpleNamespace

    from memory_core.storage.indexmeta import note_windows_on

    local = SimpleNamespace(on_machine=True, has_vectors=True)
    hosted = SimpleNamespace(on_machine=False, has_vectors=True)
    unset = load_settings(None, {"workspace": "/tmp", "provider": "local"})
    assert note_windows_on(unset, local) and not note_windows_on(unset, hosted)  # type: ignore[arg-type]
    on = load_settings(None, {"workspace": "/tmp", "chunking": {"note_windows": True}})
    off = load_settings(None, {"workspace": "/tmp", "chunking": {"note_windows": False}})
    assert note_windows_on(on, hosted) and not note_windows_on(off, local)  # type: ignore[arg-type]
