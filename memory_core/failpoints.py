"""Named crash points for fault-injection tests.

``MEMORY_CORE_FAILPOINT=<name>`` makes the process SIGKILL itself the first time it reaches
``failpoint(<name>)``: the way a power cut or an OOM kill would end it, with no cleanup, no
``finally`` and no atexit. Unset (always, outside tests), a failpoint costs one dict lookup.

Names: ``discover`` (after discovery), ``chunk`` (after the first file is chunked), ``embed``
(after the first provider response is cached), ``batch-poll`` (while polling a batch job),
``build`` (after the first rows reach the temp DB), ``before-swap`` (temp DB synced, not yet
renamed), ``after-swap`` (renamed, run not yet finished), ``before-trim`` (published, the
cache not yet trimmed of the vectors the new index holds). The memory store's:
``store-created`` (the first memory's table written, its full-text index not yet),
``store-committed`` (a memory committed, the full-text index not yet rebuilt), ``store-indexed``
(the index rebuilt, before any compaction), ``store-forget-deleted`` (a forget's row deleted, its
text not yet rewritten out of the store's files).
"""

from __future__ import annotations

import os
import signal

_ENV = "MEMORY_CORE_FAILPOINT"


def failpoint(name: str) -> None:
    if os.environ.get(_ENV) == name:
        os.kill(os.getpid(), signal.SIGKILL)
