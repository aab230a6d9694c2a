"""Batch runs that pay once (the fourteenth session's audit): a job the provider was paid for is
never given up, closed or created again because one of its steps failed for a while. The real
SDKs against the fake servers, as tests/test_batch.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from memory_core.index import batch_ledger as lg
from memory_core.index.pipeline import run_index
from tests import test_batch
from tests.fakes.common import JobFault
from tests.test_batch import (
    assert_paid_once,
    batch_settings,
    chunk_texts,
    killed_after_create,
    ledger_states,
)

fake = test_batch.fake  # the fixture: a fake server per provider, as test_batch.py's


# -- B1: a failed job listing is "could not tell", never "not found" ---------------------------------

@pytest.mark.parametrize("fake", ["openai", "gemini", "voyage"], indirect=True)
def test_a_transient_list_error_on_resume_still_reattaches_the_paid_job(workspace: Path, fake: Any) -> None:
    fake.batch_delay = None
    s = batch_settings(workspace, fake.name, fake, max_requests_per_job=1000)
    killed_after_create(s)
    fake.complete_job()
    fake.fail_next(1, 500, on="batch_list")  # one transient error: retried like any other call
    summary = run_index(s)
    assert summary.swapped and summary.batch.jobs_reattached == 1 and summary.batch.jobs_submitted == 0
    assert fake.batch_creates == 1  # before: the job was abandoned, submitted and paid again
    assert ledger_states(s) == {lg.COLLECTED: 1}
    assert_paid_once(fake, s)


def test_an_unreadable_job_list_leaves_the_job_open_and_the_index_complete(workspace: Path, fake: Any) -> None:
    fake.batch_delay = None
    s = batch_settings(workspace, fake.name, fake, max_requests_per_job=1000)
    killed_after_create(s)
    fake.fail_next(None, 500, on="batch_list")  # the listing fails for the whole run
    summary = run_index(s)
    assert fake.batch_creates == 1  # not created a second time
    assert ledger_states(s) == {lg.SUBMITTING: 1}  # not abandoned: a later run looks it up again
    assert summary.swapped and len(chunk_texts(s)) == summary.chunks_total
    assert summary.batch.chunks_left_to_sync == summary.chunks_total
    assert any("cannot tell whether job" in e for e in summary.batch.errors)
    assert fake.paid_twice() == {}


def test_a_create_whose_outcome_cannot_be_looked_up_is_not_created_again(workspace: Path, fake: Any) -> None:
    """The provider creates the job but answers after the client's timeout, and its job list
    fails: the submit counts as failed for this run, its chunks go through sync calls and its
    row stays open; no second job is created."""
    s = batch_settings(workspace, "openai", fake, concurrency=1, max_requests_per_job=1000,
                       remote={"timeout_s": 1})
    fake.slow_next(1, seconds=1.5, on="batch_create")
    fake.fail_next(None, 500, on="batch_list")
    summary = run_index(s)
    assert fake.batch_creates == 1  # before: a second job, every chunk paid twice
    assert ledger_states(s) == {lg.SUBMITTING: 1}
    assert summary.swapped and len(chunk_texts(s)) == summary.chunks_total
    assert summary.batch.jobs_failed == 1 and summary.batch.requeued_chunks == 0


# -- B2: an output that cannot be downloaded is kept, not closed and deleted ----------------------

def test_an_output_that_cannot_be_downloaded_stays_open_and_at_the_provider(workspace: Path, fake: Any) -> None:
    s = batch_settings(workspace, "openai", fake, concurrency=1)  # 66 chunks: jobs of 25, 25, 16
    fake.fail_next(6, 500, on="file_content")  # the first job's output: 4 attempts, all fail
    summary = run_index(s)
    b = summary.batch
    assert summary.swapped and len(chunk_texts(s)) == summary.chunks_total
    # the job stays open (the next run re-attaches and reads it); its output is not deleted
    assert ledger_states(s) == {lg.COLLECTED: 2, lg.SUBMITTED: 1}
    assert sum(1 for f in fake.files.values() if f.purpose == "batch_output") == 1
    assert b.jobs_failed == 1 and b.jobs_collected == 2
    # its lines are not "missing" output nor failed lines, and no batch saving is claimed for them
    assert b.lines_failed == 0 and not any("missing" in e for e in b.errors)
    assert b.chunks_via_batch + b.chunks_left_to_sync == summary.chunks_total
    assert summary.cost.tokens_batch + summary.cost.tokens_sync == b.tokens_submitted


# -- B3: a job that "completes" with unusable vectors is a failure ------------------------------------

def test_jobs_completing_with_every_vector_unusable_reach_the_failure_limit(workspace: Path, fake: Any) -> None:
    fake.default_job_fault = JobFault(bad_vector_lines=10_000, bad_vector="wrong_dims")
    s = batch_settings(workspace, "openai", fake, concurrency=1, max_requests_per_job=10)  # 7 jobs
    summary = run_index(s)
    b = summary.batch
    assert summary.swapped and len(chunk_texts(s)) == summary.chunks_total
    # two such jobs reach the limit (2): the other five are never submitted (before: all 7 were paid)
    assert fake.batch_creates == 2 and b.disabled and b.failure_points == 2 and b.jobs_failed == 2
    assert b.chunks_left_to_sync == summary.chunks_total
    # their 20 billed lines are batch tokens spent, and no saving is claimed for them
    assert b.tokens_unusable > 0 and summary.cost.tokens_batch == b.tokens_unusable
    assert summary.cost.estimated_usd > summary.cost.sync_only_usd


def test_a_job_with_most_lines_unusable_does_not_reset_the_failure_count(workspace: Path, fake: Any) -> None:
    fake.fail_next_job()  # one failed job: 1 point
    fake.default_job_fault = JobFault(bad_vector_lines=6, bad_vector="wrong_dims")  # 6 of 10 lines
    s = batch_settings(workspace, "openai", fake, concurrency=1, max_requests_per_job=10)
    summary = run_index(s)
    assert summary.swapped and len(chunk_texts(s)) == summary.chunks_total
    assert summary.batch.disabled and summary.batch.failure_points == 2


# -- B4: a re-attached job's surplus is not counted as embedded -------------------------------------

def test_a_reattached_job_counts_only_the_chunks_the_run_still_needs(workspace: Path, fake: Any) -> None:
    fake.batch_delay = None
    s = batch_settings(workspace, "openai", fake, wait=False, max_requests_per_job=100)
    first = run_index(s)
    assert first.batch.jobs_pending == 1
    notes = sorted(p for p in workspace.rglob("*.md") if ".memory-core" not in str(p))
    max(notes, key=lambda p: p.stat().st_size).unlink()  # its chunks are in the pending job
    fake.complete_job()
    r = run_index(batch_settings(workspace, "openai", fake, wait=True, max_requests_per_job=100))
    b = r.batch
    assert r.swapped and b.jobs_reattached == 1 and fake.batch_creates == 1
    assert r.chunks_total < first.batch.requests_submitted  # the job covers more than is needed now
    # before: 66 embedded of 60 chunks
    assert r.chunks_embedded == b.chunks_via_batch == r.chunks_total == len(chunk_texts(s))
    assert b.surplus_via_batch == first.batch.requests_submitted - r.chunks_total
    assert "no longer needs" in "\n".join(r.lines())


# -- BP5: Voyage's batch downloads are capped as OpenAI's ---------------------------------------------

@pytest.mark.timeout(180)
@pytest.mark.parametrize("fake", ["voyage", "openai"], indirect=True)
def test_an_endless_batch_output_is_refused_at_the_cap_for_every_openai_style_provider(
        workspace: Path, fake: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The Voyage batch client (the openai SDK pointed at Voyage) was built without the capped
    transport OpenAI's has, so an endless output file was read for ever into memory. Both now stop
    at ``http.MAX_DOWNLOAD_BYTES`` (8 GiB; 2 MiB here), the job stays open for a later run (BP2)
    and its chunks are embedded by sync calls. Before: this test ran into its timeout on voyage."""
    from memory_core.embeddings import http
    from tests.fakes.common import Fault

    monkeypatch.setattr(http, "MAX_DOWNLOAD_BYTES", 2 * 1024 * 1024)
    s = batch_settings(workspace, fake.name, fake, concurrency=1, max_requests_per_job=1000)
    fake.inject(Fault("endless", body=b'{"custom_id": "x"}\n' * 4096), None, on="file_content")
    summary = run_index(s)
    b = summary.batch
    assert summary.swapped and len(chunk_texts(s)) == summary.chunks_total
    assert b.jobs_failed == 1 and b.chunks_left_to_sync == summary.chunks_total
    assert any("larger than" in e for e in b.errors), b.errors
    assert ledger_states(s) == {lg.SUBMITTED: 1}  # open: a later run reads it
