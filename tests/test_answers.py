"""Citations mode and the injection budget of memory_search answers, through a real MCP client."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import anyio
from mcp import Client, StdioServerParameters, stdio_client

from memory_core.apps.mcp_server import MemoryTools
from memory_core.config import load_settings
from memory_core.index.pipeline import run_index
from memory_core.query.answers import injection_budget
from tests.conftest import ROOT

QUERY = {"query": "Lisbon hotel confirmation trip", "max_results": 6, "min_score": 0}


def ask(ws: Path, tmp_path: Path, config: str, name: str) -> dict[str, Any]:
    cfg = tmp_path / f"{name}.toml"
    cfg.write_text('provider = "none"\n' + config)
    params = StdioServerParameters(command=sys.executable, cwd=str(ROOT),
                                   args=["-m", "memory_core.apps.cli", "mcp", "-w", str(ws), "--config", str(cfg)])
    out: dict[str, Any] = {}

    async def session() -> None:
        with anyio.fail_after(60), open(tmp_path / f"{name}.err", "w") as errlog:
            async with Client(stdio_client(params, errlog=errlog)) as client:
                res = await client.call_tool("memory_search", QUERY)
                assert not res.is_error
                out.update(res.structured_content)

    anyio.run(session)
    return out


def plain(ws: Path) -> dict[str, Any]:
    tools = MemoryTools(load_settings(None, {"workspace": str(ws), "provider": "none"}))
    try:
        return tools.search(dict(QUERY))
    finally:
        tools.close()


def test_citations_on_off_and_auto(workspace: Path, tmp_path: Path) -> None:
    run_index(load_settings(None, {"workspace": str(workspace), "provider": "none"}))
    base = plain(workspace)["results"]  # auto, the default: snippet as found, reference in `citation`
    assert len(base) >= 3 and all(r["citation"] == f"{r['path']}#L{r['startLine']}-L{r['endLine']}" for r in base)
    assert not any("Source:" in r["snippet"] for r in base)
    on = ask(workspace, tmp_path, "[query]\ncitations = \"on\"\n", "on")["results"]
    assert [r["citation"] for r in on] == [r["citation"] for r in base]
    for r, b in zip(on, base, strict=True):
        source = f"\nSource: {b['citation']}"
        if len(b["snippet"].rstrip()) + len(source) <= 700:
            assert r["snippet"] == f"{b['snippet'].rstrip()}{source}"
        else:  # OpenClaw's 700 characters hold the Source line too: the snippet is cut before it
            body = r["snippet"][: -len(source)]
            assert r["snippet"].endswith(source) and len(r["snippet"]) <= 700
            assert body.endswith("…") and b["snippet"].startswith(body[:-1])
            assert b["snippet"][len(body) - 1] in " \n"  # cut at a word boundary
    off = ask(workspace, tmp_path, "[query]\ncitations = \"off\"\n", "off")["results"]
    assert [r["path"] for r in off] == [r["path"] for r in base]  # memory_get still needs the path
    assert all(r["citation"] == "" and "Source:" not in r["snippet"] for r in off)


def test_injection_budget_cuts_and_says_so(workspace: Path, tmp_path: Path) -> None:
    run_index(load_settings(None, {"workspace": str(workspace), "provider": "none"}))
    full = plain(workspace)
    total = sum(len(r["snippet"]) for r in full["results"])
    budget = 300
    assert total > budget and "note" not in full
    cut = ask(workspace, tmp_path, f"[query]\nmax_injected_chars = {budget}\n", "budget")
    res = cut["results"]
    assert sum(len(r["snippet"]) for r in res) <= budget
    assert 1 <= len(res) < len(full["results"])
    assert [r["path"] for r in res] == [r["path"] for r in full["results"][: len(res)]]  # best first
    last, orig = res[-1], full["results"][len(res) - 1]
    assert last["snippet"] != orig["snippet"] and last["snippet"].endswith("…")
    assert orig["snippet"].startswith(last["snippet"][:-1])
    assert not orig["snippet"][len(last["snippet"]) - 1].isalnum()  # cut at a word boundary
    assert f"injection budget of {budget}" in cut["note"] and "dropped" in cut["note"]
    # a budget the answer fits in: nothing cut, no note
    roomy = ask(workspace, tmp_path, f"[query]\nmax_injected_chars = {total}\n", "roomy")
    assert roomy["results"] == full["results"] and "note" not in roomy


def test_qmd_backend_defaults_to_the_seeds_budget(workspace: Path) -> None:
    s = load_settings(None, {"workspace": str(workspace), "backend": "qmd"})
    assert injection_budget(s) == 4000
    assert injection_budget(load_settings(None, {"workspace": str(workspace)})) is None
    assert injection_budget(load_settings(None, {"workspace": str(workspace), "backend": "qmd",
                                                 "query": {"max_injected_chars": 50}})) == 50


def test_transcript_snippets_keep_messages_whole(tmp_path: Path) -> None:
    """A transcript message longer than a chunk's max_chars was cut at a fixed width, inside a
    word, and the snippet showed the cut as a line break (`"func retryAfterSecon\\nds..."`)."""
    ws = tmp_path / "ws"
    (ws / "sessions").mkdir(parents=True)
    (ws / "MEMORY.md").write_text("# Memory\n")
    words = " ".join(f"word{i:03d}" for i in range(60))
    long = f"{words} then func retryAfterSeconds returns the wait from the Retry-After header. {words}"
    lines = [{"type": "message", "message": {"role": "user", "content": "How does the client wait?"}},
             {"type": "message", "message": {"role": "assistant", "content": long}}]
    (ws / "sessions" / "s1.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    settings = load_settings(None, {"workspace": str(ws), "provider": "none", "sources": ["memory", "sessions"],
                                    "chunking": {"tokens": 64, "overlap": 8}})
    run_index(settings)
    tools = MemoryTools(settings)
    try:
        hits = tools.search({"query": "retryAfterSeconds Retry-After", "sources": ["sessions"], "minScore": 0})["results"]
    finally:
        tools.close()
    assert hits
    for h in hits:
        body = h["snippet"].split("] ", 1)[-1]  # after the "[date] " stamp
        # every line of a transcript snippet is a whole message or the snippet's own first piece
        assert all(line.startswith(("User: ", "Assistant: ")) for line in body.split("\n")[1:]), h["snippet"]
        # a chunk that begins inside a message begins at a word, not at half of one
        assert body.startswith(("User: ", "Assistant: ")) or body[1:].split(" ")[0] in long.split(), body
    assert any("func retryAfterSeconds returns" in h["snippet"] for h in hits), [h["snippet"] for h in hits]


def test_cut_snippets_end_at_a_word_boundary_with_an_ellipsis(tmp_path: Path) -> None:
    """issue 39: a snippet cut to 700 characters (citations on, a qmd snippet, the injection
    budget, a long stored memory) was cut inside a word ("retryAfterSecon"); the memory store's
    had no ellipsis at all."""
    from memory_core.notes.memory_store import Memory, RecallHit
    from memory_core.query.answers import cut_at_word, shape_results

    words = "the client waits: func retryAfterSeconds returns the wait from the Retry-After header "
    text = words * 12  # 1,044 characters
    for n in range(20, 760, 7):  # every cut of the text lands between words, never inside one
        cut = cut_at_word(text, n)
        assert len(cut) <= n and cut.endswith("…") and text.startswith(cut[:-1]), (n, cut)
        assert cut[:-1].split()[-1] in words.split() and text[len(cut) - 1] in " \n", (n, cut)
    assert cut_at_word("short", 10) == "short"
    assert cut_at_word("日本語の文章はスペースがありません", 8) == "日本語の文章は…"  # CJK: between characters
    assert cut_at_word("see https://example.com/" + "a" * 40, 40) == "see https://example.com/…"
    result = {"path": "sessions/s1.jsonl", "startLine": 1, "endLine": 2, "citation": "sessions/s1.jsonl#L1-L2",
              "snippet": text, "score": 0.9}
    for cfg in ({"citations": "off"}, {"citations": "on"}, {"max_injected_chars": 333}):
        s = load_settings(None, {"workspace": str(tmp_path), "provider": "none", "query": cfg})
        snippet = shape_results([result], s).results[0]["snippet"].split("\nSource: ")[0]
        assert snippet.endswith("…") and text[len(snippet) - 1] == " ", (cfg, snippet[-40:])
    mem = Memory("m1", text, 0.5, "fact", 0, 0)
    snippet = RecallHit(mem, 0.9, 0.9, 0.5, "both").to_agent()["snippet"]
    assert len(snippet) <= 700 and snippet.endswith("…") and text[len(snippet) - 1] == " ", snippet[-40:]
