"""A cancel of a flow run that `memory-core index --engine prefect` runs in its own process, set
through the API of a real Prefect server (what `prefect flow-run cancel ID` and the UI's Cancel
do: the run goes Cancelling). No worker or runner acts on that for an in-process run: the run
watches its own state (flows/reindex.py `_CancelWatch`) and stops itself.

P3 (the thirteenth session's audit): the cancel was ignored: the run went on embedding,
published its index, the CLI exited 0, and the flow run stayed Cancelling for ever."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import EXAMPLES, ROOT
from tests.fakes.openai_fake import OpenAIFake
from tests.prefect_server import artifact_of, read_flow_run, shared_server

pytestmark = pytest.mark.prefect_server

UUID = re.compile(r"flow run: \S*?([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})")


def _cancel(flow_run_id: str) -> None:
    """What `prefect flow-run cancel` does: propose Cancelling."""
    from prefect.client.orchestration import get_client
    from prefect.states import Cancelling

    with get_client(sync_client=True) as client:
        client.set_flow_run_state(flow_run_id, Cancelling(message="cancelled by the test"))


def _config(path: Path, ws: Path, base_url: str) -> None:
    path.write_text(
        f'workspace = "{ws}"\nprovider = "openai"\nmodel = "text-embedding-3-small"\n'
        f'[remote]\nbase_url = "{base_url}"\ndimensions = 64\nmax_inputs_per_request = 8\nbackoff_initial_s = 0.01\n')


class _Cli:
    """The CLI in a subprocess, its stderr read as it comes (the flow run's URL is its first word)."""

    def __init__(self, args: list[str], env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.err: list[str] = []
        self._reader = threading.Thread(target=lambda: self.err.extend(iter(self.proc.stderr.readline, "")),  # type: ignore[union-attr]
                                        daemon=True)
        self._reader.start()

    def flow_run_id(self, timeout: float = 120) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = UUID.search("".join(self.err))
            if found:
                return found.group(1)
            assert self.proc.poll() is None, "".join(self.err)
            time.sleep(0.1)
        raise AssertionError("no flow run URL: " + "".join(self.err))

    def wait(self, timeout: float) -> tuple[int, str, str]:
        try:
            out = self.proc.stdout.read() if self.proc.wait(timeout) is not None else ""  # type: ignore[union-attr]
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise AssertionError("the CLI went on after the cancel: " + "".join(self.err)) from None
        self._reader.join(10)
        return self.proc.returncode, out, "".join(self.err)


def _workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    shutil.copytree(EXAMPLES / "workspace", ws, ignore=shutil.ignore_patterns(".memory-core"))
    return ws


def _index_then_cancel(tmp_path: Path, request: pytest.FixtureRequest, ws: Path, srv: Any, *, per_request: int,
                       timeout: float) -> tuple[int, str, str, str, float]:
    """`memory-core index --engine prefect` of ``ws`` on ``srv``, its flow run cancelled through the API
    once the provider has answered a request: (exit code, stdout, stderr, flow run id, seconds from
    the cancel to the exit)."""
    cfg = tmp_path / "memory-core.toml"
    _config(cfg, ws, srv.base_url)
    cfg.write_text(cfg.read_text().replace("max_inputs_per_request = 8", f"max_inputs_per_request = {per_request}"))
    env = shared_server(request.config).env(OPENAI_API_KEY="sk-test-key-0123456789", PYTHONPATH=str(ROOT))
    cli = _Cli([sys.executable, "-m", "memory_core.apps.cli", "index", "--config", str(cfg), "--engine", "prefect",
                "--no-progress"], env)
    run_id = cli.flow_run_id()
    deadline = time.monotonic() + 120
    while not srv.sync_billed_texts and time.monotonic() < deadline:
        time.sleep(0.1)
    assert srv.sync_billed_texts, "".join(cli.err)
    t0 = time.monotonic()
    _cancel(run_id)
    code, out, err = cli.wait(timeout=timeout)
    return code, out, err, run_id, time.monotonic() - t0


def _final_state(flow_run_id: str, timeout: float = 30) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        state = read_flow_run(flow_run_id).state
        if state.is_final() or time.monotonic() > deadline:
            return state
        time.sleep(0.3)


def test_a_cancel_from_the_api_stops_an_in_process_run_before_it_publishes(prefect_api: Any, tmp_path: Path,
                                                                          request: pytest.FixtureRequest) -> None:
    ws = _workspace(tmp_path)
    with OpenAIFake(dims=64) as srv:
        # a slow provider: the run is still embedding when the cancel comes (66 chunks, 8 a request:
        # at 0.5 s a request a loaded machine published before the watch's 1.5 s poll saw the cancel)
        srv.delay = 2.0
        code, out, err, run_id, took = _index_then_cancel(tmp_path, request, ws, srv, per_request=8, timeout=60)

    assert code != 0 and "Traceback" not in err, err
    assert "cancelled in Prefect; the live index was left as it was" in err, err
    # Prefect's words for the watch's SIGTERM (twenty-second session): our line says what happened
    assert "Crash detected" not in err and "Finished in state Crashed" not in err, err
    assert "index:" not in out  # no summary of a published run
    assert not (ws / ".memory-core" / "index.sqlite").exists()  # nothing published
    assert took < 30, took  # the watch polls every 1.5 s; the stop waits for requests in flight
    state = _final_state(run_id)
    assert state.is_cancelled(), (state.type, state.message)  # final, not Cancelling for ever
    assert "left as it was" in (state.message or "")
    notes = artifact_of(run_id, "markdown").data
    assert "run cancelled" in notes, notes


def test_a_cancel_that_lands_after_the_publish_says_the_run_published(prefect_api: Any, tmp_path: Path,
                                                                     request: pytest.FixtureRequest) -> None:
    """The cancel comes as the run trims its cache, after its new index went live: the run still
    ends Cancelled, and its state, its notes and the CLI say the live index is the new one."""
    ws = tmp_path / "ws"
    shutil.copytree(EXAMPLES / "workspace", ws, ignore=shutil.ignore_patterns(".memory-core"))
    cfg = tmp_path / "memory-core.toml"
    wrapper = tmp_path / "index_cancelled_in_trim.py"  # the real CLI, cancelled through the API in the trim
    wrapper.write_text(textwrap.dedent("""
        import sys, time
        from memory_core.index import pipeline

        def cancel_in_trim(*args):
            from prefect.client.orchestration import get_client
            from prefect.runtime import flow_run
            from prefect.states import Cancelling

            with get_client(sync_client=True) as client:
                client.set_flow_run_state(flow_run.id, Cancelling(message="cancelled by the test"))
            time.sleep(20)  # the watch stops the run here

        pipeline.trim_cache = cancel_in_trim
        from memory_core.apps.cli import main
        sys.exit(main())
    """))
    env = shared_server(request.config).env(OPENAI_API_KEY="sk-test-key-0123456789", PYTHONPATH=str(ROOT))
    with OpenAIFake(dims=64) as srv:
        _config(cfg, ws, srv.base_url)
        cli = _Cli([sys.executable, str(wrapper), "index", "--config", str(cfg), "--engine", "prefect",
                    "--no-progress"], env)
        run_id = cli.flow_run_id()
        code, _, err = cli.wait(timeout=120)

    assert code != 0 and "Traceback" not in err, err
    assert "cancelled after the new index was published (swapped in): the live index holds this run's update" in err
    assert (ws / ".memory-core" / "index.sqlite").exists()  # published
    state = _final_state(run_id)
    assert state.is_cancelled(), (state.type, state.message)
    assert "after the new index was published" in (state.message or "")
    notes = artifact_of(run_id, "markdown").data
    assert "cancelled after the new index was published" in notes and "left as it was" not in notes, notes


def test_a_cancel_while_batch_jobs_are_polled_stops_the_run_and_leaves_the_jobs_for_the_next(
        prefect_api: Any, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """BP7: a flow run in Batch API mode, cancelled through the API while its 3 jobs run at the
    provider. Before: the cancel never reached the run (its main thread waited in Prefect's
    ``as_completed`` with no timeout, where the watch's SIGTERM handler cannot run) and its poll
    tasks would have polled on to their deadline (``batch.timeout_minutes``, 60): the CLI went on
    for the hour. Now the run stops, ends Cancelled, and leaves the jobs open (paid for, not
    cancelled) for the next run, which re-attaches them and pays nothing again."""
    from tests.test_batch import assert_paid_once, batch_settings, ledger_states

    ws = tmp_path / "ws"
    shutil.copytree(EXAMPLES / "workspace", ws, ignore=shutil.ignore_patterns(".memory-core"))
    cfg = tmp_path / "memory-core.toml"
    env = shared_server(request.config).env(OPENAI_API_KEY="test-key-0123456789abcdef", PYTHONPATH=str(ROOT))
    args = [sys.executable, "-m", "memory_core.apps.cli", "index", "--config", str(cfg), "--engine", "prefect",
            "--no-progress"]
    with OpenAIFake(dims=16, batch_delay=None) as srv:  # jobs run until told to finish
        cfg.write_text(
            f'workspace = "{ws}"\nprovider = "openai"\nmodel = "text-embedding-3-small"\n'
            f'[remote]\nbase_url = "{srv.base_url}"\ndimensions = 16\nbackoff_initial_s = 0.01\n'
            "[batch]\nenabled = true\nconcurrency = 8\npoll_interval_s = 0.05\nmax_requests_per_job = 25\n")
        cli = _Cli(args, env)
        run_id = cli.flow_run_id()
        deadline = time.monotonic() + 120
        while not (srv.batch_creates == 3 and srv.batch_polls >= 6) and time.monotonic() < deadline:
            assert cli.proc.poll() is None, "".join(cli.err)
            time.sleep(0.1)
        assert srv.batch_creates == 3, "".join(cli.err)
        _cancel(run_id)
        code, out, err = cli.wait(timeout=90)  # (a hang guard: before, it went on for the hour)
        s = batch_settings(ws, "openai", srv)
        assert code != 0 and "Traceback" not in err, err
        assert "cancelled in Prefect; the live index was left as it was" in err, err
        assert not (ws / ".memory-core" / "index.sqlite").exists()
        assert ledger_states(s) == {"submitted": 3}  # open for the next run, not cancelled nor abandoned
        assert not any(j.cancel_requested for j in srv.batch_jobs)
        state = _final_state(run_id)
        assert state.is_cancelled(), (state.type, state.message)
        srv.complete_job()
        code, out, err = _Cli(args, env).wait(timeout=180)
        assert code == 0, err
        assert "3 re-attached" in out and srv.batch_creates == 3
        assert_paid_once(srv, s)


STEPS_IN_PROCESSES = """
import os, signal, sys, time
from prefect import flow
from prefect.task_runners import ProcessPoolTaskRunner

from flows.executor import PrefectExecutor
from memory_core.config import Settings
from memory_core.index.pipeline import run_index
from tasks.stages import provider_for


def index(blob: str, executor) -> None:
    settings = Settings.model_validate_json(blob)
    provider, reason = provider_for(settings)
    try:
        run_index(settings, full=True, provider=provider, reason=reason, executor=executor)
        print("finished", flush=True)
    except BaseException as exc:  # the Ctrl-C, as the pipeline raises it once the run has stopped
        print(f"stopped {time.time()} {type(exc).__name__}", flush=True)


@flow(name="batch-steps-in-processes", task_runner=ProcessPoolTaskRunner(max_workers=3))
def steps_in_processes(blob: str) -> None:
    executor = PrefectExecutor(label="test")
    try:
        index(blob, executor)
    finally:
        executor.close()


LOST = signal.SIGINT  # the signal lost in the finalizer (argv[3]: "SIGTERM" in a flow run: Prefect's handler)


class LostStop:
    def __del__(self):
        os.kill(os.getpid(), LOST)
        time.sleep(0.2)  # the KeyboardInterrupt is raised in this finalizer: Python swallows it


def lose_a_stop(signum, frame):
    # SIGUSR1: a Ctrl-C that lands while the main thread runs a finalizer (an asyncio transport's
    # __del__ did, in CI): Python prints "Exception ignored in" and the main thread goes on
    LostStop()


if __name__ == "__main__":  # (the pool's processes import this file too)
    # Ctrl-C is Python's KeyboardInterrupt here even when this process was started with SIGINT
    # ignored (a test run in the background: bash starts background commands so, and Python then
    # leaves it ignored): the test sends SIGINT as a terminal would
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGUSR1, lose_a_stop)
    LOST = getattr(signal, sys.argv[3]) if len(sys.argv) > 3 else signal.SIGINT
    blob = open(sys.argv[1]).read()
    if sys.argv[2] == "prefect":
        steps_in_processes(blob)
    else:
        index(blob, None)  # the library's own executor: job steps in threads of this process
"""


@pytest.mark.parametrize(("engine", "how"), [
    # the lost stops through the Prefect engine (20-27 s each) in `-m slow`: the local engine's
    # lost stop and the Prefect engine's Ctrl-C run by default
    ("prefect", "ctrl-c"), pytest.param("prefect", "ctrl-c-lost-in-a-finalizer", marks=pytest.mark.slow),
    pytest.param("prefect", "sigterm-lost-in-a-finalizer", marks=pytest.mark.slow),
    ("local", "ctrl-c"), ("local", "ctrl-c-lost-in-a-finalizer"),
])
def test_batch_steps_in_other_processes_stop_with_the_run(workspace: Path, tmp_path: Path,
                                                          request: pytest.FixtureRequest, engine: str,
                                                          how: str) -> None:
    """BP7's stop, for job steps that run in other processes (a flow on a process pool task
    runner; a Dask one is the same): they had no way to see the run's stop event, so a run
    stopped (here: Ctrl-C) while its 3 jobs were polled waited for each poll to reach its deadline
    (``batch.timeout_minutes``: 2 min here, 60 min by default). They now see the stop file the
    coordinator writes in the run's work directory: the run stops within a second or two, its
    jobs left open for the next run.

    ``ctrl-c-lost-in-a-finalizer``: the KeyboardInterrupt is raised while the main thread runs a
    ``__del__``, where Python swallows it (this test failed so in CI once, the finalizer an asyncio
    transport's). The run went on polling to the deadline, in either engine (the library's waited
    on its job steps' futures with no timeout). The run now notes the stop as its handler raises
    it, and its waits look at the note (memory_core/index/run_stops.py).

    ``sigterm-lost-in-a-finalizer``: the same for a flow run's SIGTERM (what a worker's cancel
    sends), raised by Prefect's own handler as its TerminationSignal: the run takes the stop that
    Python swallowed from ``sys.unraisablehook`` and raises it again, as it came."""
    import signal as sig

    from tasks.stages import settings_json
    from tests.test_batch import batch_settings, ledger_states

    script = tmp_path / "steps_in_processes.py"
    script.write_text(STEPS_IN_PROCESSES)
    env = shared_server(request.config).env(PYTHONPATH=str(ROOT), PREFECT_LOGGING_LEVEL="WARNING")
    with OpenAIFake(dims=16, batch_delay=None) as srv:  # jobs run until told to finish
        # the poll deadline is far past the stop (2 min): under load (CI's 2 cores) a 30 s one was
        # reached before the jobs were polled 6 times, and the run then ended by itself
        s = batch_settings(workspace, "openai", srv, concurrency=8, poll_interval_s=0.05, timeout_minutes=2)
        blob = tmp_path / "settings.json"
        blob.write_text(settings_json(s))
        lost = ["SIGTERM"] if how.startswith("sigterm") else []
        proc = subprocess.Popen([sys.executable, str(script), str(blob), engine, *lost], env=env, cwd=ROOT,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 100
            while not (srv.batch_creates == 3 and srv.batch_polls >= 6) and time.monotonic() < deadline:
                assert proc.poll() is None, proc.communicate()
                time.sleep(0.05)
            assert srv.batch_creates == 3
            t0 = time.time()
            proc.send_signal(sig.SIGINT if how == "ctrl-c" else sig.SIGUSR1)
            out, err = proc.communicate(timeout=200)
        finally:
            if proc.poll() is None:
                proc.kill()
        polls = srv.batch_polls
        time.sleep(1.0)
        assert srv.batch_polls == polls  # nothing polls on
    raised = "TerminationSignal" if how.startswith("sigterm") else "KeyboardInterrupt"
    if how != "ctrl-c":  # the stop was lost as it was raised
        assert "Exception ignored in: <function LostStop.__del__" in err and raised in err, err[-3000:]
    stopped = [line.split() for line in out.splitlines() if line.startswith("stopped ")]
    assert stopped, (out, err[-3000:])
    assert stopped[0][2] == raised, (out, err[-3000:])
    took = float(stopped[0][1]) - t0
    assert took < 10, took  # before: 120 s, each poll step to its deadline
    assert ledger_states(s) == {"submitted": 3}  # open for the next run
    assert not list(s.cache_file.parent.rglob("stop-*"))


EMBED_ON_DASK = """
import signal, sys, time
from prefect import flow

from flows.executor import PrefectExecutor
from memory_core.config import Settings
from memory_core.index.pipeline import run_index
from tasks.stages import provider_for


@flow(name="embed-on-dask")
def embed_on_dask(blob: str) -> None:
    executor = PrefectExecutor(label="test", task_runner="dask", dask_workers=1, concurrency=1)
    try:
        settings = Settings.model_validate_json(blob)
        provider, reason = provider_for(settings)
        run_index(settings, full=True, provider=provider, reason=reason, executor=executor)
        print("finished", flush=True)
    except BaseException as exc:  # the Ctrl-C, as the pipeline raises it once the run has stopped
        print(f"stopped {time.time()} {type(exc).__name__}", flush=True)
    finally:
        executor.close()
    print(f"closed {time.time()}", flush=True)


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.default_int_handler)  # (see STEPS_IN_PROCESSES)
    embed_on_dask(open(sys.argv[1]).read())
"""


def test_an_embed_task_on_a_dask_worker_is_abandoned_when_its_run_stops(tmp_path: Path,
                                                                        request: pytest.FixtureRequest) -> None:
    """L2 for a flow whose embed tasks run on a Dask cluster (`task_runner = "dask"`): the task's
    request waits on a stalled provider (a minute). Ctrl-C: the run stopped after its grace
    (``streaming.STOP_GRACE_S``, 10 s) and abandoned its requests, but a task on a worker process
    could not see the run's stop (an event in the flow's process), so the executor's close waited
    for the request to its end, a minute after the Ctrl-C. The stop is now also set on the
    cluster's scheduler (``tasks.stops.SharedStop``), which the task reads: the flow closes
    within seconds of the grace, and the provider is not asked again."""
    pytest.importorskip("prefect_dask", reason="needs the dask extra: pip install -e '.[dask]'")
    import signal as sig

    from tasks.stages import settings_json
    from tests.test_batch import batch_settings

    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    (ws / "memory" / "heron.md").write_text("# Herons\n\nThe heron waits by the pond at dawn.\n")
    script = tmp_path / "embed_on_dask.py"
    script.write_text(EMBED_ON_DASK)
    env = shared_server(request.config).env(PYTHONPATH=str(ROOT), PREFECT_LOGGING_LEVEL="WARNING")
    with OpenAIFake(dims=16, delay=90) as srv:
        s = batch_settings(ws, "openai", srv, remote={"timeout_s": 120, "max_attempts": 1}, enabled=False)
        blob = tmp_path / "settings.json"
        blob.write_text(settings_json(s))
        proc = subprocess.Popen([sys.executable, str(script), str(blob)], env=env, cwd=ROOT,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            srv.wait_for_embed_requests(1, proc, timeout=120)
            time.sleep(0.5)  # the request waits on the provider
            t0 = time.time()
            proc.send_signal(sig.SIGINT)
            out, err = proc.communicate(timeout=150)
        finally:
            if proc.poll() is None:
                proc.kill()
        assert srv.embed_requests == 1  # abandoned, not retried (neither by the provider layer nor Prefect)
    stopped = [line.split() for line in out.splitlines() if line.startswith("stopped ")]
    closed = [line.split() for line in out.splitlines() if line.startswith("closed ")]
    assert stopped and stopped[0][2] == "KeyboardInterrupt", (out, err[-3000:])
    assert closed, (out, err[-3000:])
    took = float(closed[0][1]) - t0
    assert took < 40, took  # before: 90 s, the request's whole time (the grace is 10 s)
    assert not (ws / ".memory-core" / "index.sqlite").exists()  # nothing published


def test_a_cancelled_run_sends_no_request_that_had_not_started(prefect_api: Any, tmp_path: Path,
                                                                request: pytest.FixtureRequest) -> None:
    """Audit E (the thirty-ninth session): after a cancel the run cancelled its own futures, which
    under the Prefect executor are bridges already running, so the embed tasks queued behind them
    still started during the stop's grace: every group was sent and paid for (82 of 82 chunks), and
    under `serve` those the grace then dropped were paid again by the rerun. Now a group not
    started when the run stops is not sent."""
    ws = _workspace(tmp_path)
    with OpenAIFake(dims=64) as srv:
        srv.delay = 4.0  # 4 requests at a time (the default concurrency), 17 groups in all
        code, _, err, _, _ = _index_then_cancel(tmp_path, request, ws, srv, per_request=4, timeout=90)
        sent = srv.embed_requests
    assert code != 0 and "cancelled in Prefect" in err, err
    groups = -(-66 // 4)
    # those running, and at most one round started before the run saw the cancel (its watch polls
    # every 1.5 s): before, every group was sent
    assert sent <= 12 < groups, (sent, groups)
