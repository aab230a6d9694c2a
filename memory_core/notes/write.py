"""``memory_write``: append an agent's note to today's daily note (or MEMORY.md), atomically,
and make it searchable at once.

- **Where**: ``memory/YYYY-MM-DD.md`` (today, the default), ``MEMORY.md``, or another
  ``memory/**/*.md``; any other path (``../x``, absolute paths, other files, a symlink on the
  way) is refused with a PathError, so nothing outside the memory files is ever written.
- **When not**: a read-only workspace (``compaction.workspace_access = "ro"`` or ``"none"``, or
  a folder this process cannot write) is refused with one clear error; nothing is written.
- **How**: the note's folder is opened component by component without following symlinks and
  locked (``flock``), the old text plus the new goes to a temp file beside it, which is synced
  and renamed over the note: a reader, the indexer or a crash sees the old note or the new one,
  never half of it, and two writers never lose each other's text.
- **Secrets**: the text comes from a conversation, so it is redacted as transcripts are
  (unless ``redact = "off"``) before it touches the disk.
- **Searchable at once**: :func:`write_memory` runs an incremental reindex of the file right
  after (a small change: one SQLite transaction on the live index), through the caller's
  runner (the MCP server's sync manager) or a :class:`memory_core.index.indexer.Indexer` run.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import errno
import fcntl
import os
import re
import secrets
import stat
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from memory_core.config import Settings
from memory_core.errors import MemoryCoreError, PathError, UsageError

MAX_WRITE_CHARS = 64 * 1024
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_MEMORY_PATH = re.compile(r"^(?:MEMORY\.md|memory\.md|memory/(?:[^/]+/)*[^/]+\.md)$")


@dataclass(frozen=True)
class WriteResult:
    path: str
    start_line: int  # the appended text's lines in the note
    end_line: int
    citation: str
    chars: int
    redacted: bool  # secrets were masked before writing
    indexed: bool  # the index holds the new text
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def target_path(path: str | None, today: _dt.date | None = None) -> str:
    """The workspace-relative note ``memory_write`` writes (PathError for any other path)."""
    if path is None or path == "":
        return f"memory/{(today or _dt.date.today()).isoformat()}.md"
    p = path.strip().removeprefix("./")
    parts = p.split("/")
    if (os.path.isabs(p) or any(part in ("", ".", "..") or part.startswith(".") for part in parts)
            or "\\" in p or "\x00" in p or not _MEMORY_PATH.match(p)):
        raise PathError(f"refusing to write {path}: memory_write writes MEMORY.md or memory/**/*.md in the"
                        " workspace only")
    return p


def _read_only_error(settings: Settings, why: str) -> UsageError:
    return UsageError(f"refusing to write: {why}; nothing was written")


def append_note(settings: Settings, text: str, path: str | None = None, *, today: _dt.date | None = None) -> WriteResult:
    """Append ``text`` to the memory note ``path`` (default: today's daily note); see module docstring."""
    from memory_core.notes.flush import workspace_read_only
    from memory_core.sources.redact import redact_lines, should_redact

    rel = target_path(path, today)
    body = (text or "").replace("\r\n", "\n").strip("\n")
    if not body.strip():
        raise UsageError("memory_write needs some text to write")
    if len(body) > MAX_WRITE_CHARS:
        raise UsageError(f"memory_write takes at most {MAX_WRITE_CHARS} characters at once, not {len(body)}")
    ro = workspace_read_only(settings)
    if ro:
        raise _read_only_error(settings, ro)
    clean = redact_lines(body) if should_redact("sessions", settings.redact) else body
    parts = rel.split("/")
    try:
        dfd = os.open(settings.workspace_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise UsageError(f"cannot open the workspace {settings.workspace_dir}: {exc.strerror}") from None
    try:
        for part in parts[:-1]:
            with contextlib.suppress(FileExistsError):
                os.mkdir(part, 0o777, dir_fd=dfd)
            nfd = os.open(part, _DIR_FLAGS, dir_fd=dfd)
            os.close(dfd)
            dfd = nfd
        fcntl.flock(dfd, fcntl.LOCK_EX)  # one writer of this folder's notes at a time
        start, end = _replace_with_appended(dfd, parts[-1], clean)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise PathError(f"refusing to write {rel}: a symlink or not a folder on the way") from None
        if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
            raise _read_only_error(settings, f"the workspace {settings.workspace_dir} is not writable"
                                             f" ({exc.strerror})") from None
        raise
    finally:
        os.close(dfd)
    return WriteResult(rel, start, end, f"{rel}#L{start}-L{end}", len(clean), clean != body, indexed=False)


def _replace_with_appended(dfd: int, name: str, text: str) -> tuple[int, int]:
    """Write ``<old note>\\n\\n<text>\\n`` to a temp file in ``dfd`` and rename it over ``name``;
    the appended text's (first, last) line."""
    old = b""
    mode = 0o644
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dfd)
    except FileNotFoundError:
        fd = -1
    if fd >= 0:
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise PathError(f"refusing to write {name}: not a regular file")
            mode = stat.S_IMODE(st.st_mode)
            with os.fdopen(os.dup(fd), "rb") as fh:
                old = fh.read()
        finally:
            os.close(fd)
    # one blank line between the old text and the new
    sep = b"" if not old or old.endswith(b"\n\n") else b"\n" if old.endswith(b"\n") else b"\n\n"
    new = old + sep + text.encode("utf-8") + b"\n"
    before = (old + sep).count(b"\n")
    start = before + 1
    end = before + text.count("\n") + 1
    tmp = f".{name}.write-{os.getpid()}-{secrets.token_hex(4)}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dfd)
    try:
        try:
            view = memoryview(new)
            while view:
                view = view[os.write(fd, view):]
            os.fchmod(fd, mode)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=dfd)
        raise
    with contextlib.suppress(OSError):
        os.fsync(dfd)
    return start, end


def write_memory(settings: Settings, text: str, path: str | None = None, *, index: bool = True,
                 runner: Callable[[], Any] | None = None, today: _dt.date | None = None) -> WriteResult:
    """:func:`append_note`, then an incremental reindex so the text is searchable at once.

    ``runner`` does the reindex (the MCP server passes its sync manager's, which keeps the
    provider loaded); default one :class:`memory_core.index.indexer.Indexer` run. A reindex that fails or
    finds the index busy leaves the note written and says so in ``note``."""
    res = append_note(settings, text, path, today=today)
    if not index:
        return res
    try:
        if runner is not None:
            runner()
        else:
            from memory_core.index.indexer import Indexer

            with Indexer(settings) as indexer:
                indexer.run()
    except MemoryCoreError as exc:
        return WriteResult(**{**res.to_dict(), "note": f"written, but not indexed yet ({exc}); the next reindex"
                                                        " picks it up"})
    return WriteResult(**{**res.to_dict(), "indexed": True})
