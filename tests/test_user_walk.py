"""What a new user's walk through the CLI broke (issue 22, "from a user's walk"): each command
as a user types it, in a real process where the behaviour depends on one."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from memory_core.apps.cli import main
from memory_core.config import load_settings
from memory_core.index.pipeline import run_index
from tests.conftest import ROOT

CLI = [sys.executable, "-m", "memory_core.apps.cli"]
ENV = dict(os.environ, PYTHONPATH=str(ROOT))


@pytest.fixture
def indexed(workspace: Path):
    s = load_settings(None, {"workspace": str(workspace), "provider": "none"})
    run_index(s)
    return s


def test_a_reader_that_closes_the_pipe_ends_the_command_quietly(indexed) -> None:
    """`memory-core search ... | head -1` printed "error: Broken pipe; the live index was left
    as it was" with exit 1 half the time. The reader is gone before anything is written here."""
    ws = str(indexed.workspace_dir)
    for args in (["search", "-w", ws, "--max-results", "20", "--min-score", "0", "postgres"],
                 ["get", "-w", ws, "MEMORY.md"], ["status", "-w", ws], ["export", "-w", ws, "-"]):
        r, w = os.pipe()
        os.close(r)  # the reader has left (head -1 after its first line)
        try:
            proc = subprocess.run([*CLI, *args], stdout=w, stderr=subprocess.PIPE, text=True, env=ENV, timeout=120)
        finally:
            os.close(w)
        assert proc.returncode in (0, 141), (args, proc.returncode, proc.stderr)
        assert proc.stderr.strip() == "" or "Broken pipe" not in proc.stderr, (args, proc.stderr)
        assert "Traceback" not in proc.stderr and "Exception ignored" not in proc.stderr, proc.stderr


def test_a_citation_that_ends_before_it_starts_is_a_usage_error(indexed, capsys) -> None:
    """`get 'x.md#L5-L2'` printed line 5 with exit 0."""
    assert main(["get", "-w", str(indexed.workspace_dir), "MEMORY.md#L5-L2"]) == 2
    err = capsys.readouterr().err
    assert "ends before it starts" in err and err.count("\n") == 1


def test_index_in_a_folder_with_nothing_to_index_says_so_and_creates_nothing(tmp_path: Path, capsys) -> None:
    """`index` in an empty or wrong folder succeeded with "0 scanned" and created .memory-core/."""
    wrong = tmp_path / "Downloads"
    wrong.mkdir()
    (wrong / "notes.txt").write_text("not markdown memory\n")
    assert main(["index", "-w", str(wrong), "--provider", "none", "--engine", "local"]) == 2
    err = capsys.readouterr().err
    assert "nothing to index" in err and str(wrong) in err and err.count("\n") == 1
    assert sorted(p.name for p in wrong.iterdir()) == ["notes.txt"]
    # a workspace whose notes were all deleted still has its index kept up to date
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    (ws / "memory" / "a.md").write_text("# a\nthe heron budget\n")
    assert main(["index", "-w", str(ws), "--provider", "none", "--engine", "local"]) == 0
    (ws / "memory" / "a.md").unlink()
    (ws / "memory").rmdir()
    assert main(["index", "-w", str(ws), "--provider", "none", "--engine", "local"]) == 0
    capsys.readouterr()


def test_a_workspace_of_the_wrong_shapes_says_what_it_skipped(tmp_path: Path, capsys) -> None:
    """A folder named MEMORY.md beside a file named memory (and one named sessions) made an empty
    index with exit 0 and no word; a FIFO named like a note or a transcript was skipped unsaid
    (the thirty-eighth session's audit)."""
    wrong = tmp_path / "wrong"
    (wrong / "MEMORY.md").mkdir(parents=True)
    (wrong / "memory").write_text("x\n")
    (wrong / "sessions").write_text("x\n")
    assert main(["index", "-w", str(wrong), "--sessions", "--provider", "none", "--engine", "local"]) == 2
    err = capsys.readouterr().err
    assert "nothing to index" in err and err.count("\n") == 1
    assert not (wrong / ".memory-core").exists()
    # beside a real note, each wrong shape is said
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    (ws / "memory" / "a.md").write_text("# a\nthe heron budget\n")
    (ws / "sessions").mkdir()
    os.mkfifo(ws / "memory" / "pipe.md")
    os.mkfifo(ws / "sessions" / "chat.jsonl")
    (ws / "MEMORY.md").mkdir()
    assert main(["index", "-w", str(ws), "--sessions", "--provider", "none", "--engine", "local"]) == 0
    err = capsys.readouterr().err
    assert f"skipped {ws / 'memory' / 'pipe.md'}: not a regular file" in err
    assert f"skipped {ws / 'sessions' / 'chat.jsonl'}: not a regular file" in err
    assert "MEMORY.md is not a file (a folder, a FIFO or a device); it is not indexed" in err
    (ws / "MEMORY.md").rmdir()
    (ws / "sessions" / "chat.jsonl").unlink()
    (ws / "sessions").rmdir()
    (ws / "sessions").write_text("x\n")
    assert main(["index", "-w", str(ws), "--sessions", "--provider", "none", "--engine", "local"]) == 0
    assert f"sessions directory {ws / 'sessions'} is not a folder" in capsys.readouterr().err


def test_status_shows_built_at_as_a_time(indexed, capsys) -> None:
    """`status` showed built_at in raw milliseconds."""
    ws = str(indexed.workspace_dir)
    assert main(["status", "-w", ws]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("built_at:"))
    value = line.split(": ", 1)[1]
    assert not value.isdigit() and value[:2] == "20" and value[4] == "-" and ":" in value, line
    assert main(["status", "-w", ws, "--json"]) == 0  # the JSON keeps the number
    import json

    assert isinstance(json.loads(capsys.readouterr().out)["built_at"], int)


def test_a_fifo_as_the_config_file_is_refused_at_once(tmp_path: Path) -> None:
    """A FIFO given as --config hung every command."""
    fifo = tmp_path / "config.toml"
    os.mkfifo(fifo)
    proc = subprocess.run([*CLI, "status", "-w", str(tmp_path), "--config", str(fifo)], capture_output=True, text=True,
                          env=ENV, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert "not a regular file" in proc.stderr and proc.stderr.count("\n") == 1


def test_the_readme_command_summary_lists_every_command() -> None:
    """The README's command summary left out export, mcp, watch and eval."""
    from memory_core.apps.cli import COMMANDS

    text = (ROOT / "README.md").read_text(encoding="utf-8")
    summary = text.split("## Using it", 1)[1].split("```", 2)[1]
    listed = {line.split()[1] for line in summary.splitlines() if line.startswith("memory-core ")}
    assert set(COMMANDS) <= listed, set(COMMANDS) - listed


def test_eval_fusion_offers_the_default(capsys) -> None:
    """`eval --fusion` did not offer the default fusion."""
    from memory_core.config import QuerySettings

    with pytest.raises(SystemExit):
        main(["eval", "--help"])
    assert QuerySettings().fusion in capsys.readouterr().out.split("--fusion {", 1)[1].split("}", 1)[0]


def test_index_prints_each_warning_once(workspace: Path) -> None:
    """`index` printed every warning twice: as a log line during the run and after the summary."""
    (workspace / "sessions" / "bad.jsonl").write_text('{"type": "message", "message": {"role": "user", "content":'
                                                       ' "the quokka plan"}}\nthis is not json\n')
    proc = subprocess.run([*CLI, "index", "-w", str(workspace), "--provider", "none", "--sessions", "--engine", "local"],
                          capture_output=True, text=True, env=ENV, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.count("bad.jsonl: 1 malformed lines") == 1, proc.stderr


def test_the_eta_of_a_resumed_run_ignores_cache_hits(workspace: Path, openai_fake) -> None:
    """After a resumed run, chunks read from the cache counted as throughput: ETA 6 s with about
    3 minutes left. The ETA goes at the rate of chunks that cost work."""
    import time as _time

    from memory_core.index.runtypes import Progress
    from tests.conftest import openai_settings

    p = Progress(files_total=10, bytes_total=100, files_done=10, bytes_done=100, chunks=2000, ready=1010,
                 cached=1000, started=_time.monotonic() - 10)
    assert p.eta_s is not None and 950 < p.eta_s < 1050  # 10 chunks embedded in 10 s: ~990 s left
    # a run: what the cache answered is counted as cached
    s = openai_settings(workspace, openai_fake)
    run_index(s)
    (workspace / "memory" / "fresh.md").write_text("# Fresh\nthe pangolin sighting was on Tuesday\n")
    seen: list[Progress] = []
    summary = run_index(s, full=True, progress=seen.append)
    last = seen[-1]
    assert summary.chunks_from_cache > 0 and last.cached >= summary.chunks_from_cache
    assert last.ready - last.cached <= summary.chunks_embedded + 1


def test_the_mcp_server_ends_quietly_when_its_client_is_gone(indexed) -> None:
    """The MCP server printed "error: Broken pipe; the live index was left as it was" when a
    client disconnected."""
    import json

    init = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}) + "\n"
    r, w = os.pipe()
    os.close(r)  # the client left before the answer
    try:
        proc = subprocess.run([*CLI, "mcp", "-w", str(indexed.workspace_dir)], input=init.encode(), stdout=w,
                              stderr=subprocess.PIPE, env=ENV, timeout=120)
    finally:
        os.close(w)
    err = proc.stderr.decode()
    assert proc.returncode in (0, 141), (proc.returncode, err)
    assert "Broken pipe" not in err and "Traceback" not in err, err
