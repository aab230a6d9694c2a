"""`memory-core index --engine prefect` says an error of ours as the local engine does: no traceback
on the terminal, one `memory-core: error:` line, the same exit code. A provider that gave up
printed two ~100-line tracebacks (Prefect's "Task run failed with exception" and "Encountered
exception during execution") before that line. The run's logs on the Prefect API keep them (the
UI is where an operator looks); a bug, an exception that is not ours, keeps its traceback.
"""

from __future__ import annotations

import logging
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from memory_core.errors import ProviderError
from tests.conftest import ROOT
from tests.prefect_server import free_port, shared_server

KEY = "sk-test-key-0123456789abcdefXYZ"


def _workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    (ws / "memory" / "a.md").write_text("otters sleep holding hands\n")
    closed = free_port()  # nothing listens there: connection refused at once
    (ws / "memory-core.toml").write_text(
        f'provider = "openai"\n[remote]\nbase_url = "http://127.0.0.1:{closed}/v1"\nmax_attempts = 2\n'
        "backoff_initial_s = 0.01\n")
    return ws


def _index(ws: Path, engine: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "memory_core.apps.cli", "index", "-w", str(ws), "--engine", engine,
                           "--no-progress"], env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)


@pytest.mark.prefect_server
def test_a_provider_error_through_prefect_is_one_line_without_traceback(
        tmp_path: Path, request: pytest.FixtureRequest) -> None:
    env = shared_server(request.config).env(OPENAI_API_KEY=KEY, PYTHONPATH=str(ROOT))
    res = _index(_workspace(tmp_path), "prefect", env)
    err = res.stderr
    assert res.returncode == 1, err
    assert "flow run: http" in err, err
    assert "Traceback" not in err and 'File "' not in err, err
    ours = [line for line in err.splitlines() if line.startswith("memory-core: error:")]
    assert len(ours) == 1 and "openai: APIConnectionError" in ours[0] and "gave up after 2 attempts" in ours[0], err
    # said once, as the local engine says it: no ERROR record repeating it (five did), no final state quoting it
    assert [line for line in err.splitlines() if "gave up after 2 attempts" in line] == ours, err
    assert not [line for line in err.splitlines() if line.startswith("ERROR")], err
    assert err.rstrip("\n").splitlines()[-1] == ours[0], err  # the last word, as with the local engine
    assert KEY not in err and KEY not in res.stdout


# -- the console formatter, in this process ------------------------------------------------------

@pytest.fixture
def console() -> Iterator[tuple[logging.Logger, list[str]]]:
    """A logger whose records reach a console handler the in-process run's formatter applies to
    (one of the root logger's, as the CLI's own), with what that handler printed."""
    out: list[str] = []

    class Lines(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            out.append(self.format(record))

    handler = Lines()
    handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        yield logging.getLogger("memory_core.tests.console"), out
    finally:
        root.removeHandler(handler)


def _raise(exc: BaseException) -> None:
    raise exc


def test_only_our_errors_lose_their_traceback_and_only_while_the_run_lasts(
        console: tuple[logging.Logger, list[str]]) -> None:
    from flows.engine import _caller_console
    from flows.reindex import CALLER_SAYS

    logger, out = console
    prefect_runs = logging.getLogger("prefect.memory_core_test")  # as prefect.flow_runs, with no API handler
    with _caller_console():
        for exc in (ProviderError("openai: gave up"), RuntimeError("a bug")):
            try:
                _raise(exc)
            except Exception:
                logger.error("Task run failed with exception: %r", exc, exc_info=True)
        # what only repeats the caller's own error line: the flow's "run failed", Prefect's final states
        logger.error("run failed: ProviderError: openai: gave up", extra={CALLER_SAYS: True})
        prefect_runs.error("Finished in state Failed('Task run encountered an exception ProviderError: ...')")
        prefect_runs.info("Finished in state Failed('Flow run encountered an exception: ProviderError: ...')")
        prefect_runs.info("Finished in state Completed()")  # not a repeat: kept
    (bug, done) = out
    assert "Traceback" in bug and "RuntimeError: a bug" in bug  # a bug's record and traceback stay
    assert done == "INFO Finished in state Completed()"
    logger.error("run failed: after the run", extra={CALLER_SAYS: True})
    assert out[-1] == "ERROR run failed: after the run"  # the filter is taken off with the run
    try:
        _raise(ProviderError("after the run"))
    except Exception:
        logger.error("failed", exc_info=True)
    assert "Traceback" in out[-1]  # the handler's formatter is put back


def test_other_handlers_keep_the_traceback(console: tuple[logging.Logger, list[str]]) -> None:
    """The record is not changed: a handler that formats it after the console's still gets the
    traceback (Prefect's API handler formats it before)."""
    from flows.engine import _NoTracebackOfOurs

    record = logging.LogRecord("prefect.task_runs", logging.ERROR, __file__, 1, "failed", None, None)
    try:
        _raise(ProviderError("openai: gave up"))
    except ProviderError:
        record.exc_info = sys.exc_info()
    before = logging.Formatter().format(record)  # caches exc_text, as the API handler does
    assert _NoTracebackOfOurs(None).format(record) == "failed"
    assert record.exc_info is not None and record.exc_text and "Traceback" in logging.Formatter().format(record)
    assert "Traceback" in before
