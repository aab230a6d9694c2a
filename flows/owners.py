"""Flow runs whose process died without reporting: found exactly, and marked Crashed by the next run.

A flow run of ``reindex`` or ``backfill`` killed with no chance to report (SIGKILL, the OOM
killer, a machine going down) stayed ``Running`` in Prefect for ever when no worker or runner
was left to mark it: the CLI's own run (``memory-core index --engine prefect``), or a served
deployment whose ``serve`` process died with it.

Each run holds an exclusive ``flock`` for its whole life on a small owner file named after its flow
run id, in ``<index>.flow-runs/`` beside the index (:func:`hold`). The kernel drops the lock when
the process dies, however it dies, so "is that run alive" is "can its file be locked": no pid
(pids are reused), no clock, no heartbeat to miss under a slow provider. The lock belongs to the
open file, so two runs in one process (a fleet's agents) are told apart too. The file is created
under a temporary name, locked and written, then renamed into place: under its final name it is
always locked by a live owner or left by a dead one.

The next run of the same index (:func:`sweep`, in a background thread: it never delays nor fails
the run) takes the lock of every other owner file it can, and for each asks the Prefect server
the dead run reported to (recorded in the file): a run still ``Running`` or ``Pending`` is set
``Crashed``, one still ``Cancelling`` is set ``Cancelled``, with a message saying which process
stopped and what the live index holds; a run already final (it finished, or its runner marked it),
or no longer on the server, is left as it is. Then the file is removed. A file whose server
cannot be reached is kept (one warning per process), for a later run. A sweeper keeps the file's
lock while it talks to the server, so two runs sweeping at once never both act on one run (the
second sees the file locked and leaves it). A run whose file stays locked is never touched.

A ``fleet-reindex`` run holds an owner file of its own in every agent's folder (one lock each):
its agents' runs, as subflows in its process or runs of a deployment elsewhere, hold their own,
and the next run of any of those indexes marks a killed fleet run Crashed (the other folders'
copies are then found final, and removed).

A run that finishes removes its file once its final state is reported (the flow's state hooks;
:func:`release_all` after an in-process run as a fallback); a run killed between its last report
and that removal leaves a file the next sweep finds final, and removes.

A deployment run cancelled through its runner or worker (``prefect flow-run cancel``, the UI's
Cancel) is no run killed without reporting, though its runner kills its process: the run's process
marks its files cancelled as it handles the cancel (:func:`mark_cancelled`: ``memory-core status``
leaves them out), and the flows' ``on_cancellation`` hook (:func:`cancellation_hook`), which
Prefect 3 runs in the runner's or worker's process after the kill and before it sets the run
Cancelled, removes them. A fleet run's agents, subflows in the process the runner killed, are
settled with it (Cancelled, not Crashed). A marked file no hook removed (the runner went down too)
is settled by the next sweep: Cancelled if its run is still not final, else just removed.
"""


from __future__ import annotations

import contextlib
import logging
import os
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

# the owner files themselves (no Prefect): memory_core/storage/run_owners.py; named here too, for
# the flows (owners.hold, owners.release_all, ...) and for tests
from memory_core.storage.run_owners import (  # noqa: F401
    FLEET_FLOW,
    OWNERS_SUFFIX,
    Dead,
    RunOwner,
    dead_owners,
    held_ids,
    hold,
    mark_cancelled,
    owners_dir,
    release,
    release_all,
    remove_dead,
    stopped_runs,
)

log = logging.getLogger("memory_core.flow_runs")

# the most a run waits at its end for its sweep to finish: nothing on a server that answers (the sweep,
# a few requests, is over long before), this much on one that does not (the file is kept then)
SWEEP_JOIN_S = 0.2
SWEEP_TIMEOUT_S = 10.0  # each request of the sweep (a server that accepts and never answers)
# how long the on_cancellation hook waits for the lock of a run's process that its runner killed
# (after SIGKILL the runner does not wait for the exit: the lock goes a moment later)
CANCEL_HOOK_WAIT_S = 5.0

_warned: set[str] = set()  # servers already warned about in this process (once each)


@dataclass(frozen=True)
class CurrentRun:
    """The flow run this code runs in, as an owner file records it."""

    run_id: str
    name: str
    api_url: str


def current_run() -> CurrentRun | None:
    """The flow run of this context (its id, name and the API it reports to), or None outside one."""
    from prefect.context import FlowRunContext
    from prefect.settings import get_current_settings

    ctx = FlowRunContext.get()
    if ctx is None or ctx.flow_run is None:
        return None
    return CurrentRun(str(ctx.flow_run.id), str(ctx.flow_run.name), str(get_current_settings().api.url or ""))


def release_hook(flow: Any, flow_run: Any, state: Any) -> None:
    """A flow state hook (Completed, Failed, Crashed): the final state is reported, the file goes."""
    release(str(flow_run.id))


class StateHook(Protocol):
    """A flow state hook, as Prefect calls it (``hook(flow=..., flow_run=..., state=...)``)."""

    __name__: str  # (Prefect logs hooks by name)

    def __call__(self, flow: Any, flow_run: Any, state: Any) -> None: ...


def cancellation_hook(index_files: Callable[[dict[str, Any]], list[Any]], *, fleet: bool = False) -> StateHook:
    """The ``on_cancellation`` hook of a flow whose runs hold owner files for the indexes
    ``index_files`` finds from a run's parameters (``reindex``; ``fleet-reindex``, ``fleet`` True).
    Prefect 3's runner (``serve``) and workers run it in their own process once they have killed
    the cancelled run's process, then set the run Cancelled: the run's owner files, which that
    process no longer holds, are removed here, so the run is never taken for one killed without
    reporting. For a fleet run, its agents' runs that ran in the same process (subflows) are
    settled too: Cancelled on the server if still not final, their files removed. The hook never
    raises (a failure is a warning in the run's logs)."""

    def remove_owner_files(flow: Any, flow_run: Any, state: Any) -> None:
        logger = _run_logger(flow, flow_run)
        run_id = str(flow_run.id)
        release(run_id)  # a cancel the run's own process handles: its files are held here
        try:
            indexes = index_files(dict(flow_run.parameters or {}))
        except Exception as exc:  # noqa: BLE001 - its file stays (marked: status leaves it out)
            logger.warning("cannot find the indexes of cancelled flow run %s to remove its owner files: %s: %s",
                           run_id, type(exc).__name__, exc)
            return
        records = []
        for index in indexes:
            record = remove_dead(index, run_id, wait_s=CANCEL_HOOK_WAIT_S)
            if record is not None:
                records.append(record)
            elif (owners_dir(index) / run_id).exists():
                logger.warning("the owner file of cancelled flow run %s in %s is still held by a live process:"
                               " left for the next run of that index", run_id, owners_dir(index))
        if fleet and records:
            _settle_agents(flow_run, indexes, records[0], logger)

    return remove_owner_files


def _settle_agents(flow_run: Any, indexes: list[Any], record: dict[str, Any], logger: Any) -> None:
    """A cancelled fleet run's agents' runs that ran in its process (same host and pid, started
    after it): Cancelled if still not final, their owner files removed."""
    host, pid, started = record.get("host"), record.get("pid"), str(record.get("started") or "")
    if not pid:
        return
    message = (f"cancelled with its fleet run {flow_run.name} ({flow_run.id}), which ran it in the same process"
               f" (host {host}, pid {pid}): the runner stopped that process. The live index is as it was before"
               " this run, or the one this run published (the swap is atomic: never a mix)")
    from prefect.settings import get_current_settings

    api = str(get_current_settings().api.url or "")
    for index in indexes:
        with contextlib.suppress(Exception):
            sweep(index, current_api=api, found_by=f"fleet run {flow_run.name}", logger=logger,
                  only=lambda r: (r.get("host"), r.get("pid")) == (host, pid) and r.get("flow") != FLEET_FLOW
                  and str(r.get("started") or "") >= started,  # (its agents' runs began after it)
                  cancelled=message)


def _run_logger(flow: Any, flow_run: Any) -> Any:
    try:
        from prefect.logging.loggers import flow_run_logger

        return flow_run_logger(flow_run, flow)
    except Exception:  # noqa: BLE001
        return log


def cancel_message(record: dict[str, Any], *, found_by: str) -> str:
    """For a dead run whose file says its runner was cancelling it, and which is still not final."""
    host, pid = record.get("host") or "?", record.get("pid") or "?"
    return (f"the process running this flow run (host {host}, pid {pid}) stopped as it was cancelled"
            f" ({record.get('cancelled')}), and nothing reported it Cancelled: found when {found_by} looked."
            " A cancelled run publishes nothing after its cancel: the live index is as it was, or the one this"
            " run published before it (the swap is atomic: never a mix)")


def crash_message(record: dict[str, Any], *, found_by: str) -> str:
    host, pid = record.get("host") or "?", record.get("pid") or "?"
    index = record.get("index") or "the index"
    if record.get("flow") == FLEET_FLOW:  # a fleet's run: one owner file in each of its agents' indexes
        return (f"the process running this fleet run (host {host}, pid {pid}) stopped without reporting (killed, or"
                f" its machine went down): its lock was free when {found_by} looked. Each agent's live index is as"
                " it was before that agent's run, or the one its run published (each swap is atomic: never a mix);"
                " an agent's run left Running is marked by the next run of its index")
    return (f"the process running this flow run (host {host}, pid {pid}) stopped without reporting (killed, or its"
            f" machine went down): its lock was free when {found_by} looked. The live index {index} is as it was"
            " before this run, or the one this run published (the swap is atomic: never a mix); the next run"
            " re-embeds nothing this run cached")


@dataclass
class SweepResult:
    crashed: list[str]  # flow run ids set Crashed (or Cancelled, from Cancelling) by this sweep
    settled: list[str]  # already final, gone from the server, or in a state left as it is: file removed
    kept: list[str]  # their server could not be asked: file kept for a later run
    problems: list[str]  # why, per server that could not be asked


def sweep(index_file: str | os.PathLike[str], *, current_api: str, skip: set[str] | None = None,
          found_by: str = "a later run of the same index", logger: Any = None,
          only: Callable[[dict[str, Any]], bool] | None = None, cancelled: str | None = None) -> SweepResult:
    """Settle the flow runs of ``index_file`` whose owner files no live process holds (see the
    module's docstring). ``current_api``: this process's Prefect API URL ("" for a temporary
    server); a dead run recorded with no URL ran on a temporary server and is asked about only
    by a run on one too. Never raises for a server that cannot be asked. ``logger``: where its
    warnings go (the sweeping flow run's logger; default this module's). ``only``: settle only the
    files whose record it accepts; ``cancelled``: set those still not final Cancelled, with this
    message (runs stopped by a cancel), not Crashed."""
    logger = logger or log
    out = SweepResult([], [], [], [])
    by_api: dict[str, list[Dead]] = {}
    for dead in dead_owners(index_file, skip=(skip or set()) | held_ids()):
        if only is not None and not only(dead.record):
            dead.keep()
            continue
        api = str(dead.record.get("api_url") or "")
        if not api and current_api:  # a temporary server's run: only a run on one can look it up
            dead.keep()
            out.kept.append(dead.flow_run_id)
            continue
        by_api.setdefault(api, []).append(dead)
    for api, deads in by_api.items():
        try:
            _settle_on(api, deads, out, found_by, logger, cancelled)
        except Exception as exc:  # the server is down, or the URL is wrong: keep them for later
            why = f"{type(exc).__name__}: {exc}".strip()
            out.problems.append(f"{api or 'the temporary Prefect server'}: {why}")
            for dead in deads:  # (those not settled before the failure)
                out.kept.append(dead.flow_run_id)
                dead.keep()
            if api not in _warned:
                _warned.add(api)
                logger.warning("cannot reach the Prefect API %s to mark %d flow run(s) of %s whose process stopped"
                               " without reporting (%s); their owner files in %s are kept for a later run (remove"
                               " them if that server is gone for good)", api or "(temporary server)", len(deads),
                               index_file, why, owners_dir(index_file))
    return out


def _settle_on(api: str, deads: list[Dead], out: SweepResult, found_by: str, logger: Any,
               cancelled: str | None = None) -> None:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.objects import StateType
    from prefect.client.schemas.responses import SetStateStatus
    from prefect.exceptions import ObjectNotFound
    from prefect.settings import PREFECT_API_URL, temporary_settings
    from prefect.states import Cancelled, Crashed, State

    settings = temporary_settings(updates={PREFECT_API_URL: api}) if api else contextlib.nullcontext()
    with settings, get_client(sync_client=True, httpx_settings={"timeout": SWEEP_TIMEOUT_S}) as client:
        while deads:
            dead = deads[0]
            run_id = uuid.UUID(dead.flow_run_id)
            try:
                state = client.read_flow_run(run_id).state
            except ObjectNotFound:
                state = None
            if state is None or state.is_final() or state.type not in (
                    StateType.RUNNING, StateType.PENDING, StateType.CANCELLING):
                # final (it finished, or its runner marked it), deleted, or scheduled again: as it is
                out.settled.append(dead.flow_run_id)
            else:
                # a run stopped by a cancel (its fleet's, or its runner's: its file says so) ends Cancelled
                stopped_by_cancel = cancelled or (cancel_message(dead.record, found_by=found_by)
                                                  if dead.record.get("cancelled") else None)
                message = stopped_by_cancel or crash_message(dead.record, found_by=found_by)
                new: State[Any] = Cancelled(message=message) if stopped_by_cancel or \
                    state.type == StateType.CANCELLING else Crashed(message=message)
                got = client.set_flow_run_state(run_id, new, force=False)
                if got.status != SetStateStatus.ACCEPT:
                    now = client.read_flow_run(run_id).state
                    if now is not None and not now.is_final():  # refused by a rule, still not final
                        got = client.set_flow_run_state(run_id, new, force=True)
                if got.status == SetStateStatus.ACCEPT:
                    out.crashed.append(dead.flow_run_id)
                    logger.warning("flow run %s (%s) marked %s: %s", dead.flow_run_id, dead.record.get("run") or "?",
                                new.name, message)
                else:
                    out.settled.append(dead.flow_run_id)
            deads.pop(0)
            dead.done()


class Sweeper:
    """:func:`sweep` in a daemon thread (the run never waits on the server for it, and a failure
    there is one warning); :meth:`join` waits at most ``SWEEP_JOIN_S`` at the run's end."""

    def __init__(self, index_file: str | os.PathLike[str], *, current_api: str, skip: set[str],
                 found_by: str, logger: Any = None) -> None:
        import contextvars

        self.result: SweepResult | None = None
        self.logger = logger or log
        ctx = contextvars.copy_context()  # the caller's Prefect settings are context variables
        self._thread = threading.Thread(target=ctx.run, args=(self._run, index_file, current_api, skip, found_by),
                                        name="memory-core-crashed-sweep", daemon=True)
        self._thread.start()

    def _run(self, index_file: str | os.PathLike[str], current_api: str, skip: set[str], found_by: str) -> None:
        try:
            self.result = sweep(index_file, current_api=current_api, skip=skip, found_by=found_by,
                                logger=self.logger)
        except Exception as exc:  # never the run's failure
            self.logger.warning("the sweep for flow runs that stopped without reporting failed: %s: %s",
                        type(exc).__name__, exc)

    def join(self, timeout: float = SWEEP_JOIN_S) -> None:
        self._thread.join(timeout)
