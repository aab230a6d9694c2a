"""A user outside UTC: transcript days are the days the user lived, in this machine's zone.

OpenClaw stamps every message in UTC (``...Z``). In Tokyo a message sent at 08:45 on the 16th is
stamped 23:45 on the 15th, so "what did Kate say this morning?" found nothing before 09:00 local
(the twenty-third session's audit 2). Now a message in UTC (or an epoch) counts for its day in the
process's zone (``TZ``, else the system's), a message with another explicit offset for its own day
and its UTC day (as before), and an index records the zone it read days in: a run in another zone
re-reads every transcript once for its days. In UTC nothing changes. Real index (SQLite, FTS5),
real pipeline, the process's zone set with ``TZ`` (POSIX zone strings: no tz database needed).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from memory_core.config import Settings, load_settings
from memory_core.index.pipeline import run_index
from memory_core.query.search import Searcher
from memory_core.sources.freshness import dirty_state
from memory_core.sources.sessions import chunk_stamps, parse_session_lines, reader_zone
from memory_core.storage.store import connect, read_meta

TOKYO = "JST-9"  # POSIX: 9 hours east of UTC, no daylight saving
NEW_YORK = "EST+5EDT,M3.2.0,M11.1.0"


@pytest.fixture
def zone(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """Set the process's zone (``TZ`` + ``time.tzset``); UTC again afterwards."""
    def set_zone(tz: str) -> None:
        monkeypatch.setenv("TZ", tz)
        time.tzset()

    yield set_zone
    monkeypatch.undo()
    time.tzset()


def _msg(ts: str | int, text: str, role: str = "user") -> str:
    return json.dumps({"type": "message", "timestamp": ts, "message": {"role": role, "content": [{"type": "text", "text": text}]}})


def _z(local: datetime, offset_h: int) -> str:
    """The UTC ``Z`` stamp OpenClaw writes for a wall time ``offset_h`` hours east of UTC."""
    return (local.replace(tzinfo=timezone(timedelta(hours=offset_h)))
            .astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z"))


def _days(s: Settings) -> dict[str, set[str]]:
    conn = connect(s.index_file, readonly=True)
    try:
        out: dict[str, set[str]] = {}
        for path, day in conn.execute("SELECT c.path, d.day FROM chunk_days d JOIN chunks c ON c.rid = d.rid"):
            out.setdefault(str(path), set()).add(str(day))
        return out
    finally:
        conn.close()


def _meta(s: Settings) -> dict[str, Any]:
    conn = connect(s.index_file, readonly=True)
    try:
        return read_meta(conn) or {}
    finally:
        conn.close()


def test_a_message_in_utc_counts_for_the_day_it_was_lived_here(zone: Any) -> None:
    lines = [_msg("2026-01-15T23:45:00.000Z", "Also this morning Kate said the gardener comes at noon."),
             _msg("2026-01-14T20:00:00.000-08:00", "Mo, in Los Angeles: the garage says the gearbox is done for"),
             _msg(1768520700, "an epoch number: 2026-01-15T23:45 UTC"),
             _msg("2026-01-16T08:50:00+09:00", "written with Tokyo's own offset")]
    zone("UTC0")
    assert reader_zone() is None
    doc = parse_session_lines(lines)
    assert [d for _, _, d in chunk_stamps(doc, 1, 1)] == ["2026-01-15"]
    assert [d for _, _, d in chunk_stamps(doc, 2, 2)] == ["2026-01-14", "2026-01-15"]  # its own and its UTC day
    assert [d for _, _, d in chunk_stamps(doc, 3, 3)] == ["2026-01-15"]
    assert [d for _, _, d in chunk_stamps(doc, 4, 4)] == ["2026-01-15", "2026-01-16"]

    zone(TOKYO)
    assert reader_zone() == "JST-9 (UTC+09:00)"
    doc = parse_session_lines(lines)
    assert chunk_stamps(doc, 1, 1) == [("2026-01-15T23:45", 1, "2026-01-16")]  # Tokyo's morning only
    assert [d for _, _, d in chunk_stamps(doc, 2, 2)] == ["2026-01-14", "2026-01-15"]  # as before
    assert [d for _, _, d in chunk_stamps(doc, 3, 3)] == ["2026-01-16"]
    assert [d for _, _, d in chunk_stamps(doc, 4, 4)] == ["2026-01-16"]  # its own offset is this zone's

    zone(NEW_YORK)  # 5 hours behind in January: 23:45 UTC is 18:45 the same day
    assert reader_zone() == "EST+5EDT,M3.2.0,M11.1.0 (UTC-05:00)"
    assert [d for _, _, d in chunk_stamps(parse_session_lines(lines), 1, 1)] == ["2026-01-15"]
    late = parse_session_lines([_msg("2026-01-17T02:10:00Z", "a message sent at 21:10 on the 16th")])
    assert [d for _, _, d in chunk_stamps(late, 1, 1)] == ["2026-01-16"]


def _tokyo_workspace(tmp_path: Path, today: date) -> Path:
    """The audit's workspace: yesterday's lunch and evening, this morning before 09:00 (Tokyo)."""
    ws = tmp_path / "ws"
    (ws / "sessions").mkdir(parents=True)
    yday = today - timedelta(days=1)

    def at(d: date, hh: int, mm: int) -> str:
        return _z(datetime(d.year, d.month, d.day, hh, mm), 9)

    (ws / "sessions" / "a.jsonl").write_text("\n".join([
        _msg(at(yday, 12, 0), "Lunch yesterday: the ramen place by the station was closed."),
        _msg(at(yday, 20, 0), "Evening: Kate called about the koi pond filter."),
    ]) + "\n")
    (ws / "sessions" / "b.jsonl").write_text("\n".join([
        _msg(at(today, 7, 30), "Morning: I fed the koi and the filter pump is humming again."),
        _msg(at(today, 8, 45), "Also this morning Kate said the gardener comes at noon."),
    ]) + "\n")
    return ws


def _dated_paths(s: Settings, question: str) -> list[str]:
    """The results the named day lifted (``match`` "date" or a words match at 0.5 and above)."""
    with Searcher(s) as se:
        return [h.path for h in se.search(question, max_results=5) if h.score >= 0.45]


def test_this_morning_in_tokyo_finds_the_messages_stamped_yesterday_in_utc(tmp_path: Path, zone: Any) -> None:
    zone(TOKYO)
    today = datetime.now(timezone(timedelta(hours=9))).date()
    if datetime.now(timezone(timedelta(hours=9))).hour < 1:  # too close to midnight: the day may turn mid-test
        pytest.skip("run within an hour of midnight in Tokyo")
    ws = _tokyo_workspace(tmp_path, today)
    s = load_settings(None, {"workspace": str(ws), "provider": "none", "sources": ["sessions"]})
    run_index(s)
    assert _days(s) == {"sessions/a.jsonl": {(today - timedelta(days=1)).isoformat()},
                        "sessions/b.jsonl": {today.isoformat()}}
    assert _meta(s)["days_zone"] == "JST-9 (UTC+09:00)"
    for q in ("what did Kate say this morning?", "what did Kate say today?",
              f"what did Kate say on {today.day} {today.strftime('%B')}?"):
        assert _dated_paths(s, q) == ["sessions/b.jsonl"], q
    yday = today - timedelta(days=1)
    for q in ("what did Kate say yesterday?", f"what did Kate say on {yday.day} {yday.strftime('%B')}?"):
        assert _dated_paths(s, q) == ["sessions/a.jsonl"], q


def test_a_run_in_another_zone_rereads_every_transcript_for_its_days_once(tmp_path: Path, zone: Any) -> None:
    """Built in UTC, then run in Tokyo: the days are re-read (no text or vector changes), the zone
    recorded; the run after has nothing to do; back in UTC the days are UTC's again and the zone
    is no longer recorded (an index built in UTC has no ``days_zone``, as before)."""
    ws = tmp_path / "ws"
    (ws / "sessions").mkdir(parents=True)
    (ws / "memory").mkdir()
    (ws / "memory" / "garden.md").write_text("# Garden\n\nThe koi pond filter was cleaned in spring.\n")
    (ws / "sessions" / "b.jsonl").write_text(_msg("2026-01-15T23:45:00.000Z", "the gardener comes at noon") + "\n")
    (ws / "sessions" / "c.jsonl").write_text(_msg("2026-01-15T12:00:00.000Z", "lunch at the ramen place") + "\n")
    s = load_settings(None, {"workspace": str(ws), "provider": "none", "sources": ["memory", "sessions"]})
    zone("UTC0")
    first = run_index(s)
    assert first.sessions_redated == 0
    assert "days_zone" not in _meta(s)
    assert _days(s)["sessions/b.jsonl"] == {"2026-01-15"}

    zone(TOKYO)
    # the index knows its days are another zone's: stale, and says why (a reader's sync runs then)
    stale = dirty_state(s)
    assert stale.dirty and "days read in UTC, this process is in JST-9 (UTC+09:00)" in stale.reason, stale
    tokyo = run_index(s)
    assert not dirty_state(s).dirty
    assert (tokyo.sessions_redated, tokyo.files_changed, tokyo.chunks_embedded) == (2, 2, 0), tokyo.lines()
    assert _days(s) == {"sessions/b.jsonl": {"2026-01-16"}, "sessions/c.jsonl": {"2026-01-15"}}
    assert _meta(s)["days_zone"] == "JST-9 (UTC+09:00)"
    again = run_index(s)
    assert (again.sessions_redated, again.files_changed) == (0, 0)

    # a run given the changed paths (a watcher's) in another zone looks at those alone: the zone
    # stays the live index's, so the next full look re-reads them all
    zone("UTC0")
    (ws / "memory" / "garden.md").write_text("# Garden\n\nThe koi pond filter was cleaned in April.\n")
    hinted = run_index(s, only_paths=[str(ws / "memory" / "garden.md")])
    assert hinted.hinted_paths == 1, hinted.hint_fallback
    assert hinted.sessions_redated == 0
    assert _meta(s)["days_zone"] == "JST-9 (UTC+09:00)"
    assert dirty_state(s).reason == "transcripts' days read in JST-9 (UTC+09:00), this process is in UTC"
    back = run_index(s)
    assert not dirty_state(s).dirty
    assert (back.sessions_redated, back.chunks_embedded) == (2, 0), back.lines()
    assert _days(s)["sessions/b.jsonl"] == {"2026-01-15"}
    assert "days_zone" not in _meta(s)


def test_new_york_evening_past_utc_midnight_is_that_evening(tmp_path: Path, zone: Any) -> None:
    """Sent at 21:10 on the 16th in New York, stamped 02:10 on the 17th: the 16th's, fully (before,
    only the tolerance past the 16th's end lifted it, less than the day's own)."""
    zone(NEW_YORK)
    ws = tmp_path / "ws"
    (ws / "sessions").mkdir(parents=True)
    (ws / "sessions" / "late.jsonl").write_text(_msg("2026-01-17T02:10:00Z", "Booked the plumber for the boiler") + "\n")
    (ws / "sessions" / "next.jsonl").write_text(_msg("2026-01-17T15:00:00Z", "Booked the dentist for the kids") + "\n")
    s = load_settings(None, {"workspace": str(ws), "provider": "none", "sources": ["sessions"]})
    run_index(s)
    assert _days(s) == {"sessions/late.jsonl": {"2026-01-16"}, "sessions/next.jsonl": {"2026-01-17"}}
    with Searcher(s) as se:
        got = se.search("what did I book on 16 January 2026?", max_results=2)
        assert [h.path for h in got][:1] == ["sessions/late.jsonl"]
        other = se.search("what did I book on 17 January 2026?", max_results=2)
        assert [h.path for h in other][:1] == ["sessions/next.jsonl"]
        assert got[0].score > next(h.score for h in other if h.path == "sessions/late.jsonl")
