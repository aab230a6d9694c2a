"""Sync triggers with real file changes: dirty state, on_search, on_session_start (a real MCP
client's initialize), watch and interval; never two reindexes of one index at once."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, StdioServerParameters, stdio_client

from memory_core.apps.mcp_server import MemoryTools
from memory_core.config import Settings, load_settings
from memory_core.index.pipeline import run_index
from memory_core.query.search import Searcher
from memory_core.runtime.sync import SyncManager
from memory_core.sources.freshness import dirty_state
from memory_core.storage.store import IndexLock
from tests.conftest import ROOT

NEW = "# New\n\nthe capybara rota starts on Monday\n"


def sync_settings(ws: Path, **sync: Any) -> Settings:
    return load_settings(None, {"workspace": str(ws), "provider": "none", "sync": sync})


def wait_for(cond: Any, timeout: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.05)
    return False


def paths(hits: list[Any]) -> list[str]:
    return [h.path for h in hits]


def test_dirty_state_follows_the_sources(workspace: Path) -> None:
    s = sync_settings(workspace)
    assert dirty_state(s).dirty and dirty_state(s).reason == "no index yet"
    run_index(load_settings(None, {"workspace": str(workspace), "provider": "none", "sources": ["memory", "sessions"]}))
    s = load_settings(None, {"workspace": str(workspace), "provider": "none", "sources": ["memory", "sessions"]})
    assert not dirty_state(s).dirty
    with Searcher(s) as searcher:
        assert searcher.status().dirty is False
    (workspace / "memory" / "new.md").write_text(NEW)
    (workspace / "MEMORY.md").write_text((workspace / "MEMORY.md").read_text() + "\nmore\n")
    (workspace / "memory" / "2026-09-01.md").unlink()
    d = dirty_state(s)
    assert d.dirty and d.new == ["memory/new.md"] and d.changed == ["MEMORY.md"]
    assert d.removed == ["memory/2026-09-01.md"] and d.reason == "1 new, 1 changed, 1 removed"
    with Searcher(s) as searcher:
        st = searcher.status()
    assert st.dirty is True and st.dirty_reason == d.reason
    assert st.extra_paths == [] and st.cache_max_entries is None
    run_index(s)
    assert not dirty_state(s).dirty
    # a transcript that grew by less than sessions.delta_bytes is carried by a reindex: not dirty
    t = next((workspace / "sessions").glob("*.jsonl"))
    line = '{"type": "message", "message": {"role": "user", "content": "short"}}\n'
    with t.open("a") as fh:
        fh.write(line)
    assert not dirty_state(s).dirty
    with t.open("a") as fh:
        fh.write(line * (s.sessions.delta_bytes // len(line) + 1))
    assert dirty_state(s).changed == [f"sessions/{t.name}"]


def test_a_touched_file_is_fresh_after_the_next_run(workspace: Path) -> None:
    """Same bytes, a new mtime (touch, `git checkout`, `cp`, an editor saving an unchanged buffer):
    the run kept the rows but never recorded the mtime, so the index stayed dirty for ever and a
    long-lived reader started a run on every search (helper audit, seventeenth session: 49 runs in
    one MCP session). The run records it; nothing is re-read or re-embedded."""
    s = load_settings(None, {"workspace": str(workspace), "provider": "none", "sources": ["memory", "sessions"]})
    run_index(s)
    before = {r[0]: r[1:] for r in _files(s)}
    note, t = workspace / "memory" / "2026-09-03.md", next((workspace / "sessions").glob("*.jsonl"))
    for p in (note, t):
        st = p.stat()
        os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000))
    # (a transcript's indexed bytes are compared when its mtime moves: touched only, it is fresh)
    assert dirty_state(s).changed == ["memory/2026-09-03.md"]
    touched = run_index(s)
    assert (touched.files_changed, touched.chunks_indexed, touched.files_unchanged) == (
        0, 0, touched.files_scanned), touched.lines()
    assert touched.files_touched == 2 and any("touched only" in line for line in touched.lines())
    assert not dirty_state(s).dirty, dirty_state(s)
    after = {r[0]: r[1:] for r in _files(s)}
    assert {p for p in after if after[p] != before[p]} == {"memory/2026-09-03.md", f"sessions/{t.name}"}
    assert all(after[p][:2] == before[p][:2] for p in after)  # hash and size as they were
    again = run_index(s)
    assert again.outcome() == touched.outcome() or "nothing to do" in again.outcome()


def _files(s: Settings) -> list[tuple[Any, ...]]:
    from memory_core.storage.store import connect

    conn = connect(s.index_file, readonly=True)
    try:
        return [tuple(r) for r in conn.execute("SELECT path, hash, size, mtime FROM files")]
    finally:
        conn.close()


def test_on_search_reindexes_in_the_background_and_respects_the_writer_lock(workspace: Path) -> None:
    s = sync_settings(workspace, on_search=True)
    run_index(s)
    tools = MemoryTools(s)
    try:
        (workspace / "memory" / "new.md").write_text(NEW)
        # another process's run holds the writer lock: the background run must not start a second one
        with IndexLock(s.index_file, wait=False):
            out = tools.search({"query": "capybara rota", "min_score": 0})
            assert "memory/new.md" not in [r["path"] for r in out["results"]]  # answered from the current index
            assert out["stale"] is True and "the index is stale (1 new)" in out["note"]  # and says so
            assert tools.sync.wait_idle()
        last = tools.status({})["sync"]["last_run"]
        assert last["skipped"] is True and "another run is writing" in last["error"]
        assert dirty_state(s).dirty  # still dirty: the next search tries again
        tools.search({"query": "capybara rota", "min_score": 0})
        assert tools.sync.wait_idle()
        st = tools.status({})
        assert st["sync"]["last_run"]["ok"] is True and st["dirty"] is False
        out = tools.search({"query": "capybara rota", "min_score": 0})
        assert out["results"][0]["path"] == "memory/new.md"
        runs = len(tools.sync.runs)
        tools.search({"query": "capybara rota", "min_score": 0})  # clean index: no run
        assert tools.sync.wait_idle() and len(tools.sync.runs) == runs
    finally:
        tools.close()


def test_on_search_off_does_nothing_but_the_answer_says_the_index_is_stale(workspace: Path) -> None:
    s = sync_settings(workspace, on_search=False, on_session_start=False, watch=False)
    run_index(s)
    tools = MemoryTools(s)
    try:
        (workspace / "memory" / "new.md").write_text(NEW)
        assert tools.sync.on_search() is False
        out = tools.search({"query": "capybara rota", "min_score": 0})
        assert tools.sync.runs == [] and tools.status({})["dirty"] is True
        assert out["stale"] is True and out["stale_reason"] == "1 new" and out["refreshing"] is False
        assert "the index is stale (1 new)" in out["note"] and "memory/new.md" not in [r["path"] for r in out["results"]]
    finally:
        tools.close()


def test_requests_during_a_run_coalesce_into_one_follow_up(workspace: Path) -> None:
    s = sync_settings(workspace)
    run_index(s)
    sync = SyncManager(s)
    try:
        (workspace / "memory" / "new.md").write_text(NEW)
        started = [sync.request(f"request {i}") for i in range(5)]
        assert started[0] is True and not any(started[1:])
        assert sync.wait_idle()
        assert 1 <= len(sync.runs) <= 2 and all(r.ok for r in sync.runs)
        for a, b in zip(sync.runs, sync.runs[1:], strict=False):  # one after the other, never together
            assert b.started_at >= a.started_at + a.seconds
    finally:
        sync.close()
    assert not dirty_state(s).dirty


def test_a_deleted_index_is_built_again_by_the_next_search(workspace: Path) -> None:
    """The index folder deleted under a long-lived reader (``rm -rf .memory-core`` to start over
    with the MCP server running): its answers came from the open file, as fresh (helper audit,
    seventeenth session), then only said it was gone, for ever (eighteenth). With ``on_search``
    the next search builds it again, from the sources as they are now, and answers from it."""
    import shutil

    s = sync_settings(workspace, on_search=True, search_wait_ms=30_000)
    run_index(s)
    tools = MemoryTools(s)
    try:
        assert tools.search({"query": "capybara rota", "min_score": 0})["stale"] is False  # a clean check made
        shutil.rmtree(s.index_file.parent)
        (workspace / "memory" / "new.md").write_text(NEW)  # written while the index was gone
        out = tools.search({"query": "capybara rota", "min_score": 0})  # within the clean check's second
        assert out["stale"] is False, out
        assert "memory/new.md" in [r["path"] for r in out["results"]], out
        assert s.index_file.exists() and not dirty_state(s).dirty
        assert [r.reason for r in tools.sync.runs] == ["search on a dirty index (the index file was deleted)"]
    finally:
        tools.close()


def test_a_deleted_index_is_reported_when_no_trigger_builds_it(workspace: Path) -> None:
    """Without ``on_search`` the answer says the index is gone and what builds it again; after a
    run it is fresh. An index never built is not "gone": a reader does not build it."""
    s = sync_settings(workspace, on_search=False)
    run_index(s)
    tools = MemoryTools(s)
    try:
        assert tools.search({"query": "capybara rota", "min_score": 0})["stale"] is False
        s.index_file.unlink()
        out = tools.search({"query": "rate limit", "min_score": 0})
        assert out["stale"] is True and "the index file is gone" in out["note"], out
        assert "`memory-core index` builds it again" in out["note"], out
        assert tools.sync.runs == []
        run_index(s)
        assert tools.search({"query": "rate limit", "min_score": 0})["stale"] is False
    finally:
        tools.close()
    never = sync_settings(workspace / "memory", on_search=True)  # a workspace never indexed
    sync = SyncManager(never)
    try:
        assert sync.before_search().stale is False and sync.runs == [] and not never.index_file.exists()
    finally:
        sync.close()


def test_watch_with_debounce_reindexes_after_a_change(workspace: Path) -> None:
    pytest.importorskip("watchfiles")
    s = sync_settings(workspace, watch=True, watch_debounce_ms=200)
    run_index(s)
    sync = SyncManager(s)
    sync.start()
    try:
        assert sync._watcher.wait_ready(10)
        (workspace / "memory" / "new.md").write_text(NEW)
        assert wait_for(lambda: any(r.reason == "watch" and r.ok for r in sync.runs))
        with Searcher(s) as searcher:
            assert "memory/new.md" in paths(searcher.search("capybara rota", min_score=0))
    finally:
        sync.close()


def test_interval_reindexes_without_a_change_notice(workspace: Path) -> None:
    s = sync_settings(workspace, interval_minutes=0.005)  # 0.3 s
    run_index(s)
    (workspace / "memory" / "new.md").write_text(NEW)
    sync = SyncManager(s)
    sync.start()
    try:
        assert wait_for(lambda: any(r.reason == "interval" and r.ok for r in sync.runs))
        assert wait_for(lambda: not dirty_state(s).dirty)
    finally:
        sync.close()


def test_on_session_start_through_a_real_mcp_client(workspace: Path, tmp_path: Path) -> None:
    s = sync_settings(workspace)
    run_index(s)
    (workspace / "memory" / "new.md").write_text(NEW)  # changed before the agent's session starts
    cfg = tmp_path / "mc.toml"
    cfg.write_text('provider = "none"\n[sync]\non_session_start = true\n')
    params = StdioServerParameters(command=sys.executable, cwd=str(ROOT),
                                   args=["-m", "memory_core.apps.cli", "mcp", "-w", str(workspace), "--config", str(cfg)])
    errlog = open(tmp_path / "server.err", "w")  # noqa: SIM115 - closed below

    async def session() -> None:
        with anyio.fail_after(90):
            await talk()

    async def talk() -> None:
        async with Client(stdio_client(params, errlog=errlog)) as client:
            for _ in range(600):
                st = (await client.call_tool("memory_status", {})).structured_content
                if st["sync"]["last_run"] is not None and not st["sync"]["running"]:
                    break
                await anyio.sleep(0.1)
            assert st["sync"]["last_run"]["ok"] is True and "session start" in st["sync"]["last_run"]["reason"]
            assert st["dirty"] is False
            res = await client.call_tool("memory_search", {"query": "capybara rota", "min_score": 0})
            assert res.structured_content["results"][0]["path"] == "memory/new.md"

    try:
        anyio.run(session)
    finally:
        errlog.close()
