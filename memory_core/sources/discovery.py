"""Which files are sources of the index.

Memory sources are ``MEMORY.md`` and ``memory.md`` at the workspace root, every ``*.md``
under ``memory/`` (recursively), and ``extra_paths`` (files or directories, absolute or
workspace-relative; directories are scanned recursively; only ``.md``). Session sources are
``*.jsonl`` directly in the sessions directory, indexed as ``sessions/<file name>``; with
``[sessions] recursive = true``, every ``*.jsonl`` below it (Codex CLI's dated folders), indexed as
``sessions/<path below the folder>`` (one directly in it keeps ``sessions/<file name>``).

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
from collections.abc import Callable, Iterable, Iterator, Mapping
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


def _md_entry(name: str, path: str, is_symlink: bool, is_dir: bool, is_file: bool,
              warnings: list[str]) -> str | None:
    """What the walk of a markdown folder does with one entry of a folder: ``"dir"`` (descend),
    ``"md"`` (a source), or None (skipped; a name that is not UTF-8 with a warning). One rule
    for the walk and for a run that looks only at the paths a watcher named. A symlink is never
    followed; one to a note or a folder says so (it was skipped without a word: a user who linked
    a note in saw it missing from every search and no reason)."""
    if is_symlink:
        if name.lower().endswith(".md") or os.path.isdir(path):
            warnings.append(f"skipped {escaped(path)}: a symlink; symlinks are not followed (move or copy what it"
                            " points to into memory/, or name its real path in extra_paths)")
        return None
    if not _utf8_name(name) and (is_dir or name.lower().endswith(".md")):
        warnings.append(f"skipped {escaped(path)}: its name is not valid UTF-8 (rename it to index it)")
        return None
    if is_dir:
        return "dir"
    if name.lower().endswith(".md"):
        if is_file:
            return "md"
        if os.path.lexists(path):  # a FIFO, a socket or a device named like a note: never read, and said
            warnings.append(f"skipped {escaped(path)}: not a regular file (a FIFO, a socket or a device)")
    return None


def _session_entry(name: str, path: str, is_symlink: bool, is_file: bool, warnings: list[str]) -> bool:
    """Whether one entry of the sessions folder is a transcript source (the same for the scan of
    the folder and for a run given the changed paths). A symlinked transcript is not followed, and says so."""
    if is_symlink and name.endswith(".jsonl"):
        warnings.append(f"skipped {escaped(path)}: a symlink; symlinks are not followed (move or copy the"
                        " transcript into the sessions folder)")
        return False
    if not (name.endswith(".jsonl") and not is_symlink and is_file):
        if name.endswith(".jsonl") and not is_symlink and os.path.lexists(path) and not os.path.isdir(path):
            warnings.append(f"skipped {escaped(path)}: not a regular file (a FIFO, a socket or a device)")
        return False
    if not _utf8_name(name):
        warnings.append(f"skipped {escaped(path)}: its name is not valid UTF-8 (rename it to index it)")
        return False
    return True


def _session_kind(name: str, path: str, is_symlink: bool, is_dir: bool, is_file: bool, recursive: bool,
                  warnings: list[str]) -> str | None:
    """What a walk of the sessions folder does with one entry below it: ``"dir"`` (descend: only
    when it is read recursively), ``"jsonl"`` (a transcript, :func:`_session_entry`), or None
    (skipped; a symlinked folder, or a folder whose name is not UTF-8, with a warning; a hidden
    folder, ``.memory-core`` or ``.git`` of a sessions folder set to the workspace, silently). One rule
    for the walk and for a run given the changed paths."""
    if recursive and (is_dir or (is_symlink and os.path.isdir(path))):
        if name.startswith("."):  # .memory-core (the index's own batch files), .git: no agent's sessions
            return None
        if is_symlink:
            warnings.append(f"skipped {escaped(path)}: a symlink; symlinks are not followed (move or copy the"
                            " folder into the sessions folder)")
            return None
        if not _utf8_name(name):
            warnings.append(f"skipped {escaped(path)}: its name is not valid UTF-8 (rename it to index it)")
            return None
        return "dir"
    return "jsonl" if _session_entry(name, path, is_symlink, is_file, warnings) else None


NESTED_HINT_DEPTH = 3
"""How many folders down a sessions folder that is not read recursively is looked at for a
transcript, when it holds none itself (Codex CLI's ``YYYY/MM/DD``)."""
NESTED_HINT_FOLDERS = 64
"""The most folders that look opens: it stops at the first transcript, and at this many."""


def _nested_transcript(sdir: str) -> str | None:
    """The first ``*.jsonl`` (sorted by name, depth first) in a subfolder of ``sdir`` up to
    :data:`NESTED_HINT_DEPTH` folders down, as a path below ``sdir`` (POSIX, undecodable bytes
    escaped), or None. Symlinks are not followed; unreadable folders are passed over."""
    stack = [(sdir, "", 0)]
    opened = 0
    while stack and opened < NESTED_HINT_FOLDERS:
        d, rel, depth = stack.pop()
        opened += 1
        try:
            with os.scandir(d) as it:
                entries = sorted(it, key=attrgetter("name"))
        except OSError:
            continue
        folders = []
        for e in entries:
            try:
                if depth and e.name.endswith(".jsonl") and e.is_file(follow_symlinks=False):
                    return escaped(rel + e.name)
                if depth < NESTED_HINT_DEPTH and e.is_dir(follow_symlinks=False):
                    folders.append((e.path, f"{rel}{e.name}/", depth + 1))
            except OSError:
                continue
        stack.extend(reversed(folders))
    return None


def _walk_sessions(sdir: str, recursive: bool, warnings: list[str]) -> Iterator[tuple[str, str]]:
    """``(absolute path, indexed path)`` of each transcript of the sessions folder ``sdir``: the
    ``*.jsonl`` directly in it, or (``recursive``) below it, walked as :func:`_walk_md` walks
    ``memory/`` (no symlink followed, unreadable folders said). Not recursive, a folder holding
    no transcript whose subfolders hold one says how to index them (once)."""
    stack = [(sdir, "sessions/")]
    top_jsonl = False
    while stack:
        d, prefix = stack.pop()
        try:
            with os.scandir(d) as it:
                entries = list(it)
        except OSError as exc:
            warnings.append(f"cannot read sessions directory {sdir}: {exc.strerror}" if d == sdir
                            else f"skipped unreadable directory {d}" if isinstance(exc, PermissionError)
                            else f"skipped directory {d}: {exc.strerror}")
            continue
        for e in entries:
            try:
                kind = _session_kind(e.name, e.path, e.is_symlink(), e.is_dir(follow_symlinks=False),
                                     e.is_file(follow_symlinks=False), recursive, warnings)
            except OSError:
                continue
            top_jsonl = top_jsonl or e.name.endswith(".jsonl")
            if kind == "dir":
                stack.append((e.path, f"{prefix}{e.name}/"))
            elif kind == "jsonl":
                yield e.path, prefix + e.name
    if not recursive and not top_jsonl and (nested := _nested_transcript(sdir)) is not None:
        warnings.append(f"sessions folder {sdir} holds transcripts only in subfolders ({nested}); set [sessions]"
                        " recursive = true to index them")


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
                kind = _md_entry(e.name, e.path, e.is_symlink(), e.is_dir(follow_symlinks=False),
                                 e.is_file(follow_symlinks=False), warnings)
            except OSError:
                continue
            if kind == "dir":
                stack.append(e.path)
            elif kind == "md":
                yield e


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


def _root_file(p: str) -> bool:
    """``MEMORY.md`` / ``memory.md`` at the workspace root is looked at when it exists and is no
    symlink (case-insensitive filesystems report both names for one file: identity dedupes)."""
    return os.path.lexists(p) and not os.path.islink(p)


def _extra_path(raw: str, ws: str) -> tuple[str, str, str]:
    """(absolute path, kind, warning) of one ``extra_paths`` entry: kind ``dir`` (walked), ``md``
    (one file), or ``""`` (skipped, with the warning saying why)."""
    p = os.path.expanduser(raw)
    p = p if os.path.isabs(p) else os.path.join(ws, p)
    p = os.path.abspath(p)
    if os.path.islink(p):
        return p, "", f"extra path {raw} is a symlink; symlinks are not followed"
    if os.path.isdir(p):
        return p, "dir", ""
    if os.path.isfile(p):
        if p.lower().endswith(".md"):
            return p, "md", ""
        return p, "", f"extra path {raw} is not a .md file; skipped"
    return p, "", f"extra path {raw} does not exist; skipped"


def _sessions_dir(settings: Settings) -> tuple[str, bool, str]:
    """(the sessions folder, whether it is scanned, the warning when it is not)."""
    sdir = str(settings.sessions_dir)
    if os.path.isdir(sdir) and not os.path.islink(sdir):
        return sdir, True, ""
    if os.path.lexists(sdir) and not os.path.islink(sdir):
        return sdir, False, f"sessions directory {sdir} is not a folder; no transcripts indexed"
    return sdir, False, f"sessions directory {sdir} does not exist; no transcripts indexed"


def _lstat(p: str) -> os.stat_result | None:
    try:
        return os.lstat(p)
    except OSError:
        return None


def _regular(abs_path: str) -> os.stat_result | None:
    """The ``lstat`` of a regular file, else None (gone, a symlink, a folder, a device...)."""
    st = _lstat(abs_path)
    return st if st is not None and stat.S_ISREG(st.st_mode) else None


def _candidates(settings: Settings, ws: str, warnings: list[str]) -> Iterator[tuple[str, str, str | None]]:
    """``(absolute path, source, indexed path or None: made from the absolute one)`` of every
    entry the scan looks at, in its order (the first path to a file wins): the root
    ``MEMORY.md`` / ``memory.md``, ``memory/``, the extra paths, the sessions folder."""
    if "memory" in settings.sources:
        for name in ("MEMORY.md", "memory.md"):
            p = os.path.join(ws, name)
            if _root_file(p) and not os.path.isfile(p):  # a folder (or a FIFO) named MEMORY.md: said, not read
                if name == "MEMORY.md" or not os.path.lexists(os.path.join(ws, "MEMORY.md")):
                    warnings.append(f"{name} is not a file (a folder, a FIFO or a device); it is not indexed")
            elif _root_file(p):
                yield p, "memory", None
            elif os.path.islink(p):
                warnings.append(f"{name} is a symlink; symlinks are not followed, so it is not indexed (copy or move"
                                " the file there, or name its real path in extra_paths)")
        mem_dir = os.path.join(ws, "memory")
        if os.path.islink(mem_dir):  # (a dotfiles or sync setup): every note of it would go unsaid
            warnings.append("memory/ is a symlink; symlinks are not followed, so none of its notes is indexed (name"
                            " its real folder in extra_paths, or make memory/ a folder)")
        elif os.path.isdir(mem_dir):
            for e in _walk_md(mem_dir, warnings):
                yield e.path, "memory", None
        elif os.path.lexists(mem_dir):  # a file named memory: the notes folder it stands for is not there
            warnings.append("memory is a file, not a folder; the notes folder memory/ is not indexed")
        for raw in settings.extra_paths:
            p, kind, warning = _extra_path(raw, ws)
            if kind == "dir":
                for e in _walk_md(p, warnings):
                    yield e.path, "memory", None
            elif kind == "md":
                yield p, "memory", None
            else:
                warnings.append(warning)

    if "sessions" in settings.sources:
        sdir, scanned, warning = _sessions_dir(settings)
        if scanned:
            for abs_path, path in _walk_sessions(sdir, settings.sessions.recursive, warnings):
                yield abs_path, "sessions", path
        else:
            warnings.append(warning)


def checked_workspace(settings: Settings) -> str:
    """The workspace folder; :class:`PathError` if it is missing."""
    ws = str(settings.workspace_dir)
    if not os.path.isdir(ws):
        raise PathError(f"workspace not found: {ws}")
    return ws


def discover_files(settings: Settings) -> Discovery:
    """List the source files for ``settings``. Raises :class:`PathError` if the workspace is missing."""
    ws = checked_workspace(settings)
    warnings: list[str] = []
    # Duplicates by file identity (device, inode): the same file reached twice (an extra path
    # inside memory/, a hard link, MEMORY.md vs memory.md on a case-insensitive disk). Cheaper
    # than realpath, and exact since symlinks are never followed.
    found: dict[tuple[int, int], FileEntry] = {}
    prefix = ws.rstrip(os.sep) + os.sep
    for abs_path, source, path in _candidates(settings, ws, warnings):
        st = _regular(abs_path)
        if st is None:
            continue
        key = (st.st_dev, st.st_ino)
        if key not in found:
            found[key] = _entry(abs_path, st, ws, source, path, prefix)
    files = sorted(found.values(), key=attrgetter("path", "source"))
    return Discovery(files=files, warnings=warnings)


@dataclass
class Scan:
    """What :func:`scan_against` found: the files whose stat differs from what is recorded (or
    that are not recorded), sorted as :func:`discover_files` sorts; how many match; every
    indexed path it saw."""

    changed: list[FileEntry]
    unchanged: int
    seen: set[str]
    warnings: list[str]


def scan_against(settings: Settings, recorded: Mapping[str, tuple[str, int, int]]) -> Scan:
    """:func:`discover_files`, except that a file whose ``(source, mtime ms, size)`` is the one
    ``recorded`` for its indexed path is counted instead of listed.

    The same walk and rules (:func:`_candidates`), the same dedupe by file identity; what a run
    over a big workspace saves is the per-file work for the files it will not look at (242k at
    a million chunks): one ``lstat`` and a tuple compare each, no entry made, nothing sorted."""
    ws = checked_workspace(settings)
    warnings: list[str] = []
    prefix = ws.rstrip(os.sep) + os.sep
    plen = len(prefix)
    lstat, is_reg = os.lstat, stat.S_ISREG
    ids: set[tuple[int, int]] = set()
    seen: set[str] = set()
    changed: list[FileEntry] = []
    unchanged = 0
    for abs_path, source, path in _candidates(settings, ws, warnings):
        try:
            st = lstat(abs_path)
        except OSError:
            continue
        if not is_reg(st.st_mode):
            continue
        key = (st.st_dev, st.st_ino)
        if key in ids:
            continue
        ids.add(key)
        if path is None:
            path = (abs_path[plen:] if os.sep == "/" and abs_path.startswith(prefix)
                    else _display_path(abs_path, ws, prefix))
        seen.add(path)
        mtime_ms = st.st_mtime_ns // 1_000_000
        if recorded.get(path) == (source, mtime_ms, st.st_size):
            unchanged += 1
        else:
            changed.append(FileEntry(path, abs_path, source, mtime_ms, st.st_size))
    changed.sort(key=attrgetter("path", "source"))
    return Scan(changed=changed, unchanged=unchanged, seen=seen, warnings=warnings)


# -- a run given the changed paths (a watcher's) -------------------------------------------------

class HintUnclear(Exception):
    """A changed path that discovery cannot judge on its own (a folder, a hard link, a source
    folder that came or went...): the run scans everything instead. The message says why."""


@dataclass
class HintedDiscovery:
    """What the changed paths are now: ``files``, the ones that are sources (as the walk would
    list them); ``gone``, the indexed paths they would have that are not sources (any more);
    ``checked``, how many paths were looked at."""

    files: list[FileEntry]
    gone: set[str]
    warnings: list[str]
    checked: int


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def discover_changed(settings: Settings, paths: Iterable[str]) -> HintedDiscovery:
    """Discovery limited to ``paths`` (absolute, e.g. a watcher's events): each is looked at
    (``lstat``) and classified by the rules of :func:`discover_files` (:func:`_root_file`,
    :func:`_extra_path`, :func:`_md_entry`, :func:`_session_entry`, :func:`_regular`), and nothing
    else is. The warnings about the roots (extra paths, the sessions folder) are the scan's;
    the walk's warnings come only for the paths given. Raises :class:`HintUnclear` when a path
    cannot be judged alone; the caller then scans everything with :func:`discover_files`."""
    ws = str(settings.workspace_dir)
    if not os.path.isdir(ws):
        raise PathError(f"workspace not found: {ws}")
    prefix = ws.rstrip(os.sep) + os.sep
    warnings: list[str] = []
    memory = "memory" in settings.sources
    root_files: tuple[str, ...] = ()
    walked: list[str] = []  # folders the scan walks, in its order
    md_roots: list[str] = []  # the same, and those that do not exist (now): what is under them is gone
    md_files: list[str] = []
    roots: list[str] = [ws]  # the folders the scan starts from (or would, once they exist)
    if memory:
        root_files = (os.path.join(ws, "MEMORY.md"), os.path.join(ws, "memory.md"))
        mem_dir = os.path.join(ws, "memory")
        roots.append(mem_dir)
        md_roots.append(mem_dir)
        if os.path.isdir(mem_dir) and not os.path.islink(mem_dir):
            walked.append(mem_dir)
        for raw in settings.extra_paths:
            p, kind, warning = _extra_path(raw, ws)
            if kind == "md":
                md_files.append(p)
                continue
            roots.append(p)  # a folder, or a path that may become one
            md_roots.append(p)
            if kind == "dir":
                walked.append(p)
            else:
                warnings.append(warning)
    sdir: str | None = None  # the sessions folder (transcripts are gone when it is not scanned)
    scanned = False
    recursive = settings.sessions.recursive
    if "sessions" in settings.sources:
        sdir, scanned, warning = _sessions_dir(settings)
        roots.append(sdir)
        if not scanned:
            warnings.append(warning)
    # the scan dedupes one file reached under two names by its identity; here only one name is
    # looked at, so roots that reach each other under other names (a symlink in a root's path)
    # are left to the scan
    named = roots + md_files
    real = {r: os.path.realpath(r) for r in named}
    for a in named:
        for b in named:
            if a != b and _under(real[a], real[b]) != _under(a, b):
                raise HintUnclear(f"{a} and {b} overlap under other names")

    found: dict[str, FileEntry] = {}
    gone: set[str] = set()
    checked = 0
    for raw_path in sorted(set(paths)):
        p = os.path.abspath(raw_path)
        checked += 1
        if not _utf8_name(p) or "\ufffd" in p:
            raise HintUnclear(f"{escaped(p)}: a name that is not valid UTF-8")
        if any(_under(r, p) for r in roots):
            raise HintUnclear(f"{p} is (or holds) a source folder")
        entry: FileEntry | None = None
        names: list[tuple[str, str]] = []  # (source, indexed path) this path would have
        if memory:
            memory_path = _display_path(p, ws, prefix)
            if p in root_files:
                names.append(("memory", memory_path))
                if _root_file(p):
                    other = root_files[1] if p == root_files[0] else root_files[0]
                    if _root_file(other) and _same_file(p, other):
                        raise HintUnclear("MEMORY.md and memory.md are one file (a case-insensitive disk)")
                    entry = _hinted_entry(p, ws, "memory", memory_path)
            root = next((r for r in md_roots if _under(p, r)), None)
            if entry is None and root is not None:
                names.append(("memory", memory_path))
                if root in walked and _walks_to(root, p, warnings):
                    st = _lstat(p)
                    if st is not None:
                        what = _md_entry(os.path.basename(p), p, stat.S_ISLNK(st.st_mode), stat.S_ISDIR(st.st_mode),
                                         stat.S_ISREG(st.st_mode), warnings)
                        if what == "dir":
                            raise HintUnclear(f"{p} is a folder")
                        if what == "md":
                            entry = _hinted_entry(p, ws, "memory", memory_path)
            if entry is None and p in md_files:
                names.append(("memory", memory_path))
                entry = _hinted_entry(p, ws, "memory", memory_path)
        top = sdir is not None and os.path.dirname(p) == sdir
        if entry is None and sdir is not None and (top or (recursive and _under(p, sdir))):
            name = os.path.basename(p)
            below = p[len(sdir.rstrip(os.sep)) + 1:]
            session_path = "sessions/" + (below.replace(os.sep, "/") if os.sep != "/" else below)
            names.append(("sessions", session_path))
            st = _lstat(p) if scanned and (top or _walks_to(sdir, p, warnings, _session_folder)) else None
            if st is not None:
                what = _session_kind(name, p, stat.S_ISLNK(st.st_mode), stat.S_ISDIR(st.st_mode),
                                     stat.S_ISREG(st.st_mode), recursive, warnings)
                if what == "dir":
                    raise HintUnclear(f"{p} is a folder")
                if what == "jsonl":
                    entry = _hinted_entry(p, ws, "sessions", session_path)
        if entry is not None:
            found[entry.path] = entry
        elif names:
            gone.update(path for _, path in names)
        else:  # a watcher only names paths under the sources: another name for one (a symlink)?
            raise HintUnclear(f"{p} is under no source")
    files = sorted(found.values(), key=attrgetter("path", "source"))
    return HintedDiscovery(files, gone - set(found), warnings, checked)


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samestat(os.lstat(a), os.lstat(b))
    except OSError:
        return False


def _hinted_entry(p: str, ws: str, source: str, path: str) -> FileEntry | None:
    """The entry of a changed path that is a source by name, when it is a regular file; a file
    with other names (a hard link) is left to the scan, which dedupes it by identity."""
    st = _regular(p)
    if st is None:
        return None
    if st.st_nlink > 1:
        raise HintUnclear(f"{p} has {st.st_nlink} names (hard links)")
    return _entry(p, st, ws, source, path)


def _md_folder(name: str, path: str, st: os.stat_result, warnings: list[str]) -> bool:
    return _md_entry(name, path, stat.S_ISLNK(st.st_mode), stat.S_ISDIR(st.st_mode), stat.S_ISREG(st.st_mode),
                     warnings) == "dir"


def _session_folder(name: str, path: str, st: os.stat_result, warnings: list[str]) -> bool:
    return _session_kind(name, path, stat.S_ISLNK(st.st_mode), stat.S_ISDIR(st.st_mode), stat.S_ISREG(st.st_mode),
                         True, warnings) == "dir"


def _walks_to(root: str, p: str, warnings: list[str],
              descends: Callable[[str, str, os.stat_result, list[str]], bool] = _md_folder) -> bool:
    """Whether the walk of ``root`` reaches the folder holding ``p``: every folder on the way is a
    folder (no symlink) that the walk would descend into (``descends``: the walk's rule for a
    folder, :func:`_md_entry`'s or :func:`_session_kind`'s) and can read."""
    d = os.path.dirname(p)
    chain: list[str] = []
    while _under(d, root):
        chain.append(d)
        if d == root:
            break
        d = os.path.dirname(d)
    for i, d in enumerate(reversed(chain)):
        st = _lstat(d)
        if st is None:
            return False
        if i and not descends(os.path.basename(d), d, st, warnings):
            return False
        if not stat.S_ISDIR(st.st_mode):
            return False
        if not os.access(d, os.R_OK | os.X_OK):
            raise HintUnclear(f"{d} cannot be read")
    return True


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


def resolve_indexed_path(settings: Settings, path: str, meta: Mapping[str, Any] | None = None, *,
                         source: str | None = None) -> str:
    """Map an indexed path back to an absolute file path, refusing anything outside the sources.

    ``path`` must be a path as stored in the index (the caller checks that it is indexed).
    ``source``: the source its ``files`` row records (``"sessions"`` for a transcript, else a
    note: ``memory`` or an extra path); it decides where the file is, so a note whose path starts
    with ``sessions/`` (an extra path folder of that name) is resolved under the workspace, not
    in the sessions folder. Without it (None) a ``sessions/`` path is taken for a transcript
    when ``"sessions"`` is a source. ``meta``: the index's meta; the workspace, sources, sessions
    folder and extra paths it recorded (:mod:`memory_core.storage.indexmeta`) are what ``path`` is
    resolved against, so a reader needs nothing but the index (an index older than those records
    uses ``settings``'). The resolved real path must lie under the workspace's memory sources, an
    extra path, or the sessions directory; symlinks that point elsewhere are refused.
    """
    if not path or "\x00" in path:
        raise PathError("path is empty or contains a NUL byte")
    if meta:
        from memory_core.storage.indexmeta import IndexRecord

        record = IndexRecord.from_meta(meta)
        if record is not None:
            settings = record.reader_settings(settings)
    ws = str(settings.workspace_dir)
    transcript = (path.startswith("sessions/") and "sessions" in settings.sources) if source is None \
        else source == "sessions"
    if transcript:
        if not path.startswith("sessions/"):
            raise PathError(f"not an indexed transcript: {path}")
        parts = path[len("sessions/"):].split("/")
        if any(part in ("", ".", "..") for part in parts):
            raise PathError(f"not an indexed transcript: {path}")
        if len(parts) > 1 and not settings.sessions.recursive:
            raise PathError(f"not an indexed transcript: {path} (a subfolder of the sessions folder is read only"
                            " with [sessions] recursive = true)")
        candidate = os.path.join(str(settings.sessions_dir), *parts)
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
