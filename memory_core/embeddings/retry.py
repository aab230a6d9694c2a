"""Bounded retries with exponential backoff and jitter, honouring Retry-After.

Providers classify their own exceptions into :class:`Retryable` (429, 5xx, timeouts, resets)
or a final :class:`~memory_core.errors.ProviderError`. After ``max_attempts`` the last error
is raised as a ProviderError with a readable message; the run then fails cleanly.

A run also has a total :class:`RetryBudget` (``remote.retry_budget_s``, default 600 s): the
seconds it may spend waiting between retries, over every request and thread. A wait the
server asks for (``Retry-After: 3600``) that is longer than what is left fails the call at
once instead of sleeping; the final error says how long the run waited.
"""

from __future__ import annotations

import contextlib
import logging
import math
import random
import threading
import time
from collections.abc import Callable, Iterator
from typing import Protocol, TypeVar

from memory_core.errors import MemoryCoreError, ProviderError

T = TypeVar("T")
log = logging.getLogger("memory_core.embeddings")


class Retryable(Exception):
    """A transient provider failure; ``retry_after`` is the server's hint in seconds."""

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        from memory_core.secrets import scrub

        super().__init__(scrub(message))  # logged at each retry: never a key the provider echoed
        self.retry_after = retry_after


def parse_retry_after(headers: object) -> float | None:
    """Seconds from ``retry-after-ms`` / ``retry-after`` (number form) headers, if any."""
    if headers is None:
        return None
    get = getattr(headers, "get", None)
    if get is None:
        return None
    ms = get("retry-after-ms")
    if ms:
        try:
            return max(0.0, float(ms) / 1000)
        except ValueError:
            pass
    s = get("retry-after")
    if s:
        try:
            return max(0.0, float(s))
        except ValueError:
            return None
    return None


DEFAULT_RETRY_BUDGET_S = 600.0


class RetryBudget:
    """The seconds one run may spend waiting for retries, all requests and threads together."""

    def __init__(self, total_s: float = DEFAULT_RETRY_BUDGET_S) -> None:
        self.total_s = float(total_s)
        self.waited_s = 0.0
        self._lock = threading.Lock()

    def reset(self) -> None:
        """A new run starts (a provider reused by ``watch``)."""
        with self._lock:
            self.waited_s = 0.0

    def take(self, wait: float, *, required: bool) -> float | None:
        """Reserve ``wait`` seconds; a backoff wait is shortened to what is left, a wait the
        server ``required`` (Retry-After) that does not fit is refused. None: spent."""
        with self._lock:
            left = self.total_s - self.waited_s
            if left <= 0 or (required and wait > left):
                return None
            wait = min(wait, left)
            self.waited_s += wait
            return wait

    def describe(self) -> str:
        return f"waited {self.waited_s:.1f} s for retries in this run (remote.retry_budget_s = {self.total_s:g})"


class Abandoned(MemoryCoreError):
    """The run this call was made for stopped, and stopped waiting for it: a call to a stalled
    provider (each attempt up to ``remote.timeout_s``, then its retries) held a stopped run for
    minutes. The request may still return in its daemon thread; nothing waits for it."""


ABANDON_POLL_S = 0.25
"""How often a call made under :func:`abandoned_when` looks at its run's stop."""

_RUN = threading.local()


class StopSignal(Protocol):
    """What :func:`abandoned_when` reads: a :class:`threading.Event`, or a run's stop shared with
    other processes (``tasks.stops.SharedStop``, a Dask cluster's)."""

    def is_set(self) -> bool: ...

    def wait(self, timeout: float | None = None) -> bool: ...


@contextlib.contextmanager
def abandoned_when(stop: StopSignal) -> Iterator[None]:
    """Calls made in this thread inside the block end with :class:`Abandoned` within
    ``ABANDON_POLL_S`` of ``stop`` being set: in an attempt, or between attempts. A run's
    executor sets it once the run has stopped and the requests already sent had their grace."""
    previous = getattr(_RUN, "stop", None)
    _RUN.stop = stop
    try:
        yield
    finally:
        _RUN.stop = previous


def _stop() -> StopSignal | None:
    return getattr(_RUN, "stop", None)


def _abandoned(provider: str) -> Abandoned:
    return Abandoned(f"{provider}: request abandoned: the run stopped")


# What a response of an unexpected shape raises in the code that reads it (an HTML page with
# status 200, ``data`` that is not a list, an embedding string that is not base64): the
# response is malformed, retried like malformed JSON, never an exception that escapes.
_SHAPE_ERRORS = (AttributeError, TypeError, KeyError, IndexError, ValueError, RecursionError)


def _within(fn: Callable[[], T], seconds: float) -> T:
    """``fn()``, or Retryable when it has not returned within ``seconds`` of wall-clock time.

    An SDK's timeout bounds each wait for bytes, not a whole response: a server that drips one
    byte a second never trips it. The call runs in a daemon thread; past the deadline it is
    abandoned (its connection is closed by the server or the socket's own timeout) and the
    caller goes on."""
    value: list[T] = []
    error: list[BaseException] = []
    done = threading.Event()

    def target() -> None:
        try:
            value.append(fn())
        except BaseException as exc:  # handed to the caller
            error.append(exc)
        finally:
            done.set()

    threading.Thread(target=target, name="provider-call", daemon=True).start()
    stop = _stop()
    if stop is None:
        finished = done.wait(max(0.0, seconds))
    else:  # in slices: the run's stop ends the wait (abandoned_when)
        end = time.monotonic() + max(0.0, seconds)
        while not (finished := done.wait(max(0.0, min(end - time.monotonic(), ABANDON_POLL_S)))):
            if stop.is_set():
                raise Abandoned("request abandoned: the run stopped")
            if time.monotonic() >= end:
                break
    if not finished:
        raise Retryable(f"no complete response within {seconds:g} s (a stalled or dripping connection)")
    if error:
        raise error[0]
    return value[0]


def within(fn: Callable[[], T], seconds: float) -> T:
    """One attempt of ``fn`` limited to ``seconds`` of wall-clock time, first byte to last, as
    every attempt of :func:`call_with_retries` with ``attempt_timeout_s`` (a call that is not
    retried here: a Batch API poll, whose loop polls through a transient failure); the run's stop
    (:func:`abandoned_when`) ends it with :class:`Abandoned`."""
    return _within(fn, seconds)


def call_with_retries(fn: Callable[[], T], *, provider: str, max_attempts: int, initial_s: float,
                      max_s: float, sleep: Callable[[float], None] = time.sleep,
                      budget: RetryBudget | None = None, attempt_timeout_s: float | None = None,
                      deadline_s: float | None = None) -> T:
    """``fn()`` with bounded retries. ``attempt_timeout_s``: the longest one attempt may take,
    first byte to last (``remote.timeout_s``); ``deadline_s``: the longest the whole call may
    take, retries included (readers: ``query.embed_timeout_s``), then a ProviderError."""
    budget = budget if budget is not None else RetryBudget()
    delay = initial_s
    t_end = None if deadline_s is None else time.monotonic() + deadline_s
    stop = _stop()
    for attempt in range(1, max_attempts + 1):
        if stop is not None and stop.is_set():
            raise _abandoned(provider)
        try:
            limit = attempt_timeout_s
            if t_end is not None:
                left = t_end - time.monotonic()
                if left <= 0:
                    raise ProviderError(f"{provider}: no answer within the deadline of {deadline_s:g} s")
                limit = left if limit is None else min(limit, left)
            if limit is None and stop is not None:
                limit = math.inf  # (in a thread, so that the run's stop can end the wait)
            try:
                return fn() if limit is None else _within(fn, limit)
            except Abandoned:
                raise _abandoned(provider) from None
            except _SHAPE_ERRORS as exc:
                raise Retryable(f"malformed response ({exc.__class__.__name__}: {str(exc)[:160]})") from None
        except Retryable as exc:
            if t_end is not None and time.monotonic() >= t_end:
                raise ProviderError(f"{provider}: {exc} (gave up after {attempt} attempts: the deadline of"
                                    f" {deadline_s:g} s passed)") from None
            if attempt >= max_attempts:
                raise ProviderError(f"{provider}: {exc} (gave up after {attempt} attempts; {budget.describe()})") \
                    from None
            wait = min(max_s, delay) * (1 + random.random() * 0.2)
            required = exc.retry_after is not None and exc.retry_after > wait
            if required:
                wait = float(exc.retry_after)  # type: ignore[arg-type]
            if t_end is not None:
                wait = min(wait, max(0.0, t_end - time.monotonic()))
                required = False
            granted = budget.take(wait, required=required)
            if granted is None:
                asked = f"the provider asked to wait {wait:g} s; " if required else ""
                raise ProviderError(f"{provider}: {exc} (gave up after {attempt} attempts: {asked}the retry budget is"
                                    f" spent; {budget.describe()})") from None
            log.warning("%s: %s; retry %d/%d in %.1fs", provider, exc, attempt, max_attempts - 1, granted)
            if stop is not None and sleep is time.sleep:
                if stop.wait(granted):
                    raise _abandoned(provider) from None
            else:
                sleep(granted)
            delay = min(max_s, delay * 2)
    raise AssertionError("unreachable")  # pragma: no cover
