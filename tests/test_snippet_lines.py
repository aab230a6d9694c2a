"""Issue 39: a transcript's search snippet keeps its messages' own line breaks.

The index holds each message on one line, whitespace collapsed (the reference's text and hash);
a snippet reads the cited JSONL lines again, as ``get`` opens them, and shows each message as it
was written: a code block or a list stays on its lines. Masking is the index's: a secret whose
pattern spans a line break is shown as the index holds it, never in clear."""

from __future__ import annotations

import json
from pathlib import Path

from memory_core.config import load_settings
from memory_core.index.pipeline import run_index
from memory_core.query.search import Searcher
from memory_core.sources.sessions import display_session_text, normalize_session_text

CODE = "here is the retry helper:\n\nfunc retryAfterSeconds(h http.Header) int {\n    v := h.Get(\"Retry-After\")\n    return atoi(v)\n}\n"


def _session(path: Path, messages: list[tuple[str, str]]) -> None:
    lines = [json.dumps({"type": "session", "version": 3, "id": path.stem, "timestamp": "2026-01-05T10:00:00Z"})]
    for i, (role, text) in enumerate(messages):
        lines.append(json.dumps({"type": "message", "id": f"m{i}", "timestamp": f"2026-01-05T10:0{i}:00Z",
                                 "message": {"role": role, "content": [{"type": "text", "text": text}]}}))
    path.write_text("\n".join(lines) + "\n")


def test_display_text_keeps_lines_and_collapses_as_the_index_does() -> None:
    shown = display_session_text("  a   b \r\n\n\n\tc  d\n\n")
    assert shown == "a b\n\nc d"
    assert normalize_session_text(shown) == normalize_session_text("  a   b \r\n\n\n\tc  d\n\n")


def test_a_transcript_snippet_keeps_the_messages_line_breaks(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / "sessions").mkdir(parents=True)
    _session(ws / "sessions" / "code.jsonl", [("user", "how do we honour Retry-After?"), ("assistant", CODE)])
    s = load_settings(None, {"workspace": str(ws), "provider": "none", "sources": ["sessions"]})
    run_index(s)
    with Searcher(s) as searcher:
        hits = searcher.search("retryAfterSeconds Retry-After helper")
        assert hits and hits[0].path == "sessions/code.jsonl"
        snip = hits[0].snippet
        assert "func retryAfterSeconds(h http.Header) int {\n" in snip, snip
        assert '\n    v := h.Get("Retry-After")' not in snip  # whitespace runs collapse within a line
        assert '\nv := h.Get("Retry-After")\nreturn atoi(v)\n}' in snip, snip
        # the index still holds the message on one line (what is hashed and searched)
        got = searcher.read_file("sessions/code.jsonl")
        text = got.text if hasattr(got, "text") else got["text"]
        assert "Assistant: here is the retry helper: func retryAfterSeconds" in text


def test_a_secret_split_by_a_line_break_is_shown_as_the_index_masks_it(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / "sessions").mkdir(parents=True)
    key = "sk-proj-" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
    _session(ws / "sessions" / "key.jsonl", [("user", f"the staging deploy key is\n{key}\nkeep it safe"),
                                             ("assistant", f"OPENAI_API_KEY=\n{key}")])
    s = load_settings(None, {"workspace": str(ws), "provider": "none", "sources": ["sessions"]})
    run_index(s)
    with Searcher(s) as searcher:
        hits = searcher.search("staging deploy key")
        assert hits
        for h in hits:
            assert key not in h.snippet and key[8:] not in h.snippet, h.snippet


def test_a_transcript_rewritten_since_indexing_shows_the_indexed_text(tmp_path: Path) -> None:
    """The cited lines now hold other messages (a transcript rewritten, not yet indexed again):
    the snippet shows what was indexed, never the new lines under the old citation."""
    ws = tmp_path / "ws"
    (ws / "sessions").mkdir(parents=True)
    path = ws / "sessions" / "code.jsonl"
    _session(path, [("user", "how do we honour Retry-After?"), ("assistant", CODE)])
    s = load_settings(None, {"workspace": str(ws), "provider": "none", "sources": ["sessions"]})
    run_index(s)
    _session(path, [("user", "an unrelated question\nabout lunch"), ("assistant", "soup\nand bread\nat noon")])
    with Searcher(s) as searcher:
        hits = searcher.search("retryAfterSeconds Retry-After helper")
        assert hits and hits[0].path == "sessions/code.jsonl"
        assert "retryAfterSeconds" in hits[0].snippet and "soup" not in hits[0].snippet, hits[0].snippet
