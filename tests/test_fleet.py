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


def test_the_fleet_summary_table_says_each_agents_files_chunks_and_outcome(prefect_api: Any, tmp_path: Path) -> None:
    """P6 (thirteenth session): the `fleet-reindex-summary` table read `files_total` (no summary has
    it) and an `outcome` key `to_dict()` lacks: its files column was always empty and a run with
    batch jobs still running said "nothing to do". Each row is now the agent's own summary headline."""
    import json

    from flows.fleet import _row
    from memory_core.embeddings.batch_types import BatchFigures
    from memory_core.index.runtypes import RunSummary

    cfg, _ = make_fleet(tmp_path)
    state = fleet_reindex(config_file=str(cfg), return_state=True)
    drain_workers()
    assert state.is_completed(), state.message
    art = artifact_of(state.state_details.flow_run_id, "table")
    rows = {r["agent"]: r for r in (json.loads(art.data) if isinstance(art.data, str) else art.data)}
    for agent, summary in state.result()["agents"].items():
        head = RunSummary.from_dict(summary).headline()
        assert rows[agent]["files"] == head["files"] == "1 scanned, 1 new, 0 changed, 0 removed", rows[agent]
        assert rows[agent]["chunks"] == summary["chunks_total"] > 0
        assert rows[agent]["outcome"] == "swapped in"
    # a run that published nothing because its batch jobs are still running says so
    pending = RunSummary(index_path="x", provider="openai", model="m", provider_reason="", full=False,
                         full_reason="", swapped=False, files_scanned=3, files_changed=1,
                         batch=BatchFigures(jobs_submitted=1, jobs_pending=1))
    row = _row("gamma", {"agent": "gamma", **pending.to_dict()}, None, 1.0)
    assert row["outcome"] == "not updated: 1 batch job(s) still running"
    assert row["files"] == "3 scanned, 0 new, 1 changed, 0 removed"
    # a failure, and a deployment run (its state's message, no figures), as they were
    assert _row("beta", None, "failed: boom", 2.0)["outcome"] == "failed: boom"
    assert _row("delta", {"agent": "delta", "flow_run": "r", "outcome": "Completed"}, None, 0.5)["outcome"] == "Completed"


def test_the_fleet_re_embeds_every_agent_when_told(prefect_api: Any, tmp_path: Path) -> None:
    """``re_embed`` reaches each agent's run (a provider that once answered bad vectors is fixed:
    every index embeds its chunks again, reading no cached vector)."""
    from tests.fakes.openai_fake import OpenAIFake

    cfg, _ = make_fleet(tmp_path)
    with OpenAIFake(dims=64) as srv:
        cfg.write_text(cfg.read_text().replace(
            'provider = "none"\n', 'provider = "openai"\nmodel = "text-embedding-3-small"\n[remote]\n'
            f'api_key = "sk-test-key-0123456789"\nbase_url = "{srv.base_url}"\ndimensions = 64\n', 1))
        assert fleet_reindex(config_file=str(cfg), return_state=True).is_completed()
        before = srv.embed_requests
        state = fleet_reindex(config_file=str(cfg), re_embed=True, return_state=True)
        assert srv.embed_requests > before  # every agent's chunks asked for again, none from the cache
    drain_workers()
    assert state.is_completed(), state.message
    assert read_flow_run(state.state_details.flow_run_id).name == "fleet-reindex-re-embed"
    agents = state.result()["agents"]
    for name in ("alpha", "beta"):
        assert agents[name]["re_embedded"] is True and agents[name]["full"] is True
