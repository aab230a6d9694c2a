"""The eighteenth session's audit of agents, settings and the API (docs/reliability.md, "Agents'
paths, settings from every door, the API's arguments"): each test fails on the code before."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest

from memory_core.apps.cli import main
from memory_core.errors import ConfigError, UsageError
from memory_core.runtime.agents import UnknownAgentError
from memory_core.runtime.resolve import resolve_settings


def _notes(ws: Path, text: str) -> Path:
    (ws / "memory").mkdir(parents=True, exist_ok=True)
    (ws / "MEMORY.md").write_text(f"# Notes\n\n{text}\n")
    return ws


def test_f9_an_agents_default_index_is_its_own_whatever_memory_core_index_says(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Agent b sets no index_path (its index: `<its workspace>/.memory-core/index.sqlite`); with
    $MEMORY_CORE_INDEX set for another workspace, `--agent b` searched that index and `index
    --agent b` rebuilt it with b's notes (the other workspace's index overwritten)."""
    a, b, other = (_notes(tmp_path / n, f"the {n} plan") for n in ("a", "b", "other"))
    cfg = tmp_path / "fleet.toml"
    cfg.write_text(f'provider = "none"\n[agents]\n[[agents.list]]\nid = "a"\nworkspace = "{a}"\n'
                   f'index_path = "{tmp_path}/aidx/a.sqlite"\n[[agents.list]]\nid = "b"\nworkspace = "{b}"\n')
    assert main(["index", "-w", str(other), "--provider", "none", "--no-progress"]) == 0
    other_index = other / ".memory-core" / "index.sqlite"
    before = other_index.read_bytes()
    monkeypatch.setenv("MEMORY_CORE_INDEX", str(other_index))
    s = resolve_settings({}, config_file=cfg, agent="b").settings
    assert s.index_file == b / ".memory-core" / "index.sqlite"
    assert main(["index", "-c", str(cfg), "--agent", "b", "--no-progress"]) == 0
    assert other_index.read_bytes() == before  # the other workspace's index is untouched
    assert (b / ".memory-core" / "index.sqlite").is_file()
    # and two agents with default indexes are not "sharing" the environment's index
    monkeypatch.delenv("MEMORY_CORE_INDEX")
    cfg.write_text(f'provider = "none"\n[agents]\n[[agents.list]]\nid = "a"\nworkspace = "{a}"\n'
                   f'[[agents.list]]\nid = "b"\nworkspace = "{b}"\n')
    monkeypatch.setenv("MEMORY_CORE_INDEX", str(other_index))
    from memory_core.runtime.resolve import resolve_agents
    fleet = resolve_agents(cfg)
    assert fleet["a"].index_file != fleet["b"].index_file


def test_f4_a_qmd_state_folder_in_another_agents_workspace_is_refused(tmp_path: Path) -> None:
    """ops's qmd state (its transcripts exported as Markdown) under main's memory/: main then
    indexed, found and read back ops's conversations; the check only compared the two state
    folders with each other."""
    main_ws, ops_ws = _notes(tmp_path / "main" / "ws", "main"), _notes(tmp_path / "ops" / "ws", "ops")
    cfg = tmp_path / "fleet.toml"
    cfg.write_text(f'provider = "none"\nsources = ["memory", "sessions"]\nbackend = "qmd"\n[agents]\n'
                   f'[[agents.list]]\nid = "main"\nworkspace = "{main_ws}"\n'
                   f'[[agents.list]]\nid = "ops"\nworkspace = "{ops_ws}"\nqmd_state_dir = "{main_ws}/memory/ops-qmd"\n')
    with pytest.raises(ConfigError, match="qmd state folder .* is inside agent 'main'"):
        resolve_settings({}, config_file=cfg, agent="ops")
    # the builtin backend exports nothing there: that folder is then no one's business
    cfg.write_text(cfg.read_text().replace('backend = "qmd"\n', ""))
    assert resolve_settings({}, config_file=cfg, agent="ops").settings.agent == "ops"


def test_f5_memory_store_flag_cannot_reach_another_agents_store(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    """`memory --agent ops --store <main's LanceDB folder>` stored, recalled and could forget
    main's memories (the API and `-w` refuse the same)."""
    main_ws, ops_ws = _notes(tmp_path / "main", "main"), _notes(tmp_path / "ops", "ops")
    cfg = tmp_path / "fleet.toml"
    cfg.write_text(f'provider = "none"\n[agents]\n[[agents.list]]\nid = "main"\nworkspace = "{main_ws}"\n'
                   f'[[agents.list]]\nid = "ops"\nworkspace = "{ops_ws}"\n')
    mains = main_ws / ".memory-core" / "lancedb"
    code = main(["memory", "recall", "-c", str(cfg), "--agent", "ops", "--store", str(mains), "capybara"])
    assert code == 2
    assert "share the LanceDB folder" in capsys.readouterr().err
    assert not mains.exists()


def test_f2_mcp_with_memory_core_workspace_serves_that_workspace_not_the_fleet(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`memory-core mcp -c fleet.toml` with $MEMORY_CORE_WORKSPACE set served the whole fleet (and
    wrote as agent main) while every other command used the environment's workspace."""
    from memory_core.apps.cli import _fleet

    cfg = tmp_path / "fleet.toml"
    cfg.write_text(f'provider = "none"\n[agents]\ndefault = "main"\n[[agents.list]]\nid = "main"\n'
                   f'workspace = "{_notes(tmp_path / "main", "main")}"\n')
    args = argparse.Namespace(agent=None, workspace=None, index_path=None, config=str(cfg))
    monkeypatch.delenv("MEMORY_CORE_WORKSPACE", raising=False)
    monkeypatch.delenv("MEMORY_CORE_INDEX", raising=False)
    monkeypatch.delenv("MEMORY_CORE_AGENT", raising=False)
    assert _fleet(args) is not None  # no workspace told: the fleet
    monkeypatch.setenv("MEMORY_CORE_WORKSPACE", str(_notes(tmp_path / "solo", "solo")))
    assert _fleet(args) is None  # as -w would


def test_f11_an_empty_memory_core_agent_is_refused_not_the_default(tmp_path: Path) -> None:
    cfg = tmp_path / "fleet.toml"
    cfg.write_text(f'provider = "none"\n[agents]\ndefault = "main"\n[[agents.list]]\nid = "main"\n'
                   f'workspace = "{_notes(tmp_path / "main", "main")}"\n')
    with pytest.raises(UnknownAgentError, match="set but empty"):
        resolve_settings({}, config_file=cfg, env={"MEMORY_CORE_AGENT": " "})
    assert resolve_settings({}, config_file=cfg, env={}).settings.agent == "main"


def test_f1_a_relative_cache_path_is_relative_to_the_config_file(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """`[cache] path = "embed-cache.sqlite"` was resolved against whatever folder a process
    started in: caches split by the caller's folder, stray files there."""
    ws = _notes(tmp_path / "ws", "notes")
    (tmp_path / "cfgdir").mkdir()
    cfg = tmp_path / "cfgdir" / "mc.toml"
    cfg.write_text(f'workspace = "{ws}"\nprovider = "none"\n[cache]\npath = "embed-cache.sqlite"\n')
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert resolve_settings({}, config_file=cfg).settings.cache_file == tmp_path / "cfgdir" / "embed-cache.sqlite"


def test_f10_watch_takes_its_debounce_from_the_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`watch` printed "debounce 1.5s" with `[sync] watch_debounce_ms = 10000` in its config
    (the API's watcher read the setting)."""
    from memory_core.apps import watch

    seen: list[float] = []

    def fake_run_watch(settings: Any, *, debounce: float, **kw: Any) -> None:
        seen.append(debounce)

    monkeypatch.setattr(watch, "run_watch", fake_run_watch)
    ws = _notes(tmp_path / "ws", "notes")
    (ws / "memory-core.toml").write_text('provider = "none"\n[sync]\nwatch_debounce_ms = 10000\n')
    assert main(["watch", "-w", str(ws)]) == 0
    assert main(["watch", "-w", str(ws), "--debounce", "0.2"]) == 0
    assert seen == [10.0, 0.2]


@pytest.mark.parametrize("bad", [{"max_results": 0}, {"max_results": -3}, {"max_results": True},
                                 {"min_score": float("nan")}, {"min_score": -0.5}, {"min_score": 1.5},
                                 {"min_score": True}])
def test_f7_the_api_refuses_the_arguments_every_other_door_refuses(tmp_path: Path, bad: dict[str, Any]) -> None:
    """`Memory.search(max_results=0)` returned a result; `min_score=nan` or `1.5` were taken."""
    from memory_core import open_memory

    ws = _notes(tmp_path / "ws", "the otter plan")
    with open_memory(workspace=str(ws), provider="none") as mem:
        mem.index()
        with pytest.raises(UsageError):
            mem.search("otter", **bad)
        with pytest.raises(UsageError):
            mem.answer("otter", **bad)
        assert mem.search("otter", max_results=1, min_score=0)  # the good ones still answer


def test_f12_get_of_a_note_edited_since_indexing_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`get memory/vendors.md#L1-L5` after an edit returned other lines than the search cited,
    with nothing said (a search of the same index says `stale`)."""
    import json
    import os

    ws = _notes(tmp_path / "ws", "notes")
    note = ws / "memory" / "vendors.md"
    note.write_text("# Vendors\n\nThe gecko vendor ships on Mondays.\nInvoices monthly.\n")
    (ws / "sessions").mkdir()
    chat = ws / "sessions" / "s1.jsonl"
    chat.write_text('{"type":"message","timestamp":"2026-11-01T10:00:00Z","message":{"role":"user",'
                    '"content":"the heron plan"}}\n')
    assert main(["index", "-w", str(ws), "--provider", "none", "--sessions", "--no-progress"]) == 0
    capsys.readouterr()
    assert main(["get", "-w", str(ws), "memory/vendors.md#L1-L4", "--json"]) == 0
    assert "note" not in json.loads(capsys.readouterr().out)  # unchanged: nothing to say
    note.write_text("# Vendors\n\n## Added later\nThe iguana vendor was dropped.\n")
    st = note.stat()
    os.utime(note, ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000))
    assert main(["get", "-w", str(ws), "memory/vendors.md#L1-L4"]) == 0
    got = capsys.readouterr()
    assert "iguana" in got.out and "changed since it was indexed" in got.err
    assert main(["get", "-w", str(ws), "memory/vendors.md#L1-L4", "--json"]) == 0
    assert "changed since it was indexed" in json.loads(capsys.readouterr().out)["note"]
    # a transcript that grew by an append keeps every cited line: nothing to say
    with chat.open("a") as fh:
        fh.write('{"type":"message","timestamp":"2026-11-01T10:01:00Z","message":{"role":"assistant",'
                 '"content":"noted"}}\n')
    assert main(["get", "-w", str(ws), "sessions/s1.jsonl#L1-L1", "--json"]) == 0
    assert "note" not in json.loads(capsys.readouterr().out)


def test_f14_get_returns_at_most_max_get_chars(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A 4-line citation of a note with one 877 KB line came back whole (a search snippet is 700
    characters): an agent's context filled by one memory_get."""
    import json

    from memory_core.query.reading import MAX_GET_CHARS

    ws = _notes(tmp_path / "ws", "notes")
    long = "word " * (MAX_GET_CHARS // 2)
    (ws / "memory" / "big.md").write_text(f"# Big\n{long}\nafter\n")
    (ws / "memory" / "many.md").write_text("".join(f"line {i} " + "x" * 990 + "\n" for i in range(200)))
    assert main(["index", "-w", str(ws), "--provider", "none", "--no-progress"]) == 0
    capsys.readouterr()
    assert main(["get", "-w", str(ws), "memory/big.md#L1-L3", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["lines"] == 1 and got["text"] == "# Big" and "ask again from line 2" in got["note"]
    assert main(["get", "-w", str(ws), "memory/big.md", "--from", "2", "--lines", "1", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert len(got["text"]) == MAX_GET_CHARS and "characters long" in got["note"]
    assert main(["get", "-w", str(ws), "memory/many.md", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert len(got["text"]) <= MAX_GET_CHARS and got["lines"] == 100  # whole lines: 100 of 1,000 characters
    assert got["text"].splitlines()[-1].startswith("line 99 ")


def test_f8_a_store_citation_reads_back_through_every_door(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`store:<id>` (a memory store result's citation) read back only through MCP; CLI `get` and
    `Memory.read` said "not an indexed file", and `Memory.answer(sources=["store"])` found nothing."""
    import json

    from memory_core import open_memory

    ws = _notes(tmp_path / "ws", "notes")
    assert main(["index", "-w", str(ws), "--no-progress"]) == 0  # the local model: the store embeds
    assert main(["memory", "store", "-w", str(ws), "The tapir memo is due on Thursday."]) == 0
    capsys.readouterr()
    with open_memory(workspace=str(ws)) as mem:
        got = mem.answer("tapir memo", sources=["store"], min_score=0)
        cites = [r["citation"] for r in got.to_dict()["results"]]
        assert cites and cites[0].startswith("store:"), got.to_dict()
        assert mem.read(cites[0]).text == "The tapir memo is due on Thursday."
    assert main(["get", "-w", str(ws), cites[0], "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["text"] == "The tapir memo is due on Thursday."
