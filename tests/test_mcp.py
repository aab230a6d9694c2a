"""The MCP server, driven by the official SDK's own client: over stdio (the server is spawned
as ``python -m memory_core.apps.cli mcp``, as an agent host would) and over streamable HTTP."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, StdioServerParameters, stdio_client

from memory_core.apps.cli import main
from memory_core.apps.mcp_server import MemoryTools, call_tool
from memory_core.config import load_settings
from memory_core.index.pipeline import run_index
from memory_core.storage.store import IndexLock
from tests.conftest import ROOT

TIMEOUT = 30


def _run(fn: Callable[[], Awaitable[Any]], timeout: float = TIMEOUT) -> Any:
    async def guarded() -> Any:
        with anyio.fail_after(timeout):
            return await fn()

    return anyio.run(guarded)


def _stdio(ws: Path, errlog: Any, *extra: str) -> Any:
    """The SDK's stdio transport to ``python -m memory_core.apps.cli mcp`` (its stderr into ``errlog``)."""
    params = StdioServerParameters(command=sys.executable,
                                   args=["-m", "memory_core.apps.cli", "mcp", "-w", str(ws), *extra], cwd=str(ROOT))
    return stdio_client(params, errlog=errlog)


def _text(result: Any) -> str:
    return "\n".join(c.text for c in result.content if getattr(c, "type", None) == "text")


@pytest.fixture
def indexed(workspace: Path):
    settings = load_settings(None, {"workspace": str(workspace), "provider": "none"})
    run_index(settings)
    return settings


def test_stdio_tools_errors_and_live_swaps(indexed, tmp_path):
    ws = indexed.workspace_dir
    errlog = open(tmp_path / "server.err", "w")  # noqa: SIM115 - closed below

    async def session() -> None:
        async with Client(_stdio(ws, errlog)) as client:
            # tools and what they tell an agent
            tools = {t.name: t for t in (await client.list_tools()).tools}
            assert set(tools) == {"memory_search", "memory_get", "memory_status", "memory_write",
                                  "memory_store", "memory_recall", "memory_list", "memory_forget"}
            assert "FIRST" in tools["memory_search"].description
            assert "memory_get" in tools["memory_search"].description
            assert "memory_search" in tools["memory_get"].description
            assert set(tools["memory_get"].input_schema["properties"]) == {"path", "from", "lines"}
            assert tools["memory_search"].input_schema["required"] == ["query"]
            assert all(tools[t].annotations.read_only_hint for t in ("memory_search", "memory_get", "memory_status"))
            assert tools["memory_write"].annotations.read_only_hint is False

            # memory_search: path, lines, score, snippet, source, citation
            res = await client.call_tool("memory_search", {"query": "pgbackrest restore", "max_results": 3,
                                                           "min_score": 0, "sources": ["memory"]})
            assert not res.is_error, _text(res)
            hits = res.structured_content["results"]
            assert 1 <= len(hits) <= 3
            top = hits[0]
            assert {"path", "startLine", "endLine", "score", "snippet", "source", "citation", "match"} <= set(top)
            assert not {"start_line", "end_line"} & set(top)  # one spelling: an agent pays for each token
            assert top["path"] == "memory/howto/restore-postgres-backup.md" and top["source"] == "memory"
            assert top["citation"] == f"{top['path']}#L{top['startLine']}-L{top['endLine']}"
            assert json.loads(_text(res)) == res.structured_content  # same data for text-only clients

            # memory_get: exactly the requested lines of the cited file
            got = await client.call_tool("memory_get", {"path": top["path"], "from": top["startLine"], "lines": 3})
            assert not got.is_error, _text(got)
            lines = (ws / top["path"]).read_text().split("\n")
            start = top["startLine"]
            assert got.structured_content["text"] == "\n".join(lines[start - 1:start + 2])
            assert got.structured_content["from"] == start and got.structured_content["lines"] == 3

            st = await client.call_tool("memory_status", {})
            assert not st.is_error and st.structured_content["state"] == "ok"
            assert st.structured_content["chunks"] > 20

            # error cases are tool errors with a readable message, and the server lives on
            (tmp_path / "secret.md").write_text("top secret\n")
            for bad in ["../secret.md", str(tmp_path / "secret.md"), "/etc/passwd", "memory/nope.md"]:
                r = await client.call_tool("memory_get", {"path": bad})
                assert r.is_error and _text(r).startswith("memory_get: ")
                assert "top secret" not in _text(r) and "root:" not in _text(r)
            for name, args, needle in [
                ("memory_search", {"query": ""}, "query"),
                ("memory_search", {"query": "x", "max_results": 0}, "max_results"),
                ("memory_search", {"query": "x", "sources": ["email"]}, "sources"),
                ("memory_search", {"qeury": "x"}, "unknown argument"),
                ("memory_get", {"path": "memory/2026-09-04.md", "from": 0}, "from"),
                ("memory_get", {}, "path"),
                ("memory_remember", {"text": "x"}, "unknown tool"),
            ]:
                r = await client.call_tool(name, args)
                assert r.is_error, (name, args)
                assert needle in _text(r), _text(r)
            empty = await client.call_tool("memory_search", {"query": "xylophone zeppelin quokka"})
            assert not empty.is_error and empty.structured_content["results"] == []
            assert "nothing scored at least" in empty.structured_content["note"]

            # a reindex swaps a new file in: the running server answers from it
            note = ws / "memory" / "2026-09-04.md"
            note.write_text(note.read_text() + "\n## 23:59\nThe quokka migration finished at 23:58.\n")
            assert run_index(indexed).swapped
            r = await client.call_tool("memory_search", {"query": "quokka migration", "min_score": 0})
            assert any(h["path"] == "memory/2026-09-04.md" and "quokka" in h["snippet"]
                       for h in r.structured_content["results"]), _text(r)

            # a run holding the writer lock does not block queries
            with IndexLock(indexed.index_file):
                with anyio.fail_after(5):
                    r = await client.call_tool("memory_search", {"query": "quokka"})
                assert not r.is_error

    try:
        _run(session)
    finally:
        errlog.close()
    assert "Traceback" not in (tmp_path / "server.err").read_text()


def test_missing_index_is_a_clear_error_until_one_is_built(workspace, tmp_path):
    index = tmp_path / "idx" / "index.sqlite"
    errlog = open(tmp_path / "server.err", "w")  # noqa: SIM115 - closed below

    async def session() -> None:
        async with Client(_stdio(workspace, errlog, "--index", str(index))) as client:
            r = await client.call_tool("memory_search", {"query": "pgbackrest"})
            assert r.is_error
            assert f"no index at {index}" in _text(r) and "memory-core index" in _text(r)
            r = await client.call_tool("memory_get", {"path": "memory/2026-09-04.md"})
            assert r.is_error and "no index" in _text(r)
            st = await client.call_tool("memory_status", {})
            assert not st.is_error and st.structured_content["state"] == "missing"
            # the index appears (first build): the same server finds it
            run_index(load_settings(None, {"workspace": str(workspace), "index_path": str(index),
                                           "provider": "none"}))
            r = await client.call_tool("memory_search", {"query": "pgbackrest", "min_score": 0})
            assert not r.is_error and r.structured_content["results"]

    try:
        _run(session)
    finally:
        errlog.close()
    assert "no index at" in (tmp_path / "server.err").read_text()  # the start-up warning


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_streamable_http_on_loopback(indexed, tmp_path):
    port = _free_port()
    err = open(tmp_path / "http.err", "w")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        [sys.executable, "-m", "memory_core.apps.cli", "mcp", "-w", str(indexed.workspace_dir), "--transport", "http",
         "--port", str(port)], cwd=str(ROOT), stdout=subprocess.DEVNULL, stderr=err)

    async def session() -> None:
        deadline = time.monotonic() + 20
        while True:
            try:
                async with Client(f"http://127.0.0.1:{port}/mcp") as client:
                    names = {t.name for t in (await client.list_tools()).tools}
                    assert {"memory_search", "memory_get", "memory_status", "memory_write", "memory_store"} <= names
                    r = await client.call_tool("memory_search", {"query": "pgbackrest", "min_score": 0})
                    assert not r.is_error and r.structured_content["results"]
                    return
            except (OSError, ExceptionGroup) as exc:  # not listening yet
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(f"server did not come up: {exc!r}") from exc
                await anyio.sleep(0.1)

    try:
        _run(session)
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:  # pragma: no cover
            proc.kill()
            proc.wait()
        err.close()


def test_http_refuses_non_loopback_hosts(indexed, capsys):
    rc = main(["mcp", "-w", str(indexed.workspace_dir), "--transport", "http", "--host", "0.0.0.0"])
    assert rc == 2
    err = capsys.readouterr().err
    assert "refusing to serve memory on 0.0.0.0" in err and err.count("\n") == 1


def test_tool_calls_run_off_the_event_loop(indexed):
    """A slow query (a remote embedding call, a cold page cache) does not freeze the server."""

    class SlowSearcher:
        provider_note = ""

        def search_response(self, *a: Any, **k: Any) -> Any:
            from memory_core.query.results import SearchAnswer

            time.sleep(0.5)
            return SearchAnswer.from_dict({"results": []})

        def close(self) -> None:
            pass

    tools = MemoryTools(indexed, searcher=SlowSearcher())  # type: ignore[arg-type]
    ticks = 0

    async def scenario() -> Any:
        nonlocal ticks
        result: list[Any] = []

        async def query() -> None:
            result.append(await call_tool(tools, "memory_search", {"query": "anything"}))

        async with anyio.create_task_group() as tg:
            tg.start_soon(query)
            while not result:
                await anyio.sleep(0.01)
                ticks += 1
        return result[0]

    res = _run(scenario)
    assert not res.is_error and res.structured_content["results"] == []
    assert ticks >= 20  # the loop kept running while the search slept in its thread


def test_concurrent_calls_are_answered_while_a_search_waits_for_a_stalled_provider(workspace):
    """issue 22 #6: the server answered one call at a time, so a search stuck on a stalled
    embedding endpoint held up every other call; now a get or status (and another search) is
    answered meanwhile, and the stuck search ends at its deadline with keyword-only results."""
    from tests.conftest import openai_settings
    from tests.fakes.openai_fake import OpenAIFake

    with OpenAIFake(dims=64) as fake:
        s = openai_settings(workspace, fake, remote={"timeout_s": 60}, query={"embed_timeout_s": 5})
        run_index(s)
        tools = MemoryTools(s)
        done: dict[str, float] = {}
        results: dict[str, Any] = {}

        async def scenario() -> None:
            t0 = time.monotonic()

            async def call(key: str, name: str, args: dict[str, Any]) -> None:
                results[key] = await call_tool(tools, name, args)
                done[key] = time.monotonic() - t0

            async with anyio.create_task_group() as tg:
                fake.hang_next(1, seconds=30)
                tg.start_soon(call, "stuck", "memory_search", {"query": "postgres replication", "min_score": 0})
                await anyio.sleep(0.5)  # the stuck search holds its searcher now
                tg.start_soon(call, "status", "memory_status", {})
                tg.start_soon(call, "get", "memory_get", {"path": "MEMORY.md", "lines": 3})
                tg.start_soon(call, "search", "memory_search", {"query": "pgbackrest", "min_score": 0})

        try:
            _run(scenario)
        finally:
            tools.close()
    assert all(not r.is_error for r in results.values()), {k: _text(r) for k, r in results.items()}
    assert max(done["status"], done["get"], done["search"]) < 3, done
    assert 4 < done["stuck"] < 10, done
    assert "keyword-only" in results["stuck"].structured_content.get("note", "")


FRESHNESS_BOUND_S = 12  # issue 37: a server with default settings finds a note written by hand within 12 s


def test_default_server_finds_a_note_written_by_hand_and_says_when_its_index_is_stale(indexed, tmp_path):
    """Freshness by default ([sync] on_session_start, on_search and watch all on, as the seeds'):
    a server started with no settings at all, driven through the SDK's stdio client, indexes a
    note written by hand while it runs (its watch, before any search asks) and finds it; an
    answer read from an index known to be stale (another process holds the writer lock, so the
    refresh cannot run) says so."""
    ws = indexed.workspace_dir
    errlog = open(tmp_path / "server.err", "w")  # noqa: SIM115 - closed below

    def paths(res: Any) -> list[str]:
        return [r["path"] for r in res.structured_content["results"]]

    async def session() -> None:
        async with Client(_stdio(ws, errlog)) as client:
            first = await client.call_tool("memory_search", {"query": "capybara rota", "min_score": 0})
            assert first.structured_content["stale"] is False and "memory/capybara.md" not in paths(first)
            st = (await client.call_tool("memory_status", {})).structured_content
            assert st["sync"]["on_search"] and st["sync"]["on_session_start"] and st["sync"]["watch"]
            await anyio.sleep(0.5)  # the watch is in place shortly after the session starts
            (ws / "memory" / "capybara.md").write_text("# Rota\n\nThe capybara feeding rota starts on Monday.\n")
            with anyio.fail_after(FRESHNESS_BOUND_S):
                while True:  # memory_status starts no run: only the watch can make the index clean
                    st = (await client.call_tool("memory_status", {})).structured_content
                    if st["dirty"] is False:
                        break
                    await anyio.sleep(0.2)
                res = await client.call_tool("memory_search", {"query": "capybara feeding rota", "min_score": 0})
            assert paths(res)[0] == "memory/capybara.md" and res.structured_content["stale"] is False
            assert any(r["ok"] for r in [st["sync"]["last_run"]] if r) and st["sync"]["last_run"]["reason"] == "watch"

            # a stale index: another process is writing it, so no refresh can run; the answer says so
            with IndexLock(indexed.index_file, wait=False):
                (ws / "memory" / "okapi.md").write_text("# Okapi\n\nThe okapi enclosure opens in May.\n")
                with anyio.fail_after(FRESHNESS_BOUND_S):
                    while True:  # known stale once the change is seen (its watch event, or the next check)
                        res = await client.call_tool("memory_search", {"query": "okapi enclosure", "min_score": 0})
                        out = res.structured_content
                        assert "memory/okapi.md" not in paths(res)
                        if out["stale"]:
                            break
                        await anyio.sleep(0.2)
                assert out["stale"] is True and out["stale_reason"] == "1 new"
                assert "the index is stale (1 new)" in out["note"] and "stale" in _text(res)
            # the lock released, the next search refreshes (on_search) or says it is still stale
            with anyio.fail_after(FRESHNESS_BOUND_S):
                while True:
                    res = await client.call_tool("memory_search", {"query": "okapi enclosure", "min_score": 0})
                    out = res.structured_content
                    assert out["stale"] or "memory/okapi.md" in paths(res)  # never silently stale
                    if "memory/okapi.md" in paths(res):
                        break
                    await anyio.sleep(0.2)

    try:
        _run(session)
    finally:
        errlog.close()
    assert "Traceback" not in (tmp_path / "server.err").read_text()
