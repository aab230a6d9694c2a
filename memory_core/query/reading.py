"""Reading an indexed file's lines (``memory_get``, ``memory-core get``): :func:`read_file`; an
indexed transcript's timestamps, opened the same way (:func:`indexed_transcript_dates`).

Which paths may be read is decided here and in :mod:`memory_core.sources.discovery` /
:mod:`memory_core.sources.safeio` (the files the index holds, opened with no symlink in any component).
"""

from __future__ import annotations

import os
import re
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from memory_core.config import Settings
from memory_core.errors import PathError
from memory_core.query.dates import transcript_dates
from memory_core.query.results import FileText
from memory_core.sources.discovery import parse_citation, resolve_indexed_path
from memory_core.storage.indexmeta import IndexRecord
from memory_core.storage.textsearch import well_formed

MAX_GET_LINES = 2000
MAX_GET_CHARS = 100_000
"""The most characters one ``get`` / ``memory_get`` returns: whole lines up to it (a note of one
877 KB line came back whole into an agent's context); past it the text ends, ``lines`` counts
the lines returned and ``note`` says where to go on from. A first line longer than it alone is
cut (the note says so)."""
_DAILY_RE = re.compile(r"^memory/(\d{4})-(\d{2})-(\d{2})\.md$")


def _is_daily(path: str) -> bool:
    """A daily note's path, of a day that exists (``memory/9999-99-99.md`` is not one)."""
    import datetime as dt

    m = _DAILY_RE.match(path)
    if m is None:
        return False
    try:
        dt.date(int(m.group(1)), int(m.group(2)), int(m.group(3)))
    except ValueError:
        return False
    return True


def _shown(path: str, most: int = 200) -> str:
    """``path`` as an error shows it: at most ``most`` characters (a 100,000-character path was
    echoed whole, into an agent's context)."""
    return path if len(path) <= most else f"{path[:most // 2]}...{path[-most // 2:]} ({len(path):,} characters)"


def indexed_transcript_dates(settings: Settings, path: str) -> tuple[str | None, list[tuple[int, str]]]:
    """:func:`transcript_dates` of the indexed transcript ``path`` (``sessions/<name>.jsonl``),
    opened as ``get`` opens it (:func:`memory_core.sources.safeio.open_indexed`: no symlink in any
    component, the sessions folder included); PathError when it may not be read."""
    from memory_core.sources.safeio import open_indexed

    fd = open_indexed(settings, path, source="sessions")
    try:
        return transcript_dates(fd, name=f"{settings.sessions_dir}\0{path}")
    finally:
        os.close(fd)


_SHOWN: OrderedDict[tuple[str, int, int, int, int], tuple[int, dict[int, str]]] = OrderedDict()
_SHOWN_LOCK = threading.Lock()
_shown_chars = 0  # characters held in _SHOWN
SHOWN_CACHE_CHARS = 32 * 1024 * 1024
"""The most characters of transcripts' display messages kept between searches (newest first)."""


def _keep_shown(key: tuple[str, int, int, int, int], got: dict[int, str]) -> None:
    """Keep a file's display messages, dropping the least recently shown past SHOWN_CACHE_CHARS."""
    global _shown_chars
    size = sum(len(v) for v in got.values())
    if size > SHOWN_CACHE_CHARS:
        return
    with _SHOWN_LOCK:
        if key in _SHOWN:
            return
        _SHOWN[key] = (size, got)
        _shown_chars += size
        while _shown_chars > SHOWN_CACHE_CHARS:
            _, (old, _msgs) = _SHOWN.popitem(last=False)
            _shown_chars -= old


def transcript_messages(settings: Settings) -> Callable[[str, int, int], list[str] | None]:
    """:data:`memory_core.query.rank.Messages`: the messages of an indexed transcript's JSONL lines
    as a person reads them (each with its own line breaks, masked as indexed), the file opened as
    ``get`` opens it. A file's messages are read once and kept while it is unchanged (its device,
    inode, size and mtime; at most :data:`SHOWN_CACHE_CHARS` characters in all), so a search that
    shows six results of a long transcript does not parse it six times. None when it cannot be
    read: the snippet then shows the chunk's indexed text."""
    from memory_core.errors import MemoryCoreError
    from memory_core.sources.safeio import open_indexed
    from memory_core.sources.sessions import session_messages_by_line

    def messages(path: str, start: int, end: int) -> list[str] | None:
        try:
            fd = open_indexed(settings, path, source="sessions")
        except (MemoryCoreError, OSError, ValueError):
            return None
        try:
            st = os.fstat(fd)
        except OSError:
            os.close(fd)
            return None
        key = (str(settings.sessions_dir) + "\0" + path, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
        with _SHOWN_LOCK:
            kept = _SHOWN.get(key)
            if kept is not None:
                _SHOWN.move_to_end(key)
        if kept is not None:
            os.close(fd)
            got = kept[1]
        else:
            try:
                got = session_messages_by_line(fd, 1 << 62)  # the whole file; closes fd
            except (OSError, ValueError):
                return None
            _keep_shown(key, got)
        out = [got[n] for n in range(start, end + 1) if n in got]
        return out or None

    return messages


def read_file(settings: Settings, lookup: Callable[[str], tuple[Any, IndexRecord | None]], path: str,
              from_line: int | None = None, lines: int | None = None) -> FileText:
    """Lines of an indexed source file (:class:`FileText`).

    ``path`` may be a citation (``path#L10-L20``: those lines unless ``from_line`` / ``lines``
    are given) or start with ``./``. Transcripts come back as readable, redacted
    ``User: ...`` / ``Assistant: ...`` lines for the cited JSONL lines. A daily note
    (``memory/YYYY-MM-DD.md``) that does not exist yet reads as empty text, as in OpenClaw.
    Any other path outside the index is refused. ``lookup(path)``: the path's ``(path, source,
    size, mtime)`` row of the index's ``files`` table (None when not indexed) and what the index
    recorded. A note whose size or time is no longer what the index recorded (a transcript that
    is shorter than it was) is read as it is now, with a ``note`` saying so: the lines a search
    cited may hold other text until the next run.
    """
    if not isinstance(path, str) or not path.strip():
        raise PathError("path is empty")
    cite = parse_citation(well_formed(path))
    path = cite.path
    from_line = cite.start_line if from_line is None else from_line
    lines = cite.lines if lines is None and from_line == cite.start_line else lines
    row, record = lookup(path)  # the files row and the record of the index read now
    if from_line is not None and int(from_line) < 1 and lines is not None:
        # lines before the first (``#L0-L2``) are none: the range still ends where it was cited
        lines = max(0, int(lines) - (1 - int(from_line)))
    start = max(1, int(from_line or 1))
    where = record.reader_settings(settings) if record else settings  # the index's own workspace
    if row is None:
        if _is_daily(path) and not (where.workspace_dir / path).exists():
            return FileText(path=path, source="memory", start_line=start, lines=0, text="")
        raise PathError(f"not an indexed file: {_shown(path)}")
    source = row[1]
    # the file indexed under this path, found by the source its row records (a note in an extra
    # path folder named ``sessions`` is no transcript), not by the path's first component
    resolve_indexed_path(where, path, source=source)
    count = MAX_GET_LINES if lines is None else max(0, min(int(lines), MAX_GET_LINES))
    end = start + count - 1
    from memory_core.sources.safeio import open_indexed, read_lines
    from memory_core.sources.sessions import session_text_for_range

    # a note's lines are masked as the index masked them: the whole note from its first line (a
    # secret labelled on the line before the range, a private key begun above it, were shown in
    # clear when only the lines asked for were redacted)
    masked = source != "sessions" and ((record.redact if record else None) or settings.redact) == "all"
    # an fd: no symlink in any component, regular files only; each reader closes it, whatever it reads
    real = open_indexed(where, path, source=source)
    changed = _changed_since_indexed(real, row, source)
    out: list[str] = []
    above: list[str] = []  # the note's lines before the range, read only to mask the range as the index did
    try:
        if source == "sessions":  # each day's first message with its time, as in a snippet
            out = session_text_for_range(real, start, end, stamped=True)
        elif masked and start > 1:
            above = read_lines(real, 1, end)  # split on "\n" only, as the chunker numbers lines
            above, out = above[:start - 1], above[start - 1:]
        else:
            out = read_lines(real, start, end)
    except FileNotFoundError:
        raise PathError(f"{_shown(path)} is indexed but no longer exists") from None
    except OSError as exc:
        raise PathError(f"cannot read {_shown(path)}: {exc.strerror}") from None
    if source != "sessions":  # a note saved on Windows: its lines without the "\r" of "\r\n"
        above = [line[:-1] if line.endswith("\r") else line for line in above]
        out = [line[:-1] if line.endswith("\r") else line for line in out]
    note = ""
    if len(out) < end - start + 1:  # fewer lines than asked: the file's end, or lines without messages
        total = line_total(where, path, source)
        if source != "sessions" and not out and total is not None and start <= total:
            # the chunker numbers a note's lines as text.split("\n"): the empty piece after a final
            # newline is a line a citation of an index built before the nineteenth session may end on
            # (chunking.end_at_last_line; read_lines never returns it): asked for alone, it reads as
            # the empty line it is
            out = [""]
        elif not out and total is not None and start <= total:
            note = (f"lines {start}-{min(end, total)} of {path} hold no messages (malformed lines or records that are"
                    f" not messages); the file has {total} lines")
        elif not out and start > 1:
            note = f"line {start} is past the end of {path}" + (f" ({total} lines)" if total is not None else "")
    if masked and out:  # transcripts come back redacted by session_text_for_range
        from memory_core.sources.redact import redact_lines

        # with the lines above (PEM blocks across lines, a label on the line before): the range's own
        out = redact_lines("\n".join([*above, *out])).split("\n")[len(above):]
    cut = _cap(out, start)
    if cut:
        note = f"{note}; {cut}" if note else cut
    if changed:
        note = f"{note}; {changed}" if note else changed
    return FileText(path=path, source=source, start_line=start, lines=len(out), text="\n".join(out), note=note or None)


def _cap(out: list[str], start: int) -> str:
    """Keep the whole lines of ``out`` (from line ``start``) that fit in :data:`MAX_GET_CHARS`
    (in place); what was cut, or ""."""
    total = 0
    for i, line in enumerate(out):
        total += len(line) + (1 if i else 0)
        if total <= MAX_GET_CHARS:
            continue
        if i == 0:
            out[0] = line[:MAX_GET_CHARS]
            del out[1:]
            return (f"line {start} is {len(line):,} characters long: its first {MAX_GET_CHARS:,} are returned"
                    f" (a get returns at most {MAX_GET_CHARS:,} characters)")
        del out[i:]
        return (f"cut at {MAX_GET_CHARS:,} characters after line {start + i - 1}: ask again from line {start + i}"
                " for the rest")
    return ""


def _changed_since_indexed(fd: int, row: Any, source: str) -> str:
    """Why the file open at ``fd`` may no longer hold what its index row says (its size or time
    differ for a note; a transcript grew only by appends, which keep every cited line, unless it
    is now shorter), or ""."""
    if len(row) < 4 or row[2] is None or row[3] is None:
        return ""
    try:
        st = os.fstat(fd)
    except OSError:
        return ""
    size, mtime_ms = int(row[2]), int(row[3])
    if source == "sessions":
        shrunk = st.st_size < size
        return ("the transcript is shorter than when it was indexed: these lines are read from it as it is now and"
                " may not be the ones a search cited; the next run reindexes it") if shrunk else ""
    if st.st_size == size and st.st_mtime_ns // 1_000_000 == mtime_ms:
        return ""
    return ("the file changed since it was indexed: these lines are read from it as it is now and may not be the"
            " ones a search cited; the next run reindexes it")


def line_total(settings: Settings, path: str, source: str) -> int | None:
    """How many lines the indexed file ``path`` has, numbered as its citations number them: a
    note's as the chunker splits it (``text.split("\n")``: the empty piece after a final newline
    counts), a transcript's JSONL lines (a last line without a newline counts). None when it
    cannot be opened as an indexed file."""
    from memory_core.errors import MemoryCoreError
    from memory_core.sources.safeio import open_indexed

    try:
        fd = open_indexed(settings, path, source=source)
    except MemoryCoreError:
        return None
    newlines, last = 0, b""
    with os.fdopen(fd, "rb") as fh:
        while block := fh.read(1 << 20):
            newlines += block.count(b"\n")
            last = block[-1:]
    if source == "sessions":
        return newlines + (1 if last not in (b"", b"\n") else 0)
    return newlines + 1
