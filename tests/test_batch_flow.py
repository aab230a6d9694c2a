"""Batch embedding as Prefect tasks (one task per step of each job) inside a flow run, against a
real (temporary) Prefect server and the fake OpenAI Batch API."""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.openai_fake import OpenAIFake
from tests.test_batch import assert_paid_once, batch_settings, ledger_states

pytestmark = pytest.mark.prefect_server


@pytest.fixture(scope="module")
def harness() -> Iterator[None]:
    old = os.environ.get("PREFECT_HOME")
    with tempfile.TemporaryDirectory() as home:
        os.environ["PREFECT_HOME"] = home
        os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
        os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")  # no telemetry calls from tests
        from prefect.testing.utilities import prefect_test_harness

        try:
            with prefect_test_harness(server_startup_timeout=60):
                yield
        finally:
            if old is None:
                os.environ.pop("PREFECT_HOME", None)
            else:
                os.environ["PREFECT_HOME"] = old


def _flow() -> Any:
    from prefect import flow
    from prefect.task_runners import ThreadPoolTaskRunner

    from flows.executor import PrefectExecutor
    from memory_core.index.pipeline import run_index
    from tasks.stages import provider_for

    @flow(name="batch-embed-test", task_runner=ThreadPoolTaskRunner(max_workers=4))
    def batch_embed_test(settings_json: str, re_embed: bool = False) -> dict[str, Any]:
        from memory_core.config import Settings

        settings = Settings.model_validate_json(settings_json)
        provider, reason = provider_for(settings)
        executor = PrefectExecutor(label="test")
        try:
            return run_index(settings, full=True, provider=provider, reason=reason, executor=executor,
                             re_embed=re_embed).to_dict()
        finally:
            executor.close()

    return batch_embed_test


def _blob(s: Any) -> str:
    from tasks.stages import settings_json

    return settings_json(s)


def test_batch_jobs_run_as_prefect_tasks(harness: None, workspace: Path) -> None:
    from prefect.client.orchestration import get_client

    flow = _flow()
    with OpenAIFake(dims=16, batch_delay=0.15) as srv:
        srv.fail_next_job(message="Enqueued token limit reached", code="token_limit_exceeded")
        s = batch_settings(workspace, "openai", srv, poll_interval_s=0.03)
        out = flow(_blob(s))
        b = out["batch"]
        assert out["swapped"] and out["chunks_embedded"] == out["chunks_total"]
        assert b["jobs_submitted"] == 4 and b["jobs_failed"] == 1 and b["chunks_via_batch"] == out["chunks_total"]
        assert out["cost"]["tokens_batch"] == out["tokens_sent"] > 0
        assert_paid_once(srv, s)
        job_ids = [j.metadata["memory_core_job"] for j in srv.batch_jobs]

    # Task runs reach the API through Prefect's background writer: under load some are still on
    # their way when the flow returns (issue 22: "3 == 4"). Wait for them, then check.
    deadline = time.monotonic() + 60
    while True:
        with get_client(sync_client=True) as client:
            names = [t.name for t in client.read_task_runs()]
            artifacts = client.read_artifacts()
        counts = [sum(n.startswith(f"batch-{step}-openai-mc-") for n in names) for step in ("submit", "poll", "collect")]
        if min(counts) >= 4 or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    for step in ("submit", "poll", "collect"):
        # one task run per step per job, named after the job
        assert sum(n.startswith(f"batch-{step}-openai-mc-") for n in names) == 4, (step, names)
    for lid in job_ids:
        assert f"batch-submit-openai-{lid}" in names
    progress = [a for a in artifacts if a.type == "progress" and (a.key or "").startswith("batch-mc-")]
    assert {a.key for a in progress} >= {f"batch-{lid}" for lid in job_ids[1:]}
    assert all(float(a.data) == 100.0 for a in progress)


def test_wait_false_in_a_flow_then_a_later_flow_collects(harness: None, workspace: Path) -> None:
    flow = _flow()
    with OpenAIFake(dims=16, batch_delay=None) as srv:
        s = batch_settings(workspace, "openai", srv, wait=False, max_requests_per_job=40)
        first = flow(_blob(s))
        assert not first["swapped"] and first["batch"]["jobs_pending"] == 2 == srv.batch_creates
        srv.complete_job()
        s2 = s.model_copy(update={"batch": s.batch.model_copy(update={"wait": True})})
        second = flow(_blob(s2))
        assert second["swapped"] and second["batch"]["jobs_reattached"] == 2
        assert second["batch"]["jobs_submitted"] == 0 and srv.batch_creates == 2
        assert ledger_states(s) == {"collected": 2}
        assert_paid_once(srv, s)


def test_runs_not_in_batch_mode_see_to_open_jobs_through_prefect_tasks(harness: None, workspace: Path) -> None:
    """Audit I, M1 in a flow: batch mode off collects an earlier run's completed job and leaves the
    running one open (one ``batch-poll`` task each); ``--re-embed`` cancels the one left, its
    output unread (``batch-cancel`` with ``discard``)."""
    flow = _flow()
    with OpenAIFake(dims=16, batch_delay=None) as srv:
        s = batch_settings(workspace, "openai", srv, wait=False, max_requests_per_job=40)
        assert flow(_blob(s))["batch"]["jobs_pending"] == 2 == srv.batch_creates
        done, running = srv.batch_jobs
        srv.complete_job(done.id)
        srv.reset_log()
        off = s.model_copy(update={"batch": s.batch.model_copy(update={"enabled": False})})
        second = flow(_blob(off))
        assert second["swapped"] and second["chunks_embedded"] + second["chunks_from_cache"] == second["chunks_total"]
        assert ledger_states(s) == {"collected": 1, "submitted": 1}
        assert not set(done.texts) & set(srv.input_texts)  # not embedded again by sync calls
        assert set(running.texts) <= set(srv.input_texts)
        assert len(srv.requests_of("batch_get")) == 2 and not srv.requests_of("batch_cancel")
        srv.reset_log()
        third = flow(_blob(s), re_embed=True)
        assert third["swapped"] and third["re_embedded"]
        assert running.cancel_requested and len(srv.requests_of("batch_cancel")) == 1
        assert not srv.requests_of("file_content")
        assert ledger_states(s) == {"collected": 1, "cancelled": 1}
        assert any("index --re-embed cancelled 1 batch job(s)" in w for w in third["warnings"])
