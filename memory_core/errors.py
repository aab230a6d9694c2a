"""Exception hierarchy: a caller catches at the level it can act on.

``MemoryCoreError`` is the root. Errors a user causes (bad config, missing workspace,
bad path) derive from ``UsageError`` and map to exit code 2; faults while running
(provider failures, a damaged index, a lost lock race) derive from ``RunError`` and map
to exit code 1. Messages are written for people: one line, naming the setting or path.
"""

from __future__ import annotations


class MemoryCoreError(Exception):
    """Root of every error memory-core raises on purpose."""

    exit_code = 1


class UsageError(MemoryCoreError):
    """Something the user can fix: bad arguments, configuration or paths (exit 2)."""

    exit_code = 2


class ConfigError(UsageError):
    """A setting is missing, unknown or invalid."""


class PathError(UsageError):
    """A path is outside the indexed sources, missing, or not readable."""


class UnsafePathError(UsageError):
    """A file memory-core would create or write is a symbolic link (or not a regular file)."""


class NotAnIndexError(UsageError):
    """The index path holds a file memory-core did not write: it is never replaced."""


class RunError(MemoryCoreError):
    """A run failed; the live index was left as it was (exit 1)."""


class ProviderError(RunError):
    """An embedding provider failed after retries, or answered with bad data.

    Its message never holds a provider's secret (:func:`memory_core.secrets.scrub`): a provider
    that echoes the API key in an error body would otherwise put it in every place the error goes.
    """

    def __init__(self, *args: object) -> None:
        from memory_core.secrets import scrub

        super().__init__(*(scrub(a) if isinstance(a, str) else a for a in args))


class RunCancelled(RunError):
    """The run was stopped from outside (SIGTERM). Its message says whether the live index was
    left as it was, or (a stop after the publish: ``run_summary.swapped``) is the new one."""

    def __init__(self, why: str = "stopped by SIGTERM") -> None:
        super().__init__(why)
        self.why = why

    def __str__(self) -> str:
        partial = getattr(self, "run_summary", None)
        if partial is not None and partial.swapped:
            return str(partial.stop_note())
        return f"{self.why}; the live index was left as it was"


class ProviderAnswerError(ProviderError):
    """The provider answered, but a vector it gave cannot be used (NaN, infinite, zero): a fault
    of that answer, not an outage. A reader answers that query keyword-only and asks again for the
    next one; it does not take the provider for down (:class:`memory_core.storage.indexmeta.ProviderOutages`)."""


class IndexLockedError(RunError):
    """Another run holds the writer lock of this index."""


class IndexDamagedError(RunError):
    """The index file exists but is not a readable memory-core index."""


class IndexNewerError(UsageError):
    """The index was written by a newer memory-core than this one: it is neither read nor
    replaced unless told (``index --full``), so two versions sharing it do not rebuild it back and
    forth, and a newer version's stricter redaction is not undone by an older run."""


class IndexMissingError(UsageError):
    """No index has been built at this path yet."""


# The folders the command's SQLite files live in (the index's and the cache's), noted when its
# settings are resolved: SQLite reports a write that ran out of space while it grew a WAL or its
# shared-memory file as a plain I/O error (SQLITE_IOERR, the errno kept from it), so such an error
# is read against their free space.
_FOLDERS: list[str] = []
# Less than this free beside an index after an I/O error: the disk is full (a run's own temp
# files are gone by then, so a full disk shows as a little room, not none).
FULL_BELOW = 4 << 20


def note_folders(*folders: object) -> None:
    """Where this command's SQLite files are (see :func:`classify_error`)."""
    _FOLDERS[:] = [str(f) for f in folders if f]


def _least_free() -> tuple[int, str] | None:
    import os
    import shutil

    best: tuple[int, str] | None = None
    for folder in _FOLDERS:
        here = folder
        while here and not os.path.isdir(here):  # a folder the run was to create
            parent = os.path.dirname(here)
            here = "" if parent == here else parent
        try:
            free = shutil.disk_usage(here or ".").free
        except OSError:
            continue
        if best is None or free < best[0]:
            best = (free, folder)
    return best


def classify_error(exc: BaseException, *, changes: bool = True) -> MemoryCoreError | None:
    """One line for a library error that escaped to the command line; None for anything else
    (a bug: its traceback should show). SQLite's disk-full and I/O errors are run failures
    (exit 1: the live index is only ever replaced by a finished, verified file). ``changes``: the
    command writes (a run, a write): the line says the live index was left as it was."""
    try:
        import apsw
    except ImportError:  # pragma: no cover - apsw is a dependency
        return None
    kept = "; the live index was left as it was" if changes else ""
    if isinstance(exc, apsw.FullError):
        return RunError(f"the disk is full (SQLite: {exc}){kept}")
    if isinstance(exc, apsw.IOError):
        low = _least_free()
        if low is not None and low[0] < FULL_BELOW:
            return RunError(f"the disk is full: {low[0] // 1024} KiB free where {low[1]} is"
                            f" (SQLite: {exc}){kept}")
        return RunError(f"disk I/O error (SQLite: {exc}){kept}")
    if isinstance(exc, (apsw.CorruptError, apsw.NotADBError)):
        return IndexDamagedError(f"a database file is damaged (SQLite: {exc}); `memory-core index --full` rebuilds"
                                 f" the index from the sources{kept}")
    if isinstance(exc, apsw.Error):
        return RunError(f"SQLite error: {exc.__class__.__name__}: {exc}{kept}")
    return None
