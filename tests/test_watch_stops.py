"""`memory-core watch` stopped (Ctrl-C, SIGTERM) while a run is going: the run gets its line, saying
what the stop left (docs/reliability.md, L10). Before: nothing on stdout for that run and
`watch stopped` on stderr, whether the run had published its new index or not, and a SIGTERM was
said as "interrupted" by the run.

The real CLI in a subprocess, through the stop audits' wrapper (tests/stopper.py), which
sends the process its own signal at a failpoint of the run; a keyword-only workspace (no model)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.stopper import WORD, cli, holds, keyword_workspace, write_stopper


@pytest.fixture
def stopper(tmp_path: Path) -> Path:
    return write_stopper(tmp_path)


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    """Indexed, then one new note the index does not hold yet: the watcher's start-up run adds it."""
    ws = keyword_workspace(tmp_path)
    (ws / "memory" / "new.md").write_text("# New\n\nThe quetzal rule holds on Tuesdays.\n")
    return ws


def _watch(ws: Path, stopper: Path, sig: str, point: str, *more: str) -> tuple[list[str], list[str]]:
    res = cli(["watch", "-w", str(ws), "--debounce", "0.1", *more], stopper, STOP_SIG=sig, STOP_FP=point)
    assert res.returncode == 0, (res.stdout, res.stderr)  # a stop is how a watcher ends (docs/watch.md)
    assert "Traceback" not in res.stderr, res.stderr
    said = [ln for ln in res.stderr.splitlines() if ln.startswith("memory-core:")]
    return res.stdout.splitlines(), said


@pytest.mark.parametrize("sig", ["INT", "TERM"])
def test_a_watch_stopped_before_its_run_publishes_says_the_index_was_left(ws: Path, stopper: Path, sig: str) -> None:
    out, said = _watch(ws, stopper, sig, "before-swap")
    assert len(out) == 1, out
    assert re.fullmatch(rf"run 1 \(startup, [0-9.]+s\): {WORD[sig]}; the live index was left as it was", out[0]), out
    assert said[-1] == f"memory-core: watch {WORD[sig]}", said
    assert not holds(ws, "quetzal rule")
    res = cli(["index", "-w", str(ws), "--no-progress"])  # nothing lost: the next run adds it
    assert res.returncode == 0, res.stderr
    assert holds(ws, "quetzal rule")


@pytest.mark.parametrize("sig", ["INT", "TERM"])
def test_a_watch_stopped_after_its_run_published_says_the_index_holds_it(ws: Path, stopper: Path, sig: str) -> None:
    out, said = _watch(ws, stopper, sig, "after-swap")
    assert len(out) == 1, out
    assert re.fullmatch(
        rf"run 1 \(startup, [0-9.]+s\): {WORD[sig]} after the new index was published \((updated in place|swapped in)\):"
        r" the live index holds this run's update \(files: 1 new, 0 changed, 0 removed; 2 chunks in all\).*", out[0]), out
    assert said[-1] == f"memory-core: watch {WORD[sig]}", said
    assert holds(ws, "quetzal rule")


def test_a_watch_stopped_in_a_run_reports_it_in_json(ws: Path, stopper: Path) -> None:
    out, _ = _watch(ws, stopper, "TERM", "after-swap", "--json")
    assert len(out) == 1, out
    rec = json.loads(out[0])
    assert rec["number"] == 1 and rec["reason"] == "startup" and rec["stopped"] == "stopped by SIGTERM", rec
    assert rec["ok"] is False and rec["summary"]["swapped"] is True, rec  # stopped, yet its index is live
