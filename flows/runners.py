"""Where embedding request groups run: a bounded thread pool (default) or a Dask cluster.

Only the embed tasks move: each takes one request group's texts and returns vectors. The
flow keeps discovery, chunking, the embedding cache and the SQLite build on its own machine,
so the index is written by exactly one process.

- ``threads`` (default): ``ThreadPoolTaskRunner(max_workers=embed_concurrency)``. Right for the
  hosted providers (OpenAI, Gemini, Voyage): requests are I/O bound and the provider's rate
  limit, not the CPU, sets the pace.
- ``dask`` with ``dask_address``: connect to a running cluster (``tcp://host:8786``). Right for
  the local model on a corpus too big for one machine's CPUs: every Dask worker loads the model
  once and embeds groups in parallel. Workers need memory-core installed, and, for hosted
  providers, the API key in their environment or config file.
- ``dask`` without an address: a ``LocalCluster`` of ``dask_workers`` processes on the flow's
  machine; sidesteps the GIL for the local model, and is how tests check that a cluster gives
  the same index as the thread pool.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from prefect.task_runners import TaskRunner, ThreadPoolTaskRunner
from pydantic import Field

from memory_core.errors import ConfigError

# The bounds of the flows' numeric parameters, in their signatures: Prefect puts them in each
# deployment's parameter schema, so the server refuses a bad value when a run is created (it
# started, then failed with pydantic's dump and a traceback: the thirty-ninth session's audit E)
Concurrency = Annotated[int, Field(ge=1, le=64, description="Embedding requests in flight (1-64)")]
DaskWorkers = Annotated[int, Field(ge=1, le=256, description="Processes of a local Dask cluster (1-256)")]
RunnerChoice = Literal["threads", "dask"]


def make_embed_runner(choice: RunnerChoice, *, concurrency: int, dask_address: str | None = None,
                      dask_workers: int = 2) -> tuple[TaskRunner[Any], str]:
    """The task runner for embedding request groups, and a one-line description of it."""
    if choice == "threads":
        if dask_address:
            raise ConfigError("dask_address is set but task_runner is 'threads'; set task_runner to 'dask'")
        n = max(1, concurrency)
        return ThreadPoolTaskRunner(max_workers=n), f"threads ({n} worker{'s' if n > 1 else ''})"
    if choice != "dask":
        raise ConfigError(f"task_runner: unknown runner {choice!r}; choose 'threads' or 'dask'")
    try:
        from prefect_dask import DaskTaskRunner
    except ImportError:
        raise ConfigError("task_runner 'dask' needs prefect-dask: pip install 'memory-core[dask]' (or prefect-dask)") from None
    if dask_address:
        return DaskTaskRunner(address=dask_address), f"dask cluster at {dask_address}"
    threads = max(1, math.ceil(concurrency / max(1, dask_workers)))
    runner = DaskTaskRunner(cluster_kwargs={
        "n_workers": dask_workers, "threads_per_worker": threads, "processes": True, "dashboard_address": ":0",
    })
    return runner, f"dask local cluster ({dask_workers} processes x {threads} threads)"


def runner_parallelism(runner: TaskRunner[Any], default: int) -> int:
    """How many tasks the runner can run at once (for the in-flight bound)."""
    if isinstance(runner, ThreadPoolTaskRunner):
        return max(1, runner._max_workers or default)
    client = getattr(runner, "client", None)
    if client is not None:
        try:
            return max(1, sum(client.nthreads().values()))
        except Exception:
            return default
    return default
