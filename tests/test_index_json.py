"""`memory-core index --json` prints one JSON object on stdout however the run ends (audit,
nineteenth session: a run refused because another held the index printed nothing, where a provider
failure printed its summary with an `error`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memory_core.apps.cli import main
from memory_core.config import load_settings
from memory_core.storage.store import IndexLock


def test_index_json_says_why_when_another_run_holds_the_index(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    (ws / "MEMORY.md").write_text("# Notes\n\nthe tapir waits by the gate\n")
    (ws / "memory-core.toml").write_text('provider = "none"\n[lock]\nwait = false\n')
    assert main(["index", "-w", str(ws), "--no-progress", "--json"]) == 0
    first = json.loads(capsys.readouterr().out)
    assert first["swapped"] is True and not first["error"]
    (ws / "memory" / "new.md").write_text("# New\n\nthe okapi arrives\n")
    index = load_settings(ws / "memory-core.toml", {"workspace": str(ws)}).index_file
    with IndexLock(index, wait=False):
        code = main(["index", "-w", str(ws), "--no-progress", "--json"])
    out, err = capsys.readouterr()
    assert code == 1 and err.startswith("memory-core: error: ") and err.count("\n") == 1, err
    got = json.loads(out)
    assert got["swapped"] is False and got["index_path"] == str(index)
    assert got["error"] and got["error"] in err  # the same words as the error line
    assert main(["index", "-w", str(ws), "--no-progress", "--json"]) == 0  # the lock gone, the run goes
    assert json.loads(capsys.readouterr().out)["files_new"] == 1
