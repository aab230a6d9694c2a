"""The stops of a run's tasks in the flow's own process, by key: a run (a ``PrefectExecutor``, its
batch coordinator) makes a key, hands it to its tasks as a parameter (a task's arguments must be
plain: a process pool or Dask pickles them) and sets the key's event to stop them. Tasks in other
processes see a fresh event that is never set (the batch steps also look for a stop file:
``tasks/batch.py``)."""

from __future__ import annotations

import threading

_STOPS: dict[str, threading.Event] = {}
_STOPS_LOCK = threading.Lock()


def stop_event(key: str) -> threading.Event:
    """The stop of the run ``key`` (made at its first use; :func:`forget_event` drops it)."""
    with _STOPS_LOCK:
        return _STOPS.setdefault(key, threading.Event())


def forget_event(key: str) -> None:
    with _STOPS_LOCK:
        _STOPS.pop(key, None)
