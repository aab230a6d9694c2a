"""Bounded retries with exponential backoff and jitter, honouring Retry-After.

Providers classify their own exceptions into :class:`Retryable` (429, 5xx, timeouts, resets)
or a final :class:`~memory_core.errors.ProviderError`. After ``max_attempts`` the last error
is raised as a ProviderError with a readable message; the run then fails cleanly.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from typing import TypeVar

from memory_core.errors import ProviderError

T = TypeVar("T")
log = logging.getLogger("memory_core.embeddings")


class Retryable(Exception):
    """A transient provider failure; ``retry_after`` is the server's hint in seconds."""

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
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


def call_with_retries(fn: Callable[[], T], *, provider: str, max_attempts: int, initial_s: float,
                      max_s: float, sleep: Callable[[float], None] = time.sleep) -> T:
    delay = initial_s
    for attempt in range(1, max_attempts + 1):
        try:
            return fn()
        except Retryable as exc:
            if attempt >= max_attempts:
                raise ProviderError(f"{provider}: {exc} (gave up after {attempt} attempts)") from None
            wait = min(max_s, delay) * (1 + random.random() * 0.2)
            if exc.retry_after is not None:
                wait = max(wait, min(exc.retry_after, 300.0))
            log.warning("%s: %s; retry %d/%d in %.1fs", provider, exc, attempt, max_attempts - 1, wait)
            sleep(wait)
            delay = min(max_s, delay * 2)
    raise AssertionError("unreachable")  # pragma: no cover
