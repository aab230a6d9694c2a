"""Runs that say what they did, and one rule for folders (issue 39): what a user met walking
through the CLI."""

from __future__ import annotations

from pathlib import Path

import pytest

from memory_core.apps.cli import main


def test_index_refuses_a_missing_folder_as_export_does(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`index --index /no/such/dir/idx.sqlite` created the folders without a word, where export
    refused a missing folder: one rule, the folder must exist (memory-core creates only its own
    <workspace>/.memory-core/)."""
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    (ws / "memory" / "notes.md").write_text("# Notes\n\nA fact.\n")
    missing = tmp_path / "no" / "such"
    rc = main(["index", "-w", str(ws), "--index", str(missing / "idx.sqlite"), "--provider", "none", "--no-progress"])
    err = capsys.readouterr().err
    assert rc != 0 and f"directory not found: {missing}" in err and "Traceback" not in err, err
    assert not (tmp_path / "no").exists()
    # the default folder beside the notes is still created, and a given path in a folder that exists works
    assert main(["index", "-w", str(ws), "--provider", "none", "--no-progress"]) == 0
    assert (ws / ".memory-core" / "index.sqlite").is_file()
    (tmp_path / "there").mkdir()
    assert main(["index", "-w", str(ws), "--index", str(tmp_path / "there" / "i.sqlite"), "--provider", "none",
                 "--no-progress"]) == 0
    capsys.readouterr()
    rc = main(["export", "-w", str(ws), str(tmp_path / "nope" / "out.parquet")])
    assert rc != 0 and "directory not found" in capsys.readouterr().err


@pytest.mark.prefect_server
def test_index_engine_prefect_prints_its_summary_once(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """`index --engine prefect` printed the summary twice (the flow's log lines of it, then the
    CLI's own) where Prefect's console shows INFO logs (a profile's PREFECT_LOGGING_LEVEL)."""
    import subprocess
    import sys

    from tests.conftest import ROOT
    from tests.prefect_server import shared_server

    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    (ws / "memory" / "notes.md").write_text("# Notes\n\nThe walrus budget was approved.\n")
    env = shared_server(request.config).env(PYTHONPATH=str(ROOT), PREFECT_LOGGING_LEVEL="INFO")
    proc = subprocess.run([sys.executable, "-m", "memory_core.apps.cli", "index", "-w", str(ws), "--engine", "prefect",
                           "--provider", "none", "--no-progress"], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    both = proc.stdout + proc.stderr
    assert both.count("files: 1 scanned, 1 new") == 1, both
    assert proc.stdout.count("index: ") == 1 and "Beginning flow run" in both  # INFO logs were on
