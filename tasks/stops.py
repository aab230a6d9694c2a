"""The stops of a run's tasks, by key: a run (a ``PrefectExecutor``, its batch coordinator) makes a
key, hands it to its tasks as a parameter (a task's arguments must be plain: a process pool or
Dask pickles them) and sets the key's stop to stop them.

- Tasks in the flow's own process (the thread runner) read a :class:`threading.Event`
  (:func:`stop_event`).
- Embed tasks on a Dask cluster's workers (other processes, other machines) read a
  :class:`SharedStop`: an event on the cluster's scheduler, named by the key. Before it, a
  stopped run's close waited for each of their requests to a stalled provider to its end (a
  minute, each attempt up to ``remote.timeout_s``).
- Batch job steps in other processes also look for a stop file in the run's work directory
  (``tasks/batch.py``).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

_STOPS: dict[str, threading.Event] = {}
_STOPS_LOCK = threading.Lock()

log = logging.getLogger(__name__)


def stop_event(key: str) -> threading.Event:
    """The stop of the run ``key`` (made at its first use; :func:`forget_event` drops it)."""
    with _STOPS_LOCK:
        return _STOPS.setdefault(key, threading.Event())


def held_key(key: str) -> str:
    """The key of run ``key``'s hold: set, an embedding request not started is not sent
    (``PrefectExecutor.hold``), where its stop (``key``) ends those waiting on the provider."""
    return f"{key}:held"


def forget_event(key: str) -> None:
    with _STOPS_LOCK:
        _STOPS.pop(key, None)


class SharedStop:
    """The stop of run ``key`` as the tasks on a Dask cluster see it: a ``distributed.Event`` on
    its scheduler. Read as a :class:`threading.Event` is (``is_set``, ``wait``), as
    ``retry.abandoned_when`` reads it. ``client``: the flow's (who sets it); a task on a worker
    uses its worker's. A scheduler that cannot be asked reads as not set: the request then runs
    to its end, as it did before."""

    PREFIX = "memory-core-stop-"

    def __init__(self, key: str, client: Any = None) -> None:
        from distributed import Event

        self._event = Event(self.PREFIX + key, client=client)
        self._warned = False

    def _failed(self, what: str, exc: BaseException) -> None:
        if not self._warned:
            self._warned = True
            log.warning("the run's stop could not be %s on the Dask scheduler (%s: %s); a request already sent"
                        " runs to its end", what, type(exc).__name__, exc)

    def is_set(self) -> bool:
        try:
            return bool(self._event.is_set())
        except Exception as exc:
            self._failed("read", exc)
            return False

    def wait(self, timeout: float | None = None) -> bool:
        start = time.monotonic()
        try:
            return bool(self._event.wait(timeout))
        except Exception as exc:
            self._failed("read", exc)
            if timeout is not None:  # a wait that cannot ask still waits its time (a backoff)
                time.sleep(max(0.0, timeout - (time.monotonic() - start)))
            return False

    def set(self) -> None:
        try:
            self._event.set()
        except Exception as exc:
            self._failed("set", exc)

    def clear(self) -> None:
        """Drop the event from the scheduler (a long-lived cluster keeps one per set key otherwise)."""
        try:
            self._event.clear()
        except Exception as exc:
            log.debug("the run's stop could not be cleared on the Dask scheduler: %s", exc)
