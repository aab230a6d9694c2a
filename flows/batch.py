"""Batch-API job steps as Prefect tasks: the ``JobOps`` that ``flows.executor.PrefectExecutor``
hands the library's coordinator (``memory_core.index.batch_runner.BatchRun``), one task per step of
each job (``tasks/batch.py``), at most ``batch.concurrency`` jobs in flight. Runs inside a flow.
"""

from __future__ import annotations

import contextlib
import threading
import uuid
from typing import Any

from prefect.futures import PrefectFuture

from memory_core.index import batch_jobs as J
from memory_core.index import run_stops
from tasks.batch import STEP_TASKS, forget_stop, request_stop, stop_event
from tasks.stages import settings_json


class PrefectOps:
    """Runs each job step as a Prefect task on the current flow's task runner."""

    def __init__(self, ctx: J.BatchContext) -> None:
        self.blob = settings_json(ctx.settings)
        self.cache_path = str(ctx.cache.path)
        self.workdir = str(ctx.workdir)
        self.provider_name = ctx.provider.name
        self.outstanding: set[PrefectFuture[Any]] = set()
        self.stop_key = uuid.uuid4().hex  # the steps' sleeps end when close() sets it (tasks/batch.py)
        self.stop = stop_event(self.stop_key)
        self._finished: set[PrefectFuture[Any]] = set()
        self._lock = threading.Lock()
        self._event = threading.Event()

    def start(self, step: str, obj: Any, **kw: Any) -> PrefectFuture[Any]:
        name = f"{self.provider_name}-{obj.local_id}"
        fut = STEP_TASKS[step].submit(self.blob, self.cache_path, self.workdir, obj, name, stop_key=self.stop_key, **kw)
        self.outstanding.add(fut)
        fut.add_done_callback(self._done)
        return fut

    def _done(self, fut: PrefectFuture[Any]) -> None:
        with self._lock:
            self._finished.add(fut)
            self._event.set()

    def wait_any(self, handles: list[Any]) -> list[Any]:
        """The handles that finished, waiting in short slices: the cancel of a flow run reaches
        this (main) thread as a signal raised in another thread, and Python runs its handler only
        when this thread runs again. (``prefect.futures.as_completed`` waits on an event without a
        timeout: a flow run cancelled while its jobs were polled went on until a job ended.) A
        stop whose raise was lost (in a finalizer: Python swallows it there) ends the wait too."""
        while True:
            with self._lock:
                done = [h for h in handles if h in self._finished]
                if done:
                    self._finished.difference_update(done)
                    return done
                self._event.clear()
            self._event.wait(run_stops.WAKE_S)
            run_stops.check()  # a stop lost on the way (raised in a finalizer) ends the wait

    def result(self, handle: Any) -> Any:
        self.outstanding.discard(handle)
        return handle.result()

    def close(self) -> None:
        # On an error or a cancel: stop the steps' sleeps (a poll would otherwise run to its
        # deadline), in this process and, through a stop file in the work directory, in others
        # (a process pool or Dask task runner); then let the running steps end before returning.
        if self.outstanding:
            request_stop(self.stop_key, self.workdir)
        self.stop.set()
        for fut in list(self.outstanding):
            with contextlib.suppress(Exception):
                fut.wait()
        self.outstanding.clear()
        forget_stop(self.stop_key, self.workdir)
