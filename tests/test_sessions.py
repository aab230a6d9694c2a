"""Tests for memory_core.sources.sessions (OpenClaw session-files.ts compatible parsing)."""

from __future__ import annotations

import hashlib
import json
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

from memory_core.sources.sessions import (
    SessionDoc,
    count_lines,
    extract_session_text,
    normalize_session_text,
    parse_session_file,
    parse_session_lines,
    session_hash,
    session_lines_for_range,
    session_rel_path,
)


def _msg(role: str, content: Any, **extra: Any) -> dict[str, Any]:
    return {"type": "message", "message": {"role": role, "content": content}, **extra}


def _jsonl(records: list[Any]) -> list[str]:
    return [json.dumps(r) for r in records]


def _write(path: Path, lines: list[str] | list[bytes], newline: bytes = b"\n") -> Path:
    data = newline.join(x if isinstance(x, bytes) else x.encode("utf-8") for x in lines) + newline
    path.write_bytes(data)
    return path


REFERENCE_RECORDS = [
    {"type": "custom", "customType": "model-snapshot"},
    {"type": "custom", "customType": "openclaw.cache-ttl"},
    {"type": "session-meta", "agentId": "main"},
    _msg("user", "Hello world"),
    {"type": "custom", "customType": "x"},
    _msg("assistant", "Hi there, how can I help?"),
    _msg("user", "Tell me a joke"),
]

REFERENCE_CONTENT = "User: Hello world\nAssistant: Hi there, how can I help?\nUser: Tell me a joke"


# --------------------------------------------------------------------------- reference


def test_reference_example_lines() -> None:
    doc = parse_session_lines(_jsonl(REFERENCE_RECORDS))
    assert doc.content == REFERENCE_CONTENT
    assert doc.content.count("\n") + 1 == 3
    assert doc.line_map == [4, 6, 7]
    assert doc.messages == 3
    assert doc.skipped == 0  # the header and custom records are valid JSON: not malformed
    assert doc.lines == 7
    expected = hashlib.sha256((REFERENCE_CONTENT + "\n4,6,7").encode()).hexdigest()
    assert doc.hash == expected == session_hash(REFERENCE_CONTENT, [4, 6, 7])
    assert doc.hash == "9e7e83220860e40db5de9d4301acce7414bf5d6ee55a17e247028ade8d92be40"


def test_reference_example_file_matches_lines(tmp_path: Path) -> None:
    lines = _jsonl(REFERENCE_RECORDS)
    path = _write(tmp_path / "abc.jsonl", lines)
    doc = parse_session_file(path)
    assert isinstance(doc, SessionDoc)
    from_lines = parse_session_lines(lines)
    assert (doc.content, doc.line_map, doc.hash) == (
        from_lines.content,
        from_lines.line_map,
        from_lines.hash,
    )
    assert doc.bytes_read == path.stat().st_size
    assert doc.lines == 7


def test_empty_transcript() -> None:
    doc = parse_session_lines([])
    assert doc.content == ""
    assert doc.line_map == []
    assert doc.messages == 0
    assert doc.hash == hashlib.sha256(b"\n").hexdigest()


def test_session_rel_path() -> None:
    assert session_rel_path("/a/b/agent-1.jsonl") == "sessions/agent-1.jsonl"
    assert session_rel_path(Path("x.jsonl")) == "sessions/x.jsonl"


# --------------------------------------------------------------------------- skipping


def test_skips_blank_invalid_and_non_message_records() -> None:
    lines = [
        "",  # 1 blank
        "   ",  # 2 blank
        "{not json",  # 3 invalid
        '{"type":"message","message":{"role":"user","content":"trunc',  # 4 truncated
        "[1, 2, 3]",  # 5 array
        '"message"',  # 6 bare string
        "42",  # 7 number
        json.dumps({"type": "message"}),  # 8 no message
        json.dumps({"type": "message", "message": "hi"}),  # 9 message not an object
        json.dumps(_msg("system", "you are a bot")),  # 10 other role
        json.dumps(_msg("toolResult", "tool output")),  # 11 other role
        json.dumps({"type": "message", "message": {"role": 1, "content": "x"}}),  # 12
        json.dumps(_msg("user", None)),  # 13 no content
        json.dumps(_msg("user", 12)),  # 14 non-text content
        json.dumps(_msg("user", "   \n\t ")),  # 15 whitespace only
        json.dumps(_msg("assistant", [])),  # 16 empty block list
        json.dumps({"type": "Message", "message": {"role": "user", "content": "x"}}),  # 17
        '{"type":"message","message":{"role":"user","content":"bad"},"n":NaN}',  # 18 JSON.parse rejects
        json.dumps(_msg("user", "kept")),  # 19
        "[" * 200_000 + '"message"',  # 20 too deep for the parser
        json.dumps(_msg("assistant", "also kept")),  # 21
    ]
    doc = parse_session_lines(lines)
    assert doc.content == "User: kept\nAssistant: also kept"
    assert doc.line_map == [19, 21]
    # only lines that are not valid JSON are malformed: 3, 4, 18 (NaN), 20 (too deep)
    assert doc.skipped == 4
    assert doc.lines == 21


def test_unicode_escaped_type_is_still_recognised() -> None:
    # the fast pre-check must not drop records that spell "message" with escapes
    line = r'{"type":"m\u0065ssage","message":{"role":"user","content":"escaped"}}'
    assert parse_session_lines([line]).content == "User: escaped"


def test_extra_fields_and_key_order_do_not_matter() -> None:
    rec = {"id": "x", "message": {"content": "hi", "role": "assistant"}, "type": "message"}
    assert parse_session_lines([json.dumps(rec, indent=None)]).content == "Assistant: hi"


# --------------------------------------------------------------------------- content


def test_array_content_only_text_blocks_count() -> None:
    content = [
        {"type": "thinking", "thinking": "secret plan"},
        {"type": "text", "text": "  First   part "},
        {"type": "tool_use", "id": "t1", "name": "bash", "input": {"cmd": "ls"}},
        {"type": "tool_result", "content": "file.txt"},
        {"type": "image", "source": {"data": "AAAA"}},
        {"type": "text", "text": ""},
        {"type": "text", "text": None},
        {"type": "text"},
        "stray string",
        None,
        {"type": "text", "text": "second\npart"},
    ]
    doc = parse_session_lines(_jsonl([_msg("assistant", content)]))
    assert doc.content == "Assistant: First part second part"


def test_tool_use_only_message_is_skipped() -> None:
    content = [{"type": "toolCall", "id": "t1", "name": "read", "arguments": {"path": "x"}}]
    doc = parse_session_lines(_jsonl([_msg("assistant", content), _msg("user", "ok")]))
    assert doc.content == "User: ok"
    assert doc.line_map == [2]


def test_whitespace_collapsing() -> None:
    assert normalize_session_text("  a\n\n  b\t\tc \r\n d  ") == "a b c d"
    # JavaScript's \s: NBSP, ideographic space, line/paragraph separators, BOM
    assert normalize_session_text("a\u00a0\u3000b\u2028c\u2029d\ufeffe") == "a b c d e"
    # ...but not characters Python alone treats as whitespace
    assert normalize_session_text("a\x1cb") == "a\x1cb"
    doc = parse_session_lines(_jsonl([_msg("user", "line one\n\n   line\ttwo   ")]))
    assert doc.content == "User: line one line two"


def test_extract_session_text() -> None:
    assert extract_session_text("  x  ") == "x"
    assert extract_session_text("   ") is None
    assert extract_session_text({"type": "text", "text": "x"}) is None
    assert extract_session_text([{"type": "text", "text": " a "}, {"type": "text", "text": "b"}]) == "a b"


def test_content_has_one_line_per_message() -> None:
    doc = parse_session_lines(_jsonl([_msg("user", "a\nb\nc"), _msg("assistant", "d\u2028e")]))
    assert doc.content.split("\n") == ["User: a b c", "Assistant: d e"]


# --------------------------------------------------------------------------- encoding


def test_invalid_utf8_is_replaced_for_that_line_only(tmp_path: Path) -> None:
    lines: list[bytes] = [
        b'{"type":"message","message":{"role":"user","content":"caf\xe9 \xff ok"}}',
        b'{"type":"custom","data":"\xc3\x28"}',
        json.dumps(_msg("assistant", "na\u00efve")).encode(),
        '{"type":"message","message":{"role":"user","content":"d\u00e9j\u00e0 vu"}}'.encode(),
    ]
    path = _write(tmp_path / "bad.jsonl", lines)
    doc = parse_session_file(path)
    assert doc.content == "User: caf\ufffd \ufffd ok\nAssistant: na\u00efve\nUser: d\u00e9j\u00e0 vu"
    assert doc.line_map == [1, 3, 4]
    assert doc.skipped == 1
    assert parse_session_lines(lines).content == doc.content


def test_lone_surrogate_escape_becomes_replacement_char() -> None:
    line = r'{"type":"message","message":{"role":"user","content":"a\ud800b \ud83d\ude00"}}'
    doc = parse_session_lines([line])
    assert doc.content == "User: a\ufffdb \U0001f600"
    doc.content.encode("utf-8")  # storable


def test_bom_and_crlf(tmp_path: Path) -> None:
    lines = _jsonl([_msg("user", "first"), {"type": "custom"}, _msg("assistant", "second")])
    raw = ("\ufeff" + "\r\n".join(lines) + "\r\n").encode("utf-8")
    path = tmp_path / "crlf.jsonl"
    path.write_bytes(raw)
    doc = parse_session_file(path)
    assert doc.content == "User: first\nAssistant: second"
    assert doc.line_map == [1, 3]
    assert doc.bytes_read == len(raw)


def test_last_line_without_newline(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_text(json.dumps(_msg("user", "a")) + "\n" + json.dumps(_msg("user", "b")))
    doc = parse_session_file(path)
    assert doc.line_map == [1, 2]
    assert doc.lines == 2


def test_oversized_lines_are_skipped_without_breaking_numbering(tmp_path: Path) -> None:
    big = json.dumps(_msg("assistant", "x" * 5000))
    lines = _jsonl([_msg("user", "before")]) + [big] + _jsonl([_msg("user", "after")])
    path = _write(tmp_path / "big.jsonl", lines)
    doc = parse_session_file(path, max_line_bytes=1000)
    assert doc.content == "User: before\nUser: after"
    assert doc.line_map == [1, 3]
    assert doc.oversized == 1
    assert doc.skipped == 1
    assert doc.bytes_read == path.stat().st_size
    # without a limit the big message is kept
    assert parse_session_file(path, max_line_bytes=None).line_map == [1, 2, 3]


def test_missing_file_raises(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        parse_session_file(tmp_path / "nope.jsonl")


# --------------------------------------------------------------------------- redaction

SECRETS = [
    "sk-proj-abcdefghijklmnopqrstuvwxyz0123456789",
    "ghp_abcdefghijklmnopqrstuvwxyz0123456789",
    "hunter2hunter2",
    "AIzaSyABC123DEF456GHI789JKL012MNO345PQR",
    "123456789:ABCdefGHIjklMNOpqrSTUvwxYZ012345678",
    "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJl",
    "MIIEowIBAAKCAQEAsecretpemmaterial",
    "xoxb-123456789012-123456789012-abcdefghijklmnopqrstuvwx",
    "npm_abcdefghij1234567890",
]

SECRET_RECORDS = [
    _msg("user", f"my key is {SECRETS[0]} please use it"),
    _msg("assistant", [{"type": "text", "text": f"export GITHUB_TOKEN={SECRETS[1]}"}]),
    _msg("user", f"password: {SECRETS[2]}"),
    _msg("user", f'config {{"apiKey": "{SECRETS[3]}"}}'),
    _msg("assistant", f"telegram bot {SECRETS[4]} configured"),
    _msg("user", f"curl -H 'Authorization: Bearer {SECRETS[5]}'"),
    _msg(
        "user",
        f"-----BEGIN RSA PRIVATE KEY-----\n{SECRETS[6]}\nmore\n-----END RSA PRIVATE KEY-----",
    ),
    _msg("assistant", f"slack --token {SECRETS[7]} ok"),
    _msg("user", f"NPM_TOKEN = '{SECRETS[8]}'"),
]


def test_no_secret_survives_in_content(tmp_path: Path) -> None:
    lines = _jsonl(SECRET_RECORDS)
    for doc in (parse_session_lines(lines), parse_session_file(_write(tmp_path / "s.jsonl", lines))):
        assert doc.messages == len(SECRET_RECORDS)
        assert doc.redacted is True
        for secret in SECRETS:
            assert secret not in doc.content, secret
        assert "sk-pro…6789" in doc.content
        assert "password: ***" in doc.content
        assert "\n" not in doc.content.split("\n")[6]  # PEM collapsed to one line
        assert doc.content.count("\n") == len(SECRET_RECORDS) - 1


def test_redaction_can_be_disabled() -> None:
    doc = parse_session_lines(_jsonl(SECRET_RECORDS), redact_secrets=False)
    assert doc.redacted is False
    assert SECRETS[0] in doc.content
    assert SECRETS[2] in doc.content


def test_redaction_changes_hash() -> None:
    lines = _jsonl(SECRET_RECORDS)
    assert parse_session_lines(lines).hash != parse_session_lines(lines, redact_secrets=False).hash


# --------------------------------------------------------------------------- ranges & counts


def test_session_lines_for_range(tmp_path: Path) -> None:
    lines = [json.dumps({"type": "custom", "i": i}) for i in range(1, 11)]
    lines[4] = json.dumps(_msg("user", f"token={SECRETS[1]}"))
    path = _write(tmp_path / "r.jsonl", lines, newline=b"\r\n")
    assert session_lines_for_range(path, 2, 3) == lines[1:3]
    assert session_lines_for_range(path, 0, 1) == lines[:1]
    assert session_lines_for_range(path, 9, 50) == lines[8:]
    assert session_lines_for_range(path, 11, 12) == []
    assert session_lines_for_range(path, 5, 4) == []
    (shown,) = session_lines_for_range(path, 5, 5)
    assert SECRETS[1] not in shown
    assert "token=ghp_ab…6789" in shown
    assert session_lines_for_range(path, 5, 5, redact_secrets=False) == [lines[4]]


def test_count_lines(tmp_path: Path) -> None:
    p = tmp_path / "c.jsonl"
    p.write_bytes(b"")
    assert count_lines(p) == 0
    p.write_bytes(b"a\nb\n")
    assert count_lines(p) == 2
    p.write_bytes(b"a\nb\nc")  # unterminated last line is not complete
    assert count_lines(p) == 2
    assert count_lines(p, 2) == 1
    assert count_lines(p, 0, 2) == 1
    assert count_lines(p, 0, 1) == 0
    assert count_lines(p, 3, 3) == 0
    assert count_lines(p, 10) == 0
    with pytest.raises(ValueError):
        count_lines(p, -1)
    big = tmp_path / "big.jsonl"
    big.write_bytes(b"x" * 99 + b"\n" * 1 + (b"y" * 99 + b"\n") * 30_000)  # ~3 MB, > 1 chunk
    assert count_lines(big) == 30_001
    assert count_lines(big, 100) == 30_000
    assert count_lines(big, 0, 1_500_050) == 15_000


# --------------------------------------------------------------------------- streaming


def _write_large_transcript(path: Path, target_bytes: int) -> tuple[int, int]:
    """Write a realistic transcript dominated by records that are not indexed."""
    payload = "lorem ipsum dolor sit amet " * 40  # ~1 KB
    block_records: list[Any] = []
    for i in range(40):
        block_records.append({"type": "custom", "customType": "tool-log", "data": payload})
        if i % 4 == 0:
            block_records.append(_msg("toolResult", [{"type": "text", "text": payload * 3}]))
        if i % 8 == 0:
            block_records.append(
                _msg("assistant", [{"type": "toolCall", "name": "bash", "arguments": {"cmd": payload}}])
            )
    block_records.append(_msg("user", "short question with password: hunter2hunter2"))
    block = ("\n".join(json.dumps(r) for r in block_records) + "\n").encode()
    repeats = max(1, target_bytes // len(block))
    with path.open("wb") as f:
        for _ in range(repeats):
            f.write(block)
    return repeats, len(block_records)


def test_large_transcript_streams_with_bounded_memory(tmp_path: Path) -> None:
    path = tmp_path / "large.jsonl"
    repeats, per_block = _write_large_transcript(path, 50 * 1024 * 1024)
    size = path.stat().st_size
    assert size > 45 * 1024 * 1024

    tracemalloc.start()
    try:
        doc = parse_session_file(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()

    assert peak < size / 3, (peak, size)
    assert doc.messages == repeats
    assert doc.line_map[0] == per_block
    assert doc.line_map[-1] == per_block * repeats
    assert doc.lines == per_block * repeats
    assert doc.bytes_read == size
    assert "hunter2hunter2" not in doc.content
    assert count_lines(path) == per_block * repeats


def test_session_header_is_not_malformed() -> None:
    """Every transcript starts with a header record: only the truncated line of the Lisbon
    session counts as malformed, so the other transcripts index without a warning."""
    from tests.conftest import EXAMPLES

    skipped = {p.name: parse_session_file(p).skipped for p in sorted((EXAMPLES / "sessions").glob("*.jsonl"))}
    assert skipped == {"2026-10-21-ingest-502-debug.jsonl": 0, "2026-11-02-rate-limit-review.jsonl": 0,
                       "2026-11-09-lisbon-itinerary.jsonl": 1}


def test_the_first_malformed_lines_are_named() -> None:
    """A transcript's malformed lines are counted and the first five named by number, oversized
    or not JSON, so a person can find them (the warning said only how many)."""
    from memory_core.sources.sessions import MALFORMED_LINES_NAMED, parse_session_lines

    good = '{"type":"message","message":{"role":"user","content":"hello"}}'
    lines = [good, "{broken", good, "", "not json", *(["{x"] * 6), good]
    doc = parse_session_lines(lines)
    assert doc.messages == 3 and doc.skipped == 8
    assert doc.bad_lines == (2, 5, 6, 7, 8) and len(doc.bad_lines) == MALFORMED_LINES_NAMED
    assert parse_session_lines([good, good]).bad_lines == ()
