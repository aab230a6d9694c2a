"""A deployment run cancelled while it runs (`prefect flow-run cancel ID`, the UI's Cancel) under a
runner (`deployments/serve.py`, `serve()`) or a worker: the runner kills the run's process, then
sets it Cancelled. The run's owner file (``<index>.flow-runs/<id>``, flows/owners.py) was left
behind: `memory-core status` listed the run as one whose process "stopped without reporting
(killed, or the machine went down)", though Prefect said Cancelled. The flows' ``on_cancellation``
hook, which Prefect runs in the runner's (or worker's) process once the run's process is gone, now
removes it; a run's own process marks its file as cancelled when it handles the cancel, so status
never calls it killed even where no hook ran. The same for a ``fleet-reindex`` run, whose file is
in each agent's folder. Against a real Prefect server, a real `serve` process."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from flows import owners
from tests.conftest import EXAMPLES, ROOT
from tests.fakes.openai_fake import OpenAIFake
from tests.prefect_server import artifact_of, read_flow_run, shared_server, start_process, stop_process
from tests.test_flow_cancel import _cancel, _config

pytestmark = pytest.mark.prefect_server

SERVE = """
import json, sys
from prefect import serve
from prefect.flows import load_flow_from_entrypoint

flow = load_flow_from_entrypoint(sys.argv[1])  # as deployments/serve.py loads it
serve(flow.to_deployment(name=sys.argv[2], parameters=json.loads(sys.argv[3])))
"""


def _serve(tmp_path: Path, env: dict[str, str], entrypoint: str, name: str, params: dict[str, Any],
           cwd: Path = ROOT) -> Any:
    """`serve` of one deployment in its own process (in ``cwd``, its runs' working directory),
    once the server has the deployment."""
    from prefect.client.orchestration import get_client

    log = tmp_path / f"serve-{name}.log"
    proc = start_process([sys.executable, "-c", SERVE, entrypoint, name, json.dumps(params)], env=env, log=log,
                         cwd=cwd)
    flow_name = entrypoint.rsplit(":", 1)[1].replace("_", "-")
    deadline = time.monotonic() + 120
    while True:
        with get_client(sync_client=True) as client:
            try:
                client.read_deployment_by_name(f"{flow_name}/{name}")
                return proc
            except Exception:
                if proc.poll() is not None or time.monotonic() > deadline:
                    stop_process(proc)
                    raise AssertionError(log.read_text()) from None
        time.sleep(0.3)


def _wait(what: str, until: Any, proc: Any, log: Path, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not until():
        assert proc.poll() is None and time.monotonic() < deadline, f"{what}:\n{log.read_text()}"
        time.sleep(0.2)


def _cancelled(run_id: str, timeout: float = 90) -> Any:
    """The run's state once it is Cancelled and the runner is done with it (its own Cancelled,
    set after its on_cancellation hooks)."""
    from prefect.client.orchestration import get_client

    deadline = time.monotonic() + timeout
    while True:
        with get_client(sync_client=True) as client:
            states = client.read_flow_run_states(uuid.UUID(run_id))
        state = read_flow_run(run_id).state
        if state.is_final() and (not state.is_cancelled() or "cancelled successfully" in (state.message or "")
                                 or sum(s.is_cancelled() for s in states) >= 2):
            return state
        assert time.monotonic() < deadline, [(s.name, s.message) for s in states]
        time.sleep(0.3)


def _delete(name: str) -> None:
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        client.delete_deployment(client.read_deployment_by_name(name).id)


def _by_a_worker(tmp_path: Path, env: dict[str, str], entrypoint: str, name: str, params: dict[str, Any]) -> Any:
    """A deployment of a process work pool of its own, and `prefect worker start --pool` for it."""
    from prefect.flows import Flow

    pool = f"pool-{name}"
    _prefect_cli(env, "work-pool", "create", pool, "--type", "process")
    Flow.from_source(str(ROOT), entrypoint).deploy(name, work_pool_name=pool, parameters=params, build=False,
                                                   push=False, print_next_steps=False)
    return start_process([str(Path(sys.executable).parent / "prefect"), "worker", "start", "--pool", pool],
                         env=env, log=tmp_path / f"serve-{name}.log")


def _prefect_cli(env: dict[str, str], *args: str) -> None:
    res = subprocess.run([str(Path(sys.executable).parent / "prefect"), *args], env=env, cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr


# the default run keeps the served reindex; a worker's run and a backfill cost 55 s more (`-m slow`)
@pytest.mark.parametrize(("by", "flow"), [("serve", "reindex"), pytest.param("worker", "reindex", marks=pytest.mark.slow),
                                          pytest.param("serve", "backfill", marks=pytest.mark.slow)])
def test_a_deployment_run_cancelled_mid_run_leaves_no_owner_file_and_status_never_calls_it_killed(
        prefect_api: Any, tmp_path: Path, request: pytest.FixtureRequest, by: str, flow: str) -> None:
    """`prefect flow-run cancel` of a reindex deployment's run while it embeds, served (`serve`, as
    deployments/serve.py) or run by a process worker: Prefect shows it Cancelled, nothing was
    published, and no owner file is left (status listed it as killed); a ``backfill`` run alike.
    (A file the hook could not remove stays marked cancelled by the run's own process: status does
    not list it, and the next run's sweep removes it: the last test below.)"""
    from prefect.deployments import run_deployment

    ws = tmp_path / "ws"
    shutil.copytree(EXAMPLES / "workspace", ws, ignore=shutil.ignore_patterns(".memory-core"))
    for i in range(200):  # a run that takes a while (the audit's repro)
        (ws / "memory" / f"gen{i:03d}.md").write_text(f"# generated note {i}\n\nThe walrus count on day {i} was {i * 7}.\n")
    index = ws / ".memory-core" / "index.sqlite"
    cfg = tmp_path / "memory-core.toml"
    name = f"cancel-{uuid.uuid4().hex[:8]}"
    env = shared_server(request.config).env(OPENAI_API_KEY="sk-test-key-0123456789", PYTHONPATH=str(ROOT),
                                            PREFECT_RUNNER_POLL_FREQUENCY="1", PREFECT_WORKER_QUERY_SECONDS="1")
    params: dict[str, Any] = {"workspace": str(ws), "config_file": str(cfg)}
    if flow == "backfill":
        params["batch"] = False
    with OpenAIFake(dims=64) as srv:
        _config(cfg, ws, srv.base_url)
        srv.delay = 1.0  # each request: the run embeds for a while, and stops at once when cancelled
        runner = (_serve if by == "serve" else _by_a_worker)(tmp_path, env, f"flows/{flow}.py:{flow}", name, params)
        log = tmp_path / f"serve-{name}.log"
        try:
            run_id = str(run_deployment(f"{flow}/{name}", timeout=0).id)
            _wait("the run embeds", lambda: bool(srv.requests) and (owners.owners_dir(index) / run_id).exists(),
                  runner, log)
            _cancel(run_id)
            state = _cancelled(run_id)
        finally:
            stop_process(runner)
    assert state.is_cancelled(), (state.type, state.message)
    assert not index.exists()  # nothing was published
    left = sorted(p.name for p in owners.owners_dir(index).iterdir())
    assert left == [], (left, log.read_text()[-3000:])
    status = subprocess.run([sys.executable, "-m", "memory_core.apps.cli", "status", "-w", str(ws), "--json"],
                            env=dict(os.environ, PYTHONPATH=str(ROOT)), capture_output=True, text=True, timeout=60)
    assert "stopped_flow_runs" not in json.loads(status.stdout), status.stdout
    # memory-core's word on the cancel, which the runner's own Cancelled state (its message "Flow run was
    # cancelled successfully.") replaces, is in the notes: and there was no index to leave as it was
    notes = artifact_of(run_id, "markdown").data
    assert "The run was cancelled in Prefect" in notes and "No index was written" in notes, notes
    assert "left as it was" not in notes, notes
    _delete(f"{flow}/{name}")
    if by == "worker":
        _prefect_cli(env, "work-pool", "delete", f"pool-{name}")


def test_a_served_fleet_run_cancelled_mid_run_leaves_no_owner_file_in_any_agents_folder(
        prefect_api: Any, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """The same for a served `fleet-reindex` run (its agents as subflows in its process): its
    owner file in each agent's folder goes, and so do its agents' runs' files (the server marks
    those runs Cancelled with their parent); status lists no run of either agent."""
    from prefect.deployments import run_deployment

    from memory_core.runtime.resolve import resolve_agents
    from tests.test_agents import make_fleet

    cfg, _ws = make_fleet(tmp_path)
    name = f"cancel-{uuid.uuid4().hex[:8]}"
    env = shared_server(request.config).env(OPENAI_API_KEY="sk-test-key-0123456789", PYTHONPATH=str(ROOT),
                                            PREFECT_RUNNER_POLL_FREQUENCY="1")
    with OpenAIFake(dims=64) as srv:
        cfg.write_text(cfg.read_text().replace('provider = "none"\n', (
            f'provider = "openai"\nmodel = "text-embedding-3-small"\n[remote]\nbase_url = "{srv.base_url}"\n'
            'dimensions = 64\nmax_inputs_per_request = 8\nbackoff_initial_s = 0.01\n')))
        indexes = {a: s.index_file for a, s in resolve_agents(cfg).items()}
        srv.delay = 5.0  # each agent's one request: both still embed when the run is cancelled
        serve = _serve(tmp_path, env, "flows/fleet.py:fleet_reindex", name, {"config_file": str(cfg)})
        log = tmp_path / f"serve-{name}.log"
        try:
            run_id = str(run_deployment(f"fleet-reindex/{name}", timeout=0).id)
            _wait("both agents embed", lambda: len(srv.requests) >= 2 and all(
                len(list(owners.owners_dir(i).glob("*-*-*-*-*"))) >= 2 for i in indexes.values()), serve, log)
            _cancel(run_id)
            state = _cancelled(run_id)
        finally:
            stop_process(serve)
    assert state.is_cancelled(), (state.type, state.message)
    for agent, index in indexes.items():
        left = sorted(p.name for p in owners.owners_dir(index).iterdir())
        assert left == [], (agent, left, log.read_text()[-3000:])
        assert owners.stopped_runs(index) == []
    _delete(f"fleet-reindex/{name}")


HOLD = """
import json, os, signal, sys
from flows import owners
for index, run_id, flow in json.loads(sys.argv[1]):
    owners.hold(index, run_id, api_url=sys.argv[2], flow_name=flow, run_name="held by the test")
if sys.argv[3:]:  # it handled its runner's cancel before it was killed
    owners.mark_cancelled(None, sys.argv[3])
os.kill(os.getpid(), signal.SIGKILL)  # its runner killed it (SIGKILL, after the grace period): no cleanup
"""


def _held_then_killed(files: list[tuple[Path, str, str]], api_url: str, *marked: str) -> int:
    """A process that holds these owner files (index, flow run id, flow name), marks them cancelled
    (``marked``: why), and is SIGKILLed; its pid."""
    proc = subprocess.Popen([sys.executable, "-c", HOLD, json.dumps([[str(i), r, f] for i, r, f in files]), api_url,
                             *marked], env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert proc.wait(30) == -9
    return proc.pid


def test_the_cancellation_hook_removes_what_a_process_killed_by_its_runner_left(
        prefect_api: Any, tmp_path: Path) -> None:
    """The hook as the runner runs it once it has SIGKILLed a run's process that did not stop within
    its grace period (no chance to mark its files): a reindex run's file goes; a fleet run's files go
    from every agent's folder, and its agents' runs that the same process ran (still Running) are set
    Cancelled, their files removed. A dead run of another process, and a live one, are left as they are."""
    from prefect.client.orchestration import get_client
    from prefect.states import Cancelling, Running

    from flows.fleet import fleet_reindex
    from flows.reindex import reindex
    from memory_core.runtime.resolve import resolve_agents
    from tests.test_agents import make_fleet
    from tests.test_flow_crashed import _flow_run_in, _owner_process

    api = prefect_api.api_url
    cfg, ws = make_fleet(tmp_path)
    indexes = [s.index_file for s in resolve_agents(cfg).values()]
    with get_client(sync_client=True) as client:
        fleet_run = client.create_flow_run(fleet_reindex, parameters={"config_file": str(cfg)}, state=Running())
        one_run = client.create_flow_run(reindex, parameters={"workspace": str(ws["beta"])}, state=Running())
    agents = [_flow_run_in(Running()) for _ in indexes]
    other = _flow_run_in(Running())  # killed in another process: the next run of its index marks it Crashed
    fid = str(fleet_run.id)
    _held_then_killed([(i, fid, "fleet-reindex") for i in indexes]
                      + [(i, a, "reindex") for i, a in zip(indexes, agents, strict=True)], api)
    _owner_process(indexes[0], other, api, live=False)
    live_id = str(uuid.uuid4())
    live = _owner_process(indexes[1], live_id, api, live=True)
    try:
        with get_client(sync_client=True) as client:
            client.set_flow_run_state(fleet_run.id, Cancelling(message="by the test"))
            fleet_run = client.read_flow_run(fleet_run.id)
        for hook in fleet_reindex.on_cancellation_hooks:  # as the runner runs them
            hook(fleet_reindex, fleet_run, fleet_run.state)
        left = {i.parent.name: sorted(p.name for p in owners.owners_dir(i).iterdir()) for i in indexes}
    finally:
        live.kill()
        live.wait(10)
    assert left == {indexes[0].parent.name: [other], indexes[1].parent.name: [live_id]}, left
    for a in agents:
        state = read_flow_run(a).state
        assert state.is_cancelled() and "cancelled with its fleet run" in (state.message or ""), (state.type, state.message)
    assert read_flow_run(other).state.is_running()  # not the fleet's process: a sweep's to mark Crashed

    # a reindex run's process killed the same way: its one file, found from the run's parameters
    beta_index = ws["beta"] / ".memory-core" / "index.sqlite"
    _held_then_killed([(beta_index, str(one_run.id), "reindex")], api)
    assert (owners.owners_dir(beta_index) / str(one_run.id)).exists()
    for hook in reindex.on_cancellation_hooks:
        hook(reindex, one_run, Cancelling())
    assert list(owners.owners_dir(beta_index).iterdir()) == []

    # marked cancelled by its process, and no hook ran (its runner went down too): status leaves it
    # out; a sweep finds it still Running and sets it Cancelled, not Crashed
    marked = _flow_run_in(Running())
    _held_then_killed([(beta_index, marked, "reindex")], api, "cancelled in Prefect")
    assert owners.stopped_runs(beta_index) == []
    swept = owners.sweep(beta_index, current_api=api, found_by="the test")
    assert swept.crashed == [marked], swept
    state = read_flow_run(marked).state
    assert state.is_cancelled() and "stopped as it was cancelled" in (state.message or ""), state.message
    assert list(owners.owners_dir(beta_index).iterdir()) == []
