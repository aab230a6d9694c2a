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
