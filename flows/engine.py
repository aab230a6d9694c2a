"""The Prefect engine memory_core plugs in (entry point ``memory_core.runtime.engines: prefect``).

It is what the library asks of an orchestrator (:class:`memory_core.runtime.engines.Engine`): where the
Prefect API is, a reindex as a flow run (``index --engine prefect``), a deployment run
(``watch --deployment``) and events (Automations). Prefect is imported only inside the methods
that use it: building the engine, and asking where the API is when none is configured, stay cheap.

A server is configured by ``PREFECT_API_URL`` in the environment or in the active Prefect
profile (``prefect config set PREFECT_API_URL=...``, the setup step Prefect's docs give): both
count. The profile is read through ``prefect.settings``, only when the environment variable is
unset and a file Prefect reads its settings from mentions the URL.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memory_core.runtime.engines import DeploymentRun, PrefectApi

if TYPE_CHECKING:
    from memory_core.config import Settings
    from memory_core.index.runtypes import Progress, RunSummary


class PrefectEngine:
    """:class:`memory_core.runtime.engines.Engine` on Prefect."""

    name = "prefect"

    def api(self, env: dict[str, str] | None = None) -> PrefectApi:
        """The Prefect API URL from ``$PREFECT_API_URL``, else from the active Prefect profile."""
        env = dict(os.environ) if env is None else env
        if env.get("PREFECT_API_URL"):
            return PrefectApi(env["PREFECT_API_URL"], "$PREFECT_API_URL")
        if importlib.util.find_spec("prefect") is None:
            return PrefectApi(None, "Prefect is not installed")
        if not _may_name_api_url(env):
            # importing Prefect costs 1-3 s: skip it when no file it reads settings from names a URL
            return PrefectApi(None, "PREFECT_API_URL is set neither in the environment nor in a Prefect profile")
        try:
            from prefect.context import get_settings_context
            from prefect.settings import get_current_settings

            url = get_current_settings().api.url
            profile = get_settings_context().profile.name
        except Exception as exc:  # a broken profiles file must not break memory-core
            return PrefectApi(None, f"the Prefect profile cannot be read ({exc})")
        if url:
            return PrefectApi(str(url), f"Prefect profile '{profile}'")
        return PrefectApi(None, "PREFECT_API_URL is set neither in the environment nor in the Prefect profile"
                                f" '{profile}'")

    def run_reindex(self, settings: Settings, *, config_file: str | None, told: dict[str, Any], full: bool,
                    progress: Callable[[Progress], None] | None = None,
                    on_start: Callable[[str], None] | None = None, re_embed: bool = False) -> RunSummary:
        """The ``reindex`` flow in this process, on ``settings`` as the caller resolved them (once
        per run); its parameters record the workspace, index, agent and the flags given (``told``)."""
        os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
        # with no PREFECT_API_URL Prefect starts a temporary server; give a busy machine time
        os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")
        os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")  # no telemetry from a closed network
        os.environ.setdefault("DO_NOT_TRACK", "1")  # nor from the client's SDK analytics service
        from flows.reindex import ReindexParams, run_reindex
        from memory_core.index.runtypes import RunSummary

        params = ReindexParams(
            workspace=str(settings.workspace_dir), index_path=str(settings.index_file), config_file=config_file,
            agent=settings.agent, provider=told.get("provider"), model=told.get("model"), full=full,
            extra_paths=told.get("extra_paths"), sources=told.get("sources"),
        )
        if re_embed:  # a flow parameter only when given (as the other flags)
            params.re_embed = True
        # the flow run's result is the summary's JSON; the caller prints it, so the flow's log
        # lines of it stay off this console (they still reach the run's logs in the UI); so does the
        # traceback of an error of ours, which the caller says in one line
        with _caller_console():
            return RunSummary.from_dict(run_reindex(params, progress=progress, on_start=on_start, settings=settings))

    def run_deployment(self, name: str, parameters: dict[str, Any], *, timeout_s: float,
                       tags: list[str]) -> DeploymentRun:
        os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
        from prefect.deployments import run_deployment

        flow_run = run_deployment(name=name, parameters=parameters, timeout=timeout_s, poll_interval=2,
                                  as_subflow=False, tags=tags)
        state = getattr(flow_run, "state", None)
        run_id = str(getattr(flow_run, "id", ""))
        run_name = getattr(flow_run, "name", None) or (run_id or "?")
        if state is None:
            return DeploymentRun(run_name, run_id, "Unknown", final=False)
        return DeploymentRun(run_name, run_id, state.name, final=bool(state.is_final()),
                             completed=bool(state.is_completed()), cancelled=bool(state.is_cancelled()),
                             message=getattr(state, "message", None))

    def missing_deployment(self, name: str) -> str | None:
        os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
        from prefect.client.orchestration import get_client
        from prefect.client.schemas.filters import FlowFilter, FlowFilterName
        from prefect.exceptions import ObjectNotFound

        flow_name = name.split("/", 1)[0]
        try:
            with get_client(sync_client=True) as client:
                try:
                    client.read_deployment_by_name(name)
                    return None
                except ObjectNotFound:
                    pass
                there = sorted(d.name for d in client.read_deployments(
                    flow_filter=FlowFilter(name=FlowFilterName(any_=[flow_name]))))
                url = client.api_url
        except Exception as exc:  # the server is down, or the URL is wrong
            return f"cannot reach the Prefect API to look up deployment {name}: {type(exc).__name__}: {exc}"
        known = (f"deployments of {flow_name} there: {', '.join(f'{flow_name}/{n}' for n in there)}" if there
                 else f"no deployment of {flow_name} is there (`prefect deploy --all --prefect-file"
                      " deployments/prefect.yaml` creates them)")
        return f"no deployment {name} on {url}; {known}"

    def emit_event(self, event: str, resource_id: str, payload: dict[str, object]) -> None:
        from prefect.events import emit_event

        emit_event(event=event, resource={"prefect.resource.id": resource_id}, payload=payload)


class _NoSummaryLines(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        from flows.reindex import SUMMARY_LINE

        return not getattr(record, SUMMARY_LINE, False)


class _NoRepeatsOfOurError(logging.Filter):
    """Off the caller's console, the records that only repeat an error the caller says itself in
    one line (``memory-core: error: ...``, as with the local engine): the flow's own "run failed:
    ..." (:data:`flows.reindex.CALLER_SAYS`), Prefect's "Task run failed with exception" and
    "Encountered exception during execution" for an error of ours (a
    :class:`~memory_core.errors.MemoryCoreError`), and its "Finished in state Failed(...)" lines,
    which quote the same message (a failed run printed it five times). An exception that is not
    ours, a bug, keeps its record and traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        from flows.reindex import CALLER_SAYS
        from memory_core.errors import MemoryCoreError

        if getattr(record, CALLER_SAYS, False):
            return False
        if record.exc_info and isinstance(record.exc_info[1], MemoryCoreError):
            return False
        if not record.name.startswith("prefect."):
            return True
        message = record.getMessage()
        # a stop by a signal (a cancel from Prefect reaches the run as the cancel watch's SIGTERM,
        # a person's Ctrl-C or SIGTERM as itself): Prefect calls it a crash; the caller's own line
        # says what stopped the run and what it left ("cancelled in Prefect; ...", "stopped by SIGTERM")
        return not (message.startswith("Finished in state Failed")
                    or (message.startswith(("Crash detected! ", "Finished in state Crashed("))
                        and any(why in message for why in _SIGNAL_CRASHES)))


_SIGNAL_CRASHES = ("Execution was aborted by a termination signal", "Execution was aborted by an interrupt signal")
"""Prefect's console lines for a run a signal stopped (``prefect.states.exception_to_crashed_state``'s
messages for ``TerminationSignal`` and ``KeyboardInterrupt``); another crash keeps its line."""


class _NoTracebackOfOurs(logging.Formatter):
    """The handler's own formatter, without the traceback of a record whose exception is a
    :class:`~memory_core.errors.MemoryCoreError` (an error memory-core raises on purpose, with a
    message that says it all; the caller prints that message). Any other exception, a bug, keeps
    its traceback. The record itself is left as it was for every other handler (Prefect's API
    handler sends the run's logs with the traceback: the UI is where an operator looks)."""

    def __init__(self, inner: logging.Formatter | None) -> None:
        super().__init__()
        self.inner = inner if inner is not None else logging.Formatter()  # what a Handler uses without one

    def format(self, record: logging.LogRecord) -> str:
        from memory_core.errors import MemoryCoreError

        if not (record.exc_info and isinstance(record.exc_info[1], MemoryCoreError)):
            return self.inner.format(record)
        kept = record.exc_info, record.exc_text  # exc_text: the traceback another handler formatted
        record.exc_info, record.exc_text = None, None
        try:
            return self.inner.format(record)
        finally:
            record.exc_info, record.exc_text = kept


@contextlib.contextmanager
def _caller_console() -> Iterator[None]:
    """While the caller's in-process run lasts, on every console handler (not Prefect's API
    handler) the records of its logs reach: the flow's summary log lines are dropped, and so are
    the records that only repeat an error of ours (a provider that gave up, a bad setting), whose
    traceback is left out of any record that still shows it: the caller's own error line says it
    all, as with the local engine (:class:`_NoRepeatsOfOurError`; ``MEMORY_CORE_DEBUG=1`` keeps
    everything). Put back as they were when the run ends."""
    from prefect.logging.handlers import APILogHandler

    quiet = _NoSummaryLines()
    handlers = {h for name in (None, "prefect", "prefect.flow_runs", "prefect.task_runs")
                for h in logging.getLogger(name).handlers if not isinstance(h, APILogHandler)}
    formatters = {h: h.formatter for h in handlers}
    tracebacks = os.environ.get("MEMORY_CORE_DEBUG") == "1"  # as the CLI, which then raises
    once = _NoRepeatsOfOurError()
    for h in handlers:
        h.addFilter(quiet)
        if not tracebacks:
            h.addFilter(once)
            h.setFormatter(_NoTracebackOfOurs(h.formatter))
    try:
        yield
    finally:
        for h in handlers:
            h.removeFilter(quiet)
            h.removeFilter(once)
            h.setFormatter(formatters[h])


def _may_name_api_url(env: dict[str, str]) -> bool:
    """Whether a file Prefect reads its settings from mentions PREFECT_API_URL: the profiles file
    (``$PREFECT_PROFILES_PATH``, else ``$PREFECT_HOME/profiles.toml``, else
    ``~/.prefect/profiles.toml``) or ``.env`` / ``prefect.toml`` / ``pyproject.toml`` in the
    current folder. A cheap test before the authoritative answer from ``prefect.settings``."""
    home = Path(env.get("PREFECT_HOME") or "~/.prefect").expanduser()
    profiles = Path(env["PREFECT_PROFILES_PATH"]).expanduser() if env.get("PREFECT_PROFILES_PATH") \
        else home / "profiles.toml"
    # (file, any of these words means it may set the API URL)
    for path, words in ((profiles, ("PREFECT_API_URL",)), (Path(".env"), ("PREFECT_API_URL",)),
                        (Path("prefect.toml"), ("PREFECT_API_URL", "url")),
                        (Path("pyproject.toml"), ("PREFECT_API_URL", "tool.prefect"))):
        try:
            text = path.read_text(errors="replace")
        except OSError:
            continue
        if any(w in text for w in words):
            return True
    return False
