"""When a chunk was written, and which day a query names.

Chunk dates (``chunk_date``), in order:

* a daily note ``memory/YYYY-MM-DD.md``: the date in its file name;
* a transcript chunk: the timestamp of the first message in its JSONL lines (the record's
  ``timestamp``, else its ``message.timestamp``), else the session header's timestamp;
* any other file: its modification time (local date).

Transcript timestamps are read from the transcript itself when a search needs them (opened as
``get`` opens it: :func:`memory_core.query.reading.indexed_transcript_dates`) and kept per
file (path, size, mtime), so a chunk's date always matches the lines it cites; the index stores
only line numbers.

Query dates (``query_date_range``): an ISO date (``2026-09-04``), a day and month in either order
with an optional year (``on 4 December``, ``Dec 4th``, ``December 4, 2026``, ``5月4号``,
``2026年5月4日``; without a year, the
latest such day not after today), ``today``, ``yesterday``, ``the day before yesterday``,
``N days ago``, ``last week`` (the 7 days before today), ``this week`` (Monday to today), ``last
month`` and weekday names (``on Monday``, ``last Friday``: the latest such day before today). The
range is inclusive, in local dates.

What search does with them (all decided here, called by the query modules): the chunks written on a
named day that neither retrieval side found (``dated_chunk_rows``, from
``memory_core.query.retrieval``), each candidate's date (``hit_date``), the named day's lift after fusion
(``lift_named_days``, ``DATE_MATCH_BONUS``, from ``memory_core.query.rank``) and a transcript snippet's
``[YYYY-MM-DD HH:MM UTC]`` stamp (``said_at``). Which paths are dated and which are evergreen
(``date_from_path``, ``is_evergreen``) is decided here too; temporal decay, in
``memory_core.query.ranking``, reads them.
"""

from __future__ import annotations

import json
import os
import re
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import Any

from memory_core.errors import PathError
from memory_core.sources.sessions import DEFAULT_MAX_LINE_BYTES, _iter_raw_lines

__all__ = ["DATE_MATCH_BONUS", "DateRange", "chunk_date", "date_from_path", "dated_chunk_rows", "hit_date",
           "is_evergreen", "lift_named_days", "query_date_range", "said_at",
           "transcript_dates"]

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


# -- paths ---------------------------------------------------------------------------------------
_DATED_PATH_RE = re.compile(r"(?:^|/)memory/(\d{4})-(\d{2})-(\d{2})\.md$")


def _normalize_path(path: str) -> str:
    p = path.replace("\\", "/")
    return p[2:] if p.startswith("./") else p


def date_from_path(path: str) -> date | None:
    """Date of a dated memory file (``.../memory/YYYY-MM-DD.md``), ``None`` if undated or invalid."""
    m = _DATED_PATH_RE.search(_normalize_path(path))
    if m is None:
        return None
    try:
        return date(int(m.group(1)), int(m.group(2)), int(m.group(3)))
    except ValueError:
        return None


def is_evergreen(path: str) -> bool:
    """``MEMORY.md`` / ``memory.md`` at the root, or an undated file under ``memory/``: no decay."""
    p = _normalize_path(path)
    if p in ("MEMORY.md", "memory.md"):
        return True
    return p.startswith("memory/") and date_from_path(p) is None


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


Stamps = tuple[str | None, list[tuple[int, str]]]
"""A transcript's :func:`transcript_dates`: (its header's timestamp, [(JSONL line, timestamp), ...])."""


def hit_date(path: str, source: str, start_line: int, end_line: int, mtime_ms: int | None,
             stamps_of: Callable[[str], Stamps]) -> str | None:
    """A search candidate's :func:`chunk_date`; ``stamps_of(path)``: an indexed transcript's
    timestamps, read as ``get`` opens it (:func:`memory_core.query.reading.indexed_transcript_dates`;
    PathError when it may not be read)."""
    stamps = None
    if source == "sessions":
        try:
            stamps = stamps_of(path)  # opened as `get` opens it
        except PathError:
            stamps = None
    return chunk_date(path, source, start_line, end_line, mtime_ms, dates=stamps)


# -- search: a query naming a day ------------------------------------------------------------------
DATE_MATCH_BONUS = 0.5
"""A chunk written on the day a query names gets ``relevance + (1 - relevance) * 0.5`` (at least
0.5); any other chunk is capped at 0.5, so the day's own notes rank first and another day's note
on the topic keeps its place after them (the cap lowers no relevance below ``min_score``)."""
MAX_DATED_CANDIDATES = 200


def dated_chunk_rows(conn: Any, dates: DateRange, sources: tuple[str, ...] | None, seen: set[int],
                     stamps_of: Callable[[str], Stamps]) -> list[tuple[Any, ...]]:
    """Chunks written in ``dates`` that neither side found: the day's daily notes, transcript
    chunks with a message of that day, other files modified that day (at most 200). Rows as the
    retrieval sides select them (``rid, 0, id, path, source, start_line, end_line, text, mtime``);
    ``seen`` (the row ids already found) gets theirs; ``stamps_of``: as :func:`hit_date`'s."""
    days = min(62, (dates.end - dates.start).days + 1)
    daily = [f"memory/{(dates.start + timedelta(days=i)).isoformat()}.md" for i in range(days)]
    start_ms = int(datetime.combine(dates.start, datetime.min.time()).astimezone().timestamp() * 1000)
    end_ms = int(datetime.combine(dates.end + timedelta(days=1), datetime.min.time()).astimezone().timestamp() * 1000)
    sql = ("SELECT c.rid, 0, c.id, c.path, c.source, c.start_line, c.end_line, c.text, fl.mtime FROM chunks c"
           " JOIN files fl ON fl.path = c.path WHERE")
    # in path and line order (equal scores keep it), not the table's: after incremental runs that
    # is another order, and past the cap another set, than after a full build of the same files.
    # fl.path: files are walked in their path index and the walk stops at the cap (~90 ms with
    # every file of 1M chunks on that day, as before); c.path made SQLite sort them all (9.8 s).
    by_place = " ORDER BY fl.path, c.start_line"
    rows = list(conn.execute(sql + f" c.path IN ({','.join('?' * len(daily))})" + by_place, daily))
    rows += conn.execute(sql + " c.source != 'sessions' AND fl.mtime >= ? AND fl.mtime < ?"
                         " AND c.path NOT LIKE 'memory/____-__-__.md'" + by_place + " LIMIT ?",
                         (start_ms, end_ms, MAX_DATED_CANDIDATES)).fetchall()
    # a transcript written on that day was last modified on or after it
    sessions = [p for (p,) in conn.execute(
        "SELECT path FROM files WHERE source = 'sessions' AND mtime >= ? ORDER BY mtime DESC, path LIMIT 64",
        (start_ms,))]
    for p in sessions:
        try:
            header, stamps = stamps_of(p)
        except PathError:
            continue
        lines = [n for n, ts in stamps if ts[:10] in dates] or ([] if not (header and header[:10] in dates) else [0])
        if not lines:
            continue
        for r in conn.execute(sql + " c.path = ?" + by_place, (p,)):
            if lines == [0] or any(r[5] <= n <= r[6] for n in lines):
                rows.append(r)
    out = []
    for r in rows:
        if r[0] in seen or (sources and r[4] not in sources):
            continue
        seen.add(r[0])
        out.append(r)
        if len(out) >= MAX_DATED_CANDIDATES:
            break
    return out


def lift_named_days(hits: list[Any], dates: DateRange, min_score: float) -> None:
    """The query names a day: what was written that day comes first. Fused hits (their ``score`` the
    relevance), changed in place and re-sorted (relevance, then BM25, best first)."""
    for h in hits:
        if h.date is not None and h.date in dates:
            h.date_lifted = h.score < min_score  # found for its day, not its words
            h.score = h.relevance = h.score + (1 - h.score) * DATE_MATCH_BONUS
        else:  # another day's note on the topic stays, below the named day's own
            h.score = h.relevance = min(h.score, DATE_MATCH_BONUS)
    hits.sort(key=lambda h: (h.score, h.bm25), reverse=True)


def said_at(source: str, when: str | None) -> str:
    """A transcript snippet's prefix saying when it was said (``[2026-11-02 15:20 UTC] ``); ""
    for any other chunk or an undated one."""
    if source != "sessions" or not when:
        return ""
    return f"[{when.replace('T', ' ')}{' UTC' if 'T' in when else ''}] "
