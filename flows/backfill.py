"""The ``backfill`` flow: a large, ad hoc (re)index through the provider's Batch API.

The same stages as ``reindex``; what differs is the defaults: batch mode on (Batch APIs cost
33-50 % less than sync calls, and take minutes to hours), ``if_busy="wait"``, so a backfill
started while a scheduled run is writing waits for it instead of giving up, and
``force_sessions`` on: a backfill is a run someone asked for, so every transcript that grew is
indexed, as ``memory-core index`` does (the sessions delta is for the runs a schedule or a trigger
starts). Every parameter can be overridden per run, e.g.::

    prefect deployment run backfill/backfill --param full=true --param batch=false
"""

from __future__ import annotations

from typing import Any

from prefect import flow
from prefect.task_runners import ThreadPoolTaskRunner

from flows import owners
from flows.reindex import (
    IfBusy,
    ProviderChoice,
    ReindexParams,
    SourceChoice,
    _index_files,
    _run_name,
    run_pipeline,
)
from flows.runners import Concurrency, DaskWorkers, RunnerChoice
from memory_core.index.runtypes import EMBED_CONCURRENCY


@flow(name="backfill", flow_run_name=_run_name, task_runner=ThreadPoolTaskRunner(max_workers=4),  # type: ignore[arg-type]
      validate_parameters=True, log_prints=False, on_completion=[owners.release_hook],
      on_failure=[owners.release_hook], on_crashed=[owners.release_hook],
      on_cancellation=[owners.cancellation_hook(_index_files)])
def backfill(
    workspace: str | None = None,
    index_path: str | None = None,
    config_file: str | None = None,
    provider: ProviderChoice | None = None,
    model: str | None = None,
    full: bool = False,
    extra_paths: list[str] | None = None,
    sources: list[SourceChoice] | None = None,
    embed_concurrency: Concurrency = EMBED_CONCURRENCY,
    batch: bool | None = True,
    force_sessions: bool = True,
    if_busy: IfBusy | None = "wait",
    task_runner: RunnerChoice = "threads",
    dask_address: str | None = None,
    dask_workers: DaskWorkers = 2,
    agent: str | None = None,
    re_embed: bool = False,
) -> dict[str, Any]:
    """Backfill a memory-core index: embed everything new through the provider's Batch API.

    Args:
        workspace: Workspace folder with MEMORY.md and memory/ (default: MEMORY_CORE_WORKSPACE, else the config file's).
        index_path: Index file (default: <workspace>/.memory-core/index.sqlite).
        config_file: memory-core TOML config file (default: MEMORY_CORE_CONFIG). API keys live there or in the environment.
        provider: Embedding provider; unset means the config file's choice.
        model: Embedding model; unset means the provider's default.
        full: Rebuild the whole index (vectors still come from the embedding cache).
        extra_paths: Extra Markdown files or folders to index.
        sources: Sources to index: memory and/or sessions (unset: what the index was built from).
        embed_concurrency: Embedding requests in flight for sync calls (threads, or Dask threads in total).
        batch: Embed through the provider's Batch API (default on); false sends sync requests.
        force_sessions: Reindex every changed transcript, ignoring the sessions delta thresholds (default on: a backfill is asked for).
        if_busy: When another run is writing this index: wait (default, up to lock.timeout_s), skip, or fail.
        task_runner: Where sync embedding requests run: threads (default) or dask.
        dask_address: Address of a running Dask scheduler, e.g. tcp://10.0.0.5:8786 (task_runner=dask).
        dask_workers: Worker processes of a local Dask cluster (task_runner=dask, no address).
        agent: An agent of the config file's [agents] table: its workspace, index, qmd state and LanceDB folder.
        re_embed: Rebuild the whole index and embed every chunk again through sync requests, reading no vector
            from the embedding cache or the index; the fresh vectors replace the cached ones.
    """
    params = ReindexParams(
        workspace=workspace, index_path=index_path, config_file=config_file, provider=provider, model=model,
        full=full, extra_paths=extra_paths, sources=sources, embed_concurrency=embed_concurrency, batch=batch,
        force_sessions=force_sessions, if_busy=if_busy, task_runner=task_runner, dask_address=dask_address,
        dask_workers=dask_workers, agent=agent, re_embed=re_embed)
    return run_pipeline(params, "backfill")  # type: ignore[return-value]
