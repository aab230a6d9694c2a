"""Runs that stop, or meet a provider that changed: an audit of our own (docs/reliability.md,
"Runs that stop", R1-R4). Each test fails on the code before its fix.

R1: a stop that lands after the new index was published; R2: a provider whose vectors change
dimension; R3: signals meant for the whole run and the index writer process; R4: the partial
summary's ``from cache``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from memory_core.config import load_settings
from memory_core.errors import ProviderError
from memory_core.index.pipeline import run_index
from tests.conftest import ROOT, openai_settings
from tests.fakes.openai_fake import OpenAIFake


def _notes(ws: Path, n: int, prefix: str = "n") -> None:
    (ws / "memory").mkdir(parents=True, exist_ok=True)
    for i in range(n):
        (ws / "memory" / f"{prefix}{i:02d}.md").write_text(f"# note {prefix} {i}\n\nwords of note {prefix} {i}.\n")


def _indexed_then_a_new_note(tmp_path: Path, srv: OpenAIFake) -> Any:
    """Settings of a workspace of 3 notes, indexed, and then a 4th note (``memory/n03.md``) written."""
    ws = tmp_path / "ws"
    _notes(ws, 3)
    s = openai_settings(ws, srv)
    run_index(s)
    (ws / "memory" / "n03.md").write_text("# note 3\n\nA new note.\n")
    return s


def _temp_files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if ".tmp-" in p.name)


def _cli_env(**extra: str) -> dict[str, str]:
    return dict(os.environ, OPENAI_API_KEY="sk-test-key-0123456789", PYTHONPATH=str(ROOT), **extra)


@pytest.fixture(autouse=True)
def _ctrl_c_interrupts() -> Any:
    """Ctrl-C raises KeyboardInterrupt here and in the processes a test starts, as at a terminal: a
    test run started in the background by a non-interactive shell (a CI script's ``&``) inherits
    SIGINT ignored, and Python then installs no handler for it, in this process or (ignored
    signals survive exec) in the ones it starts; a handler set here is reset to the default in them."""
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)


# -- R3: the index writer process and signals meant for the whole run ----------------------------

@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_r3_a_signal_to_the_runs_process_group_is_the_runs_to_handle(tmp_path: Path, sig: int) -> None:
    """A Ctrl-C at a terminal (SIGINT to the foreground process group) reached the index writer
    child too: a KeyboardInterrupt traceback above the run's one line. A SIGTERM to the process
    group (`kill -- -PGID`) killed the child before it removed its temp file, and the run only
    learnt the file's name at verify: `.index.sqlite.tmp-*` stayed until the next run."""
    ws = tmp_path / "ws"
    _notes(ws, 60)
    with OpenAIFake(dims=64) as srv:
        cfg = tmp_path / "memory-core.toml"
        cfg.write_text(f'workspace = "{ws}"\nprovider = "openai"\nmodel = "text-embedding-3-small"\n'
                       f'[remote]\nbase_url = "{srv.base_url}"\ndimensions = 64\nmax_inputs_per_request = 4\n')
        srv.delay = 0.3
        proc = subprocess.Popen([sys.executable, "-m", "memory_core.apps.cli", "index", "--config", str(cfg),
                                 "--engine", "local", "--no-progress"], env=_cli_env(MEMORY_CORE_WRITER="process"),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
        deadline = time.monotonic() + 120
        # the writer process has made its temp file, and the run is embedding
        while (srv.embed_requests < 4 or not _temp_files(ws / ".memory-core")) and time.monotonic() < deadline \
                and proc.poll() is None:
            time.sleep(0.02)
        assert proc.poll() is None, proc.communicate()
        os.killpg(proc.pid, sig)  # as a terminal's Ctrl-C, or `kill -- -PGID`, reaches every process of the group
        _, err = proc.communicate(timeout=120)
    assert proc.returncode == (130 if sig == signal.SIGINT else 1), err
    assert "Traceback" not in err and err.count("\n") == 1, err
    assert "the live index was left as it was" in err
    assert _temp_files(ws / ".memory-core") == []


def test_r3_a_writer_process_killed_before_verify_leaves_no_temp_file(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The writer process killed (the OOM killer) while the run embeds: the run's one error,
    and its temp file is gone when the run ends, not at the next run."""
    from memory_core.embeddings.registry import create_provider
    from memory_core.errors import RunError
    from tests.test_streaming import _writer_children, kill_writer_on_first_embed

    monkeypatch.setenv("MEMORY_CORE_WRITER", "process")
    ws = tmp_path / "ws"
    _notes(ws, 12)
    with OpenAIFake(dims=64) as srv:
        s = openai_settings(ws, srv, remote={"max_inputs_per_request": 4})
        provider, reason = create_provider(s)
        kill_writer_on_first_embed(provider, monkeypatch, lambda: bool(_temp_files(ws / ".memory-core")))
        with pytest.raises(RunError, match="index writer process died"):
            run_index(s, provider=provider, reason=reason)
    assert _temp_files(ws / ".memory-core") == []
    assert not _writer_children()


# -- R1: a stop that lands after the new index was published ----------------------------------------

def _paths(index: Path) -> list[str]:
    from memory_core.storage.store import connect

    conn = connect(index, readonly=True)
    try:
        return sorted(r[0] for r in conn.execute("SELECT DISTINCT path FROM chunks"))
    finally:
        conn.close()


def _stop_after_publish(monkeypatch: pytest.MonkeyPatch, where: str, sig: int) -> None:
    """``sig`` to this process right after the new file is renamed over the live index
    (``rename``), or as the embedding cache's trim starts after an in-place commit (``trim``):
    a Ctrl-C or a SIGTERM that lands there."""
    from memory_core.index import pipeline, writer

    if where == "rename":
        monkeypatch.setenv("MEMORY_CORE_WRITER", "copy")
        real = writer.publish_temp

        def publish_then_stop(tmp: Path, live: Path) -> None:
            real(tmp, live)
            os.kill(os.getpid(), sig)

        monkeypatch.setattr(writer, "publish_temp", publish_then_stop)
    else:
        monkeypatch.setenv("MEMORY_CORE_WRITER", "inplace")
        real_trim = pipeline.trim_cache

        def stop_then_trim(*args: object) -> int:
            os.kill(os.getpid(), sig)
            return real_trim(*args)  # type: ignore[arg-type]

        monkeypatch.setattr(pipeline, "trim_cache", stop_then_trim)


@pytest.mark.parametrize("where", ["rename", "trim"])
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_r1_a_stop_after_the_publish_says_the_index_was_published(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                 capsys: pytest.CaptureFixture[str], where: str,
                                                                 sig: int) -> None:
    """A Ctrl-C or SIGTERM right after the rename (or the in-place commit, in the cache trim)
    said `interrupted; the live index was left as it was` (exit 130) or `error: stopped by
    SIGTERM; the live index was left as it was` (exit 1) while the live index held the new file.
    Now the line says the index was published and what was cut short; the exit status is the
    stop's (130 for Ctrl-C, 1 for SIGTERM)."""
    from memory_core.apps.cli import main

    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "MEMORY.md").write_text("# Memory\n\nThe staging database is pg-staging-3.\n")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-key-0123456789")
    with OpenAIFake(dims=64) as srv:
        cfg = tmp_path / "memory-core.toml"
        cfg.write_text(f'workspace = "{ws}"\nprovider = "openai"\nmodel = "text-embedding-3-small"\n'
                       f'[remote]\nbase_url = "{srv.base_url}"\ndimensions = 64\n')
        args = ["index", "--config", str(cfg), "--engine", "local", "--no-progress"]
        assert main(args) == 0
        capsys.readouterr()
        (ws / "memory").mkdir()
        (ws / "memory" / "2026-01-05.md").write_text("# 2026-01-05\n\nRotated the pg-staging-3 password.\n")
        _stop_after_publish(monkeypatch, where, sig)
        rc = main(args)
    err = capsys.readouterr().err
    assert _paths(ws / ".memory-core" / "index.sqlite") == ["MEMORY.md", "memory/2026-01-05.md"]  # published
    assert rc == (130 if sig == signal.SIGINT else 1), err
    assert "left as it was" not in err and "Traceback" not in err and "error" not in err, err
    said = "interrupted" if sig == signal.SIGINT else "stopped by SIGTERM"
    how = "swapped in" if where == "rename" else "updated in place"
    assert f"memory-core: {said} after the new index was published ({how})" in err, err
    assert "files: 1 new" in err and "cut short: trimming the embedding cache" in err, err


@pytest.mark.parametrize(("where", "sig"), [("trim", signal.SIGINT), ("rename", signal.SIGTERM)])
def test_r1_a_run_stopped_after_the_publish_carries_its_whole_summary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                       where: str, sig: int) -> None:
    """The API (and the flows) got a partial summary saying `swapped: False`, 0 from cache, the
    run "not updated": now the stop carries the run's whole summary, published, with what stopped
    it and what it cut short."""
    from memory_core.index.pipeline import RunCancelled

    ws = tmp_path / "ws"
    _notes(ws, 3)
    with OpenAIFake(dims=64) as srv:
        s = openai_settings(ws, srv)
        first = run_index(s)
        (ws / "memory" / "n03.md").write_text("# note 3\n\nA new note.\n")
        _stop_after_publish(monkeypatch, where, sig)
        with pytest.raises(KeyboardInterrupt if sig == signal.SIGINT else RunCancelled) as stopped:
            run_index(s)
        monkeypatch.undo()
        summary = stopped.value.run_summary  # type: ignore[attr-defined]
        assert summary.swapped and not summary.error
        assert summary.published == ("replaced" if where == "rename" else "in place")
        assert summary.stopped == ("interrupted" if sig == signal.SIGINT else "stopped by SIGTERM")
        assert len(summary.cut_short) == 1 and summary.cut_short[0].startswith("trimming the embedding cache")
        assert summary.files_new == 1 and summary.chunks_embedded == 1 and summary.chunks_total == first.chunks_total + 1
        assert summary.outcome() == ("swapped in" if where == "rename" else "updated in place") + f", then {summary.stopped}"
        if sig == signal.SIGTERM:
            assert "left as it was" not in str(stopped.value) and "after the new index was published" in str(stopped.value)
        assert _paths(s.index_file) == ["memory/n00.md", "memory/n01.md", "memory/n02.md", "memory/n03.md"]
        rerun = run_index(s)  # the index is whole and up to date
        assert not rerun.swapped and rerun.files_changed == rerun.files_new == 0 and rerun.chunks_embedded == 0


@pytest.mark.parametrize("first", [True, False])
def test_r1b_a_stop_while_the_published_runs_summary_is_assembled_carries_it(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch,
                                                                            first: bool) -> None:
    """A Ctrl-C while the run cleaned up its work folder after the publish (a second Ctrl-C after a
    first one in the cache trim, or the only one) escaped from the cleanup with no summary: the
    API's caller and the CLI learnt nothing of the published run. Now stops wait until the summary
    is whole, and the stop carries it (a second Ctrl-C is the same stop)."""
    from memory_core.index import pipeline

    with OpenAIFake(dims=64) as srv:
        s = _indexed_then_a_new_note(tmp_path, srv)
        if first:
            _stop_after_publish(monkeypatch, "trim", signal.SIGINT)
        real_cleanup = pipeline.cleanup_workdir

        def stop_in_cleanup(plan: object) -> None:
            if s.index_file.exists() and "memory/n03.md" in _paths(s.index_file):  # published
                os.kill(os.getpid(), signal.SIGINT)
            real_cleanup(plan)  # type: ignore[arg-type]

        monkeypatch.setattr(pipeline, "cleanup_workdir", stop_in_cleanup)
        with pytest.raises(KeyboardInterrupt) as stopped:
            run_index(s)
        monkeypatch.undo()
    summary = stopped.value.run_summary  # type: ignore[attr-defined]
    assert summary.swapped and not summary.error and summary.stopped == "interrupted"
    assert summary.files_new == 1 and summary.chunks_embedded == 1
    assert bool(summary.cut_short) == first  # the trim was cut short only by the first stop
    assert _paths(s.index_file)[-1] == "memory/n03.md"
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # the handler is Python's again


@pytest.mark.prefect_server
def test_r1_a_flow_run_stopped_after_the_publish_says_it_published(prefect_api: object, tmp_path: Path,
                                                                    request: pytest.FixtureRequest) -> None:
    """`index --engine prefect` sent SIGTERM in the steps after its publish (Prefect raises its
    TerminationSignal): the flow run's notes said `The live index was left as it was` and no
    `memory-core.index.swapped` event was emitted, though the index was the new one. Now the
    stop still ends the run (not Completed), its summary and notes say it published, and the
    event is there."""
    import re
    import textwrap

    from flows import report
    from tests.prefect_server import artifact_of, events_for, read_flow_run, shared_server, table_figures

    ws = tmp_path / "ws"
    _notes(ws, 3)
    with OpenAIFake(dims=64) as srv:
        s = openai_settings(ws, srv)
        run_index(s)
        cfg = tmp_path / "memory-core.toml"
        cfg.write_text(f'workspace = "{ws}"\nprovider = "openai"\nmodel = "text-embedding-3-small"\n'
                       f'[remote]\nbase_url = "{srv.base_url}"\ndimensions = 64\n')
        (ws / "memory" / "n03.md").write_text("# note 3\n\nA new note.\n")
        wrapper = tmp_path / "index_stopped_in_trim.py"  # the real CLI, SIGTERMed as its cache trim starts
        wrapper.write_text(textwrap.dedent("""
            import os, signal, sys
            from memory_core.index import pipeline
            def sigterm_in_trim(*args):
                os.kill(os.getpid(), signal.SIGTERM)
            pipeline.trim_cache = sigterm_in_trim
            from memory_core.apps.cli import main
            sys.exit(main())
        """))
        env = shared_server(request.config).env(OPENAI_API_KEY="sk-test-key-0123456789", PYTHONPATH=str(ROOT))
        proc = subprocess.run([sys.executable, str(wrapper), "index", "--config", str(cfg), "--engine", "prefect",
                               "--no-progress"], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0, proc.stderr
    assert _paths(s.index_file)[-1] == "memory/n03.md"  # published
    found = re.search(r"flow run: \S*?([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})", proc.stderr)
    assert found, proc.stderr
    fr_id = found.group(1)
    events = events_for(report.EVENT_SWAPPED, flow_run_id=fr_id)
    assert len(events) == 1 and events[0].payload["published"] == "in place" and events[0].payload["files_new"] == 1
    assert not read_flow_run(fr_id).state.is_completed()  # the stop still ends the run
    notes = artifact_of(fr_id, "markdown").data
    # what stopped it, as it was: a SIGTERM, not a cancel (it said "cancelled" until the eighteenth session)
    assert "stopped by SIGTERM after the new index was published (updated in place)" in notes, notes
    assert "left as it was" not in notes and "cut short: trimming the embedding cache" in notes, notes
    fig = table_figures(artifact_of(fr_id, "table"))
    assert fig["outcome"] == "updated in place, then stopped by SIGTERM" and fig["files new"] == 1, fig
    assert proc.returncode == 1 and "memory-core: stopped by SIGTERM after the new index was published" in proc.stderr


def test_r1_a_failure_after_the_publish_is_a_warning_of_a_published_run(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """The disk filling up as the embedding cache is trimmed after the publish failed the run
    (`not updated: cannot write the embedding cache ...; the live index was left as it was`)
    though the new index was live. Now the run is what it did, published, with a warning."""
    from memory_core.errors import RunError
    from memory_core.storage.cache import EmbeddingCache

    with OpenAIFake(dims=64) as srv:
        s = _indexed_then_a_new_note(tmp_path, srv)

        def disk_full(self: EmbeddingCache, max_entries: int | None) -> int:
            raise RunError(f"cannot write the embedding cache {self.path}: the disk is full; the live index was left"
                           " as it was")

        monkeypatch.setattr(EmbeddingCache, "evict", disk_full)
        summary = run_index(s)
    assert summary.swapped and not summary.error and summary.files_new == 1 and summary.chunks_embedded == 1
    warned = [w for w in summary.warnings if w.startswith("after the new index was published: cannot write")]
    assert warned and "left as it was" not in warned[0], summary.warnings
    assert _paths(s.index_file)[-1] == "memory/n03.md"


# -- R2: a provider whose vectors change dimension --------------------------------------------------

def test_r2_a_provider_that_changes_dimension_is_named_and_a_full_rebuild_takes_the_new_one(tmp_path: Path) -> None:
    """An OpenAI-compatible endpoint with a model memory-core does not know and no
    `remote.dimensions`, whose answers go from 64-d to 32-d: every incremental run failed with
    `cached vector for memory/n5.md has 32 dims, index has 64` (a vector just received, not a
    cached one), `--full` failed the same way (the old vectors from the live index, the new from
    the provider), and only deleting the index recovered."""
    from memory_core.api import Memory
    from memory_core.errors import RunError
    from memory_core.storage.indexmeta import IndexRecord
    from memory_core.storage.store import connect, probe_index

    ws = tmp_path / "ws"
    _notes(ws, 5)
    with OpenAIFake(dims=64) as srv:
        s = openai_settings(ws, srv, model="my-local-model", remote={"dimensions": None, "max_attempts": 1})
        first = run_index(s)
        assert first.swapped and (IndexRecord.from_meta(probe_index(s.index_file)[0]) or IndexRecord()).dims == 64
        live = s.index_file.read_bytes()
        srv.dims = 32  # the endpoint now serves a model that answers 32-d
        (ws / "memory" / "n05.md").write_text("# note 5\n\nA new note about replication.\n")
        for _ in range(2):  # the incremental runs say what changed, and leave the index whole
            with pytest.raises(RunError, match="the provider now returns 32-d vectors, the index holds 64-d") as no:
                run_index(s)
            assert "--full" in str(no.value) and "cached vector" not in str(no.value)
            assert s.index_file.read_bytes() == live
        with Memory(s, refresh=False) as memory:  # a search of the index left as it was says what to run
            stale = memory.answer("replication")
        assert "memory-core index --full" in f"{stale.note} {stale.fallback}", stale
        rebuilt = run_index(s, full=True)  # re-embeds what is not cached at 32-d, never mixes the two
        assert rebuilt.swapped and rebuilt.chunks_total == 6
        assert rebuilt.chunks_embedded + rebuilt.chunks_from_cache == 6 and rebuilt.chunks_from_cache >= 1
        assert (IndexRecord.from_meta(probe_index(s.index_file)[0]) or IndexRecord()).dims == 32
        conn = connect(s.index_file, readonly=True)
        try:
            sizes = {r[0] for r in conn.execute("SELECT length(embedding) FROM chunks")}
        finally:
            conn.close()
        assert sizes == {32 * 4}
        assert run_index(s).files_changed == 0  # incremental runs work again
        with Memory(s, refresh=False) as memory:  # and searches use the vectors (no keyword-only fallback)
            ans = memory.answer("replication")
        assert ans.results and ans.fallback is None and "keyword-only" not in ans.note, ans
        assert any(r["match"] in ("vector", "both") for r in ans.results)


def test_r2_a_long_lived_process_learns_the_new_dimension_too(tmp_path: Path) -> None:
    """The provider of a long-lived process (the MCP server, `watch`, the API's Memory) kept the
    size it learnt from its first answer: after the endpoint changed, every run failed with
    `openai returned 32-d vectors, expected 64` and a full rebuild too, until a restart."""
    from memory_core.errors import RunError
    from memory_core.index.indexer import Indexer
    from memory_core.storage.indexmeta import IndexRecord
    from memory_core.storage.store import probe_index

    ws = tmp_path / "ws"
    _notes(ws, 4)
    with OpenAIFake(dims=64) as srv:
        s = openai_settings(ws, srv, model="my-local-model", remote={"dimensions": None, "max_attempts": 1})
        with Indexer(s) as indexer:
            assert indexer.run().swapped
            srv.dims = 32
            (ws / "memory" / "n04.md").write_text("# note 4\n\nA new note about replication.\n")
            with pytest.raises(RunError, match="the provider now returns 32-d vectors, the index holds 64-d"):
                indexer.run()
            rebuilt = indexer.run(full=True)
        assert rebuilt.swapped and rebuilt.chunks_total == 5
        assert (IndexRecord.from_meta(probe_index(s.index_file)[0]) or IndexRecord()).dims == 32


# -- R4: the partial summary's "from cache" --------------------------------------------------------

def test_r4_a_failed_run_says_what_it_found_in_the_cache(tmp_path: Path) -> None:
    """A run that failed after finding vectors in the cache: its partial summary (the flow's
    summary artifact, the API's ``exc.run_summary``) said 0 from cache."""
    ws = tmp_path / "ws"
    _notes(ws, 20, "old")
    with OpenAIFake(dims=64) as srv:
        s = openai_settings(ws, srv, remote={"max_attempts": 1, "max_inputs_per_request": 4})
        first = run_index(s)
        assert first.chunks_total == 20
        _notes(ws, 8, "zz-new")
        srv.fail_next(1, status=400, message="bad request")
        with pytest.raises(ProviderError) as failed:
            run_index(s, full=True)
    part = failed.value.run_summary  # type: ignore[attr-defined]
    assert part.error and not part.swapped
    assert part.chunks_from_cache == 20 and part.headline()["from cache"] == 20


def test_r1c_a_stop_as_the_published_run_returns_still_carries_its_summary(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Left over by the thirteenth session: stops were held until a published run's summary was
    whole, but released before the run handed it to its caller, so a Ctrl-C in those few
    instructions (after ``_index_once`` returned, before the caller recorded the summary) escaped
    with no summary: the CLI and the API said nothing of a publish that had happened. The summary
    is now recorded while stops are still held. The stop is sent exactly there: the run's stages
    run unchanged, then the signal, then the return."""
    from memory_core.index import pipeline

    with OpenAIFake(dims=64) as srv:
        s = _indexed_then_a_new_note(tmp_path, srv)
        real = pipeline._index_once

        def then_a_stop(*a: Any, **k: Any) -> Any:
            summary = real(*a, **k)
            os.kill(os.getpid(), signal.SIGINT)  # Python raises KeyboardInterrupt here, on the way out
            return summary  # not reached

        monkeypatch.setattr(pipeline, "_index_once", then_a_stop)
        with pytest.raises(KeyboardInterrupt) as stopped:
            run_index(s)
        monkeypatch.undo()
    summary = getattr(stopped.value, "run_summary", None)
    assert summary is not None, "the stop escaped with no summary of the published run"
    assert summary.swapped and not summary.error and summary.stopped == "interrupted"
    assert summary.files_new == 1 and summary.chunks_embedded == 1
    assert _paths(s.index_file)[-1] == "memory/n03.md"


@pytest.mark.prefect_server
def test_a_failed_run_of_a_workspace_with_no_index_says_no_index_was_written(prefect_api: object,
                                                                             tmp_path: Path) -> None:
    """`prefect deployment run reindex/incremental --param workspace=/tmp/x/nope`: the run fails (no
    such workspace) and its notes said "The live index was left as it was; the next run starts
    again ...", though there is no index. They now say none was written; a failed run of an index
    that is there still says it was left as it was."""
    from flows.reindex import reindex
    from tests.prefect_server import artifact_of

    state = reindex(workspace=str(tmp_path / "x" / "nope"), return_state=True)
    assert state.is_failed(), (state.type, state.message)
    notes = artifact_of(state.state_details.flow_run_id, "markdown").data
    assert "No index was written: there is no index yet" in notes and "left as it was" not in notes, notes

    ws = tmp_path / "ws"
    _notes(ws, 2)
    run_index(load_settings(None, {"workspace": str(ws), "provider": "none"}))
    # an OpenAI run with no API key: it fails once its settings resolved, the index there as it was
    state = reindex(workspace=str(ws), provider="openai", return_state=True)
    assert state.is_failed(), (state.type, state.message)
    notes = artifact_of(state.state_details.flow_run_id, "markdown").data
    assert "The live index was left as it was" in notes and "No index was written" not in notes, notes
