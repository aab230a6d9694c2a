"""The ``fleet-reindex`` flow on a real Prefect server (tests/prefect_server.py) with two agents:
one task and one reindex subflow per agent, each agent's index holding its own notes only; an
agent that fails does not stop the others; an unknown agent fails the run before anything runs."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from flows.fleet import fleet_reindex
from memory_core.query.search import Searcher
from memory_core.runtime.resolve import resolve_agents
from tests.prefect_server import artifact_of, drain_workers, read_flow_run, task_run_names
from tests.test_agents import make_fleet

pytestmark = pytest.mark.prefect_server


def _subflow_runs(parent_id: Any) -> dict[str, Any]:
    """The reindex subflow runs started under the fleet run's task runs, by name."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterParentFlowRunId

    with get_client(sync_client=True) as client:
        runs = client.read_flow_runs(flow_run_filter=FlowRunFilter(
            parent_flow_run_id=FlowRunFilterParentFlowRunId(any_=[parent_id])))
    return {r.name: r for r in runs}


def _texts(settings: Any) -> str:
    with Searcher(settings) as s:
        conn = s._current().conn
        return "\n".join(r[0] for r in conn.execute("SELECT text FROM chunks"))


def test_fleet_reindex_two_agents_on_a_real_server(prefect_api: Any, tmp_path: Path) -> None:
    cfg, ws = make_fleet(tmp_path)
    state = fleet_reindex(config_file=str(cfg), return_state=True)
    drain_workers()
    assert state.is_completed(), state.message
    run = read_flow_run(state.state_details.flow_run_id)
    # named after what it does (it was "fleet-reindex-False")
    assert run.name == "fleet-reindex-incremental" and state.message == "2 agents reindexed"
    fleet = resolve_agents(cfg)
    alpha, beta = _texts(fleet["alpha"]), _texts(fleet["beta"])
    assert "walrus project budget" in alpha and "narwhal" not in alpha
    assert "narwhal migration" in beta and "walrus" not in beta
    names = task_run_names(run.id, until=lambda n: {"reindex-alpha", "reindex-beta"} <= set(n))
    assert {"reindex-alpha", "reindex-beta"} <= set(names)
    subflows = _subflow_runs(run.id)
    # named by agent; the first build of an index is a full one
    assert sorted(subflows) == ["reindex-alpha-full", "reindex-beta-full"], sorted(subflows)
    assert all(r.state_type.value == "COMPLETED" for r in subflows.values())
    rows = artifact_of(run.id, "table").data
    assert "alpha" in str(rows) and "beta" in str(rows) and "swapped" in str(rows)
    result = state.result()
    assert result["failed"] == [] and result["agents"]["alpha"]["swapped"] is True

    # one agent breaks (its workspace is gone): the other is still reindexed, the run says who failed
    (ws["alpha"] / "memory" / "2026-11-20.md").write_text("# 2026-11-20\n\nThe ibis contract was signed.\n")
    shutil.rmtree(ws["beta"])
    state = fleet_reindex(config_file=str(cfg), return_state=True)
    drain_workers()
    assert state.is_failed() and "1 of 2 agents failed: beta" in state.message
    assert "ibis contract" in _texts(fleet["alpha"])
    assert "narwhal migration" in _texts(fleet["beta"])  # beta's live index was left as it was


def test_an_unknown_agent_fails_the_fleet_run_before_any_reindex(prefect_api: Any, tmp_path: Path) -> None:
    cfg, _ = make_fleet(tmp_path)
    state = fleet_reindex(config_file=str(cfg), agents=["alpha", "gamma"], return_state=True)
    drain_workers()
    assert state.is_failed() and "unknown agent 'gamma'" in state.message
    assert not resolve_agents(cfg)["alpha"].index_file.exists()


def test_an_empty_config_file_parameter_is_said(prefect_api: Any, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """issue 39: `prefect deploy --all` without MEMORY_CORE_CONFIG gave the fleet deployment an
    empty config_file without a word: its runs say so, and which file they use instead."""
    import time

    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId

    cfg, _ = make_fleet(tmp_path)
    monkeypatch.setenv("MEMORY_CORE_CONFIG", str(cfg))
    state = fleet_reindex(config_file="", agents=["alpha"], return_state=True)
    drain_workers()
    assert state.is_completed(), state.message
    run_id = state.state_details.flow_run_id
    deadline = time.monotonic() + 30
    while True:
        with get_client(sync_client=True) as client:
            logs = [log.message for log in client.read_logs(
                log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[run_id])))]
        said = [m for m in logs if "config_file parameter is empty" in m]
        if said or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert said and f"using $MEMORY_CORE_CONFIG here: {cfg}" in said[0], logs
