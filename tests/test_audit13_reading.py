"""Reading memory back and knowing when it is stale: the thirteenth session's audit
(docs/reliability.md, "Reading back and freshness (the thirteenth session's audit)"). Each test
fails on the code before its fix.

G1: ``get`` / ``memory_get`` masked only the lines asked for; G2: a citation from line 0;
F2: a sessions folder given with ``..``; F3: a transcript grown by many short messages."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from memory_core.apps.mcp_server import MemoryTools
from memory_core.config import Settings, load_settings
from memory_core.index.pipeline import run_index
from memory_core.query.search import Searcher
from memory_core.sources.freshness import dirty_state
from memory_core.sources.redact import redact_lines

AWS = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
TOKEN = "abcdefghijklmnopqrstuvwxyz0123"
WIFI = "Sup3r$ecretWifi99"
PEM_BODY = "MIIEowIBAAKCAQEA1234567890abcdefghij"
CREDS = f"""# Deploy notes

AWS credentials for the deploy bot:
{AWS}

Authorization: Bearer
{TOKEN}

the wifi password is
{WIFI}

-----BEGIN RSA PRIVATE KEY-----
{PEM_BODY}
QWERTYUIOPASDFGHJKLZXCVBNM0987654321
-----END RSA PRIVATE KEY-----
"""


def _settings(ws: Path, **kw: Any) -> Settings:
    return load_settings(None, {"workspace": str(ws), "provider": "none", **kw})


# -- G1: get masks a note's lines as the index did -----------------------------------------------

@pytest.mark.parametrize(("first", "count", "secret"), [(4, 1, AWS), (7, 1, TOKEN), (10, 1, WIFI), (13, 2, PEM_BODY)])
def test_g1_get_masks_a_range_that_starts_below_a_secrets_label(workspace: Path, first: int, count: int,
                                                                  secret: str) -> None:
    """`get memory/creds.md#L4` (and `memory_get` from line 4) printed the AWS key in clear: the
    line that labels it ("AWS credentials for the deploy bot:") was not among the lines redacted,
    though the index, the export and search all mask it (redact = "all"); the same for a bearer
    token, a password after "the wifi password is" and a private key's body asked for without
    its BEGIN line."""
    (workspace / "memory" / "creds.md").write_text(CREDS)
    s = _settings(workspace, redact="all")
    assert run_index(s).swapped
    tools = MemoryTools(s)
    try:
        got = tools.get({"path": "memory/creds.md", "from": first, "lines": count})["text"]
        cited = tools.get({"path": f"memory/creds.md#L{first}-L{first + count - 1}"})["text"]
        whole = tools.get({"path": "memory/creds.md"})["text"]
    finally:
        tools.close()
    assert isinstance(got, str) and isinstance(cited, str) and isinstance(whole, str)
    assert secret not in got and secret not in cited and secret not in whole
    # the lines asked for are exactly those lines of the note as the index masked it
    masked = redact_lines(CREDS).split("\n")
    assert got.split("\n") == masked[first - 1:first - 1 + count] == cited.split("\n")


def test_g1_get_leaves_a_note_as_written_when_notes_are_not_redacted(workspace: Path) -> None:
    (workspace / "memory" / "creds.md").write_text(CREDS)
    s = _settings(workspace, redact="sessions")
    assert run_index(s).swapped
    tools = MemoryTools(s)
    try:
        assert tools.get({"path": "memory/creds.md", "from": 4, "lines": 1})["text"] == AWS
    finally:
        tools.close()


# -- G2: a citation from line 0 -----------------------------------------------------------------

def test_g2_a_citation_from_line_0_ends_where_it_was_cited(workspace: Path) -> None:
    """`get memory/a.md#L0-L2` returned lines 1-3: the start was raised to line 1 and the count
    (3) kept."""
    (workspace / "memory" / "a.md").write_text("one\ntwo\nthree\nfour\n")
    s = _settings(workspace)
    assert run_index(s).swapped
    tools = MemoryTools(s)
    try:
        got = tools.get({"path": "memory/a.md#L0-L2"})
    finally:
        tools.close()
    assert got["text"] == "one\ntwo", got


# -- F2: a sessions folder given with '..' --------------------------------------------------------

def _message(i: int, text: str) -> str:
    return json.dumps({"type": "message", "id": f"m{i}", "timestamp": "2026-01-01T10:00:00Z",
                       "message": {"role": "user", "content": text}}) + "\n"


def test_f2_a_sessions_folder_given_with_dotdot_is_watched(tmp_path: Path) -> None:
    """`[sessions] dir = "../agent/sessions"` (OpenClaw's layout: the workspace beside
    agents/main/sessions): the watcher compared its normalised event paths with the folder as
    written, dropped every event, and a new transcript was neither found nor reported stale."""
    from memory_core.api import open_memory
    from memory_core.runtime.watching import SourceFilter

    ws, sessions = tmp_path / "workspace", tmp_path / "agent" / "sessions"
    (ws / "memory").mkdir(parents=True)
    sessions.mkdir(parents=True)
    (ws / "memory" / "a.md").write_text("# A\n\nnothing here\n")
    (sessions / "old.jsonl").write_text(_message(1, "hello"))
    s = _settings(ws, sources=["memory", "sessions"], sessions={"dir": "../agent/sessions"})
    assert s.sessions_dir == sessions and ".." not in str(s.sessions_dir)
    assert SourceFilter(s).relevant(str(sessions / "new.jsonl"))
    assert run_index(s).swapped
    with open_memory(ws, provider="none", sources=["memory", "sessions"], sessions={"dir": "../agent/sessions"}) as memory:
        memory.answer("hello", min_score=0)
        (sessions / "new.jsonl").write_text(_message(1, "the quokka migration is scheduled for friday"))
        deadline = time.monotonic() + 12  # docs/mcp.md: found within 12 s
        found = stale = False
        while time.monotonic() < deadline and not (found or stale):
            ans = memory.answer("quokka migration", min_score=0)
            found = any(r["path"] == "sessions/new.jsonl" for r in ans.results)
            stale = bool(ans.stale)
            time.sleep(0.2)
    assert found or stale


# -- F3: a transcript grown by many short messages -----------------------------------------------

def test_f3_a_transcript_grown_by_delta_messages_is_stale_as_a_run_would_reindex_it(tmp_path: Path) -> None:
    """60 short messages (about 6 KB, under `delta_bytes`, over `delta_messages` = 50) appended
    to an indexed transcript: a run reindexed it, but `status` and a reader called the index
    fresh (only the bytes were compared), so a search never refreshed and never said stale."""
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    (ws / "sessions").mkdir()
    t = ws / "sessions" / "chat.jsonl"
    t.write_text(_message(0, "hello there"))
    s = _settings(ws, sources=["memory", "sessions"])
    assert run_index(s).swapped
    assert not dirty_state(s).dirty
    with t.open("a") as fh:
        for i in range(1, 10):
            fh.write(_message(i, f"short {i}"))
    assert not dirty_state(s).dirty  # 9 messages: below both thresholds, as a run keeps it
    with t.open("a") as fh:
        for i in range(10, 61):
            fh.write(_message(i, "zanzibar vendor" if i == 60 else f"short {i}"))
    state = dirty_state(s)
    assert state.dirty and state.changed == ["sessions/chat.jsonl"], state
    summary = run_index(s)  # ... and a run agrees: it reindexes the transcript
    assert summary.files_changed == 1
    assert not dirty_state(s).dirty
    with Searcher(s) as searcher:
        assert any(r.path == "sessions/chat.jsonl" for r in searcher.search("zanzibar vendor", min_score=0))
