"""Two indexes sharing one cache file (``cache.path`` set to one file for both), both in Batch API
mode (BP6): a run never abandons, closes, cancels or submits again a job that another live run is
still submitting or waiting on; a job whose run died is recovered as before. Real processes (the
CLI), real SQLite, the openai SDK against the fake server, as tests/test_batch.py."""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from memory_core.config import Settings
from memory_core.index import batch_ledger as lg
from memory_core.index.pipeline import run_index
from memory_core.storage.store import connect
from tests import test_batch
from tests.conftest import ROOT
from tests.test_batch import DIMS, KEY, assert_paid_once, batch_settings, chunk_texts, ledger_states

fake = test_batch.fake  # the fixture: a fake server per provider, as test_batch.py's


def _shared(ws: Path, srv: Any, shared: Path, name: str, **batch: Any) -> Settings:
    s = batch_settings(ws, "openai", srv, max_requests_per_job=1000, **batch)
    return s.model_copy(update={"index_path": shared.parent / name / "index.sqlite",
                                "cache": s.cache.model_copy(update={"path": shared})})


def _start_cli(tmp: Path, ws: Path, srv: Any, index: Path, cache: Path) -> subprocess.Popen[bytes]:
    """``memory-core index`` in its own process: an index of ``ws`` at ``index`` on the shared cache."""
    cfg = tmp / f"{index.parent.name}.toml"
    cfg.write_text(
        f'workspace = "{ws}"\nindex_path = "{index}"\nprovider = "openai"\nmodel = "text-embedding-3-small"\n'
        f'[cache]\npath = "{cache}"\n'
        f'[remote]\nbase_url = "{srv.base_url}"\ndimensions = {DIMS}\nbackoff_initial_s = 0.01\ntimeout_s = 60\n'
        "[batch]\nenabled = true\npoll_interval_s = 0.05\nmax_requests_per_job = 1000\n"
    )
    env = dict(os.environ, OPENAI_API_KEY=KEY, PYTHONPATH=str(ROOT))
    return subprocess.Popen(
        [sys.executable, "-m", "memory_core.apps.cli", "index", "--config", str(cfg), "--engine", "local",
         "--no-progress"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


@contextlib.contextmanager
def _cli_running(tmp: Path, ws: Path, srv: Any, index: Path, cache: Path) -> Iterator[subprocess.Popen[bytes]]:
    """:func:`_start_cli`, killed on the way out if it is still running (a test that failed)."""
    proc = _start_cli(tmp, ws, srv, index, cache)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _until(cond: Callable[[], bool], proc: subprocess.Popen[bytes], seconds: float = 90) -> None:
    deadline = time.monotonic() + seconds
    while not cond():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the other run did not get there"
        time.sleep(0.05)


def test_a_job_another_live_run_is_submitting_is_not_abandoned_nor_paid_twice(
        workspace: Path, fake: Any, tmp_path: Path) -> None:
    """Run A (its own process) is inside the provider's "create" (slow to answer) when run B, another
    index on the same cache file, starts. Before: B re-attached A's ``submitting`` job, did not find it
    at the provider yet, closed it ``abandoned`` and submitted its own: 2 jobs, every chunk paid twice.
    Now B sees A's run is alive, leaves its job alone and uses its vectors when A has them."""
    shared = tmp_path / "shared" / "cache.sqlite"
    a, b = _shared(workspace, fake, shared, "a"), _shared(workspace, fake, shared, "b")
    fake.slow_next(1, seconds=6, on="batch_create")
    with _cli_running(tmp_path, workspace, fake, a.index_file, shared) as proc:
        _until(lambda: fake.batch_creates == 1, proc)  # A is waiting for its create to answer
        assert ledger_states(a) == {lg.SUBMITTING: 1}
        summary = run_index(b)
        out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err.decode()[-3000:]
    assert fake.batch_creates == 1  # before: 2 (B abandoned A's job and submitted its own)
    assert fake.paid_twice() == {} and fake.embed_requests == 0
    assert ledger_states(a) == {lg.COLLECTED: 1}
    assert summary.swapped and chunk_texts(b) == chunk_texts(a)
    assert summary.batch.jobs_submitted == 0 and summary.batch.jobs_of_other_runs == 1
    # B embedded nothing: A's vectors are cache hits for it, and its summary says so
    assert summary.chunks_embedded == 0 and summary.chunks_from_cache == summary.chunks_total
    assert summary.batch.chunks_from_other_runs == summary.chunks_total
    assert "job(s) of another live run on the shared cache file" in "\n".join(summary.lines())
    assert fake.unique_billed_texts == chunk_texts(b)
    assert not list(shared.parent.glob("*-batch-owner-*"))  # each run removed its owner lock


def test_a_run_waiting_only_on_another_runs_job_lets_go_of_its_own_lock(
        workspace: Path, fake: Any, tmp_path: Path) -> None:
    """B has nothing of its own in flight and waits on A's job: B folds what it collected and lets go
    of its owner lock, so a run waiting on B's jobs is never left waiting on a run that waits in
    turn (a cycle through a job taken over from a dead run). Before: B held it until its end."""
    shared = tmp_path / "shared" / "cache.sqlite"
    a, b = _shared(workspace, fake, shared, "a"), _shared(workspace, fake, shared, "b")
    fake.slow_next(1, seconds=8, on="batch_create")
    done: list[Any] = []
    with _cli_running(tmp_path, workspace, fake, a.index_file, shared) as proc:
        _until(lambda: fake.batch_creates == 1, proc)
        conn = connect(shared, readonly=True)
        (a_owner,) = conn.execute("SELECT owner FROM batch_jobs").fetchone()
        conn.close()
        assert a_owner
        b_run = threading.Thread(target=lambda: done.append(run_index(b)))
        b_run.start()
        locks = lambda: sorted(p.name for p in shared.parent.glob("*-batch-owner-*"))  # noqa: E731
        deadline = time.monotonic() + 60
        seen: list[list[str]] = []
        # while A is still inside its create (its row ``submitting``), B waits holding no lock
        while ledger_states(a) == {lg.SUBMITTING: 1} and time.monotonic() < deadline:
            seen.append(locks())
            if len(seen[-1]) == 1 and seen[-1][0].endswith(a_owner) and any(len(x) == 2 for x in seen):
                break
            time.sleep(0.05)
        assert seen[-1] == [f"cache.sqlite-batch-owner-{a_owner}"], seen[-3:]
        b_run.join(timeout=120)
        proc.communicate(timeout=120)
    assert proc.returncode == 0
    assert done and done[0].swapped and fake.batch_creates == 1 and fake.paid_twice() == {}


def test_a_live_other_runs_job_is_left_pending_by_a_run_that_does_not_wait(
        workspace: Path, fake: Any, tmp_path: Path) -> None:
    """``batch.wait = false``: B neither waits for A's job nor touches it; it reports it pending
    and does not build (as for its own jobs still running)."""
    shared = tmp_path / "shared" / "cache.sqlite"
    a, b = _shared(workspace, fake, shared, "a"), _shared(workspace, fake, shared, "b", wait=False)
    fake.slow_next(1, seconds=4, on="batch_create")
    with _cli_running(tmp_path, workspace, fake, a.index_file, shared) as proc:
        _until(lambda: fake.batch_creates == 1, proc)
        summary = run_index(b)
        assert ledger_states(a) == {lg.SUBMITTING: 1}  # untouched (before: abandoned)
        proc.communicate(timeout=120)
    assert proc.returncode == 0
    assert not summary.swapped and summary.batch.jobs_pending == 1 and summary.batch.jobs_submitted == 0
    assert fake.batch_creates == 1 and fake.paid_twice() == {}


@pytest.mark.parametrize("killed_in", ["batch_create", "file_upload"])
def test_a_job_whose_run_was_killed_mid_submit_is_recovered_as_before(
        workspace: Path, fake: Any, tmp_path: Path, killed_in: str) -> None:
    """A's process is SIGKILLed while its submit waits on the provider (its lock goes with it): the
    next run on the shared cache re-attaches the job if the provider created it, or abandons and
    submits it again if it never was created; either way each chunk is paid once."""
    shared = tmp_path / "shared" / "cache.sqlite"
    a, b = _shared(workspace, fake, shared, "a"), _shared(workspace, fake, shared, "b")
    fake.batch_delay = None  # jobs run until told to finish
    fake.slow_next(1, seconds=1.5, on=killed_in)
    proc = _start_cli(tmp_path, workspace, fake, a.index_file, shared)
    try:
        _until(lambda: len(fake.requests_of(killed_in)) == 1, proc)
        assert ledger_states(a) == {lg.SUBMITTING: 1}
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    time.sleep(2)  # the provider finishes what it was asked (the job is created, or the file stored)
    assert fake.batch_creates == (1 if killed_in == "batch_create" else 0)
    fake.batch_delay = 0.05
    fake.complete_job()
    summary = run_index(b)
    assert summary.swapped and summary.batch.jobs_reattached == 1
    if killed_in == "batch_create":  # found at the provider by its local id: collected, not paid again
        assert fake.batch_creates == 1 and summary.batch.jobs_submitted == 0
        assert ledger_states(b) == {lg.COLLECTED: 1}
    else:  # never created: abandoned and submitted again
        assert fake.batch_creates == 1 and summary.batch.jobs_submitted == 1
        assert ledger_states(b) == {lg.ABANDONED: 1, lg.COLLECTED: 1}
    assert_paid_once(fake, b)
    assert not list(shared.parent.glob("*-batch-owner-*"))  # the killed run's lock file was swept


def test_a_cache_file_from_before_owners_is_upgraded_and_its_open_job_recovered(workspace: Path, fake: Any) -> None:
    """A ledger written before rows had an owner: the columns are added, and its open rows are
    treated as a dead run's (re-attached or abandoned, as before)."""
    s = batch_settings(workspace, "openai", fake, max_requests_per_job=1000)
    s.cache_file.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(s.cache_file)
    conn.executescript(
        "CREATE TABLE batch_jobs (local_id TEXT PRIMARY KEY, job_id TEXT, provider TEXT NOT NULL, model TEXT NOT NULL,"
        " provider_key TEXT NOT NULL, index_path TEXT NOT NULL DEFAULT '', state TEXT NOT NULL,"
        " provider_status TEXT NOT NULL DEFAULT '', input_file_id TEXT, output_file_id TEXT, error_file_id TEXT,"
        " requests INTEGER NOT NULL DEFAULT 0, tokens INTEGER NOT NULL DEFAULT 0, created_at INTEGER NOT NULL,"
        " updated_at INTEGER NOT NULL, error TEXT NOT NULL DEFAULT '');"
        "CREATE TABLE batch_job_chunks (local_id TEXT NOT NULL, hash TEXT NOT NULL, tokens INTEGER NOT NULL DEFAULT 0,"
        " PRIMARY KEY (local_id, hash)) WITHOUT ROWID;")
    conn.close()
    from memory_core.embeddings.registry import create_provider
    from memory_core.index.batch_ledger import BatchLedger
    from memory_core.index.chunking import chunk_markdown
    from memory_core.storage.cache import EmbeddingCache

    provider, _ = create_provider(s)
    first = chunk_markdown((workspace / "MEMORY.md").read_text(), 400, 80)[0]
    with EmbeddingCache(s.cache_file, provider.name, provider.model, provider.provider_key) as cache:
        ledger = BatchLedger.for_cache(cache)
        cache.conn.execute(
            "INSERT INTO batch_jobs(local_id, provider, model, provider_key, state, created_at, updated_at)"
            " VALUES('mc-old', ?, ?, ?, 'submitting', 1, 1)", (provider.name, provider.model, provider.provider_key))
        cache.conn.execute("INSERT INTO batch_job_chunks(local_id, hash, tokens) VALUES('mc-old', ?, 10)",
                           (first.hash,))
        (job,) = ledger.open_jobs()
        assert job.owner == ""
    summary = run_index(s)
    assert summary.swapped and summary.batch.jobs_reattached == 1
    # never created: abandoned, its chunk planned again (a job of its own beside the run's other one)
    assert ledger_states(s) == {lg.ABANDONED: 1, lg.COLLECTED: 2} and fake.batch_creates == 2
    assert_paid_once(fake, s)


def test_an_owner_is_alive_while_its_lock_is_held_and_only_then(tmp_path: Path) -> None:
    """The liveness check is the kernel's lock: held (by this process too, through another open
    file) is alive; released or left by a dead process (a file nobody locks) is dead, and its file
    is removed; no file, or no token, is dead."""
    cache = tmp_path / "c.sqlite"
    owner = lg.RunOwner.acquire(cache)
    assert owner.held and owner.token and f"pid={os.getpid()}" in owner.info
    assert lg.owner_alive(cache, owner.token)
    other = lg.RunOwner.acquire(cache)  # a second run (the sweep at its start leaves the live lock)
    assert other.token != owner.token and lg.owner_alive(cache, owner.token) and lg.owner_alive(cache, other.token)
    other.release()
    assert not lg.owner_alive(cache, other.token) and not lg.owner_lock_path(cache, other.token).exists()
    dead = lg.owner_lock_path(cache, "deadbeef")
    dead.write_text("")  # what a killed run leaves: a file no process locks
    assert not lg.owner_alive(cache, "deadbeef") and not dead.exists()
    dead.write_text("")
    lg.RunOwner.acquire(cache).release()  # a run's start sweeps dead owners' files
    assert not dead.exists() and lg.owner_alive(cache, owner.token)
    assert not lg.owner_alive(cache, "") and not lg.owner_alive(None, owner.token)
    owner.release()
    assert not lg.owner_alive(cache, owner.token) and list(tmp_path.iterdir()) == []
