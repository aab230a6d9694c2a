"""Memory text printed for a person does not drive their terminal (the fortieth session's audit H5).

An agent's ``memory_write`` or ``memory_store`` can hold an OSC 52 clipboard write, a window title
or an erase-line; ``search``, ``memory recall`` / ``list`` and ``get`` on a terminal printed them
raw. They are shown as ``\\xNN`` now; ``--json`` and ``get`` into a pipe keep the text exact.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memory_core.apps.cli import main

HOSTILE = "Budget note \x1b]52;c;cm0gLXJmIH4vKgo=\x07 \x1b]0;pwned\x07\x1b[2K\r(harmless) the budget is fine"


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    (ws / "MEMORY.md").write_text("# notes\r\n\r\nThe walrus budget is 9100 EUR.\r\n" + HOSTILE + "\n")
    (ws / "memory-core.toml").write_text('provider = "none"\n')
    assert main(["index", "-w", str(ws), "--no-progress"]) == 0
    return ws


def test_search_shows_terminal_controls_escaped(ws: Path, capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    assert main(["search", "-w", str(ws), "budget", "--min-score", "0"]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out and "\r" not in out, repr(out)
    assert "\\x1b]52;c;" in out and "\\x0d(harmless)" in out
    assert "The walrus budget is 9100 EUR." in out  # a CRLF note's lines read as lines
    assert main(["search", "-w", str(ws), "budget", "--min-score", "0", "--json"]) == 0
    assert HOSTILE in json.loads(capsys.readouterr().out)["results"][0]["snippet"]  # JSON keeps it exact


def test_get_escapes_on_a_terminal_and_keeps_the_bytes_for_a_pipe(ws: Path, capsys: pytest.CaptureFixture[str],
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    capsys.readouterr()
    assert main(["get", "-w", str(ws), "MEMORY.md#L4"]) == 0
    assert capsys.readouterr().out == HOSTILE + "\n"  # a pipe: the text as it is
    monkeypatch.setattr("sys.stdout.isatty", lambda: True)
    assert main(["get", "-w", str(ws), "MEMORY.md#L3-L4"]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\\x1b]0;pwned\\x07" in out, repr(out)
    assert out.startswith("The walrus budget is 9100 EUR.\n")  # a CRLF line end is a line end, not \\x0d


def test_memory_list_and_recall_show_terminal_controls_escaped(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    store = tmp_path / "store"
    cfg = tmp_path / "mc.toml"
    cfg.write_text('provider = "local"\n')
    ws = tmp_path / "ws"
    ws.mkdir()
    base = ["-w", str(ws), "--config", str(cfg), "--store", str(store)]
    assert main(["memory", "store", *base, "dark mode \x1b]0;pwned\x07 preferred"]) == 0
    capsys.readouterr()
    assert main(["memory", "list", *base]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "dark mode \\x1b]0;pwned\\x07 preferred" in out, repr(out)
