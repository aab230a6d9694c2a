"""A model name the local model does not run (twenty-second session; a helper's audit of the
README): `model = "text-embedding-3-small"` with provider `auto` (which picks the installed local
model) or `local` was only a label. The run embedded with all-MiniLM-L6-v2, recorded the hosted
model's name, and a user who meant OpenAI never learnt it. Now it is one clear error (exit 2),
before anything is written; the local model's own names, and any name with `local.model_path`,
still run; an index built with such a label keeps working when nothing names a model."""

from __future__ import annotations

from pathlib import Path

import pytest

from memory_core.apps.cli import main
from memory_core.config import load_settings
from memory_core.embeddings.local import packaged_model_path, runs_model

pytest.importorskip("sentence_transformers")


def _workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    (ws / "memory" / "2024-01-15.md").write_text("# Notes\n\n- The cello lesson moved to Friday.\n")
    return ws


@pytest.mark.parametrize(("flags", "said"), [
    (["--model", "text-embedding-3-small"], "provider auto chose the local model"),
    (["--provider", "local", "--model", "text-embedding-3-small"], "provider local runs the packaged all-MiniLM-L6-v2"),
    (["--provider", "local", "--model", "bge-small-en"], "set local.model_path"),
])
def test_a_model_the_local_model_does_not_run_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                          flags: list[str], said: str) -> None:
    ws = _workspace(tmp_path)
    assert main(["index", "-w", str(ws), "--engine", "local", "--no-progress", *flags]) == 2
    err = capsys.readouterr().err
    assert said in err and err.count("\n") == 1, err  # one line
    assert not (ws / ".memory-core" / "index.sqlite").exists()  # nothing written


def test_a_config_files_model_is_checked_too(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ws = _workspace(tmp_path)
    (ws / "memory-core.toml").write_text('provider = "auto"\nmodel = "text-embedding-3-small"\n')
    assert main(["index", "-w", str(ws), "--engine", "local", "--no-progress"]) == 2
    assert "text-embedding-3-small" in capsys.readouterr().err


@pytest.mark.parametrize("flags", [
    [],
    ["--provider", "local", "--model", "all-MiniLM-L6-v2"],
    ["--provider", "local", "--model", "sentence-transformers/all-MiniLM-L6-v2"],
])
def test_the_local_models_own_names_run(tmp_path: Path, flags: list[str]) -> None:
    ws = _workspace(tmp_path)
    assert main(["index", "-w", str(ws), "--engine", "local", "--no-progress", *flags]) == 0
    assert main(["search", "-w", str(ws), "cello lesson"]) == 0


def test_a_model_folder_is_named_as_its_user_likes() -> None:
    s = load_settings(None, {"provider": "local", "model": "my-minilm",
                             "local": {"model_path": str(packaged_model_path())}})
    assert runs_model(s, "my-minilm")
    assert not runs_model(load_settings(None, {"provider": "local", "model": "my-minilm"}), "my-minilm")


def test_a_name_the_index_recorded_keeps_working() -> None:
    """An index built before the check may record a hosted model's name for the local model's
    vectors: a run or a search told no model keeps it (as built), rather than failing every time."""
    s = load_settings(None, {"provider": "auto", "model": "text-embedding-3-small"})
    s._origins = {"model": "the index"}
    assert runs_model(s, "text-embedding-3-small")
    s._origins = {"model": "--model"}
    assert not runs_model(s, "text-embedding-3-small")
