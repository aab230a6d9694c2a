"""When each transcript chunk was written, recorded at indexing time (``chunk_days``, schema 6):
a search dates its candidates, finds a named day's chunks and knows the memory's conversation days
from the index, never reading a transcript; the rows follow the chunks through incremental runs; an
index written before is still searched (its transcripts read for their times) and the next run
rebuilds it. Real index (SQLite, FTS5), real pipeline."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from memory_core.config import Settings, load_settings
from memory_core.index.pipeline import run_index
from memory_core.query import reading
from memory_core.query.search import Searcher
from memory_core.sources.sessions import chunk_stamps, parse_session_lines
from memory_core.storage.store import META_KEY, SCHEMA_VERSION, connect


def _record(ts: str | None, role: str, text: str, kind: str = "message") -> str:
    rec: dict[str, Any] = {"type": kind, "message": {"role": role, "content": [{"type": "text", "text": text}]}}
    if ts:
        rec["timestamp"] = ts
    return json.dumps(rec)


def _header(ts: str) -> str:
    return json.dumps({"type": "session", "version": 3, "id": "s", "timestamp": ts})


def test_chunk_stamps_are_each_days_earliest_message() -> None:
    lines = [
        _header("2026-01-16T21:00:00Z"),
        _record("2026-01-16T23:50:00Z", "user", "late one"),  # line 2
        _record("2026-01-16T23:40:00Z", "assistant", "written earlier, sent later"),  # 3: out of order
        _record("2026-01-17T00:20:00+01:00", "user", "23:20 UTC: still the 16th"),  # 4
        _record("2026-01-17T01:05:00Z", "assistant", "past midnight"),  # 5
        _record("2026-01-17T01:07:00Z", "toolResult", "a tool's output: not indexed, still said then"),  # 6
        _record(None, "user", "no time"),  # 7
        _record(1768613400000, "assistant", "epoch milliseconds"),  # 8: 2026-01-17T01:30Z
    ]
    doc = parse_session_lines(lines)
    # 00:20+01:00 on the 17th is 23:20 UTC on the 16th: it counts for both days
    assert chunk_stamps(doc, 2, 8) == [("2026-01-16T23:20", 4, "2026-01-16"), ("2026-01-16T23:20", 4, "2026-01-17")]
    assert chunk_stamps(doc, 5, 8) == [("2026-01-17T01:05", 5, "2026-01-17")]
    assert chunk_stamps(doc, 6, 6) == [("2026-01-17T01:07", 6, "2026-01-17")]  # a tool result's time counts too
    assert chunk_stamps(doc, 7, 7) == [("2026-01-16T21:00", 7, "2026-01-16")]  # no timed message: the header's
    assert parse_session_lines(lines[1:2]).header is None
    assert chunk_stamps(parse_session_lines([_record(None, "user", "x")]), 1, 1) == []


def _write(ws: Path) -> None:
    (ws / "sessions").mkdir(parents=True, exist_ok=True)
    (ws / "memory").mkdir(exist_ok=True)
    (ws / "memory" / "2026-02-03.md").write_text("# 3 February\n\nBought seeds for the allotment.\n")
    (ws / "sessions" / "late.jsonl").write_text("\n".join([
        _header("2026-01-16T22:00:00Z"),
        _record("2026-01-16T22:10:00Z", "user", "which platform does the Brighton train leave from?"),
        _record("2026-01-17T00:40:00Z", "assistant", "platform 9b, the one at the far end"),
    ]) + "\n")
    (ws / "sessions" / "march.jsonl").write_text("\n".join([
        _header("2026-03-02T18:00:00Z"),
        _record("2026-03-02T18:01:00Z", "user", "my cello teacher is called Ines"),
        _record("2026-03-02T18:02:00Z", "assistant", "a lovely instrument to start with"),
    ]) + "\n")


def _settings(ws: Path) -> Settings:  # every appended message is indexed by the next run
    return load_settings(None, {"workspace": str(ws), "provider": "none", "sources": ["memory", "sessions"],
                                "sessions": {"delta_bytes": 0, "delta_messages": 0}})


def _rows(s: Settings) -> list[tuple[str, str, str, int]]:
    conn = connect(s.index_file)
    try:
        return [(str(p), str(d), str(f), int(n)) for p, d, f, n in conn.execute(
            "SELECT c.path, d.day, d.first, d.line FROM chunk_days d JOIN chunks c ON c.rid = d.rid"
            " ORDER BY c.path, d.day")]
    finally:
        conn.close()


def test_the_index_records_each_transcript_chunks_days_and_keeps_them_with_its_chunks(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    _write(ws)
    s = _settings(ws)
    run_index(s)
    assert _rows(s) == [("sessions/late.jsonl", "2026-01-16", "2026-01-16T22:10", 2),
                        ("sessions/late.jsonl", "2026-01-17", "2026-01-17T00:40", 3),
                        ("sessions/march.jsonl", "2026-03-02", "2026-03-02T18:01", 2)]  # notes: none
    # a transcript that grows gets its new day; one that goes takes its rows with it
    with (ws / "sessions" / "march.jsonl").open("a") as f:
        f.write(_record("2026-03-05T09:00:00Z", "user", "Ines says practise scales daily") + "\n")
    (ws / "sessions" / "late.jsonl").unlink()
    run_index(s)
    rows = _rows(s)
    assert {r[0] for r in rows} == {"sessions/march.jsonl"}
    assert {(d, f, n) for _, d, f, n in rows} == {("2026-03-02", "2026-03-02T18:01", 2), ("2026-03-05", "2026-03-05T09:00", 4)}
    conn = connect(s.index_file)
    try:  # no row of a chunk that is gone
        assert conn.execute("SELECT count(*) FROM chunk_days WHERE rid NOT IN (SELECT rid FROM chunks)").fetchone()[0] == 0
    finally:
        conn.close()


def test_a_search_dates_and_finds_days_without_reading_a_transcript(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    ws = tmp_path / "ws"
    _write(ws)
    s = _settings(ws)
    run_index(s)

    def no_read(*_: object, **__: object) -> None:
        raise AssertionError("a search read a transcript for its times")

    monkeypatch.setattr(reading, "transcript_dates", no_read)
    with Searcher(s) as searcher:
        # the answer stamped past midnight, found for the day the question names (no word matches)
        got = searcher.search("what did we say on 16 January 2026?", max_results=3)
        assert got and got[0].path == "sessions/late.jsonl" and got[0].date == "2026-01-16T22:10"
        # the day after: the same chunk, shown from that day's first message (sent past midnight)
        nxt = searcher.search("what did we say on 17 January 2026?", max_results=3)
        assert nxt and nxt[0].path == "sessions/late.jsonl" and nxt[0].start_line == 2
        assert nxt[0].snippet == ("[2026-01-16 22:10 UTC] User: which platform does the Brighton train leave from?\n"
                                  "[2026-01-17 00:40 UTC] Assistant: platform 9b, the one at the far end")
        # begun that day: from its start, and the answer sent past midnight still carries its own time (it
        # was shown under 22:10: seventeenth session)
        on16 = searcher.search("what did we say on 16 January 2026?", max_results=3)
        assert on16[0].path == "sessions/late.jsonl" and on16[0].snippet == nxt[0].snippet
        first = searcher.search("what did we talk about in our first conversation?", max_results=3)
        assert first and first[0].path == "sessions/late.jsonl"
        last = searcher.search("what did we talk about the last time we talked?", max_results=3)
        assert last and last[0].path == "sessions/march.jsonl" and "cello" in last[0].snippet
        cello = searcher.search("cello teacher", max_results=3)
        assert cello and cello[0].path == "sessions/march.jsonl" and cello[0].date == "2026-03-02T18:01"


def test_an_index_without_chunk_days_is_searched_then_rebuilt(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    _write(ws)
    s = _settings(ws)
    run_index(s)
    conn = connect(s.index_file)
    try:  # as schema 5 wrote it
        conn.execute("DROP TABLE chunk_days")
        meta = json.loads(conn.execute("SELECT value FROM meta WHERE key = ?", (META_KEY,)).fetchone()[0])
        meta["schema_version"] = 5
        conn.execute("UPDATE meta SET value = ? WHERE key = ?", (json.dumps(meta), META_KEY))
    finally:
        conn.close()
    with Searcher(s) as searcher:  # its transcripts are read for their times meanwhile
        got = searcher.search("cello teacher", max_results=3)
        assert got and got[0].path == "sessions/march.jsonl" and got[0].date == "2026-03-02T18:01"
    summary = run_index(s)
    assert summary.full and f"schema_version changed from 5 to {SCHEMA_VERSION}" in summary.full_reason
    assert ("sessions/march.jsonl", "2026-03-02", "2026-03-02T18:01", 2) in _rows(s)


def test_a_long_running_transcript_is_found_on_any_of_its_days(tmp_path: Path) -> None:
    """A session that began on the first day and ran on for months, among 200 shorter ones, all
    copied in at once: its message of 20 April is found by that day alone. (The sixth session
    read 192 chosen transcripts for a named day: the 64 begun nearest before it, the 64 first and
    last by modification time; this one was none of them.)"""
    from datetime import date, timedelta

    ws = tmp_path / "ws"
    (ws / "sessions").mkdir(parents=True)
    first = date(2025, 3, 1)
    long = [_header(f"{first.isoformat()}T08:00:00Z")]
    for k in range(0, 120, 7):
        day = (first + timedelta(days=k)).isoformat()
        long.append(_record(f"{day}T09:00:00Z", "user", f"week {k // 7}: the allotment beans are coming up"))
    (ws / "sessions" / "s100-long.jsonl").write_text("\n".join(long) + "\n")
    for k in range(200):
        day = (first + timedelta(days=k)).isoformat()
        (ws / "sessions" / f"s{k:03d}.jsonl").write_text("\n".join([
            _header(f"{day}T18:00:00Z"), _record(f"{day}T18:01:00Z", "user", "good news about the garden, odd again"),
        ]) + "\n")
    same = 1_790_000_000
    for f in (ws / "sessions").iterdir():
        os.utime(f, (same, same))
    s = load_settings(None, {"workspace": str(ws), "provider": "none", "sources": ["sessions"]})
    run_index(s)
    asked = first + timedelta(days=112)  # 21 June 2025, week 16's day: 112 transcripts began after the long one
    with Searcher(s) as searcher:
        got = searcher.search(f"what did I say on {asked.day} June {asked.year}?", max_results=5)
        long = [h for h in got if h.path == "sessions/s100-long.jsonl"]
        assert long, [h.path for h in got]
        # the snippet shows that day's message, stamped, after the one before it (the whole chunk does not fit)
        assert long[0].snippet.startswith("… User: week 15: the allotment beans are coming up\n"
                                          "[2025-06-21 09:00 UTC] User: week 16: the allotment beans"), long[0].snippet
        assert (long[0].date, long[0].start_line) == ("2025-03-01T09:00", 2)  # the chunk's own date and lines
        plain = searcher.search("allotment beans", max_results=1)  # no day named: the chunk as it is
        assert plain[0].path == "sessions/s100-long.jsonl" and plain[0].snippet.startswith("[2025-03-01 09:00 UTC]")


def test_a_message_counts_for_its_local_day_and_its_utc_day(tmp_path: Path) -> None:
    """Mo writes from Dubai (+04:00): his 01:10 on the 14th is 21:10 UTC on the 13th. A question
    naming either day finds it; another day's chunk does not come first."""
    ws = tmp_path / "ws"
    (ws / "sessions").mkdir(parents=True)
    (ws / "sessions" / "mo.jsonl").write_text("\n".join([
        _header("2026-01-14T01:00:00.000+04:00"),
        _record("2026-01-14T01:10:00.000+04:00", "assistant", "Mo: the garage says the gearbox is done for"),
    ]) + "\n")
    (ws / "sessions" / "kate.jsonl").write_text("\n".join([
        _header("2026-01-15T18:00:00Z"),
        _record("2026-01-15T18:01:00Z", "assistant", "Kate: pottery tonight, making a mug"),
    ]) + "\n")
    s = load_settings(None, {"workspace": str(ws), "provider": "none", "sources": ["sessions"]})
    run_index(s)
    assert {(r[1], r[2]) for r in _rows(s) if r[0] == "sessions/mo.jsonl"} == {
        ("2026-01-13", "2026-01-13T21:10"), ("2026-01-14", "2026-01-13T21:10")}
    with Searcher(s) as searcher:
        for day in ("14 January 2026", "13 January 2026"):
            got = searcher.search(f"what did we talk about on {day}?", max_results=2)
            assert got and got[0].path == "sessions/mo.jsonl", (day, [h.path for h in got])
        got = searcher.search("what did we talk about on 15 January 2026?", max_results=2)
        assert got and got[0].path == "sessions/kate.jsonl"


def test_every_message_of_a_snippet_said_on_another_day_carries_its_own_time(tmp_path: Path) -> None:
    """A snippet had one stamp, its chunk's first message's time, put before whatever came first:
    a neighbouring message added before the chunk (said the evening before) showed under the
    chunk's time, and a message said two days later under the first one's (helper audit,
    seventeenth session). Now the chunk's text has its time, every later day's first message its
    own, and a neighbour from another day its own; the times come from the index."""
    import json

    ws = tmp_path / "ws"
    (ws / "sessions").mkdir(parents=True)
    msgs = [("2026-03-04T21:21:00Z", "user", "We spent the evening on the parser and its tokenizer edge cases"),
            ("2026-03-04T22:35:00Z", "assistant", "Then write a postmortem about the tokenizer bug tomorrow morning"),
            ("2026-03-06T08:10:00Z", "user", "Georgian restaurant booked for Friday dinner with the whole team"),
            ("2026-03-06T08:12:00Z", "assistant", "Noted the Friday dinner, they want a deposit before Thursday"),
            ("2026-03-06T15:00:00Z", "user", "Deposit paid, forty euros, receipt is in the shared folder")]
    (ws / "sessions" / "s.jsonl").write_text("".join(
        json.dumps({"type": "message", "timestamp": ts, "message": {"role": r, "content": t}}) + "\n"
        for ts, r, t in msgs))
    whole = load_settings(None, {"workspace": str(ws), "provider": "none", "sources": ["sessions"]})
    run_index(whole)
    with Searcher(whole) as searcher:  # one chunk of three days' messages
        hit = searcher.search("Georgian restaurant deposit", max_results=1)[0]
    assert (hit.start_line, hit.end_line) == (1, 5)
    assert hit.snippet.startswith("[2026-03-04 21:21 UTC] User: We spent")
    assert "\n[2026-03-06 08:10 UTC] User: Georgian restaurant" in hit.snippet
    assert hit.snippet.count("UTC]") == 2  # the same day's later messages carry none

    small = load_settings(None, {"workspace": str(ws), "provider": "none", "sources": ["sessions"],
                                 "chunking": {"tokens": 40, "overlap": 0}})
    run_index(small, full=True)
    with Searcher(small) as searcher:
        booked = next(r for r in searcher.search("Georgian restaurant booked", max_results=3) if r.start_line == 2)
        tokenizer = next(r for r in searcher.search("postmortem tokenizer", max_results=3) if r.end_line == 3)
    # the message before the chunk, from the evening before: its day (the index records the time of each
    # day's first message in a chunk, not this one's), then the chunk's time
    assert booked.snippet.startswith("[2026-03-04] Assistant: Then write a postmortem")
    assert "\n[2026-03-06 08:10 UTC] User: Georgian restaurant" in booked.snippet
    # the message after the chunk, two days later: its own time
    assert tokenizer.snippet.endswith("[2026-03-06 08:10 UTC] User: Georgian restaurant booked for Friday dinner"
                                      " with the whole team")
