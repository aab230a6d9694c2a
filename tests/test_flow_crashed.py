"""A flow run whose process is SIGKILLed (the OOM killer, `kill -9`, a machine going down) has no
chance to report: nothing marked it, and it stayed Running in Prefect for ever (docs/reliability.md,
after BP8). Each run now holds an exclusive flock on an owner file named after its flow run id
(``<index>.flow-runs/<id>``, flows/owners.py); the next run of the index marks the runs whose file
it can lock Crashed. Against a real Prefect server, with the real CLI killed mid-run."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from flows import owners
from tests.conftest import EXAMPLES, ROOT
from tests.fakes.openai_fake import OpenAIFake
from tests.prefect_server import free_port, read_flow_run, shared_server
from tests.test_flow_cancel import _Cli, _config

pytestmark = pytest.mark.prefect_server

HOLD = """
import os, signal, sys, time
from flows import owners
owners.hold(sys.argv[1], sys.argv[2], api_url=sys.argv[3], run_name="held by the test")
if sys.argv[4] == "die":
    os.kill(os.getpid(), signal.SIGKILL)  # no cleanup: the file stays, its lock goes with the process
print("held", flush=True)
time.sleep(600)
"""


def _owner_process(index: Path, run_id: str, api_url: str, *, live: bool) -> subprocess.Popen[str]:
    """A real process that holds ``run_id``'s owner file: killed at once (``live`` False), or alive
    until the test stops it."""
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(index), run_id, api_url, "live" if live else "die"],
                            env=dict(os.environ, PYTHONPATH=str(ROOT)), stdout=subprocess.PIPE, text=True)
    if live:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    else:
        assert proc.wait(30) == -signal.SIGKILL
    return proc


def _flow_run_in(state: Any) -> str:
    from prefect import flow
    from prefect.client.orchestration import get_client

    @flow(name="held-by-the-test")
    def held() -> None:  # pragma: no cover - never run: only its flow runs are made
        pass

    with get_client(sync_client=True) as client:
        return str(client.create_flow_run(held, state=state).id)


def _states(run_id: str) -> list[str]:
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        return [s.name for s in client.read_flow_run_states(uuid.UUID(run_id))]


def _wait_state(run_id: str, done: Any, timeout: float = 30) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        state = read_flow_run(run_id).state
        if done(state) or time.monotonic() > deadline:
            return state
        time.sleep(0.2)


def _workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    shutil.copytree(EXAMPLES / "workspace", ws, ignore=shutil.ignore_patterns(".memory-core"))
    return ws


def test_a_sigkilled_cli_run_is_marked_crashed_by_the_next_run_and_a_live_one_never(
        prefect_api: Any, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """Run A (`memory-core index --engine prefect`, its own process) is held in a slow provider:
    a sweep from another process leaves it Running, owner file and all. A is SIGKILLed: it stays
    Running (before: for ever). Run B of the same index completes and marks A Crashed, with a
    message naming A's process, and no owner file is left."""
    ws = _workspace(tmp_path)
    index = ws / ".memory-core" / "index.sqlite"
    cfg = tmp_path / "memory-core.toml"
    server = shared_server(request.config)
    env = server.env(OPENAI_API_KEY="sk-test-key-0123456789", PYTHONPATH=str(ROOT))
    args = [sys.executable, "-m", "memory_core.apps.cli", "index", "--config", str(cfg), "--engine", "prefect",
            "--no-progress"]
    with OpenAIFake(dims=64) as srv:
        _config(cfg, ws, srv.base_url)
        srv.delay = 30.0  # A waits in its first embedding requests until it is killed
        a = _Cli(args, env)
        try:
            a_id = a.flow_run_id()
            deadline = time.monotonic() + 60
            while not srv.requests and time.monotonic() < deadline:
                assert a.proc.poll() is None, "".join(a.err)
                time.sleep(0.1)
            assert srv.requests, "".join(a.err)
            owner_file = owners.owners_dir(index) / a_id
            # a sweep while A is alive (this process, another than A's): A is not touched
            live = owners.sweep(index, current_api=server.api_url, found_by="the test")
            held_while_alive = owner_file.exists()
            assert live.crashed == [], live
            assert read_flow_run(a_id).state.is_running()

            a.proc.send_signal(signal.SIGKILL)
            assert a.proc.wait(30) == -signal.SIGKILL
        finally:
            if a.proc.poll() is None:
                a.proc.kill()
        time.sleep(1)
        assert read_flow_run(a_id).state.is_running()  # nothing marks it: before, that was for ever
        left_by_the_dead = owner_file.exists()  # the killed run's file, its lock gone with its process

        srv.delay = 0.0
        b = _Cli(args, env)
        b_id = b.flow_run_id()
        code, out, err = b.wait(timeout=120)

    assert code == 0 and "Traceback" not in err, err
    state = _wait_state(a_id, lambda s: s.is_final())
    assert state.is_crashed(), (state.type, state.message)
    assert f"pid {a.proc.pid}" in (state.message or "") and "stopped without reporting" in (state.message or "")
    assert "never a mix" in (state.message or "") and b_id in (state.message or "")
    assert f"flow run {a_id}" in err and "marked Crashed" in err  # B says what it did
    b_state = _wait_state(b_id, lambda s: s.is_final())
    assert b_state.is_completed(), (b_state.type, b_state.message)
    assert index.exists()
    assert held_while_alive and left_by_the_dead  # the sweep above saw A's file, locked, and left it
    assert list(owners.owners_dir(index).iterdir()) == []  # A's file settled, B's removed as B ended


def test_only_runs_whose_owner_is_dead_are_settled_and_two_sweeps_race_harmlessly(
        prefect_api: Any, tmp_path: Path) -> None:
    """Owner files of runs in every case, each held by a real process: dead and Running or
    Pending (-> Crashed), dead and Cancelling (-> Cancelled), dead and already Completed (left as
    it is), dead and gone from the server (left), alive and Running (never touched, file kept). Two
    sweeps started at once settle each dead run once."""
    from prefect.states import Cancelling, Completed, Pending, Running

    index = tmp_path / "index.sqlite"
    api = prefect_api.api_url
    runs = {name: _flow_run_in(state) for name, state in (
        ("running", Running()), ("pending", Pending()), ("cancelling", Running()), ("completed", Completed()),
        ("live", Running()))}
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:  # Cancelling is reached from Running
        client.set_flow_run_state(uuid.UUID(runs["cancelling"]), Cancelling(message="by the test"))
    gone = str(uuid.uuid4())  # a run the server does not have (deleted)
    for name, run_id in {**runs, "gone": gone}.items():
        if name != "live":
            _owner_process(index, run_id, api, live=False)
    live = _owner_process(index, runs["live"], api, live=True)
    try:
        results: list[owners.SweepResult] = []
        start = threading.Barrier(2)

        def one() -> None:
            start.wait()
            results.append(owners.sweep(index, current_api=api, found_by="the test"))

        threads = [threading.Thread(target=one) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        crashed = sorted(i for r in results for i in r.crashed)
        assert crashed == sorted([runs["running"], runs["pending"], runs["cancelling"]]), results
        assert all(not r.kept and not r.problems for r in results), results
        for name in ("running", "pending"):
            state = read_flow_run(runs[name]).state
            assert state.is_crashed() and "stopped without reporting" in (state.message or ""), (name, state)
            assert _states(runs[name]).count("Crashed") == 1  # marked once, though two sweeps ran
        assert read_flow_run(runs["cancelling"]).state.is_cancelled()
        assert read_flow_run(runs["completed"]).state.is_completed()  # final: left as it was
        assert read_flow_run(runs["live"]).state.is_running()  # its owner is alive: never touched
        assert sorted(p.name for p in owners.owners_dir(index).iterdir()) == [runs["live"]]
    finally:
        live.kill()
        live.wait(10)
    # once its process is gone, it is settled as the others
    again = owners.sweep(index, current_api=api, found_by="the test")
    assert again.crashed == [runs["live"]]
    assert read_flow_run(runs["live"]).state.is_crashed()


def test_an_unreachable_server_keeps_the_dead_runs_file_and_never_fails_the_run(
        prefect_api: Any, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """A dead run recorded on a Prefect server nobody answers at: the next CLI run (on the real
    server) completes, warns once that it could not mark it, and keeps its file for a later run."""
    ws = _workspace(tmp_path)
    index = ws / ".memory-core" / "index.sqlite"
    cfg = tmp_path / "memory-core.toml"
    down = f"http://127.0.0.1:{free_port()}/api"  # nothing listens there
    dead = str(uuid.uuid4())
    _owner_process(index, dead, down, live=False)
    env = shared_server(request.config).env(OPENAI_API_KEY="sk-test-key-0123456789", PYTHONPATH=str(ROOT))
    with OpenAIFake(dims=64) as srv:
        _config(cfg, ws, srv.base_url)
        cli = _Cli([sys.executable, "-m", "memory_core.apps.cli", "index", "--config", str(cfg), "--engine", "prefect",
                    "--no-progress"], env)
        run_id = cli.flow_run_id()
        code, out, err = cli.wait(timeout=120)
    assert code == 0 and "Traceback" not in err, err
    assert err.count("cannot reach the Prefect API") == 1 and down in err, err
    assert _wait_state(run_id, lambda s: s.is_final()).is_completed()
    assert [p.name for p in owners.owners_dir(index).iterdir()] == [dead]  # kept for next time


SERVE = """
import sys
from prefect import serve
from prefect.flows import load_flow_from_entrypoint

flow = load_flow_from_entrypoint("flows/reindex.py:reindex")  # as deployments/serve.py loads it
serve(flow.to_deployment(name=sys.argv[1], parameters={"workspace": sys.argv[2], "config_file": sys.argv[3]}))
"""


def test_a_served_deployment_run_killed_with_its_serve_process_is_marked_crashed_by_the_next_run(
        prefect_api: Any, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """A deployment served by `serve` (a runner, each flow run in a child process): the machine
    goes down while its run embeds (serve and the run's process SIGKILLed: no runner is left to
    report). The run stayed Running; the next run of the index, an ad hoc CLI run, marks it Crashed."""
    from prefect.client.orchestration import get_client
    from prefect.deployments import run_deployment

    from tests.prefect_server import start_process, stop_process

    ws = _workspace(tmp_path)
    index = ws / ".memory-core" / "index.sqlite"
    cfg = tmp_path / "memory-core.toml"
    name = f"crashed-{uuid.uuid4().hex[:8]}"
    env = shared_server(request.config).env(OPENAI_API_KEY="sk-test-key-0123456789", PYTHONPATH=str(ROOT),
                                            PREFECT_RUNNER_POLL_FREQUENCY="1")
    with OpenAIFake(dims=64) as srv:
        _config(cfg, ws, srv.base_url)
        srv.delay = 30.0
        serve = start_process([sys.executable, "-c", SERVE, name, str(ws), str(cfg)], env=env,
                              log=tmp_path / "serve.log")
        run_pid = None
        try:
            deadline = time.monotonic() + 120
            while True:
                with get_client(sync_client=True) as client:
                    try:
                        client.read_deployment_by_name(f"reindex/{name}")
                        break
                    except Exception:
                        assert serve.poll() is None and time.monotonic() < deadline, \
                            (tmp_path / "serve.log").read_text()
                time.sleep(0.3)
            run_id = str(run_deployment(f"reindex/{name}", timeout=0).id)
            while not srv.requests:  # the run embeds, in the runner's child process
                assert serve.poll() is None and time.monotonic() < deadline, (tmp_path / "serve.log").read_text()
                time.sleep(0.2)
            children = Path(f"/proc/{serve.pid}/task/{serve.pid}/children").read_text().split()
            assert len(children) == 1, children
            run_pid = int(children[0])
            os.killpg(serve.pid, signal.SIGKILL)  # the machine goes down: serve and the run's process
            os.kill(run_pid, signal.SIGKILL)
            serve.wait(30)
        finally:
            stop_process(serve)
            if run_pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(run_pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while True:  # the run's process is gone once its lock is
            try:
                os.kill(run_pid, 0)
            except ProcessLookupError:
                break
            assert time.monotonic() < deadline
            time.sleep(0.1)
        assert read_flow_run(run_id).state.is_running()  # no runner left to report it

        srv.delay = 0.0
        b = _Cli([sys.executable, "-m", "memory_core.apps.cli", "index", "--config", str(cfg), "--engine", "prefect",
                  "--no-progress"], env)
        code, out, err = b.wait(timeout=120)
    assert code == 0 and "Traceback" not in err, err
    state = _wait_state(run_id, lambda s: s.is_final())
    assert state.is_crashed(), (state.type, state.message)
    assert f"pid {run_pid}" in (state.message or "") and "stopped without reporting" in (state.message or "")
    assert list(owners.owners_dir(index).iterdir()) == []
    with get_client(sync_client=True) as client:
        client.delete_deployment(client.read_deployment_by_name(f"reindex/{name}").id)


FLEET = """
import signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)
from flows.fleet import fleet_reindex
fleet_reindex(config_file=sys.argv[1])
"""


def test_a_sigkilled_fleet_run_and_its_agents_runs_are_marked_crashed_by_the_next_fleet_run(
        prefect_api: Any, tmp_path: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """A `fleet-reindex` run (two agents, each a reindex subflow in its process) is SIGKILLed while
    its agents embed: the fleet run and both agents' runs stayed Running for ever (the agents'
    were marked by their indexes' next runs, the fleet's by nothing). The fleet run now holds an
    owner file in each agent's folder; the next fleet run marks all three Crashed, the fleet's with
    a message for a fleet, and leaves no owner file."""
    from tests.test_agents import make_fleet

    cfg, _ws = make_fleet(tmp_path)
    env = shared_server(request.config).env(OPENAI_API_KEY="sk-test-key-0123456789", PYTHONPATH=str(ROOT))
    from memory_core.runtime.resolve import resolve_agents

    with OpenAIFake(dims=64) as srv:
        cfg.write_text(cfg.read_text().replace('provider = "none"\n', (
            f'provider = "openai"\nmodel = "text-embedding-3-small"\n[remote]\nbase_url = "{srv.base_url}"\n'
            'dimensions = 64\nmax_inputs_per_request = 8\nbackoff_initial_s = 0.01\n')))
        folders = {a: owners.owners_dir(s.index_file) for a, s in resolve_agents(cfg).items()}
        srv.delay = 30.0  # both agents wait in their first embedding request until the process is killed
        proc = subprocess.Popen([sys.executable, "-c", FLEET, str(cfg)], env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
        try:
            deadline = time.monotonic() + 120
            while len(srv.requests) < 2 or any(len(list(f.glob("*-*-*-*-*"))) < 2 for f in folders.values()):
                assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[0]
                time.sleep(0.1)
            proc.send_signal(signal.SIGKILL)
            assert proc.wait(30) == -signal.SIGKILL
        finally:
            if proc.poll() is None:
                proc.kill()
        runs: dict[str, dict[str, Any]] = {}  # run id -> its owner record, from both folders
        for folder in folders.values():
            for f in folder.iterdir():
                runs[f.name] = {**json.loads(f.read_text()), "folder": folder}
        fleet_ids = [i for i, r in runs.items() if r["flow"] == "fleet-reindex"]
        agent_ids = [i for i, r in runs.items() if r["flow"] != "fleet-reindex"]
        assert len(fleet_ids) == 1 and len(agent_ids) == 2, runs
        assert {r["folder"] for i, r in runs.items() if i in agent_ids} == set(folders.values())
        assert all((f / fleet_ids[0]).exists() for f in folders.values())  # one in each agent's folder
        for i in runs:
            assert read_flow_run(i).state.is_running()  # nothing marks them: before, that was for ever

        srv.delay = 0.0
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test-key-0123456789")
        from flows.fleet import fleet_reindex

        state = fleet_reindex(config_file=str(cfg), return_state=True)
    assert state.is_completed(), state.message
    for i in runs:
        got = _wait_state(i, lambda s: s.is_final())
        assert got.is_crashed(), (i, got.type, got.message)
        assert f"pid {proc.pid}" in (got.message or "")
    fleet_message = read_flow_run(fleet_ids[0]).state.message or ""
    assert "fleet run" in fleet_message and "Each agent's live index" in fleet_message, fleet_message
    deadline = time.monotonic() + 30
    while any(list(f.iterdir()) for f in folders.values()):  # the sweeps run beside the runs
        assert time.monotonic() < deadline, {a: list(f.iterdir()) for a, f in folders.items()}
        time.sleep(0.2)


def test_status_lists_the_runs_killed_mid_run_and_only_looks(tmp_path: Path) -> None:
    """An index whose last Prefect run was killed and never run again: its run stays Running in
    Prefect. `memory-core status` (which never imports Prefect and writes nothing) now says so:
    the dead run listed, a live one not, every owner file left as it was (a later run's sweep
    still finds the dead one)."""
    ws = _workspace(tmp_path)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    cli = [sys.executable, "-m", "memory_core.apps.cli"]
    done = subprocess.run([*cli, "index", "-w", str(ws), "--provider", "none", "--no-progress"], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    index = ws / ".memory-core" / "index.sqlite"
    dead_id, live_id = str(uuid.uuid4()), str(uuid.uuid4())
    _owner_process(index, dead_id, "http://127.0.0.1:9/api", live=False)
    live = _owner_process(index, live_id, "http://127.0.0.1:9/api", live=True)
    try:
        before = sorted(p.name for p in owners.owners_dir(index).iterdir())
        human = subprocess.run([*cli, "status", "-w", str(ws)], env=env, capture_output=True, text=True, timeout=60)
        js = subprocess.run([*cli, "status", "-w", str(ws), "--json"], env=env, capture_output=True, text=True,
                            timeout=60)
        after = sorted(p.name for p in owners.owners_dir(index).iterdir())
    finally:
        live.kill()
        live.wait(30)
    assert human.returncode == 0 and js.returncode == 0, human.stderr + js.stderr
    assert "stopped_flow_runs: 1" in human.stdout and dead_id in human.stdout and live_id not in human.stdout
    assert "held by the test" in human.stdout and "marks them Crashed" in human.stdout
    # no claim of what Prefect shows: a served run's runner may have marked it Crashed (audit E, E4)
    assert "Prefect shows them Running" not in human.stdout and "may show them Running" in human.stdout
    report = json.loads(js.stdout)
    assert [r["flow_run_id"] for r in report["stopped_flow_runs"]] == [dead_id]
    assert report["stopped_flow_runs"][0]["api_url"] == "http://127.0.0.1:9/api"
    assert before == after == sorted([dead_id, live_id])  # status only looks
    # the live one killed too: both listed now
    both = subprocess.run([*cli, "status", "-w", str(ws), "--json"], env=env, capture_output=True, text=True,
                          timeout=60)
    assert {r["flow_run_id"] for r in json.loads(both.stdout)["stopped_flow_runs"]} == {dead_id, live_id}
    # with no dead run, status says nothing of flow runs
    for f in owners.owners_dir(index).iterdir():
        f.unlink()
    quiet = subprocess.run([*cli, "status", "-w", str(ws), "--json"], env=env, capture_output=True, text=True,
                           timeout=60)
    assert "stopped_flow_runs" not in json.loads(quiet.stdout)
