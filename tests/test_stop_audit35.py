"""Stops of the commands that are not `index` (the thirty-fifth session's stop audit; docs/reliability.md,
"A stop lost on the way", rows L6-L9).

Each test runs the real CLI in a subprocess through a wrapper that sends the process its own stop
at a chosen moment (before or after a function of the phase, or at a failpoint), as a Ctrl-C or a
SIGTERM would land there."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.stopper import EXIT, ROOT, WORD, cli, holds, keyword_workspace, last, write_stopper


@pytest.fixture
def stopper(tmp_path: Path) -> Path:
    return write_stopper(tmp_path)


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    """A keyword-only workspace, indexed."""
    return keyword_workspace(tmp_path)


# -- write ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("sig", ["INT", "TERM"])
def test_a_write_stopped_after_its_reindex_published_says_it_is_indexed(ws: Path, stopper: Path, sig: str) -> None:
    """The stop lands after the reindex published the note (in its cache trim). Before: `write`
    said `note: written, but not indexed: the reindex was stopped` (and `--json` `"indexed": false`)
    beside its own last line `... after the new index was published`, though the index held it."""
    res = cli(["write", "-w", str(ws), "--path", "MEMORY.md", "--json", "the boiler code is 4471"], stopper,
               STOP_SIG=sig, STOP_FP="after-swap")
    assert res.returncode == EXIT[sig], (res.stdout, res.stderr)
    said = json.loads(res.stdout)
    assert said["indexed"] is True and "stopped after it published" in said["note"], said
    assert last(res.stderr).startswith(f"memory-core: {WORD[sig]} after the new index was published"), res.stderr
    assert holds(ws, "boiler code is 4471")


@pytest.mark.parametrize("sig", ["INT", "TERM"])
def test_a_write_stopped_as_it_checks_the_index_says_what_it_did(ws: Path, stopper: Path, sig: str) -> None:
    """The stop lands after the reindex ended, as the write checks that the index holds the note.
    Before: only `interrupted; the live index was left as it was` (no word of the note, which the
    index held: a retry wrote it twice); a SIGTERM there killed the command with no line (exit 143)."""
    res = cli(["write", "-w", str(ws), "--path", "MEMORY.md", "the boiler code is 4471"], stopper,
               STOP_SIG=sig, STOP_TARGET="memory_core.notes.write:_indexed")
    assert res.returncode == EXIT[sig], (res.stdout, res.stderr)
    assert res.stdout.strip() == "wrote MEMORY.md#L5-L5; indexed", res.stdout
    assert last(res.stderr) == f"memory-core: {WORD[sig]} after writing MEMORY.md#L5-L5 (the note is written and indexed)"
    assert "left as it was" not in res.stderr
    assert holds(ws, "boiler code is 4471")


def test_a_sigterm_before_the_writes_reindex_says_the_note_was_written(ws: Path, stopper: Path) -> None:
    """A SIGTERM as the reindex starts (before it holds its own handler). Before: exit 143, no line,
    and the note written."""
    res = cli(["write", "-w", str(ws), "--path", "MEMORY.md", "the boiler code is 4471"], stopper,
               STOP_SIG="TERM", STOP_TARGET="memory_core.index.indexer:Indexer.__init__")
    assert res.returncode == 1, (res.returncode, res.stdout, res.stderr)
    assert res.stdout.strip() == "wrote MEMORY.md#L5-L5", res.stdout
    assert last(res.stderr) == "memory-core: error: stopped by SIGTERM; the live index was left as it was"
    assert "the boiler code is 4471" in (ws / "MEMORY.md").read_text()
    assert not holds(ws, "boiler code is 4471")


@pytest.mark.parametrize(("sig", "index"), [("INT", True), ("TERM", True), ("TERM", False)])
def test_a_write_stopped_as_its_note_is_appended_says_the_note_is_written(ws: Path, stopper: Path, sig: str,
                                                                         index: bool) -> None:
    """The stop lands after the note's bytes went out, as the write counts its lines (then fsyncs).
    Before: `interrupted; the live index was left as it was`, nothing on stdout, though the note
    was written (a retry wrote it twice). Now the stop waits the few steps to the end of the append
    and is said after it (docs/reliability.md L11)."""
    args = ["write", "-w", str(ws), "--path", "MEMORY.md", "--json", "the boiler code is 4471"]
    res = cli([*args, *([] if index else ["--no-index"])], stopper, STOP_SIG=sig,
               STOP_TARGET="memory_core.notes.write:_count_newlines")
    assert res.returncode == EXIT[sig], (res.stdout, res.stderr)
    said = json.loads(res.stdout)
    assert said["citation"] == "MEMORY.md#L5-L5" and said["indexed"] is False, said
    assert ("stopped before the reindex" in said["note"]) is index, said
    assert last(res.stderr) == f"memory-core: {WORD[sig]} after writing MEMORY.md#L5-L5 (the note is written)"
    assert (ws / "MEMORY.md").read_text().count("the boiler code is 4471") == 1
    assert not holds(ws, "boiler code is 4471")  # no reindex ran; the next one picks it up
    assert cli(["index", "-w", str(ws), "--no-progress"]).returncode == 0
    assert holds(ws, "boiler code is 4471")


# -- flush --record ------------------------------------------------------------------------------

@pytest.mark.parametrize("sig", ["INT", "TERM"])
def test_a_flush_stopped_as_it_is_recorded_is_taken_back(ws: Path, stopper: Path, sig: str) -> None:
    """`flush --record` claims the cycle in the ledger, then answers with the prompt. A stop right
    after the ledger was written: the caller never saw the prompt, and the next check said
    `already flushed in compaction cycle 0`: the flush was lost. The claim is now taken back, so
    the next check says it is due."""
    args = ["flush", "-w", str(ws), "sess-1", "--tokens", "999999", "--record"]
    res = cli(args, stopper, STOP_SIG=sig, STOP_TARGET="memory_core.notes.flush:FlushLedger.write", STOP_WHEN="after")
    assert res.returncode == EXIT[sig], (res.returncode, res.stdout, res.stderr)
    assert "prompt:" not in res.stdout
    assert last(res.stderr).startswith(f"memory-core: {'error: ' if sig == 'TERM' else ''}{WORD[sig]}"), res.stderr
    again = cli(args)
    assert again.returncode == 0, again.stderr
    assert again.stdout.startswith("due: ") and "(recorded)" in again.stdout, again.stdout
    third = cli(args)
    assert third.stdout.startswith("not due: already flushed in compaction cycle 0"), third.stdout


# -- the fleet flow ------------------------------------------------------------------------------

FLEET_STOP = r'''
import os, signal, sys, threading, time
signal.signal(signal.SIGINT, signal.default_int_handler)
sig = getattr(signal, "SIG" + sys.argv[2])
from memory_core.index import streaming

real_chunk_file = streaming.chunk_file
began = []


def chunk_file(*args, **kwargs):  # a slow chunker: each agent's run is still chunking when the stop comes
    if not began:
        began.append(1)
        threading.Timer(1.0, os.kill, (os.getpid(), sig)).start()
    time.sleep(3)
    return real_chunk_file(*args, **kwargs)


streaming.chunk_file = chunk_file
from flows.fleet import fleet_reindex

t0 = time.time()
try:
    print("RESULT", fleet_reindex(config_file=sys.argv[1]), flush=True)
except BaseException as exc:
    print("RAISED", type(exc).__name__, round(time.time() - t0, 1), flush=True)
'''


@pytest.mark.prefect_server
@pytest.mark.parametrize("sig", [pytest.param("INT", marks=pytest.mark.slow), "TERM"])  # INT in `-m slow` (12 s)
def test_a_stopped_fleet_stops_its_agents_runs(tmp_path: Path, request: pytest.FixtureRequest, sig: str) -> None:
    """The fleet flow runs each agent's reindex in a thread of its task runner, where no signal
    lands. Before: a Ctrl-C or SIGTERM ended the fleet's own wait, but both agents' runs went on and
    published their indexes after it (one had not even started). Now they end at their next check
    (here: between the files they chunk), leave their indexes as they were, and the fleet says
    each agent's outcome before the stop goes on."""
    from tests.prefect_server import shared_server
    from tests.test_agents import make_fleet

    cfg, _ = make_fleet(tmp_path)
    for i in range(3):  # a few files per agent: the run looks for the stop between them
        for w in (tmp_path / "agents" / "alpha" / "workspace", tmp_path / "beta-notes"):
            (w / "memory" / f"n{i}.md").write_text(f"# note {i}\n\nline {i}\n")
    script = tmp_path / "fleet_stop.py"
    script.write_text(FLEET_STOP)
    env = shared_server(request.config).env(PYTHONPATH=str(ROOT))
    res = subprocess.run([sys.executable, str(script), str(cfg), sig], env=env, cwd=ROOT, capture_output=True,
                         text=True, timeout=240)
    from memory_core.runtime.resolve import resolve_agents

    fleet = resolve_agents(cfg)
    for agent in ("alpha", "beta"):
        assert not fleet[agent].index_file.exists(), (agent, res.stderr[-3000:])  # nothing published
        said = f"fleet {WORD[sig]}: agent {agent}: "  # each agent's outcome, said
        assert said in res.stderr and "left as it was" in res.stderr.split(said)[1].splitlines()[0], res.stderr[-3000:]
    raised = [line.split() for line in res.stdout.splitlines() if line.startswith("RAISED")]
    if sig == "INT":
        assert raised and raised[0][1] == "KeyboardInterrupt", (res.returncode, res.stdout, res.stderr[-3000:])
        assert float(raised[0][2]) < 30, raised  # the agents' runs ended at their next check
    else:  # Prefect ends a flow run's process by the SIGTERM it was sent, once the run is Crashed
        assert res.returncode == -15 and not raised, (res.returncode, res.stdout, res.stderr[-3000:])
