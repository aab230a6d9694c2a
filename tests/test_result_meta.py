"""OpenClaw's result metadata on every memory_search answer (issue 23 part 4): the provider and
model that embedded the query and whether the answer fell back, citations suppressed in group and
channel chats with ``citations = "auto"``, ``maxResults`` above the limit clamped, snippets of at
most 700 characters. Through the official MCP client over stdio, and the CLI's ``--json``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from memory_core.apps.cli import main
from memory_core.apps.mcp_server import MemoryTools
from memory_core.config import load_settings
from memory_core.index.pipeline import run_index
from memory_core.query.answers import MAX_RESULTS, SNIPPET_MAX_CHARS
from tests.conftest import openai_settings
from tests.test_mcp import _run, _stdio, _text

QUESTION = "what did we decide about the Lisbon hotel"


def test_metadata_chat_types_clamp_and_snippets_over_stdio(workspace: Path, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    run_index(load_settings(None, {"workspace": str(workspace), "provider": "none"}))
    errlog = open(tmp_path / "server.err", "w")  # noqa: SIM115 - closed below
    got: dict[str, Any] = {}

    async def session() -> None:
        async with Client(_stdio(workspace, errlog)) as client:
            tools = {t.name: t for t in (await client.list_tools()).tools}
            props = tools["memory_search"].input_schema["properties"]
            assert props["chatType"]["enum"] == ["direct", "group", "channel"] and "maximum" not in props["maxResults"]

            plain = await client.call_tool("memory_search", {"query": QUESTION, "minScore": 0})
            assert not plain.is_error, _text(plain)
            data = plain.structured_content
            # a keyword-only index: no provider embedded the query, and nothing fell back
            assert (data["provider"], data["model"], data["backend"], data["mode"], data["fallback"]) == (
                "none", None, "builtin", "hybrid", None)
            assert data["citations"] == "auto" and all(r["citation"] for r in data["results"])
            got["plain"] = data

            direct = await client.call_tool("memory_search", {"query": QUESTION, "minScore": 0, "chatType": "direct"})
            assert direct.structured_content["results"] == data["results"]
            for chat in ("group", "channel"):
                r = await client.call_tool("memory_search", {"query": QUESTION, "minScore": 0, "chat_type": chat})
                res = r.structured_content
                assert res["citations"] == "off" and res["results"]
                assert all(h["citation"] == "" and "Source:" not in h["snippet"] for h in res["results"])
                # path and lines stay: memory_get still reads the cited lines
                assert [(h["path"], h["startLine"]) for h in res["results"]] == [
                    (h["path"], h["startLine"]) for h in data["results"]]
            bad = await client.call_tool("memory_search", {"query": QUESTION, "chatType": "dm"})
            assert bad.is_error and "chatType" in _text(bad)

            many = await client.call_tool("memory_search", {"query": "the", "maxResults": 500, "minScore": 0})
            assert not many.is_error, _text(many)
            res = many.structured_content
            assert MAX_RESULTS // 2 < len(res["results"]) <= MAX_RESULTS
            assert f"maxResults 500 clamped to {MAX_RESULTS}" in res["note"]
            assert all(len(h["snippet"]) <= SNIPPET_MAX_CHARS for h in res["results"])
            assert max(len(h["snippet"]) for h in res["results"]) > SNIPPET_MAX_CHARS - 100  # long ones are cut

    try:
        _run(session)
    finally:
        errlog.close()
    # `search --json` carries the same metadata
    assert main(["search", "-w", str(workspace), QUESTION, "--min-score", "0", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == got["plain"]
    assert main(["search", "-w", str(workspace), QUESTION, "--chat", "group", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["citations"] == "off" and all(h["citation"] == "" for h in out["results"])
    # the text output says where a citation was withheld, rather than starting a line with blanks
    assert main(["search", "-w", str(workspace), QUESTION, "--chat", "group"]) == 0
    heads = [ln for ln in capsys.readouterr().out.splitlines() if " score " in ln]
    assert heads and all(ln.startswith("(no citation: a group chat)  score ") for ln in heads), heads


def test_citations_on_keeps_the_source_line_within_700_characters(workspace: Path, tmp_path: Path) -> None:
    cfg = tmp_path / "on.toml"
    cfg.write_text(f'workspace = "{workspace}"\nprovider = "none"\n[query]\ncitations = "on"\n')
    settings = load_settings(cfg)
    run_index(settings)
    tools = MemoryTools(settings)
    try:
        res = tools.search({"query": QUESTION, "minScore": 0, "maxResults": 20})
        group = tools.search({"query": QUESTION, "minScore": 0, "chatType": "group"})
    finally:
        tools.close()
    assert res["citations"] == "on" and res["results"]
    for h in res["results"]:
        assert h["snippet"].endswith(f"\nSource: {h['citation']}") and len(h["snippet"]) <= SNIPPET_MAX_CHARS
    assert any(len(h["snippet"]) == SNIPPET_MAX_CHARS for h in res["results"])  # cut to make room for the line
    assert group["citations"] == "on"  # "on" means on, in every chat; only "auto" looks at the chat type


def test_provider_model_and_the_keyword_fallback_with_each_answer(workspace: Path, openai_fake: Any) -> None:
    s = openai_settings(workspace, openai_fake, query={"embed_timeout_s": 2},
                        remote={"max_attempts": 1})
    run_index(s)
    tools = MemoryTools(s)
    try:
        ok = tools.search({"query": QUESTION})
        assert (ok["provider"], ok["model"], ok["fallback"]) == ("openai", "text-embedding-3-small", None)
        assert any(h["match"] in ("vector", "both") for h in ok["results"])
        openai_fake.fail_next(None, status=500, message="upstream down")
        down = tools.search({"query": "Lisbon hotel river view"})
        fb = down["fallback"]
        assert fb is not None and (fb["from"], fb["to"]) == ("openai", "keyword"), down
        assert "keyword-only" in fb["reason"] and down["results"]
        assert all(h["match"] == "keyword" for h in down["results"])
        kw = tools.search({"query": QUESTION, "mode": "keyword"})  # asked for keyword-only: no fallback
        assert kw["mode"] == "keyword" and kw["fallback"] is None
    finally:
        openai_fake.clear_faults()
        tools.close()


def test_an_empty_answer_says_what_is_the_case(tmp_path: Path) -> None:
    """An empty index, and transcripts asked for when none is indexed, answered "the memory holds
    nothing that matches this well" (issue 39); a note without a date in its name showed its
    file's mtime as the day it was written ("written today" in a fresh clone)."""
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    (ws / "memory" / "2026-03-04.md").write_text("# March\n\nThe quokka budget was approved.\n")
    (ws / "memory" / "facts.md").write_text("# Facts\n\nThe quokka lives on Rottnest Island.\n")
    settings = load_settings(None, {"workspace": str(ws), "provider": "none"})
    run_index(settings)
    tools = MemoryTools(settings)
    try:
        hits = tools.search({"query": "quokka", "minScore": 0})["results"]
        dates = {h["path"]: h["date"] for h in hits}
        assert dates == {"memory/2026-03-04.md": "2026-03-04", "memory/facts.md": None}, dates
        sess = tools.search({"query": "quokka", "sources": ["sessions"]})
        assert sess["results"] == [] and "no transcript is indexed" in sess["note"], sess["note"]
        assert "--sessions" in sess["note"] and "matches this well" not in sess["note"]
        miss = tools.search({"query": "xylophone zeppelin"})
        assert "nothing scored at least" in miss["note"]  # an index that holds notes: nothing matched
    finally:
        tools.close()
    for f in (ws / "memory").iterdir():
        f.unlink()
    run_index(settings)
    tools = MemoryTools(settings)
    try:
        empty = tools.search({"query": "quokka"})
        assert empty["results"] == [] and "the index holds nothing yet" in empty["note"], empty["note"]
    finally:
        tools.close()


def test_a_transcript_shows_the_time_it_was_said_or_none(tmp_path: Path) -> None:
    """A transcript with no time in it (no message or header timestamp) showed its file's mtime as
    the day it was said: "written today" in a fresh clone, as undated notes did before. It is
    undated now; its header's time and its messages' times still show."""
    ws = tmp_path / "ws"
    (ws / "sessions").mkdir(parents=True)

    def transcript(name: str, *recs: dict[str, Any]) -> None:
        (ws / "sessions" / name).write_text("".join(json.dumps(r) + "\n" for r in recs))

    def said(text: str, **extra: Any) -> dict[str, Any]:
        return {"type": "message", **extra, "message": {"role": "user", "content": text}}

    transcript("undated.jsonl", said("the quokka boiler broke again"))
    transcript("header.jsonl", {"type": "session", "id": "h", "timestamp": "2025-03-04T10:00:00Z"},
               said("the quokka heater broke again"))
    transcript("stamped.jsonl", said("the quokka kettle broke again", timestamp="2025-05-06T08:30:00Z"))
    settings = load_settings(None, {"workspace": str(ws), "provider": "none", "sources": ["sessions"]})
    run_index(settings)
    tools = MemoryTools(settings)
    try:
        hits = tools.search({"query": "quokka broke", "minScore": 0})["results"]
        dates = {h["path"]: h["date"] for h in hits}
        assert dates == {"sessions/undated.jsonl": None, "sessions/header.jsonl": "2025-03-04T10:00",
                         "sessions/stamped.jsonl": "2025-05-06T08:30"}, dates
    finally:
        tools.close()
