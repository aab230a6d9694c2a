"""Batch API findings of the outside audit I: the real openai / google-genai SDKs against the
fake servers on 127.0.0.1, real SQLite (cache, ledger, index); nothing of memory-core is mocked.

- H1: a key the provider echoes in a failed job's error or in an output line's error is masked
  in the summary, the warnings, and the ledger in the cache file.
- H3: a Gemini job's output file is read through the Batch API download cap, not a sync
  response's; an output refused as too large says so, is closed, and its billed tokens count.
- M1: open jobs in the ledger are collected by a run with batch mode off (never submitted
  again), cancelled by ``--re-embed`` (their vectors are not the re-embedded ones).
- M2: ``create`` waits the server asks for within the run's retry budget; a stop before a
  job was created counts no open job.
- M3: each Batch API call (poll, lookup, download) has a wall-clock limit, first byte to last.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from memory_core.index.pipeline import run_index
from tests.fakes.common import JobFault
from tests.test_batch import DIMS, FAKES, KEY, batch_settings

ECHO = f"Invalid authorization header Bearer {KEY}"


@pytest.fixture
def fake(request: pytest.FixtureRequest) -> Iterator[Any]:
    name = getattr(request, "param", "openai")
    with FAKES[name](dims=DIMS, batch_delay=0.05) as srv:
        srv.name = name
        yield srv


def every_byte(folder: Path) -> bytes:
    return b"".join(p.read_bytes() for p in folder.rglob("*") if p.is_file())


# -- H1 ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("fake", ["openai", "gemini", "voyage"], indirect=True)
def test_a_key_echoed_in_batch_errors_never_reaches_summary_logs_or_ledger(
        workspace: Path, fake: Any, caplog: pytest.LogCaptureFixture) -> None:
    s = batch_settings(workspace, fake.name, fake, failure_limit=5)
    # a job that fails with the key in its error, then one whose output has error lines echoing it
    fake.fail_next_job(message=ECHO, code="invalid_auth")
    fake.script_next_job(JobFault(error_lines=3, error_code="auth", error_message=f"upstream rejected key {KEY}"))
    with caplog.at_level(logging.INFO):
        summary = run_index(s)
    assert summary.swapped and summary.batch.jobs_failed >= 1 and summary.batch.lines_failed == 3
    shown = "\n".join(summary.lines()) + "\n".join(summary.batch.errors) + caplog.text
    assert "***" in shown  # the messages are there, masked
    assert KEY not in shown
    assert KEY.encode() not in every_byte(s.cache_file.parent)  # the ledger's error column included


# -- H3 ------------------------------------------------------------------------------------------

def open_jobs(settings: Any) -> int:
    from memory_core.storage.store import connect

    conn = connect(settings.cache_file, readonly=True)
    try:
        return conn.execute("SELECT count(*) FROM batch_jobs WHERE state NOT IN"
                            " ('collected', 'failed', 'cancelled', 'abandoned')").fetchone()[0]
    finally:
        conn.close()


def test_a_gemini_output_file_gets_the_download_cap_not_a_sync_response_s() -> None:
    """Gemini's ``files/<id>:download`` read through the transport every Gemini client of
    memory-core has: a file over a sync response's cap (256 MiB; 4 KiB here) is a Batch API
    output, capped as OpenAI's ``/files/<id>/content`` (8 GiB)."""
    import httpx
    from google import genai
    from google.genai import types

    from memory_core.embeddings.http import capped_transport
    from tests.fakes.gemini_fake import GeminiFake

    data = b"".join(b'{"key":"%d","response":{"embedding":{"values":[0.5]}}}\n' % i for i in range(2000))
    assert len(data) > 64 * 1024
    with GeminiFake(dims=DIMS) as srv:
        f = srv.add_file(data, "out.jsonl", "batch", source="GENERATED")
        client = genai.Client(api_key=KEY, http_options=types.HttpOptions(
            base_url=srv.base_url, httpx_client=httpx.Client(transport=capped_transport("httpx", max_bytes=4096))))
        assert bytes(client.files.download(file=f"files/{f.id}")) == data


@pytest.mark.parametrize("fake", ["openai", "gemini"], indirect=True)
def test_an_output_too_large_to_download_is_closed_counted_and_never_read_again(
        workspace: Path, fake: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from memory_core.embeddings import http

    monkeypatch.setattr(http, "MAX_DOWNLOAD_BYTES", 1024)  # every job's output is over it
    s = batch_settings(workspace, fake.name, fake, max_requests_per_job=1000)
    summary = run_index(s)
    b = summary.batch
    assert summary.swapped and summary.chunks_embedded == summary.chunks_total
    assert b.jobs_submitted == 1 and b.chunks_via_batch == 0 and b.chunks_via_sync == summary.chunks_total
    # said, once: the file is too large, the job is closed, its chunks go sync
    said = "\n".join(b.errors)
    assert "more than a Batch API download may hold" in said and "job closed" in said
    # the job was billed: its tokens count at the batch price
    assert summary.tokens_batch > 0 and b.tokens_unusable == summary.tokens_batch
    assert fake.requests_of("file_content") == []  # refused by the size the provider states
    assert open_jobs(s) == 0  # not left "submitted", to be downloaded again by every run
    # a later run has nothing to collect, download or pay
    (workspace / "memory" / "extra.md").write_text("one more note about otters\n")
    fake.reset_log()
    again = run_index(batch_settings(workspace, fake.name, fake, max_requests_per_job=1000))
    assert again.batch.jobs_reattached == 0 and again.batch.jobs_submitted == 1  # its own new job only
    assert fake.batch_polls >= 1 and len(fake.requests_of("batch_get")) == fake.batch_polls
    assert open_jobs(s) == 0 and not fake.paid_twice()


# -- M2 ------------------------------------------------------------------------------------------

def test_batch_create_waits_within_the_run_s_retry_budget(workspace: Path, fake: Any) -> None:
    import time

    fake.fail_next(None, status=429, retry_after=30, on="batch_create")  # every create: "come back in 30 s"
    s = batch_settings(workspace, "openai", fake, failure_limit=1, max_requests_per_job=1000,
                       remote={"retry_budget_s": 2, "max_attempts": 2})
    t0 = time.monotonic()
    summary = run_index(s)
    took = time.monotonic() - t0
    assert summary.swapped and summary.chunks_embedded == summary.chunks_total  # by sync calls
    assert took < 15, f"{took:.0f} s: slept the 30 s the server asked for, past a budget of 2 s"
    said = "\n".join(summary.batch.errors)
    assert "gave up after 1 attempts: the provider asked to wait 30 s" in said
    assert len(fake.requests_of("batch_create")) == 1  # not asked again: the wait did not fit


# -- M3 ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["batch_get", "file_content"])
def test_a_batch_call_whose_answer_drips_is_cut_off_at_its_limit(workspace: Path, fake: Any, kind: str) -> None:
    """A poll or a download whose answer comes one byte at a time: each byte in time for the
    socket's timeout, the whole far past remote.timeout_s (1 s). Cut off and asked again."""
    import time

    from tests.fakes.common import Fault

    fake.inject(Fault("drip", seconds=0.05), 2, on=kind)  # ~1 KB at 20 bytes a second: ~50 s an answer
    s = batch_settings(workspace, "openai", fake, max_requests_per_job=1000, remote={"timeout_s": 1})
    t0 = time.monotonic()
    summary = run_index(s)
    took = time.monotonic() - t0
    assert took < 20, f"{took:.0f} s: a dripping answer held the run"
    assert summary.swapped and summary.batch.chunks_via_batch == summary.chunks_total  # asked again: read
    assert len(fake.requests_of(kind)) >= 3


# -- M1 ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("rerun", ["batch off", "re-embed"])
def test_a_run_that_does_not_use_batch_says_what_open_jobs_it_leaves(workspace: Path, rerun: str) -> None:
    """Batch mode off leaves jobs still running open, and says so; ``--re-embed`` cancels them
    (and says how many, by id). The rest of M1 is in tests/test_batch_open_jobs.py."""
    from tests.fakes.openai_fake import OpenAIFake

    with OpenAIFake(dims=DIMS, batch_delay=None) as srv:  # jobs stay in progress
        first = run_index(batch_settings(workspace, "openai", srv, wait=False))
        assert first.batch.jobs_pending >= 1
        if rerun == "batch off":
            summary = run_index(batch_settings(workspace, "openai", srv, enabled=False))
        else:
            summary = run_index(batch_settings(workspace, "openai", srv), re_embed=True)
    said = "\n".join(summary.warnings)
    n = first.batch.jobs_pending
    if rerun == "batch off":
        assert f"{n} batch job(s) of earlier runs are still open at the provider" in said
    else:
        assert f"index --re-embed cancelled {n} batch job(s) of earlier runs at the provider" in said
        assert open_jobs(batch_settings(workspace, "openai", srv)) == 0
