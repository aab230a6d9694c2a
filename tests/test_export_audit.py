"""Reading the memory back out (the thirteenth session's audit, docs/reliability.md): the export to
Parquet / JSON Lines / LanceDB and `search --lancedb`, each test on real SQLite and real LanceDB."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memory_core.apps.cli import main
from memory_core.config import load_settings
from memory_core.index.pipeline import run_index


@pytest.fixture
def keyword_ws(tmp_path: Path) -> Path:
    """A small keyword-only workspace (provider none) with its index built."""
    ws = tmp_path / "kw"
    (ws / "memory").mkdir(parents=True)
    (ws / "memory" / "plan.md").write_text(
        "# Plan\n\nWe will migrate the billing service to Kubernetes next sprint.\n"
        "The decision was made by the platform team.\n")
    (ws / "memory" / "food.md").write_text("# Food\n\nThe best restaurant near the office is Tasca do Chico.\n")
    (ws / "memory-core.toml").write_text('provider = "none"\n')
    run_index(load_settings(None, {"workspace": str(ws), "provider": "none"}))
    return ws


def test_e8b_a_keyword_only_export_says_it_has_no_vectors(keyword_ws: Path, tmp_path: Path, capsys) -> None:
    for out in (str(tmp_path / "x.parquet"), str(tmp_path / "x.jsonl")):
        assert main(["export", "-w", str(keyword_ws), out, "--json"]) == 0
        got = json.loads(capsys.readouterr().out)
        assert got["vectors"] is False and got["dims"] is None, got


SLOW_EXPORT = """
import sys, time
import memory_core.export.files as f
orig = f._batches
def slow(*a, **k):  # a large index: many more row groups still to write (timing only)
    for b in orig(*a, **k):
        yield b
        print("wrote a batch", flush=True)
        time.sleep(60)
f._batches = slow
from memory_core.apps.cli import main
sys.exit(main(sys.argv[1:]))
"""


def _stopped_export(args: list[str], tmp_path: Path) -> tuple[int, str]:
    """Run ``memory-core ARGS`` (its batches slowed down), SIGTERM it after its first batch."""
    import os
    import signal
    import subprocess
    import sys

    script = tmp_path / "slow_export.py"
    script.write_text(SLOW_EXPORT)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    proc = subprocess.Popen([sys.executable, str(script), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)
    assert proc.stdout is not None
    assert proc.stdout.readline().startswith("wrote a batch")
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    return proc.returncode, err


def test_e4a_sigterm_during_an_export_leaves_no_temp_file(keyword_ws: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    rc, err = _stopped_export(["export", "-w", str(keyword_ws), str(out / "chunks.parquet"), "--json"], tmp_path)
    assert rc == 1 and "Traceback" not in err and "stopped by SIGTERM" in err, err
    assert list(out.iterdir()) == []  # before: .chunks.parquet.tmp-PID-xxxx (0600, the memory's text)


def test_e6_an_export_never_replaces_a_users_own_terms_table(keyword_ws: Path, tmp_path: Path, capsys) -> None:
    import lancedb

    uri = tmp_path / "mydb"
    lancedb.connect(str(uri)).create_table("terms", data=[{"term": "glossary entry", "definition": "the user's own"}])
    assert main(["export", "-w", str(keyword_ws), "--format", "lancedb", str(uri)]) == 2
    assert "'terms' that is not a memory-core export" in capsys.readouterr().err
    t = lancedb.connect(str(uri)).open_table("terms")
    assert t.schema.names == ["term", "definition"] and t.count_rows() == 1
    assert main(["export", "-w", str(keyword_ws), "--format", "lancedb", str(uri), "--force"]) == 0
    assert main(["export", "-w", str(keyword_ws), "--format", "lancedb", str(uri)]) == 0  # now an earlier export
