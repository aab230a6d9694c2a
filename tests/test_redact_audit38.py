"""What the thirty-eighth session's audit got past redaction, end to end: an OpenPGP private key, a
secret in markup, in a Markdown table, after ``=>``, under a name going on past its keyword, a
service token by its prefix, and a transcript's secret whose label is the message before it. None
may reach the provider, the index, a search's snippet or ``get``; an index built under the older
rules is rebuilt once."""

from __future__ import annotations

import json
from pathlib import Path

import apsw

from memory_core.index.pipeline import run_index
from memory_core.query.search import Searcher
from memory_core.sources.sessions import parse_session_file, session_text_for_range
from memory_core.storage.indexmeta import REDACTION_VERSION
from memory_core.storage.store import read_meta, write_meta
from tests.conftest import openai_settings

PGP_BODY = "lQOYBGXn0ZsBCADFx3wq7V2k9mJcVERIFYPGPa1b2c3d4e5f6g7h8i9j0kAbCdEfGzz"
NOTE = f"""# Deploy secrets

Signing key:
-----BEGIN PGP PRIVATE KEY BLOCK-----

{PGP_BODY}
=AbCd
-----END PGP PRIVATE KEY BLOCK-----

```ruby
config = {{ 'api_key' => 'RUBYSECRET0123456789abcdef' }}
```

<add key="ApiKey" value="DOTNETSECRET0123456789abc"/>

| what | value |
|---|---|
| api_key | TABLESECRET0123 |

SECRET_KEY_BASE=RAILSSECRET0123456789abcdef
Vault login: hvs.CAESIJlWh0wUCXqYgVd9tZq3kqY4a1B2c3D4e5F6
"""
NOTE_SECRETS = [PGP_BODY, "RUBYSECRET0123456789abcdef", "DOTNETSECRET0123456789abc", "TABLESECRET0123",
                "RAILSSECRET0123456789abcdef", "hvs.CAESIJlWh0wUCXqYgVd9tZq3kqY4a1B2c3D4e5F6"]
CHAT = ["The AWS secret access key for the deploy bot:", "wJalrXUtnFEMI/K7MDENG/bPxSPLITAAAAEXAMPLEKEY",
        "and the vpn password:", "SplitVpn-Horse-42", "thanks, the deploy bot works again"]
CHAT_SECRETS = ["wJalrXUtnFEMI/K7MDENG/bPxSPLITAAAAEXAMPLEKEY", "SplitVpn-Horse-42"]


def _chat(path: Path) -> None:
    lines = []
    for i, text in enumerate(CHAT):
        lines.append(json.dumps({"type": "message", "timestamp": f"2026-11-20T10:0{i}:00Z",
                                 "message": {"role": "user" if i % 2 == 0 else "assistant", "content": text}}))
        if i == 2:  # a record between the label and its value: not a message
            lines.append(json.dumps({"type": "custom", "data": {"x": 1}}))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def test_the_audits_secrets_reach_no_provider_index_snippet_or_get(workspace: Path, openai_fake) -> None:
    (workspace / "memory" / "deploy.md").write_text(NOTE, encoding="utf-8")
    _chat(workspace / "sessions" / "deploy-chat.jsonl")
    raw = (workspace / "memory" / "deploy.md").read_text() + (workspace / "sessions" / "deploy-chat.jsonl").read_text()
    assert all(s in raw for s in NOTE_SECRETS + CHAT_SECRETS)  # the files really carry them
    s = openai_settings(workspace, openai_fake, sources=["memory", "sessions"], redact="all")
    assert run_index(s).swapped
    sent = "\n".join(r.raw.decode("utf-8", "replace") for r in openai_fake.requests)
    index = s.index_file.read_bytes().decode("utf-8", "replace")
    for secret in NOTE_SECRETS + CHAT_SECRETS:
        assert secret not in sent, f"{secret[:8]}… was sent to the provider"
        assert secret not in index, f"{secret[:8]}… is in the index"
    assert "deploy bot works again" in sent  # the transcript was embedded, its other words as written
    with Searcher(s) as se:
        note = se.read_file("memory/deploy.md").text
        chat = se.read_file("sessions/deploy-chat.jsonl").text
        # each range of the transcript alone: the value's label is outside it
        value_only = [se.read_file("sessions/deploy-chat.jsonl", from_line=n, lines=1).text for n in (2, 5)]
        shown = [r.snippet for q in ("deploy secrets signing key", "deploy bot vpn password")
                 for r in se.search(q, min_score=0)]
    # the note keeps its lines: the key's armour lines stay, its body is masked
    assert note.rstrip("\n").count("\n") == NOTE.rstrip("\n").count("\n") and "-----END PGP PRIVATE KEY BLOCK-----" in note
    assert "SECRET_KEY_BASE=" in note and '<add key="ApiKey" value=' in note
    for secret in NOTE_SECRETS:
        assert secret not in note
    for text in (chat, *value_only, *shown):
        for secret in NOTE_SECRETS + CHAT_SECRETS:
            assert secret not in text, f"{secret[:8]}… shown in {text[:80]!r}"
    assert value_only[0].endswith("wJalrX…EKEY") and value_only[1].endswith("***")
    assert any("thanks, the deploy bot works again" in t for t in (chat,))


def test_a_transcripts_range_is_redacted_as_it_was_indexed(tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"
    _chat(path)
    doc = parse_session_file(path)
    indexed = dict(zip(doc.line_map, doc.content.split("\n"), strict=True))
    for line_no, text in indexed.items():
        assert session_text_for_range(path, line_no, line_no) == [text]
    assert indexed[2] == "Assistant: wJalrX…EKEY" and indexed[5] == "Assistant: ***"
    # the label's own words and a message with no secret after a label-less one are as written
    assert indexed[1] == "User: The AWS secret access key for the deploy bot:"
    assert indexed[6] == "User: thanks, the deploy bot works again"


def test_a_message_after_a_question_about_a_password_stays(tmp_path: Path) -> None:
    path = tmp_path / "q.jsonl"
    texts = ["what's the wifi password?", "it's on the fridge, next to the menu", "password reset flow was discussed",
             "ok, done"]
    path.write_text("".join(json.dumps({"type": "message", "message": {"role": "user", "content": t}}) + "\n"
                            for t in texts), encoding="utf-8")
    assert parse_session_file(path).content.split("\n") == [f"User: {t}" for t in texts]


def test_an_index_of_the_older_rules_is_rebuilt_once(workspace: Path, openai_fake) -> None:
    s = openai_settings(workspace, openai_fake, sources=["memory", "sessions"], redact="all")
    run_index(s)
    conn = apsw.Connection(str(s.index_file))
    try:
        meta = read_meta(conn)
        assert meta is not None and meta["redaction"] == REDACTION_VERSION
        meta.pop("redaction")  # as an index built before the rules changed records it
        write_meta(conn, meta)
    finally:
        conn.close()
    again = run_index(s)
    assert again.full and again.full_reason.startswith("redaction rules changed"), again.full_reason
    assert not run_index(s).full  # once
    off = openai_settings(workspace, openai_fake, sources=["memory", "sessions"], redact="off")
    assert run_index(off).full  # "off" masks nothing: no rules recorded
    assert not run_index(off).full


def test_a_label_in_a_message_of_several_lines_is_read_as_indexed(tmp_path: Path) -> None:
    """A snippet reads messages with their line breaks: the context it read was the label message's
    last line, where the index read the whole message as one line, so the two could mask differently."""
    from memory_core.sources.sessions import session_messages_by_line

    path = tmp_path / "m.jsonl"
    texts = ["AWS creds below.\nThe secret access key for the deploy bot:", CHAT_SECRETS[0], "ok"]
    path.write_text("".join(json.dumps({"type": "message", "message": {"role": "user", "content": t}}) + "\n"
                            for t in texts), encoding="utf-8")
    indexed = parse_session_file(path).content.split("\n")
    shown = session_messages_by_line(path, 3)
    assert indexed[1] == shown[2] == "User: wJalrX…EKEY"
    assert session_text_for_range(path, 2, 2, keep_lines=True) == [indexed[1]]
