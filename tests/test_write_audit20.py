"""The write tool and the memory store, the twentieth session's audit (findings 2-6): a note with
another hard link (a file outside the workspace) was written through; the store's duplicate check
read a capital A as the article, dropped a minus after a letter and a per mille sign, so a
different fact replaced the first; a UTF-16 (or NUL-holding, or Latin-1) note got UTF-8 appended;
a lone CR earlier in a note made a write the index held answer ``indexed: false``; a socket as a
note got exit 1, a bidi override in a note's name was written, a negative compaction cycle was
taken. Each test fails on the code before its fix (see docs/reliability.md). The real CLI and
functions on temp workspaces, the real local model for the store."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from memory_core.config import Settings, load_settings
from memory_core.errors import PathError, UsageError
from memory_core.index.pipeline import run_index
from memory_core.notes.flush import check_flush
from memory_core.notes.memory_store import same_fact
from memory_core.notes.write import append_note, target_path, write_memory
from tests.conftest import ROOT


def _settings(ws: Path) -> Settings:
    return load_settings(None, {"workspace": str(ws), "provider": "none"})


def _cli(*args: str | bytes) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "memory_core.apps.cli", *args], capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=120)


def _refused(proc: subprocess.CompletedProcess[str], words: str) -> None:
    """Exit 2 (bad input) with one line that says why, no traceback."""
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert words in proc.stderr and proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr, proc.stderr


# -- 2: a hard link to a file outside the workspace -------------------------------------------------

def test_a_note_with_another_hard_link_is_not_written_through(tmp_path: Path) -> None:
    ws, outside = tmp_path / "ws", tmp_path / "outside.txt"
    (ws / "memory").mkdir(parents=True)
    outside.write_text("a file outside the workspace\n")
    os.link(outside, ws / "memory" / "linked.md")
    proc = _cli("write", "-w", str(ws), "INJECTED via a hard link", "--path", "memory/linked.md", "--no-index")
    _refused(proc, "refusing to write memory/linked.md: the note has other hard links")
    with pytest.raises(PathError, match="other hard links"):
        append_note(_settings(ws), "INJECTED again", "memory/linked.md")
    assert outside.read_text() == "a file outside the workspace\n"
    # the note alone again (the other link removed): written as any note
    outside.unlink()
    assert append_note(_settings(ws), "now its own note", "memory/linked.md").citation == "memory/linked.md#L3-L3"


# -- 3: the store's duplicate check ---------------------------------------------------------------

# pairs the old check took for one fact (the first two replaced each other in the store)
LETTERS_AND_MARKS = [
    ("Dana's blood type is A-", "Dana's blood type is A"),
    ("Dana lives in apartment 4A", "Dana lives in apartment 4"),
    ("Blood type O-", "Blood type O"),
    ("Blood type AB-", "Blood type AB"),
    ("Sam's grade in physics is B-", "Sam's grade in physics is B"),
    ("Her grade was 2-", "Her grade was 2"),
    ("The meeting is in Room 101A", "The meeting is in Room 101"),
    ("Use plan A", "Use the plan"),
    ("Vitamin A is low", "Vitamin is low"),
    ("Interest is 5\u2030", "Interest is 5%"),
    ("The tolerance is 3\u2031", "The tolerance is 3"),
    ("The shelf is 5\u2032 high", "The shelf is 5\u2033 high"),
]

# the same thing said again: still one memory (an article A at a sentence's start, a hyphenated
# word, a range, a typed minus sign)
SAID_AGAIN = [
    ("A backup ran at noon", "Backup ran at noon"),
    ("A backup ran. A job failed.", "the backup ran. the job failed"),
    ("Dana's blood type is A-", "dana's blood type is A\u2212."),
    ("A well-known bug in the parser", "the well-known bug in the parser"),
    ("The backup took 5-10 minutes", "the backup took 5-10 minutes."),
    ("The meeting moved to UTC-5", "the meeting moved to UTC-5."),
]


def test_a_letter_a_minus_after_a_letter_and_a_per_mille_are_part_of_the_fact() -> None:
    for a, b in LETTERS_AND_MARKS:
        assert not same_fact(a, b), (a, b)
        assert not same_fact(b, a), (b, a)
    for a, b in SAID_AGAIN:
        assert same_fact(a, b), (a, b)
        assert same_fact(b, a), (b, a)


def test_a_blood_type_or_an_apartment_is_not_replaced_by_another(tmp_path: Path) -> None:
    from tests.test_store_audit19 import assert_pairs_kept_apart

    # the same blood type said again is an update of the one stored
    assert_pairs_kept_apart(tmp_path, LETTERS_AND_MARKS[:2], "dana's blood type is A-.")


# -- 4: a note that is not UTF-8 text -------------------------------------------------------------

NOT_UTF8: list[tuple[str, bytes, str]] = [
    ("win.md", "# Windows note\r\nDana likes tea\r\n".encode("utf-16"), "the note is UTF-16, not UTF-8 text"),
    ("be.md", "# note\nno BOM\n".encode("utf-16-be"), "the note holds NUL bytes"),
    ("nul.md", b"# note\nhalf a \x00 binary\n", "the note holds NUL bytes"),
    ("latin1.md", "# Caf\u00e9 notes\n".encode("latin-1"), "the note is not UTF-8 text (byte 0xe9 at offset 5"),
    # a character cut by the 1 MiB pieces the note is read in is read whole; the byte after it is not
    ("late.md", b"x" * ((1 << 20) - 1) + "\u00e9\n".encode() + b"\xff\n",
     f"the note is not UTF-8 text (byte 0xff at offset {(1 << 20) + 2}"),
]


def test_a_note_that_is_not_utf8_text_is_not_appended_to(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    for name, data, words in NOT_UTF8:
        (ws / "memory" / name).write_bytes(data)
        proc = _cli("write", "-w", str(ws), "Appended to a note", "--path", f"memory/{name}", "--json")
        _refused(proc, f"refusing to write memory/{name}: {words}")
        assert proc.stdout == "" and (ws / "memory" / name).read_bytes() == data, name
    # UTF-8 text is written, with a UTF-8 BOM, and with a character across two pieces
    (ws / "memory" / "bom.md").write_bytes("\ufeff# Note\nok\n".encode())
    assert append_note(_settings(ws), "after a BOM", "memory/bom.md").citation == "memory/bom.md#L4-L4"
    (ws / "memory" / "long.md").write_bytes(b"x" * ((1 << 20) - 1) + "\u00e9\n".encode())
    assert append_note(_settings(ws), "after a long line", "memory/long.md").citation == "memory/long.md#L3-L3"


# -- 5: a lone CR earlier in the note -------------------------------------------------------------

def test_a_write_after_a_lone_cr_is_said_indexed_when_the_index_holds_it(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    lines = ["# Log", *(f"line {i} about topic{i} and other words here" for i in range(1, 301))]
    lines[5] = "progress bar output:" + "\r50%" * 150  # pasted terminal output: 150 lone CRs
    (ws / "memory" / "log.md").write_bytes(("\n".join(lines) + "\n").encode())
    settings = _settings(ws)
    run_index(settings)
    res = write_memory(settings, "Zebra migration decided for Friday", "memory/log.md")
    assert res.citation == "memory/log.md#L303-L303", res
    assert res.indexed and res.note == "", res
    proc = _cli("get", "-w", str(ws), res.citation)
    assert "Zebra migration decided for Friday" in proc.stdout, (proc.stdout, proc.stderr)


# -- 6: a socket, invisible characters in a name, a negative cycle --------------------------------

def test_a_socket_as_a_note_is_not_a_regular_file(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    here = os.getcwd()
    os.chdir(ws / "memory")  # a socket's path is at most 107 bytes: bind it by its short name
    try:
        with socket.socket(socket.AF_UNIX) as sock:
            sock.bind("sock.md")
            proc = _cli("write", "-w", str(ws), "into a socket", "--path", "memory/sock.md", "--no-index")
    finally:
        os.chdir(here)
    _refused(proc, "refusing to write memory/sock.md: not a regular file")


@pytest.mark.parametrize("hidden", ["\u202e", "\u200b", "\u200d", "\ufeff", "\u2028", "\u0085"])
def test_invisible_and_format_characters_in_a_notes_name_are_refused(tmp_path: Path, hidden: str) -> None:
    # a bidi override (memory/\u202edm.x shows as memory/x.md), zero-width space and joiner, a BOM,
    # the line separator, a C1 control (NEL)
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    name = f"memory/a{hidden}b.md"
    with pytest.raises(PathError):
        target_path(name)
    proc = _cli("write", "-w", str(ws), "text", "--path", name, "--no-index")
    _refused(proc, "refusing to write memory/a")
    # the line shows the character escaped, never the character itself (a bidi override reorders it)
    assert hidden not in proc.stderr and hidden.encode("unicode_escape").decode() in proc.stderr, proc.stderr
    assert os.listdir(ws / "memory") == []
    # a name in another script, with spaces and accents, is still a name
    assert target_path("memory/caf\u00e9 \u65e5\u8a18.md") == "memory/caf\u00e9 \u65e5\u8a18.md"


def test_a_negative_compaction_cycle_is_refused(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    proc = _cli("flush", "-w", str(ws), "s1", "--tokens", "200000", "--cycle", "-5", "--record", "--json")
    _refused(proc, "cycle must be 0 or more, not -5")
    settings = _settings(ws)
    with pytest.raises(UsageError, match="cycle must be 0 or more"):
        check_flush(settings, "s1", tokens=200000, cycle=-1, record=True)
    assert not settings.flush_ledger_file.exists()
    ok: dict[str, Any] = json.loads(_cli("flush", "-w", str(ws), "s1", "--tokens", "200000", "--cycle", "0",
                                         "--record", "--json").stdout)
    assert ok["due"] and ok["cycle"] == 0


# -- the thirty-eighth session's audit --------------------------------------------------------------

def _replaced_under_the_write(monkeypatch: pytest.MonkeyPatch, note: Path, times: int) -> list[int]:
    """Another program saves ``note`` atomically (a copy renamed over it) after the write opened
    it and before it appends, ``times`` times: what an editor's or an agent's file tool does."""
    from memory_core.notes import write as write_mod

    real = write_mod._text_lines
    done: list[int] = []

    def lines_then_replaced(fd: int, size: int, rel: str) -> int:
        n = real(fd, size, rel)
        if len(done) < times:
            done.append(os.fstat(fd).st_ino)
            tmp = note.with_name(f".{note.name}.editor-save")
            tmp.write_text(note.read_text() + f"edited by hand, save {len(done)}\n")
            os.replace(tmp, note)
        return n

    monkeypatch.setattr(write_mod, "_text_lines", lines_then_replaced)
    return done


def test_a_note_replaced_as_it_is_written_gets_the_text_in_the_note(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The append went into the file an atomic save had just replaced (gone: nlink 0), exit 0, a
    citation past the note's end, and ``indexed: true`` read from whatever the note's line held."""
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    note = ws / "MEMORY.md"
    note.write_text("# Memory\n\n" + "".join(f"- fact {i}\n" for i in range(200)))
    s = _settings(ws)
    run_index(s)
    saves = _replaced_under_the_write(monkeypatch, note, 1)
    res = write_memory(s, "the quokka enclosure key is with Dana", "MEMORY.md")
    assert len(saves) == 1  # the save came between the open and the append
    lines = note.read_text().split("\n")
    assert "edited by hand, save 1" in lines  # the other program's save is kept
    assert lines[res.start_line - 1] == "the quokka enclosure key is with Dana" == lines[res.end_line - 1]
    assert res.indexed and res.citation == f"MEMORY.md#L{res.start_line}-L{res.end_line}"


def test_a_note_replaced_at_every_try_is_said_not_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from memory_core.notes.write import REPLACED_TRIES

    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    note = ws / "MEMORY.md"
    note.write_text("# Memory\n")
    _replaced_under_the_write(monkeypatch, note, REPLACED_TRIES)
    with pytest.raises(UsageError, match=f"another program replaced the note during each of {REPLACED_TRIES} tries"):
        append_note(_settings(ws), "the okapi feeding time is 9:00", "MEMORY.md")
    assert "okapi" not in note.read_text()


def test_indexed_is_judged_by_the_text_written_not_the_notes_line(tmp_path: Path) -> None:
    from memory_core.notes.write import _indexed

    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "MEMORY.md").write_text("# Memory\n\nthe capybara rota starts Monday\n")
    s = _settings(ws)
    run_index(s)
    assert _indexed(s, "MEMORY.md", 3, "the capybara rota starts Monday")
    assert not _indexed(s, "MEMORY.md", 3, "a text that was never written")
    assert not _indexed(s, "MEMORY.md", 9, "the capybara rota starts Monday")  # a line past the note's end


DASHES_AND_SIGNS = [
    ("Give the patient .5 mg of morphine every 4 hours", "Give the patient 5 mg of morphine every 4 hours"),
    ("The freezer is at \u201318 \u00b0C", "The freezer is at 18 \u00b0C"),
    ("The call is at 9:00 UTC\u20135", "The call is at 9:00 UTC+5"),
    ("The refund was -$200", "The refund was $200"),
    ("Rent went up by \u2212\u00a350", "Rent went up by \u00a350"),
]
DASHES_SAID_AGAIN = [
    ("Give the patient 0.5 mg", "Give the patient .5 mg"),
    ("The freezer is at \u221218 \u00b0C", "The freezer is at \u201318 \u00b0C"),
    ("Read pages 10\u201312", "Read pages 10-12"),
    ("Standup \u2013 Tuesday at 5", "Standup - Tuesday at 5"),
]


def test_a_dash_for_a_minus_a_leading_point_and_a_signed_amount_are_part_of_the_fact() -> None:
    """An en dash as a minus, a decimal without its leading zero and a sign before a currency were
    dropped, so "-18 \u00b0C" was "18 \u00b0C" and ".5 mg" was "5 mg" (cosine 0.97-0.99): the second store
    replaced the first, and its text was purged."""
    for a, b in DASHES_AND_SIGNS:
        assert not same_fact(a, b), (a, b)
        assert not same_fact(b, a), (b, a)
    for a, b in DASHES_SAID_AGAIN:
        assert same_fact(a, b), (a, b)
        assert same_fact(b, a), (b, a)
