"""Opening an indexed file for reading (``get``) without following any symlink, regular files only.

:func:`memory_core.sources.discovery.resolve_indexed_path` decides whether a path may be read: it must
be indexed and lie under a source root. It resolves symlinks to check that, so a folder
replaced by a symlink *after* indexing (``memory/`` -> ``/etc``) still resolves "inside" a
root that moved with it. :func:`open_indexed` therefore opens the file again, one path
component at a time from the source root, each with ``O_NOFOLLOW`` (the rule discovery
follows: symlinks are never followed), and accepts only a regular file: a FIFO, a socket or a
device in place of a note is refused at once instead of blocking ``get`` (and an MCP worker)
forever, since the last component is opened with ``O_NONBLOCK``.

The root itself (the workspace, an extra path) is the user's own setting and is opened as
configured. The sessions folder is held to the rule indexing follows (a symlinked sessions
folder is never indexed): inside the workspace it is opened component by component from the
workspace, elsewhere its own name is opened with ``O_NOFOLLOW``; so a ``sessions/`` swapped
for a symlink after indexing never lets a reader open a transcript outside it.
"""

from __future__ import annotations

import codecs
import errno
import os
import stat
from collections.abc import AsyncIterable, AsyncIterator

from memory_core.config import Settings
from memory_core.errors import PathError

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | getattr(os, "O_NOCTTY", 0)


def _root_and_parts(settings: Settings, path: str, source: str | None = None) -> tuple[str, list[str]]:
    """The source root an indexed path lives under, and the components below it. ``source``: the
    source its ``files`` row records, which decides whether it is a transcript (a note in an
    extra path folder named ``sessions`` is not); None: a ``sessions/`` path is a transcript when
    ``"sessions"`` is a source."""
    ws = str(settings.workspace_dir)
    transcript = (path.startswith("sessions/") and "sessions" in settings.sources) if source is None \
        else source == "sessions"
    if transcript:
        if not path.startswith("sessions/"):
            raise PathError(f"not an indexed transcript: {path}")
        # each folder of a transcript below the sessions folder ([sessions] recursive) is a
        # component of its own: opened without following a symlink, as the walk never follows one
        names = path[len("sessions/"):].split("/")
        sdir = os.path.normpath(os.path.abspath(str(settings.sessions_dir)))
        wsn = os.path.normpath(os.path.abspath(ws))
        if sdir.startswith(wsn.rstrip(os.sep) + os.sep):  # inside the workspace: every component
            return wsn, [*sdir[len(wsn.rstrip(os.sep)) + 1:].split(os.sep), *names]
        parent, base = os.path.split(sdir)
        return parent or os.sep, [base, *names]  # elsewhere: the folder's own name is not followed
    if not os.path.isabs(path):
        return ws, path.split("/")
    roots = []
    for raw in settings.extra_paths:
        p = os.path.expanduser(raw)
        roots.append(os.path.abspath(p if os.path.isabs(p) else os.path.join(ws, p)))
    norm = os.path.normpath(path)
    for root in sorted(roots, key=len, reverse=True):
        if norm == root:  # an extra path naming one file: its folder is the root
            return os.path.dirname(root), [os.path.basename(root)]
        if norm.startswith(root.rstrip(os.sep) + os.sep):
            return root, norm[len(root.rstrip(os.sep)) + 1:].split(os.sep)
    raise PathError(f"refusing {path}: outside the indexed sources")


def open_indexed(settings: Settings, path: str, *, source: str | None = None) -> int:
    """A read-only file descriptor of the indexed file ``path`` (of ``source``, its row's: see
    :func:`_root_and_parts`); PathError for a symlink in any component below its source root, for
    anything but a regular file, or a missing file."""
    root, parts = _root_and_parts(settings, path, source)
    if not parts or any(p in ("", ".", "..") for p in parts):
        raise PathError(f"refusing {path}: not a plain indexed path")
    try:
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise PathError(f"cannot read {path}: {exc.strerror}") from None
    try:
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            try:
                nfd = os.open(part, _FILE_FLAGS if last else _DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR) or (exc.errno == errno.ENXIO and last):
                    what = {errno.ELOOP: "a symlink", errno.ENOTDIR: "a symlink or not a folder"}.get(
                        exc.errno, "not a regular file")
                    raise PathError(f"refusing {path}: {'/'.join(parts[:i + 1])} is {what}") from None
                if exc.errno == errno.ENOENT:
                    raise PathError(f"{path} is indexed but no longer exists") from None
                raise PathError(f"cannot read {path}: {exc.strerror}") from None
            os.close(fd)
            fd = nfd
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise PathError(f"refusing {path}: not a regular file")
        os.set_blocking(fd, True)
        return fd
    except BaseException:
        os.close(fd)
        raise


# -- lines of a note, numbered as the chunker numbers them ---------------------------------------

MAX_LINE_BYTES = 16 * 1024 * 1024  # a longer line is cut (and marked): never held whole


def read_lines(fd: int, start: int, end: int, *, max_line_bytes: int = MAX_LINE_BYTES) -> list[str]:
    """Lines ``start..end`` (1-based, inclusive) of the open file ``fd`` (closed here), split on
    ``"\n"`` only: the chunker splits a note's text on ``"\n"`` alone, so a bare ``"\r"`` (or a
    U+2028) inside a line must not start a new one here, or citations read the wrong lines
    (text mode's universal newlines split on a lone ``"\r"``). Undecodable bytes become U+FFFD;
    a line over ``max_line_bytes`` is cut there and ends with ``" […]"``; the rest is skipped
    unread into memory."""
    out: list[str] = []
    with open(fd, "rb", closefd=True) as fh:
        n = 0
        while n < end:
            raw = fh.readline(max_line_bytes + 1)
            if not raw:
                break
            n += 1
            cut = len(raw) > max_line_bytes and not raw.endswith(b"\n")
            if cut:
                raw = raw[:max_line_bytes]
                while (rest := fh.readline(1 << 20)) and not rest.endswith(b"\n"):
                    pass
            if n >= start:
                if n == 1 and raw.startswith(codecs.BOM_UTF8):
                    raw = raw[3:]  # a byte-order mark is no text: the indexer leaves it out too
                text = raw.decode("utf-8", errors="replace")
                out.append((text + " […]") if cut else text[:-1] if text.endswith("\n") else text)
    return out


# -- text that comes in: JSON with lone surrogates ---------------------------------------------

def _fix_surrogates(value: object) -> object:
    if isinstance(value, str):
        return value.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    if isinstance(value, list):
        return [_fix_surrogates(v) for v in value]
    if isinstance(value, dict):
        return {_fix_surrogates(k): _fix_surrogates(v) for k, v in value.items()}
    return value


def json_line_without_lone_surrogates(line: str) -> str:
    """A JSON text whose ``\\ud800``-style escapes of lone surrogates become U+FFFD.

    JSON allows such escapes, Python's ``json`` reads them, but they cannot be encoded as
    UTF-8, so strict parsers (pydantic's, used by the MCP SDK) refuse the whole message and a
    request gets no reply at all. Pairs stay pairs; a line without ``\\ud`` is returned as is."""
    if "\\ud" not in line and "\\uD" not in line:
        return line
    import json

    try:
        obj = json.loads(line)
    except ValueError:
        return line
    return json.dumps(_fix_surrogates(obj), ensure_ascii=False) + ("\n" if line.endswith("\n") else "")


class LoneSurrogateFreeLines:
    """An async line iterator (the MCP stdio transport's stdin) passed through
    :func:`json_line_without_lone_surrogates`."""

    def __init__(self, lines: AsyncIterable[str]) -> None:
        self._lines = lines

    def __aiter__(self) -> AsyncIterator[str]:
        return self._gen()

    async def _gen(self) -> AsyncIterator[str]:
        async for line in self._lines:
            yield json_line_without_lone_surrogates(line)
