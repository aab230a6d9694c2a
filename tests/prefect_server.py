"""A real Prefect server for tests: ``prefect server start`` on 127.0.0.1 with a temporary home.

One server per pytest session, shared by the modules that need it (tests/test_flow.py,
tests/test_deployments.py): a fresh SQLite database costs ~20 s of migrations on a small box.
The server runs with its scheduler service off (scheduled deployments must not fire runs in
the middle of a test) and a 1 s retry for runs waiting on a deployment concurrency slot.

No orphans: the server and every helper process started here get their own process group,
PR_SET_PDEATHSIG (killed if pytest dies), and are terminated, then killed, on teardown.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
VENV_BIN = Path(sys.executable).parent
STARTUP_TIMEOUT = 120.0

_server: PrefectServer | None = None


def _pdeathsig() -> None:  # pragma: no cover - runs in the child
    with contextlib.suppress(Exception):
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_process(args: Sequence[str], *, env: dict[str, str], log: Path, cwd: Path = ROOT) -> subprocess.Popen[bytes]:
    fh = open(log, "ab")  # noqa: SIM115 - lives as long as the process
    return subprocess.Popen(list(args), env=env, cwd=cwd, stdout=fh, stderr=subprocess.STDOUT,
                            start_new_session=True, preexec_fn=_pdeathsig if sys.platform == "linux" else None)


def stop_process(proc: subprocess.Popen[bytes] | None, timeout: float = 10.0) -> None:
    """SIGTERM the process group, then SIGKILL it after ``timeout``."""
    if proc is None or proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(5)


class PrefectServer:
    def __init__(self) -> None:
        self.tmp = Path(tempfile.mkdtemp(prefix="memory-core-prefect-"))
        self.home = self.tmp / "home"
        self.home.mkdir()
        self.port = free_port()
        self.api_url = f"http://127.0.0.1:{self.port}/api"
        self.log = self.tmp / "server.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def env(self, **extra: str) -> dict[str, str]:
        """Environment for a client process (CLI, worker, serve) talking to this server."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
        env.update({
            "PREFECT_HOME": str(self.home),
            "PREFECT_API_URL": self.api_url,
            "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
            "PREFECT_LOGGING_LEVEL": "INFO",
            "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        })
        env.update(extra)
        return env

    def start(self) -> PrefectServer:
        env = self.env(
            PREFECT_UI_ENABLED="false",
            PREFECT_SERVER_SERVICES_SCHEDULER_ENABLED="false",
            PREFECT_SERVER_DEPLOYMENTS_CONCURRENCY_SLOT_WAIT_SECONDS="1",
        )
        env.pop("PREFECT_API_URL")
        self.proc = start_process([str(VENV_BIN / "prefect"), "server", "start", "--host", "127.0.0.1",
                                   "--port", str(self.port)], env=env, log=self.log)
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"prefect server exited with {self.proc.returncode}:\n{self.log_tail()}")
            if self.healthy():
                return self
            time.sleep(0.25)
        tail = self.log_tail()
        self.stop()
        raise RuntimeError(f"prefect server did not answer within {STARTUP_TIMEOUT:.0f}s:\n{tail}")

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.api_url}/health", timeout=2) as r:
                return r.status == 200
        except OSError:
            return False

    def log_tail(self, n: int = 40) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def stop(self, *, cleanup: bool = True) -> None:
        """Stop the server; remove its home and database unless MEMORY_CORE_KEEP_PREFECT_TMP=1."""
        stop_process(self.proc)
        self.proc = None
        if cleanup and os.environ.get("MEMORY_CORE_KEEP_PREFECT_TMP") != "1":
            shutil.rmtree(self.tmp, ignore_errors=True)

    def settings(self) -> Any:
        """``temporary_settings`` pointing this process's Prefect client at the server."""
        from prefect.settings import PREFECT_API_URL, PREFECT_HOME, temporary_settings

        return temporary_settings(updates={PREFECT_API_URL: self.api_url, PREFECT_HOME: str(self.home)})

    def cli(self, *args: str, env: dict[str, str] | None = None, timeout: float = 120.0,
            check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run ``prefect <args>`` from the repository root against this server."""
        res = subprocess.run([str(VENV_BIN / "prefect"), *args], env=env or self.env(), cwd=ROOT,
                             capture_output=True, text=True, timeout=timeout)
        if check and res.returncode != 0:
            raise AssertionError(f"prefect {' '.join(args)} exited {res.returncode}:\n{res.stdout}\n{res.stderr}")
        return res


def shared_server(config: Any) -> PrefectServer:
    """The session's server, started on first use and stopped when pytest ends."""
    global _server
    if _server is None:
        _server = PrefectServer().start()
        config.add_cleanup(_stop_shared)
        atexit.register(_stop_shared)
    return _server


def _stop_shared() -> None:
    global _server
    if _server is not None:
        _server.stop()
        _server = None


# -- reading what a run left in the API ------------------------------------------------------

def drain_workers() -> None:
    """Flush this process's event and log queues to the API (and forget their clients)."""
    from prefect.events.worker import EventsWorker
    from prefect.logging.handlers import APILogWorker

    with contextlib.suppress(Exception):
        APILogWorker.drain_all(timeout=10)
    with contextlib.suppress(Exception):
        EventsWorker.drain_all(timeout=10)


def run_artifacts(flow_run_id: Any) -> list[Any]:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

    with get_client(sync_client=True) as client:
        return list(client.read_artifacts(
            artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[flow_run_id]))))


def artifact_of(flow_run_id: Any, type_: str) -> Any:
    found = [a for a in run_artifacts(flow_run_id) if a.type == type_]
    assert found, f"no {type_} artifact for flow run {flow_run_id}"
    return found[-1]


def table_figures(artifact: Any) -> dict[str, Any]:
    import json

    rows = json.loads(artifact.data) if isinstance(artifact.data, str) else artifact.data
    return {r["figure"]: r["value"] for r in rows}


def task_run_names(flow_run_id: Any, *, until: Any = None, timeout: float = 30.0) -> list[str]:
    """Names of the flow run's task runs. The server records task runs from the events clients
    send, asynchronously: with ``until`` (a predicate on the names), wait up to ``timeout`` for it."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    deadline = time.monotonic() + timeout
    while True:
        with get_client(sync_client=True) as client:
            runs = client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id])),
                                         limit=200)
        names = sorted(r.name for r in runs)
        if until is None or until(names) or time.monotonic() > deadline:
            return names
        time.sleep(0.3)


def read_flow_run(flow_run_id: Any) -> Any:
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        return client.read_flow_run(flow_run_id)


def events_for(name: str, *, flow_run_id: Any = None, resource_id: str | None = None,
               expect: int = 1, timeout: float = 30.0) -> list[Any]:
    """Events called ``name`` (related to the flow run / about the resource), waiting up to
    ``timeout`` for at least ``expect`` of them: the server ingests events asynchronously."""
    from prefect.client.orchestration import get_client
    from prefect.events.filters import (
        EventAnyResourceFilter,
        EventFilter,
        EventNameFilter,
        EventResourceFilter,
    )

    flt = EventFilter(event=EventNameFilter(name=[name]))
    if flow_run_id is not None:
        flt.any_resource = EventAnyResourceFilter(id=[f"prefect.flow-run.{flow_run_id}"])
    if resource_id is not None:
        flt.resource = EventResourceFilter(id=[resource_id])
    deadline = time.monotonic() + timeout
    found: list[Any] = []
    while True:
        with get_client(sync_client=True) as client:
            found = list(client.read_events(filter=flt, limit=50).events)
        if len(found) >= expect or time.monotonic() > deadline:
            return found
        time.sleep(0.3)
