"""Prefect tasks: thin wrappers over the orchestrator's steps (``memory_core.index.pipeline``).

Never a task per chunk or per file: one task per stage of a run (``discover``, ``build``, and in
Batch API mode ``collect-misses``), plus one per embedding request group (a few hundred at most
for any corpus) and one per batch job step (``tasks/batch.py``). Task inputs are small plain
values (a stage task takes the key of its call, see ``stage_task``) or wrapped in ``quote`` so
Prefect does not walk them. ``NO_CACHE`` everywhere: these tasks touch files and clients.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import threading
from collections.abc import Callable
from typing import Any

import numpy as np
from prefect import task
from prefect.cache_policies import NO_CACHE

from memory_core.config import Settings
from memory_core.embeddings.base import EmbeddingProvider
from memory_core.embeddings.registry import create_provider
from memory_core.errors import MemoryCoreError


@functools.lru_cache(maxsize=8)
def _provider_for(settings_json: str) -> tuple[EmbeddingProvider, str]:
    """One provider per process and configuration (threads share it; Dask workers build their own)."""
    return create_provider(Settings.model_validate_json(settings_json))


def provider_for(settings: Settings) -> tuple[EmbeddingProvider, str]:
    return _provider_for(settings_json(settings))


def settings_json(settings: Settings) -> str:
    """Settings with secrets, for building the provider in this or a worker process.

    Passed to embed tasks as an argument (never a flow parameter, never logged or persisted:
    results are not persisted and task inputs are recorded by reference)."""
    return settings.private_json()


# Stage calls waiting for their task, by key. A stage's arguments are live objects of the flow's
# process (the executor and its task runner, the cache's connection, locks): the task takes only
# the key, because Prefect copies the parameters of the running task into the context of every
# task submitted from it, and a Dask task runner pickles that context for its workers (the embed
# tasks are submitted from inside the ``build`` stage).
_calls: dict[str, tuple[Callable[..., Any], tuple[Any, ...]]] = {}
_call_ids = itertools.count(1)
_calls_lock = threading.Lock()


def run_stage(task_: Any, fn: Callable[..., Any], args: tuple[Any, ...], *, label: str) -> Any:
    """Run ``fn(*args)`` as ``task_`` (``stage_task`` with options), in this process."""
    with _calls_lock:
        key = f"{label}-{next(_call_ids)}"
        _calls[key] = (fn, args)
    try:
        return task_(key)
    finally:
        with _calls_lock:
            _calls.pop(key, None)


def _filed_call(key: str) -> tuple[Callable[..., Any], tuple[Any, ...]]:
    with _calls_lock:
        return _calls[key]


@task(name="stage", cache_policy=NO_CACHE)
def stage_task(call: str) -> Any:
    """One stage of the orchestrator (named per use with ``with_options``); ``call`` is the key
    ``run_stage`` filed its function and arguments under. The task (in a nested task's context)
    is pickled with its function's globals: it names only a module-level function, which pickles
    by reference, never the table or its lock."""
    fn, args = _filed_call(call)
    return fn(*args)


def _retry_unless_final(task: Any, task_run: Any, state: Any) -> bool:
    """Retry an embed group once for unexpected faults (a lost worker, a bug in a client
    library), not for a ProviderError: the provider layer already retried it, with backoff."""
    return not isinstance(getattr(state, "data", None), MemoryCoreError)


@task(name="embed", task_run_name="embed-{provider_name}-group-{group_index}", cache_policy=NO_CACHE,
      retries=1, retry_delay_seconds=5, retry_condition_fn=_retry_unless_final)
def embed_group_task(settings_blob: str, texts: list[str], provider_name: str, group_index: int,
                     stop_key: str = "", stop_shared: bool = False) -> np.ndarray:
    """Embed one request group. Pure: returns the vectors; the flow caches them as they arrive
    (this task may run on a Dask worker without the cache file). ``stop_key``: the run's
    (``PrefectExecutor.abandon``): the task stops waiting on the provider once it is set, read in
    this process (the thread runner) or, ``stop_shared``, on the Dask cluster's scheduler (a task
    on a worker: ``tasks.stops.SharedStop``)."""
    from memory_core.embeddings.retry import Abandoned, StopSignal, abandoned_when
    from tasks.stops import SharedStop, held_key, stop_event

    stop: StopSignal | None = None
    if stop_key:
        held = SharedStop(held_key(stop_key)) if stop_shared else stop_event(held_key(stop_key))
        if held.is_set():  # the run is ending: a request queued until now is not sent (nor paid for)
            raise Abandoned(f"{provider_name}: request not sent: the run stopped")
        stop = SharedStop(stop_key) if stop_shared else stop_event(stop_key)
    provider, _ = _provider_for(settings_blob)
    with abandoned_when(stop) if stop is not None else contextlib.nullcontext():
        return np.ascontiguousarray(provider.embed_documents(texts), dtype="<f4")
