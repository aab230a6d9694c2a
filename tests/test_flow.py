"""The reindex and backfill flows, run in this process against a real Prefect server (tests/
prefect_server.py): names, artifacts, events, failure handling, the writer lock, batch wiring,
and a Dask LocalCluster giving the same index as the thread pool."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from flows import report
from flows.reindex import ReindexParams, reindex
from memory_core.config import load_settings
from memory_core.embeddings.batch_types import BatchFigures
from memory_core.errors import ConfigError
from memory_core.index.pipeline import run_index
from memory_core.index.runtypes import RunSummary
from memory_core.storage.store import IndexLock, connect
from tests.conftest import index_content, vector_count, vector_rows
from tests.prefect_server import (
    artifact_of,
    drain_workers,
    events_for,
    read_flow_run,
    run_artifacts,
    table_figures,
    task_run_names,
)

pytestmark = pytest.mark.prefect_server


def write_config(path: Path, srv: Any) -> Path:
    """A config file for the OpenAI provider on the fake server (8 inputs a request: several groups)."""
    lines = ['provider = "openai"', 'model = "text-embedding-3-small"', "[remote]", f'base_url = "{srv.base_url}"', "dimensions = 64", 'api_key = "sk-test-key-0123456789"',
              "max_inputs_per_request = 8", "backoff_initial_s = 0.01", "backoff_max_s = 0.05", "max_attempts = 2",
              "timeout_s = 10"]
    path.write_text("\n".join(lines) + "\n")
    return path


def run(**kwargs: Any) -> Any:
    """Run the reindex flow in-process; (state, flow run)."""
    state = reindex(**kwargs, return_state=True)
    drain_workers()
    return state, read_flow_run(state.state_details.flow_run_id)


def index_rows(index: Path) -> list[tuple[Any, ...]]:
    conn = connect(index, readonly=True)
    try:
        vector_rows(conn)  # every vector has its sign bits
        return conn.execute("SELECT c.id, c.path, c.start_line, c.end_line, c.hash, c.text, c.embedding FROM chunks c"
                            " WHERE c.embedding IS NOT NULL ORDER BY c.id").fetchall()
    finally:
        conn.close()


def index_check(index: Path) -> dict[str, int]:
    conn = connect(index, readonly=True)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        n = {t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in ("chunks", "chunks_fts", "files")}
        n["missing_vectors"] = n["chunks"] - vector_count(conn)
        return n
    finally:
        conn.close()


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# -- no server needed -------------------------------------------------------------------------

def test_parameters_reject_unfilled_templates(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="unfilled template.*MEMORY_CORE_WORKSPACE"):
        ReindexParams(workspace="{{ $MEMORY_CORE_WORKSPACE }}").to_settings()


def test_parameters_map_to_settings(tmp_path: Path) -> None:
    s = ReindexParams(workspace=str(tmp_path), batch=True, force_sessions=True, provider="none").to_settings()
    assert s.batch.enabled and s.sessions.delta_bytes == 0 and s.sessions.delta_messages == 0
    assert ReindexParams(workspace=str(tmp_path), full=True).flow_kwargs() == {"workspace": str(tmp_path), "full": True}


def test_report_helpers(tmp_path: Path) -> None:
    s = load_settings(None, {"workspace": str(tmp_path / "Agent Notes")})
    assert report.index_label(s) == "Agent Notes"
    assert report.artifact_key("reindex", s, "summary") == "reindex-agent-notes-summary"
    s2 = load_settings(None, {"workspace": str(tmp_path), "index_path": str(tmp_path / "work.sqlite")})
    assert report.index_label(s2) == "work"
    assert report.batch_states(None) == "\u2014"  # issue 22: a lone "-" rendered as a list bullet
    assert report.batch_states(BatchFigures(jobs_submitted=3, jobs_collected=2, jobs_failed=1)) == "2 collected, 1 failed"
    md = report.notes_markdown("t", warnings=["a | b", "a | b"], error="boom", fallbacks=["batch-to-sync: x"])
    assert "The run failed" in md and "a \\| b" in md and md.count("a \\| b") == 1 and "Fallbacks" in md
    assert "Nothing worth a look" in report.notes_markdown("t", warnings=[])


# -- flows against the server -----------------------------------------------------------------

def test_run_shows_names_artifacts_and_swap_event(prefect_api: Any, workspace: Path, openai_fake: Any,
                                                 tmp_path: Path) -> None:
    cfg = write_config(tmp_path / "mc.toml", openai_fake)
    state, fr = run(workspace=str(workspace), config_file=str(cfg))
    assert state.is_completed(), state.message
    summary = state.result()
    assert fr.name == "reindex-ws-full"  # renamed after what it did: the first build is a full one
    assert summary["swapped"] and summary["chunks_embedded"] == openai_fake.embedded_inputs > 20

    stages = {"discover-ws", "build-ws"}
    names = task_run_names(fr.id, until=lambda ns: stages <= set(ns) and sum(
        n.startswith("embed-openai-group-") for n in ns) >= summary["embed_requests"])
    assert stages <= set(names)
    groups = [n for n in names if n.startswith("embed-openai-group-")]
    assert len(groups) == openai_fake.embed_requests == summary["embed_requests"] > 1

    fig = table_figures(artifact_of(fr.id, "table"))
    assert fig["files scanned"] == summary["files_scanned"] and fig["files new"] == summary["files_new"]
    assert fig["files changed"] == 0 and fig["files removed"] == 0
    assert fig["chunks embedded"] == summary["chunks_embedded"] and fig["chunks from cache"] == 0
    assert fig["embedding requests (sync)"] == openai_fake.embed_requests
    assert fig["tokens sent (sync)"] == summary["tokens_sent"] > 0 and fig["tokens sent (batch)"] == 0
    assert fig["estimated cost (USD)"] == pytest.approx(summary["tokens_sent"] * 0.02 / 1e6, abs=1e-6)
    assert fig["index size (bytes)"] == (workspace / ".memory-core" / "index.sqlite").stat().st_size
    assert fig["embedding ran on"] == "Prefect tasks on threads (4 workers)" and fig["outcome"] == "swapped in"
    assert fig["chunks"] == summary["chunks_total"] and fig["embedded"] == summary["chunks_embedded"]
    assert fig["batch jobs submitted"] == 0 and fig["batch job states"] == "\u2014" and fig["batch mode"] == "off"
    assert not [k for k, v in fig.items() if str(v).strip() == "-" or str(v).startswith("- ")]  # no list bullets
    assert "seconds: index" in fig and "seconds: total" in fig
    progress = artifact_of(fr.id, "progress")
    assert float(progress.data) == 100.0 and progress.key == "reindex-ws-progress"
    notes = artifact_of(fr.id, "markdown")
    assert notes.key == "reindex-ws-notes" and "Nothing worth a look" in notes.data

    index = workspace / ".memory-core" / "index.sqlite"
    events = events_for(report.EVENT_SWAPPED, flow_run_id=fr.id)
    assert len(events) == 1
    ev = events[0]
    assert ev.resource.id == f"memory-core.index.{index}" and ev.resource.get("prefect.resource.name") == "ws"
    counts = index_check(index)
    assert ev.payload["chunks"] == counts["chunks"] == summary["chunks_total"]
    assert ev.payload["files"] == counts["files"] and ev.payload["vectors"] == counts["chunks"]
    assert ev.payload["chunks_embedded"] == summary["chunks_embedded"] and ev.payload["published"] == "replaced"

    # an edit: only its chunks are embedded; the summary table says what changed
    (workspace / "memory" / "2026-09-04.md").write_text("## 23:50\nReplica lag threshold now 45s.\n")
    (workspace / "memory" / "people" / "marcus.md").unlink()
    before = openai_fake.embedded_inputs
    state, fr = run(workspace=str(workspace), config_file=str(cfg))
    fig = table_figures(artifact_of(fr.id, "table"))
    assert fig["files changed"] == 1 and fig["files removed"] == 1 and fig["files new"] == 0
    assert fig["chunks embedded"] == openai_fake.embedded_inputs - before == 1
    assert fig["outcome"] == "updated in place"  # a small change: one transaction on the live file
    ev = events_for(report.EVENT_SWAPPED, flow_run_id=fr.id)
    assert len(ev) == 1 and ev[0].payload["published"] == "in place" and ev[0].payload["files_changed"] == 1

    # nothing changed: completed, no swap, no event
    state, fr = run(workspace=str(workspace), config_file=str(cfg), full=False)
    assert state.is_completed() and not state.result()["swapped"] and state.message.startswith("nothing to do")
    assert events_for(report.EVENT_SWAPPED, flow_run_id=fr.id, expect=1, timeout=2) == []


def test_provider_failure_fails_the_run_and_keeps_the_live_index(prefect_api: Any, workspace: Path,
                                                                 openai_fake: Any, tmp_path: Path) -> None:
    cfg = write_config(tmp_path / "mc.toml", openai_fake)
    state, _ = run(workspace=str(workspace), config_file=str(cfg))
    assert state.is_completed()
    index = workspace / ".memory-core" / "index.sqlite"
    digest = sha(index)
    (workspace / "memory" / "new-note.md").write_text("# New\nSomething to embed about the Lisbon offsite.\n")
    openai_fake.fail_next(n=None, status=400, message="Input is not allowed.")
    state, fr = run(workspace=str(workspace), config_file=str(cfg))
    assert state.is_failed()
    assert "ProviderError" in state.message and "HTTP 400" in state.message and "Input is not allowed" in state.message
    assert sha(index) == digest  # the live index is untouched
    assert not list(index.parent.glob(".index.sqlite.tmp-*"))
    notes = artifact_of(fr.id, "markdown")
    assert "The run failed" in notes.data and "HTTP 400" in notes.data
    openai_fake.clear_faults()
    state, _ = run(workspace=str(workspace), config_file=str(cfg))
    assert state.is_completed() and state.result()["files_new"] == 1


def test_a_failed_first_build_is_named_after_what_it_did(prefect_api: Any, workspace: Path, openai_fake: Any,
                                                         tmp_path: Path) -> None:
    """issue 22: run names were corrected only when a run succeeded: a failed first build kept
    the name chosen before it started (`-incremental`), though it was a full build."""
    cfg = write_config(tmp_path / "mc.toml", openai_fake)
    openai_fake.fail_next(n=None, status=400, message="Input is not allowed.")
    state, fr = run(workspace=str(workspace), config_file=str(cfg))
    assert state.is_failed()
    assert fr.name.endswith("-full"), fr.name
    fig = report.run_figures(RunSummary(index_path="x", provider="local", model="m", provider_reason="",
                                        full=True, full_reason="", swapped=False),
                             load_settings(None, {"workspace": str(workspace), "batch": {"enabled": True}}))
    assert fig["batch mode"].startswith("off")  # batch.enabled, but no job: not "on"


def test_busy_index_skip_fail_and_wait(prefect_api: Any, workspace: Path, tmp_path: Path) -> None:
    index = workspace / ".memory-core" / "index.sqlite"
    with IndexLock(index):
        state, fr = run(workspace=str(workspace), provider="none", if_busy="skip")
        assert state.is_completed() and state.name == "Skipped" and "another run is writing" in state.message
        assert not index.exists()
        assert "skipped" in artifact_of(fr.id, "markdown").data
        state, fr = run(workspace=str(workspace), provider="none", if_busy="fail")
        assert state.is_failed() and "IndexLockedError: another run is writing" in state.message
        assert not index.exists()
    state, _ = run(workspace=str(workspace), provider="none", if_busy="wait")
    assert state.is_completed() and state.name == "Completed" and index.exists()


def test_force_sessions_reindexes_transcripts_below_the_delta(prefect_api: Any, workspace: Path) -> None:
    """What the `sessions` deployment is for: the 15-minute runs carry small transcript growth
    over (delta thresholds); force_sessions reindexes it."""
    from flows.reindex import run_reindex

    common = {"workspace": str(workspace), "provider": "none", "sources": ["memory", "sessions"]}
    first = run_reindex(ReindexParams(**common))  # what the CLI's --engine prefect calls
    assert first["swapped"] and first["files_new"] == first["files_scanned"] > 30
    with (workspace / "sessions" / "2026-11-02-rate-limit-review.jsonl").open("a") as fh:
        fh.write('{"type":"message","message":{"role":"user","content":"Bump the burst to 40."}}\n')
    state, fr = run(**common)  # nothing to do: no artifacts (tests/test_prefect_overhead.py), the state says it
    carried = state.result()
    assert carried["sessions_carried"] == 1 and carried["files_changed"] == 0 and not carried["swapped"]
    assert "1 transcript(s) grew below the reindex delta" in state.message
    state, fr = run(**common, force_sessions=True)
    assert fr.name == "reindex-ws-sessions"
    fig = table_figures(artifact_of(fr.id, "table"))
    assert fig["files changed"] == 1 and fig["sessions carried (below delta)"] == 0 and fig["swapped"] == "True"


def test_a_backfill_indexes_transcripts_below_the_delta(prefect_api: Any, workspace: Path) -> None:
    """A backfill is a run someone asked for (ad hoc, from the UI or `prefect deployment run`):
    like `memory-core index`, it indexes every transcript that grew, below the sessions delta too
    (it kept the delta as the 15-minute runs do, so two new messages stayed unsearchable)."""
    from flows.backfill import backfill
    from flows.reindex import run_reindex

    common = {"workspace": str(workspace), "provider": "none", "sources": ["memory", "sessions"]}
    first = run_reindex(ReindexParams(**common))
    assert first["swapped"]
    with (workspace / "sessions" / "2026-11-02-rate-limit-review.jsonl").open("a") as fh:
        fh.write('{"type":"message","message":{"role":"user","content":"Bump the burst to 40."}}\n')
    state = backfill(**common, return_state=True)
    assert state.is_completed(), state.message
    summary = state.result()
    assert summary["files_changed"] == 1 and summary["sessions_carried"] == 0 and summary["swapped"]
    with (workspace / "sessions" / "2026-11-02-rate-limit-review.jsonl").open("a") as fh:
        fh.write('{"type":"message","message":{"role":"user","content":"And the window to 2 s."}}\n')
    kept = backfill(**common, force_sessions=False, return_state=True).result()  # the delta, when asked
    assert kept["sessions_carried"] == 1 and kept["files_changed"] == 0


def test_batch_failures_switch_to_sync_and_say_so(prefect_api: Any, workspace: Path, tmp_path: Path) -> None:
    """Real batch jobs that fail reach the failure limit: the rest goes through sync request
    tasks of the same run; the summary, the notes and a batch-to-sync event say so."""
    from tests.fakes.openai_fake import OpenAIFake

    with OpenAIFake(dims=64, batch_delay=0.05) as fake:
        cfg = write_config(tmp_path / "mc.toml", fake)
        with cfg.open("a") as fh:
            fh.write("[batch]\npoll_interval_s = 0.05\nmax_requests_per_job = 40\nconcurrency = 1\n")
        fake.fail_next_job()
        fake.fail_next_job()
        from flows.backfill import backfill

        state = backfill(workspace=str(workspace), config_file=str(cfg), return_state=True)
        drain_workers()
        assert state.is_completed(), state.message
        fr = read_flow_run(state.state_details.flow_run_id)
        summary = state.result()
        assert summary["swapped"] and fake.embed_requests > 0
    fig = table_figures(artifact_of(fr.id, "table"))
    assert fig["batch mode"] == "batch, then sync (batch mode off)"
    assert fig["batch mode switched off"].startswith("2 batch failure points")
    via_batch, via_sync = (int(x) for x in fig["chunks via batch / via sync"].split(" / "))
    assert via_sync == summary["chunks_embedded"] - via_batch > 0
    assert fig["tokens sent (batch)"] + fig["tokens sent (sync)"] == summary["tokens_sent"]
    assert read_flow_run(fr.id).name == "backfill-ws-full-batch"  # renamed after what it did
    assert "batch mode was switched off" in artifact_of(fr.id, "markdown").data
    ev = events_for(report.EVENT_FALLBACK_BATCH, flow_run_id=fr.id)
    assert len(ev) == 1 and "failure points" in ev[0].payload["reason"] and ev[0].payload["kind"] == "batch-to-sync"
    assert events_for(report.EVENT_SWAPPED, flow_run_id=fr.id)
    names = task_run_names(fr.id, until=lambda ns: any(n.startswith("embed-openai-group-") for n in ns))
    assert any(n.startswith("embed-openai-group-") for n in names)


def test_backfill_through_the_batch_api(prefect_api: Any, workspace: Path, tmp_path: Path) -> None:
    """The real flows.batch against the fake OpenAI Batch API: jobs as tasks, figures in the summary."""
    from tests.fakes.openai_fake import OpenAIFake

    with OpenAIFake(dims=64, batch_delay=0.05) as fake:
        cfg = write_config(tmp_path / "mc.toml", fake)
        # the transcripts too: their exchange vectors are counted apart from the chunks
        cfg.write_text('sources = ["memory", "sessions"]\n' + cfg.read_text())
        with cfg.open("a") as fh:
            fh.write("[batch]\npoll_interval_s = 0.05\nmax_requests_per_job = 40\n")
        from flows.backfill import backfill

        state = backfill(workspace=str(workspace), config_file=str(cfg), return_state=True)
        drain_workers()
        assert state.is_completed(), state.message
        fr = read_flow_run(state.state_details.flow_run_id)
        summary = state.result()
        assert summary["swapped"] and fake.embed_requests == 0 and fake.batch_creates >= 2
    fig = table_figures(artifact_of(fr.id, "table"))
    assert fig["batch jobs submitted"] == fake.batch_creates
    assert fig["batch job states"] == f"{fake.batch_creates} collected"
    assert fig["chunks via batch / via sync"] == f"{summary['chunks_embedded']} / 0"
    # issue 39: the jobs' transcript exchange vectors apart from their chunks
    assert summary["exchanges_embedded"] > 0 and summary["batch"]["exchanges_via_batch"] == summary["exchanges_embedded"]
    assert fig["part vectors via batch / via sync"] == f"{summary['exchanges_embedded']} / 0"
    assert summary["chunks_embedded"] <= summary["chunks_total"]
    assert fig["tokens sent (batch)"] == summary["tokens_sent"] > 0 and fig["tokens sent (sync)"] == 0
    assert fig["saving vs all-sync (USD)"] == pytest.approx(fig["estimated cost (USD)"], abs=1e-6)  # 50% off
    names = task_run_names(fr.id, until=lambda ns: any(n.startswith("batch-submit-openai-") for n in ns))
    assert any(n.startswith("batch-submit-openai-") for n in names)


def test_provider_that_keeps_failing_falls_back_and_says_so(prefect_api: Any, workspace: Path, tmp_path: Path,
                                                            openai_fake: Any) -> None:
    cfg = write_config(tmp_path / "mc.toml", openai_fake)
    cfg.write_text('fallback = "none"\n' + cfg.read_text())
    openai_fake.fail_next(n=None, status=400, message="Input is not allowed.")
    state, fr = run(workspace=str(workspace), config_file=str(cfg))
    assert state.is_completed(), state.message
    summary = state.result()
    assert summary["provider"] == "none" and summary["fallback"]["from"].startswith("openai/")
    assert summary["provider_reason"].startswith("fallback: openai")
    assert summary["swapped"] and summary["full_reason"].startswith("provider fallback from openai")
    fig = table_figures(artifact_of(fr.id, "table"))
    assert fig["provider fallback"].startswith("openai/text-embedding-3-small -> none/")
    ev = events_for(report.EVENT_FALLBACK_PROVIDER, flow_run_id=fr.id)
    assert len(ev) == 1 and ev[0].payload["from"].startswith("openai/") and "Input is not allowed" in ev[0].payload["reason"]
    assert "Fallbacks" in artifact_of(fr.id, "markdown").data
    assert events_for(report.EVENT_SWAPPED, flow_run_id=fr.id)[0].payload["provider"] == "none"


def test_provider_fallback_emits_an_event(prefect_api: Any, workspace: Path, tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    # gemini without an API key cannot initialise: the configured fallback takes over
    cfg = tmp_path / "mc.toml"
    cfg.write_text('provider = "gemini"\nfallback = "none"\n')
    monkeypatch.delenv("GEMINI_API_KEY", raising=False)
    monkeypatch.delenv("GOOGLE_API_KEY", raising=False)
    state, fr = run(workspace=str(workspace), config_file=str(cfg))
    assert state.is_completed(), state.message
    assert state.result()["provider"] == "none" and state.result()["provider_reason"].startswith("fallback: gemini")
    ev = events_for(report.EVENT_FALLBACK_PROVIDER, flow_run_id=fr.id)
    assert len(ev) == 1 and ev[0].payload["kind"] == "provider" and "gemini" in ev[0].payload["reason"]
    assert "Fallbacks" in artifact_of(fr.id, "markdown").data


def test_dask_local_cluster_gives_the_same_index_as_threads(prefect_api: Any, tmp_path: Path, openai_fake: Any,
                                                            workspace: Path) -> None:
    pytest.importorskip("prefect_dask", reason="needs the dask extra: pip install -e '.[dask]'")
    cfg = write_config(tmp_path / "mc.toml", openai_fake)
    a, b = tmp_path / "threads.sqlite", tmp_path / "dask.sqlite"
    state, _ = run(workspace=str(workspace), config_file=str(cfg), index_path=str(a))
    assert state.is_completed()
    n_threads = openai_fake.embedded_inputs
    state, fr = run(workspace=str(workspace), config_file=str(cfg), index_path=str(b), task_runner="dask",
                    dask_workers=2, embed_concurrency=2)
    assert state.is_completed(), state.message
    assert openai_fake.embedded_inputs == 2 * n_threads  # separate caches: everything embedded twice
    assert table_figures(artifact_of(fr.id, "table"))["embedding ran on"] == \
        "Prefect tasks on dask local cluster (2 processes x 1 threads)"
    ra, rb = index_rows(a), index_rows(b)
    assert [r[:6] for r in ra] == [r[:6] for r in rb] and len(ra) > 20
    va = np.frombuffer(b"".join(r[6] for r in ra), dtype="<f4")
    vb = np.frombuffer(b"".join(r[6] for r in rb), dtype="<f4")
    assert np.array_equal(va, vb)
    assert index_check(a) == index_check(b)
    # and the CLI's engine (this process, no Prefect) builds the same index
    local = load_settings(str(cfg), {"workspace": str(workspace), "index_path": str(tmp_path / "local.sqlite")})
    run_index(local)  # the LocalExecutor
    probes = ["postgres replication lag", "rate limit", "lisbon hotel", "deploy window"]
    assert index_content(a, probes) == index_content(b, probes) == index_content(local.index_file, probes)
    # the embed task runs ran on the cluster and were reported to the server, named by group
    n_groups = state.result()["embed_requests"]
    names = task_run_names(fr.id, until=lambda ns: sum(n.startswith("embed-openai-group-") for n in ns) >= n_groups)
    assert sum(n.startswith("embed-openai-group-") for n in names) == n_groups > 1
    assert len(run_artifacts(fr.id)) == 3


def _started_as(flow_run_id: Any) -> str:
    """The name a flow run began under (its "Beginning flow run '<name>'" log line)."""
    import re
    import time

    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId

    deadline = time.monotonic() + 30
    while True:
        with get_client(sync_client=True) as client:
            logs = client.read_logs(log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[flow_run_id])))
        for log in logs:
            m = re.search(r"Beginning flow run '([^']+)'", log.message)
            if m:
                return m.group(1)
        assert time.monotonic() < deadline, [log.message for log in logs]
        time.sleep(0.5)


def test_a_first_build_is_named_full_from_its_start(prefect_api: Any, workspace: Path, openai_fake: Any,
                                                    tmp_path: Path) -> None:
    """issue 39: a first build ran as `...-incremental` (`-incremental-batch` with batch mode on)
    and was renamed `-full` only at its end."""
    cfg = write_config(tmp_path / "mc.toml", openai_fake)
    state, fr = run(workspace=str(workspace), config_file=str(cfg))
    assert state.is_completed() and fr.name == "reindex-ws-full"
    assert _started_as(fr.id) == "reindex-ws-full"
    (workspace / "memory" / "2026-09-04.md").write_text("## 23:50\nReplica lag threshold now 45s.\n")
    state, fr = run(workspace=str(workspace), config_file=str(cfg))
    assert _started_as(fr.id) == "reindex-ws-incremental" == fr.name


def test_a_run_failing_on_a_bad_config_writes_its_notes_under_the_index_key(prefect_api: Any, workspace: Path,
                                                                            tmp_path: Path) -> None:
    """P5 (thirteenth session): a run that failed before its settings resolved wrote its notes under
    a key made of the whole workspace path (`reindex-tmp-...-ws-notes`), and with an `agent`
    parameter every agent's failure shared `reindex-index-notes`: now `<flow>-<index>-notes`, the
    key of every other run of that index (docs/deployments.md section 5)."""
    def notes(state: Any) -> tuple[str, str]:
        found = [a for a in run_artifacts(state.state_details.flow_run_id) if a.key and a.key.endswith("-notes")]
        assert len(found) == 1, [a.key for a in found]
        return found[0].key, found[0].data.splitlines()[0]

    state, _ = run(workspace=str(workspace), provider="none")
    assert state.is_completed() and notes(state)[0] == "reindex-ws-notes"
    (workspace / "memory-core.toml").write_text("provider = [broken\n")  # a bad config in the workspace
    (workspace / "memory" / "new.md").write_text("# new\n\nsomething new\n")
    state, fr = run(workspace=str(workspace))
    assert state.is_failed() and "not valid TOML" in state.message
    assert notes(state) == ("reindex-ws-notes", "# reindex ws: run failed")
    assert fr.name == "reindex-ws-incremental"
    # an agent's run whose config is broken: its own key, not one shared by every agent
    bad = tmp_path / "fleet.toml"
    bad.write_text("[agents\nlist = [")
    keys = set()
    for agent in ("alpha", "beta"):
        state, fr = run(agent=agent, config_file=str(bad))
        assert state.is_failed()
        keys.add(notes(state)[0])
        assert fr.name == f"reindex-{agent}-incremental"
    assert keys == {"reindex-alpha-notes", "reindex-beta-notes"}
