"""Watch mode on real files (watchfiles) and a real keyword-only index: changes reach the index,
bursts are debounced, one run at a time, one follow-up for changes made during a run."""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import subprocess
import sys
import threading
import time
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from memory_core.apps.watch import DeploymentRunner, make_runner
from memory_core.config import Settings, load_settings
from memory_core.errors import RunError, UsageError
from memory_core.index.indexer import DeploymentOutcome, Indexer, RunRecord
from memory_core.index.runtypes import RunSummary
from memory_core.runtime.watching import SourceFilter, Watcher
from memory_core.storage.store import connect
from tests.conftest import ROOT

DEBOUNCE = 0.25


def wait_for(pred: Callable[[], Any], timeout: float = 10.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        got = pred()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.03)


def indexed_paths(settings: Settings) -> set[str]:
    if not settings.index_file.exists():
        return set()
    conn = connect(settings.index_file, readonly=True)
    try:
        return {r[0] for r in conn.execute("SELECT path FROM files")}
    finally:
        conn.close()


def indexed_text(settings: Settings, path: str) -> str:
    conn = connect(settings.index_file, readonly=True)
    try:
        return "\n".join(r[0] for r in conn.execute("SELECT text FROM chunks WHERE path = ?", (path,)))
    finally:
        conn.close()


class CountingRunner:
    """The in-process runner, counting runs and concurrency; ``gate`` can hold a run."""

    def __init__(self, settings: Settings) -> None:
        self.inner = make_runner(settings, env={})
        self.description = self.inner.description
        self.calls = 0
        self.active = 0
        self.max_active = 0
        self.lock = threading.Lock()
        self.gate: threading.Event | None = None
        self.entered = threading.Event()
        self.fail_next = 0

    def __call__(self) -> Any:
        with self.lock:
            self.calls += 1
            self.active += 1
            self.max_active = max(self.max_active, self.active)
        try:
            self.entered.set()
            if self.gate is not None:
                assert self.gate.wait(10)
            if self.fail_next:
                self.fail_next -= 1
                raise RunError("simulated provider outage")
            return self.inner()
        finally:
            with self.lock:
                self.active -= 1

    def close(self) -> None:
        self.inner.close()


@pytest.fixture
def settings(workspace: Path) -> Settings:
    return load_settings(None, {"workspace": str(workspace), "provider": "none"})


@contextlib.contextmanager
def started_watcher(settings: Settings, runner: Any, debounce: float) -> Iterator[Watcher]:
    """A Watcher of ``settings`` calling ``runner``, started and ready; stopped on exit."""
    w = Watcher(settings, runner, debounce=debounce, root_check_s=0.3, retry_initial_s=0.2)
    w.start()
    try:
        assert w.wait_ready(15), "watcher did not start"
        yield w
    finally:
        w.stop()


@pytest.fixture
def watching(settings: Settings) -> Iterator[tuple[Watcher, CountingRunner]]:
    runner = CountingRunner(settings)
    with started_watcher(settings, runner, DEBOUNCE) as w:
        yield w, runner
    assert w._thread is not None and not w._thread.is_alive()


def test_edits_creations_deletions_and_renames_reach_the_index(settings, watching):
    w, runner = watching
    mem = settings.workspace_dir / "memory"
    assert runner.calls == 1 and "memory/2026-09-04.md" in indexed_paths(settings)  # the start-up run

    # edit
    note = mem / "2026-09-04.md"
    note.write_text(note.read_text() + "\nThe narwhal drill passed.\n")
    wait_for(lambda: "narwhal" in indexed_text(settings, "memory/2026-09-04.md"), what="edit")
    # create, also in a directory made after the watch started
    (mem / "fresh.md").write_text("# Fresh\nwombat protocol notes\n")
    (mem / "later" / "deeper").mkdir(parents=True)
    (mem / "later" / "deeper" / "deep.md").write_text("# Deep\naxolotl\n")
    (settings.workspace_dir / "MEMORY.md").write_text("# Memory\nokapi preferences\n")
    wait_for(lambda: {"memory/fresh.md", "memory/later/deeper/deep.md"} <= indexed_paths(settings), what="creations")
    wait_for(lambda: "okapi" in indexed_text(settings, "MEMORY.md"), what="MEMORY.md edit")
    # delete
    (mem / "howto" / "deploy-checklist.md").unlink()
    wait_for(lambda: "memory/howto/deploy-checklist.md" not in indexed_paths(settings), what="deletion")
    # rename a file, then a directory
    (mem / "fresh.md").rename(mem / "renamed.md")
    wait_for(lambda: "memory/renamed.md" in (p := indexed_paths(settings)) and "memory/fresh.md" not in p,
             what="file rename")
    (mem / "projects").rename(mem / "archive")
    wait_for(lambda: "memory/archive/ci-migration.md" in (p := indexed_paths(settings))
             and not any(x.startswith("memory/projects/") for x in p), what="directory rename")
    # files that are not sources never start a run
    w.wait_idle(10)
    calls = runner.calls
    (settings.workspace_dir / "notes" / "todo.txt").write_text("not a source\n")
    (mem / "scratch.txt").write_text("not a source either\n")
    time.sleep(DEBOUNCE + 0.4)
    assert runner.calls == calls
    assert runner.max_active == 1
    assert all(r.ok for r in w.runs), [r.error for r in w.runs]


def test_a_burst_of_100_edits_makes_one_or_two_runs(settings, watching):
    w, runner = watching
    before = runner.calls
    target = settings.workspace_dir / "memory" / "2026-09-04.md"
    base = target.read_text()
    for i in range(100):
        target.write_text(base + f"\nedit number {i} token burst{i}x\n")
    wait_for(lambda: "burst99x" in indexed_text(settings, "memory/2026-09-04.md"), what="the last edit")
    time.sleep(DEBOUNCE + 0.4)  # anything still queued would have started by now
    assert w.wait_idle(10)
    assert 1 <= runner.calls - before <= 2, [r.reason for r in w.runs]


def test_changes_during_a_run_cause_exactly_one_follow_up(settings, watching):
    w, runner = watching
    mem = settings.workspace_dir / "memory"
    assert w.wait_idle(10)
    before = runner.calls
    runner.gate = threading.Event()
    runner.entered.clear()
    (mem / "a.md").write_text("alpha marmot\n")
    assert runner.entered.wait(10)  # run 1 is in flight (held at the gate)
    for name, word in [("b.md", "bravo"), ("c.md", "charlie"), ("d.md", "delta")]:
        (mem / name).write_text(f"{word} marmot\n")
        time.sleep(0.05)
    time.sleep(DEBOUNCE + 0.3)  # well past the debounce: still no second run while one is running
    assert runner.calls == before + 1 and runner.max_active == 1
    runner.gate.set()
    wait_for(lambda: {"memory/b.md", "memory/c.md", "memory/d.md"} <= indexed_paths(settings), what="follow-up")
    time.sleep(DEBOUNCE + 0.3)
    assert w.wait_idle(10)
    assert runner.calls == before + 2, [r.reason for r in w.runs]
    assert runner.max_active == 1


def test_a_failed_run_is_retried_without_new_changes(settings, watching):
    w, runner = watching
    runner.fail_next = 1
    (settings.workspace_dir / "memory" / "retry.md").write_text("pangolin\n")
    wait_for(lambda: "memory/retry.md" in indexed_paths(settings), what="the retry")
    assert w.wait_idle(10)  # the run's record is kept just after its swap
    failed = [r for r in w.runs if not r.ok]
    assert len(failed) == 1 and "simulated provider outage" in failed[0].error
    assert w.runs[-1].ok and w.runs[-1].reason == "retry"


def test_stop_wakes_every_wait_of_the_watcher(settings):
    """stop() ends the watch at once when no run is going: closing a Memory or the MCP server
    took 1.5-5 s (the watch loop slept its root check, the start-up waited up to 5 s for the
    watches) without looking at the stop. With a root check an hour apart, only a stop that
    wakes the watch loop lets its threads end; no timing is measured."""
    runner = CountingRunner(settings)
    w = Watcher(settings, runner, debounce=DEBOUNCE, root_check_s=3600)
    before = set(threading.enumerate())
    w.start()
    try:
        assert w.wait_ready(15), "watcher did not start"
        assert runner.calls == 1  # the start-up run
        started = [t for t in threading.enumerate() if t not in before]
        assert {t.name for t in started} >= {"memory-core-watch", "memory-core-watchfiles",
                                             "memory-core-watchfiles-group"}
    finally:
        w.stop(timeout=60)
    assert w._thread is not None and not w._thread.is_alive()
    # the watch loop (stuck in its hour-long root check before) and its watchfiles threads ended too
    assert [t.name for t in started if t.is_alive()] == []


def test_a_watcher_stopped_before_its_watches_are_in_place_ends_without_a_run(settings):
    """A stop during the start-up (a Memory closed right after it was opened) does not wait for
    the watches (it waited up to 5 s) and starts no start-up run after the stop (it did)."""
    runner = CountingRunner(settings)
    w = Watcher(settings, runner, debounce=DEBOUNCE, root_check_s=3600)
    w.start()  # watchfiles' first report takes its 500 ms timeout: the stop comes well before
    w.stop(timeout=60)
    assert w._thread is not None and not w._thread.is_alive()
    assert runner.calls == 0 and w.runs == []


def test_transcripts_follow_the_delta_thresholds(workspace):
    s = load_settings(None, {"workspace": str(workspace), "provider": "none", "sources": ["memory", "sessions"],
                             "sessions": {"delta_bytes": 4000, "delta_messages": 5}})
    runner = CountingRunner(s)
    w = Watcher(s, runner, debounce=DEBOUNCE, root_check_s=0.3)
    w.start()
    try:
        assert w.wait_ready(15)
        transcript = sorted((workspace / "sessions").glob("*.jsonl"))[0]
        rel = f"sessions/{transcript.name}"
        assert rel in indexed_paths(s)
        line = '{"type":"message","message":{"role":"user","content":"%s"}}\n'
        with transcript.open("a") as fh:  # one small message: below both thresholds
            fh.write(line % "the capybara budget")
        wait_for(lambda: len(w.runs) >= 2, what="a run for the small append")
        small = w.runs[-1]
        assert small.ok and isinstance(small.summary, RunSummary)
        assert small.summary.sessions_carried == 1 and not small.summary.swapped
        assert "capybara" not in indexed_text(s, rel)
        with transcript.open("a") as fh:  # past delta_bytes: reindexed
            fh.write(line % ("the capybara budget was approved " + "x" * 4200))
        wait_for(lambda: "capybara" in indexed_text(s, rel), what="the transcript reindex")
    finally:
        w.stop()


def test_source_filter_matches_discovery_rules(settings, tmp_path):
    extra = tmp_path / "extra"
    extra.mkdir()
    s = settings.model_copy(update={"extra_paths": [str(extra), "notes/reading-list.md"]})
    f = SourceFilter(s)
    ws = s.workspace_dir
    assert f.relevant(str(ws / "MEMORY.md")) and f.relevant(str(ws / "memory" / "x" / "y.md"))
    assert f.relevant(str(extra / "a.md")) and f.relevant(str(ws / "notes" / "reading-list.md"))
    assert not f.relevant(str(ws / "notes" / "restaurants.md"))  # only the named extra file
    assert not f.relevant(str(ws / "memory" / "a.txt"))
    assert not f.relevant(str(s.index_file)) and not f.relevant(str(ws / ".memory-core" / "x.md"))
    assert not f.relevant(str(ws / "sessions" / "a.jsonl"))  # sessions are not a source here
    plan = f.plan()
    assert str(ws / "memory") in plan.recursive and str(extra) in plan.recursive
    assert str(ws) in plan.flat and str(ws / "notes") in plan.flat
    # an index kept inside a watched folder: its own files never start a run (no run loop)
    inside = SourceFilter(settings.model_copy(update={"index_path": str(ws / "memory" / "idx" / "i.sqlite")}))
    for own in ["i.sqlite", "i.sqlite.lock", "i.cache.sqlite", ".i.sqlite.tmp-12-ab", ".memory-core-work",
                ".memory-core-work/20261101T101010-abc123", ".memory-core-work/20261101T101010-abc123/x.md"]:
        assert not inside.relevant(str(ws / "memory" / "idx" / own)), own
    assert inside.relevant(str(ws / "memory" / "idx" / "note.md"))


def test_make_runner_picks_deployment_only_with_a_server(settings, monkeypatch):
    assert isinstance(make_runner(settings, env={}), Indexer)
    assert isinstance(make_runner(settings, env={"PREFECT_API_URL": "http://127.0.0.1:4200/api"}), Indexer)
    with pytest.raises(UsageError, match="PREFECT_API_URL"):
        make_runner(settings, deployment="nightly", env={})
    r = make_runner(settings, deployment="nightly", config_file="/etc/mc.toml", told={"provider": "none"},
                    env={"PREFECT_API_URL": "http://127.0.0.1:4200/api"})
    assert isinstance(r, DeploymentRunner) and r.name == "reindex/nightly"

    # a stand-in for prefect.deployments (no server, and prefect is not imported)
    calls: list[dict[str, Any]] = []
    outcome = {"state": "Completed"}

    class State:
        def __init__(self, name: str) -> None:
            self.name, self.message = name, "boom" if name == "Failed" else None

        def is_final(self) -> bool:
            return self.name in ("Completed", "Failed", "Cancelled")

        def is_completed(self) -> bool:
            return self.name == "Completed"

        def is_cancelled(self) -> bool:
            return self.name == "Cancelled"

    def run_deployment(**kw: Any) -> Any:
        calls.append(kw)
        return types.SimpleNamespace(name="calm-otter", id="42", state=State(outcome["state"]))

    fake = types.ModuleType("prefect.deployments")
    fake.run_deployment = run_deployment  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "prefect", types.ModuleType("prefect"))
    monkeypatch.setitem(sys.modules, "prefect.deployments", fake)
    done = r()
    assert done == DeploymentOutcome("reindex/nightly", "calm-otter", "Completed", flow_run_id="42")
    # the JSON `watch --json` prints, as before the result was typed
    assert done.to_dict() == {"deployment": "reindex/nightly", "flow_run": "calm-otter", "flow_run_id": "42",
                              "state": "Completed"}
    assert RunRecord(2, "1 change", 0.0, 1.5, ok=True, summary=done).line() == \
        "run 2 (1 change, 1.50s): deployment run calm-otter completed"
    params = calls[0]["parameters"]  # the reindex flow's flat parameters, None values left out
    assert None not in params.values()
    assert calls[0]["name"] == "reindex/nightly" and params["full"] is False
    assert params["workspace"] == str(settings.workspace_dir) and params["index_path"] == str(settings.index_file)
    assert params["config_file"] == "/etc/mc.toml" and params["provider"] == "none"
    # only what the watcher was told: the deployment keeps its own (or its index's) sources
    assert "sources" not in params and "extra_paths" not in params and "model" not in params
    outcome["state"] = "Cancelled"  # the deployment's concurrency limit: another run is on it
    assert r().to_dict() == {"deployment": "reindex/nightly", "flow_run": "calm-otter", "state": "Cancelled",
                             "note": "another run is on it"}
    outcome["state"] = "Failed"
    with pytest.raises(RunError, match="ended Failed: boom"):
        r()
    outcome["state"] = "Running"
    with pytest.raises(RunError, match="did not finish"):
        r()


def test_cli_watch_end_to_end(workspace):
    s = load_settings(None, {"workspace": str(workspace), "provider": "none"})
    proc = subprocess.Popen(
        [sys.executable, "-m", "memory_core.apps.cli", "watch", "-w", str(workspace), "--provider", "none",
         "--debounce", "0.2"], cwd=str(ROOT), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(x) for x in proc.stdout], daemon=True).start()  # type: ignore[union-attr]

    def next_line(timeout: float = 15) -> str:
        try:
            return lines.get(timeout=timeout)
        except queue.Empty:
            proc.kill()
            raise AssertionError(f"no output; stderr: {proc.stderr.read()}") from None  # type: ignore[union-attr]

    try:
        first = next_line()
        assert first.startswith("run 1 (startup"), first
        (workspace / "memory" / "cli-watch.md").write_text("# CLI\nthe quetzal rule\n")
        second = next_line()
        assert second.startswith("run 2 (1 change") and "1 new" in second, second
        assert "memory/cli-watch.md" in indexed_paths(s)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            rc = proc.wait(10)
        except subprocess.TimeoutExpired:  # pragma: no cover
            proc.kill()
            proc.wait()
            raise
    err = proc.stderr.read()  # type: ignore[union-attr]
    assert rc == 0, err
    assert "watching" in err and "watch stopped" in err and "Traceback" not in err


def test_library_modules_do_not_import_prefect():
    code = ("import sys, memory_core.apps.cli, memory_core.apps.watch, memory_core.export.files, memory_core.apps.mcp_server;"
            "bad = sorted(m for m in sys.modules if m == 'prefect' or m.startswith('prefect.'));"
            "sys.exit(1 if bad else 0)")
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    assert subprocess.run([sys.executable, "-c", code], cwd=str(ROOT), env=env, timeout=60).returncode == 0


@pytest.mark.prefect_server
def test_watch_refuses_a_deployment_the_server_does_not_have(workspace, request):
    """issue 39: `watch --deployment NAME` with a deployment that does not exist printed a
    traceback ending `ObjectNotFound: None` on every run and retried for ever: checked at
    start, one line, exit 2."""
    import subprocess

    from tests.conftest import ROOT
    from tests.prefect_server import shared_server

    env = shared_server(request.config).env(PYTHONPATH=str(ROOT))
    try:
        proc = subprocess.run([sys.executable, "-m", "memory_core.apps.cli", "watch", "-w", str(workspace),
                               "--deployment", "no-such-deployment", "--provider", "none"],
                              env=env, capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"watch kept running: {exc.stderr!r}")
    assert proc.returncode == 2, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "no deployment reindex/no-such-deployment on http://127.0.0.1:" in lines[0]
    assert not (workspace / ".memory-core").exists()  # nothing was run


@pytest.mark.parametrize("debounce", ["nan", "inf", "1e12", "-1"])
def test_a_debounce_out_of_range_is_refused_before_watching(workspace: Path, debounce: str,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    """``--debounce nan`` never ran a change and ``inf`` / ``1e12`` crashed the first wait with an
    OverflowError traceback (the thirty-eighth session's audit): one line, exit 2, nothing watched."""
    from memory_core.apps.cli import main

    assert main(["watch", "-w", str(workspace), "--debounce", debounce]) == 2
    err = capsys.readouterr().err
    assert "--debounce must be between 0 and 3600 seconds" in err and "Traceback" not in err
    with pytest.raises(UsageError):
        Watcher(load_settings(None, {"workspace": str(workspace), "provider": "none"}), object(),  # type: ignore[arg-type]
                debounce=float(debounce))


def test_a_configured_debounce_past_an_hour_is_a_config_error(workspace: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    from memory_core.apps.cli import main

    cfg = workspace / "memory-core.toml"
    cfg.write_text("[sync]\nwatch_debounce_ms = 10000000000000000\n")
    assert main(["watch", "-w", str(workspace), "-c", str(cfg)]) == 2
    err = capsys.readouterr().err
    assert "watch_debounce_ms" in err and "Traceback" not in err


def test_a_run_skipped_because_another_holds_the_index_is_retried(settings):
    """Audit E (the thirty-ninth session): under `watch --deployment`, a run that ended Skipped
    (another run held the index: "the next run will catch up") was taken as done; with no further
    file event the new note waited for the 15-minute schedule. The deployment's answer is given
    here as `DeploymentRunner` returns it (tests/test_deployments.py runs the real one)."""
    from memory_core.index.indexer import DeploymentOutcome

    inner = CountingRunner(settings)
    calls: list[str] = []

    def runner() -> Any:
        calls.append("run")
        if len(calls) == 2:  # the run for the new note: another run holds the index
            return DeploymentOutcome("reindex/incremental", "run-2", "Skipped", note="another run is on it")
        return inner()

    runner.description = "a deployment"  # type: ignore[attr-defined]
    runner.close = inner.close  # type: ignore[attr-defined]
    with started_watcher(settings, runner, DEBOUNCE) as w:
        (settings.workspace_dir / "memory" / "skipped.md").write_text("okapi\n")
        wait_for(lambda: "memory/skipped.md" in indexed_paths(settings), what="the retry of the skipped run")
        assert w.wait_idle(10)
        assert len(calls) >= 3 and w.runs[-1].reason == "retry"
