"""Bad input at the CLI's door (twenty-second session; a helper's audit of the README as written):
a mistyped workspace for `status`, `search` and `get` said "no index at .../nope/.memory-core/..."
or, for `status`, nothing on stderr and exit 1; a mistyped `$MEMORY_CORE_ENGINE` ran `auto`
silently (argparse checks a flag's value, not a default read from the environment). Each is now
one line naming what was wrong, and exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from memory_core.apps.cli import main


@pytest.mark.parametrize("argv", [["status"], ["search", "cello"], ["get", "memory/2024-01-15.md"]])
def test_a_missing_workspace_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    missing = tmp_path / "nope"
    assert main([argv[0], "-w", str(missing), *argv[1:]]) == 2
    captured = capsys.readouterr()
    assert captured.err.strip() == f"memory-core: error: workspace not found: {missing}"
    assert not missing.exists()


def test_an_index_whose_workspace_is_gone_still_answers(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Only when neither the workspace nor its index is there: an index kept elsewhere still
    answers for a workspace that moved (`--index`)."""
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    (ws / "memory" / "2024-01-15.md").write_text("# Notes\n\n- The cello lesson moved to Friday.\n")
    index = tmp_path / "elsewhere" / "index.sqlite"
    index.parent.mkdir()
    assert main(["index", "-w", str(ws), "--index", str(index), "--provider", "none", "--engine", "local",
                 "--no-progress"]) == 0
    (ws / "memory" / "2024-01-15.md").unlink()
    (ws / "memory").rmdir()
    ws.rmdir()
    capsys.readouterr()
    assert main(["search", "--index", str(index), "cello lesson"]) == 0
    assert "2024-01-15.md" in capsys.readouterr().out


def test_a_mistyped_engine_variable_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    (ws / "MEMORY.md").write_text("# Memory\n\n- Prefers short answers.\n")
    monkeypatch.setenv("MEMORY_CORE_ENGINE", "prefectt")
    assert main(["index", "-w", str(ws), "--provider", "none", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "$MEMORY_CORE_ENGINE 'prefectt': choose auto, prefect or local" in err
    assert not (ws / ".memory-core" / "index.sqlite").exists()
    # status shows it where it shows the engine, and still reports
    assert main(["index", "-w", str(ws), "--provider", "none", "--engine", "local", "--no-progress"]) == 0
    capsys.readouterr()
    assert main(["status", "-w", str(ws)]) == 0
    assert "index_engine: $MEMORY_CORE_ENGINE 'prefectt'" in capsys.readouterr().out
    monkeypatch.setenv("MEMORY_CORE_ENGINE", "local")  # a right one runs
    assert main(["index", "-w", str(ws), "--provider", "none", "--no-progress"]) == 0


@pytest.mark.parametrize(("toml", "said"), [
    ("[query]\nmax_result = 3\n", "query.max_result (from config file {cfg}): unknown setting (did you mean query.max_results?)"),
    ('provder = "local"\n', "provder (from config file {cfg}): unknown setting (did you mean provider?)"),
    ("[chunking]\ntoken = 300\n", "chunking.token (from config file {cfg}): unknown setting (did you mean chunking.tokens?)"),
    ("[query]\nzzz = 1\n", "query.zzz (from config file {cfg}): unknown setting"),  # nothing near: no guess
])
def test_a_mistyped_setting_names_the_one_meant(tmp_path: Path, capsys: pytest.CaptureFixture[str], toml: str,
                                                 said: str) -> None:
    """A helper's README audit: a misspelled key said "unknown setting" with no hint; the nearest
    setting of its table is named now (difflib, ratio 0.75)."""
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    cfg = ws / "memory-core.toml"
    cfg.write_text(toml)
    assert main(["index", "-w", str(ws), "--provider", "none", "--engine", "local", "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "memory-core: error: invalid configuration: " + said.format(cfg=cfg), err
