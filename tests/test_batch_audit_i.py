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
from pathlib import Path
from typing import Any

import pytest

from memory_core.index.pipeline import run_index
from tests.fakes.common import JobFault
from tests.test_batch import KEY, batch_settings, fake  # noqa: F401 - the fixture

ECHO = f"Invalid authorization header Bearer {KEY}"


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
