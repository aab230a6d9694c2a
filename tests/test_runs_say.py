"""Runs that say what they did, and one rule for folders (issue 39): what a user met walking
through the CLI."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from memory_core.apps.cli import main


def test_index_refuses_a_missing_folder_as_export_does(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`index --index /no/such/dir/idx.sqlite` created the folders without a word, where export
    refused a missing folder: one rule, the folder must exist (memory-core creates only its own
    <workspace>/.memory-core/)."""
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    (ws / "memory" / "notes.md").write_text("# Notes\n\nA fact.\n")
    missing = tmp_path / "no" / "such"
    rc = main(["index", "-w", str(ws), "--index", str(missing / "idx.sqlite"), "--provider", "none", "--no-progress"])
    err = capsys.readouterr().err
    assert rc != 0 and f"directory not found: {missing}" in err and "Traceback" not in err, err
    assert not (tmp_path / "no").exists()
    # the default folder beside the notes is still created, and a given path in a folder that exists works
    assert main(["index", "-w", str(ws), "--provider", "none", "--no-progress"]) == 0
    assert (ws / ".memory-core" / "index.sqlite").is_file()
    (tmp_path / "there").mkdir()
    assert main(["index", "-w", str(ws), "--index", str(tmp_path / "there" / "i.sqlite"), "--provider", "none",
                 "--no-progress"]) == 0
    capsys.readouterr()
    rc = main(["export", "-w", str(ws), str(tmp_path / "nope" / "out.parquet")])
    assert rc != 0 and "directory not found" in capsys.readouterr().err


@pytest.mark.prefect_server
def test_index_engine_prefect_prints_its_summary_once(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """`index --engine prefect` printed the summary twice (the flow's log lines of it, then the
    CLI's own) where Prefect's console shows INFO logs (a profile's PREFECT_LOGGING_LEVEL)."""
    import subprocess
    import sys

    from tests.conftest import ROOT
    from tests.prefect_server import shared_server

    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    (ws / "memory" / "notes.md").write_text("# Notes\n\nThe walrus budget was approved.\n")
    env = shared_server(request.config).env(PYTHONPATH=str(ROOT), PREFECT_LOGGING_LEVEL="INFO")
    proc = subprocess.run([sys.executable, "-m", "memory_core.apps.cli", "index", "-w", str(ws), "--engine", "prefect",
                           "--provider", "none", "--no-progress"], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    both = proc.stdout + proc.stderr
    assert both.count("files: 1 scanned, 1 new") == 1, both
    assert proc.stdout.count("index: ") == 1 and "Beginning flow run" in both  # INFO logs were on


def test_index_engine_prefect_on_a_temporary_server_names_its_flow_run(tmp_path: Path) -> None:
    """Twentieth session's audit: with no PREFECT_API_URL (Prefect starts a temporary server, which
    has no UI address) `index --engine prefect` printed `flow run: None/flow-runs/flow-run/<id>`."""
    import os
    import re
    import subprocess
    import sys

    from tests.conftest import ROOT

    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    (ws / "memory" / "notes.md").write_text("# Notes\n\nThe walrus budget was approved.\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update(PYTHONPATH=str(ROOT), PREFECT_HOME=str(tmp_path / "prefect-home"))
    proc = subprocess.run([sys.executable, "-m", "memory_core.apps.cli", "index", "-w", str(ws), "--engine", "prefect",
                           "--provider", "none", "--no-progress"], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "None/" not in proc.stderr, proc.stderr
    assert re.search(r"flow run: \S*[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", proc.stderr), proc.stderr


def test_a_cancelled_backfill_says_what_it_submitted_and_the_rerun_what_it_collects(workspace: Path) -> None:
    """issue 39: a Batch API backfill cancelled while its job ran said `batch mode off`, `0 jobs`,
    `0 tokens` though it had submitted a job billed for 295 requests, and never mentioned the open
    job the next run re-attaches to; the rerun's progress said `0 embedded, $0.0000` while it
    collected the job."""
    import os
    import signal
    import threading
    import time

    from flows import report
    from memory_core.index.pipeline import RunCancelled, run_index
    from memory_core.index.runtypes import Progress
    from tests.fakes.openai_fake import OpenAIFake
    from tests.test_batch import batch_settings

    with OpenAIFake(dims=16, batch_delay=None) as srv:  # jobs run until told to complete
        s = batch_settings(workspace, "openai", srv, max_requests_per_job=10_000)

        def cancel_once_submitted() -> None:
            deadline = time.monotonic() + 60
            while srv.batch_creates < 1 and time.monotonic() < deadline:
                time.sleep(0.02)
            time.sleep(0.2)  # a few polls
            os.kill(os.getpid(), signal.SIGTERM)  # as `prefect` or a service manager stops a run

        t = threading.Thread(target=cancel_once_submitted)
        t.start()
        with pytest.raises(RunCancelled) as stopped:
            run_index(s, full=True)
        t.join()
        partial = stopped.value.run_summary  # type: ignore[attr-defined]
        job = srv.batch_jobs[0]
        requests = len(srv.batch_submitted_texts)
        assert srv.batch_creates == 1 and requests > 20
        b = partial.batch
        assert b is not None and b.jobs and b.mode.startswith("batch"), partial.batch
        assert b.jobs_submitted == 1 and b.requests_submitted == requests and b.tokens_submitted > 0
        assert b.jobs_pending == 1 and b.pending_job_ids == [job.id] and b.stopped
        assert partial.tokens_batch == b.tokens_submitted and partial.cost is not None and partial.cost.priced
        assert partial.cost.estimated_usd > 0
        assert any("left open at the provider" in w and job.id in w for w in partial.warnings), partial.warnings
        fig = report.run_figures(partial, s)
        assert fig["batch mode"] != "off (not used by this run)" and fig["batch jobs submitted"] == 1
        assert fig["batch requests submitted"] == requests and fig["tokens sent (batch)"] > 0
        assert job.id in fig["batch jobs left open"]
        notes = report.notes_markdown("t", warnings=partial.warnings, error="cancelled", partial=partial)
        assert "left open at the provider" in notes and f"{requests} requests" in notes
        assert any(line.startswith(f"batch: batch; jobs 1 submitted ({requests} requests") for line in partial.lines())

        # the rerun re-attaches to the open job; its progress says what it collects, and the cost
        srv.complete_job()
        seen: list[str] = []

        def progress(p: Progress) -> None:
            seen.append(p.line())

        summary = run_index(s, progress=progress)
        assert summary.swapped and summary.batch is not None and summary.batch.jobs_reattached == 1
        assert summary.batch.jobs_submitted == 0 and srv.batch_creates == 1
        batch_lines = [ln for ln in seen if ln.startswith("batch jobs:")]
        assert batch_lines and f"{requests} embedded" in batch_lines[-1], seen
        assert "$0.0000" not in batch_lines[-1] and "so far" in batch_lines[-1], batch_lines[-1]


def test_a_cancelled_run_counts_the_requests_still_running(tmp_path: Path) -> None:
    """issue 39: a cancelled local run's summary said 448 embedded; the rerun found all 593
    cached: the embedding requests running at the cancel kept returning (and caching) after the
    summary was made (or, with the cache closed, were lost though paid for). The stopped run takes
    in what its running requests return (bounded wait), so what it says it embedded is what is
    cached, and is every vector it was billed for."""
    import os
    import shutil
    import signal
    import threading
    import time

    from memory_core.index.pipeline import RunCancelled, run_index
    from memory_core.storage.store import connect
    from tests.conftest import ROOT, openai_settings
    from tests.fakes.openai_fake import OpenAIFake

    ws = tmp_path / "ws"
    shutil.copytree(ROOT / "examples" / "workspace" / "memory", ws / "memory")
    with OpenAIFake(dims=16) as srv:
        s = openai_settings(ws, srv, chunking={"tokens": 100, "overlap": 10}, remote={"max_inputs_per_request": 8})
        srv.delay = 0.5  # a slow provider: four requests are always running

        def cancel_mid_run() -> None:
            deadline = time.monotonic() + 60
            while len(srv.sync_billed_texts) < 8 * 6 and time.monotonic() < deadline:
                time.sleep(0.01)
            time.sleep(0.1)  # the next requests are on their way
            os.kill(os.getpid(), signal.SIGTERM)

        t = threading.Thread(target=cancel_mid_run)
        t.start()
        with pytest.raises(RunCancelled) as stopped:
            run_index(s, concurrency=4)
        t.join()
        partial = stopped.value.run_summary  # type: ignore[attr-defined]
        time.sleep(1.0)  # nothing more arrives after the run returned
        conn = connect(s.cache_file, readonly=True)
        try:
            cached = conn.execute("SELECT count(*) FROM cache_vectors").fetchone()[0]
        finally:
            conn.close()
        billed = len(set(srv.sync_billed_texts))
    # every vector the provider was paid for is cached, and the summary counts it
    assert partial.chunks_in_flight == 0 and cached == partial.chunks_embedded == billed, (cached, partial, billed)
    assert "cancelled" in partial.outcome() or "SIGTERM" in partial.error


def test_transcript_exchange_vectors_are_counted_apart_from_chunks(tmp_path: Path) -> None:
    """issue 39: `198 total ... 237 embedded`: the transcripts' exchange vectors were counted as
    chunks embedded (and as chunks from cache)."""
    from memory_core.index.pipeline import run_index
    from tests.conftest import openai_settings
    from tests.fakes.openai_fake import OpenAIFake
    from tests.test_exchange_vectors import _workspace

    ws = _workspace(tmp_path / "ws")
    with OpenAIFake(dims=16) as srv:
        s = openai_settings(ws, srv, sources=["memory", "sessions"])
        first = run_index(s)
        billed = len(set(srv.sync_billed_texts))
        assert first.exchanges_embedded > 0, first.lines()
        assert first.chunks_embedded <= first.chunks_total, first.lines()  # a first build: no chunk twice
        assert first.chunks_embedded + first.exchanges_embedded == billed
        assert any(line.startswith("part vectors (transcript exchanges, note windows): ") for line in first.lines())
        again = run_index(s, full=True)  # everything from the cache
        assert again.chunks_embedded == 0 and again.chunks_from_cache <= again.chunks_total
        assert again.exchanges_from_cache == first.exchanges_embedded and again.exchanges_embedded == 0


@pytest.mark.parametrize("provider", ["openai", "gemini", "voyage"])
def test_batch_mode_counts_exchange_vectors_apart_from_chunks(tmp_path: Path, provider: str) -> None:
    """issue 39: in Batch API mode the jobs' figures (chunks embedded, ``chunks_via_batch``, the
    progress) counted the transcripts' exchange vectors as chunks, as the sync path once did."""
    from memory_core.index.pipeline import run_index
    from memory_core.index.runtypes import Progress
    from tests.test_batch import FAKES, batch_settings
    from tests.test_exchange_vectors import _workspace

    ws = _workspace(tmp_path / "ws")
    seen: list[Progress] = []
    with FAKES[provider](dims=16, batch_delay=0.05) as srv:
        s = batch_settings(ws, provider, srv)
        s = s.model_copy(update={"sources": ["memory", "sessions"]})
        first = run_index(s, progress=lambda p: seen.append(replace(p)))
        billed = len(set(srv.batch_billed_texts))
        assert not srv.sync_billed_texts and billed, first.lines()  # all through batch jobs
        assert first.exchanges_embedded > 0, first.lines()
        assert first.chunks_embedded <= first.chunks_total, first.lines()  # a first build: no chunk twice
        assert first.chunks_embedded + first.exchanges_embedded == billed, first.lines()
        assert first.batch is not None and first.batch.chunks_via_batch == first.chunks_embedded, first.batch
        assert first.batch.exchanges_via_batch == first.exchanges_embedded
        assert any(line.startswith("part vectors (transcript exchanges, note windows): ") for line in first.lines())
        jobs = [p for p in seen if p.phase == "batch jobs"]
        assert jobs and max(p.chunks for p in jobs) == first.chunks_embedded, [(p.ready, p.chunks) for p in jobs]
        assert max(p.embedded for p in jobs) == first.chunks_embedded
        again = run_index(s, full=True)  # everything from the cache
        assert again.chunks_embedded == 0 and again.chunks_from_cache <= again.chunks_total, again.lines()
        assert again.exchanges_from_cache == first.exchanges_embedded and again.exchanges_embedded == 0


def test_batch_and_sync_count_chunks_and_exchange_vectors_alike(tmp_path: Path) -> None:
    """The same workspace through sync requests and through Batch API jobs gives the same counts,
    including an exchange whose text is also another transcript's chunk (zz.jsonl holds just the
    first exchange of chat.jsonl, met first as chat's exchange): it counts as that chunk."""
    from memory_core.index.pipeline import run_index
    from tests.conftest import openai_settings
    from tests.fakes.openai_fake import OpenAIFake
    from tests.test_batch import batch_settings
    from tests.test_exchange_vectors import FILLER, _transcript, _workspace

    counts = {}
    for mode in ("sync", "batch"):
        ws = _workspace(tmp_path / mode)
        (ws / "sessions" / "zz.jsonl").write_text(_transcript(FILLER[:1]))
        with OpenAIFake(dims=16, batch_delay=0.05) as srv:
            if mode == "sync":
                s = openai_settings(ws, srv, sources=["memory", "sessions"])
            else:
                s = batch_settings(ws, "openai", srv).model_copy(update={"sources": ["memory", "sessions"]})
            r = run_index(s)
            billed = len(set(srv.sync_billed_texts + srv.batch_billed_texts))
            assert (mode == "batch") == bool(srv.batch_billed_texts) and r.swapped
        assert r.chunks_embedded + r.exchanges_embedded == billed
        counts[mode] = (r.chunks_total, r.chunks_embedded, r.exchanges_embedded)
    assert counts["sync"] == counts["batch"] == (4, 4, 6), counts
