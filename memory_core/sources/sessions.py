"""Session transcript (JSONL) parsing, compatible with OpenClaw's ``session-files.ts``.

A transcript is a JSONL file.  Only records with ``type == "message"`` and
``message.role`` in {user, assistant} are kept (and, beyond the reference, a message written as
the record itself: ``{"role": "user", "content": ...}``, the format of OpenAI's and most SDKs'
chat logs); ``message.content`` is either a string
or a list of blocks of which only ``{"type": "text", "text": ...}`` blocks count (also
``input_text`` / ``output_text``, OpenAI's Responses items; each
whitespace-collapsed, the non-empty ones joined with ``" "``).  Every kept message
becomes one content line ``"User: ..."`` / ``"Assistant: ..."`` and ``line_map``
records its 1-based JSONL line number.  ``hash = sha256(content + "\\n" +
",".join(line_map))``, as in the reference, so hashes are interchangeable.

Differences from the reference (deliberate):

* Files are streamed line by line from a binary handle; raw lines are never kept, so
  memory is bounded by the kept content plus the longest line.  Lines longer than
  ``max_line_bytes`` (default 16 MiB) are skipped without being buffered whole; such
  records are in practice tool output, which is never indexed.
* Redaction (``memory_core.sources.redact.redact``) is applied to each message text *before*
  it enters ``content`` (defect #12182: the reference indexed secrets and redacted
  only on read back).  ``session_lines_for_range`` redacts on read back as well.
* Invalid UTF-8 is decoded with ``errors="replace"`` for that line only; lone
  surrogates produced by ``\\uD800``-style escapes become U+FFFD (what Node's UTF-8
  hashing does), and a UTF-8 BOM on the first line is ignored (the reference failed to
  parse that line).
* OpenClaw-specific inbound-metadata / directive-tag stripping is not performed.
* A message's ``name`` (the participant field of OpenAI's chat messages) is its speaker: the line
  reads ``User: Kate: ...``, as a chat export that writes ``Kate: ...`` in the text is indexed, so
  a question naming who said it finds their messages by keyword (the reference drops the field).
  Only such files' content and hash differ from the reference's.

Whitespace collapsing uses JavaScript's ``\\s`` set so content and hashes match.
"""

from __future__ import annotations

import bisect
import collections
import functools
import hashlib
import json
import math
import os
import re
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, BinaryIO, Final, NoReturn, Protocol

# memory_core.sources.redact is imported where text is redacted, not here: the query side reads
# transcripts' raw lines through this module (query/dates.py) and a search of notes redacts nothing.

__all__ = [
    "DEFAULT_MAX_LINE_BYTES",
    "SessionDoc",
    "chunk_stamps",
    "count_lines",
    "display_session_text",
    "session_messages_by_line",
    "extract_session_text",
    "is_message_record",
    "message_of",
    "normalize_session_text",
    "parse_session_file",
    "parse_session_lines",
    "record_stamp",
    "session_hash",
    "session_lines_for_range",
    "session_rel_path",
]

MALFORMED_LINES_NAMED = 5
"""How many malformed lines of a transcript a run's warning names by number."""
#: Lines longer than this (in bytes, without the newline) are skipped unparsed.
DEFAULT_MAX_LINE_BYTES: Final = 16 * 1024 * 1024

_READ_CHUNK: Final = 1024 * 1024

# JavaScript's \s: ECMA-262 WhiteSpace + LineTerminator.
_JS_WS_CHARS: Final = (
    "\t\n\v\f\r \u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008"
    "\u2009\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
)
_JS_WS_RUN: Final = re.compile(f"[{re.escape(_JS_WS_CHARS)}]+")
_SPLIT_MISMATCH: Final = ("\x1c", "\x1d", "\x1e", "\x1f", "\x85", "\ufeff")
_LONE_SURROGATE: Final = re.compile("[\ud800-\udfff]")

_ROLE_LABELS: Final = {"user": "User", "assistant": "Assistant"}

_BOM: Final = "\ufeff"
USER_PREFIX: Final = _ROLE_LABELS["user"] + ": "
LABEL_PREFIXES: Final = tuple(label + ": " for label in _ROLE_LABELS.values())
"""What each message line of a transcript's indexed text starts with ("User: ", "Assistant: ")."""


WINDOW_MESSAGES: Final = 4
"""An exchange of more messages than this is embedded as overlapping windows of this many."""
WINDOW_STEP: Final = 2
"""Messages between the starts of two windows (so neighbouring windows share 2)."""


def chunk_messages(text: str) -> list[str]:
    """A transcript chunk's messages, as they stand in its text (one a line, each starting with
    its role label; a message longer than the chunker's width is cut in fixed-width pieces on
    lines of their own, kept with it here, line breaks and all). A piece before the first label
    stays its own, partial message."""
    out: list[list[str]] = []
    for line in text.split("\n"):
        if out and not line.startswith(LABEL_PREFIXES):
            out[-1].append(line)
        else:
            out.append([line])
    return ["\n".join(m) for m in out]


def message_windows(messages: list[str], size: int = WINDOW_MESSAGES, step: int = WINDOW_STEP) -> list[str]:
    """Overlapping windows of ``size`` consecutive ``messages``, ``step`` apart, the last one
    ending at the last message (so every message is in one); ``[]`` for ``size`` messages or fewer."""
    if len(messages) <= size:
        return []
    starts = list(range(0, len(messages) - size + 1, step))
    if starts[-1] != len(messages) - size:
        starts.append(len(messages) - size)
    return ["\n".join(messages[a:a + size]) for a in starts]


def exchange_parts(text: str) -> list[str]:
    """The parts of a transcript chunk embedded beside it (``chunking.exchange_vectors``;
    :mod:`memory_core.storage.vectors`): its exchanges, each ``User:`` line with the lines after
    it up to the next one (lines before the first form their own), and an exchange of more than
    :data:`WINDOW_MESSAGES` messages as overlapping windows of that many (:func:`message_windows`).
    ``[]`` when that leaves one part: the chunk's own vector already is it.

    One vector for a chunk of six exchanges on six topics matches none of them well; nor does one
    for a group chat's single ``User:`` line followed by twenty replies on as many subjects, or a
    burst of short messages (docs/search.md, "Exchange vectors")."""
    exchanges: list[list[str]] = []
    for m in chunk_messages(text):
        if m.startswith(USER_PREFIX) or not exchanges:
            exchanges.append([])
        exchanges[-1].append(m)
    parts: list[str] = []
    for ex in exchanges:
        parts.extend(message_windows(ex) or ["\n".join(ex)])
    parts = [p for p in parts if p.strip()]
    return parts if len(parts) > 1 else []


# -- when each record was written ---------------------------------------------------------------
def _minute(dt: datetime) -> str:
    """``YYYY-MM-DDTHH:MM`` (the year always 4 digits: ``strftime("%Y")`` writes year 1 as ``1``)."""
    return f"{dt.year:04d}-{dt.month:02d}-{dt.day:02d}T{dt.hour:02d}:{dt.minute:02d}"


PLACEHOLDER_YEAR_MAX: Final = 1970
"""A timestamp in this year or before is a placeholder for "no time" (epoch 0 or -1, Go's zero
time ``0001-01-01T00:00:00Z``), not when a message was said: it dates nothing (a transcript dated
1970 was "our first conversation", and "last year" counted from year 1 had no year)."""


STAMP_YEAR_MAX: Final = 2200
"""A timestamp after this year is no time a message was said (``9999-12-31``, "never"; an epoch of
the wrong unit): it dates nothing. Below it, an epoch's unit is told by its size alone (the years
1971-2200 in seconds, milliseconds, microseconds and nanoseconds do not overlap: :func:`_epoch`)."""

_EPOCH_UNITS: Final = (1, 1_000, 1_000_000, 1_000_000_000)
# an epoch written as a string ("1736100000", "1736100000.5"): digits, a sign, a fraction
_EPOCH_TEXT: Final = re.compile(r"[+-]?\d{1,20}(?:\.\d+)?")


_EPOCH_MAX: Final = datetime(STAMP_YEAR_MAX + 1, 1, 1, tzinfo=UTC).timestamp()


def _epoch(value: float) -> datetime | None:
    """An epoch number in seconds, milliseconds, microseconds or nanoseconds, read in the first unit
    that puts it before the end of :data:`STAMP_YEAR_MAX` (each unit's span of the years 1971-2200
    lies below the next's: 1.7e9 seconds, 1.7e12 milliseconds, ...); None for a placeholder (in
    :data:`PLACEHOLDER_YEAR_MAX` or before in that unit: 0, -1, a number between two units' spans)
    or a number past every unit's span."""
    if not math.isfinite(value):
        return None
    for unit in _EPOCH_UNITS:
        if value / unit < _EPOCH_MAX:
            dt = datetime.fromtimestamp(value / unit, UTC)
            return None if dt.year <= PLACEHOLDER_YEAR_MAX else dt
    return None


def _iso(value: str) -> datetime | None:
    """An ISO 8601 / RFC 3339 timestamp, its ``T`` and ``Z`` in either case (``2026-01-05t19:22:00z``
    is RFC 3339's), else None."""
    text = value.strip()
    if len(text) > 10 and text[10] == "t":
        text = text[:10] + "T" + text[11:]
    if text[-1:] in ("z", "Z"):
        text = text[:-1] + "+00:00"
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        pass
    if _RFC2822.search(text) is None:
        return None
    import email.utils  # (here: it imports socket, which a keyword-only search's start-up does not load)

    try:  # an e-mail's and HTTP's date (RFC 2822: "Thu, 07 Mar 2024 10:00:00 GMT"), as some exporters write it
        return email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None


_RFC2822 = re.compile(r"\d{1,2} (?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) \d{4} \d{2}:\d{2}")
TIMESTAMP_KEYS = ("timestamp", "created_at", "createdAt")
"""The keys a record's (or its message's) time is read from, the first that holds one: OpenClaw's
``timestamp``, and ``created_at`` / ``createdAt`` as other chat exports write it."""


def stamp(value: object) -> str | None:
    """An ISO timestamp string (``T`` and ``Z`` in either case) or an epoch number, or an epoch
    written as a string (seconds, milliseconds, microseconds or nanoseconds, told apart by size:
    :func:`_epoch`) -> ``YYYY-MM-DDTHH:MM`` (UTC), else ``None``; also for a placeholder
    (:data:`PLACEHOLDER_YEAR_MAX`) or a time after :data:`STAMP_YEAR_MAX`."""
    try:
        if isinstance(value, str) and _EPOCH_TEXT.fullmatch(value.strip()):
            value = float(value) if "." in value else int(value)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            dt = _epoch(value)
        elif isinstance(value, str) and len(value) >= 10:
            dt = _iso(value)
            if dt is not None and dt.tzinfo is not None:
                dt = dt.astimezone(UTC)
        else:
            return None
    except (ValueError, OverflowError, OSError):
        return None
    if dt is None or dt.year <= PLACEHOLDER_YEAR_MAX or dt.year > STAMP_YEAR_MAX:
        return None
    return _minute(dt)


def reader_zone() -> str | None:
    """The time zone this process reads days in (its local zone: ``TZ``, else the system's), as
    an index records it (meta ``days_zone``), or None for UTC (no offset in winter or summer).
    A name (``TZ`` or the zone ``/etc/localtime`` links to, else the zone's abbreviations) and
    its standard offset, e.g. ``Asia/Tokyo (UTC+09:00)``."""
    if in_utc():
        return None
    name = os.environ.get("TZ", "").strip().lstrip(":")
    if not name:
        try:
            link = os.readlink("/etc/localtime")
        except OSError:
            link = ""
        name = link.split("zoneinfo/", 1)[1] if "zoneinfo/" in link else "/".join(time.tzname)
    east = -time.timezone
    return f"{name} (UTC{'+' if east >= 0 else '-'}{abs(east) // 3600:02d}:{abs(east) % 3600 // 60:02d})"


def in_utc() -> bool:
    """Whether this process's zone is UTC all year (days and clock times read as stamped)."""
    return time.timezone == 0 and (not time.daylight or time.altzone == 0)


def reader_day(ts: str) -> str | None:
    """The calendar day in this process's zone (:func:`reader_zone`) of a ``YYYY-MM-DDTHH:MM``
    UTC time (:func:`stamp`): a message OpenClaw stamped ``23:30Z`` on the 15th was sent on the
    16th in Tokyo, where its user asks about "this morning". None in UTC (the same day)."""
    if in_utc():
        return None
    return _day_in_zone(ts, (time.timezone, time.altzone, time.daylight, time.tzname))


@functools.lru_cache(maxsize=65536)
def _day_in_zone(ts: str, _zone: tuple[object, ...]) -> str | None:
    """:func:`reader_day`, once per time and zone (a message's day is asked when it is parsed and
    again for each chunk that holds it)."""
    try:
        return datetime.fromisoformat(ts).replace(tzinfo=UTC).astimezone().date().isoformat()
    except (ValueError, OverflowError, OSError):
        return None


def local_day(value: object, ts: str | None = None) -> str | None:
    """The calendar day (``YYYY-MM-DD``) its writer lived a message in: an ISO timestamp's own UTC
    offset (``...T01:10+04:00`` is that day in Dubai, the day before in UTC); for a time in UTC
    (``Z``, ``+00:00``, an epoch number; OpenClaw writes ``Z``) whose :func:`stamp` is ``ts``, its
    day in this process's zone (:func:`reader_day`: the machine's user lives there), None in UTC.
    None for what is not a timestamp and for a time with no offset (its day is as written)."""
    if not isinstance(value, str) or len(value) < 10 or _EPOCH_TEXT.fullmatch(value.strip()):
        return reader_day(ts) if ts is not None and isinstance(value, (str, int, float)) else None
    try:
        dt = _iso(value)
    except OverflowError:
        return None
    if dt is None:
        return None
    offset = dt.utcoffset()
    if offset is not None and not offset and ts is not None:
        return reader_day(ts)
    return dt.date().isoformat()


_TEXT_BLOCKS = frozenset({"text", "input_text", "output_text"})


def flat_message(rec: dict[str, Any]) -> bool:
    """A message written as the record itself, with no ``message`` object: the chat format of
    OpenAI's and most SDKs' logs (``{"role": "user", "content": "..."}``, also with ``"type":
    "message"`` as the Responses API writes its items). OpenClaw's nest it in ``message``."""
    return (isinstance(rec.get("role"), str) and "content" in rec and "message" not in rec
            and rec.get("type") in (None, "message"))


_AGENT_LOG_ROLES: Final = frozenset({"user", "assistant"})


def message_of(rec: dict[str, Any]) -> dict[str, Any] | None:
    """The message a transcript record holds, or None (a session header, a summary, another record).

    - OpenClaw's: ``{"type": "message", "message": {"role": ..., "content": ...}}``;
    - written flat, as OpenAI's and most SDKs' chat logs (:func:`flat_message`);
    - Claude Code's session logs: ``{"type": "user" | "assistant", "message": {"role": <the same>,
      "content": ...}}``, but not its ``isMeta`` records (text the tool injects, not the user's);
    - Codex CLI's rollout logs: ``{"type": "response_item", "payload": {"type": "message", "role":
      ..., "content": [...]}}``.

    Its ``role`` and ``content`` are the indexer's to judge (only user and assistant text counts:
    a tool result or a thinking block in one of these is not text and is not indexed)."""
    if flat_message(rec):  # (a Responses item is flat with "type": "message")
        return rec
    kind = rec.get("type")
    msg = rec.get("message")
    if kind == "message":
        return msg if isinstance(msg, dict) else None
    if kind in _AGENT_LOG_ROLES and isinstance(msg, dict) and msg.get("role") == kind:
        if rec.get("isMeta") is True:
            return None
        kept = _injected_out(msg.get("content"), _CLAUDE_CODE_BLOCKS, "<")
        return msg if kept is None else {**msg, "content": kept}
    if kind == "response_item":
        payload = rec.get("payload")
        if isinstance(payload, dict) and payload.get("type") == "message" and isinstance(payload.get("role"), str):
            kept = _injected_out(payload.get("content"), _CODEX_CONTEXT, "<")
            return payload if kept is None else {**payload, "content": kept}
    return None


_CLAUDE_CODE_BLOCKS: Final = re.compile(
    r"<(system-reminder|command-name|command-message|local-command-stdout|local-command-stderr|bash-stdout"
    r"|bash-stderr)>.*?</\1>|<(command-args|bash-input)>(.*?)</\2>", re.DOTALL)
"""What Claude Code writes into a user turn besides the user's words: ``<system-reminder>`` (project
instructions and file contents, the same in every session), a slash command's name
(``<command-name>/model</command-name><command-message>model</command-message>``: the tool's
controls) and a local command's or ``!`` shell command's output (``<local-command-stdout>``,
``<bash-stdout>``: output, as tool results are). A command's arguments and a ``!`` command's input
(``<command-args>``, ``<bash-input>``) are the user's words: their text is kept, the tags dropped."""
_CODEX_CONTEXT: Final = re.compile(r"<(user_instructions|environment_context)>.*?</\1>", re.DOTALL)


def _block_text(m: re.Match[str]) -> str:
    """A matched injected block's replacement: the user's words it wraps (group 3), else a space."""
    words = m.groups()[2] if len(m.groups()) > 2 else None
    return f" {words} " if words is not None else " "


def _injected_out(content: object, blocks: re.Pattern[str], marker: str) -> object | None:
    """A coding agent's message content without the blocks the tool injects into the user's turns
    (Claude Code's ``<system-reminder>`` and command blocks (:data:`_CLAUDE_CODE_BLOCKS`), Codex CLI's ``<user_instructions>`` and
    ``<environment_context>``: project instructions, file contents, the working folder: the same
    long text in every session, which would match every query about its words); None when it holds
    none (``marker``: a string every such block holds, a cheap first look)."""
    if isinstance(content, str):
        return blocks.sub(_block_text, content) if marker in content else None
    if isinstance(content, list) and any(isinstance(b, dict) and marker in str(b.get("text", "")) for b in content):
        return [{**b, "text": blocks.sub(_block_text, b["text"])}
                if isinstance(b, dict) and isinstance(b.get("text"), str) else b for b in content]
    return None


def is_message_record(rec: dict[str, Any]) -> bool:
    """The record is a message of a form the indexer reads (:func:`message_of`), whatever its role."""
    return message_of(rec) is not None or (rec.get("type") == "message")


SPEAKER_NAME_MAX: Final = 64
"""The longest ``name`` of a message read as its speaker's (a longer one is no participant's name)."""


def speaker_name(value: object) -> str | None:
    """A message's ``name`` (the participant field of OpenAI's chat messages:
    ``{"role": "user", "name": "Kate", "content": "..."}``), whitespace collapsed, or None: absent,
    not a string, empty, longer than :data:`SPEAKER_NAME_MAX`, or holding a ``:`` (which would
    read as a label of its own)."""
    if not isinstance(value, str):
        return None
    name = _JS_WS_RUN.sub(" ", value).strip(_JS_WS_CHARS)
    if not name or len(name) > SPEAKER_NAME_MAX or ":" in name:
        return None
    return name


def _timestamp_of(rec: dict[str, Any], message: dict[str, Any] | None = None) -> object:
    """A parsed record's timestamp as written: its own, else its message's (the first of
    :data:`TIMESTAMP_KEYS` that holds a time, else what its ``timestamp`` holds). ``message``: the
    record's (:func:`message_of`), when the caller has it."""
    msg = message or message_of(rec) or rec.get("message")
    for holder in (rec, msg) if isinstance(msg, dict) and msg is not rec else (rec,):
        for key in TIMESTAMP_KEYS:
            value = holder.get(key)
            if value is not None and stamp(value) is not None:
                return value
    return rec.get("timestamp")


def _stamp_of(rec: dict[str, Any]) -> str | None:
    """A parsed record's timestamp (its own, else its message's), as :func:`stamp` gives it."""
    return stamp(_timestamp_of(rec))


def record_stamp(raw: bytes | str | None) -> tuple[bool, str] | None:
    """(whether it is a message, its timestamp) of one JSONL record, or None: no timestamp, not a
    JSON object, or a line longer than indexing reads (``raw`` None)."""
    if raw is None or (not ("timestamp" in raw or "reated" in raw) if isinstance(raw, str)
                       else not (b"timestamp" in raw or b"reated" in raw)):
        return None
    try:
        rec = json.loads(raw)
    except (ValueError, RecursionError):  # not JSON, or nested deeper than the parser goes
        return None
    if not isinstance(rec, dict):
        return None
    ts = _stamp_of(rec)
    return None if ts is None else (is_message_record(rec), ts)


def chunk_stamps(doc: SessionDoc, start_line: int, end_line: int) -> list[tuple[str, int, str]]:
    """When a transcript chunk (JSONL lines ``start_line``..``end_line``) was written: for each day
    it has a message of, the earliest message time (``YYYY-MM-DDTHH:MM`` UTC), that message's JSONL
    line and the day, oldest first. A message counts for its UTC day and, when its timestamp carries
    another offset, for its local day too (``01:10+04:00`` on the 14th is the 14th in Dubai, the
    13th in UTC: a question naming either finds it); on a machine outside UTC, a message in UTC
    (``Z``: OpenClaw's) or in this machine's offset counts for its day here only
    (:func:`local_day`: ``23:30Z`` on the 15th is the 16th in Tokyo). Every message record of those lines counts,
    indexed or not (a tool result is said then too). A chunk with no timed message has the session
    header's time (and its own first line), else nothing. What the index records (``chunk_days``)
    so a search never reads a transcript to date it."""
    lines = doc.stamp_lines
    lo, hi = bisect.bisect_left(lines, start_line), bisect.bisect_right(lines, end_line)
    if lo == hi:
        return [(doc.header, start_line, reader_day(doc.header) or doc.header[:10])] if doc.header else []
    first: dict[str, tuple[str, int]] = {}
    for n, ts, local in zip(lines[lo:hi], doc.stamps[lo:hi], doc.local_days[lo:hi], strict=True):
        # the day it was lived in and its UTC day; only the first where that is this machine's
        # zone's day (a UTC day is no day its user lived)
        for day in {local} if local is not None and local == reader_day(ts) else {ts[:10], local or ts[:10]}:
            if day not in first or ts < first[day][0]:
                first[day] = (ts, n)
    return sorted((ts, n, day) for day, (ts, n) in first.items())


@dataclass(frozen=True)
class SessionDoc:
    """The indexable view of one transcript.

    Attributes:
        content: ``"User: ..."`` / ``"Assistant: ..."`` lines joined with ``"\\n"``.
        line_map: for each content line (0-based index), its 1-based JSONL line.
        hash: ``sha256(content + "\\n" + ",".join(line_map))`` as lowercase hex.
        messages: number of kept messages (== ``len(line_map)``).
        bytes_read: bytes consumed from the file (for delta tracking; the file size at
            parse time when nothing was appended meanwhile).
        skipped: malformed lines: not valid JSON, or oversized. Session headers, other record
            types, other roles and empty messages are valid records that are simply not indexed
            and do not count (the header is in every transcript; a warning for it is noise).
        lines: JSONL lines seen (a final line without ``"\\n"`` counts too).
        oversized: lines skipped because they exceeded ``max_line_bytes``.
        redacted: whether redaction was applied to the message texts.
    """

    content: str
    line_map: list[int]
    hash: str
    messages: int
    bytes_read: int
    skipped: int
    lines: int = 0
    bad_lines: tuple[int, ...] = ()  # the first malformed lines' numbers (MALFORMED_LINES_NAMED)
    oversized: int = 0
    redacted: bool = True
    # sha256 of the bytes this parse read, and (their length, the file's mtime_ns just before)
    file_sha256: str = ""
    file_stat: tuple[int, int] | None = None
    # when each message record was written (every one, indexed or not: a tool result has a time
    # too), in JSONL line order, and the session header's time: :func:`chunk_stamps`
    stamp_lines: Sequence[int] = field(default_factory=list)
    stamps: Sequence[str] = field(default_factory=list)
    local_days: Sequence[str | None] = field(default_factory=list)  # each one's day as lived (local_day)
    header: str | None = None
    # records that are JSON objects but no message of a form :func:`message_of` reads, and their
    # ``type`` values (the first few): a file of only these is a transcript of another form
    other_records: int = 0
    other_types: tuple[str, ...] = ()
    message_records: int = 0  # records :func:`is_message_record` reads as messages, of any role

    def unread_form(self) -> bool:
        """The file holds records, but none a message this parser reads, and not only the records
        an OpenClaw transcript starts with (:data:`OPENCLAW_OTHER_TYPES`): a transcript written in
        another form, which indexing would leave empty without a word."""
        return (self.message_records == 0 and self.other_records >= UNREAD_FORM_MIN_RECORDS
                and not set(self.other_types) <= OPENCLAW_OTHER_TYPES)


UNREAD_FORM_MIN_RECORDS: Final = 3
"""Records of no readable message a transcript must hold before a run says it reads none of them."""
OPENCLAW_OTHER_TYPES: Final = frozenset({"session", "model_change", "thinking_level_change", "custom", "compaction",
                                         "branch_summary", "summary", "label"})
"""Record types an OpenClaw (or Claude Code) transcript holds besides messages: a file of only these
is a session with nothing said yet, not another form."""
OTHER_TYPES_NAMED: Final = 4
NO_TYPE: Final = "(none)"
"""How :attr:`SessionDoc.other_types` names records with no string ``type``."""
_TYPE_SNIFF: Final = re.compile(r'"type"\s*:\s*"([^"\\]{1,40})"')
_TYPE_SNIFF_BYTES: Final = re.compile(rb'"type"\s*:\s*"([^"\\]{1,40})"')


def session_rel_path(path: str | os.PathLike[str]) -> str:
    """Index path of a transcript: ``sessions/<file name>`` (forward slashes)."""
    return "sessions/" + Path(path).name


def session_hash(content: str, line_map: Iterable[int]) -> str:
    """``sha256(content + "\\n" + ",".join(line_map))``, hex (the reference's hash)."""
    h = hashlib.sha256(content.encode("utf-8"))
    h.update(("\n" + ",".join(str(n) for n in line_map)).encode("utf-8"))
    return h.hexdigest()


def normalize_session_text(value: str) -> str:
    """Collapse whitespace runs (JavaScript's ``\\s`` set) to one space and trim."""
    # str.split() agrees with JavaScript's \s except for \x1c-\x1f and \x85 (Python
    # only) and U+FEFF (JavaScript only); use it unless one of those occurs.
    if not any(c in value for c in _SPLIT_MISMATCH):
        return " ".join(value.split())
    return _JS_WS_RUN.sub(" ", value).strip(_JS_WS_CHARS)


def display_session_text(value: str) -> str:
    """A message's text as a person reads it: each line's whitespace runs collapsed (as
    :func:`normalize_session_text` collapses the whole text), its line breaks kept, blank lines
    between paragraphs kept once, leading and trailing blank lines dropped. For snippets only:
    what is indexed and hashed stays :func:`normalize_session_text`'s one line (the reference's)."""
    out: list[str] = []
    for line in value.replace("\r\n", "\n").replace("\r", "\n").split("\n"):
        line = normalize_session_text(line)
        if line or (out and out[-1]):
            out.append(line)
    while out and not out[-1]:
        out.pop()
    return "\n".join(out)


def extract_session_text(content: Any, *, keep_lines: bool = False) -> str | None:
    """Text of a message's ``content``: a string, or the ``text`` blocks of a list.

    Returns ``None`` when nothing non-empty remains.  Non-text blocks (``tool_use``,
    ``tool_result``, ``image``, ``thinking`` ...) are ignored. ``keep_lines``: the text as a
    person reads it (:func:`display_session_text`; blocks on lines of their own), not as indexed.
    """
    norm = display_session_text if keep_lines else normalize_session_text
    if isinstance(content, str):
        return norm(content) or None
    if not isinstance(content, list):
        return None
    parts: list[str] = []
    for block in content:
        # "text" (OpenClaw, Anthropic), "input_text" / "output_text" (OpenAI's Responses items)
        if not isinstance(block, dict) or block.get("type") not in _TEXT_BLOCKS:
            continue
        text = block.get("text")
        if not isinstance(text, str):
            continue
        normalized = norm(text)
        if normalized:
            parts.append(normalized)
    return ("\n" if keep_lines else " ").join(parts) if parts else None


def _is_json(line: str | bytes) -> bool:
    try:
        json.loads(line, parse_constant=_reject_constant)
    except (ValueError, RecursionError):
        return False
    return True


def _reject_constant(name: str) -> NoReturn:
    # JSON.parse rejects NaN/Infinity; mirror it so the same lines are skipped.
    raise ValueError(f"invalid JSON constant {name}")


_CONTEXT_CHARS = 400  # how much of the message before is a message's context for redaction
_CONTEXT_LINES = 64  # how many lines before a range are read for its first message's context


def _redact_after(text: str, before: str | None) -> str:
    """``text`` redacted alone and with the end of the message before it as its context, as a
    note's line is with the line above it (:func:`memory_core.sources.redact.redact_lines`): a label
    and its value sent as two messages ("the vpn password:" then "SplitVpn-Horse-42", "AWS secret
    access key for the deploy bot:" then the key) are masked as the same two lines in a note are
    (the thirty-eighth session's audit)."""
    from memory_core.sources.redact import may_mask, redact  # its ~50 patterns: compiled when first needed

    alone = redact(text)
    if alone != text or not before or not before.strip() or not may_mask(before):
        return alone  # (as a note's line: one that masks something alone is read alone; a label has a trigger)
    got = redact(before + "\n" + text)
    cut = got.find("\n")
    if cut < 0 or got[:cut] != redact(before):
        return alone  # the context's own masks changed its line count or reached into the message
    return got[cut + 1:]


class _Builder:
    """Accumulates kept messages; fed one decoded JSONL line at a time."""

    __slots__ = ("parts", "line_map", "skipped", "bad_lines", "redact_secrets", "keep_lines", "stamp_lines",
                 "stamps", "local_days", "header", "before", "others", "other_types", "message_records")

    def __init__(self, redact_secrets: bool, keep_lines: bool = False) -> None:
        self.parts: list[str] = []
        self.line_map: list[int] = []
        self.skipped = 0
        self.bad_lines: list[int] = []  # the first MALFORMED_LINES_NAMED malformed lines' numbers
        self.redact_secrets = redact_secrets
        self.keep_lines = keep_lines  # display text (snippets), never indexed or hashed
        self.stamp_lines: list[int] = []  # JSONL line of each message record with a time
        self.stamps: list[str] = []
        self.local_days: list[str | None] = []
        self.header: str | None = None  # the first other record's time (the session header)
        self.before: str | None = None  # the last kept message's end, as indexed: a secret's label
        self.others = 0  # JSON records that are no message (SessionDoc.other_records)
        self.other_types: list[str] = []
        self.message_records = 0

    def malformed(self, line_no: int) -> None:
        """JSONL line ``line_no`` is no JSON (or oversized): counted, and named if among the first."""
        self.skipped += 1
        if len(self.bad_lines) < MALFORMED_LINES_NAMED:
            self.bad_lines.append(line_no)

    def _count_other(self, kind: object) -> None:
        self.others += 1
        name = kind[:40] if isinstance(kind, str) else NO_TYPE
        if name not in self.other_types and len(self.other_types) < OTHER_TYPES_NAMED:
            self.other_types.append(name)

    def other_record(self, line: str | bytes) -> None:
        """A JSON line that is no message (a session header, another record type): counted, and its
        time is the transcript's header time when it is the first such."""
        if self.message_records or len(self.other_types) >= OTHER_TYPES_NAMED:
            self.others += 1  # its type matters no more (SessionDoc.unread_form)
        elif isinstance(line, str):
            m = _TYPE_SNIFF.search(line, 0, 512)
            self._count_other(m.group(1) if m else None)
        else:
            mb = _TYPE_SNIFF_BYTES.search(line, 0, 512)
            self._count_other(mb.group(1).decode("utf-8", errors="replace") if mb else None)
        if self.header is None:
            got = record_stamp(line)
            if got is not None and not got[0]:
                self.header = got[1]

    def feed(self, line_no: int, line: str, *, keep: bool = True) -> None:
        """Process JSONL line *line_no* (1-based); *line* may keep its newline. ``keep=False``: the
        line is only the context of the next message (a reader of a range starting after it)."""
        if line_no == 1 and line.startswith(_BOM):
            line = line[1:]
        if not line.strip(_JS_WS_CHARS):
            return  # blank: neither kept nor counted as skipped
        # Fast reject: a record whose "type" is "message" must contain the literal
        # "message" string, unless written with \u escapes.
        if '"message"' not in line and '"role"' not in line and "\\u" not in line:
            if not _is_json(line):  # a session header or other record: not malformed
                self.malformed(line_no)
            else:
                self.other_record(line)
            return
        try:
            record = json.loads(line, parse_constant=_reject_constant)
        except (ValueError, RecursionError):
            self.malformed(line_no)
            return
        if not isinstance(record, dict):
            return
        message = message_of(record)
        if message is None and record.get("type") != "message":  # (is_message_record, read once)
            self._count_other(record.get("type"))
            if self.header is None and (ts := _stamp_of(record)) is not None:
                self.header = ts
            return  # a known non-message record (session header, custom, ...)
        self.message_records += 1
        written = _timestamp_of(record, message)
        if keep and (ts := stamp(written)) is not None:
            self.stamp_lines.append(line_no)
            self.stamps.append(ts)
            self.local_days.append(local_day(written, ts))
        if not isinstance(message, dict):
            return
        role = message.get("role")
        label = _ROLE_LABELS.get(role) if isinstance(role, str) else None
        if label is None:
            return  # tool results, system messages: valid records, not indexed
        text = extract_session_text(message.get("content"), keep_lines=self.keep_lines)
        if not text:
            return
        if (speaker := speaker_name(message.get("name"))) is not None and not text.startswith(speaker + ":"):
            text = f"{speaker}: {text}"  # who said it, as a chat export writes it ("Kate: see you at 8")
        if "\\u" in line:
            text = _LONE_SURROGATE.sub("\ufffd", text)
        # the context the next message is redacted with: this one's end as it is indexed (one line), in
        # every reader, so a snippet or `get` (``keep_lines``) masks what the index does
        flat = normalize_session_text(text) if self.keep_lines else text
        before, self.before = self.before, flat[-_CONTEXT_CHARS:]
        if not keep:
            return
        if self.redact_secrets:
            if self.keep_lines:
                # the display text is masked exactly as the indexed one: a secret whose pattern
                # spans a line break (masked once the line is collapsed) shows the indexed form
                flat = _redact_after(normalize_session_text(text), before)
                shown = _redact_after(text, before)
                text = shown if normalize_session_text(shown) == flat else flat
            else:
                text = _redact_after(text, before)
        self.parts.append(f"{label}: {text}")
        self.line_map.append(line_no)

    def build(self, *, bytes_read: int, lines: int, oversized: int) -> SessionDoc:
        content = "\n".join(self.parts)
        self.parts = []
        return SessionDoc(
            content=content,
            line_map=self.line_map,
            hash=session_hash(content, self.line_map),
            messages=len(self.line_map),
            bytes_read=bytes_read,
            skipped=self.skipped,
            bad_lines=tuple(self.bad_lines),
            lines=lines,
            oversized=oversized,
            redacted=self.redact_secrets,
            stamp_lines=self.stamp_lines,
            stamps=self.stamps,
            local_days=self.local_days,
            header=self.header,
            other_records=self.others,
            other_types=tuple(self.other_types),
            message_records=self.message_records,
        )


class _LineReader(Protocol):
    """What :func:`_iter_raw_lines` reads: a binary file, or :class:`_HashingReader` over one."""

    def readline(self, size: int = -1, /) -> bytes: ...

    def __iter__(self) -> Iterator[bytes]: ...


def _iter_raw_lines(f: _LineReader, max_line_bytes: int | None) -> Iterator[bytes | None]:
    """Yield each line of binary file *f* (newline kept), or ``None`` for a line longer
    than *max_line_bytes*, which is drained in chunks without being buffered."""
    if max_line_bytes is None:
        yield from f
        return
    limit = max_line_bytes + 1
    while True:
        raw = f.readline(limit)
        if not raw:
            return
        if len(raw) >= limit and not raw.endswith(b"\n"):
            while True:
                rest = f.readline(_READ_CHUNK)
                if not rest or rest.endswith(b"\n"):
                    break
            yield None
            continue
        yield raw


def parse_session_file(
    path: str | os.PathLike[str],
    *,
    redact_secrets: bool = True,
    max_line_bytes: int | None = DEFAULT_MAX_LINE_BYTES,
) -> SessionDoc:
    """Parse a JSONL transcript into a :class:`SessionDoc`, streaming.

    Blank lines, invalid JSON, non-message records, other roles and empty messages are
    skipped (never an error).  With *redact_secrets* every message text is passed
    through :func:`memory_core.sources.redact.redact` before it enters ``content``.  I/O
    errors (missing file, permissions) propagate.
    """
    builder = _Builder(redact_secrets)
    line_no = 0
    oversized = 0
    with open(path, "rb") as raw_f:
        st = os.fstat(raw_f.fileno())
        f = _HashingReader(raw_f)
        for raw in _iter_raw_lines(f, max_line_bytes):
            line_no += 1
            if raw is None:
                oversized += 1
                builder.malformed(line_no)
                continue
            # Cheap byte-level rejects before decoding (same rule as _Builder.feed).
            if b'"message"' not in raw and b'"role"' not in raw and b"\\u" not in raw:
                if raw.strip():
                    if not _is_json(raw):
                        builder.malformed(line_no)
                    else:
                        builder.other_record(raw)
                continue
            builder.feed(line_no, raw.decode("utf-8", errors="replace"))
        bytes_read = raw_f.tell()
    doc = builder.build(bytes_read=bytes_read, lines=line_no, oversized=oversized)
    return replace(doc, file_sha256=f.digest.hexdigest(), file_stat=(bytes_read, st.st_mtime_ns))


class _HashingReader:
    """``readline`` of a binary file that also hashes every byte it returns (the bytes parsed
    are the bytes hashed: a transcript's stored hash is of what was indexed)."""

    __slots__ = ("_f", "digest")

    def __init__(self, f: BinaryIO) -> None:
        self._f = f
        self.digest = hashlib.sha256()

    def readline(self, size: int = -1) -> bytes:
        data = self._f.readline(size)
        self.digest.update(data)
        return data

    def __iter__(self) -> Iterator[bytes]:
        while data := self.readline():
            yield data


def parse_session_lines(
    lines: Iterable[str | bytes],
    *,
    redact_secrets: bool = True,
) -> SessionDoc:
    """Like :func:`parse_session_file` for already split lines (e.g. in tests).

    Each item is one JSONL line (a trailing newline is optional); ``bytes`` items are
    decoded as UTF-8 with ``errors="replace"``.  ``bytes_read`` is the total UTF-8
    size of the items.
    """
    builder = _Builder(redact_secrets)
    line_no = 0
    bytes_read = 0
    for item in lines:
        line_no += 1
        if isinstance(item, bytes):
            bytes_read += len(item)
            text = item.decode("utf-8", errors="replace")
        else:
            text = item
            bytes_read += len(item.encode("utf-8", errors="surrogatepass"))
        builder.feed(line_no, text)
    return builder.build(bytes_read=bytes_read, lines=line_no, oversized=0)


def session_lines_for_range(
    path: str | os.PathLike[str],
    start_line: int,
    end_line: int,
    *,
    redact_secrets: bool = True,
) -> list[str]:
    """Raw JSONL lines ``start_line..end_line`` (1-based, inclusive), streaming.

    Lines are decoded with ``errors="replace"`` and returned without their line
    ending.  ``start_line`` below 1 is treated as 1; an empty range or one past the end
    of the file gives fewer (or no) lines.  Reading stops at ``end_line``.  With
    *redact_secrets* (default) each line goes through ``redact`` so ``get`` never shows
    a secret that the index would not.
    """
    start = max(1, start_line)
    if end_line < start:
        return []
    out: list[str] = []
    with open(path, "rb") as f:
        for line_no, raw in enumerate(_iter_raw_lines(f, DEFAULT_MAX_LINE_BYTES), 1):
            if line_no < start:
                continue
            if raw is None:  # longer than indexing reads: never held in memory
                out.append("")
                if line_no >= end_line:
                    break
                continue
            text = raw.decode("utf-8", errors="replace")
            if text.endswith("\n"):
                text = text[:-1]
                if text.endswith("\r"):
                    text = text[:-1]
            out.append(redact_jsonl_line(text) if redact_secrets else text)
            if line_no >= end_line:
                break
    return out


def session_text_for_range(
    path: str | os.PathLike[str] | int,
    start_line: int,
    end_line: int,
    *,
    redact_secrets: bool = True,
    keep_lines: bool = False,
    stamped: bool = False,
) -> list[str]:
    """The readable messages of JSONL lines ``start_line..end_line``: ``"User: ..."`` /
    ``"Assistant: ..."`` lines exactly as indexed (same extraction and redaction), one per kept
    message; other records are left out. What ``memory_get`` returns for a transcript citation.
    ``keep_lines``: each message with its own line breaks (:func:`display_session_text`), as a
    search snippet shows it. ``stamped``: the first message, and each one that begins another UTC
    day, starts with its time as a snippet's do (``[2026-11-02 15:20 UTC] User: ...``). ``path`` may be an open file descriptor (``get`` opens it with no
    symlink followed): it is closed here, also for an empty range, as
    :func:`memory_core.sources.safeio.read_lines` closes its own."""
    start = max(1, start_line)
    builder = _Builder(redact_secrets, keep_lines)
    # the lines before the range that may hold a message: the last one's end is the first
    # message's context for redaction, as when the transcript was indexed (_redact_after)
    before: collections.deque[tuple[int, bytes]] = collections.deque(maxlen=_CONTEXT_LINES)
    with open(path, "rb") as f:
        if end_line < start:
            return []
        # lines as indexing reads them: one over DEFAULT_MAX_LINE_BYTES is skipped there, and here
        # is drained without being held (a 1 GB line cost 3 GB per `get` or search)
        for line_no, raw in enumerate(_iter_raw_lines(f, DEFAULT_MAX_LINE_BYTES), 1):
            if line_no < start:
                if redact_secrets and raw is not None and (b'"message"' in raw or b'"role"' in raw or b"\\u" in raw):
                    before.append((line_no, raw))
                continue
            if before:
                for n, prior in before:
                    builder.feed(n, prior.decode("utf-8", errors="replace"), keep=False)
                before.clear()
            if raw is not None:
                builder.feed(line_no, raw.decode("utf-8", errors="replace"))
            if line_no >= end_line:
                break
    if not stamped:
        return builder.parts
    times = dict(zip(builder.stamp_lines, builder.stamps, strict=True))
    out: list[str] = []
    day = ""
    for line_no, part in zip(builder.line_map, builder.parts, strict=True):
        ts = times.get(line_no)
        if ts is not None and ts[:10] != day:
            day = ts[:10]
            part = f"[{ts.replace('T', ' ')} UTC] {part}"
        out.append(part)
    return out


def session_messages_by_line(
    path: str | os.PathLike[str] | int,
    end_line: int,
    *,
    keep_lines: bool = True,
) -> dict[int, str]:
    """The readable, redacted messages of JSONL lines ``1..end_line`` by line number (as
    :func:`session_text_for_range` reads them; ``keep_lines``: with their own line breaks), for a
    reader that shows several ranges of one transcript (a search's snippets) after one read.
    ``path`` may be an open file descriptor: it is closed here."""
    builder = _Builder(True, keep_lines)
    with open(path, "rb") as f:
        for line_no, raw in enumerate(_iter_raw_lines(f, DEFAULT_MAX_LINE_BYTES), 1):
            if raw is not None:
                builder.feed(line_no, raw.decode("utf-8", errors="replace"))
            if line_no >= end_line:
                break
    return dict(zip(builder.line_map, builder.parts, strict=True))


_SECRET_FIELD = re.compile(
    r"(?:api[_-]?key|token|secret|password|passwd|access[_-]?token|refresh[_-]?token|auth[_-]?token)$",
    re.IGNORECASE,
)


def _redact_json_value(value: object) -> object:
    from memory_core.sources.redact import mask_token, redact

    if isinstance(value, str):
        return redact(value)
    if isinstance(value, list):
        return [_redact_json_value(v) for v in value]
    if isinstance(value, dict):
        return {
            k: mask_token(v) if isinstance(v, str) and _SECRET_FIELD.search(str(k)) else _redact_json_value(v)
            for k, v in value.items()
        }
    return value


def redact_jsonl_line(text: str) -> str:
    """Redact one raw JSONL line string by string, inside the JSON structure.

    A plain-text pass over the raw line would miss secrets in nested JSON text, where escaped
    quotes hide ``\\"password\\": \\"...\\"`` from the patterns; secret-named fields are
    masked with the reference's rule. Lines that are not JSON get the plain-text pass."""
    try:
        return json.dumps(_redact_json_value(json.loads(text)), ensure_ascii=False)
    except (ValueError, RecursionError):  # not JSON, or nested deeper than the parser goes
        from memory_core.sources.redact import redact

        return redact(text)


def below_delta(abs_path: str, size: int, old_size: int, old_lines: int | None, *, delta_bytes: int,
                delta_messages: int, indexed_hash: str) -> bool:
    """A transcript indexed at ``old_size`` bytes and ``old_lines`` lines (``indexed_hash``: the
    sha256 of those bytes) that is ``size`` bytes now only grew, by less than both thresholds
    (``[sessions] delta_bytes``, ``delta_messages``): a run keeps its indexed rows, and the index
    is not stale for it. Shrunk (rewritten or truncated), grown by ``delta_bytes`` or more, or by
    ``delta_messages`` lines or more, with no line count recorded, or with any of the indexed bytes
    changed (a message edited in place, one inserted or removed: the rows would cite lines that
    now hold other text, and search would show the old words), whatever its size: it is reindexed.
    One rule for the indexer and for ``status`` / a reader's freshness (a transcript grown by 60
    short messages was reindexed by a run but reported fresh)."""
    if size < old_size:
        return False
    if size - old_size >= max(1, delta_bytes):
        return False
    if old_lines is None:
        return False
    try:
        _, digest, lines = read_hashes(abs_path, old_size)
    except OSError:
        return True
    return digest == indexed_hash and lines - old_lines < delta_messages


_HASHES: dict[tuple[str, int, int, int, int, int], tuple[str, str, int]] = {}
_HASHES_MAX = 4096
_HASHES_LOCK = threading.Lock()


def read_hashes(abs_path: str, n_bytes: int) -> tuple[str, str, int]:
    """In one read: the sha256 of the whole file (as :func:`memory_core.sources.discovery.hash_file`),
    of its first ``n_bytes`` bytes (equal to the hash recorded when it was ``n_bytes`` long iff
    those bytes are unchanged) and its complete lines (:func:`count_lines`). Kept per file state
    (device, inode, size, mtime) in the process: a long-lived reader's freshness checks of a
    transcript that grew below the thresholds read it once, not at every check (40 transcripts
    of 1 MiB: 30 ms a check otherwise), and a run's hash and its delta check share one read."""
    import hashlib

    with open(abs_path, "rb") as fh:
        st = os.fstat(fh.fileno())
        key = (abs_path, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, n_bytes)
        with _HASHES_LOCK:
            got = _HASHES.get(key)
        if got is not None:
            return got
        whole = hashlib.sha256()  # one pass: the prefix's hash is a copy taken at its end
        head = whole.copy() if n_bytes <= 0 else None
        left, lines = n_bytes, 0
        while block := fh.read(1 << 20):
            lines += block.count(b"\n")
            if head is None and len(block) >= left:
                whole.update(block[:left])
                head = whole.copy()
                whole.update(block[left:])
            else:
                whole.update(block)
                left -= len(block)
        if head is None:  # shorter than n_bytes
            head = whole.copy()
    got = (whole.hexdigest(), head.hexdigest(), lines)
    with _HASHES_LOCK:
        if len(_HASHES) >= _HASHES_MAX:
            _HASHES.pop(next(iter(_HASHES)))
        _HASHES[key] = got
    return got


def count_lines(
    path: str | os.PathLike[str],
    start_byte: int = 0,
    end_byte: int | None = None,
) -> int:
    """Number of ``"\\n"`` bytes in ``[start_byte, end_byte)`` of *path* (binary, chunked).

    With the defaults this is ``wc -l``: complete lines; a final line without a newline
    (a writer mid-append) is not counted.  Counting only the appended byte range gives
    the message delta used for the session sync thresholds, as in the reference.
    """
    if start_byte < 0:
        raise ValueError("start_byte must be >= 0")
    if end_byte is not None and end_byte <= start_byte:
        return 0
    remaining = None if end_byte is None else end_byte - start_byte
    count = 0
    with open(path, "rb", buffering=0) as f:
        if start_byte:
            f.seek(start_byte)
        while remaining is None or remaining > 0:
            size = _READ_CHUNK if remaining is None else min(_READ_CHUNK, remaining)
            chunk = f.read(size)
            if not chunk:
                break
            count += chunk.count(b"\n")
            if remaining is not None:
                remaining -= len(chunk)
    return count
