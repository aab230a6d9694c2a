"""memory_search / memory_get in OpenClaw's shapes, through the official MCP client over stdio.

OpenClaw's tools take ``maxResults`` / ``minScore`` and return ``path, startLine, endLine, score,
snippet, source, citation``; ``memory_get(path, from, lines)`` returns ``{path, text}``, accepts a
citation, and gives empty text for a daily note not written yet. ``search --json`` prints the
same shape as the MCP tool.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from memory_core.apps.cli import main
from memory_core.config import load_settings
from memory_core.index.pipeline import run_index
from tests.conftest import EXAMPLES
from tests.test_mcp import _run, _stdio, _text

OPENCLAW_FIELDS = {"path", "startLine", "endLine", "score", "snippet", "source", "citation"}


@pytest.fixture
def indexed(tmp_path: Path):
    ws = tmp_path / "ws"
    shutil.copytree(EXAMPLES / "workspace", ws, ignore=shutil.ignore_patterns(".memory-core"))
    shutil.copytree(EXAMPLES / "sessions", ws / "sessions")
    cfg = ws / "memory-core.toml"
    cfg.write_text(f'workspace = "{ws}"\nprovider = "none"\nsources = ["memory", "sessions"]\n')
    settings = load_settings(cfg)
    run_index(settings)
    return settings


def test_openclaw_shapes_over_stdio(indexed, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ws = indexed.workspace_dir
    errlog = open(tmp_path / "server.err", "w")  # noqa: SIM115 - closed below
    got: dict[str, Any] = {}

    async def session() -> None:
        async with Client(_stdio(ws, errlog, "-c", str(ws / "memory-core.toml"))) as client:
            tools = {t.name: t for t in (await client.list_tools()).tools}
            props = tools["memory_search"].input_schema["properties"]
            assert {"maxResults", "minScore", "max_results", "min_score", "mode"} <= set(props)

            # OpenClaw's parameter names and its result fields
            r = await client.call_tool("memory_search", {"query": "pgbackrest restore", "maxResults": 2,
                                                         "minScore": 0.1})
            assert not r.is_error, _text(r)
            hits = r.structured_content["results"]
            assert 1 <= len(hits) <= 2 and all(set(h) >= OPENCLAW_FIELDS for h in hits)
            top = hits[0]
            assert top["citation"] == f"{top['path']}#L{top['startLine']}-L{top['endLine']}"
            assert "start_line" not in top and "end_line" not in top and top["match"] == "keyword"  # keyword-only index
            got["search"] = r.structured_content
            # snake_case aliases give the same answer; a mode can be chosen
            alias = await client.call_tool("memory_search", {"query": "pgbackrest restore", "max_results": 2,
                                                             "min_score": 0.1, "mode": "keyword"})
            assert alias.structured_content["results"] == r.structured_content["results"]
            assert (alias.structured_content["mode"], r.structured_content["mode"]) == ("keyword", "hybrid")
            bad = await client.call_tool("memory_search", {"query": "x", "mode": "both"})
            assert bad.is_error and "mode" in _text(bad)

            # memory_get with a citation: exactly the cited lines, {path, text}
            g = await client.call_tool("memory_get", {"path": top["citation"]})
            assert not g.is_error, _text(g)
            lines = (ws / top["path"]).read_text().split("\n")
            assert g.structured_content["path"] == top["path"]
            assert g.structured_content["text"] == "\n".join(lines[top["startLine"] - 1:top["endLine"]])
            # ./path and an explicit range
            g2 = await client.call_tool("memory_get", {"path": "./" + top["path"], "from": 2, "lines": 2})
            assert g2.structured_content["text"] == "\n".join(lines[1:3])

            # a daily note not written yet: empty text, not an error
            e = await client.call_tool("memory_get", {"path": "memory/2031-01-01.md"})
            assert not e.is_error and e.structured_content["path"] == "memory/2031-01-01.md"
            assert e.structured_content["text"] == ""
            nope = await client.call_tool("memory_get", {"path": "memory/not-a-note.md"})
            assert nope.is_error

            # a transcript citation: readable, redacted User:/Assistant: lines, not JSONL
            t = await client.call_tool("memory_search", {"query": "ingest 502 OPENAI_API_KEY", "sources": ["sessions"],
                                                         "minScore": 0})
            th = t.structured_content["results"]
            assert th and th[0]["source"] == "sessions"
            tg = await client.call_tool("memory_get", {"path": th[0]["citation"]})
            text = tg.structured_content["text"]
            # (each day's first message begins with its time, as in a snippet)
            assert re.match(r"\[\d{4}-\d\d-\d\d \d\d:\d\d UTC\] (User|Assistant): ", text)
            assert text and all(re.sub(r"^\[[^]]+ UTC\] ", "", line).startswith(("User: ", "Assistant: "))
                                for line in text.split("\n"))
            assert "{" not in text.split("\n")[0][:12]
            whole = await client.call_tool("memory_get", {"path": "sessions/2026-10-21-ingest-502-debug.jsonl"})
            body = whole.structured_content["text"]
            assert "sk-fake0123456789abcdefghijklmnop" not in body and "hunter2hunter2" not in body
            assert "fakeTokenAbcdefghijklmnop123" not in body

    try:
        _run(session)
    finally:
        errlog.close()
    assert "Traceback" not in (tmp_path / "server.err").read_text()

    # search --json prints the same shape as the tool
    rc = main(["search", "-c", str(ws / "memory-core.toml"), "pgbackrest restore", "-n", "2", "--min-score", "0.1", "--json"])
    assert rc == 0
    assert json.loads(capsys.readouterr().out) == got["search"]


def test_cli_search_mode_and_empty_note(indexed, capsys: pytest.CaptureFixture[str]) -> None:
    ws = str(indexed.workspace_dir)
    assert main(["search", "-w", ws, "DS-82", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["results"] == [] and "min_score" in out["note"]
    assert main(["search", "-w", ws, "pgbackrest", "--mode", "keyword"]) == 0
    assert "keyword" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exc:
        main(["search", "-w", ws, "pgbackrest", "--mode", "both"])
    assert exc.value.code == 2
    assert sys.executable  # the stdio test above spawned the server with this interpreter
