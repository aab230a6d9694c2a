"""Batch-API job steps as Prefect tasks: the ``JobOps`` that ``flows.executor.PrefectExecutor``
hands the library's coordinator (``memory_core.index.batch_runner.BatchRun``), one task per step of
each job (``tasks/batch.py``), at most ``batch.concurrency`` jobs in flight. Runs inside a flow.
"""

from __future__ import annotations

import contextlib
from typing import Any

from prefect.futures import PrefectFuture, as_completed

from memory_core.index import batch_jobs as J
from tasks.batch import STEP_TASKS
from tasks.stages import settings_json


class PrefectOps:
    """Runs each job step as a Prefect task on the current flow's task runner."""

    def __init__(self, ctx: J.BatchContext) -> None:
        self.blob = settings_json(ctx.settings)
        self.cache_path = str(ctx.cache.path)
        self.workdir = str(ctx.workdir)
        self.provider_name = ctx.provider.name
        self.outstanding: set[PrefectFuture[Any]] = set()

    def start(self, step: str, obj: Any, **kw: Any) -> PrefectFuture[Any]:
        name = f"{self.provider_name}-{obj.local_id}"
        fut = STEP_TASKS[step].submit(self.blob, self.cache_path, self.workdir, obj, name, **kw)
        self.outstanding.add(fut)
        return fut

    def wait_any(self, handles: list[Any]) -> list[Any]:
        return [next(as_completed(handles))]

    def result(self, handle: Any) -> Any:
        self.outstanding.discard(handle)
        return handle.result()

    def close(self) -> None:
        for fut in list(self.outstanding):  # on an error: let running steps end before returning
            with contextlib.suppress(Exception):
                fut.wait()
        self.outstanding.clear()
