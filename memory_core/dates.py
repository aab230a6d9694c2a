"""When a chunk was written, and which day a query names.

Chunk dates (``chunk_date``), in order:

* a daily note ``memory/YYYY-MM-DD.md``: the date in its file name;
* a transcript chunk: the timestamp of the first message in its JSONL lines (the record's
  ``timestamp``, else its ``message.timestamp``), else the session header's timestamp;
* any other file: its modification time (local date).

Transcript timestamps are read from the transcript itself when a search needs them and kept per
file (path, size, mtime), so a chunk's date always matches the lines it cites; the index stores
only line numbers.

Query dates (``query_date_range``): an ISO date (``2026-09-04``), a day and month in either order
with an optional year (``on 4 December``, ``Dec 4th``, ``December 4, 2026``, ``5月4号``,
``2026年5月4日``; without a year, the
latest such day not after today), ``today``, ``yesterday``, ``the day before yesterday``,
``N days ago``, ``last week`` (the 7 days before today), ``this week`` (Monday to today), ``last
month`` and weekday names (``on Monday``, ``last Friday``: the latest such day before today). The
range is inclusive, in local dates. Search prefers chunks dated in it (see ``memory_core.search``).
"""

from __future__ import annotations

import json
import os
import re
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import TYPE_CHECKING

from memory_core.ranking import date_from_path
from memory_core.sessions import DEFAULT_MAX_LINE_BYTES, _iter_raw_lines

if TYPE_CHECKING:
    from memory_core.config import Settings

__all__ = ["DateRange", "chunk_date", "indexed_transcript_dates", "query_date_range", "transcript_dates"]

_MONTHS = {m: i + 1 for i, m in enumerate(
    ["january", "february", "march", "april", "may", "june", "july", "august", "september", "october",
     "november", "december"])}
_MONTHS.update({m[:3]: i for m, i in list(_MONTHS.items())})
_MONTHS["sept"] = 9
_WEEKDAYS = {d: i for i, d in enumerate(["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"])}
_MONTH_RE = "(" + "|".join(sorted(_MONTHS, key=len, reverse=True)) + r")\.?"
_DAY_RE = r"(\d{1,2})(?:st|nd|rd|th)?"
_ISO = re.compile(r"(?<!\d)(\d{4})-(\d{2})-(\d{2})(?!\d)")
_DAY_MONTH = re.compile(rf"\b{_DAY_RE}\s+(?:of\s+)?{_MONTH_RE}(?:,?\s+(\d{{4}}))?\b", re.IGNORECASE)
_MONTH_DAY = re.compile(rf"\b{_MONTH_RE}\s+{_DAY_RE}\b(?:,?\s+(\d{{4}}))?", re.IGNORECASE)
_CJK_DAY = re.compile(r"(?:(\d{4})\s*年\s*)?(\d{1,2})\s*月\s*(\d{1,2})\s*[日号號]")
_AGO = re.compile(r"\b(\d{1,3})\s+days?\s+ago\b", re.IGNORECASE)
_WEEKDAY = re.compile(r"\b(?:on|last|this|past)\s+(" + "|".join(_WEEKDAYS) + r")\b", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class DateRange:
    start: date
    end: date  # inclusive
    phrase: str = field(default="", compare=False)  # the words of the query that name the day(s)

    def strip(self, query: str) -> str:
        """The query without the words naming the day (they are matched by date, not as text)."""
        if not self.phrase:
            return query
        i = query.lower().find(self.phrase)
        return query if i < 0 else (query[:i] + " " + query[i + len(self.phrase):]).strip()

    def __contains__(self, d: object) -> bool:
        if isinstance(d, str):
            try:
                d = date.fromisoformat(d[:10])
            except ValueError:
                return False
        return isinstance(d, date) and self.start <= d <= self.end


def _latest(month: int, day: int, year: int | None, today: date) -> date | None:
    try:
        if year is not None:
            return date(year, month, day)
        d = date(today.year, month, day)
        return d if d <= today else date(today.year - 1, month, day)
    except ValueError:
        return None


def query_date_range(query: str, today: date | None = None) -> DateRange | None:
    """The day (or days) a query names, or ``None`` (see the module docstring)."""
    found = _find(query.lower(), today or datetime.now().astimezone().date())
    if found is None:
        return None
    (start, end), phrase = found
    if not (_FIRST_DAY <= start <= end <= _LAST_DAY):
        return None  # "9999-12-31", "1 January 0001": no day before or after it to compute with
    return DateRange(start, end, phrase)


# a range's neighbours (the day after its end, local midnight as a timestamp) must exist
_FIRST_DAY, _LAST_DAY = date(1, 1, 2), date(9999, 12, 30)


def _find(q: str, today: date) -> tuple[tuple[date, date], str] | None:
    d: date | None
    m = _ISO.search(q)
    if m:
        try:
            d = date(int(m.group(1)), int(m.group(2)), int(m.group(3)))
            return (d, d), m.group(0)
        except ValueError:
            pass
    m = _CJK_DAY.search(q)  # 5月4号, 4月27日, 2026年5月4日
    if m:
        d = _latest(int(m.group(2)), int(m.group(3)), int(m.group(1)) if m.group(1) else None, today)
        if d is not None:
            return (d, d), m.group(0)
    for rx, day_first in ((_DAY_MONTH, True), (_MONTH_DAY, False)):
        m = rx.search(q)
        if m:
            day_s, mon_s = (m.group(1), m.group(2)) if day_first else (m.group(2), m.group(1))
            d = _latest(_MONTHS[mon_s.lower().rstrip(".")], int(day_s), int(m.group(3)) if m.group(3) else None, today)
            if d is not None:
                return (d, d), m.group(0)
    one_day = today - timedelta(days=1)
    for pattern, start, end in (
        (r"\bthe\s+day\s+before\s+yesterday\b|\bday\s+before\s+yesterday\b", today - timedelta(days=2),
         today - timedelta(days=2)),
        (r"\byesterday\b", one_day, one_day),
        (r"\btoday\b", today, today),
        (r"\b(?:last|past|previous)\s+week\b", today - timedelta(days=7), one_day),
        (r"\bthis\s+week\b", today - timedelta(days=today.weekday()), today),
        (r"\blast\s+month\b", (today.replace(day=1) - timedelta(days=1)).replace(day=1),
         today.replace(day=1) - timedelta(days=1)),
    ):
        m = re.search(pattern, q)
        if m:
            return (start, end), m.group(0)
    m = _AGO.search(q)
    if m:
        d = today - timedelta(days=int(m.group(1)))
        return (d, d), m.group(0)
    m = _WEEKDAY.search(q)
    if m:
        back = (today.weekday() - _WEEKDAYS[m.group(1).lower()]) % 7 or 7
        d = today - timedelta(days=back)
        return (d, d), m.group(0)
    return None


# -- transcripts ---------------------------------------------------------------------------------
_CACHE: OrderedDict[tuple[str, int, int], tuple[str | None, list[tuple[int, str]]]] = OrderedDict()
_CACHE_LOCK = threading.Lock()
_CACHE_FILES = 256


def _stamp(value: object) -> str | None:
    """An ISO timestamp string or epoch number -> ``YYYY-MM-DDTHH:MM`` (UTC), else ``None``."""
    try:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            secs = value / 1000 if value > 1e11 else value
            return datetime.fromtimestamp(secs, UTC).strftime("%Y-%m-%dT%H:%M")
        if isinstance(value, str) and len(value) >= 10:
            dt = datetime.fromisoformat(value.replace("Z", "+00:00"))
            if dt.tzinfo is not None:
                dt = dt.astimezone(UTC)
            return dt.strftime("%Y-%m-%dT%H:%M")
    except (ValueError, OverflowError, OSError):
        return None
    return None


def indexed_transcript_dates(settings: Settings, path: str) -> tuple[str | None, list[tuple[int, str]]]:
    """:func:`transcript_dates` of the indexed transcript ``path`` (``sessions/<name>.jsonl``),
    opened as ``get`` opens it (:func:`memory_core.safeio.open_indexed`: no symlink in any
    component, the sessions folder included); PathError when it may not be read."""
    from memory_core.safeio import open_indexed

    fd = open_indexed(settings, path)
    try:
        return transcript_dates(fd, name=f"{settings.sessions_dir}\0{path}")
    finally:
        os.close(fd)


def transcript_dates(path: str | int, *, name: str | None = None) -> tuple[str | None, list[tuple[int, str]]]:
    """(the session header's timestamp, [(JSONL line, message timestamp), ...]) of a transcript,
    read once per file version. Timestamps are ``YYYY-MM-DDTHH:MM`` in UTC. ``path`` may be an
    open file descriptor (left open; ``name`` keys the cache)."""
    try:
        st = os.fstat(path) if isinstance(path, int) else os.stat(path)
    except OSError:
        return None, []
    key = (name or str(path), st.st_size, st.st_mtime_ns)
    with _CACHE_LOCK:
        hit = _CACHE.get(key)
        if hit is not None:
            _CACHE.move_to_end(key)
            return hit
    header: str | None = None
    stamps: list[tuple[int, str]] = []
    try:
        with open(path, "rb", closefd=not isinstance(path, int)) as f:
            if isinstance(path, int):
                f.seek(0)
            for n, raw in enumerate(_iter_raw_lines(f, DEFAULT_MAX_LINE_BYTES), 1):
                if raw is None or b"timestamp" not in raw:  # None: a line longer than indexing reads
                    continue
                try:
                    rec = json.loads(raw)
                except (ValueError, RecursionError):  # not JSON, or nested deeper than the parser goes
                    continue
                if not isinstance(rec, dict):
                    continue
                msg = rec.get("message")
                ts = _stamp(rec.get("timestamp")) or (_stamp(msg.get("timestamp")) if isinstance(msg, dict) else None)
                if ts is None:
                    continue
                if rec.get("type") == "message":
                    stamps.append((n, ts))
                elif header is None:
                    header = ts
    except OSError:
        return None, []
    value = (header, stamps)
    with _CACHE_LOCK:
        _CACHE[key] = value
        while len(_CACHE) > _CACHE_FILES:
            _CACHE.popitem(last=False)
    return value


def chunk_date(path: str, source: str, start_line: int, end_line: int, mtime_ms: int | None,
               real_path: str | None = None, *,
               dates: tuple[str | None, list[tuple[int, str]]] | None = None) -> str | None:
    """``YYYY-MM-DD`` (daily notes, other files) or ``YYYY-MM-DDTHH:MM`` UTC (transcripts).
    ``dates``: the transcript's :func:`transcript_dates`, when the caller read them."""
    d = date_from_path(path)
    if d is not None:
        return d.isoformat()
    if source == "sessions" and (real_path or dates):
        header, stamps = dates if dates is not None else transcript_dates(real_path or "")
        for line, ts in stamps:
            if start_line <= line <= end_line:
                return ts
        if header:
            return header
    if mtime_ms:
        return datetime.fromtimestamp(mtime_ms / 1000).date().isoformat()
    return None
