"""`memory-core index` stopped before its run holds the writer lock, and what its `stopped` says
(the twentieth session's audit, findings 4 and 5). Each test fails on the code before its fix.

4: a SIGTERM in the start-up (settings, provider) or in the wait for another run's writer lock
killed the process with no line (exit 143); a Ctrl-C there printed no JSON. 5: `index --json`'s
`stopped` was "" for a run stopped before it published (the reason only in `error`), in both
engines; a stop while the summary was printed cut its JSON off, one in the interpreter's exit
ended a published run with exit -2 and no line."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from memory_core.storage.store import IndexLock
from tests.conftest import ROOT
from tests.fakes.openai_fake import OpenAIFake
from tests.prefect_server import shared_server

LEFT = "the live index was left as it was"
WORD = {signal.SIGINT: "interrupted", signal.SIGTERM: "stopped by SIGTERM"}
EXIT = {signal.SIGINT: 130, signal.SIGTERM: 1}


@pytest.fixture(autouse=True)
def _ctrl_c_interrupts() -> Iterator[None]:
    """Ctrl-C raises KeyboardInterrupt in the processes a test starts, as at a terminal (a test run
    started in the background by a non-interactive shell inherits SIGINT ignored, and so would they)."""
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)


def _env(**extra: str) -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(ROOT), **extra)


def _local_workspace(tmp_path: Path) -> Path:
    """A workspace of 3 notes on the local model, indexed, and then a 4th note written."""
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    for i in range(3):
        (ws / "memory" / f"n{i}.md").write_text(f"# note {i}\n\nThe heron waits by pond {i}.\n")
    (ws / "memory-core.toml").write_text('provider = "local"\n')
    first = subprocess.run(_index(ws), env=_env(), capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr
    (ws / "memory" / "n3.md").write_text("# note 3\n\nThe otter sleeps under the bridge.\n")
    return ws


def _index(ws: Path, *, engine: str = "local", run: list[str] | None = None) -> list[str]:
    return [*(run or [sys.executable, "-m", "memory_core.apps.cli"]), "index", "-w", str(ws), "--engine", engine,
            "--no-progress", "--json"]


class _Cli:
    """`memory-core index` in a subprocess, its stderr read as it comes."""

    def __init__(self, args: list[str], env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.err: list[str] = []
        self.out: list[str] = []
        self._readers = [threading.Thread(target=lambda: self.err.extend(iter(self.proc.stderr.readline, "")),  # type: ignore[union-attr]
                                          daemon=True),
                         threading.Thread(target=lambda: self.out.append(self.proc.stdout.read()),  # type: ignore[union-attr]
                                          daemon=True)]
        for r in self._readers:
            r.start()

    def wait_for(self, ready: Any, what: str, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while not ready():
            assert self.proc.poll() is None and time.monotonic() < deadline, f"no {what}: " + "".join(self.err)
            time.sleep(0.02)

    def said(self, text: str) -> bool:
        return text in "".join(self.err)

    def end(self, timeout: float = 120) -> tuple[int, str, str]:
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise AssertionError("the CLI went on after the stop: " + "".join(self.err)) from None
        for r in self._readers:
            r.join(10)
        return self.proc.returncode, "".join(self.out), "".join(self.err)


def _handles(pid: int, sig: int) -> bool:
    """Whether process ``pid`` has a handler of its own for ``sig`` (/proc/PID/status SigCgt)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) >> (sig - 1) & 1)
    return False


def _ours(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("memory-core:")]


# -- 4: a stop before the run holds the writer lock ---------------------------------------------

@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=lambda s: signal.Signals(s).name)
def test_a_stop_while_index_waits_for_another_runs_lock_is_said(tmp_path: Path, sig: int) -> None:
    """Another run holds the index; `index --json` says it waits for it, and is stopped there."""
    ws = _local_workspace(tmp_path)
    index = ws / ".memory-core" / "index.sqlite"
    live = index.read_bytes()
    with IndexLock(index, wait=False):
        cli = _Cli(_index(ws), _env())
        cli.wait_for(lambda: cli.said("waiting up to"), "wait for the lock")
        cli.proc.send_signal(sig)
        code, out, err = cli.end()
    said = f"memory-core: error: stopped by SIGTERM; {LEFT}" if sig == signal.SIGTERM else f"memory-core: interrupted; {LEFT}"
    assert code == EXIT[sig] and _ours(err) == [said] and "Traceback" not in err, (code, err)
    got = json.loads(out)  # one object
    assert got["swapped"] is False and got["stopped"] == WORD[sig] and got["error"] and got["error"] in said, got
    assert got["index_path"] == str(index)
    assert index.read_bytes() == live


def test_a_sigterm_in_index_start_up_is_a_stop(tmp_path: Path) -> None:
    """The settings resolve from what the live index recorded: a writer holding the index file
    (an SQLite write lock) keeps `index` there, in its start-up, for up to 10 s. A SIGTERM then
    killed it (exit 143, no line, no JSON)."""
    ws = _local_workspace(tmp_path)
    index = ws / ".memory-core" / "index.sqlite"
    live = index.read_bytes()
    db = sqlite3.connect(index, isolation_level=None)
    try:
        db.execute("BEGIN EXCLUSIVE")
        cli = _Cli(_index(ws), _env())
        deadline = time.monotonic() + 5  # (before the fix it never handles SIGTERM: it waits in the start-up)
        while not _handles(cli.proc.pid, signal.SIGTERM) and time.monotonic() < deadline:
            assert cli.proc.poll() is None, "".join(cli.err)
            time.sleep(0.02)
        time.sleep(0.3)
        cli.proc.send_signal(signal.SIGTERM)
        time.sleep(0.3)
    finally:
        if db.in_transaction:
            db.execute("ROLLBACK")  # the start-up goes on, to the stop that waits in it
        db.close()
    code, out, err = cli.end()
    assert code == 1 and _ours(err) == [f"memory-core: error: stopped by SIGTERM; {LEFT}"], (code, err)
    assert "waiting up to" not in err and "Traceback" not in err, err  # stopped in its start-up
    got = json.loads(out)
    assert got == {"index_path": "", "swapped": False, "stopped": "stopped by SIGTERM",
                   "error": f"stopped by SIGTERM; {LEFT}"}, got  # (the settings had not resolved)
    assert index.read_bytes() == live


def test_a_sigterm_while_prefect_loads_is_a_stop(tmp_path: Path) -> None:
    """`--engine prefect` spends its first seconds importing Prefect: a SIGTERM there killed the
    process (exit 143). Raised as a RunCancelled (an Exception) it would be worse: Prefect's plugin
    loader, which imports `prefect.context`, logs any Exception and goes on, and the run published
    as if no SIGTERM had come. No Prefect server is needed: the run stops before it asks for one."""
    ws = _local_workspace(tmp_path)
    index = ws / ".memory-core" / "index.sqlite"
    live = index.read_bytes()
    run = _wrapper(tmp_path, """
        import importlib.abc, os, signal, sys

        class StopOnImport(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path, target=None):
                if name == "prefect.context":  # (imported inside Prefect's plugin loader's try)
                    sys.meta_path.remove(self)
                    os.kill(os.getpid(), signal.SIGTERM)
                return None

        sys.meta_path.insert(0, StopOnImport())
    """)
    res = subprocess.run(_index(ws, engine="prefect", run=run), env=_env(PREFECT_API_URL="http://127.0.0.1:9/api"),
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 1 and _ours(res.stderr) == [f"memory-core: error: stopped by SIGTERM; {LEFT}"], (
        res.returncode, res.stderr)
    got = json.loads(res.stdout)
    assert got["swapped"] is False and got["stopped"] == "stopped by SIGTERM" and got["index_path"] == str(index), got
    assert index.read_bytes() == live


# -- 5: `stopped` names the stop, published or not ----------------------------------------------

def _slow_openai(tmp_path: Path, srv: OpenAIFake) -> Path:
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    for i in range(40):
        (ws / "memory" / f"n{i:02d}.md").write_text(f"# note {i}\n\nwords of note {i} about the heron.\n")
    (ws / "memory-core.toml").write_text(
        'provider = "openai"\nmodel = "text-embedding-3-small"\n'
        f'[remote]\nbase_url = "{srv.base_url}"\ndimensions = 64\nmax_inputs_per_request = 2\nbackoff_initial_s = 0.01\n')
    srv.delay = 0.5
    return ws


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=lambda s: signal.Signals(s).name)
def test_stopped_names_the_stop_of_a_local_run_stopped_before_it_publishes(tmp_path: Path, sig: int) -> None:
    """`--engine local`: `"stopped": ""` (the reason only in `error`)."""
    with OpenAIFake(dims=64) as srv:
        ws = _slow_openai(tmp_path, srv)
        cli = _Cli(_index(ws), _env(OPENAI_API_KEY="sk-test-key-0123456789"))
        cli.wait_for(lambda: len(srv.sync_billed_texts) >= 4, "embedding")
        cli.proc.send_signal(sig)
        code, out, err = cli.end()
    got = json.loads(out)
    assert code == EXIT[sig] and "Traceback" not in err, (code, err)
    assert got["swapped"] is False and got["stopped"] == WORD[sig] and got["error"], got
    assert got["chunks_embedded"] > 0  # the run's partial summary, with what stopped it
    assert not (ws / ".memory-core" / "index.sqlite").exists()


@pytest.mark.prefect_server
@pytest.mark.parametrize("how", ["SIGINT", "cancel"])
def test_stopped_names_the_stop_of_a_flow_run_stopped_before_it_publishes(prefect_api: Any, tmp_path: Path, how: str,
                                                                         request: pytest.FixtureRequest) -> None:
    """`--engine prefect`: SIGTERM said `"stopped": "stopped by SIGTERM"`, SIGINT and a cancel
    through the API (what the UI's Cancel does) `""`."""
    env = shared_server(request.config).env(OPENAI_API_KEY="sk-test-key-0123456789", PYTHONPATH=str(ROOT))
    with OpenAIFake(dims=64) as srv:
        ws = _slow_openai(tmp_path, srv)
        cli = _Cli(_index(ws, engine="prefect"), env)
        cli.wait_for(lambda: len(srv.sync_billed_texts) >= 4, "embedding", timeout=240)
        if how == "SIGINT":
            cli.proc.send_signal(signal.SIGINT)
        else:
            from prefect.client.orchestration import get_client
            from prefect.states import Cancelling

            run_id = "".join(cli.err).split("flow run: ", 1)[1].split()[0].rsplit("/", 1)[-1]
            with get_client(sync_client=True) as client:
                client.set_flow_run_state(run_id, Cancelling(message="cancelled by the test"))
        code, out, err = cli.end(timeout=120)
    got = json.loads(out)
    assert code == (130 if how == "SIGINT" else 1), (code, err)
    assert got["swapped"] is False and got["error"], got
    assert got["stopped"] == ("interrupted" if how == "SIGINT" else "cancelled in Prefect"), got
    assert not (ws / ".memory-core" / "index.sqlite").exists()


def _wrapper(tmp_path: Path, body: str) -> list[str]:
    """The real CLI, run by a script that first does ``body`` (a stop at a chosen moment)."""
    script = tmp_path / "index_stopped.py"
    script.write_text(textwrap.dedent(body) + "\nfrom memory_core.apps.cli import main\nsys.exit(main())\n")
    return [sys.executable, str(script)]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=lambda s: signal.Signals(s).name)
def test_a_stop_while_index_prints_its_summary_waits_for_the_output(tmp_path: Path, sig: int) -> None:
    """The run published; the stop comes as `--json` prints its summary. Ctrl-C cut the JSON off
    (nothing on stdout), SIGTERM killed the process (exit 143). Now the output is whole, then the
    run ends as one stopped after its publish."""
    ws = _local_workspace(tmp_path)
    run = _wrapper(tmp_path, f"""
        import json, os, sys
        real = json.dumps

        def dumps(obj, *args, **kwargs):
            text = real(obj, *args, **kwargs)
            if isinstance(obj, dict) and obj.get("swapped") is True:
                os.kill(os.getpid(), {int(sig)})  # the stop, as the summary is printed
            return text

        json.dumps = dumps
    """)
    res = subprocess.run(_index(ws, run=run), env=_env(), capture_output=True, text=True, timeout=300)
    got = json.loads(res.stdout)  # whole
    assert got["swapped"] is True and got["files_new"] == 1, got
    assert res.returncode == EXIT[sig] and "Traceback" not in res.stderr, (res.returncode, res.stderr)
    assert _ours(res.stderr) and _ours(res.stderr)[-1].startswith(
        f"memory-core: {WORD[sig]} after the new index was published ("), res.stderr


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=lambda s: signal.Signals(s).name)
def test_a_stop_in_the_interpreters_exit_after_index_leaves_the_run_as_it_said(tmp_path: Path, sig: int) -> None:
    """The command has printed its summary and returned; the stop comes in Python's teardown of
    the modules, where Python has put back the signals' default action: the process died by it
    (exit -2 or -15) and no line said anything. Now the exit goes on, with the command's code."""
    ws = _local_workspace(tmp_path)
    run = _wrapper(tmp_path, f"""
        import os, sys

        class StopInTeardown:  # a module global: deleted in the interpreter's teardown
            def __del__(self):
                os.kill(os.getpid(), {int(sig)})

        stop_in_teardown = StopInTeardown()
    """)
    res = subprocess.run(_index(ws, run=run), env=_env(), capture_output=True, text=True, timeout=300)
    got = json.loads(res.stdout)
    assert got["swapped"] is True and got["files_new"] == 1 and not got["stopped"], got
    assert res.returncode == 0 and "Traceback" not in res.stderr, (res.returncode, res.stderr)
