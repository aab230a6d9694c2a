"""``memory_write``: append an agent's note to today's daily note (or MEMORY.md), in place,
and make it searchable at once.

- **Where**: ``memory/YYYY-MM-DD.md`` (today, the default), ``MEMORY.md``, or another
  ``memory/**/*.md`` at most :data:`MAX_FOLDER_DEPTH` folders deep; any other path (``../x``,
  absolute paths, other files, a symlink on the way, a name that is not UTF-8 or too long for the
  system) is refused with a PathError, so nothing outside the memory files is ever written and
  nothing is written that the indexer would skip.
- **When not**: a read-only workspace (``compaction.workspace_access = "ro"`` or ``"none"``, or
  a folder this process cannot write) is refused with one clear error; nothing is written.
- **What**: NUL characters (which make the indexer take the note for a binary file) are removed
  and invalid text (lone surrogates: undecodable bytes) becomes U+FFFD; the answer says so.
- **How**: the note's folder is opened component by component without following symlinks and
  locked (``flock``: one ``memory_write`` at a time per folder), and the text is *appended in
  place* (``O_APPEND``), never by renaming a new copy over the note: text another writer appends
  meanwhile (a shell ``>>``, the agent runtime, an editor) is never lost, and a write killed
  mid-way leaves no temp copy (stale ``.<note>.write-*`` copies of older versions are removed by
  the next write).
- **Secrets**: the text comes from a conversation, so it is redacted as transcripts are
  (unless ``redact = "off"``) before it touches the disk, *with the end of the note before it*
  (read under the folder's lock, before the append): a secret split over two writes (a PEM key's
  BEGIN line in one, its body and END in the next; ``password:`` then the value) reaches the disk
  already masked. Only the new text is ever masked: the note's bytes before the write (the user's
  own text, another writer's appends) are never rewritten, whatever the joined text looks like
  (a line about "-----BEGIN ... KEY-----" in prose once let a later END line mask every user line
  between them). A value on the line after the note's last line (``password:``) is taken from a
  new write only when it is one token: "Shopping list for the turkey:" does not make the next
  write's sentence a password.
- **Searchable at once**: :func:`write_memory` runs an incremental reindex of the file right
  after (a small change: one SQLite transaction on the live index), through the caller's
  runner (the MCP server's sync manager) or a :class:`memory_core.index.indexer.Indexer` run, and
  answers ``indexed: true`` only when the index then holds the note with the new text.
"""

from __future__ import annotations

import codecs
import contextlib
import datetime as _dt
import errno
import fcntl
import logging
import os
import re
import stat
import unicodedata
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from memory_core.config import Settings
from memory_core.errors import MemoryCoreError, PathError, RunCancelled, UsageError
from memory_core.index.run_stops import deliver, is_stop, stops_held
from memory_core.index.runtypes import RunSummary

log = logging.getLogger("memory_core.notes.write")

MAX_WRITE_CHARS = 64 * 1024
MAX_FOLDER_DEPTH = 8
"""Folders a note may sit in below ``memory/`` (``memory/a/b/.../x.md``): one write never makes a deep tree."""
MAX_NAME_BYTES = 255  # NAME_MAX: a longer file or folder name cannot exist
MAX_PATH_BYTES = 1024  # the note's workspace-relative path, in UTF-8
PATH_MAX = 4096  # the absolute path: the indexer skips what the system cannot open by name
REDACT_CONTEXT_BYTES = 64 * 1024
"""How much of the note before a write is redacted with it (a PEM key is ~3 KiB): a secret split
over two writes is masked as a whole."""
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_MEMORY_PATH = re.compile(r"^(?:MEMORY\.md|memory\.md|memory/(?:[^/]+/)*[^/]+\.md)$")
_STALE_TEMP = re.compile(r"^\..+\.write-(\d+)-[0-9a-f]{8}$")
_HIDDEN = frozenset({"Cf", "Zl", "Zp"})
"""Characters a note's name may not hold, as its controls: format characters (bidi overrides that
show ``x.md`` reversed, zero-width spaces and joiners that make two names look one, a BOM) and the
line and paragraph separators; none prints as what it is."""
TEXT_CHECK_BYTES = 64 * 1024 * 1024
"""The indexer's limit (``memory_core.index.stages.MAX_FILE_BYTES``): a note up to it is checked to
be UTF-8 text before a write; a bigger one the indexer skips whole, and a write to it says it is
not indexed (its bytes are only counted for the citation, as before)."""


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
    # the end of the written text's last line, as written: what the index must hold (not in answers)
    written_tail: str = field(default="", repr=False, compare=False)

    def to_dict(self) -> dict[str, object]:
        out = asdict(self)
        out.pop("written_tail")
        return out


def target_path(path: str | None, today: _dt.date | None = None) -> str:
    """The workspace-relative note ``memory_write`` writes (PathError for any other path)."""
    if path is None or path == "":
        return f"memory/{(today or _dt.date.today()).isoformat()}.md"
    if not isinstance(path, str):
        raise PathError(f"a note's path is text, not {type(path).__name__}")
    p = path.strip().removeprefix("./")
    shown = _escaped(p)[:200]
    try:
        raw = p.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: a name that is not UTF-8 (the indexer skips it)
        raise PathError(f"refusing to write {shown}: the name is not valid UTF-8") from None
    parts = p.split("/")
    if (os.path.isabs(p) or any(part in ("", ".", "..") or part.startswith(".") for part in parts)
            or "\\" in p or "\x00" in p or not _MEMORY_PATH.match(p)):
        raise PathError(f"refusing to write {shown}: memory_write writes MEMORY.md or memory/**/*.md in the"
                        " workspace only")
    if any(unicodedata.category(c) == "Cc" for c in p):  # C0, DEL and C1 (U+0085 ends a line too)
        raise PathError(f"refusing to write {shown}: control characters in the name")
    hidden = next((c for c in p if unicodedata.category(c) in _HIDDEN), None)
    if hidden is not None:
        raise PathError(f"refusing to write {shown}: an invisible or format character (U+{ord(hidden):04X}) in the"
                        " name")
    if len(parts) - 2 > MAX_FOLDER_DEPTH:
        raise PathError(f"refusing to write {shown}: at most {MAX_FOLDER_DEPTH} folders below memory/")
    if len(raw) > MAX_PATH_BYTES or any(len(part.encode("utf-8")) > MAX_NAME_BYTES for part in parts):
        raise PathError(f"refusing to write {shown}: the path is too long (at most {MAX_NAME_BYTES} bytes a"
                        f" name, {MAX_PATH_BYTES} in all)")
    return p


def _escaped(p: str) -> str:
    """``p`` for a message: what does not print (undecodable bytes, which Python holds as lone
    surrogates; controls; bidi overrides; zero-width characters) as ``\\uNNNN`` escapes, so the
    line shows what the name holds and no character in it can reorder or hide the line."""
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in p)


def clean_text(text: str) -> tuple[str, int]:
    """``text`` with NUL characters removed and lone surrogates (undecodable bytes, invalid in
    UTF-8) replaced by U+FFFD; and how many characters were changed."""
    if not isinstance(text, str):
        raise UsageError(f"memory_write takes text, not {type(text).__name__}")
    n = text.count("\x00")
    out = text.replace("\x00", "")
    try:
        out.encode("utf-8")
    except UnicodeEncodeError:
        fixed = out.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
        n += sum(1 for a, b in zip(out, fixed, strict=True) if a != b)
        out = fixed
    return out, n


def _read_only_error(settings: Settings, why: str) -> UsageError:
    return UsageError(f"refusing to write: {why}; nothing was written")


def append_note(settings: Settings, text: str, path: str | None = None, *, today: _dt.date | None = None) -> WriteResult:
    """Append ``text`` to the memory note ``path`` (default: today's daily note); see module docstring."""
    from memory_core.notes.flush import workspace_read_only
    from memory_core.sources.redact import redact_lines, should_redact

    rel = target_path(path, today)
    text, fixed = clean_text(text or "")
    body = text.replace("\r\n", "\n").strip("\n")
    if not body.strip():
        raise UsageError("memory_write needs some text to write")
    if len(body) > MAX_WRITE_CHARS:
        raise UsageError(f"memory_write takes at most {MAX_WRITE_CHARS} characters at once, not {len(body)}")
    if len(os.fsencode(settings.workspace_dir / rel)) >= PATH_MAX:
        raise PathError(f"refusing to write {rel}: its full path is longer than the system's {PATH_MAX} bytes")
    ro = workspace_read_only(settings)
    if ro:
        raise _read_only_error(settings, ro)
    redacting = should_redact("sessions", settings.redact)
    clean = redact_lines(body) if redacting else body
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
        _remove_stale_temps(dfd)
        held: list[int] = []
        for _ in range(REPLACED_TRIES):
            start, end, joined, written, more = _append_in_place(dfd, parts[-1], clean,
                                                                 redact_lines if redacting else None, rel)
            held += more
            if _still_the_note(dfd, parts[-1], written):
                break
            # an editor's or an agent's atomic save (a copy renamed over the note) came between our
            # open and our write: the text went into the file it replaced, which is gone (the
            # thirty-eighth session's audit: exit 0, a citation past the note's end, "indexed: true")
            if held:  # stopped meanwhile: the note holds none of it, and the stop says so
                deliver(held)
            log.warning("%s was replaced as it was written (an atomic save by another program); writing again",
                        rel)
        else:
            raise UsageError(f"cannot write {rel}: another program replaced the note during each of"
                             f" {REPLACED_TRIES} tries; the note does not hold the text")
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise PathError(f"refusing to write {rel}: a symlink or not a folder on the way") from None
        if exc.errno == errno.EISDIR:
            raise PathError(f"refusing to write {rel}: a folder has that name") from None
        if exc.errno == errno.ENXIO:  # a socket (or a device with nothing behind it) put there since the check
            raise PathError(f"refusing to write {rel}: not a regular file") from None
        if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
            raise _read_only_error(settings, f"the workspace {settings.workspace_dir} is not writable"
                                             f" ({exc.strerror})") from None
        if exc.errno == errno.ENAMETOOLONG:
            raise PathError(f"refusing to write {rel}: the name is too long for this file system") from None
        if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
            raise UsageError(f"cannot write {rel}: {exc.strerror}; nothing was written") from None
        raise
    finally:
        os.close(dfd)
    note = f"{fixed} NUL or invalid characters were removed or replaced" if fixed else ""
    res = WriteResult(rel, start, end, f"{rel}#L{start}-L{end}", len(clean), clean != body or joined,
                      indexed=False, note=note, written_tail=written.tail)
    if held:  # a stop came once the note was being written: delivered now, with what was written
        try:
            deliver(held)  # by its own handler: KeyboardInterrupt, a command's SIGTERM stop
        except BaseException as exc:
            if is_stop(exc):
                exc.write_result = res  # type: ignore[attr-defined]
                exc.command_done = f"writing {res.citation} (the note is written)"  # type: ignore[attr-defined]
            raise
    return res


def _remove_stale_temps(dfd: int) -> None:
    """Remove the temp copies (``.<note>.write-<pid>-<hex>``) a write of an older version left
    when it was killed: their writer is gone (a live writer's are left alone)."""
    with contextlib.suppress(OSError):
        for entry in os.listdir(dfd):
            m = _STALE_TEMP.match(entry)
            if m is None:
                continue
            pid = int(m.group(1))
            if pid != os.getpid():
                try:
                    os.kill(pid, 0)
                    continue  # still running
                except ProcessLookupError:
                    pass
                except (PermissionError, OverflowError):
                    continue
            with contextlib.suppress(OSError):
                os.unlink(entry, dir_fd=dfd)


def _count_newlines(fd: int, start: int, end: int) -> int:
    n, pos = 0, start
    while pos < end:
        chunk = os.pread(fd, min(1 << 20, end - pos), pos)
        if not chunk:
            break
        n += chunk.count(b"\n")
        pos += len(chunk)
    return n


def _text_lines(fd: int, size: int, rel: str) -> int:
    """The newlines in the note's first ``size`` bytes, read once in 1 MiB pieces; a PathError when
    they are not UTF-8 text (UTF-16, NUL bytes, bytes that do not decode; a UTF-8 BOM is text).
    Appending UTF-8 to such a note garbles it for whoever opens it (a UTF-16 note read as UTF-16
    shows the appended text as CJK noise) and cites lines that are not there as text. A note over
    :data:`TEXT_CHECK_BYTES` is only counted: the indexer skips it whole, and the write says so."""
    check = size <= TEXT_CHECK_BYTES
    head = os.pread(fd, 2, 0) if check else b""
    if head in (b"\xff\xfe", b"\xfe\xff"):
        raise PathError(f"refusing to write {rel}: the note is UTF-16, not UTF-8 text (memory-core does not index"
                        " it either); nothing was written")
    decoder = codecs.getincrementaldecoder("utf-8")()
    n = pos = 0
    while pos < size:
        chunk = os.pread(fd, min(1 << 20, size - pos), pos)
        if not chunk:
            break
        n += chunk.count(b"\n")
        if check:
            nul = chunk.find(b"\x00")
            if nul >= 0:
                raise PathError(f"refusing to write {rel}: the note holds NUL bytes (UTF-16 or binary; the first at"
                                f" byte {pos + nul}), not UTF-8 text; nothing was written")
            pending = decoder.getstate()[0]  # a character's first bytes, from the piece before
            try:
                decoder.decode(chunk)
            except UnicodeDecodeError as exc:
                bad = (pending + chunk)[exc.start]
                raise PathError(f"refusing to write {rel}: the note is not UTF-8 text (byte {bad:#04x} at offset"
                                f" {pos - len(pending) + exc.start} does not decode); nothing was written") from None
        pos += len(chunk)
    if check:
        try:
            decoder.decode(b"", final=True)
        except UnicodeDecodeError:  # ends inside a character
            raise PathError(f"refusing to write {rel}: the note is not UTF-8 text (it ends inside a character);"
                            " nothing was written") from None
    return n


@dataclass(frozen=True)
class _Written:
    """What one append wrote to: the file (device, inode) and its text's last line's end."""

    dev: int
    ino: int
    tail: str


REPLACED_TRIES = 5
"""How many times a write is tried again when the note was replaced under it (an atomic save)."""


def _still_the_note(dfd: int, name: str, written: _Written) -> bool:
    """Whether ``name`` in ``dfd`` is still the file the append wrote to (not replaced by a rename
    over it, nor removed)."""
    try:
        st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
    except OSError:
        return False
    return (st.st_dev, st.st_ino) == (written.dev, written.ino)


def _append_in_place(dfd: int, name: str, text: str, redact: Callable[[str], str] | None,
                     rel: str) -> tuple[int, int, bool, _Written, list[int]]:
    """Append ``\\n\\n<text>\\n`` (one blank line after the old text) to ``name`` in ``dfd`` with
    ``O_APPEND``; with ``redact``, the text is first redacted with the note's end before it
    (:func:`_redacted_after`), so a secret the two make together is written masked. The appended
    text's (first, last) line, whether the note's end masked something in it, and the stops
    (signal numbers) held from the first byte written to the end, for the caller to deliver.

    Refused, with nothing written: a name that is not a regular file (looked at before it is
    opened: opening a socket fails, a device may act on it), a note with other hard links (a link
    to a file outside the workspace is that file: ``O_NOFOLLOW`` stops only symlinks) and a note
    that is not UTF-8 text (:func:`_text_lines`). ``rel`` names the note in the messages."""
    with contextlib.suppress(FileNotFoundError):
        mode = os.stat(name, dir_fd=dfd, follow_symlinks=False).st_mode
        if not (stat.S_ISREG(mode) or stat.S_ISLNK(mode) or stat.S_ISDIR(mode)):  # those: ELOOP, EISDIR below
            raise PathError(f"refusing to write {rel}: not a regular file")
    fd = os.open(name, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                 0o644, dir_fd=dfd)
    held: list[int] = []
    hold = contextlib.ExitStack()
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise PathError(f"refusing to write {rel}: not a regular file")
        if st.st_nlink > 1:
            raise PathError(f"refusing to write {rel}: the note has other hard links; memory-core writes only to a"
                            " note no other path shares")
        size = st.st_size
        lines = _text_lines(fd, size, rel)
        tail = os.pread(fd, 2, max(0, size - 2)) if size else b""
        sep = b"" if not tail or tail.endswith(b"\n\n") or tail == b"\n" else b"\n" if tail.endswith(b"\n") \
            else b"\n\n"
        joined = False
        if redact is not None and size:
            masked = _redacted_after(fd, size, sep, text, redact)
            joined, text = masked != text, masked
        data = sep + text.encode("utf-8", "surrogateescape") + b"\n"
        written = 0
        # from the first byte on the note is written: a stop (Ctrl-C, SIGTERM) waits until its
        # lines are counted and it is synced, and the caller raises it with what was written
        # (before: a stop there said "left as it was", and a retry wrote the note twice)
        held = hold.enter_context(stops_held(redeliver=False))
        try:
            while written < len(data):
                written += os.write(fd, data[written:])
        except OSError:
            # take a partial append back (disk full) unless another writer wrote after it
            end_now = os.lseek(fd, 0, os.SEEK_CUR)
            if written and os.fstat(fd).st_size == end_now:
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, end_now - written)
            raise
        end_off = os.lseek(fd, 0, os.SEEK_CUR)  # O_APPEND: the end of this write
        start_off = end_off - len(data)
        os.fsync(fd)
        # the lines before this write: the note's as read, and what another writer appended since
        before = (lines + _count_newlines(fd, size, start_off) if start_off >= size
                  else _count_newlines(fd, 0, start_off)) + sep.count(b"\n")
        with contextlib.suppress(OSError):
            os.fsync(dfd)
        last = next((ln for ln in reversed(text.split("\n")) if ln.strip()), "")
        written_to = _Written(st.st_dev, st.st_ino, last.strip()[-32:])
    finally:
        os.close(fd)
        hold.close()  # the handlers back; what came meanwhile is in ``held``
    return before + 1, before + text.count("\n") + 1, joined, written_to, held


def _redacted_after(fd: int, size: int, sep: bytes, text: str, redact: Callable[[str], str]) -> str:
    """``text`` (already redacted alone) redacted together with the note's last :data:`REDACT_CONTEXT_BYTES` (from a whole
    line) before it: the new text's lines as the joined text's redaction has them. The note's own
    lines are never changed (they are not written again). The new text's first line, masked only
    because of what the note ends with (``password:``, ``the wifi password is``), is kept as
    written when it is a sentence, not one token (a separate write's value is one token; "the
    turkey:" is no secret's name), unless the note ends inside a PEM block. ``text`` itself when
    the redaction does not keep the line count (not ours to split)."""
    from memory_core.sources.redact import ends_in_open_private_key

    ctx = max(0, size - REDACT_CONTEXT_BYTES)
    blob = os.pread(fd, size - ctx, ctx)
    if ctx:  # start at a whole line
        nl = blob.find(b"\n")
        if nl < 0:
            return text
        blob = blob[nl + 1:]
    head = blob.decode("utf-8", "surrogateescape") + sep.decode()
    whole = head + text
    got = redact(whole)
    if got == whole:
        return text
    k = head.count("\n")  # the new text's first line in ``whole``
    lines, red = whole.split("\n"), got.split("\n")
    if len(red) != len(lines):
        return text
    # a masked line is shown as masked: what it shares with its redaction at the start and the
    # end is kept, the rest is ``*`` (a PEM body's lines redact to nothing)
    new = [ln if r == ln else _starred(ln, r) for ln, r in zip(lines[k:], red[k:], strict=True)]
    first = next((i for i, ln in enumerate(lines[k:]) if ln.strip()), None)
    # ``text`` is already redacted alone (append_note): a change to its first line is the note's end's doing
    if first is not None and new[first] != lines[k + first] and len(_unquoted(lines[k + first]).split()) > 1 \
            and not ends_in_open_private_key(head):
        new[first] = lines[k + first]  # "...the turkey:" then a sentence: prose, not a value
    return "\n".join(new)


def _starred(line: str, red: str) -> str:
    """``line`` with the part ``red`` (its redaction) changed replaced by ``*``: what the two share
    at the start and the end is kept."""
    p = 0
    while p < min(len(line), len(red)) and line[p] == red[p]:
        p += 1
    s = 0
    while s < min(len(line), len(red)) - p and line[-1 - s] == red[-1 - s]:
        s += 1
    return line[:p] + "*" * len(line[p:len(line) - s]) + line[len(line) - s:]


_LIST_MARKER = re.compile(r"^(?:[-*+]|\d{1,3}[.)])\s+")


def _unquoted(line: str) -> str:
    """A value line's value: without its indent, list marker (``- ``, ``* ``, ``1. ``), trailing
    comma and matching quotes (a quoted value with spaces is one value)."""
    body = _LIST_MARKER.sub("", line.strip()).removesuffix(",").rstrip()
    return "x" if len(body) >= 2 and body[0] in "\"'" and body[-1] == body[0] else body


def _indexed(settings: Settings, rel: str, end_line: int, tail: str | None = None) -> bool:
    """Whether the live index holds ``rel`` with the text just written (its lines up to
    ``end_line``). Judged by this write's own end, not the file's size now: with several writers
    appending to one note, the file already holds the later writers' text, and an index that
    holds this one's was said not to (11 of 30 concurrent writes answered ``indexed: false``, and
    an agent told so may write the note twice)."""
    # qmd's collections are built beside the builtin index, from the same files: the builtin index
    # holding the text is what a failed or skipped qmd update leaves searchable (its fallback);
    # whether qmd took it too is the run's to say (_qmd_failure). Before, any qmd run said indexed.
    from memory_core.storage.store import connect_reader

    try:
        # lines as the chunker and the citations count them, split on \n only: in text mode a lone
        # \r (a progress bar's output pasted in) ended a line too, the line read was another one,
        # and a write the index held was said not to be
        # the text as written (``tail``), not what the note's line holds now: a note replaced
        # under the write held other text there, and a citation past its end was said indexed
        with open(settings.workspace_dir / rel, "rb") as fh:
            raw = next((line for n, line in enumerate(fh, 1) if n == end_line), b"")
        if end_line == 1:
            raw = raw.removeprefix(codecs.BOM_UTF8)  # not in the indexed text (stages._read_markdown)
        last = raw.decode("utf-8", "replace").strip()
        if tail is not None and tail not in last:
            return False  # the note's line is not the text written
        conn = connect_reader(settings.index_file)
        try:
            texts = [r[0] for r in conn.execute("SELECT text FROM chunks WHERE path = ? AND start_line <= ?"
                                                " AND end_line >= ?", (rel, end_line, end_line))]
        finally:
            conn.close()
    except Exception:  # no index, or not readable: not indexed
        return False
    # a chunk of the note that ends at or after this write's last line and holds that line's end
    # (a line longer than a chunk is split: its last piece holds its end)
    end = tail if tail is not None else last[-32:]
    return bool(texts) and (not end or any(end in t for t in texts))


def _stopped_with(exc: BaseException, res: WriteResult, notes: list[str], settings: Settings,
                  after: str | None = None) -> None:
    """A stop after the note was written goes on with the write's result (``exc.write_result``),
    so the caller can say the note was written: a stopped ``memory-core write`` printed only
    "interrupted" (a retry wrote the note twice) or, for a SIGTERM, exited 0 (the twenty-third
    session's audit, F6). Indexed when the reindex the stop ended had published (its
    ``run_summary.swapped``) and the index holds the note: before, such a write said "not indexed"
    beside the stop's own "after the new index was published" (the thirty-fifth session's audit).
    ``after``: the stop came once the reindex had ended (``"indexed"``) or with none asked for
    (``"written"``); the stop then carries ``command_done``, so the command does not say the live
    index was left as it was."""
    summary = getattr(exc, "run_summary", None)
    if summary is not None and summary.swapped and _indexed(settings, res.path, res.end_line):
        exc.write_result = replace(res, indexed=True, note="; ".join(  # type: ignore[attr-defined]
            [*notes, "the reindex was stopped after it published the note"]))
        return
    if after is not None:  # the stop came after the reindex ended (or with none asked for)
        indexed = after == "indexed" and _indexed(settings, res.path, res.end_line)
        exc.write_result = replace(res, indexed=indexed, note="; ".join(notes))  # type: ignore[attr-defined]
        exc.command_done = f"writing {res.citation}" + (  # type: ignore[attr-defined]
            " (the note is written and indexed)" if indexed else " (the note is written)")
        return
    exc.write_result = replace(res, note="; ".join(  # type: ignore[attr-defined]
        [*notes, "written, but not indexed: the reindex was stopped; the next reindex picks it up"]))


def write_memory(settings: Settings, text: str, path: str | None = None, *, index: bool = True,
                 runner: Callable[[], Any] | None = None, today: _dt.date | None = None) -> WriteResult:
    """:func:`append_note`, then an incremental reindex so the text is searchable at once.

    ``runner`` does the reindex (the MCP server passes its sync manager's, which keeps the
    provider loaded); default one :class:`memory_core.index.indexer.Indexer` run. A reindex that fails,
    finds the index busy or skips the note leaves the note written and says so in ``note``;
    ``indexed`` is true only when the index holds the note as written. A stop of this process
    once the note is written (Ctrl-C; a SIGTERM, without ``runner``), in the reindex or after it,
    is raised with the result as ``write_result`` (:func:`_stopped_with`)."""
    try:
        res = append_note(settings, text, path, today=today)
    except BaseException as exc:  # a stop that came as the note was written: no reindex, and said so
        written = getattr(exc, "write_result", None)
        if written is not None and index and is_stop(exc):
            exc.write_result = replace(written, note="; ".join(  # type: ignore[attr-defined]
                [n for n in (written.note, "written, but not indexed: stopped before the reindex; the next reindex"
                             " picks it up") if n]))
        raise
    try:
        return _index_written(settings, res, index=index, runner=runner)
    except BaseException as exc:
        # a stop as the index is checked, or right after the note was written (before: "interrupted;
        # the live index was left as it was", and no word of the note, which a retry wrote twice)
        if getattr(exc, "write_result", None) is None and is_stop(exc):
            _stopped_with(exc, res, [res.note] if res.note else [], settings,
                          after="indexed" if index else "written")
        raise


WRITE_LOCK_WAIT_S = 10.0
"""How long a write's reindex waits for another run holding the index (at most ``lock.timeout_s``)."""


def _index_written(settings: Settings, res: WriteResult, *, index: bool,
                   runner: Callable[[], Any] | None) -> WriteResult:
    if not index:
        return res
    notes = [res.note] if res.note else []
    try:
        if runner is not None:
            done = runner()
        else:
            from memory_core.index.indexer import Indexer

            # another run holding the index: wait a little (another write's short run ends in a
            # second or two: concurrent writers all get indexed), not lock.timeout_s (600 s) behind a
            # long reindex: then the note is written and the answer says the next run indexes it
            waited = settings.model_copy(update={"lock": settings.lock.model_copy(
                update={"timeout_s": min(settings.lock.timeout_s, WRITE_LOCK_WAIT_S)})})
            with Indexer(waited) as indexer:
                done = indexer.run()
    except MemoryCoreError as exc:
        if isinstance(exc, RunCancelled) and runner is None:  # a stop of this process: it ends with it
            _stopped_with(exc, res, notes, settings)
            raise
        notes.append(f"written, but not indexed yet ({exc}); the next reindex picks it up")
        return replace(res, note="; ".join(notes))
    except BaseException as exc:  # Ctrl-C (or a SIGTERM a command turned into a stop) in the reindex
        _stopped_with(exc, res, notes, settings)
        raise
    if not _indexed(settings, res.path, res.end_line, res.written_tail):
        notes.append("written, but the index does not hold it (the indexer skipped the note, or another run was"
                     " busy; `memory-core index` says which in its warnings)")
        return replace(res, note="; ".join(notes))
    qmd_failed = _qmd_failure(done)
    if qmd_failed:  # the builtin index holds it; qmd's searches, which answer first, do not
        notes.append(f"written; the builtin index holds it, but {qmd_failed}: qmd's searches miss it until a run"
                     " brings qmd up to date")
        return replace(res, note="; ".join(notes))
    return replace(res, indexed=True, note="; ".join(notes))


def _qmd_failure(done: object) -> str:
    """What failed of a run's qmd steps (``RunSummary.qmd_failed``; ``done``: the summary, or a
    scheduler's RunRecord of one), else ""."""
    summary = getattr(done, "summary", done)
    return summary.qmd_failed if isinstance(summary, RunSummary) else ""
