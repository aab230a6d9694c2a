"""A stop whose raise is lost on the way still ends the run, before it publishes.

Python swallows an exception raised in a finalizer (``__del__``: it prints "Exception ignored
in" and goes on). A Ctrl-C that landed while the main thread ran one was lost: the run went on
and published its new index, and `memory-core index` exited 0, as if no Ctrl-C had come (a run
polling its Batch API jobs polled them to their deadline: tests/test_flow_cancel.py). The run
now notes each stop as its handler raises it and looks at the note between files and before
it publishes (memory_core/index/run_stops.py)."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.test_stop_audit20 import LEFT, _env, _index, _local_workspace, _ours

# the first file the run chunks: the Ctrl-C comes while the main thread runs a finalizer
LOSE_A_STOP = """
import os, signal, sys, time

from memory_core.index import streaming

real_chunk_file = streaming.chunk_file


class LostStop:
    def __del__(self):
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.2)  # the KeyboardInterrupt is raised in this finalizer: Python swallows it


def chunk_file(*args, **kwargs):
    LostStop()
    return real_chunk_file(*args, **kwargs)


streaming.chunk_file = chunk_file
"""


@pytest.fixture(autouse=True)
def _ctrl_c_interrupts() -> Iterator[None]:
    """Ctrl-C raises KeyboardInterrupt in the processes a test starts, as at a terminal (a test run
    started in the background by a non-interactive shell inherits SIGINT ignored, and so would they)."""
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)


def test_a_ctrl_c_lost_in_a_finalizer_does_not_let_index_publish(tmp_path: Path) -> None:
    """`memory-core index`: the Ctrl-C is lost as the new note is chunked. The command published
    the note and exited 0; now it exits 130, says it was interrupted, and the live index is
    byte for byte as it was."""
    ws = _local_workspace(tmp_path)
    index = ws / ".memory-core" / "index.sqlite"
    live = index.read_bytes()
    script = tmp_path / "index_lost_stop.py"
    script.write_text(textwrap.dedent(LOSE_A_STOP) + "\nfrom memory_core.apps.cli import main\nsys.exit(main())\n")
    res = subprocess.run(_index(ws, run=[sys.executable, str(script)]), env=_env(), capture_output=True, text=True,
                         timeout=300)
    assert "Exception ignored in: <function LostStop.__del__" in res.stderr, res.stderr  # it was lost
    assert res.returncode == 130, (res.returncode, res.stdout, res.stderr)
    assert _ours(res.stderr)[-1].startswith(f"memory-core: interrupted; {LEFT}"), res.stderr
    assert index.read_bytes() == live


def test_a_ctrl_c_lost_in_a_finalizer_ends_a_python_api_run(tmp_path: Path) -> None:
    """The same through the Python API, where Python's own Ctrl-C handler is in place (no
    command's): the run raises KeyboardInterrupt before it publishes."""
    ws = _local_workspace(tmp_path)
    index = ws / ".memory-core" / "index.sqlite"
    live = index.read_bytes()
    script = tmp_path / "api_lost_stop.py"
    script.write_text(textwrap.dedent(LOSE_A_STOP) + textwrap.dedent(f"""
        from memory_core.api import Memory, open_memory

        try:  # (refresh=False: no sync trigger of its own runs beside this run)
            with Memory(open_memory({str(ws)!r}).settings, refresh=False) as memory:
                summary = memory.index()
        except KeyboardInterrupt as exc:
            print("stopped:", getattr(exc, "run_summary", None) is not None, flush=True)
        else:
            print("published:", summary.swapped, flush=True)
    """))
    res = subprocess.run([sys.executable, str(script)], env=_env(), capture_output=True, text=True, timeout=300)
    assert "Exception ignored in: <function LostStop.__del__" in res.stderr, res.stderr
    assert res.returncode == 0 and res.stdout.strip() == "stopped: True", (res.stdout, res.stderr)
    assert index.read_bytes() == live
