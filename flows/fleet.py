"""The ``fleet-reindex`` flow: bring every agent's memory index up to date, one task per agent.

A config file with an ``[agents]`` table (memory_core/runtime/agents.py) names the agents; each agent's
reindex is one task (``reindex-<agent>``) that runs the ``reindex`` flow for that agent as a
subflow, so each has its own run, artifacts and events in the UI, and one agent's failure does
not stop the others. Up to ``FLEET_CONCURRENCY`` agents are reindexed at once in this process;
each one's embedding requests run on its own task runner (``task_runner``: threads, or ``dask``
for a Dask cluster).

To spread a fleet over Prefect workers instead, pass ``deployment`` (e.g.
``reindex/agent``): each agent becomes a run of that deployment on its work pool
(``run_deployment``), and any worker of the pool picks it up; this flow waits for them and
reports every agent's outcome.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from typing import Any, cast

from prefect import flow, get_run_logger, task
from prefect.cache_policies import NO_CACHE
from prefect.futures import wait
from prefect.states import Completed, Failed
from prefect.task_runners import ThreadPoolTaskRunner

from flows import owners
from flows.reindex import IfBusy, _mark_runner_cancel, reindex
from flows.runners import DaskWorkers, RunnerChoice
from memory_core.errors import RunCancelled
from memory_core.index import run_stops
from memory_core.index.pipeline import stop_word
from memory_core.index.runtypes import RunSummary, is_stop
from memory_core.runtime.resolve import resolve_agents

FLEET_CONCURRENCY = 4  # agents reindexed at once in this process


# the stop of each fleet run in this process, by key (a task parameter must be plain): the agents'
# runs go on in the runner's threads, where no signal lands, so a stop of the fleet reaches them as a
# Cancel their runs look at (memory_core/index/run_stops.py). A stopped fleet's entry stays: an agent
# whose task starts after the stop must still find it set.
_STOPS: dict[str, run_stops.Cancel] = {}


@task(name="reindex-agent", task_run_name="reindex-{agent}", cache_policy=NO_CACHE)
def reindex_agent(agent: str, config_file: str, full: bool, if_busy: IfBusy | None, task_runner: RunnerChoice,
                  dask_address: str | None, dask_workers: int, deployment: str | None,
                  stop_key: str = "", re_embed: bool = False) -> dict[str, Any]:
    """One agent's reindex: the ``reindex`` flow as a subflow, or a run of ``deployment``. ``stop_key``:
    the fleet run's stop (``_STOPS``): set, the agent's run ends at its next check, or never starts."""
    cancel = _STOPS.get(stop_key)
    if cancel is not None and cancel.is_set():
        raise RunCancelled(f"{cancel.why}: agent {agent} was not started")
    with run_stops.run_scope(cancel) if cancel is not None else contextlib.nullcontext():
        return _reindex_agent(agent, config_file, full, if_busy, task_runner, dask_address, dask_workers, deployment,
                              re_embed)


def _reindex_agent(agent: str, config_file: str, full: bool, if_busy: IfBusy | None, task_runner: RunnerChoice,
                   dask_address: str | None, dask_workers: int, deployment: str | None,
                   re_embed: bool = False) -> dict[str, Any]:
    params: dict[str, Any] = {"agent": agent, "config_file": config_file, "full": full, "if_busy": if_busy,
                              "task_runner": task_runner, "dask_address": dask_address,
                              "dask_workers": dask_workers}
    if re_embed:  # only when told: a deployment of an older reindex flow takes no such parameter
        params["re_embed"] = True
    if deployment:
        from prefect.client.schemas.objects import FlowRun
        from prefect.deployments import run_deployment

        # the deployment's own workspace/index parameters must not override the agent's;
        # sync_compatible: called from a sync task it returns the FlowRun, not a coroutine
        run = cast(FlowRun, run_deployment(deployment, parameters={**params, "workspace": None, "index_path": None},
                                           timeout=None, as_subflow=True))
        if run.state is None or not run.state.is_completed():
            raise RuntimeError(f"agent {agent}: flow run {run.name} ended {run.state.name if run.state else 'unknown'}")
        return {"agent": agent, "flow_run": run.name, "outcome": run.state.message or run.state.name}
    summary = reindex(**params)
    return {"agent": agent, **(summary if isinstance(summary, dict) else {})}


STOP_WAIT_S = 30.0
"""How long a stopped fleet waits for its agents' runs to end (each at its next check: a second or two)."""


def _say_stopped(logger: Any, futures: dict[str, Any], exc: BaseException) -> None:
    """Each agent's outcome once the fleet was stopped: published before the stop (its run had
    finished), stopped (its live index left as it was, or published first: its run's own notes say
    which), or never started. Waits for the agents' runs to end, at most ``STOP_WAIT_S``."""
    deadline = time.monotonic() + STOP_WAIT_S
    for agent, fut in futures.items():
        try:
            fut.wait(timeout=max(0.0, deadline - time.monotonic()))
            state = fut.state
        except BaseException:  # noqa: BLE001 - a second stop: the first one goes on, unsaid
            return
        if state.is_completed():
            what = "its run finished before the stop"
        elif state.is_pending() or state.is_scheduled():
            what = "not started"
        elif state.is_final():
            what = str(state.message or state.name)
        else:
            what = f"still {state.name.lower()} after {STOP_WAIT_S:g} s (its run stops at its next check)"
        logger.warning("fleet %s: agent %s: %s", stop_word(exc), agent, what)


def _row(agent: str, result: dict[str, Any] | None, error: str | None, seconds: float) -> dict[str, Any]:
    """One agent's line of the fleet summary table. A subflow's result is its run summary
    (``RunSummary.to_dict()``): outcome, files and chunks are the summary's own headline, the
    figures its run's summary artifact and the CLI show (it read ``files_total``, which no summary
    has, and an ``outcome`` key ``to_dict()`` lacks: the files column was always empty, and a run
    with batch jobs still running said "nothing to do"). A deployment run's result is its state's
    message (``outcome``): no figures."""
    r = result or {}
    row: dict[str, Any] = {"agent": agent, "outcome": error or str(r.get("outcome") or ""), "files": "",
                           "chunks": "", "seconds": round(seconds, 2)}
    if error is None and "files_scanned" in r:
        try:
            head = RunSummary.from_dict(r).headline()
        except (TypeError, ValueError, KeyError):  # not a summary after all: what it said, as it said it
            return row
        row.update(outcome=head["outcome"], files=head["files"], chunks=head["chunks"])
    return row


def _fleet_run_name() -> str:
    """``fleet-reindex-<incremental|full>[-<agents>]``: it was ``fleet-reindex-False``."""
    from prefect.runtime import flow_run

    raw = dict(flow_run.parameters or {})
    agents = raw.get("agents") or []
    name = "fleet-reindex-" + ("re-embed" if raw.get("re_embed") else "full" if raw.get("full") else "incremental")
    return name + (f"-{len(agents)}-agents" if len(agents) > 1 else f"-{agents[0]}" if agents else "")


def _hold_owner_files(fleet: dict[str, Any]) -> None:
    """This run's owner file in every agent's ``<index>.flow-runs/`` (flows/owners.py): killed
    (SIGKILL, its ``serve`` process gone), it would stay Running for ever; the next run of any of
    those indexes now marks it Crashed. Released by the state hooks when it ends."""
    from memory_core.storage.store import check_index_target

    run = owners.current_run()
    if run is None:
        return
    for settings in fleet.values():
        try:
            check_index_target(settings.index_file)  # nothing made beside a file that is not an index of ours
            owners.hold(settings.index_file, run.run_id, api_url=run.api_url, flow_name=owners.FLEET_FLOW,
                        run_name=run.name)
        except Exception:  # noqa: BLE001  (that agent's run refuses the path itself, with its own message)
            continue


def _index_files(parameters: dict[str, Any]) -> list[Any]:
    """The agents' indexes a fleet run with these parameters holds owner files for."""
    import os

    path = parameters.get("config_file") or os.environ.get("MEMORY_CORE_CONFIG") or None
    return [s.index_file for s in resolve_agents(path, parameters.get("agents") or None).values()]


@flow(name=owners.FLEET_FLOW, flow_run_name=_fleet_run_name,
      task_runner=ThreadPoolTaskRunner(max_workers=FLEET_CONCURRENCY),  # type: ignore[arg-type]
      validate_parameters=True, log_prints=False, on_completion=[owners.release_hook],
      on_failure=[owners.release_hook], on_crashed=[owners.release_hook],
      on_cancellation=[owners.cancellation_hook(_index_files, fleet=True)])
def fleet_reindex(
    config_file: str | None = None,
    agents: list[str] | None = None,
    full: bool = False,
    if_busy: IfBusy | None = "skip",
    task_runner: RunnerChoice = "threads",
    dask_address: str | None = None,
    dask_workers: DaskWorkers = 2,
    deployment: str | None = None,
    re_embed: bool = False,
) -> dict[str, Any]:
    """Reindex every agent of the config file (or ``agents``), one task per agent.

    Args:
        config_file: memory-core TOML config file with an [agents] table (default: MEMORY_CORE_CONFIG).
        agents: Only these agents (default: every agent in agents.list).
        full: Rebuild each index in full (vectors still come from the embedding cache; see re_embed).
        if_busy: When another run is writing an agent's index: wait, skip (default) or fail.
        task_runner: Where each agent's embedding requests run: threads (default) or dask.
        dask_address: Address of a running Dask scheduler (task_runner=dask).
        dask_workers: Worker processes of a local Dask cluster (task_runner=dask, no address).
        deployment: Run each agent as a run of this deployment of the reindex flow (e.g. reindex/agent),
            on its work pool, instead of a subflow here.
        re_embed: Rebuild each index and embed every chunk again through sync requests, reading no vector
            from the embedding cache or the index (a provider once answered bad vectors); the fresh vectors
            replace the cached ones.
    """
    import os

    logger = get_run_logger()
    path = config_file or os.environ.get("MEMORY_CORE_CONFIG") or None
    if config_file == "":  # a deployment made by `prefect deploy --all` with MEMORY_CORE_CONFIG unset
        logger.warning("the config_file parameter is empty (MEMORY_CORE_CONFIG was not set when the deployment"
                       " was made); %s", f"using $MEMORY_CORE_CONFIG here: {path}" if path else
                       "$MEMORY_CORE_CONFIG is not set here either")
    fleet = resolve_agents(path, agents)  # unknown agents, shared stores: ConfigError before any run
    assert path is not None
    logger.info("reindexing %d agent(s): %s", len(fleet), ", ".join(fleet))
    _hold_owner_files(fleet)
    started = {a: time.perf_counter() for a in fleet}
    stop_key = uuid.uuid4().hex
    cancel = _STOPS[stop_key] = run_stops.Cancel()
    futures: dict[str, Any] = {}
    try:
        futures = {a: reindex_agent.submit(a, str(path), full, if_busy, task_runner, dask_address, dask_workers,
                                           deployment, stop_key, re_embed) for a in fleet}
        wait(list(futures.values()))
    except BaseException as exc:
        # a stop lands in this thread only: before, the agents' runs (in the runner's threads) went on and
        # published after a Ctrl-C or SIGTERM, one of them started after it (the thirty-fifth session's
        # stop audit, F1). They now end at their next check, or do not start, and each agent's outcome
        # is said before the stop goes on.
        if is_stop(exc):
            cancel.set(stop_word(exc))
            _say_stopped(logger, futures, exc)
        # a cancel through its runner or worker: this run's owner files, and those of its agents' runs in
        # this process, say so (the runner's on_cancellation hook removes them once this process is gone)
        _mark_runner_cancel(exc)
        raise
    _STOPS.pop(stop_key, None)  # every agent's task has ended: none can start and look for it
    rows, results, failed = [], {}, []
    for agent, fut in futures.items():
        state = fut.state
        seconds = time.perf_counter() - started[agent]
        if state.is_completed():
            results[agent] = fut.result()
            rows.append(_row(agent, results[agent], None, seconds))
        else:
            err = str(state.message or state.name)
            failed.append(agent)
            rows.append(_row(agent, None, f"failed: {err}", seconds))
    try:
        from prefect.artifacts import create_table_artifact

        create_table_artifact(rows, key="fleet-reindex-summary",
                              description=f"{len(fleet) - len(failed)} of {len(fleet)} agents reindexed")
    except Exception as exc:  # the UI is a nicety; the outcome is in the state
        logger.warning("cannot create the fleet summary artifact: %s", exc)
    out = {"agents": results, "failed": failed}
    if failed:
        return Failed(message=f"{len(failed)} of {len(fleet)} agents failed: {', '.join(failed)}", data=out)  # type: ignore[return-value]
    return Completed(message=f"{len(fleet)} agents reindexed", data=out)  # type: ignore[return-value]

