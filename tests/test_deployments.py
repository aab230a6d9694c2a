"""deployments/prefect.yaml and deployments/serve.py on a real Prefect server, with a real
process worker: the commands of docs/deployments.md, runs triggered through the API and the
CLI with parameters, what the UI gets (names, artifacts, events), and the collision strategy
(two runs never write one index at once).

Provider: the real openai SDK against tests/fakes/openai_fake.py (64-d vectors); the worker
gets the config file and the API key through its environment, as the docs say.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest

from flows import report
from memory_core.config import load_settings
from memory_core.sources.discovery import discover_files
from memory_core.storage.store import connect, probe_index
from tests.conftest import EXAMPLES, vector_count
from tests.prefect_server import (
    ROOT,
    PrefectServer,
    artifact_of,
    events_for,
    read_flow_run,
    shared_server,
    start_process,
    stop_process,
    table_figures,
)

pytestmark = pytest.mark.prefect_server

API_KEY = "sk-test-key-0123456789"
RUN_TIMEOUT = 120.0


@dataclass
class Stack:
    srv: PrefectServer
    ws: Path
    cfg: Path
    env: dict[str, str]
    fake: Any
    tmp: Path
    worker: Any

    @property
    def index(self) -> Path:
        return self.ws / ".memory-core" / "index.sqlite"


def gated_fake(**kw: Any) -> Any:
    """The OpenAI fake with a gate: while ``gate`` is clear, embedding requests wait (up to
    ``gate_timeout``), so a test decides how long a run holds the index, however slow the box."""
    import threading

    from tests.fakes.openai_fake import OpenAIFake

    class GatedOpenAIFake(OpenAIFake):
        def __init__(self, **kw: Any) -> None:
            super().__init__(**kw)
            self.gate = threading.Event()
            self.gate.set()
            self.gate_timeout = 120.0
            self.held = 0

        def _answer(self, rec: Any, route: Any, match: Any) -> Any:
            if rec.kind == "embed" and not self.gate.is_set():
                with self.lock:
                    self.held += 1
                self.gate.wait(self.gate_timeout)
            return super()._answer(rec, route, match)

    return GatedOpenAIFake(**kw)


@pytest.fixture(scope="module")
def fake() -> Any:
    with gated_fake(dims=64, api_key=API_KEY) as srv:
        yield srv


@pytest.fixture(scope="module")
def stack(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, fake: Any) -> Any:
    srv = shared_server(request.config)
    tmp = tmp_path_factory.mktemp("deploy")
    ws = tmp / "agent"
    shutil.copytree(EXAMPLES / "workspace", ws, ignore=shutil.ignore_patterns(".memory-core"))
    shutil.copytree(EXAMPLES / "sessions", ws / "sessions")
    cfg = tmp / "memory-core.toml"
    cfg.write_text(
        'provider = "openai"\nmodel = "text-embedding-3-small"\nsources = ["memory", "sessions"]\n[remote]\n'
        f'base_url = "{fake.base_url}"\ndimensions = 64\nmax_inputs_per_request = 8\n'
        "backoff_initial_s = 0.01\nbackoff_max_s = 0.05\nmax_attempts = 2\ntimeout_s = 150\n"
    )
    env = srv.env(MEMORY_CORE_WORKSPACE=str(ws), MEMORY_CORE_CONFIG=str(cfg), OPENAI_API_KEY=API_KEY,
                  PREFECT_WORKER_QUERY_SECONDS="1")
    # the commands of docs/deployments.md, as written
    res = srv.cli("work-pool", "create", "memory-core", "--type", "process", env=env, check=False)
    assert res.returncode == 0 or "already exists" in res.stdout + res.stderr, res.stdout + res.stderr
    srv.cli("--no-prompt", "deploy", "--all", "--prefect-file", "deployments/prefect.yaml", env=env)
    worker = start_process([str(Path(sys.executable).parent / "prefect"), "worker", "start", "--pool", "memory-core"],
                           env=env, log=tmp / "worker.log")
    try:
        with srv.settings():
            yield Stack(srv, ws, cfg, env, fake, tmp, worker)
    finally:
        stop_process(worker)


def wait_final(flow_run_id: Any, timeout: float = RUN_TIMEOUT) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        fr = read_flow_run(flow_run_id)
        if fr.state is not None and fr.state.is_final():
            return fr
        if time.monotonic() > deadline:
            raise AssertionError(f"flow run {fr.name} still {fr.state and fr.state.name} after {timeout:.0f}s")
        time.sleep(0.3)


def wait_until(cond: Any, what: str, *, timeout: float = RUN_TIMEOUT, unless: Any = None) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if cond():
                return
        except OSError:
            pass
        assert unless is None or not unless(), f"gave up waiting: {what}"
        assert time.monotonic() < deadline, f"timed out waiting: {what}"
        time.sleep(0.3)


def trigger(name: str, **parameters: Any) -> Any:
    from prefect.deployments import run_deployment

    return run_deployment(name, parameters=parameters, timeout=0)


def run_and_wait(name: str, **parameters: Any) -> Any:
    return wait_final(trigger(name, **parameters).id)


def cli_run(stack: Stack, *args: str) -> UUID:
    """``prefect deployment run ...`` as the docs show it; returns the new flow run's id."""
    res = stack.srv.cli("deployment", "run", *args, env=stack.env)
    m = re.search(r"UUID: ([0-9a-f-]{36})", res.stdout)
    assert m, res.stdout
    return UUID(m.group(1))


def state_names(flow_run_id: Any) -> list[str]:
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        return [s.name for s in client.read_flow_run_states(flow_run_id)]


def index_counts(index: Path) -> dict[str, int]:
    conn = connect(index, readonly=True)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        out = {t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in ("chunks", "chunks_fts", "files")}
        out["vectors"] = vector_count(conn)
        out["sessions"] = conn.execute("SELECT count(*) FROM files WHERE source = 'sessions'").fetchone()[0]
        return out
    finally:
        conn.close()


# -- tests (in file order: the serve test re-registers a deployment, so it comes last) ----------

def test_prefect_yaml_deploys_schedules_limits_and_parameters(stack: Stack) -> None:
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        deps = {f"{client.read_flow(d.flow_id).name}/{d.name}": d for d in client.read_deployments()}
    assert {"reindex/incremental", "reindex/sessions", "backfill/backfill", "alert/alerts"} <= set(deps)
    inc, ses, bf = deps["reindex/incremental"], deps["reindex/sessions"], deps["backfill/backfill"]
    for d in (inc, ses, bf):
        assert d.work_pool_name == "memory-core" and d.global_concurrency_limit.limit == 1
        assert d.parameters["workspace"] == str(stack.ws)  # {{ $MEMORY_CORE_WORKSPACE }} filled at deploy time
        assert "sources" not in d.parameters  # no setting hard-coded: the config file's sources apply
        assert "api_key" not in str(d.parameters) and API_KEY not in str(d.parameters)
        assert d.pull_steps[0]["prefect.deployments.steps.set_working_directory"]["directory"] == str(ROOT)
    assert [s.schedule.interval.total_seconds() for s in inc.schedules] == [900]
    assert [s.schedule.interval.total_seconds() for s in ses.schedules] == [3600]
    assert bf.schedules == []
    assert inc.concurrency_options.collision_strategy.value == "CANCEL_NEW"
    assert ses.concurrency_options.collision_strategy.value == "CANCEL_NEW"
    assert bf.concurrency_options.collision_strategy.value == "ENQUEUE"
    assert inc.parameters["if_busy"] == "skip" and ses.parameters["force_sessions"] is True
    assert bf.parameters["batch"] is True and bf.parameters["if_busy"] == "wait"
    # the UI renders the parameters as a form with descriptions and choices
    props = bf.parameter_openapi_schema["properties"]
    assert "Batch API" in props["batch"]["description"]
    assert "'threads'" in str(props["task_runner"]) and "'dask'" in str(props["task_runner"])
    # numeric bounds in the schema: the server refuses a bad value when the run is created (it was
    # accepted, then the run failed with pydantic's dump and a traceback: the thirty-ninth session's audit E)
    for d in (inc, bf):
        p = d.parameter_openapi_schema["properties"]
        assert (p["embed_concurrency"]["minimum"], p["embed_concurrency"]["maximum"]) == (1, 64)
        assert p["dask_workers"]["minimum"] == 1
    with get_client(sync_client=True) as client:
        for bad in ({"embed_concurrency": 0}, {"embed_concurrency": 100000}, {"dask_workers": 0}):
            with pytest.raises(Exception, match="Validation failed|validation"):
                client.create_flow_run_from_deployment(bf.id, parameters=bad)
    # the fleet of agents: the config file from the environment, its schedule off until turned on
    fleet = deps["fleet-reindex/fleet"]
    assert fleet.parameters["config_file"] == str(stack.cfg)
    assert fleet.work_pool_name == "memory-core" and [s.active for s in fleet.schedules] == [False]
    assert {"agents", "deployment", "task_runner"} <= set(fleet.parameter_openapi_schema["properties"])
    assert fleet.parameters["deployment"] == "reindex/agent"
    agent = deps["reindex/agent"]
    assert agent.global_concurrency_limit is None and agent.schedules == [] and "workspace" not in agent.parameters


def test_the_fleet_deployment_spreads_agents_over_the_work_pool(stack: Stack, tmp_path: Path) -> None:
    """`fleet-reindex/fleet` on the work pool: each agent is a run of `reindex/agent` that the
    pool's worker picks up, a child of the fleet run; each agent's index holds its own notes."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterParentFlowRunId

    from memory_core.runtime.resolve import resolve_agents
    from tests.test_agents import make_fleet
    from tests.test_fleet import _texts

    cfg, _ = make_fleet(tmp_path)
    run = run_and_wait("fleet-reindex/fleet", config_file=str(cfg))
    assert run.state.is_completed(), run.state.message
    with get_client(sync_client=True) as client:
        agent_dep = client.read_deployment_by_name("reindex/agent")
        children = client.read_flow_runs(flow_run_filter=FlowRunFilter(
            parent_flow_run_id=FlowRunFilterParentFlowRunId(any_=[run.id])))
    assert sorted(c.name for c in children) == ["reindex-alpha-full", "reindex-beta-full"]
    assert all(c.deployment_id == agent_dep.id and c.state_type.value == "COMPLETED" for c in children)
    assert {c.parameters["agent"] for c in children} == {"alpha", "beta"}
    fleet = resolve_agents(cfg)
    assert "walrus" in _texts(fleet["alpha"]) and "walrus" not in _texts(fleet["beta"])
    assert "narwhal" in _texts(fleet["beta"]) and "narwhal" not in _texts(fleet["alpha"])


def test_shipped_automations_alert_on_fallbacks_and_stale_indexes(stack: Stack) -> None:
    """prefect.yaml's alerts deployment brings two automations: a proactive one (no swapped
    event for an index in 6 hours) and one on fallback events, which runs the alert flow."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowFilter, FlowFilterName

    with get_client(sync_client=True) as client:
        autos = {a.name: a for a in client.read_automations()}
    stale, fb = autos["memory-core stale index"], autos["memory-core fallback"]
    assert stale.trigger.posture.value == "Proactive" and stale.trigger.within.total_seconds() == 21600
    assert stale.trigger.expect == {"memory-core.index.swapped"}
    assert fb.trigger.posture.value == "Reactive" and fb.trigger.expect == {"memory-core.fallback.*"}

    settings = load_settings(stack.cfg, {"workspace": str(stack.ws)})
    report.emit_fallback(settings, "batch-to-sync", "2 batch failure points reached the limit of 2")

    def alert_runs() -> list[Any]:
        with get_client(sync_client=True) as client:
            return client.read_flow_runs(flow_filter=FlowFilter(name=FlowFilterName(any_=["alert"])))

    wait_until(lambda: alert_runs(), "the fallback event starts an alert run", timeout=90)
    run = alert_runs()[0]
    assert run.parameters["kind"] == "fallback" and run.parameters["index"] == f"memory-core.index.{settings.index_file}"
    assert "batch failure points" in run.parameters["detail"]
    done = wait_final(run.id)
    assert done.state.is_completed(), done.state
    assert "fell back" in artifact_of(run.id, "markdown").data


def test_worker_runs_and_two_runs_never_write_one_index_at_once(stack: Stack) -> None:
    """Runs through the worker, triggered from the CLI and the API with parameters, and the
    collision strategy. A backfill A (from the CLI, as the docs show) builds a new index and is
    held mid-embedding by the fake. Meanwhile: B, the same backfill, waits for the deployment's
    slot (ENQUEUE); two incremental runs of the same index arrive: one finds A holding the writer
    lock and skips, the other is refused by the deployment's limit while the first holds its slot
    (CANCEL_NEW). Then A finishes, B runs after it, and the index is consistent. A's artifacts and
    events carry the right figures."""
    big = stack.tmp / "big.sqlite"  # a new index with its own cache: every chunk is embedded by A
    lock = Path(str(big) + ".lock")
    fake = stack.fake
    fake.gate.clear()
    try:
        a = cli_run(stack, "backfill/backfill", "--param", "batch=false", "--param", f"index_path={big}",
                    "--param", "embed_concurrency=1")
        wait_until(lambda: fake.held > 0 and lock.read_text().startswith("pid "), "A holds the lock, embedding",
                   unless=lambda: read_flow_run(a).state.is_final())
        b = trigger("backfill/backfill", batch=False, index_path=str(big), full=True).id
        c = trigger("reindex/incremental", index_path=str(big)).id
        d = trigger("reindex/incremental", index_path=str(big)).id
        rc, rd = wait_final(c), wait_final(d)
        wait_until(lambda: "AwaitingConcurrencySlot" in state_names(b), "B waits for A's deployment slot")
        assert not read_flow_run(a).state.is_final() and not read_flow_run(b).state.is_final()
    finally:
        fake.gate.set()
    ra, rb = wait_final(a), wait_final(b)
    assert ra.state.is_completed(), ra.state.message
    assert ra.name == "backfill-big-full" and ra.parameters["embed_concurrency"] == 1
    assert ra.parameters["workspace"] == str(stack.ws) and ra.parameters["batch"] is False
    # what the UI shows for A: figures, progress, the swap event
    settings = load_settings(stack.cfg, {"workspace": str(stack.ws)})
    n_files = len(discover_files(settings).files)
    fig = table_figures(artifact_of(ra.id, "table"))
    assert fig["files scanned"] == fig["files new"] == n_files and fig["files removed"] == 0
    # transcripts' exchange vectors are counted apart from the chunks (issue 39)
    exchanges = int(str(fig["part vectors (transcript exchanges, note windows) embedded / from cache"]).split(" / ")[0])
    assert fig["chunks embedded"] + exchanges == stack.fake.embedded_inputs and fig["chunks embedded"] > 20
    assert fig["chunks from cache"] == 0
    assert fig["embedding requests (sync)"] == stack.fake.embed_requests and fig["embedding ran on"] == "Prefect tasks on threads (1 worker)"
    assert fig["tokens sent (sync)"] > 0 and fig["estimated cost (USD)"] > 0
    assert float(artifact_of(ra.id, "progress").data) == 100.0
    ev = events_for(report.EVENT_SWAPPED, flow_run_id=ra.id)
    assert len(ev) == 1 and ev[0].resource.id == f"memory-core.index.{big}" and ev[0].payload["files_new"] == n_files
    # ENQUEUE: B ran after A ended and rebuilt the index from the cache
    assert rb.state.is_completed(), rb.state.message
    assert rb.start_time >= ra.end_time
    fig_b = table_figures(artifact_of(rb.id, "table"))
    assert fig_b["mode"].startswith("full rebuild") and fig_b["chunks embedded"] == 0 and fig_b["chunks from cache"] > 20
    # the writer lock skipped one incremental run; CANCEL_NEW refused the other
    skipped = [r for r in (rc, rd) if r.state.name == "Skipped"]
    cancelled = [r for r in (rc, rd) if r.state.is_cancelled()]
    assert len(skipped) == 1 and len(cancelled) == 1, [(r.state.name, r.state.message) for r in (rc, rd)]
    assert skipped[0].state.is_completed() and "another run is writing" in skipped[0].state.message
    assert skipped[0].end_time < ra.end_time
    assert "concurrency limit" in (cancelled[0].state.message or "")
    meta, problem = probe_index(big)
    counts = index_counts(big)
    assert problem is None and counts["chunks"] == counts["chunks_fts"] == counts["vectors"] == fig["chunks in index"]
    assert counts["files"] == n_files and counts["sessions"] == 3 and meta["counts"]["chunks"] == counts["chunks"]
    assert ev[0].payload["chunks"] == counts["chunks"]
    assert not list(big.parent.glob(".big.sqlite.tmp-*"))


def test_a_run_cancelled_through_the_api_keeps_what_it_received_and_says_so(stack: Stack) -> None:
    """A backfill cancelled from the UI (a Cancelling state set through the API; the worker
    stops the run's process) after some request groups came back: the live index is as it was,
    the notes say what was cached, and the rerun embeds nothing whose vector had arrived."""
    from prefect.client.orchestration import get_client
    from prefect.states import Cancelling

    from memory_core.index.chunking import sha256_hex
    from memory_core.index.pipeline import run_index
    from memory_core.runtime.resolve import resolve_settings
    from memory_core.storage.cache import EmbeddingCache

    index = stack.tmp / "cancel" / "index.sqlite"
    index.parent.mkdir()  # a typed index_path's folder must exist (issue 39)
    fake = stack.fake
    billed_before = len(fake.sync_billed_texts)
    fake.delay = 0.5
    try:
        fr_id = trigger("backfill/backfill", batch=False, index_path=str(index), embed_concurrency=2).id
        wait_until(lambda: len(fake.sync_billed_texts) - billed_before >= 8 * 4, "some groups answered",
                   unless=lambda: read_flow_run(fr_id).state.is_final())
        with get_client(sync_client=True) as client:
            client.set_flow_run_state(fr_id, Cancelling(), force=True)
        fr = wait_final(fr_id)
    finally:
        fake.delay = 0.0
    assert fr.state.is_cancelled(), fr.state
    assert not index.exists()  # nothing was published
    notes = artifact_of(fr_id, "markdown")
    assert "was cancelled" in notes.data and "embedded and cached" in notes.data
    received = {sha256_hex(t) for t in fake.sync_billed_texts[billed_before:]}

    settings = resolve_settings({"workspace": str(stack.ws), "index_path": str(index), "remote": {"api_key": API_KEY}},
                                config_file=str(stack.cfg), env={}).settings
    from memory_core.embeddings.registry import create_provider

    provider, _ = create_provider(settings)
    with EmbeddingCache(settings.cache_file, provider.name, provider.model, provider.provider_key) as cache:
        cached = cache.hashes()
    in_flight = 2 * 2 * 8  # requests the provider answered that the stopped process did not read
    assert len(received - cached) <= in_flight and len(cached) >= 8 * 2
    n = len(fake.input_texts)
    rerun = run_index(settings)
    sent = {sha256_hex(t) for t in fake.input_texts[n:]}
    assert rerun.swapped and not sent & cached and len(sent & received) <= in_flight


@pytest.mark.slow  # ~30 s: a second process serving the deployments, one more flow run
def test_serve_script_serves_the_same_deployments(stack: Stack) -> None:
    from prefect.client.orchestration import get_client

    stop_process(stack.worker)  # one executor per deployment: serve replaces the worker here
    log = stack.tmp / "serve.log"
    with get_client(sync_client=True) as client:
        deployed_alerts = client.read_deployment_by_name("alert/alerts").id
    cmd = [sys.executable, "deployments/serve.py", "--only", "incremental", "--only", "alerts"]
    refused = subprocess.run(cmd, env=stack.env, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2 and "already deployed to a work pool: reindex/incremental" in refused.stderr
    proc = start_process([*cmd, "--replace"], env=stack.env, log=log)
    try:
        wait_until(lambda: "Your deployments are being served" in log.read_text(), "serve.py is serving",
                   unless=lambda: proc.poll() is not None)
        with get_client(sync_client=True) as client:
            dep = client.read_deployment_by_name("reindex/incremental")
        assert dep.work_pool_name is None and not dep.pull_steps
        assert dep.concurrency_options.collision_strategy.value == "CANCEL_NEW"
        assert dep.global_concurrency_limit.limit == 1
        assert [s.schedule.interval.total_seconds() for s in dep.schedules] == [900]
        assert dep.parameters["workspace"] == str(stack.ws) and dep.parameters["if_busy"] == "skip"
        # issue 39: the replaced deployment's automations pointed at it once deleted, and serve made
        # them again: each once now, running the served alerts deployment
        with get_client(sync_client=True) as client:
            alerts = client.read_deployment_by_name("alert/alerts").id
            autos = [a for a in client.read_automations() if a.name.startswith("memory-core ")]
        assert alerts != deployed_alerts
        assert sorted(a.name for a in autos) == ["memory-core fallback", "memory-core stale index"], autos
        assert all(getattr(act, "deployment_id", None) == alerts for a in autos for act in a.actions), autos
        fr = run_and_wait("reindex/incremental")
        assert fr.state.is_completed(), fr.state.message
        # (alone, this test makes the index's first build: a full one, named so from its start)
        assert fr.name in ("reindex-agent-incremental", "reindex-agent-full")
        assert table_figures(artifact_of(fr.id, "table"))["swapped"] == "True"
        assert events_for(report.EVENT_SWAPPED, flow_run_id=fr.id)
    finally:
        stop_process(proc)
