"""Issue 38: one front door. The CLI and the Python API resolve a workspace's settings with one
function (memory_core.runtime.resolve.resolve_settings), so the same workspace gives the same
settings through both, in either order, and neither rebuilds what the other built.

Before the fix, open_memory read neither <workspace>/memory-core.toml nor what the index
recorded: a workspace whose config says provider = "none", indexed by the CLI, was rebuilt by
open_memory(ws).index() with the local model ("provider changed from none to local").
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from memory_core import open_memory
from memory_core.apps.cli import _resolve, _writer_told, build_parser, main

OFF = {"on_search": False, "on_session_start": False, "watch": False}


def cli_settings(*argv: str) -> dict[str, Any]:
    args = build_parser().parse_args(list(argv))
    told = _writer_told(args) if args.command in ("index", "watch") else {}
    return _resolve(args, **told).settings.model_dump(mode="json")


def api_settings(ws: Path) -> dict[str, Any]:
    with open_memory(ws) as memory:
        return memory.settings.model_dump(mode="json")


def cli_index(ws: Path, capsys: pytest.CaptureFixture[str], *flags: str) -> dict[str, Any]:
    assert main(["index", "-w", str(ws), "--engine", "local", "--json", "--no-progress", *flags]) == 0
    return json.loads(capsys.readouterr().out)


def api_index(ws: Path) -> dict[str, Any]:
    with open_memory(ws, sync=OFF) as memory:
        return memory.index().to_dict()


def no_rebuild(run: dict[str, Any]) -> bool:
    return (not run["full"] and run["chunks_embedded"] == 0 and run["files_new"] == 0
            and run["files_changed"] == 0 and run["files_removed"] == 0)


def configure(ws: Path, how: str, srv: Any, monkeypatch: pytest.MonkeyPatch) -> tuple[str, ...]:
    """The workspace's settings for ``how``; returns the flags the CLI's first index is given."""
    if how == "config none":
        (ws / "memory-core.toml").write_text('provider = "none"\n')
    elif how == "config openai":  # a hosted provider (the official SDK against the loopback fake)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test-key-0123456789")
        (ws / "memory-core.toml").write_text(
            f'provider = "openai"\nmodel = "text-embedding-3-small"\n[remote]\nbase_url = "{srv.base_url}"\n'
            "dimensions = 64\nbackoff_initial_s = 0.01\nbackoff_max_s = 0.05\n")
    elif how == "index recorded":  # no config: the first run is told --provider none, the rest keep it
        return ("--provider", "none")
    return ()


@pytest.mark.parametrize("how", ["config none", "index recorded", "config openai"])
def test_cli_then_api_and_api_then_cli_agree_and_never_rebuild(
        how: str, workspace: Path, tmp_path: Path, openai_fake: Any, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MEMORY_CORE_CONFIG", raising=False)
    monkeypatch.delenv("MEMORY_CORE_PROVIDER", raising=False)
    first = configure(workspace, how, openai_fake, monkeypatch)
    want = "openai" if how == "config openai" else "none"

    # the CLI first, then the API
    built = cli_index(workspace, capsys, *first)
    assert built["provider"] == want and built["full"]
    api_run = api_index(workspace)
    assert no_rebuild(api_run), api_run
    assert api_run["provider"] == want
    assert api_settings(workspace) == cli_settings("index", "-w", str(workspace)) \
        == cli_settings("search", "-w", str(workspace), "q")
    assert api_settings(workspace)["provider"] == want

    # the API first (a copy never indexed), then the CLI
    other = tmp_path / "other"
    other.mkdir()
    ws2 = other / "ws"
    import shutil

    shutil.copytree(workspace, ws2, ignore=shutil.ignore_patterns(".memory-core"))
    told: dict[str, Any] = {"provider": "none"} if how == "index recorded" else {}
    with open_memory(ws2, sync=OFF, **told) as memory:
        first_run = memory.index().to_dict()
    assert first_run["provider"] == want and first_run["full"]
    again = cli_index(ws2, capsys)
    assert no_rebuild(again), again
    assert api_settings(ws2) == cli_settings("index", "-w", str(ws2)) == cli_settings("status", "-w", str(ws2))


def test_the_cli_readers_go_through_the_front_door(workspace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """search, get and status print what Memory returns (typed there, JSON only here)."""
    (workspace / "memory-core.toml").write_text('provider = "none"\n')
    cli_index(workspace, capsys)
    with open_memory(workspace, sync=OFF) as memory:
        answer = memory.answer("pgbackrest restore", max_results=2)
        read = memory.read(answer.results[0]["citation"])
        status = memory.status()
    assert main(["search", "-w", str(workspace), "pgbackrest restore", "-n", "2", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == answer.to_dict()
    assert main(["get", "-w", str(workspace), answer.results[0]["citation"], "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == read.to_dict()
    assert main(["status", "-w", str(workspace), "--json"]) == 0
    st = json.loads(capsys.readouterr().out)
    assert status.state == st["state"] == "ok" and status.files == st["files"] and status.provider == "none"
    assert status.built_from is not None and st["built_from"]["provider"] == status.built_from.provider == "none"


def test_the_cli_says_when_the_index_is_stale(workspace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A one-shot reader (the CLI's search, a Memory with refresh=False) starts no reindex but says
    when the index it answered from is older than its sources."""
    (workspace / "memory-core.toml").write_text('provider = "none"\n')
    cli_index(workspace, capsys)
    assert main(["search", "-w", str(workspace), "pgbackrest restore", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["stale"] is False
    (workspace / "memory" / "okapi.md").write_text("# Okapi\n\nThe okapi enclosure opens in May.\n")
    assert main(["search", "-w", str(workspace), "okapi enclosure", "--min-score", "0"]) == 0
    out = capsys.readouterr()
    assert "memory/okapi.md" not in out.out and "note: the index is stale (1 new)" in out.err
    assert "`memory-core index` refreshes it" in out.err
    assert main(["search", "-w", str(workspace), "okapi enclosure", "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["stale"] is True and res["stale_reason"] == "1 new" and res["refreshing"] is False
    assert main(["status", "-w", str(workspace), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["dirty"] is True  # nothing was reindexed


def test_a_readers_watch_does_not_build_a_missing_index(workspace: Path, tmp_path: Path) -> None:
    """The triggers refresh an index that exists: a watch in a reader over a workspace never
    indexed does not start a first build (with whatever provider `auto` would pick)."""
    import time

    from memory_core.config import load_settings
    from memory_core.runtime.sync import SyncManager

    s = load_settings(None, {"workspace": str(workspace), "index_path": str(tmp_path / "idx" / "index.sqlite"),
                             "provider": "none", "sync": {"watch_debounce_ms": 50}})
    sync = SyncManager(s)
    sync.start()
    try:
        assert sync._watcher is not None and sync._watcher.wait_ready(10)
        (workspace / "memory" / "okapi.md").write_text("# Okapi\n\nThe okapi enclosure opens in May.\n")
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not sync._watcher.runs:
            time.sleep(0.05)
        assert sync._watcher.runs and sync._watcher.runs[-1].ok  # the watch saw it and did nothing
        assert sync.runs == [] and not s.index_file.exists()
        assert sync.on_session_start() is False and sync.before_search().stale is False
    finally:
        sync.close()
