"""What agents write, third outside attack (issue 39): the write tool (W1-W7), the flush (F1-F4),
the memory_flush prompt and the HTTP sessions of the MCP server (M2). The memory store's findings
(S1-S6) are in tests/test_store_attack.py. Each test names its finding and fails on the code
before its fix (see docs/reliability.md)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import apsw
import pytest

from memory_core.apps.cli import main
from memory_core.config import Settings, load_settings
from memory_core.errors import PathError, UnsafePathError, UsageError
from memory_core.index.pipeline import run_index
from memory_core.notes.flush import check_flush, estimate_transcript
from memory_core.notes.write import append_note, write_memory
from memory_core.sources.redact import redact, redact_lines
from memory_core.sources.sessions import parse_session_file
from memory_core.storage.store import read_live_rows
from tests.conftest import ROOT

BODY = ["MIIEowIBAAKCAQEAx7VQq3l0rT9Zk2mZsQ8bJmN4cP1vW6yH3eK0aLq9uTfRz2oXyPd",
        "Bg8sH2kLmN5pQ7rS9tU1vW3xY5zA7bC9dE1fG3hI5jK7lM9nO1pQ3rS5tU7vW9xYz",
        "Zq1w2e3r4t5y6u7i8o9p0aAsSdDfFgGhHjJkKlLzZxXcCvVbBnNmMqQwWeErRtTyYu"]
TWILIO = "SK" + "0123456789abcdef" * 2


def _settings(ws: Path, **kw: Any) -> Settings:
    return load_settings(None, {"workspace": str(ws), "provider": "none", **kw})


def _cli(*args: str, timeout: float = 120, **kw: Any) -> subprocess.CompletedProcess[Any]:
    return subprocess.run([sys.executable, "-m", "memory_core.apps.cli", *args], capture_output=True,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=timeout, **kw)


def _chunk_texts(index: Path) -> str:
    conn = apsw.Connection(str(index), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return "\n".join(str(r[0]) for r in conn.execute("SELECT text FROM chunks"))
    finally:
        conn.close()


# -- W1: a NUL in the text ------------------------------------------------------------------------

def test_w1_a_nul_in_written_text_is_removed_and_the_note_stays_indexed(workspace: Path) -> None:
    settings = _settings(workspace)
    run_index(settings)
    res = write_memory(settings, "The okapi ledger\x00 closes on Fridays.", "MEMORY.md")
    data = (workspace / "MEMORY.md").read_bytes()
    assert b"\x00" not in data and b"The okapi ledger closes on Fridays." in data
    assert res.indexed and "1 NUL or invalid characters were removed" in res.note
    _, rows, _ = read_live_rows(settings.index_file, ["MEMORY.md"])
    assert rows["MEMORY.md"].chunks > 0, "MEMORY.md left the index"
    assert "okapi ledger" in _chunk_texts(settings.index_file)
    # a clean write after it is searchable too
    assert write_memory(settings, "The tapir budget is approved.", "MEMORY.md").indexed
    assert "tapir budget" in _chunk_texts(settings.index_file)


# -- W2: another writer's appends -----------------------------------------------------------------

def test_w2_text_another_writer_appends_during_a_write_is_kept(workspace: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The old write read the note, wrote a copy and renamed it over the note: an outside append
    between the read and the rename was lost. The hook appends at the write's fsync."""
    settings = _settings(workspace)
    note = workspace / "memory" / "shared.md"
    note.write_text("first line\n")
    real_fsync = os.fsync
    appended: list[str] = []

    def fsync_with_an_outside_append(fd: int) -> None:
        if not appended:
            appended.append("x")
            with open(note, "a") as fh:  # a shell `>>` at that moment
                fh.write("outside line written by the runtime\n")
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync_with_an_outside_append)
    append_note(settings, "the agent's note", "memory/shared.md")
    monkeypatch.setattr(os, "fsync", real_fsync)
    text = note.read_text()
    assert "outside line written by the runtime" in text and "the agent's note" in text
    assert text.startswith("first line\n")


def test_w2_writes_beside_an_outside_appender_lose_nothing(workspace: Path) -> None:
    settings = _settings(workspace)
    note = workspace / "memory" / "busy-outside.md"
    note.write_text("")
    stop = threading.Event()
    outside: list[str] = []

    def appender() -> None:
        i = 0
        while not stop.is_set() or i < 50:
            line = f"outside {i:05d}"
            with open(note, "a") as fh:
                fh.write(line + "\n")
            outside.append(line)
            i += 1

    t = threading.Thread(target=appender)
    t.start()
    try:
        for n in range(30):
            append_note(settings, f"agent note {n}", "memory/busy-outside.md")
    finally:
        stop.set()
        t.join()
    lines = set(note.read_text().split("\n"))
    assert not [ln for ln in outside if ln not in lines]
    assert all(f"agent note {n}" in lines for n in range(30))


# -- W3: secrets split over writes; Twilio keys ---------------------------------------------------

def test_w3_a_pem_key_split_over_two_writes_is_masked_in_the_note_index_and_export(
        workspace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    settings = _settings(workspace)
    # BEGIN in one write, the body in the next, END in a third: no write alone shows a key
    first = write_memory(settings, "The deploy key follows.\n-----BEGIN RSA PRIVATE KEY-----", "MEMORY.md")
    second = write_memory(settings, "\n".join(BODY[:2]), "MEMORY.md")
    third = write_memory(settings, "\n".join([BODY[2], "-----END RSA PRIVATE KEY-----"]), "MEMORY.md")
    assert second.redacted and third.redacted and first.indexed and second.indexed and third.indexed
    text = (workspace / "MEMORY.md").read_text()
    assert not [b for b in BODY if b in text], "the key's body is in the note"
    assert "-----BEGIN RSA PRIVATE KEY-----" in text and "-----END RSA PRIVATE KEY-----" in text
    # the note's line numbers stay those of the text written
    lines = text.split("\n")
    assert lines[second.start_line - 1].startswith("*") and lines[third.end_line - 1].startswith("-----END")
    chunks = _chunk_texts(settings.index_file)
    assert "BEGIN RSA PRIVATE KEY" in chunks and not [b for b in BODY if b in chunks]
    out = tmp_path / "export.jsonl"
    assert main(["export", "-w", str(workspace), str(out)]) == 0
    exported = out.read_text()
    assert exported and not [b for b in BODY if b in exported]
    # the note's own text before the write is left as it was
    assert text.startswith((ROOT / "examples" / "workspace" / "MEMORY.md").read_text().rstrip("\n"))


def test_w3_a_key_body_and_its_end_without_the_begin_is_masked(workspace: Path) -> None:
    settings = _settings(workspace)
    append_note(settings, "Deploy key:\n-----BEGIN RSA PRIVATE KEY-----", "memory/k.md")
    res = append_note(settings, "\n".join([*BODY, "-----END RSA PRIVATE KEY-----"]), "memory/k.md")
    text = (workspace / "memory" / "k.md").read_text()
    assert res.redacted and not [b for b in BODY if b in text] and "-----BEGIN RSA PRIVATE KEY-----" in text
    assert not [b for b in BODY if b in redact(" ".join([*BODY, "-----END RSA PRIVATE KEY-----"]))]


def test_w3_a_value_on_the_write_after_its_key_is_masked(workspace: Path) -> None:
    settings = _settings(workspace)
    append_note(settings, "db settings:\npassword:", "memory/db.md")
    res = append_note(settings, "  hunter2-very-secret-99", "memory/db.md")
    text = (workspace / "memory" / "db.md").read_text()
    assert "hunter2-very-secret-99" not in text and res.redacted


def test_w3_a_write_never_rewrites_the_users_own_lines(workspace: Path) -> None:
    # a PEM marker in the user's prose, then a write holding an END line: the joined text looks
    # like one key from the marker to END, but the user's lines between are not the agent's to mask
    note = workspace / "memory" / "trip.md"
    mine = ("# Trip\nKey files start with -----BEGIN RSA PRIVATE KEY----- (a note to self)\n"
            "The Lisbon trip budget is 2400 EUR.\nCall mom on Sunday.\n")
    note.write_text(mine)
    res = append_note(_settings(workspace), "Keys end with -----END RSA PRIVATE KEY----- (reminder)", "memory/trip.md")
    text = note.read_text()
    assert text.startswith(mine), text
    assert text.split("\n")[res.start_line - 1].startswith("Keys end with")


def test_w3_a_sentence_after_a_word_ending_in_key_is_not_a_value(workspace: Path) -> None:
    settings = _settings(workspace)
    append_note(settings, "Shopping list for the turkey:", "memory/list.md")
    res = append_note(settings, "Dana's flight lands at 14:05 on Friday.", "memory/list.md")
    assert "Dana's flight lands at 14:05 on Friday." in (workspace / "memory" / "list.md").read_text()
    assert not res.redacted
    # a one-token value after its name still is one, across writes or in one
    append_note(settings, "the wifi:\npassword:", "memory/wifi.md")
    append_note(settings, "hunter2hunter2", "memory/wifi.md")
    assert "hunter2hunter2" not in (workspace / "memory" / "wifi.md").read_text()


def test_w3_a_secret_labelled_on_the_line_before_is_masked_in_a_note_as_in_a_transcript() -> None:
    aws = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
    for text, secret in [(f"AWS credentials for the deploy bot:\n{aws}", aws),
                         ("Authorization: Bearer\neyJhbGciOiJIUzI1NiJ9abcdefghij", "eyJhbGciOiJIUzI1NiJ9abcdefghij"),
                         ("the wifi password is\nhunter2hunter2", "hunter2hunter2"),
                         ("run --api-key\nabcdefghijklmnopqrstuvwxyz now", "abcdefghijklmnopqrstuvwxyz")]:
        assert secret not in redact(text)  # a transcript's redaction
        out = redact_lines(text)
        assert secret not in out and out.count("\n") == text.count("\n"), out
    # the line before a value's name is no such label: "Deploy key:" then a PEM BEGIN line stays
    assert redact_lines("Deploy key:\n-----BEGIN RSA PRIVATE KEY-----").endswith("-----BEGIN RSA PRIVATE KEY-----")


def test_w3_a_split_secret_reaches_the_disk_masked_even_when_the_write_is_killed(workspace: Path) -> None:
    settings = _settings(workspace)
    append_note(settings, "db settings:\npassword:", "memory/db.md")
    secret = "hunter2-very-secret-99"
    # killed at the fsync after its append: what is on disk then is all that ever gets there
    code = ("import os, signal; from memory_core.config import load_settings;"
            " from memory_core.notes.write import append_note;"
            " os.fsync = lambda fd: os.kill(os.getpid(), signal.SIGKILL);"
            f" append_note(load_settings(None, {{'workspace': {str(workspace)!r}, 'provider': 'none'}}),"
            f" '  {secret}', 'memory/db.md')")
    proc = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=120)
    assert proc.returncode == -signal.SIGKILL
    text = (workspace / "memory" / "db.md").read_text()
    assert "password:" in text and secret not in text and "*" in text


def test_w5_a_folder_with_the_notes_name_is_refused_as_a_path(workspace: Path) -> None:
    (workspace / "memory" / "dir.md").mkdir()
    with pytest.raises(PathError, match="a folder has that name"):
        append_note(_settings(workspace), "text", "memory/dir.md")
    proc = _cli("write", "-w", str(workspace), "--no-index", "text", "--path", "memory/dir.md")
    assert proc.returncode == 2 and b"Traceback" not in proc.stderr, proc.stderr


def test_w3_twilio_sk_keys_are_masked_wherever_redaction_runs(workspace: Path, tmp_path: Path) -> None:
    for line in (f"twilio api key {TWILIO}", f'"sid": "{TWILIO}"', f"TWILIO_KEY_SID {TWILIO}."):
        assert TWILIO not in redact(line) and TWILIO not in redact_lines(line)
        assert "SK0123\u2026cdef" in redact(line)
    settings = _settings(workspace)
    append_note(settings, f"The SMS sender uses {TWILIO}", "memory/sms.md")
    assert TWILIO not in (workspace / "memory" / "sms.md").read_text()
    tr = tmp_path / "t.jsonl"
    tr.write_text(json.dumps({"type": "message", "message": {"role": "user", "content": f"key {TWILIO}"}}) + "\n")
    assert TWILIO not in parse_session_file(tr).content


# -- W4, W5, W7: paths and text the indexer would skip or the system refuses ------------------------

def test_w4_a_non_utf8_name_or_an_over_long_path_is_refused_not_reported_indexed(workspace: Path) -> None:
    settings = _settings(workspace)
    run_index(settings)
    for bad in ("memory/caf\udce9.md", "memory/" + "/".join(["d" * 200] * 21) + "/x.md"):
        with pytest.raises(PathError):
            write_memory(settings, "should not be written", bad)
    assert not list((workspace / "memory").glob("caf*")) and not (workspace / "memory" / ("d" * 200)).exists()


def test_w4_indexed_is_false_when_the_indexer_skips_the_note(workspace: Path) -> None:
    settings = _settings(workspace)
    run_index(settings)
    big = workspace / "memory" / "huge.md"
    with open(big, "wb") as fh:  # over the indexer's 64 MiB limit (sparse): it skips the file
        fh.write(b"# huge\n")
        fh.truncate(65 * 1024 * 1024)
    res = write_memory(settings, "appended to a note the indexer skips", "memory/huge.md")
    assert not res.indexed and "the index does not hold it" in res.note
    small = write_memory(settings, "a normal note", "memory/small.md")
    assert small.indexed


def test_w5_invalid_text_and_long_names_get_one_line_not_a_traceback(workspace: Path) -> None:
    settings = _settings(workspace)
    res = append_note(settings, "bytes \udcff\udcfe from a pipe", "memory/bytes.md")
    assert "2 NUL or invalid characters" in res.note
    assert (workspace / "memory" / "bytes.md").read_text() == "bytes \ufffd\ufffd from a pipe\n"
    name = "memory/" + "n" * 250 + ".md"  # 253 bytes: fits NAME_MAX (the old temp copy's name did not)
    assert append_note(settings, "a long name", name).path == name
    with pytest.raises(PathError, match="too long"):
        append_note(settings, "x", "memory/" + "n" * 260 + ".md")
    with pytest.raises(UsageError):
        append_note(settings, 42, "memory/x.md")  # type: ignore[arg-type]
    # the CLI: text that is not UTF-8 in argv is written with U+FFFD, one line, no traceback
    proc = _cli("write", "-w", str(workspace), "--no-index", b"caf\xe9\xff ok", "--path",
                "memory/argv.md")
    assert proc.returncode == 0 and b"Traceback" not in proc.stderr, proc.stderr
    assert (workspace / "memory" / "argv.md").read_text() == "caf\ufffd\ufffd ok\n"
    # binary stdin: the same
    proc = _cli("write", "-w", str(workspace), "--no-index", "-", "--path", "memory/stdin.md",
                input=b"bin\xff\x00ary")
    assert proc.returncode == 0 and b"Traceback" not in proc.stderr, proc.stderr
    assert (workspace / "memory" / "stdin.md").read_text() == "bin\ufffdary\n"


def test_w7_one_write_cannot_create_a_deep_folder_tree(workspace: Path) -> None:
    settings = _settings(workspace)
    with pytest.raises(PathError, match="at most 8 folders"):
        append_note(settings, "deep", "memory/" + "d/" * 3000 + "x.md")
    assert not (workspace / "memory" / "d").exists()
    assert append_note(settings, "ok", "memory/" + "d/" * 8 + "x.md").path.count("/") == 9


# -- W6: a write killed mid-way ----------------------------------------------------------------------

def test_w6_a_killed_write_leaves_no_temp_copy_and_stale_ones_are_removed(workspace: Path) -> None:
    note = workspace / "memory" / "big.md"
    note.write_text("old text\n" * 100_000)
    # killed at its fsync: the old write had its full temp copy on disk then
    code = ("import os, signal, sys; from memory_core.config import load_settings;"
            " from memory_core.notes.write import append_note;"
            " os.fsync = lambda fd: os.kill(os.getpid(), signal.SIGKILL);"
            f" append_note(load_settings(None, {{'workspace': {str(workspace)!r}, 'provider': 'none'}}),"
            " 'killed note', 'memory/big.md')")
    proc = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=120)
    assert proc.returncode == -signal.SIGKILL
    assert not [p.name for p in (workspace / "memory").iterdir() if ".write-" in p.name]
    assert note.read_text().startswith("old text\n" * 100_000)
    # a copy an older version left behind (its writer gone) goes with the next write
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    stale = workspace / "memory" / f".big.md.write-{int(dead.stdout)}-0badc0de"
    stale.write_bytes(b"x" * 1_000_000)
    append_note(_settings(workspace), "next write", "memory/big.md")
    assert not stale.exists()


# -- F1-F4: the flush ----------------------------------------------------------------------------------

def test_f1_a_symlinked_ledger_lock_is_refused(workspace: Path, tmp_path: Path) -> None:
    settings = _settings(workspace)
    lock = settings.flush_ledger_file.with_name(settings.flush_ledger_file.name + ".lock")
    lock.parent.mkdir(parents=True, exist_ok=True)
    target = tmp_path / "elsewhere" / "created-through-the-link"
    target.parent.mkdir()
    lock.symlink_to(target)
    with pytest.raises(UnsafePathError, match="symbolic link"):
        check_flush(settings, "s1", tokens=10_000_000, record=True)
    assert not target.exists()
    proc = _cli("flush", "-w", str(workspace), "s1", "--tokens", "10000000", "--record", text=True)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert not target.exists()


def test_f2_a_deeply_nested_transcript_line_is_skipped(tmp_path: Path) -> None:
    tr = tmp_path / "deep.jsonl"
    msg = json.dumps({"type": "message", "message": {"role": "user", "content": "x" * 400}})
    tr.write_text("[" * 200_000 + "]" * 200_000 + "\n" + msg + "\n"
                  + '{"type": "message", "message": {"role": "user", "content": ' + "[" * 100_000 + "]" * 100_000
                  + "}}\n")
    est = estimate_transcript(tr)
    assert (est.messages, est.tokens) == (1, 100)


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_f3_a_fifo_or_device_transcript_returns_one_line(workspace: Path, tmp_path: Path, kind: str) -> None:
    if kind == "fifo":
        path = tmp_path / "session.jsonl"
        os.mkfifo(path)
    else:
        path = Path("/dev/zero")
    proc = _cli("flush", "-w", str(workspace), "s1", "--transcript", str(path), timeout=60, text=True)
    assert proc.returncode == 2 and "not a regular file" in proc.stderr, proc.stderr
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr


def test_f4_a_damaged_ledger_is_set_aside_not_fatal(workspace: Path) -> None:
    settings = _settings(workspace)
    ledger = settings.flush_ledger_file
    ledger.parent.mkdir(parents=True, exist_ok=True)
    ledger.write_bytes(b'{"version": 1, "sessions": {"s1": {"cyc')  # cut short
    res = check_flush(settings, "s1", tokens=10_000_000, record=True)
    assert res.due and res.recorded and "set aside" in res.reason
    aside = [p for p in ledger.parent.iterdir() if p.name.startswith(ledger.name + ".damaged-")]
    assert len(aside) == 1 and aside[0].read_bytes().endswith(b'"cyc')
    assert json.loads(ledger.read_text())["sessions"]["s1"]["cycle"] == 0
    assert not check_flush(settings, "s1", tokens=10_000_000, record=True).due  # the ledger works again


def test_f4_a_flush_killed_while_it_writes_the_ledger_leaves_nothing_behind(workspace: Path) -> None:
    settings = _settings(workspace)
    ledger = settings.flush_ledger_file
    code = ("import os, signal; from memory_core.config import load_settings;"
            " from memory_core.notes.flush import check_flush;"
            " os.fsync = lambda fd: os.kill(os.getpid(), signal.SIGKILL);"
            f" check_flush(load_settings(None, {{'workspace': {str(workspace)!r}, 'provider': 'none'}}), 's1',"
            " tokens=10_000_000, record=True)")
    proc = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=120)
    assert proc.returncode == -signal.SIGKILL
    assert [p.name for p in ledger.parent.glob(ledger.name + "*.tmp")]  # the killed write's temp copy
    res = check_flush(settings, "s1", tokens=10_000_000, record=True)
    assert res.due and res.recorded  # the killed flush never recorded its cycle
    assert not list(ledger.parent.glob(ledger.name + "*.tmp"))


# -- M2: HTTP sessions ---------------------------------------------------------------------------------

def test_m2_http_sessions_are_reaped_when_idle_and_bounded(workspace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    from starlette.testclient import TestClient

    from memory_core.apps import mcp_server

    monkeypatch.setattr(mcp_server, "HTTP_SESSION_IDLE_S", 0.5)
    monkeypatch.setattr(mcp_server, "HTTP_MAX_SESSIONS", 3)
    server, tools = mcp_server.build_server(_settings(workspace))
    app = mcp_server.http_app(server, "127.0.0.1", "/mcp")
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                       "clientInfo": {"name": "t", "version": "1"}}}
    headers = {"accept": "application/json, text/event-stream", "content-type": "application/json",
               "mcp-protocol-version": "2025-06-18"}
    try:
        with TestClient(app, base_url="http://127.0.0.1:8765") as client:
            ids = []
            for _ in range(3):
                r = client.post("/mcp", json=init, headers=headers)
                assert r.status_code == 200, r.text
                ids.append(r.headers["mcp-session-id"])
            assert client.post("/mcp", json=init, headers=headers).status_code == 503  # bounded
            ping = {"jsonrpc": "2.0", "id": 2, "method": "ping"}
            deadline = time.monotonic() + 60
            while True:  # abandoned: reaped once idle (each look is a request: looks are 4 idle times apart)
                time.sleep(2)
                r = client.post("/mcp", json=ping, headers={**headers, "mcp-session-id": ids[0]})
                if r.status_code == 404:
                    break
                assert time.monotonic() < deadline, "an idle session was never reaped"
            assert client.post("/mcp", json=init, headers=headers).status_code == 200  # room again
    finally:
        tools.close()


def test_f5_a_session_id_that_is_not_utf8_gets_one_line(workspace: Path) -> None:
    # bytes from argv that are not UTF-8 reach Python surrogate-escaped; the ledger cannot hold them
    proc = _cli("flush", "-w", str(workspace), b"sess\xff", "--tokens", "10000000", "--record")
    assert proc.returncode == 2 and b"Traceback" not in proc.stderr, proc.stderr
    assert b"session id" in proc.stderr
    with pytest.raises(UsageError):
        check_flush(_settings(workspace), "sess\udcff", tokens=10)
