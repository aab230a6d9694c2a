"""``memory-core watch``: keep the index fresh by reindexing when the sources change.

An entry point over the library, beside the CLI and the MCP server (it imports neither): the
watching and the scheduling are :class:`memory_core.runtime.watching.Watcher` (shared with the MCP
server's sync triggers), a run in this process is :class:`memory_core.index.indexer.Indexer` (shared
with ``memory-core index --engine local``, the sync triggers and the Python API). What this
module adds:

- **the runners** (:func:`make_runner`): the :class:`~memory_core.index.indexer.Indexer` of a
  :class:`memory_core.api.Memory` over the settings resolved as everywhere (one
  embedding provider for the watcher's lifetime, created at start-up so a bad provider
  configuration fails there), or :class:`DeploymentRunner`, which starts a run of a Prefect
  deployment of the ``reindex`` flow with the Prefect engine plugged in
  (:mod:`memory_core.runtime.engines`) and waits for it;
- **the command** (:func:`run_watch`): the start-up line, one line (or JSON line) per run,
  ``sync.interval_minutes``, SIGTERM and Ctrl-C.

Session transcripts follow the delta thresholds of discovery: an append below
``sessions.delta_bytes`` and ``sessions.delta_messages`` makes a run that keeps the
transcript's indexed rows and swaps nothing in.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
from typing import Any

from memory_core.config import Settings
from memory_core.errors import RunError, UsageError
from memory_core.index.indexer import DeploymentOutcome, Indexer, RunRecord
from memory_core.index.run_stops import SigtermStop
from memory_core.runtime.watching import MAX_DEBOUNCE_S, Watcher, describe, start_interval, watch_roots

log = logging.getLogger("memory_core.apps.watch")

DEPLOYMENT_TIMEOUT_S = 3600.0
FLOW_NAME = "reindex"


class DeploymentRunner:
    """Starts a run of a Prefect deployment of the ``reindex`` flow and waits for it to finish.

    ``deployment`` is ``"<flow>/<deployment>"`` or just the deployment name of the
    ``reindex`` flow. The run gets this watcher's workspace and index (the ones it watches),
    the config file if one was given, and only the settings this watcher was told (``told``:
    flags such as ``sources``, ``extra_paths``, ``provider``, ``model``); everything else the
    flow resolves as every run does (its config file, then what the index recorded), so the
    watcher never changes the deployment's settings by accident. API keys never travel as
    parameters; the deployment's worker must see the same paths.
    """

    def __init__(self, settings: Settings, deployment: str, *, config_file: str | None = None,
                 told: dict[str, Any] | None = None, api_url: str | None = None,
                 timeout_s: float = DEPLOYMENT_TIMEOUT_S) -> None:
        self.name = deployment if "/" in deployment else f"{FLOW_NAME}/{deployment}"
        self.timeout_s = timeout_s
        params: dict[str, Any] = {
            "workspace": str(settings.workspace_dir), "index_path": str(settings.index_file),
            "config_file": config_file, "full": False, "agent": settings.agent, **(told or {}),
        }
        # the reindex flow takes flat parameters; unset ones come from the deployment
        self.parameters = {k: v for k, v in params.items() if v is not None}
        self.description = f"runs of deployment {self.name} on {api_url or os.environ.get('PREFECT_API_URL')}"

    def __call__(self) -> DeploymentOutcome:
        from memory_core.runtime.engines import require_engine

        run = require_engine(needed_by="watch --deployment").run_deployment(
            self.name, self.parameters, timeout_s=self.timeout_s, tags=["memory-core-watch"])
        if not run.final:
            raise RunError(f"deployment run {run.name} of {self.name} did not finish within {self.timeout_s:.0f}s;"
                           " is a worker polling its work pool?")
        if run.cancelled or run.state == "Skipped":
            # the deployment's concurrency limit or the index lock: another run is on it
            return DeploymentOutcome(self.name, run.name, run.state, note="another run is on it")
        if not run.completed:
            msg = f": {run.message}" if run.message else ""
            raise RunError(f"deployment run {run.name} of {self.name} ended {run.state}{msg}")
        return DeploymentOutcome(self.name, run.name, run.state, flow_run_id=run.id)

    def check(self) -> None:
        """At start: the deployment exists (a name that does not printed a traceback ending
        ``ObjectNotFound: None`` on every run and retried for ever)."""
        from memory_core.runtime.engines import require_engine

        why = require_engine(needed_by="watch --deployment").missing_deployment(self.name)
        if why:
            raise UsageError(f"--deployment: {why}")

    def close(self) -> None:
        pass


def make_runner(settings: Settings, *, deployment: str | None = None, config_file: str | None = None,
                told: dict[str, Any] | None = None, env: dict[str, str] | None = None) -> Indexer | DeploymentRunner:
    """A deployment runner when a deployment is named (a Prefect server must be configured, in the
    environment or the active Prefect profile), else an :class:`~memory_core.index.indexer.Indexer`
    whose provider is created now (a bad provider configuration fails at start-up, not on every
    run). ``told``: the settings given as flags, the only ones passed on to the deployment."""
    from memory_core.runtime.engines import prefect_api, require_engine

    if deployment:
        require_engine(needed_by="watch --deployment")
        api = prefect_api(env)
        if not api.url:
            raise UsageError(f"--deployment needs a Prefect server: {api.source}; set it with"
                             " `prefect config set PREFECT_API_URL=http://127.0.0.1:4200/api` or the environment"
                             " variable")
        return DeploymentRunner(settings, deployment, config_file=config_file, told=told, api_url=api.url)
    if (env if env is not None else os.environ).get("PREFECT_API_URL"):
        log.info("PREFECT_API_URL is set but no deployment was named; reindexing in-process")
    from memory_core.api import Memory

    indexer = Memory(settings, refresh=False).indexer  # the front door's indexer (what Memory.index runs)
    indexer.provider  # noqa: B018 - created now, reused by every run
    return indexer


def run_watch(settings: Settings, *, debounce: float, initial_run: bool = True, deployment: str | None = None,
              config_file: str | None = None, told: dict[str, Any] | None = None, as_json: bool = False) -> None:
    """Watch ``settings``' sources and reindex on change until Ctrl-C or SIGTERM (``memory-core
    watch``): one line per run on stdout (``as_json``: one JSON object), warnings on stderr."""
    try:
        import watchfiles  # noqa: F401
    except ImportError:
        raise UsageError("watch needs the watchfiles package: pip install watchfiles") from None
    if not 0 <= debounce <= MAX_DEBOUNCE_S:  # nan and inf too: a nan wait never ran, inf crashed the wait
        raise UsageError(f"--debounce must be between 0 and {MAX_DEBOUNCE_S:.0f} seconds")
    runner = make_runner(settings, deployment=deployment, config_file=config_file, told=told)
    if isinstance(runner, DeploymentRunner):
        runner.check()

    def report(rec: RunRecord) -> None:
        print(json.dumps(rec.to_dict(), sort_keys=True) if as_json else rec.line(), flush=True)
        if not as_json:
            for w in rec.warnings:
                print(f"warning: {w}", file=sys.stderr)

    watcher = Watcher(settings, runner, debounce=debounce, initial_run=initial_run, on_run=report)
    print(f"memory-core: watching {describe(watch_roots(settings))}; {runner.description};"
          f" debounce {debounce:g}s; Ctrl-C stops", file=sys.stderr, flush=True)

    def on_term(signum: int, frame: Any) -> None:
        # a stop the run says as SIGTERM's (it said "interrupted"), not RunCancelled: the run's own
        # handler, which raises that, is not installed over this one, and a watcher goes on after
        # a run's error but not after a stop
        raise SigtermStop

    stop_interval = start_interval(settings.sync.interval_minutes,
                                   lambda: watcher.notify([], reason="interval", full_scan="the interval"))
    previous = signal.signal(signal.SIGTERM, on_term)
    try:
        watcher.run_forever()
    except (KeyboardInterrupt, SigtermStop) as exc:
        from memory_core.index.pipeline import stop_word

        # the run the stop ended, if one was going, has had its line (``Watcher._report_stopped``)
        print(f"memory-core: watch {stop_word(exc)}", file=sys.stderr)
    finally:
        stop_interval()
        signal.signal(signal.SIGTERM, previous)
