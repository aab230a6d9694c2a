"""What Prefect adds to a reindex run, asserted without timings (bench/prefect_overhead.py
measures the seconds), against a real Prefect server (tests/prefect_server.py):

- a run with nothing to do creates one task run (discovery), writes no artifacts, leaves the
  live index file alone, and says so in its state message; one with warnings still reports them;
- a run with work hands the run plan and the chunk result (they list every file) to the stage
  tasks wrapped in ``quote``, so Prefect does not walk them (~1.7 s a task at 10k files).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest
from prefect.utilities.annotations import quote

from flows.reindex import reindex
from tests.prefect_server import (
    artifact_of,
    drain_workers,
    read_flow_run,
    run_artifacts,
    shared_server,
    table_figures,
    task_run_names,
)

pytestmark = pytest.mark.prefect_server


@pytest.fixture(scope="module")
def prefect_api(request: pytest.FixtureRequest) -> Any:
    srv = shared_server(request.config)
    with srv.settings():
        drain_workers()
        yield srv
        drain_workers()


def run(**kwargs: Any) -> Any:
    state = reindex(**kwargs, return_state=True)
    drain_workers()
    return state, read_flow_run(state.state_details.flow_run_id)


def file_id(path: Path) -> tuple[int, int, str]:
    st = path.stat()
    return st.st_ino, st.st_mtime_ns, hashlib.sha256(path.read_bytes()).hexdigest()


def test_noop_run_has_one_task_run_no_artifacts_and_keeps_the_index(prefect_api: Any, workspace: Path) -> None:
    common = {"workspace": str(workspace), "provider": "none"}
    state, _ = run(**common)
    assert state.is_completed() and state.result()["swapped"]
    index = workspace / ".memory-core" / "index.sqlite"
    before = file_id(index)

    state, fr = run(**common)
    assert state.is_completed() and state.name == "Completed", state.message
    summary = state.result()
    assert not summary["swapped"] and summary["files_new"] == summary["files_changed"] == summary["files_removed"] == 0
    assert state.message == f"nothing to do: {summary['files_unchanged']} files unchanged"
    # the server records task runs from events, asynchronously: give a stray stage task a second to show
    assert task_run_names(fr.id, until=lambda ns: len(ns) > 1, timeout=1.0) == ["discover-ws"]
    assert run_artifacts(fr.id) == []
    assert file_id(index) == before  # not rebuilt, not swapped, not touched
    assert not (index.parent / ".memory-core-work").exists()

    # nothing to do, but something to say: the warnings still reach the notes and the summary
    missing = str(workspace / "missing.md")
    state, _ = run(**common, extra_paths=[missing])
    assert state.is_completed(), state.message
    state, fr = run(**common, extra_paths=[missing])
    assert state.is_completed() and not state.result()["swapped"]
    assert "missing.md does not exist" in artifact_of(fr.id, "markdown").data
    assert table_figures(artifact_of(fr.id, "table"))["outcome"] == "unchanged, nothing to do"


def test_stage_tasks_get_their_inputs_quoted(prefect_api: Any, workspace: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """The stage tasks take the plan (every file of the run) wrapped in quote(): unquoted,
    Prefect walks it for upstream futures and cache keys (~1.7 s a task at 10k files)."""
    import flows.executor as mod

    real = mod.stage_task
    seen: list[tuple[str, Any]] = []

    class Spy:
        def with_options(self, **kw: Any) -> Any:
            task = real.with_options(**kw)

            def call(arg: Any) -> Any:
                seen.append((kw["name"], arg))
                return task(arg)

            return call

    monkeypatch.setattr(mod, "stage_task", Spy())
    state, fr = run(workspace=str(workspace), provider="none")
    assert state.is_completed() and state.result()["swapped"], state.message
    assert [n for n, _ in seen] == ["discover", "build"]
    assert all(isinstance(a, quote) for _, a in seen)
    # the tasks got the values, not the wrappers: they ran, and the index is complete
    names = task_run_names(fr.id, until=lambda ns: "build-ws" in ns)
    assert {"discover-ws", "build-ws"} <= set(names)
    assert state.result()["chunks_total"] > 20
