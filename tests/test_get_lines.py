"""``get`` of cited lines says what is there (issue 39, L1).

The chunker numbers a note's lines as ``text.split("\\n")``: the empty piece after a final
newline is a line its last chunk cites; ``get`` of it exited 2 ("past the end"). A transcript
whose cited lines are malformed (or records that are not messages) gave no text, and ``get`` said
"line 2 is past the end" of a 4-line file.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from memory_core.apps.cli import main
from memory_core.config import load_settings
from memory_core.index.pipeline import run_index
from memory_core.query.search import Searcher
from memory_core.storage.store import connect_reader


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    (ws / "sessions").mkdir()
    (ws / "MEMORY.md").write_text("# Notes\n\nThe heron budget is 10 EUR.\n")  # 3 lines; a split on \n sees 4
    msg = {"type": "message", "timestamp": "2026-10-21T12:30:55Z",
           "message": {"role": "user", "content": "the kestrel survey starts Monday"}}
    (ws / "sessions" / "s.jsonl").write_text(
        json.dumps(msg) + "\n" + "{not json at all\n" + '{"type": "custom", "data": 1}\n' + json.dumps(msg) + "\n")
    run_index(load_settings(None, {"workspace": str(ws), "provider": "none", "sources": ["memory", "sessions"]}))
    return ws


def test_the_cited_last_line_after_a_final_newline_reads(ws: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A note's last chunk ends at its last line (``#L1-L3`` for 3 lines and a newline; the
    reference, counting the empty "line" after the newline, cited ``#L1-L4``); the empty line 4 an
    index built before cited still reads, as nothing."""
    s = load_settings(None, {"workspace": str(ws), "provider": "none"})
    with Searcher(s) as searcher:
        hit = searcher.search("heron budget", min_score=0)[0]
        assert hit.citation == "MEMORY.md#L1-L3"
        assert searcher.read_file("MEMORY.md#L1-L4").text == searcher.read_file(hit.citation).text
        whole = searcher.read_file(hit.citation)
        last = searcher.read_file("MEMORY.md#L4")
    assert whole.text == "# Notes\n\nThe heron budget is 10 EUR."
    assert (last.lines, last.text) == (1, "")
    assert main(["get", "-w", str(ws), "MEMORY.md#L4"]) == 0
    assert capsys.readouterr().out == "\n"
    # past the end is still one clear line, exit 2
    assert main(["get", "-w", str(ws), "MEMORY.md#L5"]) == 2
    err = capsys.readouterr().err
    assert "line 5 is past the end of MEMORY.md (4 lines)" in err and err.count("\n") == 1


def test_malformed_transcript_lines_are_not_past_the_end(ws: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["get", "-w", str(ws), "sessions/s.jsonl#L2-L3"]) == 2
    err = capsys.readouterr().err
    assert "past the end" not in err and err.count("\n") == 1
    assert "lines 2-3 of sessions/s.jsonl hold no messages" in err and "4 lines" in err
    assert main(["get", "-w", str(ws), "sessions/s.jsonl#L4"]) == 0
    assert "kestrel survey" in capsys.readouterr().out
    assert main(["get", "-w", str(ws), "sessions/s.jsonl#L5"]) == 2
    assert "line 5 is past the end of sessions/s.jsonl (4 lines)" in capsys.readouterr().err


def test_a_note_saved_with_windows_line_ends_reads_without_carriage_returns(tmp_path: Path) -> None:
    """A note saved on Windows (``\\r\\n``): ``get`` of its lines and a result's snippet came back
    with a ``\\r`` at each line's end (the twenty-third session's audit 2); the cited lines are the
    same, and so is a masked read (the lines above a range, read to redact it as the index did)."""
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    (ws / "memory" / "boiler.md").write_bytes(
        b"# Boiler\r\n\r\nThe boiler pressure is 1.5 bar.\r\npassword: hunter2hunter2\r\nCall Jorge on Friday.\r\n")
    for redact in ("sessions", "all"):
        s = load_settings(None, {"workspace": str(ws), "provider": "none", "redact": redact})
        run_index(s, full=True)
        with Searcher(s) as searcher:
            hit = searcher.search("boiler pressure", min_score=0)[0]
            assert hit.citation == "memory/boiler.md#L1-L5"
            assert "\r" not in hit.snippet and "The boiler pressure is 1.5 bar.\npassword" in hit.snippet
            whole = searcher.read_file(hit.citation)
            tail = searcher.read_file("memory/boiler.md#L3-L5")
        assert "\r" not in whole.text and "\r" not in tail.text, (whole.text, tail.text)
        assert tail.text.startswith("The boiler pressure is 1.5 bar.\npassword: ")
        assert tail.text.endswith("\nCall Jorge on Friday.")
        assert ("hunter2hunter2" in tail.text) == (redact != "all")


def test_get_of_a_transcript_says_when_each_day_of_it_was_said(tmp_path: Path) -> None:
    """``get`` of a transcript citation gave "User: ..." lines with no time (the twenty-third
    session's audit 2: a daily user reading a session back could not tell when it was said). The
    first message and each message that begins another UTC day carry their time, as snippets do;
    the lines are the messages, one each, as before."""
    ws = tmp_path / "ws"
    (ws / "sessions").mkdir(parents=True)
    msgs = [("2026-03-04T21:21:00Z", "user", "the parser fails on tabs"),
            ("2026-03-04T22:35:00Z", "assistant", "write the postmortem tomorrow"),
            ("2026-03-05T08:10:00Z", "user", "postmortem done, sent to the team"),
            (None, "assistant", "thanks")]
    (ws / "sessions" / "s.jsonl").write_text("".join(
        json.dumps({"type": "message", "message": {"role": r, "content": t}, **({"timestamp": ts} if ts else {})}) + "\n"
        for ts, r, t in msgs))
    s = load_settings(None, {"workspace": str(ws), "provider": "none", "sources": ["sessions"]})
    run_index(s)
    with Searcher(s) as searcher:
        whole = searcher.read_file("sessions/s.jsonl")
        later = searcher.read_file("sessions/s.jsonl#L2-L4")
    assert whole.text.split("\n") == ["[2026-03-04 21:21 UTC] User: the parser fails on tabs",
                                      "Assistant: write the postmortem tomorrow",
                                      "[2026-03-05 08:10 UTC] User: postmortem done, sent to the team",
                                      "Assistant: thanks"]
    assert later.text.split("\n")[0] == "[2026-03-04 22:35 UTC] Assistant: write the postmortem tomorrow"
    assert (whole.lines, later.lines) == (4, 3)


def test_a_notes_byte_order_mark_is_not_text(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A note saved with a UTF-8 byte-order mark (Notepad, some exporters): the mark led the first
    chunk's indexed text, its snippet and ``get``'s line 1, and hid the heading on that line from
    the chunker. It is not text: left out of all three, the file's hash still that of its bytes."""
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    (ws / "memory" / "trip.md").write_bytes("\ufeff# Trip to Lisbon\n\n- booked the Alfama hotel\n".encode())
    s = load_settings(None, {"workspace": str(ws), "provider": "none"})
    run_index(s)
    with Searcher(s) as searcher:
        hit = searcher.search("Alfama hotel", min_score=0)[0]
        assert hit.citation == "memory/trip.md#L1-L3"
        assert hit.snippet.startswith("# Trip to Lisbon")
        assert searcher.read_file(hit.citation).text == "# Trip to Lisbon\n\n- booked the Alfama hotel"
    assert main(["get", "-w", str(ws), "memory/trip.md#L1"]) == 0
    assert capsys.readouterr().out == "# Trip to Lisbon\n"
    conn = connect_reader(s.index_file)
    try:
        texts = [r[0] for r in conn.execute("SELECT text FROM chunks WHERE path = 'memory/trip.md'")]
        (digest,) = conn.execute("SELECT hash FROM files WHERE path = 'memory/trip.md'").fetchone()
    finally:
        conn.close()
    assert texts and not any("\ufeff" in t for t in texts)
    assert digest == hashlib.sha256((ws / "memory" / "trip.md").read_bytes()).hexdigest()
