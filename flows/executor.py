"""The Prefect executor of the orchestrator (``memory_core.index.pipeline.run_index``).

The run is decided by the same code as the CLI's; this executor runs its steps as Prefect
tasks, so the UI shows them: a task per stage (``discover``, ``build``, ``collect-misses``),
a task per embedding request group on the chosen task runner (threads, or a Dask cluster: see
``flows/runners.py``), a task per batch job step (``flows/batch.py``). Rows stream to the same
index writer the CLI uses, and each request group's vectors are committed to the embedding
cache on the flow's machine the moment its task returns them.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

import numpy as np
from prefect.task_runners import TaskRunner, ThreadPoolTaskRunner
from prefect.utilities.annotations import quote

from flows.runners import RunnerChoice, make_embed_runner, runner_parallelism
from memory_core.config import Settings
from memory_core.embeddings.base import EmbeddingProvider
from memory_core.index.runtypes import EMBED_CONCURRENCY, embed_parallelism
from memory_core.index.stages import store_vectors
from memory_core.storage.cache import EmbeddingCache
from tasks.stages import embed_group_task, run_stage, settings_json, stage_task
from tasks.stops import SharedStop, forget_event, held_key, stop_event

T = TypeVar("T")


class PrefectExecutor:
    """Runs a run's steps as Prefect tasks; must be used inside a flow run."""

    def __init__(self, *, label: str, task_runner: RunnerChoice = "threads", concurrency: int = EMBED_CONCURRENCY,
                 dask_address: str | None = None, dask_workers: int = 2) -> None:
        self.label = label
        self.choice = task_runner
        self.concurrency = max(1, concurrency)
        self.dask_address = dask_address
        self.dask_workers = dask_workers
        self.runner: TaskRunner[Any] | None = None
        self.where = ""
        self.blob = ""
        self.bridge: ThreadPoolExecutor | None = None
        self.stop_key = uuid.uuid4().hex  # abandon(): the embed tasks' stop (tasks/stops.py)
        self._shared_set = False  # abandon() set the stop on a Dask scheduler

    def bind(self, settings: Settings) -> None:
        self.settings = settings
        self.blob = settings_json(settings)
        if stop_event(self.stop_key).is_set() or stop_event(held_key(self.stop_key)).is_set():
            # a new run (the fallback provider's, after the first one's stream was closed): a new stop
            self._clear_shared()
            forget_event(self.stop_key)
            forget_event(held_key(self.stop_key))
            self.stop_key = uuid.uuid4().hex

    def _clear_shared(self) -> None:
        if self._shared_set and self.runner is not None:  # a long-lived cluster's scheduler keeps it
            for key in (self.stop_key, held_key(self.stop_key)):
                SharedStop(key, client=getattr(self.runner, "client", None)).clear()
        self._shared_set = False

    def hold(self) -> None:
        """No request not started yet is sent (``embed_group_task`` looks before it sends): the
        futures streaming cancels are this executor's bridges, already running, so cancelling
        them left the Prefect tasks queued behind them to start during the stop's grace."""
        stop_event(held_key(self.stop_key)).set()
        if self.runner is not None and not isinstance(self.runner, ThreadPoolTaskRunner):
            SharedStop(held_key(self.stop_key), client=getattr(self.runner, "client", None)).set()
            self._shared_set = True

    def abandon(self) -> None:
        stop_event(self.stop_key).set()
        if self.runner is not None and not isinstance(self.runner, ThreadPoolTaskRunner):
            # tasks on the Dask cluster's workers read the stop on its scheduler (tasks/stops.py)
            SharedStop(self.stop_key, client=getattr(self.runner, "client", None)).set()
            self._shared_set = True

    def _runner(self, provider: EmbeddingProvider) -> TaskRunner[Any]:
        if self.runner is None:
            # one local model in this process: one request at a time, as the in-process executor
            n = embed_parallelism(provider, self.concurrency) if self.choice == "threads" else self.concurrency
            runner, self.where = make_embed_runner(self.choice, concurrency=n, dask_address=self.dask_address,
                                                   dask_workers=self.dask_workers)
            runner.__enter__()
            self.runner = runner
        return self.runner

    def parallelism(self, provider: EmbeddingProvider) -> int:
        if self.choice == "threads":
            return embed_parallelism(provider, self.concurrency)
        return runner_parallelism(self._runner(provider), self.concurrency)

    def describe(self, provider: EmbeddingProvider) -> str:
        self._runner(provider)
        return f"Prefect tasks on {self.where}"

    def embed(self, provider: EmbeddingProvider, cache: EmbeddingCache, hashes: list[str], texts: list[str],
              index: int) -> Future[np.ndarray]:
        runner = self._runner(provider)
        threads = isinstance(runner, ThreadPoolTaskRunner)
        # quote() spares Prefect a walk over the texts; Dask treats tuples (quote is a namedtuple)
        # as task specs, so a cluster gets the list as it is.
        fut = runner.submit(embed_group_task, parameters={
            "settings_blob": self.blob, "texts": quote(texts) if threads else texts, "provider_name": provider.name,
            "group_index": index, "stop_key": self.stop_key, "stop_shared": not threads,
        })
        if self.bridge is None:
            self.bridge = ThreadPoolExecutor(max_workers=2 * self.parallelism(provider) + 1,
                                             thread_name_prefix="embed-result")
        return self.bridge.submit(self._receive, fut, cache, hashes)

    @staticmethod
    def _receive(fut: Any, cache: EmbeddingCache, hashes: list[str]) -> np.ndarray:
        vectors = np.ascontiguousarray(fut.result(), dtype="<f4")
        store_vectors(cache, hashes, vectors)
        return vectors

    def stage(self, name: str, fn: Callable[..., T], *args: Any) -> T:
        task = stage_task.with_options(name=name, task_run_name=f"{name}-{self.label}")
        # the task gets a key, not the arguments: a Dask runner pickles the build task's context
        return run_stage(task, fn, args, label=f"{name}-{self.label}")

    def batch_ops(self, ctx: Any, progress: Callable[[str, int, int], None] | None) -> Any:
        from flows.batch import PrefectOps

        return PrefectOps(ctx)

    def close(self) -> None:
        if self.bridge is not None:
            self.bridge.shutdown(wait=True, cancel_futures=True)
            self.bridge = None
        if self.runner is not None:
            self._clear_shared()
            with contextlib.suppress(Exception):
                self.runner.__exit__(None, None, None)
            self.runner = None
        forget_event(self.stop_key)
        forget_event(held_key(self.stop_key))
