"""A stop whose raise is lost on the way still ends the run, before it publishes.

Python swallows an exception raised in a finalizer (``__del__``: it prints "Exception ignored
in" and goes on). A Ctrl-C that landed while the main thread ran one was lost: the run went on
and published its new index, and `memory-core index` exited 0, as if no Ctrl-C had come (a run
polling its Batch API jobs polled them to their deadline: tests/test_flow_cancel.py). The run
now notes each stop as its handler raises it and looks at the note between files and before
it publishes (memory_core/index/run_stops.py)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.test_stop_audit20 import (
    LEFT,
    _ctrl_c_interrupts,  # noqa: F401 - autouse here too: Ctrl-C interrupts the processes
    _env,
    _index,
    _local_workspace,
    _ours,
)

# a Ctrl-C that comes while the main thread runs a finalizer
LOST_STOP = """
import os, signal, sys, time


class LostStop:
    def __del__(self):
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.2)  # the KeyboardInterrupt is raised in this finalizer: Python swallows it
"""

# ... as the run chunks its first file
LOSE_A_STOP = LOST_STOP + """
from memory_core.index import streaming

real_chunk_file = streaming.chunk_file


def chunk_file(*args, **kwargs):
    LostStop()
    return real_chunk_file(*args, **kwargs)


streaming.chunk_file = chunk_file
"""



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


SYNC_RUN = """
import sys, time

from memory_core.config import Settings
from memory_core.index.pipeline import run_index

settings = Settings.model_validate_json(open(sys.argv[1]).read())
try:
    run_index(settings, full=True)
    print("finished", flush=True)
except BaseException as exc:
    print(f"stopped {time.time()} {type(exc).__name__}", flush=True)
"""

LOSE_ON_SIGUSR1 = """
import os, signal, time


class LostStop:
    def __del__(self):
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.2)  # the KeyboardInterrupt is raised in this finalizer: Python swallows it


signal.signal(signal.SIGUSR1, lambda signum, frame: LostStop())
"""


# the lost Ctrl-C (this file's subject) by default; the plain one in `-m slow` (12 s)
@pytest.mark.parametrize("how", [pytest.param("ctrl-c", marks=pytest.mark.slow), "ctrl-c-lost-in-a-finalizer"])
def test_a_ctrl_c_while_the_run_waits_for_a_slow_provider_ends_it_after_the_grace(tmp_path: Path, how: str) -> None:
    """A sync embedding request that takes a minute (a stalled provider; each attempt may take
    ``remote.timeout_s``, 60 s by default, and is retried). Ctrl-C: the run stopped waiting for
    its requests after ``streaming.STOP_GRACE_S`` (10 s), but its executor's close then waited for
    the running request to its end, and the process ended a minute later. Now the requests still
    running after the grace are abandoned (``retry.Abandoned``): the run ends within seconds of it.
    Lost in a finalizer, the Ctrl-C waited for every request, then stopped before the publish; now
    the wait looks for it every 0.5 s (``run_stops``)."""
    import time

    from tasks.stages import settings_json
    from tests.fakes.openai_fake import OpenAIFake
    from tests.test_batch import batch_settings

    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    (ws / "memory" / "heron.md").write_text("# Herons\n\nThe heron waits by the pond at dawn.\n")
    script = tmp_path / "sync_run.py"
    script.write_text(textwrap.dedent(LOSE_ON_SIGUSR1) + textwrap.dedent(SYNC_RUN))
    with OpenAIFake(dims=16, delay=60) as srv:
        s = batch_settings(ws, "openai", srv, remote={"timeout_s": 120, "max_attempts": 1}, enabled=False)
        blob = tmp_path / "settings.json"
        blob.write_text(settings_json(s))
        proc = subprocess.Popen([sys.executable, str(script), str(blob)], env=_env(), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        try:
            srv.wait_for_embed_requests(1, proc)
            time.sleep(0.5)  # in the wait
            t0 = time.time()
            proc.send_signal(signal.SIGINT if how == "ctrl-c" else signal.SIGUSR1)
            out, err = proc.communicate(timeout=120)
            ended = time.time()
        finally:
            if proc.poll() is None:
                proc.kill()
    if how != "ctrl-c":
        assert "Exception ignored in: <function LostStop.__del__" in err, err[-3000:]
    stopped = [line.split() for line in out.splitlines() if line.startswith("stopped ")]
    assert stopped and stopped[0][2] == "KeyboardInterrupt", (out, err[-3000:])
    took = float(stopped[0][1]) - t0
    assert took < 30, took  # before: 60 s, the request's whole time (the grace is 10 s)
    assert proc.returncode == 0 and ended - t0 < 30, (proc.returncode, ended - t0)  # no thread held the exit
    assert not (ws / ".memory-core" / "index.sqlite").exists()  # nothing published


def test_a_request_waiting_out_a_providers_backoff_is_abandoned_when_its_run_stops(tmp_path: Path) -> None:
    """The other half of a stalled provider: a 429 with ``Retry-After: 30``. The request waited
    the 30 s before it could see that its run had stopped; under ``abandoned_when`` (every
    executor's embedding request) it ends with ``Abandoned`` as the run's stop is set, and the
    provider gets no second attempt."""
    import threading
    import time

    from memory_core.embeddings.registry import create_provider
    from memory_core.embeddings.retry import Abandoned, abandoned_when
    from tests.fakes.openai_fake import OpenAIFake
    from tests.test_batch import batch_settings

    with OpenAIFake(dims=16) as srv:
        srv.fail_next(1, 429, retry_after=30)
        s = batch_settings(tmp_path, "openai", srv, remote={"retry_budget_s": 120, "backoff_max_s": 60}, enabled=False)
        provider, _ = create_provider(s)
        stop = threading.Event()
        got: list[BaseException | object] = []

        def embed() -> None:
            with abandoned_when(stop):
                try:
                    got.append(provider.embed_documents(["the heron waits by the pond"]))
                except BaseException as exc:  # noqa: BLE001 - the outcome is the test's
                    got.append(exc)

        caller = threading.Thread(target=embed)
        caller.start()
        deadline = time.monotonic() + 30
        while srv.embed_requests < 1 and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(0.3)  # in the backoff
        stop.set()
        t0 = time.monotonic()
        caller.join(10)
        took = time.monotonic() - t0
        provider.close()
        assert not caller.is_alive() and took < 2, took  # before: the 30 s backoff, then a second attempt
        assert len(got) == 1 and isinstance(got[0], Abandoned), got
        assert srv.embed_requests == 1


CLOSE_WHILE_SYNCING = """
import sys, time

from memory_core.api import Memory
from memory_core.config import Settings
from memory_core.runtime import sync

sync.CLOSE_WAIT_S = 1.0  # (30 s: the test's time) how long closing waits before it stops the run
memory = Memory(Settings.model_validate_json(open(sys.argv[1]).read()))
memory.start_session()  # the index is dirty: a background reindex starts
sys.stdin.readline()
memory.close()
print(f"closed {time.time()}", flush=True)
"""


def test_closing_a_memory_stops_its_background_reindex_on_a_stalled_provider(tmp_path: Path) -> None:
    """An MCP server (a ``Memory`` with its sync triggers) is closed while its session-start
    reindex waits on a provider that takes a minute. Closing waited 30 s for the run, then
    returned, and the process's exit waited for the request to its end. Now closing stops the
    run after ``sync.CLOSE_WAIT_S`` (1 s here): it ends at its next check, its request abandoned
    after the 10 s grace, the live index as it was; the process exits at once."""
    import time

    from memory_core.index.pipeline import run_index
    from tasks.stages import settings_json
    from tests.fakes.openai_fake import OpenAIFake
    from tests.test_batch import batch_settings

    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    (ws / "memory" / "heron.md").write_text("# Herons\n\nThe heron waits by the pond at dawn.\n")
    script = tmp_path / "close_while_syncing.py"
    script.write_text(textwrap.dedent(CLOSE_WHILE_SYNCING))
    with OpenAIFake(dims=16) as srv:
        s = batch_settings(ws, "openai", srv, remote={"timeout_s": 120, "max_attempts": 1}, enabled=False)
        run_index(s)
        index = s.index_file
        live = index.read_bytes()
        (ws / "memory" / "otter.md").write_text("# Otters\n\nThe otter sleeps under the bridge.\n")
        srv.delay = 60
        blob = tmp_path / "settings.json"
        blob.write_text(settings_json(s))
        proc = subprocess.Popen([sys.executable, str(script), str(blob)], env=_env(), stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            srv.wait_for_embed_requests(2, proc)  # the first index's, and the background run's
            t0 = time.time()
            out, err = proc.communicate("close\n", timeout=120)
            ended = time.time()
        finally:
            if proc.poll() is None:
                proc.kill()
    closed = [float(line.split()[1]) for line in out.splitlines() if line.startswith("closed ")]
    assert closed and closed[0] - t0 < 25, (closed, t0, err[-3000:])  # 1 s, then the 10 s grace
    assert proc.returncode == 0 and ended - t0 < 30, (proc.returncode, ended - t0, err[-3000:])  # before: 60 s
    assert "stopping it" in err, err[-3000:]
    assert index.read_bytes() == live  # the stopped run published nothing


WRAP_A_STOP = """
import os, signal, sys, time

from memory_core.index import streaming

real_chunk_file = streaming.chunk_file


def chunk_file(*args, **kwargs):
    try:
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.2)
    except KeyboardInterrupt as exc:  # as pydantic's serializer does with any exception
        raise ValueError("Error calling function: KeyboardInterrupt") from exc
    return real_chunk_file(*args, **kwargs)


streaming.chunk_file = chunk_file
"""


def test_a_ctrl_c_wrapped_in_an_error_ends_a_python_api_run_as_a_ctrl_c(tmp_path: Path) -> None:
    """A library that turns the KeyboardInterrupt into an error of its own (pydantic's serializer
    does: CI saw a Prefect flow's Ctrl-C end as ``PydanticSerializationError``): the run ended with
    that error, a failure, where ``memory-core index`` said it as the Ctrl-C. Now the run itself
    ends with the stop (KeyboardInterrupt, from the error), its partial summary with it."""
    ws = _local_workspace(tmp_path)
    index = ws / ".memory-core" / "index.sqlite"
    live = index.read_bytes()
    script = tmp_path / "api_wrapped_stop.py"
    script.write_text(textwrap.dedent(WRAP_A_STOP) + textwrap.dedent(f"""
        from memory_core.api import Memory, open_memory

        try:
            with Memory(open_memory({str(ws)!r}).settings, refresh=False) as memory:
                memory.index()
        except BaseException as exc:
            print(type(exc).__name__, type(exc.__cause__).__name__, getattr(exc, "run_summary", None) is not None,
                  flush=True)
    """))
    res = subprocess.run([sys.executable, str(script)], env=_env(), capture_output=True, text=True, timeout=300)
    assert res.stdout.split() == ["KeyboardInterrupt", "ValueError", "True"], (res.stdout, res.stderr[-3000:])
    assert index.read_bytes() == live


def test_a_ctrl_c_lost_after_the_publish_says_the_run_was_stopped_after_it(tmp_path: Path) -> None:
    """The Ctrl-C is lost in the cache trim, after the new index went live. The command said
    nothing of it (exit 0, as if it never came); now it ends as a run stopped after its publish
    does (docs/reliability.md R1): exit 130, the line says the live index holds this run's update."""
    ws = _local_workspace(tmp_path)
    script = tmp_path / "index_lost_after_publish.py"
    script.write_text(LOST_STOP + textwrap.dedent("""
        from memory_core.index import pipeline

        real_trim = pipeline.trim_cache


        def trim_cache(*args, **kwargs):
            LostStop()
            return real_trim(*args, **kwargs)


        pipeline.trim_cache = trim_cache
    """) + "\nfrom memory_core.apps.cli import main\nsys.exit(main())\n")
    res = subprocess.run(_index(ws, run=[sys.executable, str(script)]), env=_env(), capture_output=True, text=True,
                         timeout=300)
    assert "Exception ignored in: <function LostStop.__del__" in res.stderr, res.stderr
    assert res.returncode == 130, (res.returncode, res.stdout, res.stderr)
    assert _ours(res.stderr)[-1].startswith("memory-core: interrupted after the new index was published ("), res.stderr
    got = json.loads(res.stdout)
    assert got["swapped"] is True and got["files_new"] == 1 and got["stopped"] == "interrupted", got
