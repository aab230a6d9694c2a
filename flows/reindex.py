"""The ``reindex`` flow: discover -> chunk -> cache lookup -> embed misses -> build, verify, swap.

Works with a Prefect server (deployments, the UI) and without one (``memory-core index``
runs it in-process). Parameters are flat, validated and documented, so the UI renders a form
and ``prefect deployment run reindex/incremental --param full=true`` overrides one of them;
API keys are never parameters: they come from the environment or the config file.

One run holds the index's writer lock (``<index>.lock``, an exclusive flock) from discovery to
the swap. ``if_busy`` says what a run does when another run holds it: ``wait`` (up to
``lock.timeout_s``), ``skip`` (end at once in a Completed state named ``Skipped``: right for
scheduled runs, the next tick catches up) or ``fail``.

The ``backfill`` flow (flows/backfill.py) is the same run with batch mode on by default.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Literal

from prefect import flow, get_run_logger
from prefect.states import Cancelled, Completed, State
from prefect.task_runners import ThreadPoolTaskRunner
from pydantic import BaseModel, ConfigDict, Field

from flows import owners, report
from flows.executor import PrefectExecutor
from flows.runners import Concurrency, DaskWorkers, RunnerChoice
from memory_core.config import Settings
from memory_core.embeddings.catalog import provider_names
from memory_core.errors import ConfigError
from memory_core.index import pipeline
from memory_core.index.runtypes import EMBED_CONCURRENCY, RunSummary, is_stop
from memory_core.index.stages import preflight
from memory_core.runtime.resolve import resolve_settings
from tasks.stages import provider_for

IfBusy = pipeline.IfBusy
# marks the log records of the run's summary lines: `index --engine prefect` prints the summary
# itself, and keeps them off its console (it printed the summary twice)
SUMMARY_LINE = "memory_core_summary_line"
# a log record an in-process caller (the CLI) says in its own words: kept off its console (flows/engine.py)
CALLER_SAYS = "memory_core_caller_says"
# the registry's list as a Literal, so the UI form offers every registered provider
if TYPE_CHECKING:
    ProviderChoice = str
else:
    ProviderChoice = Literal[tuple(provider_names())]
SourceChoice = Literal["memory", "sessions"]


class ReindexParams(BaseModel):
    """What a reindex run may be told. Unset fields come from the config file, then what the
    live index recorded, then the defaults (``memory_core.runtime.resolve.resolve_settings``)."""

    model_config = ConfigDict(extra="forbid")

    workspace: str | None = Field(default=None, description="Workspace folder with MEMORY.md and memory/")
    index_path: str | None = Field(default=None, description="Index file (default <workspace>/.memory-core/index.sqlite)")
    config_file: str | None = Field(default=None, description="A memory-core TOML config file")
    agent: str | None = Field(default=None, description="The agent of the config file's [agents] table whose"
                                                        " workspace and index to reindex")
    provider: ProviderChoice | None = None
    model: str | None = None
    full: bool = Field(default=False, description="Rebuild everything (vectors still come from the cache)")
    re_embed: bool = Field(default=False, description="Rebuild everything and embed every chunk again, reading no"
                                                      " cached vector; the fresh vectors replace the cached ones")
    extra_paths: list[str] | None = None
    sources: list[SourceChoice] | None = None
    embed_concurrency: int = Field(default=EMBED_CONCURRENCY, ge=1, le=64, description="Embedding requests in flight")
    batch: bool | None = Field(default=None, description="Use the provider's Batch API (None: the config's batch.enabled)")
    force_sessions: bool = Field(default=False, description="Reindex every changed transcript, ignoring the delta thresholds")
    if_busy: IfBusy | None = Field(default=None, description="When another run holds the index: wait, skip or fail")
    task_runner: RunnerChoice = Field(default="threads", description="Where embedding requests run: threads or dask")
    dask_address: str | None = Field(default=None, description="Address of a running Dask scheduler (task_runner=dask)")
    dask_workers: int = Field(default=2, ge=1, le=256, description="Processes of the local Dask cluster (no address)")

    def to_settings(self) -> Settings:
        for name in ("workspace", "index_path", "config_file"):
            value = getattr(self, name)
            if isinstance(value, str) and "{{" in value:
                raise ConfigError(
                    f"parameter {name} is the unfilled template {value!r}: export the environment variable"
                    " before `prefect deploy`, or set the parameter on the deployment or the run"
                )
        # the one settings order (memory_core.runtime.resolve.resolve_settings): these parameters, the
        # environment, the config file, what the live index recorded, the defaults
        told: dict[str, Any] = {
            "workspace": self.workspace or None, "index_path": self.index_path or None, "provider": self.provider,
            "model": self.model, "extra_paths": self.extra_paths, "sources": self.sources,
        }
        if self.batch is not None:
            told["batch"] = {"enabled": self.batch}
        if self.force_sessions:
            told["sessions"] = {"delta_bytes": 0, "delta_messages": 0}
        return resolve_settings(told, config_file=self.config_file or None, told_by="flow parameter {}",
                                agent=self.agent).settings  # "" is refused, as the CLI and the API refuse it

    def flow_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for calling the ``reindex``/``backfill`` flow with these parameters."""
        return self.model_dump(exclude_unset=True)


# -- names -----------------------------------------------------------------------------------

def _run_name() -> str:
    """``<flow>-<index name>-<incremental|full|sessions>[-batch]``, e.g. ``reindex-notes-incremental``."""
    from prefect.runtime import flow_run

    flow_name = flow_run.flow_name or "reindex"
    raw = dict(flow_run.parameters or {})
    first = False
    try:
        params = ReindexParams.model_validate(raw)
        settings = _RESOLVED.get() or params.to_settings()
        name, batch = report.index_label(settings), settings.batch.enabled
        # a first build is a full one: named so from its start, not renamed "-full" at its end
        first = not settings.index_file.exists()
    except Exception:  # a bad parameter fails the run later, with a readable message
        name, batch = _label_of(raw), bool(raw.get("batch"))
    mode = "full" if raw.get("full") or raw.get("re_embed") or first else "sessions" if raw.get("force_sessions") else "incremental"
    return f"{flow_name}-{report.slug(name)}-{mode}" + ("-batch" if batch else "")


def _label_of(raw: dict[str, Any]) -> str:
    """:func:`flows.report.index_label` for a run whose settings do not resolve (a bad config
    file, an unknown agent): from its parameters (else the environment), so a failed run's notes
    go under the key every other run of that index uses (``<flow>-<index>-notes``), not one made
    of the whole workspace path, and no two agents' failures share ``<flow>-index-notes``."""
    import os
    from pathlib import PurePath

    if raw.get("agent"):
        return str(raw["agent"])
    index = str(raw.get("index_path") or os.environ.get("MEMORY_CORE_INDEX") or "").rstrip("/")
    workspace = str(raw.get("workspace") or os.environ.get("MEMORY_CORE_WORKSPACE") or "").rstrip("/")
    if index:
        f = PurePath(index)
        if not (f.stem == "index" and f.parent.name == ".memory-core"):
            return f.stem or "index"
        workspace = workspace or str(f.parent.parent)
    return (PurePath(workspace).name or "index") if workspace else "index"


# -- a cancel of an in-process run ------------------------------------------------------------

# How often an in-process flow run (``memory-core index --engine prefect``, ``reindex(...)``
# called from Python) asks the API whether it was cancelled: one GET of the flow run, from a
# daemon thread. ``MEMORY_CORE_CANCEL_POLL_S`` sets it; 0 turns the watch off.
CANCEL_POLL_S = 1.5
CANCELLED_IN_PREFECT = "cancelled in Prefect"


class _CancelWatch:
    """Watches the state of a flow run that runs in this process with no worker or runner to act
    on Cancelling (a cancel from the UI or ``prefect flow-run cancel`` was ignored: the run went on,
    published, and stayed Cancelling for ever). On Cancelling (or Cancelled) it sends this process
    one SIGTERM: Prefect's handler raises its TerminationSignal in the main thread, which the
    pipeline handles as any stop (nothing published before it, or a summary that says it was)."""

    def __init__(self, flow_run_id: Any, interval: float) -> None:
        self.flow_run_id = flow_run_id
        self.interval = interval
        self.requested = False  # the SIGTERM was sent
        self._closed = False
        self._lock = threading.Lock()
        self._done = threading.Event()
        ctx = contextvars.copy_context()  # the caller's Prefect settings (API URL) are context variables
        self._thread = threading.Thread(target=ctx.run, args=(self._loop,), name="memory-core-cancel-watch",
                                        daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        from prefect.client.orchestration import get_client

        with contextlib.suppress(Exception), get_client(sync_client=True) as client:
            while not self._done.wait(self.interval):
                try:
                    state = client.read_flow_run(self.flow_run_id).state
                except Exception:  # the API blinked: ask again at the next tick
                    continue
                if state is not None and (state.is_cancelling() or state.is_cancelled()):
                    with self._lock:
                        if not self._closed:
                            self.requested = True
                            signal.raise_signal(signal.SIGTERM)
                    return

    def close(self) -> bool:
        """Stop watching; whether the stop was sent (it may still be pending: see :func:`_absorb_sigterm`)."""
        self._done.set()
        with self._lock:
            self._closed = True
        return self.requested

    def cancelling_now(self) -> bool:
        """One last look, as the run ends: a cancel that came after the watch closed."""
        from prefect.client.orchestration import get_client

        try:
            with get_client(sync_client=True) as client:
                state = client.read_flow_run(self.flow_run_id).state
        except Exception:
            return False
        return state is not None and (state.is_cancelling() or state.is_cancelled())


def _watch_for_cancel() -> _CancelWatch | None:
    """A watch for a top-level flow run in this process's main thread that no worker or runner
    supervises (those act on Cancelling themselves: ``PREFECT__FLOW_RUN_ID`` is set in their
    process), with Prefect's SIGTERM handler in place; None otherwise (a subflow, a fleet's agents
    in threads: a SIGTERM would stop them all)."""
    from prefect.context import FlowRunContext

    try:
        interval = float(os.environ.get("MEMORY_CORE_CANCEL_POLL_S") or CANCEL_POLL_S)
    except ValueError:
        interval = CANCEL_POLL_S
    ctx = FlowRunContext.get()
    if interval <= 0 or ctx is None or ctx.flow_run is None or ctx.flow_run.parent_task_run_id is not None \
            or os.environ.get("PREFECT__FLOW_RUN_ID") or threading.current_thread() is not threading.main_thread() \
            or signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, signal.SIG_IGN, None):
        return None
    return _CancelWatch(ctx.flow_run.id, interval)


def _absorb_sigterm() -> None:
    """The watch's SIGTERM, sent as the run finished, is pending: let it land on a handler that
    does nothing (main thread), so it does not cut the run's reporting short."""
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: None)
    try:
        for _ in range(1000):  # Python runs a pending handler at a loop's backward jump
            pass
        time.sleep(0.01)
    finally:
        signal.signal(signal.SIGTERM, previous)


def _cancelled(summary: RunSummary | None, message: str) -> State[Any]:
    """The final state of a run the watch stopped: Cancelled (from Cancelling), its message the
    truth (nothing published, or the stop note of a run that published); the in-process caller
    (:func:`run_reindex`) gets a :class:`pipeline.RunCancelled` carrying the summary."""
    stop = pipeline.RunCancelled(CANCELLED_IN_PREFECT)
    if summary is not None:
        stop.run_summary = summary  # type: ignore[attr-defined]
    said = _STOPPED.get()
    if said is not None:
        said.append(stop)
    return Cancelled(message=message)  # (its data would be taken for the exception to raise)


# -- the run ---------------------------------------------------------------------------------

def run_pipeline(params: ReindexParams, flow_name: str) -> dict[str, Any] | State[Any]:
    """The body shared by the ``reindex`` and ``backfill`` flows: the orchestrator
    (``memory_core.index.pipeline.run_index``, the CLI's) with the Prefect executor, plus what the UI
    shows: progress, summary and notes artifacts, events, a run name that says what it did.
    A run that fails or is cancelled still writes its notes (and a summary of what it had done
    and cached) before the error ends it. A run in this process with nothing else to act on a
    cancel (:func:`_watch_for_cancel`) watches its own state: a cancel stops it, and it ends Cancelled."""
    watch = _watch_for_cancel()
    sweeps: list[owners.Sweeper] = []
    try:
        out = _run_pipeline(params, flow_name, watch, sweeps)
    finally:
        if watch is not None:
            watch.close()
        for sweep in sweeps:  # a few ms on a server that answers; bounded on one that does not
            sweep.join()
    data = out.data if isinstance(out, State) and out.is_completed() else out
    if watch is not None and isinstance(data, dict) and watch.cancelling_now():
        # a cancel that came as the run reported: it had finished (Completed is refused from Cancelling)
        summary = RunSummary.from_dict(data)
        summary.stopped = "cancelled" if summary.swapped else CANCELLED_IN_PREFECT
        return _cancelled(summary, (summary.stop_note() if summary.swapped else
                                    f"cancelled after the run had finished: {summary.outcome()}"))
    return out


def _check_deployment_workspace(settings: Settings) -> None:
    """A deployment's run names its workspace (its parameter, the worker's ``$MEMORY_CORE_WORKSPACE``,
    a config file, an index's record): the working directory a deployment records is where
    ``prefect deploy`` ran, the checkout, and a run there indexed it as memory (an empty index in
    ``<checkout>/.memory-core``, "0 files", Completed) when ``$MEMORY_CORE_WORKSPACE`` was not set
    at deploy time (the parameter is then empty). A flow called in-process (the CLI, Python) keeps
    the current directory, as ``memory-core index`` does."""
    from prefect.runtime import deployment

    from memory_core.runtime.resolve import ORIGIN_CWD

    if settings.origins.get("workspace") == ORIGIN_CWD and deployment.id:
        raise ConfigError(
            "no workspace: the deployment's workspace parameter is empty (was $MEMORY_CORE_WORKSPACE set when it"
            " was deployed?) and neither the worker's environment nor a config file names one; set the"
            f" parameter on the deployment or the run (the run would have indexed its working directory,"
            f" {settings.workspace_dir})")


def _hold_and_sweep(settings: Settings, flow_name: str) -> list[owners.Sweeper]:
    """Hold this flow run's owner file for the index (flows/owners.py: its lock says the run is
    alive until its process ends), and settle, in a background thread, the runs of this index
    whose processes died without reporting (Running for ever in Prefect: now Crashed)."""
    from memory_core.storage.store import check_index_target

    run = owners.current_run()
    if run is None:
        return []
    try:
        check_index_target(settings.index_file)  # nothing made beside a file that is not an index of ours
    except Exception:  # the run refuses it itself, with its own message
        return []
    logger = get_run_logger()
    try:
        if owners.hold(settings.index_file, run.run_id, api_url=run.api_url, flow_name=flow_name,
                       run_name=run.name) is not None:
            owned = _OWNED.get()
            if owned is not None:
                owned.append(run.run_id)
        return [owners.Sweeper(settings.index_file, current_api=run.api_url, skip={run.run_id},
                               found_by=f"flow run {run.name} ({run.run_id})", logger=logger)]
    except Exception as exc:  # never the run's failure: it only goes unmarked if it is killed
        logger.warning("cannot hold this flow run's owner file or look for dead runs of %s: %s: %s",
                       settings.index_file, type(exc).__name__, exc)
        return []


def _run_pipeline(params: ReindexParams, flow_name: str, watch: _CancelWatch | None,
                  sweeps: list[owners.Sweeper]) -> dict[str, Any] | State[Any]:
    logger = get_run_logger()
    t_start = time.perf_counter()
    # until the settings resolve (a bad config fails that): the label the success path uses
    label = _label_of(params.model_dump())
    notes_key = f"{report.slug(flow_name)}-{report.slug(label)}-notes"
    fallbacks: list[str] = []
    settings: Settings | None = None
    progress: report.ProgressReporter | None = None
    done: list[RunSummary] = []  # the pipeline's summary, once it returned
    try:
        # resolved once per run: the caller's settings (the CLI resolved them), else from the parameters
        settings = _RESOLVED.get() or params.to_settings()
        notes_key = report.artifact_key(flow_name, settings, "notes")
        label = report.index_label(settings)
        if _RESOLVED.get() is None:  # (the CLI checked its own --index)
            _check_deployment_workspace(settings)
        preflight(settings)
        if _RESOLVED.get() is None:
            pipeline.check_index_folder(params.index_path)  # a typed path's folder must exist
        sweeps.extend(_hold_and_sweep(settings, flow_name))
        provider, reason = provider_for(settings)
        if reason.startswith("fallback"):
            fallbacks.append(report.emit_fallback(settings, "provider", reason, **{
                "from": settings.provider, "to": f"{provider.name}/{provider.model}"}))
        logger.info("provider %s / %s (%s); index %s", provider.name, provider.model, reason, settings.index_file)
        executor = PrefectExecutor(label=label, task_runner=params.task_runner, concurrency=params.embed_concurrency,
                                   dask_address=params.dask_address, dask_workers=params.dask_workers)
        watcher, on_start = _CALLER.get()
        if on_start is not None:
            with contextlib.suppress(Exception):
                from prefect.runtime import flow_run

                url = flow_run.ui_url
                # no UI address (a temporary server: PREFECT_UI_URL unset) makes "None/flow-runs/...": the id
                on_start(str(url if url and not str(url).startswith("None/") else flow_run.id))
        progress = report.ProgressReporter(report.artifact_key(flow_name, settings, "progress"), also=watcher)
        try:
            done.append(pipeline.run_index(settings, full=params.full, provider=provider, reason=reason,
                                           progress=progress, executor=executor, if_busy=params.if_busy,
                                           re_embed=params.re_embed))
        except BaseException as exc:
            _mark_runner_cancel(exc)  # before the requests in flight are waited for
            raise
        finally:
            executor.close()
        summary = done[0]
        if watch is not None and watch.close():  # the cancel came as the pipeline ended: its stop is pending
            _absorb_sigterm()
            raise pipeline.RunCancelled(CANCELLED_IN_PREFECT)
    except BaseException as exc:
        partial = getattr(exc, "run_summary", None)
        if partial is None and done and is_stop(exc):  # a stop after the pipeline returned
            partial = done[0]
            if partial.swapped:
                pipeline.stopped_after_publish(exc, partial, [])
        cancelled = (watch is not None and watch.close() and is_stop(exc)) or _mark_runner_cancel(exc)
        if cancelled and partial is not None and not partial.swapped:
            if partial.error:
                partial.error = "cancelled"  # a cancel delivered as a SIGTERM is still a cancel
            partial.stopped = CANCELLED_IN_PREFECT  # (the pipeline saw the SIGTERM that delivered it)
        if cancelled:
            logger.warning("the flow run was cancelled (Cancelling, set through the API or the UI): stopping it")
        if partial is not None and partial.swapped and settings is not None:
            if cancelled:
                partial.stopped = "cancelled"
            _stopped_after_publish(flow_name, label, settings, partial, progress, fallbacks, notes_key,
                                   time.perf_counter() - t_start)
            if cancelled:
                return _cancelled(partial, partial.stop_note())
            raise
        stopped = cancelled or is_stop(exc)
        # what stopped it, as it was: "cancelled in Prefect", "stopped by SIGTERM", "interrupted" (the notes
        # and the logs keep it: a runner or worker sets its own Cancelled state after this run's, with its
        # own message, "Flow run was cancelled successfully.")
        msg = CANCELLED_IN_PREFECT if cancelled else pipeline.stop_word(exc) if stopped else f"{type(exc).__name__}: {exc}"
        if stopped and partial is not None and not partial.stopped:  # `stopped` names it, published or not
            partial.stopped = msg
        logger.error("run %s; the live index was left as it was", msg if stopped else f"failed: {msg}",
                     extra={CALLER_SAYS: True})
        with contextlib.suppress(Exception):
            if partial is not None:  # the name chosen before the run (e.g. "-batch") says what it did
                report.rename_run(flow_name, label, partial)
        if progress is not None:
            progress.end("cancelled" if stopped else "failed")
        with contextlib.suppress(Exception):
            if partial is not None and settings is not None:
                partial.stage_seconds["total"] = round(time.perf_counter() - t_start, 3)
                report.publish_summary(report.artifact_key(flow_name, settings, "summary"),
                                       report.run_figures(partial, settings),
                                       f"{flow_name} of {label}: {partial.outcome()}")
            report.publish_notes(notes_key, report.notes_markdown(
                f"{flow_name} {label}: run {msg if stopped else 'failed'}",
                warnings=list(partial.warnings) if partial else [], fallbacks=fallbacks, error=msg,
                partial=partial, stopped=stopped, index_exists=_index_exists(settings)),
                f"the run was {msg}" if stopped else "the run failed")
        if cancelled:
            return _cancelled(partial, f"{CANCELLED_IN_PREFECT}; the live index was left as it was")
        raise
    summary.stage_seconds["total"] = round(time.perf_counter() - t_start, 3)
    report.rename_run(flow_name, label, summary)
    if summary.skipped:
        msg = f"skipped: {summary.skipped}"
        logger.info("%s", msg)
        report.publish_notes(notes_key, report.notes_markdown(
            f"{flow_name} {label}: skipped", warnings=[], fallbacks=fallbacks, extra=[msg]), "skipped run")
        return Completed(name="Skipped", message=msg, data=summary.to_dict())
    for line in summary.lines():  # the run's logs in the UI; not on the console of a caller that prints it
        logger.info("%s", line, extra={SUMMARY_LINE: True})
    if summary.fallback is not None:
        fb = summary.fallback
        fallbacks.append(report.emit_fallback(settings, "provider", fb.reason, **{"from": fb.primary, "to": fb.to}))
    if summary.batch is not None and summary.batch.disabled:
        fallbacks.append(report.emit_fallback(settings, "batch-to-sync", summary.batch.disabled_reason,
                                              chunks_via_sync=summary.batch.chunks_via_sync))
    warnings = list(summary.warnings)
    if not summary.swapped and summary.batch is None and not (warnings or fallbacks):
        # A run with nothing to do and nothing to say (every scheduled run between edits):
        # no artifacts, so each key's latest version stays the last run that did something.
        # The outcome is in the logs above and in the state's message.
        carried = summary.sessions_carried
        msg = f"nothing to do: {summary.files_unchanged} files unchanged" + (
            f", {carried} transcript(s) grew below the reindex delta" if carried else "")
        return Completed(message=msg, data=summary.to_dict())
    report.publish_summary(report.artifact_key(flow_name, settings, "summary"), report.run_figures(summary, settings),
                           f"{flow_name} of {label}: {summary.outcome()}")
    report.publish_notes(notes_key, report.notes_markdown(
        f"{flow_name} {label}: warnings and errors", warnings=warnings, fallbacks=fallbacks),
        f"{len(warnings)} warnings, {len(fallbacks)} fallbacks")
    if summary.swapped:
        report.emit_swapped(settings, summary)
    return summary.to_dict()


def _index_exists(settings: Settings | None) -> bool | None:
    """Whether the run's index file is there (None: the settings did not resolve)."""
    if settings is None:
        return None
    try:
        return settings.index_file.exists()
    except OSError:
        return None


def _stopped_after_publish(flow_name: str, label: str, settings: Settings, summary: RunSummary,
                           progress: report.ProgressReporter | None, fallbacks: list[str], notes_key: str,
                           seconds: float) -> None:
    """A run stopped (cancelled, SIGTERM) after its new index went live: the stop still ends the
    run (its state is Prefect's: Cancelled or Crashed), and what the UI shows says it published:
    the summary artifact (outcome ``swapped in, then cancelled``), the notes, the
    ``memory-core.index.swapped`` event (Automations that follow swaps must see this one). It
    said "the live index was left as it was", with no event."""
    logger = get_run_logger()
    note = summary.stop_note()
    logger.warning("run %s", note)
    with contextlib.suppress(Exception):
        report.rename_run(flow_name, label, summary)
    if progress is not None:
        progress.end(f"{summary.stopped} after the new index was published")
    with contextlib.suppress(Exception):
        summary.stage_seconds["total"] = round(seconds, 3)
        report.publish_summary(report.artifact_key(flow_name, settings, "summary"), report.run_figures(summary, settings),
                               f"{flow_name} of {label}: {summary.outcome()}")
    with contextlib.suppress(Exception):
        report.publish_notes(notes_key, report.notes_markdown(
            f"{flow_name} {label}: {summary.stopped} after the new index was published", warnings=summary.warnings,
            fallbacks=fallbacks, extra=[note]), note)
    with contextlib.suppress(Exception):
        report.emit_swapped(settings, summary)


# -- the flow ----------------------------------------------------------------------------------

def _index_files(parameters: dict[str, Any]) -> list[Any]:
    """The index a run with these parameters writes (its owner file's folder is beside it), for the
    ``on_cancellation`` hook of ``reindex`` and ``backfill``."""
    return [ReindexParams.model_validate(parameters).to_settings().index_file]


@flow(name="reindex", flow_run_name=_run_name, task_runner=ThreadPoolTaskRunner(max_workers=4),  # type: ignore[arg-type]
      validate_parameters=True, log_prints=False, on_completion=[owners.release_hook],
      on_failure=[owners.release_hook], on_crashed=[owners.release_hook],
      on_cancellation=[owners.cancellation_hook(_index_files)])
def reindex(
    workspace: str | None = None,
    index_path: str | None = None,
    config_file: str | None = None,
    provider: ProviderChoice | None = None,
    model: str | None = None,
    full: bool = False,
    agent: str | None = None,
    extra_paths: list[str] | None = None,
    sources: list[SourceChoice] | None = None,
    embed_concurrency: Concurrency = EMBED_CONCURRENCY,
    batch: bool | None = None,
    force_sessions: bool = False,
    if_busy: IfBusy | None = None,
    task_runner: RunnerChoice = "threads",
    dask_address: str | None = None,
    dask_workers: DaskWorkers = 2,
    re_embed: bool = False,
) -> dict[str, Any]:
    """Bring a memory-core index up to date with its sources (incremental unless ``full``).

    Args:
        workspace: Workspace folder with MEMORY.md and memory/ (default: MEMORY_CORE_WORKSPACE, else the config file's).
        index_path: Index file (default: <workspace>/.memory-core/index.sqlite).
        config_file: memory-core TOML config file (default: MEMORY_CORE_CONFIG). API keys live there or in the environment.
        agent: An agent of the config file's [agents] table: its workspace, index, qmd state and LanceDB folder.
        provider: Embedding provider; unset means the config file's choice.
        model: Embedding model; unset means the provider's default.
        full: Rebuild the whole index (vectors still come from the embedding cache).
        extra_paths: Extra Markdown files or folders to index.
        sources: Sources to index: memory and/or sessions (unset: what the index was built from).
        embed_concurrency: Embedding requests in flight (threads, or Dask threads in total).
        batch: Embed through the provider's Batch API (cheaper, slower); unset means the config's batch.enabled.
        force_sessions: Reindex every changed transcript, ignoring the sessions delta thresholds.
        if_busy: When another run is writing this index: wait (up to lock.timeout_s), skip, or fail.
        task_runner: Where embedding requests run: threads (default) or dask.
        dask_address: Address of a running Dask scheduler, e.g. tcp://10.0.0.5:8786 (task_runner=dask).
        dask_workers: Worker processes of a local Dask cluster (task_runner=dask, no address).
        re_embed: Rebuild the whole index and embed every chunk again through sync requests, reading no vector
            from the embedding cache or the index; the fresh vectors replace the cached ones.
    """
    params = ReindexParams(
        workspace=workspace, index_path=index_path, config_file=config_file, provider=provider, model=model,
        full=full, agent=agent, extra_paths=extra_paths, sources=sources, embed_concurrency=embed_concurrency, batch=batch,
        force_sessions=force_sessions, if_busy=if_busy, task_runner=task_runner, dask_address=dask_address,
        dask_workers=dask_workers, re_embed=re_embed)
    return run_pipeline(params, "reindex")  # type: ignore[return-value]


# What the caller of an in-process flow run wants to see: the run's progress and its URL (the CLI).
_CALLER: ContextVar[tuple[pipeline.ProgressFn | None, Callable[[str], None] | None]] = ContextVar(
    "memory_core_flow_caller", default=(None, None))
# The settings the caller of an in-process run already resolved (the CLI): not a parameter, so
# API keys never reach the server and a deployment's runs resolve theirs from their parameters.
_RESOLVED: ContextVar[Settings | None] = ContextVar("memory_core_flow_settings", default=None)
# The flow runs whose owner files (flows/owners.py) a run in this context held, for its in-process caller
_OWNED: ContextVar[list[str] | None] = ContextVar("memory_core_flow_owned", default=None)
# The stop of a run its cancel watch ended (:func:`_cancelled`), for the in-process caller
_STOPPED: ContextVar[list[BaseException] | None] = ContextVar("memory_core_flow_stopped", default=None)


def _runner_cancelled(exc: BaseException) -> bool:
    """Whether ``exc`` is the SIGTERM a worker or runner sends to cancel the flow run (the UI's or
    the API's cancel of a deployment's run): Prefect's control channel records that intent before
    the signal; a SIGTERM from anyone else (``kill``, a shutdown) has none and is said as itself."""
    if type(exc).__name__ != "TerminationSignal":
        return False
    try:
        from prefect._internal import control_listener  # Prefect 3.9's; private, so looked up with care

        return control_listener.get_intent() is not None
    except Exception:  # noqa: BLE001 - another Prefect: the signal is said as what it was
        return False


def _mark_runner_cancel(exc: BaseException) -> bool:
    """:func:`_runner_cancelled`; when it is, this process's owner files say so (flows/owners.py
    ``mark_cancelled``): its runner kills this process and reports the run Cancelled, so neither
    ``memory-core status`` nor a later sweep takes it for a run killed without reporting (the
    runner's ``on_cancellation`` hook removes them, once this process is gone)."""
    if not _runner_cancelled(exc):
        return False
    with contextlib.suppress(Exception):
        owners.mark_cancelled(None, "cancelled in Prefect: its runner or worker stopped its process")
    return True


def _stop_on_sigterm() -> Any:
    """While an in-process flow run runs (the CLI's ``--engine prefect``), a SIGTERM ends it as a
    stop the caller knows: Prefect's own handler marks the run Crashed, then sends the signal again
    to the handler it found, this one, which raises :class:`pipeline.RunCancelled` (with the
    summary of a run that had published) instead of the process dying by the signal with no line
    of ours. The handler before it (returned; None outside the main thread) is put back after."""
    def stop(signum: int, frame: Any) -> None:
        # before Prefect's handler is in place, or after it, an ``except Exception`` of Prefect's may
        # swallow this RunCancelled: the run then stops as it takes its lock (`memory-core index`)
        pipeline.stop_came(signum)
        why = f"stopped by {signal.Signals(signum).name}"
        stop = pipeline.RunCancelled(why)
        handled = sys.exc_info()[1]  # Prefect's TerminationSignal, being handled when it signals again
        partial = getattr(handled, "run_summary", None)
        if partial is not None:
            partial.stopped = why
            stop.run_summary = partial  # type: ignore[attr-defined]
        raise stop

    if threading.current_thread() is not threading.main_thread():
        return None
    try:
        return signal.signal(signal.SIGTERM, stop)
    except ValueError:
        return None


def run_reindex(params: ReindexParams, *, progress: pipeline.ProgressFn | None = None,
                on_start: Callable[[str], None] | None = None, settings: Settings | None = None) -> dict[str, Any]:
    """Run the reindex flow in this process (the CLI's ``--engine prefect``); returns the summary.
    ``on_start`` gets the flow run's URL in the UI, ``progress`` the run's progress. ``settings``:
    the caller's already resolved settings, used as they are (the run's parameters still record
    what it was told, for the UI); None: the flow resolves them from ``params``."""
    from prefect.exceptions import CancelledRun

    token = _CALLER.set((progress, on_start))
    resolved = _RESOLVED.set(settings)
    stopped = _STOPPED.set([])
    owned = _OWNED.set([])
    previous = _stop_on_sigterm()
    try:
        return reindex(**params.flow_kwargs())
    except CancelledRun:
        # cancelled in the UI or through the API: the stop the CLI knows, with what the run had done
        # (RunCancelled: "cancelled in Prefect; the live index was left as it was", or, a run that
        # published, its stop note)
        said = _STOPPED.get()
        if said:
            raise said[-1] from None
        raise
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
        # the run's final state is reported: its owner file goes (a run that ends Cancelled here, stopped by
        # its own cancel watch, runs no state hook: on_cancellation is for a runner's or worker's cancel)
        owners.release_all(set(_OWNED.get() or ()))
        _OWNED.reset(owned)
        _STOPPED.reset(stopped)
        _RESOLVED.reset(resolved)
        _CALLER.reset(token)


if __name__ == "__main__":  # pragma: no cover
    import sys

    print(reindex(workspace=sys.argv[1] if len(sys.argv) > 1 else None))
