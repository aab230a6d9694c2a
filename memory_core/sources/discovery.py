"""Which files are sources of the index.

Memory sources are ``MEMORY.md`` and ``memory.md`` at the workspace root, every ``*.md``
under ``memory/`` (recursively), and ``extra_paths`` (files or directories, absolute or
workspace-relative; directories are scanned recursively; only ``.md``). Session sources are
``*.jsonl`` directly in the sessions directory (not recursive) and are indexed as
``sessions/<file name>``.

Rules: symlinks are never followed (neither files nor directories, which also makes
symlink loops harmless); duplicates are removed by real path; the order is deterministic
(sorted by indexed path). A file inside the workspace is named by its workspace-relative
POSIX path; a file outside it (an extra path elsewhere) by its absolute POSIX path.

Hashing is a separate step (:func:`hash_file`) so a run can skip it when size and mtime
match the live index.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from operator import attrgetter
from typing import Any

from memory_core.config import Settings
from memory_core.errors import PathError

HASH_BLOCK = 1 << 20


@dataclass(frozen=True, slots=True)
class FileEntry:
    """One source file as seen by discovery."""

    path: str  # indexed path: workspace-relative POSIX, or absolute for outside files
    abs_path: str
    source: str  # "memory" | "sessions"
    mtime_ms: int
    size: int
    hash: str | None = None

    def with_hash(self, digest: str) -> FileEntry:
        return replace(self, hash=digest)


@dataclass
class Discovery:
    files: list[FileEntry]
    warnings: list[str]


def hash_file(abs_path: str) -> str:
    """sha256 of the file's bytes, read in 1 MiB blocks."""
    h = hashlib.sha256()
    with open(abs_path, "rb") as fh:
        while block := fh.read(HASH_BLOCK):
            h.update(block)
    return h.hexdigest()


def escaped(name: str) -> str:
    """A file name for a message: bytes that are not UTF-8 shown as ``\\xe9``."""
    return os.fsencode(name).decode("utf-8", "backslashreplace")


def _utf8_name(name: str) -> bool:
    """False for a name holding bytes that are not UTF-8 (Python keeps them as lone surrogates,
    which SQLite, JSON and Parquet cannot store): such a file is skipped with a warning."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _walk_md(root: str, warnings: list[str]) -> Iterator[os.DirEntry[str]]:
    """Yield regular ``.md`` files below ``root`` without following symlinks."""
    stack = [root]
    while stack:
        d = stack.pop()
        try:
            with os.scandir(d) as it:
                entries = list(it)
        except PermissionError:
            warnings.append(f"skipped unreadable directory {d}")
            continue
        except OSError as exc:
            warnings.append(f"skipped directory {d}: {exc.strerror}")
            continue
        for e in entries:
            try:
                if e.is_symlink():
                    continue
                if not _utf8_name(e.name) and (e.is_dir(follow_symlinks=False) or e.name.lower().endswith(".md")):
                    warnings.append(f"skipped {escaped(e.path)}: its name is not valid UTF-8 (rename it to index it)")
                    continue
                if e.is_dir(follow_symlinks=False):
                    stack.append(e.path)
                elif e.is_file(follow_symlinks=False) and e.name.lower().endswith(".md"):
                    yield e
            except OSError:
                continue


def _display_path(abs_path: str, workspace: str, prefix: str | None = None) -> str:
    """Workspace-relative POSIX path, or the absolute POSIX path for files outside it.

    Plain string work: paths here are built by joining onto the (absolute, normalised)
    workspace, and this runs once per file on every run (``prefix``: the workspace's, made once
    by the caller)."""
    if prefix is None:
        prefix = workspace.rstrip(os.sep) + os.sep
    if abs_path.startswith(prefix):
        rel = abs_path[len(prefix):]
    else:
        norm = os.path.normpath(abs_path)
        rel = norm[len(prefix):] if norm.startswith(prefix) else norm
    return rel.replace(os.sep, "/") if os.sep != "/" else rel


def _entry(abs_path: str, st: os.stat_result, workspace: str, source: str, path: str | None = None,
           prefix: str | None = None) -> FileEntry:
    return FileEntry(path or _display_path(abs_path, workspace, prefix), abs_path, source,
                     st.st_mtime_ns // 1_000_000, st.st_size)


def discover_files(settings: Settings) -> Discovery:
    """List the source files for ``settings``. Raises :class:`PathError` if the workspace is missing."""
    ws = str(settings.workspace_dir)
    if not os.path.isdir(ws):
        raise PathError(f"workspace not found: {ws}")
    warnings: list[str] = []
    # Duplicates by file identity (device, inode): the same file reached twice (an extra path
    # inside memory/, a hard link, MEMORY.md vs memory.md on a case-insensitive disk). Cheaper
    # than realpath, and exact since symlinks are never followed.
    found: dict[tuple[int, int], FileEntry] = {}
    prefix = ws.rstrip(os.sep) + os.sep

    def add(abs_path: str, source: str, path: str | None = None) -> None:
        try:
            st = os.lstat(abs_path)
        except OSError:
            return
        if not stat.S_ISREG(st.st_mode):
            return
        key = (st.st_dev, st.st_ino)
        if key in found:
            return
        found[key] = _entry(abs_path, st, ws, source, path, prefix)

    if "memory" in settings.sources:
        for name in ("MEMORY.md", "memory.md"):
            p = os.path.join(ws, name)
            # Case-insensitive filesystems report both names for one file: realpath dedupes.
            if os.path.lexists(p) and not os.path.islink(p):
                add(p, "memory")
        mem_dir = os.path.join(ws, "memory")
        if os.path.isdir(mem_dir) and not os.path.islink(mem_dir):
            for e in _walk_md(mem_dir, warnings):
                add(e.path, "memory")
        for raw in settings.extra_paths:
            p = os.path.expanduser(raw)
            p = p if os.path.isabs(p) else os.path.join(ws, p)
            p = os.path.abspath(p)
            if os.path.islink(p):
                warnings.append(f"extra path {raw} is a symlink; symlinks are not followed")
            elif os.path.isdir(p):
                for e in _walk_md(p, warnings):
                    add(e.path, "memory")
            elif os.path.isfile(p):
                if p.lower().endswith(".md"):
                    add(p, "memory")
                else:
                    warnings.append(f"extra path {raw} is not a .md file; skipped")
            else:
                warnings.append(f"extra path {raw} does not exist; skipped")

    if "sessions" in settings.sources:
        sdir = str(settings.sessions_dir)
        if os.path.isdir(sdir) and not os.path.islink(sdir):
            try:
                with os.scandir(sdir) as it:
                    for e in it:
                        if e.name.endswith(".jsonl") and not e.is_symlink() and e.is_file(follow_symlinks=False):
                            if not _utf8_name(e.name):
                                warnings.append(f"skipped {escaped(e.path)}: its name is not valid UTF-8"
                                                " (rename it to index it)")
                                continue
                            add(e.path, "sessions", f"sessions/{e.name}")
            except OSError as exc:
                warnings.append(f"cannot read sessions directory {sdir}: {exc.strerror}")
        else:
            warnings.append(f"sessions directory {sdir} does not exist; no transcripts indexed")

    files = sorted(found.values(), key=attrgetter("path", "source"))
    return Discovery(files=files, warnings=warnings)


_CITATION = re.compile(r"^(?P<path>.+)#L(?P<start>\d+)(?:-L?(?P<end>\d+))?$")


@dataclass(frozen=True)
class Citation:
    """``path#L10-L20`` (or ``path#L10``) as ``search`` prints it, split into its parts."""

    path: str
    start_line: int | None = None
    end_line: int | None = None

    @property
    def lines(self) -> int | None:
        if self.start_line is None:
            return None
        return max(1, (self.end_line or self.start_line) - self.start_line + 1)


def parse_citation(text: str) -> Citation:
    """A path or a citation: ``memory/a.md#L10-L20`` -> ``Citation("memory/a.md", 10, 20)``
    (``path#L10`` is one line); a leading ``./`` is dropped; anything else is a plain path."""
    text = text.strip()
    m = _CITATION.match(text)
    path, start, end = (m["path"], int(m["start"]), int(m["end"] or m["start"])) if m else (text, None, None)
    if start is not None and end is not None and end < start:
        from memory_core.errors import UsageError

        raise UsageError(f"{text}: the line range ends before it starts (L{start}-L{end}); give path#L{end}-L{start}")
    while path.startswith("./"):
        path = path[2:]
    return Citation(path, start, None if start is None else max(start, end or start))


def resolve_indexed_path(settings: Settings, path: str, meta: Mapping[str, Any] | None = None) -> str:
    """Map an indexed path back to an absolute file path, refusing anything outside the sources.

    ``path`` must be a path as stored in the index (the caller checks that it is indexed).
    ``meta``: the index's meta; the workspace, sources, sessions folder and extra paths it
    recorded (:mod:`memory_core.indexmeta`) are what ``path`` is resolved against, so a reader
    needs nothing but the index (an index older than those records uses ``settings``'). The
    resolved real path must lie under the workspace's memory sources, an extra path, or the
    sessions directory; symlinks that point elsewhere are refused.
    """
    if not path or "\x00" in path:
        raise PathError("path is empty or contains a NUL byte")
    if meta:
        from memory_core.indexmeta import IndexRecord

        record = IndexRecord.from_meta(meta)
        if record is not None:
            settings = record.reader_settings(settings)
    ws = str(settings.workspace_dir)
    if path.startswith("sessions/") and "sessions" in settings.sources:
        name = path[len("sessions/"):]
        if "/" in name or name in ("", ".", ".."):
            raise PathError(f"not an indexed transcript: {path}")
        candidate = os.path.join(str(settings.sessions_dir), name)
        roots = [str(settings.sessions_dir)]
    else:
        candidate = path if os.path.isabs(path) else os.path.join(ws, path)
        roots = [os.path.join(ws, "MEMORY.md"), os.path.join(ws, "memory.md"), os.path.join(ws, "memory")]
        for raw in settings.extra_paths:
            p = os.path.expanduser(raw)
            roots.append(os.path.abspath(p if os.path.isabs(p) else os.path.join(ws, p)))
    candidate = os.path.abspath(candidate)
    if os.path.islink(candidate):
        raise PathError(f"refusing {path}: it is a symlink")
    real = os.path.realpath(candidate)
    for root in roots:
        r = os.path.realpath(root)
        if real == r or real.startswith(r.rstrip(os.sep) + os.sep):
            return real
    raise PathError(f"refusing {path}: outside the indexed sources")
