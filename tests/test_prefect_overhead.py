"""What Prefect adds to a reindex run, asserted without timings (bench/prefect_overhead.py
measures the seconds), against a real Prefect server (tests/prefect_server.py):

- a run with nothing to do creates one task run (discovery), writes no artifacts, leaves the
  live index file alone, and says so in its state message; one with warnings still reports them;
- a run with work hands the stage tasks the key of their call, not the run plan (it lists every
  file): Prefect does not walk it (~1.7 s a task at 10k files), and the build task's context,
  which a Dask task runner pickles for every embed task, holds no live objects.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest

import tasks.stages as stages
from flows.reindex import reindex
from tests.prefect_server import (
    artifact_of,
    drain_workers,
    read_flow_run,
    run_artifacts,
    table_figures,
    task_run_names,
)

pytestmark = pytest.mark.prefect_server


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


def test_stage_tasks_get_a_key_not_their_inputs(prefect_api: Any, workspace: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """The stage tasks take a short key, not the plan (every file of the run) and the live
    executor and cache: Prefect would walk those for upstream futures and cache keys (~1.7 s a
    task at 10k files), and a Dask runner pickles the build task's parameters with every embed
    task submitted from it (tasks/stages.py)."""
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
    assert all(isinstance(a, str) and len(a) < 40 for _, a in seen), seen
    assert not stages._calls  # each call's entry is dropped once its task is done
    # the tasks found their calls by key: they ran, and the index is complete
    names = task_run_names(fr.id, until=lambda ns: "build-ws" in ns)
    assert {"discover-ws", "build-ws"} <= set(names)
    assert state.result()["chunks_total"] > 20


def test_stage_task_pickles_without_the_filed_calls() -> None:
    """A Dask runner pickles the running stage task with every embed task submitted from it
    (Prefect's task run context), its function by value with the globals it names: those must
    never reach the table of filed calls (live executors, connections) or its lock."""
    import threading

    import cloudpickle

    stages._calls["probe"] = (print, (threading.Lock(),))
    try:
        cloudpickle.dumps(stages.stage_task.with_options(name="build", task_run_name="build-ws"))
    finally:
        del stages._calls["probe"]
