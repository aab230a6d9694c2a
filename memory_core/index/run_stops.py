"""A stop that came while a run runs, kept until the run ends, so that a stop lost on the way
still ends the run.

A stop (Ctrl-C's KeyboardInterrupt; our SIGTERM handlers' RunCancelled) is raised wherever the
main thread is when the signal lands. Python swallows an exception raised in a finalizer
(``__del__``, a weakref callback: it prints "Exception ignored in ..." and goes on), and a
library's ``except Exception`` may swallow a RunCancelled. The run then went on as if no stop
had come: a run whose Batch API jobs were polled (a flow on a process pool task runner; the stop
landed in an asyncio transport's ``__del__``) polled them to their deadline, and a run that
embedded by sync calls published after the Ctrl-C.

So each handler of ours notes the stop here as it raises it (:func:`note`, through
``pipeline.stop_came``), and for the length of a run (:func:`run_scope`) Ctrl-C's default
handler is replaced by one that does the same. The run looks at the note where it can stop
cleanly (:func:`check`): between files as it chunks them, before it publishes, after discovery,
in its wait for embedding requests and in every wait for its batch job steps (at most
``WAKE_S`` apart). A stop raised as it came
unwinds past all of these and is never raised twice.

Only in the main thread (where Python runs signal handlers). Not for Prefect's own SIGTERM
handler (a flow run's): Prefect's runner looks for that exact handler before it asks the run to
cancel, so it is left as it is.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
from collections.abc import Iterator
from typing import Any

from memory_core.errors import RunCancelled

log = logging.getLogger(__name__)

WAKE_S = 0.5
"""How often a run that waits on its job steps wakes to look for a stop that was lost."""

# the stops (signal numbers) that came in each open run_scope() (the innermost last)
_RUNS: list[list[int]] = []


def note(signum: int) -> None:
    """A stop came: every open run (in this process) ends at its next :func:`check`, unless the
    stop raised as it came ends it first."""
    for came in _RUNS:
        came.append(signum)


def stop_of(signum: int) -> BaseException:
    """The exception a stop by ``signum`` is raised as: Ctrl-C as KeyboardInterrupt, another as
    :class:`RunCancelled`."""
    return KeyboardInterrupt() if signum == signal.SIGINT else RunCancelled(f"stopped by {signal.Signals(signum).name}")


def _ctrl_c(signum: int, frame: Any) -> None:
    note(signum)
    raise KeyboardInterrupt


@contextlib.contextmanager
def run_scope() -> Iterator[None]:
    """One run: the stops that come in it are noted, and Ctrl-C's default handler (Python's
    ``default_int_handler``) is replaced by one that notes it as it raises it; put back at the end."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    came: list[int] = []
    _RUNS.append(came)
    previous = None
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        previous = signal.signal(signal.SIGINT, _ctrl_c)
    try:
        yield
    finally:
        if previous is not None and signal.getsignal(signal.SIGINT) is _ctrl_c:
            signal.signal(signal.SIGINT, previous)
        _RUNS.remove(came)


def pending() -> int | None:
    """The signal of a stop that came in the open run and was not acted on, or None."""
    for came in _RUNS:
        if came:
            return came[0]
    return None


def check() -> None:
    """Raise the stop that came in this run, if one did: it reaches here only when it was lost on
    the way (a stop raised as it came unwinds past every check). In the main thread only."""
    if threading.current_thread() is not threading.main_thread():
        return
    signum = pending()
    if signum is None:
        return
    log.info("a stop (%s) came and was lost on the way (raised in a finalizer, or taken for an error);"
             " the run stops here", signal.Signals(signum).name)
    raise stop_of(signum)
