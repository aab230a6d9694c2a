"""Audit I, M1: a run that does not use the Batch API (batch mode off, ``index --re-embed``) and
the jobs an earlier run left open in the ledger. The real openai / google-genai SDKs against the
fake servers on 127.0.0.1, real SQLite (cache, ledger, index); nothing of memory-core is mocked.

Before, such a run embedded every chunk through sync calls and only said which jobs it left
open: the provider billed those jobs too, and they stayed open for ever. Now batch mode off polls
each once (a completed job is collected, a failed one closed, one still running left open), and
``--re-embed`` cancels them at the provider and closes them without reading their output.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from memory_core.config import Settings
from memory_core.index import batch_ledger as lg
from memory_core.index.chunking import sha256_hex
from memory_core.index.pipeline import run_index
from memory_core.storage.store import connect
from tests.fakes.common import fake_vector
from tests.test_batch import DIMS, FAKES, batch_settings, chunk_texts, ledger_states

PROVIDERS = ["openai", "gemini", "voyage"]
ONE_JOB = 1000  # requests a job may hold: every chunk of the example workspace in one job


@pytest.fixture
def fake(request: pytest.FixtureRequest) -> Iterator[Any]:
    with FAKES[request.param](dims=DIMS, batch_delay=None) as srv:  # jobs run until told to finish
        srv.name = request.param
        yield srv


def left_open(ws: Path, srv: Any) -> Settings:
    """An earlier run in Batch API mode with ``wait = false``: one job submitted, left open in the
    ledger (and running at the provider); the index not built."""
    s = batch_settings(ws, srv.name, srv, wait=False, max_requests_per_job=ONE_JOB)
    first = run_index(s)
    assert not first.swapped and first.batch.jobs_pending == 1 == srv.batch_creates
    assert ledger_states(s) == {lg.SUBMITTED: 1}
    return s


def sync_settings(ws: Path, srv: Any, **batch: Any) -> Settings:
    return batch_settings(ws, srv.name, srv, enabled=False, max_requests_per_job=ONE_JOB, **batch)


def batch_calls(srv: Any) -> list[str]:
    """Every request of the fake's log that is no sync embedding request."""
    return [r.kind for r in srv.requests if r.kind != "embed"]


def index_vectors(settings: Settings) -> dict[str, np.ndarray]:
    conn = connect(settings.index_file, readonly=True)
    try:
        return {t: np.frombuffer(v, dtype="<f4") for t, v in
                conn.execute("SELECT text, embedding FROM chunks WHERE embedding IS NOT NULL")}
    finally:
        conn.close()


def said(summary: Any) -> str:
    return "\n".join(summary.warnings)


# -- (a) batch off: a completed job is collected, not paid again by sync calls --------------------

@pytest.mark.parametrize("fake", PROVIDERS, indirect=True)
def test_batch_off_collects_an_open_job_that_completed(workspace: Path, fake: Any) -> None:
    s = left_open(workspace, fake)
    (job,) = fake.batch_jobs
    fake.complete_job()
    fake.reset_log()
    summary = run_index(sync_settings(workspace, fake))
    assert summary.swapped and summary.batch is None  # batch mode off: the build went as ever
    # the job's output was read: no chunk of it went through a sync call, none was paid twice
    assert fake.embed_requests == 0 and fake.paid_twice() == {}
    assert summary.chunks_embedded == 0 and summary.chunks_from_cache == summary.chunks_total > 50
    assert len(fake.requests_of("batch_get")) == 1  # looked at once
    assert fake.requests_of("file_content") and not fake.requests_of("batch_cancel")
    assert not fake.requests_of("batch_create") and not fake.requests_of("file_upload")
    assert ledger_states(s) == {lg.COLLECTED: 1}
    # the index holds the job's vectors (the provider's: unit length, one per chunk text)
    vecs = index_vectors(s)
    assert set(vecs) == chunk_texts(s) and set(job.custom_ids) >= {sha256_hex(t) for t in vecs}
    for text, v in list(vecs.items())[:20]:
        assert np.allclose(v, fake_vector(text, DIMS), atol=1e-5)
    # billed to the job, at the batch price: the run's cost counts it, as a batch run's does
    assert summary.tokens_batch > 0 and summary.tokens_sync == 0
    job_id = str(job.id)
    assert any("1 batch job(s) of earlier runs had completed" in w and job_id.split("/")[-1] in w
               for w in summary.warnings)
    assert "still open at the provider" not in said(summary)


# -- (b) batch off: a job still running is left open, its chunks go by sync ----------------------

@pytest.mark.parametrize("fake", PROVIDERS, indirect=True)
def test_batch_off_leaves_a_running_job_open_and_embeds_by_sync(workspace: Path, fake: Any) -> None:
    s = left_open(workspace, fake)
    (job,) = fake.batch_jobs
    fake.reset_log()
    summary = run_index(sync_settings(workspace, fake))
    assert summary.swapped and summary.chunks_embedded == summary.chunks_total
    assert fake.embed_requests > 0
    # looked at once, not waited on, not cancelled, nothing downloaded
    assert len(fake.requests_of("batch_get")) == 1
    assert not fake.requests_of("batch_cancel") and not fake.requests_of("file_content")
    assert not job.done and not job.cancel_requested
    assert ledger_states(s) == {lg.SUBMITTED: 1}
    w = said(summary)
    assert "1 batch job(s) of earlier runs are still open at the provider" in w
    assert "1 still running when this run looked" in w and str(job.id).split("/")[-1] in w
    assert summary.tokens_batch == 0


def test_batch_off_closes_an_open_job_that_failed(workspace: Path) -> None:
    with FAKES["openai"](dims=DIMS, batch_delay=None) as fake:
        fake.name = "openai"
        s = left_open(workspace, fake)
        fake.fail_job(None, message="Enqueued token limit reached", code="token_limit_exceeded")
        fake.reset_log()
        summary = run_index(sync_settings(workspace, fake))
    assert summary.swapped and summary.chunks_embedded == summary.chunks_total
    assert ledger_states(s) == {lg.FAILED: 1}  # closed as a batch run closes it
    assert "1 batch job(s) of earlier runs had failed, expired or were cancelled" in said(summary)
    assert "still open" not in said(summary)


# -- (c) --re-embed: open jobs are cancelled, closed, their output never read ----------------------

@pytest.mark.parametrize("state", ["running", "completed"])
@pytest.mark.parametrize("fake", PROVIDERS, indirect=True)
def test_re_embed_cancels_open_jobs_and_never_reads_them(workspace: Path, fake: Any, state: str) -> None:
    s = left_open(workspace, fake)
    (job,) = fake.batch_jobs
    if state == "completed":
        fake.complete_job()
    fake.reset_log()
    summary = run_index(s, re_embed=True)
    assert summary.swapped and summary.re_embedded and summary.chunks_embedded == summary.chunks_total
    assert len(fake.requests_of("batch_cancel")) == 1  # the SDK's cancel call reached the provider
    assert not fake.requests_of("file_content")  # its output (the old vectors) never downloaded
    assert ledger_states(s) == {lg.CANCELLED: 1}
    w = said(summary)
    assert "still open at the provider" not in w
    if state == "running":
        assert job.cancel_requested
        assert "index --re-embed cancelled 1 batch job(s) of earlier runs" in w and str(job.id).split("/")[-1] in w
    else:  # over already: the cancel is refused, one poll says so, closed all the same
        assert "1 more were over already" in w
    assert summary.tokens_batch == 0


def test_re_embed_keeps_a_job_whose_cancel_fails_open_and_says_so(workspace: Path) -> None:
    with FAKES["openai"](dims=DIMS, batch_delay=None) as fake:
        fake.name = "openai"
        s = left_open(workspace, fake)
        fake.fail_next(None, status=500, on="batch_cancel")
        fake.reset_log()
        summary = run_index(s, re_embed=True)
        (job,) = fake.batch_jobs
    assert summary.swapped and summary.chunks_embedded == summary.chunks_total
    assert ledger_states(s) == {lg.SUBMITTED: 1}  # the row stays open
    w = said(summary)
    assert "1 batch job(s) of earlier runs are still open at the provider" in w
    assert "1 could not be cancelled" in w and job.id in w
    assert w.count("could not be cancelled") == 1


def test_batch_off_a_failing_batch_api_never_fails_the_run_and_is_said_once(workspace: Path) -> None:
    with FAKES["openai"](dims=DIMS, batch_delay=None) as fake:
        fake.name = "openai"
        s = batch_settings(workspace, "openai", fake, wait=False, max_requests_per_job=25)
        assert run_index(s).batch.jobs_pending == 3
        fake.fail_next(None, status=403, message="batches are not enabled for this key", on="batch_get")
        fake.reset_log()
        summary = run_index(sync_settings(workspace, fake, concurrency=1))
    assert summary.swapped and summary.chunks_embedded == summary.chunks_total
    assert len(fake.requests_of("batch_get")) == 1  # the first failure ends the looking
    assert ledger_states(s) == {lg.SUBMITTED: 3}
    w = said(summary)
    assert "3 batch job(s) of earlier runs are still open at the provider" in w
    assert w.count("could not be looked at") == 1 and "not enabled" in w


# -- (d) no open job: no Batch API call at all -----------------------------------------------------

@pytest.mark.parametrize("rerun", ["batch off", "re-embed"])
@pytest.mark.parametrize("fake", ["openai", "gemini"], indirect=True)
def test_no_open_job_no_batch_call(workspace: Path, fake: Any, rerun: str) -> None:
    fake.batch_delay = 0.05
    s = batch_settings(workspace, fake.name, fake, max_requests_per_job=ONE_JOB)
    assert run_index(s).batch.jobs_collected == 1  # a ledger, with its jobs all closed
    assert ledger_states(s) == {lg.COLLECTED: 1}
    (workspace / "memory" / "extra.md").write_text("one more note about otters\n")
    fake.reset_log()
    if rerun == "batch off":
        summary = run_index(sync_settings(workspace, fake))
    else:
        summary = run_index(s, re_embed=True)
    assert summary.swapped and fake.embed_requests > 0
    assert batch_calls(fake) == []
    assert "batch" not in summary.stage_seconds
    assert "earlier runs" not in said(summary)
