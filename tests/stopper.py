"""The stop audits' harness: the real CLI in a subprocess, through a wrapper script that sends the
process its own stop (Ctrl-C's SIGINT or SIGTERM) at a chosen moment, as a stop from outside
would land there. Used by tests/test_stop_audit35.py, tests/test_store_stops.py and
tests/test_watch_stops.py.

Where the stop lands (environment variables of :func:`cli`):

- ``STOP_SIG``: ``INT`` or ``TERM``;
- ``STOP_FP``: at a failpoint (memory_core/failpoints.py; the index's and the memory store's);
- ``STOP_TARGET=module:attr.path`` (``STOP_WHEN=before`` or ``after``): as a function is called or returns;
- ``STOP_ROW=N``: as ``eval --per-query`` writes its per-query file's row N (counted from 1);
- ``STOP_IN_COMMIT=merge`` or ``delete``: while the main thread waits for LanceDB's commit (its
  sync calls wait on its own loop thread), sent from that thread once the commit is in."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

EXIT = {"INT": 130, "TERM": 1}
"""The exit of a command a stop ended (a SIGTERM is an error of the run: exit 1)."""
WORD = {"INT": "interrupted", "TERM": "stopped by SIGTERM"}
"""How the command's last line names the stop."""

STOPPER = r'''
import functools, importlib, os, signal, sys, time
signal.signal(signal.SIGINT, signal.default_int_handler)  # Ctrl-C as at a terminal
sig = getattr(signal, "SIG" + os.environ["STOP_SIG"])
fired = []


def fire():  # once: the stop, not a second one as the command handles the first
    if not fired:
        fired.append(1)
        os.kill(os.getpid(), sig)
        time.sleep(0.05)


target = os.environ.get("STOP_TARGET")
if target:
    modname, path = target.split(":")
    owner = importlib.import_module(modname)
    *outer, name = path.split(".")
    for part in outer:
        owner = getattr(owner, part)
    orig = getattr(owner, name)
    when = os.environ.get("STOP_WHEN", "before")

    @functools.wraps(orig)
    def wrapped(*a, **k):
        if when == "before":
            fire()
        out = orig(*a, **k)
        if when == "after":
            fire()
        return out

    setattr(owner, name, wrapped)
point = os.environ.get("STOP_FP")
if point:
    import memory_core.failpoints as F

    def failpoint(name):
        if name == point:
            fire()

    F.failpoint = failpoint
    for m in ("memory_core.index.writer", "memory_core.index.stages", "memory_core.index.streaming",
              "memory_core.notes.memory_store"):
        importlib.import_module(m).failpoint = failpoint
commit = os.environ.get("STOP_IN_COMMIT")
if commit:  # the stop lands while the main thread waits for LanceDB's commit, which goes in
    import asyncio
    import lancedb.background_loop as bl
    import lancedb.merge as lm
    import lancedb.table as lt

    inside = []
    loop_run = bl.LOOP.run

    def run_firing(fut):
        if not inside:
            return loop_run(fut)

        async def committed_then_stopped():
            out = await fut  # the commit is in
            fire()  # from LanceDB's loop thread, as the main thread waits for this coroutine
            await asyncio.sleep(0.2)
            return out

        return loop_run(committed_then_stopped())

    bl.LOOP.run = run_firing
    owner, name = (lm.LanceMergeInsertBuilder, "execute") if commit == "merge" else (lt.LanceTable, "delete")
    orig_commit = getattr(owner, name)

    @functools.wraps(orig_commit)
    def in_commit(*a, **k):
        inside.append(1)
        try:
            return orig_commit(*a, **k)
        finally:
            inside.clear()

    setattr(owner, name, in_commit)
row = os.environ.get("STOP_ROW")
if row:  # the stop lands as the per-query file's row <row> (counted from 1) is written
    import memory_core.apps.evaluation as ev

    class Firing(dict):
        def __getitem__(self, key):
            fire()
            return super().__getitem__(key)

    run_eval = ev.run_eval

    def stopping_run_eval(*a, **k):
        report = run_eval(*a, **k)
        n = 0
        for rows in report["per_query"].values():
            for qid in rows:
                n += 1
                if n == int(row):
                    rows[qid] = Firing(rows[qid])
        return report

    ev.run_eval = stopping_run_eval
from memory_core.apps.cli import main
sys.exit(main(sys.argv[1:]))
'''


def write_stopper(folder: Path) -> Path:
    """The wrapper script, written into ``folder``."""
    script = folder / "stopper.py"
    script.write_text(STOPPER)
    return script


def cli(args: list[str], script: Path | None = None, **stop: str) -> subprocess.CompletedProcess[str]:
    """``memory-core ARGS`` in a subprocess (in-process runs, no setting from the environment);
    through ``script`` (:func:`write_stopper`) with the ``stop`` variables (``STOP_SIG=...``)."""
    run = [sys.executable, str(script)] if script is not None else [sys.executable, "-m", "memory_core.apps.cli"]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STOP_", "MEMORY_CORE_"))}
    env.update(PYTHONPATH=str(ROOT), MEMORY_CORE_ENGINE="local", **stop)
    return subprocess.run([*run, *args], env=env, capture_output=True, text=True, timeout=240)


def last(err: str) -> str:
    """The command's last ``memory-core:`` line on stderr."""
    return [line for line in err.splitlines() if line.startswith("memory-core:")][-1]


def keyword_workspace(tmp_path: Path) -> Path:
    """A keyword-only workspace (no model to load: the tests time the stops, not the embedding), indexed."""
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    (ws / "MEMORY.md").write_text("# Memory\n\nThe heron waits by the pond.\n")
    (ws / "memory-core.toml").write_text('provider = "none"\n')
    res = cli(["index", "-w", str(ws), "--no-progress"])
    assert res.returncode == 0, res.stderr
    return ws


def holds(ws: Path, text: str) -> bool:
    """A search of ``ws``'s index finds ``text`` in a snippet."""
    import json

    res = cli(["search", "-w", str(ws), "--json", "--min-score", "0", text])
    assert res.returncode == 0, res.stderr
    return any(text in r["snippet"] for r in json.loads(res.stdout)["results"])
