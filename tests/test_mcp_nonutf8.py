"""A workspace whose folder name is not UTF-8 (``caf\\xe9``: Python keeps the byte as the
surrogate ``\\udce9``), served over MCP with the official SDK's stdio client (audit N4).

A surrogate in one answer (``memory_status``'s index path) used to kill the stdio server's
writer, and every later call on the session hung; the file watcher, which cannot take such a
path, logged a traceback and re-planned about twice a second for ever. Now every answer and
error text is UTF-8 (undecodable bytes shown escaped, ``caf\\xe9``) and the watcher warns once
and stops watching: a search still checks whether the index is stale."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from memory_core.apps.watch import make_runner
from memory_core.config import load_settings
from memory_core.index.pipeline import run_index
from memory_core.runtime.watching import Watcher
from tests.test_mcp import _run as mcp_run
from tests.test_mcp import _stdio, _text

TIMEOUT = 60
CAFE = os.fsdecode(b"caf\xe9")  # 'caf\udce9'
SHOWN = "caf\\xe9"  # how an answer shows it


def _run(fn: Callable[[], Awaitable[Any]]) -> Any:
    return mcp_run(fn, TIMEOUT)


@pytest.fixture
def cafe(tmp_path: Path) -> Path:
    ws = tmp_path / CAFE
    (ws / "memory").mkdir(parents=True)
    (ws / "MEMORY.md").write_text("# Memory\n\nThe walrus project budget is 9,100 EUR.\n")
    return ws


def test_every_tool_answers_in_a_workspace_whose_name_is_not_utf8(cafe: Path, tmp_path: Path) -> None:
    run_index(load_settings(None, {"workspace": str(cafe), "provider": "none"}))
    (cafe / "MEMORY.md").write_text("# Memory\n\nThe walrus project budget is 9,300 EUR.\n")  # stale now
    errlog = open(tmp_path / "server.err", "w")  # noqa: SIM115 - closed below

    async def session() -> None:
        async with Client(_stdio(cafe, errlog)) as client:
            st = await client.call_tool("memory_status", {})
            assert not st.is_error, _text(st)
            assert st.structured_content["state"] == "ok"
            assert f"/{SHOWN}/.memory-core/index.sqlite" in st.structured_content["index_path"]
            # the session lives on: every tool still answers
            r = await client.call_tool("memory_search", {"query": "walrus budget", "min_score": 0})
            assert not r.is_error, _text(r)
            # not watched: the search still checks the sources (answers fresh, or says it is stale)
            assert "9,300" in r.structured_content["results"][0]["snippet"] or r.structured_content["stale"]
            w = await client.call_tool("memory_write", {"text": "The okapi audit is due in May."})
            assert not w.is_error and w.structured_content["indexed"], _text(w)
            g = await client.call_tool("memory_get", {"path": w.structured_content["path"]})
            assert not g.is_error and "okapi" in g.structured_content["text"]
            r = await client.call_tool("memory_get", {"path": "memory/nope.md"})
            assert r.is_error and _text(r).startswith("memory_get: ")
            st = await client.call_tool("memory_status", {})
            assert not st.is_error and SHOWN in st.structured_content["index_path"]
            # and it says why the sources are not watched
            assert "not UTF-8" in st.structured_content["sync"]["watch_error"], st.structured_content["sync"]

    try:
        _run(session)
    finally:
        errlog.close()
    log = (tmp_path / "server.err").read_text(errors="replace")
    assert "Traceback" not in log, log
    assert log.count("not watching the sources for changes") == 1, log
    assert f"the path {tmp_path}/{SHOWN} is not UTF-8" in log, log


def test_missing_index_errors_in_a_workspace_whose_name_is_not_utf8(cafe: Path, tmp_path: Path) -> None:
    errlog = open(tmp_path / "server.err", "w")  # noqa: SIM115 - closed below

    async def session() -> None:
        async with Client(_stdio(cafe, errlog)) as client:
            r = await client.call_tool("memory_search", {"query": "walrus"})
            assert r.is_error and f"no index at {tmp_path}/{SHOWN}/" in _text(r), _text(r)
            r = await client.call_tool("memory_get", {"path": "MEMORY.md"})
            assert r.is_error and "no index" in _text(r) and SHOWN in _text(r), _text(r)
            st = await client.call_tool("memory_status", {})
            assert not st.is_error and st.structured_content["state"] == "missing"
            assert SHOWN in st.structured_content["index_path"]

    try:
        _run(session)
    finally:
        errlog.close()


def test_the_watcher_stops_once_for_a_path_it_cannot_watch(cafe: Path, caplog: pytest.LogCaptureFixture) -> None:
    settings = load_settings(None, {"workspace": str(cafe), "provider": "none"})
    watcher = Watcher(settings, make_runner(settings, env={}), debounce=0.05)
    with caplog.at_level(logging.INFO, logger="memory_core.apps.watch"):
        watcher.start()
        try:
            assert not watcher.wait_ready(timeout=20)  # never watching...
            assert watcher._ready.is_set()  # ...but the start-up run is done
            assert watcher.watch_error is not None and SHOWN in watcher.watch_error
            watcher.notify([], reason="by hand", full_scan="test")  # the scheduler still runs
            assert watcher.wait_idle(timeout=30)
        finally:
            watcher.stop()
    assert [r.ok for r in watcher.runs] == [True, True]
    assert not any(r.exc_info for r in caplog.records), caplog.text
    assert caplog.text.count("not watching the sources for changes") == 1, caplog.text
    assert "re-planning" not in caplog.text


def test_a_watcher_that_keeps_failing_backs_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                caplog: pytest.LogCaptureFixture) -> None:
    """Any other watcher failure: one traceback, then one line each, the wait doubling."""
    import watchfiles

    ws = tmp_path / "ws"
    ws.mkdir()  # no memory/ yet: one watch group (the workspace, flat)
    def broken_watch(*args: Any, **kw: Any) -> Any:  # watchfiles failing for good (not memory-core's code)
        raise OSError(28, "No space left on device (inotify)")

    monkeypatch.setattr(watchfiles, "watch", broken_watch)
    settings = load_settings(None, {"workspace": str(ws), "provider": "none"})
    watcher = Watcher(settings, make_runner(settings, env={}), initial_run=False, force_polling=True)
    def failures() -> list[logging.LogRecord]:
        return [r for r in caplog.records if "file watcher failed" in r.getMessage()]

    with caplog.at_level(logging.INFO, logger="memory_core.apps.watch"):
        watcher.start()
        try:  # three tries (1 s, then 2 s apart); the fourth would come 4 s later
            deadline = time.monotonic() + 60
            while len(failures()) < 3 and time.monotonic() < deadline:
                time.sleep(0.05)
        finally:
            watcher.stop()
    failed = failures()
    assert len(failed) >= 3, caplog.text
    assert failed[0].exc_info is not None and not any(r.exc_info for r in failed[1:])
    assert [r.getMessage().rsplit(" in ", 1)[1] for r in failed[:3]] == ["1s", "2s", "4s"]
    assert "2 times in a row" in failed[1].getMessage() and "No space left" in failed[1].getMessage()
    assert watcher.watch_error is None  # not final: it keeps trying
