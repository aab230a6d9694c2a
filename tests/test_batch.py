"""Provider Batch APIs end to end: the real openai / google-genai SDKs against the fake servers on
127.0.0.1, real SQLite (cache + ledger + index). Every scenario checks what the provider billed:
nothing may be paid twice unless the provider's own output was unusable."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from memory_core.config import Settings, load_settings
from memory_core.embeddings.cost import estimate_cost
from memory_core.embeddings.registry import create_provider
from memory_core.index import batch_ledger as lg
from memory_core.index.batch_jobs import open_context, plan_jobs
from memory_core.index.batch_ledger import BatchLedger
from memory_core.index.chunking import sha256_hex
from memory_core.index.pipeline import run_index
from memory_core.query.search import Searcher
from memory_core.storage.cache import EmbeddingCache
from memory_core.storage.store import connect, probe_index
from tests.conftest import ROOT, index_content
from tests.fakes.common import JobFault
from tests.fakes.gemini_fake import GeminiFake
from tests.fakes.openai_fake import OpenAIFake
from tests.fakes.voyage_fake import VoyageFake

DIMS = 16
KEY = "test-key-0123456789abcdef"
MODELS = {"openai": "text-embedding-3-small", "gemini": "gemini-embedding-001", "voyage": "voyage-4-large"}
FAKES = {"openai": OpenAIFake, "gemini": GeminiFake, "voyage": VoyageFake}


def batch_settings(ws: Path, provider: str, srv: Any, *, remote: dict[str, Any] | None = None,
                   **batch: Any) -> Settings:
    r = {"api_key": KEY, "base_url": srv.base_url, "dimensions": DIMS, "backoff_initial_s": 0.01,
         "backoff_max_s": 0.05, "timeout_s": 10, "max_attempts": 4}
    r.update(remote or {})
    b: dict[str, Any] = {"enabled": True, "poll_interval_s": 0.02, "max_requests_per_job": 25, "timeout_minutes": 1}
    b.update(batch)
    return load_settings(None, {"workspace": str(ws), "provider": provider, "model": MODELS[provider],
                                "remote": r, "batch": b})


@pytest.fixture
def fake(request: pytest.FixtureRequest) -> Iterator[Any]:
    name = getattr(request, "param", "openai")
    with FAKES[name](dims=DIMS, batch_delay=0.05) as srv:
        srv.name = name
        yield srv


def chunk_texts(settings: Settings) -> set[str]:
    conn = connect(settings.index_file, readonly=True)
    try:
        return {r[0] for r in conn.execute("SELECT text FROM chunks")}
    finally:
        conn.close()


def ledger_states(settings: Settings) -> dict[str, int]:
    conn = connect(settings.cache_file, readonly=True)
    try:
        return dict(conn.execute("SELECT state, count(*) FROM batch_jobs GROUP BY state").fetchall())
    finally:
        conn.close()


def open_ledger_chunks(settings: Settings) -> int:
    conn = connect(settings.cache_file, readonly=True)
    try:
        return conn.execute("SELECT count(*) FROM batch_job_chunks").fetchone()[0]
    finally:
        conn.close()


def assert_paid_once(srv: Any, settings: Settings) -> None:
    texts = chunk_texts(settings)
    assert srv.paid_twice() == {}
    assert srv.unique_billed_texts == texts  # every chunk paid for exactly once


# -- end to end, per provider ------------------------------------------------------------------

@pytest.mark.parametrize("fake", ["openai", "gemini", "voyage"], indirect=True)
def test_batch_run_end_to_end(workspace: Path, fake: Any) -> None:
    s = batch_settings(workspace, fake.name, fake)
    summary = run_index(s)
    b = summary.batch
    assert summary.swapped and summary.chunks_embedded == summary.chunks_total > 50
    # misses across all files go into as few jobs as the (lowered) job limit allows
    assert b.jobs_submitted == fake.batch_creates == -(-summary.chunks_total // 25)
    assert b.jobs_collected == b.jobs_submitted and b.jobs_failed == 0 and not b.disabled
    assert b.chunks_via_batch == summary.chunks_total and b.chunks_via_sync == 0
    assert fake.embed_requests == 0  # no sync call at all
    # and the summary says none: its requests are sync requests, the jobs are in `batch` (it said
    # one request a job: the thirty-ninth session's audit E)
    assert summary.embed_requests == 0 and "requests: 0 sync" in "\n".join(summary.lines())
    assert_paid_once(fake, s)
    # the request lines are what each provider expects
    if fake.name == "gemini":
        items = [i for j in fake.batch_jobs for i in j.items]
        assert {i.extra.get("task_type") for i in items} == {"RETRIEVAL_DOCUMENT"}
        assert {i.dims for i in items} == {DIMS}
    elif fake.name == "voyage":
        rp = fake.batch_jobs[0].request["request_params"]
        assert rp == {"model": "voyage-4-large", "input_type": "document", "output_dimension": DIMS}
        assert fake.batch_jobs[0].completion_window == "12h"
    else:
        assert fake.batch_jobs[0].completion_window == "24h"
    # custom ids are chunk hashes; vectors in the cache are the provider's (unit length)
    ids = set(fake.batch_submitted_ids)
    assert ids == {sha256_hex(t) for t in chunk_texts(s)}
    # ledger: every job collected, no chunk rows left; provider files cleaned up
    assert ledger_states(s) == {lg.COLLECTED: b.jobs_submitted}
    assert open_ledger_chunks(s) == 0
    assert fake.files == {}
    # cost: batch tokens priced at the batch discount
    c = summary.cost
    assert c.tokens_batch == summary.tokens_sent > 0 and c.tokens_sync == 0
    assert c.saving_usd > 0 and c.saving_pct == (33.0 if fake.name == "voyage" else 50.0)
    assert any(line.startswith("cost:") for line in summary.lines())
    with Searcher(s) as searcher:
        assert searcher.search("restore postgres backup", min_score=0)
        assert searcher.provider_note == ""
    # nothing to do next time: no job, no call
    creates = fake.batch_creates
    again = run_index(s)
    assert not again.swapped and fake.batch_creates == creates
    # the index is the one sync calls build: the same chunks, vectors, codes and bm25()
    sync = batch_settings(workspace, fake.name, fake, enabled=False)
    sync = sync.model_copy(update={"index_path": s.index_file.parent / "sync" / "index.sqlite"})
    assert run_index(sync, full=True).chunks_embedded == summary.chunks_total
    probes = ["restore postgres backup", "rate limit", "lisbon"]
    assert index_content(s.index_file, probes) == index_content(sync.index_file, probes)


# -- job-level failures --------------------------------------------------------------------------

def test_failed_job_counts_and_is_submitted_again(workspace: Path, fake: Any) -> None:
    fake.fail_next_job(message="Enqueued token limit reached", code="token_limit_exceeded")
    s = batch_settings(workspace, "openai", fake, concurrency=1)
    summary = run_index(s)
    b = summary.batch
    assert summary.swapped and b.jobs_failed == 1 and not b.disabled
    assert "token_limit_exceeded" in " ".join(b.errors)
    assert b.requeued_chunks == 25 and b.chunks_via_sync == 0
    assert fake.batch_creates == 4 and fake.embed_requests == 0
    assert ledger_states(s) == {lg.FAILED: 1, lg.COLLECTED: 3}
    assert_paid_once(fake, s)


def test_expired_job_keeps_its_partial_output(workspace: Path, fake: Any) -> None:
    fake.expire_next_job(completed=10)
    s = batch_settings(workspace, "openai", fake, concurrency=1)
    summary = run_index(s)
    b = summary.batch
    assert summary.swapped and b.jobs_failed == 1
    assert b.requeued_chunks == 15  # only what the expired job did not finish
    assert fake.batch_jobs[0].status == "expired"
    assert_paid_once(fake, s)


def test_job_that_never_finishes_times_out_twice_then_sync(workspace: Path, fake: Any) -> None:
    fake.hang_next_job()
    s = batch_settings(workspace, "openai", fake, concurrency=1, timeout_minutes=0.004)  # 0.24 s
    t0 = time.monotonic()
    summary = run_index(s)
    b = summary.batch
    assert summary.swapped and b.jobs_timed_out == 1
    # retried once (same job, no resubmission), then counted 2 = the limit: batch mode off
    assert b.failure_points == 2 and b.disabled and "timed out" in b.disabled_reason
    assert fake.batch_jobs[0].cancel_requested and fake.batch_jobs[0].status == "cancelled"
    assert fake.batch_creates == 1 and b.chunks_via_sync == summary.chunks_total
    assert any("batch mode was switched off" in w for w in summary.warnings)
    assert any("batch mode switched off" in line for line in summary.lines())
    assert ledger_states(s) == {lg.CANCELLED: 1}
    assert_paid_once(fake, s)
    assert time.monotonic() - t0 < 10


@pytest.mark.parametrize("fake", ["openai", "gemini"], indirect=True)
def test_output_with_error_missing_and_malformed_lines(workspace: Path, fake: Any) -> None:
    fake.script_next_job(JobFault(error_lines=2, http_error_lines=1, missing_lines=2, malformed_lines=1,
                                  bad_vector_lines=1, bad_vector="nan", duplicate_lines=2, unknown_lines=1))
    s = batch_settings(workspace, fake.name, fake, concurrency=1)
    summary = run_index(s)
    b = summary.batch
    assert summary.swapped and b.jobs_failed == 0 and not b.disabled
    # every line without a usable vector went through a sync call, and only those
    assert b.lines_failed == 7 == b.chunks_via_sync
    assert summary.tokens_sync > 0 and summary.tokens_batch > 0
    assert len(fake.sync_billed_texts) == 7
    # the provider billed the malformed and the NaN lines: those two are (unavoidably) paid twice
    assert len(fake.paid_twice()) == 2
    assert fake.unique_billed_texts == chunk_texts(s)
    meta, _ = probe_index(s.index_file)
    assert meta is not None and meta["counts"]["vectors"] == summary.chunks_total


def test_failure_limit_switches_the_rest_to_sync(workspace: Path, fake: Any) -> None:
    fake.fail_next_job()
    fake.fail_next_job()
    s = batch_settings(workspace, "openai", fake, concurrency=1, max_requests_per_job=10)
    summary = run_index(s)
    b = summary.batch
    assert b.disabled and b.jobs_failed == 2 and b.failure_points == 2
    assert "limit of 2" in b.disabled_reason
    assert fake.batch_creates == 2 and b.jobs_submitted == 2
    assert b.chunks_via_batch == 0 and b.chunks_via_sync == summary.chunks_total
    assert b.mode.startswith("batch, then sync")
    assert summary.swapped
    assert_paid_once(fake, s)
    # status (and MCP memory_status) report the batch state: failures, limit, last error
    with Searcher(s) as searcher:
        st = searcher.status().batch
    assert st is not None and st["switched_to_sync"] and st["failure_points"] == 2 == st["failure_limit"]
    assert st["jobs_failed"] == 2 and "failed" in st["last_error"]


def test_success_resets_the_failure_count(workspace: Path, fake: Any) -> None:
    fake.script_next_job(JobFault(outcome="fail"), JobFault(), JobFault(outcome="fail"))
    s = batch_settings(workspace, "openai", fake, concurrency=1)
    summary = run_index(s)
    assert summary.batch.jobs_failed == 2 and not summary.batch.disabled
    assert summary.batch.chunks_via_sync == 0
    assert_paid_once(fake, s)


def test_transient_errors_on_upload_create_and_poll_are_retried(workspace: Path, fake: Any) -> None:
    fake.fail_next(1, 503, on="file_upload")
    fake.fail_next(1, 429, on="batch_create")
    fake.fail_next(2, 500, on="batch_get")
    s = batch_settings(workspace, "openai", fake)
    summary = run_index(s)
    assert summary.swapped and summary.batch.jobs_failed == 0
    assert len(fake.batch_jobs) == 3  # the failed create was not duplicated
    assert_paid_once(fake, s)


# -- wait = false, re-attach, unneeded jobs ---------------------------------------------------

def test_wait_false_leaves_jobs_and_a_later_run_collects(workspace: Path, fake: Any) -> None:
    fake.batch_delay = None  # jobs run until told to finish
    s = batch_settings(workspace, "openai", fake, wait=False)
    first = run_index(s)
    assert not first.swapped and first.batch.jobs_pending == 3 == fake.batch_creates
    assert any("still running" in line for line in first.lines())
    assert ledger_states(s) == {lg.SUBMITTED: 3}
    # a second wait=false run only looks: nothing new is submitted
    second = run_index(s)
    assert second.batch.jobs_reattached == 3 and second.batch.jobs_submitted == 0
    assert fake.batch_creates == 3 and not second.swapped
    fake.complete_job()
    third = run_index(s.model_copy(update={"batch": s.batch.model_copy(update={"wait": True})}))
    assert third.swapped and third.batch.jobs_reattached == 3 and third.batch.jobs_submitted == 0
    assert third.batch.jobs_collected == 3 and fake.batch_creates == 3
    assert third.chunks_embedded == third.chunks_total
    assert ledger_states(s) == {lg.COLLECTED: 3}
    assert_paid_once(fake, s)


def test_jobs_no_longer_needed_are_cancelled(workspace: Path, fake: Any) -> None:
    fake.batch_delay = None
    s = batch_settings(workspace, "openai", fake, wait=False, max_requests_per_job=10, timeout_minutes=0.05)
    run_index(s)
    jobs = fake.batch_jobs
    assert len(jobs) > 2
    # only MEMORY.md stays: jobs with none of its chunks are no longer needed
    shutil.rmtree(workspace / "memory")
    keep = (workspace / "MEMORY.md").read_text()
    needed = [j for j in jobs if any(t in keep for t in j.texts)]
    unneeded = [j for j in jobs if j not in needed]
    assert needed and unneeded
    for j in needed:
        fake.complete_job(j.id)
    summary = run_index(s.model_copy(update={"batch": s.batch.model_copy(update={"wait": True})}))
    assert summary.swapped and summary.batch.jobs_reattached == len(needed)
    assert summary.batch.jobs_cancelled == len(unneeded) and summary.batch.jobs_submitted == 0
    assert all(j.cancel_requested and j.status == "cancelled" for j in unneeded)
    assert not any(j.cancel_requested for j in needed)
    assert ledger_states(s) == {lg.COLLECTED: len(needed), lg.CANCELLED: len(unneeded)}
    assert fake.paid_twice() == {} and fake.embed_requests == 0


def killed_after_create(s: Settings) -> None:
    """A run killed between the provider's "create" and the ledger's "set_submitted": one
    SUBMITTING row whose job exists at the provider, its id unrecorded."""
    from memory_core.index import stages

    provider, _ = create_provider(s)
    s.index_file.parent.mkdir(parents=True, exist_ok=True)
    plan = stages.discover_stage(s, provider, "test", full=True)
    cache = EmbeddingCache(s.cache_file, provider.name, provider.model, provider.provider_key)
    misses = stages.collect_misses(plan, s, provider, cache)
    ctx = open_context(s, provider, cache, plan.workdir)
    (spec,) = plan_jobs(ctx, misses.path)
    ctx.ledger.record_submission(spec.local_id, spec.hash_tokens(), requests=spec.requests, tokens=spec.tokens)
    fid = ctx.client.upload(spec.path, spec.local_id)
    ctx.ledger.set_input_file(spec.local_id, fid)
    ctx.client.create(fid, spec.local_id)  # ... and the process dies before set_submitted
    cache.close()
    stages.cleanup_workdir(plan)
    assert ledger_states(s) == {lg.SUBMITTING: 1}


@pytest.mark.parametrize("fake", ["openai", "gemini"], indirect=True)
def test_interrupted_submit_is_found_at_the_provider(workspace: Path, fake: Any) -> None:
    """A run killed between "create" and "record the job id": the next run finds the job by
    the local id it gave the provider (metadata / display name) and collects it instead of
    paying again."""
    fake.batch_delay = None
    s = batch_settings(workspace, fake.name, fake, max_requests_per_job=1000)
    killed_after_create(s)
    fake.complete_job()
    summary = run_index(s)
    assert summary.swapped and summary.batch.jobs_reattached == 1 and summary.batch.jobs_submitted == 0
    assert fake.batch_creates == 1
    assert_paid_once(fake, s)


def test_submit_that_never_reached_the_provider_is_resubmitted(workspace: Path, fake: Any) -> None:
    from memory_core.index.chunking import chunk_markdown

    s = batch_settings(workspace, "openai", fake, max_requests_per_job=1000)
    provider, _ = create_provider(s)
    s.cache_file.parent.mkdir(parents=True, exist_ok=True)
    first = chunk_markdown((workspace / "MEMORY.md").read_text(), 400, 80)[0]
    with EmbeddingCache(s.cache_file, provider.name, provider.model, provider.provider_key) as cache:
        # killed after recording, before the upload finished: no file, no job at the provider
        BatchLedger.for_cache(cache).record_submission("mc-lost", [(first.hash, 10)], requests=1, tokens=10)
    summary = run_index(s)
    assert summary.swapped and summary.batch.jobs_reattached == 1
    assert ledger_states(s) == {lg.ABANDONED: 1, lg.COLLECTED: 2}
    assert summary.batch.requeued_chunks == 1 and fake.batch_creates == 2
    assert_paid_once(fake, s)


# -- a run killed while its jobs are in flight ----------------------------------------------------

def _write_config(path: Path, ws: Path, base_url: str) -> None:
    path.write_text(
        f'workspace = "{ws}"\nprovider = "openai"\nmodel = "text-embedding-3-small"\n'
        f'[remote]\nbase_url = "{base_url}"\ndimensions = {DIMS}\nbackoff_initial_s = 0.01\n'
        "[batch]\nenabled = true\nconcurrency = 8\npoll_interval_s = 0.05\nmax_requests_per_job = 25\n"
    )


def test_sigkill_with_jobs_in_flight_then_rerun_reattaches(workspace: Path, tmp_path: Path) -> None:
    cfg = tmp_path / "memory-core.toml"
    with OpenAIFake(dims=DIMS, batch_delay=None) as srv:
        _write_config(cfg, workspace, srv.base_url)
        s = batch_settings(workspace, "openai", srv, concurrency=8)
        env = dict(os.environ, OPENAI_API_KEY=KEY, PYTHONPATH=str(ROOT))
        proc = subprocess.Popen(
            [sys.executable, "-m", "memory_core.apps.cli", "index", "--config", str(cfg), "--engine", "local",
             "--no-progress"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )
        deadline = time.monotonic() + 60
        try:
            while time.monotonic() < deadline and proc.poll() is None:
                if srv.batch_creates >= 3 and srv.batch_polls >= 6:
                    break
                time.sleep(0.05)
            assert proc.poll() is None, proc.communicate()
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
        time.sleep(0.2)
        assert srv.batch_creates == 3
        assert ledger_states(s) == {lg.SUBMITTED: 3}  # recorded durably before the kill
        assert srv.batch_billed_texts == [] and srv.embed_requests == 0
        srv.complete_job()
        creates, uploads = srv.batch_creates, len(srv.requests_of("file_upload"))
        rerun = run_index(s)
        assert rerun.swapped and rerun.batch.jobs_reattached == 3
        assert rerun.batch.jobs_submitted == 0 and srv.batch_creates == creates
        assert len(srv.requests_of("file_upload")) == uploads  # nothing new uploaded either
        assert rerun.chunks_embedded == rerun.chunks_total and srv.embed_requests == 0
        assert_paid_once(srv, s)
        leftovers = [p for p in s.index_file.parent.iterdir() if ".tmp-" in p.name]
        assert leftovers == []


# -- units: planning, ledger, cost ------------------------------------------------------------------

def test_jobs_split_at_request_byte_and_token_limits(workspace: Path, fake: Any) -> None:
    from memory_core.index import stages

    s = batch_settings(workspace, "openai", fake, max_requests_per_job=1000, max_bytes_per_job=20_000,
                       max_tokens_per_job=3000)
    provider, _ = create_provider(s)
    s.cache_file.parent.mkdir(parents=True, exist_ok=True)
    plan = stages.discover_stage(s, provider, "test", full=True)
    try:
        with EmbeddingCache(s.cache_file, provider.name, provider.model, provider.provider_key) as cache:
            misses = stages.collect_misses(plan, s, provider, cache)
            ctx = open_context(s, provider, cache, plan.workdir)
            specs = plan_jobs(ctx, misses.path)
            assert len(specs) > 2
            # work files hold note text: private to their owner
            assert os.stat(plan.workdir).st_mode & 0o777 == 0o700
            for f in [misses.path] + [p for sp in specs for p in (sp.path, sp.hashes_path)]:
                assert os.stat(f).st_mode & 0o777 == 0o600, f
            assert all(sp.bytes <= 20_000 and sp.tokens <= 3000 for sp in specs)
            assert sum(sp.requests for sp in specs) == misses.misses
            hashes = [h for sp in specs for h in sp.hashes()]
            assert len(hashes) == len(set(hashes)) == misses.misses
            one = plan_jobs(ctx, misses.path, include={hashes[0], hashes[-1]})
            assert len(one) == 1 and sorted(one[0].hashes()) == sorted({hashes[0], hashes[-1]})
    finally:
        stages.cleanup_workdir(plan)


def test_ledger_lives_in_the_cache_file(tmp_path: Path) -> None:
    cache = EmbeddingCache(tmp_path / "c.sqlite", "openai", "m", "k")
    ledger = BatchLedger.for_cache(cache, index_path="/x/index.sqlite")
    ledger.record_submission("mc-1", [("h1", 3), ("h2", 4)], requests=2, tokens=7)
    assert [j.state for j in ledger.open_jobs()] == [lg.SUBMITTING]
    ledger.set_input_file("mc-1", "file-1")
    ledger.set_submitted("mc-1", "batch_1", "validating")
    job = ledger.get("mc-1")
    assert job is not None and job.job_id == "batch_1" and job.state == lg.SUBMITTED and job.input_file_id == "file-1"
    assert sorted(ledger.hashes("mc-1")) == ["h1", "h2"]
    other = BatchLedger(cache.conn, "openai", "m", "other-key")
    assert other.open_jobs() == []  # jobs of another configuration are not re-attached
    ledger.close("mc-1", lg.COLLECTED)
    assert ledger.open_jobs() == [] and ledger.hashes("mc-1") == []
    cache.close()
    conn = connect(tmp_path / "c.sqlite", readonly=True)
    assert conn.execute("SELECT state FROM batch_jobs").fetchall() == [(lg.COLLECTED,)]
    conn.close()


def test_cost_table_defaults_and_overrides(tmp_path: Path) -> None:
    s = load_settings(None, {"workspace": str(tmp_path)})
    c = estimate_cost(s, "openai", "text-embedding-3-small", tokens_sync=1_000_000, tokens_batch=2_000_000)
    assert c.estimated_usd == pytest.approx(0.02 + 0.02)  # 1M at 0.02 + 2M at 0.01
    assert c.sync_only_usd == pytest.approx(0.06) and c.saving_usd == pytest.approx(0.02)
    v = estimate_cost(s, "voyage", "voyage-4-large", tokens_sync=0, tokens_batch=1_000_000)
    assert v.estimated_usd == pytest.approx(0.12 * 0.67) and v.saving_pct == 33.0
    unknown = estimate_cost(s, "openai", "my-model", tokens_sync=10, tokens_batch=0)
    assert unknown.priced is False and unknown.estimated_usd is None
    s2 = load_settings(None, {"workspace": str(tmp_path), "batch": {
        "prices": {"openai/my-model": 1.0}, "batch_discount": {"openai": 0.25}}})
    o = estimate_cost(s2, "openai", "my-model", tokens_sync=0, tokens_batch=1_000_000)
    assert o.estimated_usd == pytest.approx(0.75)
    from memory_core.errors import ConfigError

    with pytest.raises(ConfigError, match="batch_discount"):
        load_settings(None, {"batch": {"batch_discount": {"openai": 1.5}}})


def test_batch_mode_with_a_provider_without_batch_api_uses_sync(workspace: Path, tmp_path: Path) -> None:
    shutil.rmtree(workspace / "memory")
    s = load_settings(None, {"workspace": str(workspace), "provider": "none", "batch": {"enabled": True}})
    summary = run_index(s)
    assert summary.swapped and summary.batch is None and summary.to_dict()["batch"] == {}


def test_hostile_output_lines_never_poison_the_ledger(workspace: Path, fake: Any) -> None:
    """issue 22 #3, #7, #9: a deeply nested line raised RecursionError (every later run failed
    the same way, the job stayed in the ledger); a non-base64 embedding string raised; an input
    returned twice with different vectors kept the first one silently."""
    deep = '{"custom_id": "x", "response": ' + "[" * 100_000 + "]" * 100_000 + "}"
    not_b64 = json.dumps({"custom_id": "y", "response": {"status_code": 200, "body": {
        "data": [{"index": 0, "embedding": "<html>oops</html>"}]}}})
    fake.script_next_job(JobFault(raw_output_lines=[deep, "[" * 200_000, not_b64], conflicting_lines=1))
    s = batch_settings(workspace, fake.name, fake, concurrency=1)
    summary = run_index(s)
    b = summary.batch
    assert summary.swapped and b.jobs_failed == 0
    assert set(ledger_states(s)) == {lg.COLLECTED} and open_ledger_chunks(s) == 0
    # the input answered twice, differently, is embedded again by one sync call, and only it
    assert b.lines_failed == 1 == b.chunks_via_sync == len(fake.sync_billed_texts)
    (text,) = fake.sync_billed_texts
    conn = connect(s.index_file, readonly=True)  # the published index holds it (the cache was trimmed of it)
    (emb,) = conn.execute("SELECT embedding FROM chunks WHERE hash = ? LIMIT 1", (sha256_hex(text),)).fetchone()
    conn.close()
    vec = np.frombuffer(emb, dtype="<f4")
    want = np.asarray(fake.vector_for(text, DIMS, MODELS["openai"]), dtype=np.float32)
    assert np.allclose(vec / np.linalg.norm(vec), want / np.linalg.norm(want), atol=1e-6)
    again = run_index(s)
    assert again.batch is None or not again.batch.get("jobs_submitted")


def test_a_full_batch_run_after_the_provider_changed_dimension_plans_jobs_for_the_new_size(workspace: Path) -> None:
    """An endpoint with a model memory-core does not know and no ``remote.dimensions`` whose
    answers went from 64-d to 32-d: a ``--full`` run in Batch API mode counted the cached 64-d
    vectors as present when planning its jobs, submitted none, and the streamed build (which keeps
    only vectors of the size the provider answers now) embedded every chunk again by sync
    requests, at twice the batch price. Now one text is embedded first to learn the size, and the
    jobs carry the rest."""
    with OpenAIFake(dims=64, batch_delay=0.05) as srv:
        s = batch_settings(workspace, "openai", srv, remote={"dimensions": None})
        s = s.model_copy(update={"model": "my-batch-model"})
        first = run_index(s)
        assert first.swapped and first.batch.chunks_via_batch == first.chunks_total > 50
        srv.dims = 32
        requests, creates = srv.embed_requests, srv.batch_creates
        rebuilt = run_index(s, full=True)
        assert rebuilt.swapped and rebuilt.chunks_total == first.chunks_total
        assert srv.embed_requests - requests == 1  # the one text that learnt the new size
        assert srv.batch_creates > creates and rebuilt.batch.chunks_via_batch == rebuilt.chunks_total - 1
        assert rebuilt.batch.chunks_via_sync == 0
        conn = connect(s.index_file, readonly=True)
        try:
            assert {r[0] for r in conn.execute("SELECT length(embedding) FROM chunks")} == {32 * 4}
        finally:
            conn.close()
