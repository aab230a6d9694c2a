"""A stop that came while a run runs, kept until the run ends, so that a stop lost on the way
still ends the run.

A stop (Ctrl-C's KeyboardInterrupt; our SIGTERM handlers' RunCancelled; Prefect's
TerminationSignal in a flow run) is raised wherever the main thread is when the signal lands.
Python swallows an exception raised in a finalizer (``__del__``, a weakref or garbage collection
callback: it prints "Exception ignored in ..." and goes on), and a library's ``except Exception``
may swallow a RunCancelled. The run then went on as if no stop had come: a run whose Batch API
jobs were polled (a flow on a process pool task runner; the stop landed in an asyncio
transport's ``__del__``) polled them to their deadline, and a run that embedded by sync calls
published after the Ctrl-C.

So for the length of a run (:func:`run_scope`) a stop is noted two ways: each handler of ours
notes it as it raises it (:func:`note`; Python's own Ctrl-C
handler is replaced by one that does, :func:`ctrl_c`, for the run), and a stop that Python
swallowed in the main thread is taken from :data:`sys.unraisablehook` (whichever handler raised
it: Python's own, ours, Prefect's, which is left in place because Prefect's runner checks for
that exact handler before it asks a flow run to cancel). The run looks at the note where it can
stop cleanly (:func:`check`): between files as it chunks them, before it publishes, after
discovery, in its wait for embedding requests and in every wait for its batch job steps (at
most ``WAKE_S`` apart), and as it hands back a published summary (a stop lost after the
publish: the run ends as stopped after it). A stop raised as it came unwinds past all of these
and is never raised twice. An error that ends a run after a stop came is that stop, wrapped on
the way: the run ends with the stop (``raise stop from error``), as ``memory-core index``
always said it. Signals are main-thread stops only (where Python runs signal handlers).

A run in another thread (a long-lived reader's background sync) has no signal to stop it: its
owner hands :func:`run_scope` a :class:`Cancel` and sets it (``Indexer.stop``: the MCP server
shutting down while a run waits on a stalled provider), and the same checks raise it as a
:class:`RunCancelled` in that thread.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import sys
import threading
from collections.abc import Iterator
from typing import Any

from memory_core.errors import RunCancelled

log = logging.getLogger(__name__)

WAKE_S = 0.5
"""How often a run that waits on its job steps or requests wakes to look for a stop that was lost."""

# the stops that came in each open run_scope() (the innermost last): a signal number (noted by a
# handler of ours) or the stop exception Python swallowed
_RUNS: list[list[int | BaseException]] = []
# the stops (signal numbers) noted in each open command_scope() (the innermost last)
_COMMANDS: list[list[int]] = []
_THREAD = threading.local()  # .cancels: the Cancel of each open run_scope() of this thread


class Cancel:
    """A stop for one run, from its owner in another thread: :meth:`set` with the reason the run
    ends with (``RunCancelled(why)``)."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self.why = "stopped"

    def set(self, why: str) -> None:
        self.why = why
        self._event.set()

    def is_set(self) -> bool:
        return self._event.is_set()


def note(signum: int) -> None:
    """A stop came: every open run (in this process) ends at its next :func:`check`, unless the
    stop raised as it came ends it first; and the innermost :func:`command_scope` keeps it (a
    handler that raises a stop where it may be swallowed, by an ``except Exception`` of a
    library's or by pydantic's serializer, which wraps even a KeyboardInterrupt in its own error,
    notes it so that the command still ends as that stop)."""
    for came in _RUNS:
        came.append(signum)
    if _COMMANDS:
        _COMMANDS[-1].append(signum)


@contextlib.contextmanager
def command_scope() -> Iterator[list[int]]:
    """A command's stops (``pipeline.command_stops``: the whole of ``memory-core index``): the
    list of the signals :func:`note` was told of while it is open."""
    came: list[int] = []
    _COMMANDS.append(came)
    try:
        yield came
    finally:
        _COMMANDS.remove(came)


def command_pending() -> int | None:
    """The first stop noted in the innermost open command, or None."""
    return _COMMANDS[-1][0] if _COMMANDS and _COMMANDS[-1] else None


def stop_of(signum: int) -> BaseException:
    """The exception a stop by ``signum`` is raised as: Ctrl-C as KeyboardInterrupt, another as
    :class:`RunCancelled`."""
    return KeyboardInterrupt() if signum == signal.SIGINT else RunCancelled(f"stopped by {signal.Signals(signum).name}")


def is_stop(exc: BaseException) -> bool:
    """A stop from outside (Ctrl-C, SIGTERM, a cancelled flow run), not a failure."""
    return not isinstance(exc, Exception) or isinstance(exc, RunCancelled) or type(exc).__name__ == "CancelledRun"


def signal_stop(exc: BaseException | None) -> bool:
    """What a signal's stop is raised as (narrower than :func:`is_stop`: not a SystemExit or a
    GeneratorExit Python reports from a finalizer): Ctrl-C's, our handlers' (``RunCancelled``,
    ``SigtermStop``) and Prefect's (``TerminationSignal``)."""
    if exc is None:
        return False
    return isinstance(exc, KeyboardInterrupt | RunCancelled) or \
        type(exc).__name__ in ("SigtermStop", "TerminationSignal")


def ctrl_c(signum: int, frame: Any) -> None:
    """Our Ctrl-C handler (a run's, and ``memory-core index``'s): Python's KeyboardInterrupt, noted."""
    note(signum)
    raise KeyboardInterrupt


def _unraisable(args: Any) -> None:
    exc = getattr(args, "exc_value", None)
    if _RUNS and signal_stop(exc) and threading.current_thread() is threading.main_thread():
        for came in _RUNS:
            came.append(exc)  # type: ignore[arg-type]
    _previous_hook(args)


_previous_hook: Any = sys.__unraisablehook__


@contextlib.contextmanager
def run_scope(cancel: Cancel | None = None) -> Iterator[None]:
    """One run: the stops that come in it are noted (and those Python swallows, through
    :data:`sys.unraisablehook`, which is chained to the hook before it and put back at the end).
    ``cancel``: the run's stop from another thread, raised by :func:`check` in this one."""
    if cancel is not None:
        cancels = _THREAD.__dict__.setdefault("cancels", [])
        cancels.append(cancel)
        try:
            with run_scope():
                yield
        finally:
            cancels.remove(cancel)
        return
    global _previous_hook
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    came: list[int | BaseException] = []
    _RUNS.append(came)
    hooked = sys.unraisablehook is not _unraisable
    if hooked:
        _previous_hook = sys.unraisablehook
        sys.unraisablehook = _unraisable
    previous_ctrl_c = None  # Python's own Ctrl-C handler, replaced by one that notes the stop as it raises it
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        previous_ctrl_c = signal.signal(signal.SIGINT, ctrl_c)
    try:
        yield
    except BaseException as exc:
        # an error after a stop came is the stop, wrapped on the way (pydantic's serializer wraps
        # even a KeyboardInterrupt: the run ended with its PydanticSerializationError)
        if not came or is_stop(exc):
            raise
        first = came[0]
        stop = stop_of(first) if isinstance(first, int) else first.with_traceback(None)
        summary = getattr(exc, "run_summary", None)
        if summary is not None:
            stop.run_summary = summary  # type: ignore[attr-defined]
        raise stop from exc
    finally:
        _RUNS.remove(came)
        if hooked and sys.unraisablehook is _unraisable:
            sys.unraisablehook = _previous_hook
        if previous_ctrl_c is not None and signal.getsignal(signal.SIGINT) is ctrl_c:
            signal.signal(signal.SIGINT, previous_ctrl_c)


def pending() -> int | BaseException | None:
    """The stop that came in the open run and was not acted on (its signal, or the exception
    Python swallowed), or None. The main thread's (a signal's stop is the main thread's run's)."""
    if threading.current_thread() is not threading.main_thread():
        return None
    for came in _RUNS:
        if came:
            return came[0]
    return None


def check() -> None:
    """Raise the stop that came in this run, if one did: it reaches here only when it was lost on
    the way (a stop raised as it came unwinds past every check), or the :class:`Cancel` of this
    thread's run, set by its owner."""
    for cancel in _THREAD.__dict__.get("cancels", ()):
        if cancel.is_set():
            raise RunCancelled(cancel.why)
    if threading.current_thread() is not threading.main_thread():
        return
    stop = pending()
    if stop is None:
        return
    what = signal.Signals(stop).name if isinstance(stop, int) else type(stop).__name__
    log.info("a stop (%s) came and was lost on the way (raised in a finalizer, or taken for an error);"
             " the run stops here", what)
    if isinstance(stop, int):
        raise stop_of(stop)
    raise stop.with_traceback(None)  # as it came: Prefect's engine reads its own TerminationSignal


# -- a command's stops ----------------------------------------------------------------------------

class SigtermStop(BaseException):
    """A SIGTERM that :func:`command_stops` turned into a stop (outside the run's own handling).
    Not an Exception, as Ctrl-C's KeyboardInterrupt is not: an ``except Exception`` on the way
    (Prefect's plugin loader, run as Prefect is imported) took a RunCancelled raised there for an
    error of its own and went on, and the run published as if no SIGTERM had come."""

    def __init__(self) -> None:
        super().__init__("stopped by SIGTERM")


def sigterm_stop(signum: int, frame: Any) -> None:
    """A command's SIGTERM handler (:func:`command_stops`): the stop, noted, as a :class:`SigtermStop`."""
    note(signum)
    raise SigtermStop


CARRIED = ("run_summary", "command_done")
"""What a stop carries to the command's last line: a run's summary (``pipeline``) and what a
command had done when it came (``command_done``, a phrase: "stored memory 3f2a..."; the CLI says
``interrupted after <it>``)."""


@contextlib.contextmanager
def command_stops() -> Iterator[None]:
    """Stops in the whole of a command (``memory-core index``, ``write``, ``flush``, ``memory``,
    ``eval``, ``mcp``), not only once a run holds its writer lock: in the start-up (settings,
    provider, Prefect's import) and the wait for another run's lock a SIGTERM killed the process
    with no line (exit 143). A SIGTERM leaves this as ``RunCancelled("stopped by SIGTERM")`` (with
    what it carries, :data:`CARRIED`), Ctrl-C as KeyboardInterrupt, as ever; so does an error
    raised after one of them came (the stop wrapped in another error: pydantic's serializer wraps
    even a KeyboardInterrupt, and the command ended with exit 1 and a traceback). A run itself
    handles SIGTERM as it always did (``pipeline._sigterm_cancels`` in its lock, Prefect's handler
    in a flow run). Only where nobody else handles them, in the main thread."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    with command_scope() as came:
        previous: dict[int, Any] = {}
        if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
            previous[signal.SIGTERM] = signal.signal(signal.SIGTERM, sigterm_stop)
        if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            previous[signal.SIGINT] = signal.signal(signal.SIGINT, ctrl_c)
        try:
            yield
        except BaseException as exc:
            if isinstance(exc, SigtermStop):
                stop = stop_of(signal.SIGTERM)
            elif came and not is_stop(exc):
                stop = stop_of(came[0])
            else:
                raise
            for name in CARRIED:
                if (value := getattr(exc, name, None)) is not None:
                    setattr(stop, name, value)
            raise stop from (None if isinstance(exc, SigtermStop) else exc)
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)


@contextlib.contextmanager
def stops_held(redeliver: bool = True) -> Iterator[list[int]]:
    """SIGINT and SIGTERM wait while the new index goes live (the rename, or the in-place
    commit) and the writer records it (``swapped``), then are delivered as they came: the stop
    lands after a publish the run knows it made, never between the rename and the record (a
    Ctrl-C there was reported "the live index was left as it was" while the new file was live).
    Yields the signals held so far (a list that grows). ``redeliver=False``: they are not
    delivered at the end; the caller decides (the run's summary after a publish:
    :func:`memory_core.index.pipeline.run_once`), or delivers them later (:func:`deliver`) with what
    was done attached (a note's append, a memory store's commit). In the main thread only (where Python runs
    signal handlers); elsewhere a stop is raised in the main thread, not here, and nothing is held."""
    held: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield held
        return

    def hold(signum: int, frame: object) -> None:
        held.append(signum)

    previous: dict[int, Any] = {}
    for stop in (signal.SIGINT, signal.SIGTERM):
        handler = signal.getsignal(stop)
        if handler is not None and handler is not signal.SIG_IGN:  # None: set outside Python, left alone
            previous[stop] = signal.signal(stop, hold)
    try:
        yield held
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        if redeliver:
            deliver(held)


def deliver(held: list[int]) -> None:
    """The stops :func:`stops_held` held, each once, raised now by its own handler
    (KeyboardInterrupt, RunCancelled, SigtermStop, Prefect's TerminationSignal)."""
    for signum in dict.fromkeys(held):
        signal.raise_signal(signum)
