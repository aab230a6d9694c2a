"""The memory flush before compaction (the seeds' ``agents.defaults.compaction.memoryFlush``).

When a session nears compaction, the runtime runs one silent turn asking the model to write
lasting notes to ``memory/YYYY-MM-DD.md`` (or to reply ``NO_REPLY``), so nothing worth keeping is
lost when the context is summarised. memory-core's part:

- :func:`estimate_transcript`: a session's token estimate from its JSONL transcript (characters
  of the messages since the last compaction / 4, the runtime's own rough rule) and its
  compaction cycle (the number of ``{"type": "compaction"}`` records in it);
- :func:`check_flush`: whether a flush is due: the estimate passes ``context_window -
  reserve_tokens_floor - soft_threshold_tokens`` (defaults 200,000 - 20,000 - 4,000), the flush
  is on, the workspace is writable, and this session has not flushed in this cycle yet; with
  the two prompts to send;
- :class:`FlushLedger`: the flushes per session and cycle (``<index>.flush-ledger.json``, the
  seeds' sessions ledger), written atomically under a lock, so a flush runs once per cycle even
  when two processes ask at once (``record=True`` claims the cycle in the same locked step).

Nothing here calls a model: the runtime sends the prompts; ``memory_write`` (memory_core/notes/write.py)
is how the model's notes land in the memory files.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import errno
import fcntl
import glob
import json
import logging
import math
import os
import stat
import tempfile
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from memory_core.config import Settings
from memory_core.errors import PathError, UnsafePathError, UsageError
from memory_core.index.run_stops import is_stop
from memory_core.sources.sessions import message_of
from memory_core.storage.store import open_lock_file

log = logging.getLogger("memory_core.notes.flush")
CHARS_PER_TOKEN = 4
MAX_SESSION_ID = 200
MAX_TRANSCRIPT_LINE = 64 * 1024 * 1024


@dataclass(frozen=True)
class TranscriptEstimate:
    tokens: int  # estimated tokens of the context since the last compaction
    cycle: int  # compaction records seen: the session's compaction cycle
    messages: int  # message records since the last compaction
    malformed: int = 0  # lines that are not JSON (skipped)


def _chars(value: Any) -> int:
    if isinstance(value, str):
        return len(value)
    if isinstance(value, list):
        return sum(_chars(v.get("text", v) if isinstance(v, dict) and v.get("type") == "text" else v) for v in value)
    if isinstance(value, dict):
        return len(json.dumps(value, ensure_ascii=False))
    return 0


def estimate_transcript(path: str | os.PathLike[str]) -> TranscriptEstimate:
    """Tokens and compaction cycle of a JSONL transcript (OpenClaw's / pi's session format).

    Messages (every form the indexer reads, :func:`memory_core.sources.sessions.message_of`: OpenClaw's
    ``{"type": "message", "message": {"role", "content"}}``, flat ``{"role", "content"}``, Claude Code's
    and Codex CLI's session logs) count ``chars / 4`` of
    their content (text blocks, tool calls and results alike); a ``{"type": "compaction"}``
    record starts a new cycle and the context after it is its ``summary`` plus what follows.
    Blank and malformed lines (not JSON, or nested too deep to read) are skipped. PathError when
    the file cannot be read or is not a regular file (a FIFO or a device such as ``/dev/zero``
    would never end: it is refused without reading it)."""
    p = Path(path).expanduser()
    chars = messages = cycle = malformed = 0
    try:
        # O_NONBLOCK: opening a FIFO with no writer returns at once instead of waiting for one
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise PathError(f"cannot read transcript {p}: {exc.strerror or exc}") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise PathError(f"cannot read transcript {p}: not a regular file")
        fh = os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
    with fh:
        while line := fh.readline(MAX_TRANSCRIPT_LINE):
            try:
                rec = json.loads(line)
                if not isinstance(rec, dict):
                    continue
                if rec.get("type") == "compaction":
                    cycle += 1
                    chars, messages = _chars(rec.get("summary", "")), 0
                elif (msg := message_of(rec)) is not None:  # a message in a form the indexer reads
                    messages += 1
                    chars += _chars(msg.get("content"))
            except (ValueError, RecursionError):  # not JSON, or nested past what Python reads
                malformed += bool(line.strip())
                continue
    return TranscriptEstimate(math.ceil(chars / CHARS_PER_TOKEN), cycle, messages, malformed)


@dataclass(frozen=True)
class FlushCheck:
    """The answer of :func:`check_flush` (``memory-core flush --json``, MCP ``memory_flush_check``)."""

    session: str
    due: bool
    reason: str
    tokens: int
    threshold: int
    cycle: int
    recorded: bool  # this check claimed the cycle in the ledger
    system_prompt: str
    prompt: str
    ledger: str

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


class FlushLedger:
    """Flushes per session and compaction cycle, in one JSON file replaced atomically.

    ``{"version": 1, "sessions": {"<session>": {"cycle": 2, "flushed_at": "...", "tokens": 181000}}}``
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.set_aside: Path | None = None  # where a damaged ledger was moved by the last read

    def read(self) -> dict[str, dict[str, Any]]:
        """The sessions recorded. A damaged ledger (not JSON, not the ledger's shape) is set aside
        (``<ledger>.damaged-<time>``, :attr:`set_aside`) and the ledger starts afresh: a flush
        may then run once more in a cycle, which is better than no flush ever again. Call it
        under :meth:`locked`."""
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except FileNotFoundError:
            return {}
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise UnsafePathError(f"refusing to read the flush ledger {self.path}: it is a symbolic link"
                                      ) from None
            raise UsageError(f"the flush ledger {self.path} cannot be read ({exc.strerror or exc})") from None
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise UsageError(f"the flush ledger {self.path} is not a regular file")
            with os.fdopen(os.dup(fd), "rb") as fh:
                raw = fh.read(64 * 1024 * 1024 + 1)
        finally:
            os.close(fd)
        try:
            data = json.loads(raw.decode("utf-8"))
            sessions = data.get("sessions") if isinstance(data, dict) else None
            if not isinstance(sessions, dict):
                raise ValueError("not a flush ledger")
            return sessions
        except (ValueError, RecursionError) as exc:
            aside = self.path.with_name(f"{self.path.name}.damaged-"
                                        f"{_dt.datetime.now(_dt.UTC).strftime('%Y%m%dT%H%M%S%f')}")
            os.rename(self.path, aside)
            self.set_aside = aside
            log.warning("the flush ledger %s was damaged (%s); set aside as %s, starting afresh", self.path,
                        str(exc)[:200], aside)
            return {}

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """The ledger's lock (``<ledger>.lock``), never through a symbolic link."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        lock = self.path.with_name(self.path.name + ".lock")
        fd = open_lock_file(lock, "flush ledger")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def write(self, sessions: dict[str, dict[str, Any]]) -> None:
        """Replace the ledger (under :meth:`locked`): a temp copy beside it, synced and renamed over
        it. Temp copies a killed writer left are removed first (the lock says none is in use)."""
        with contextlib.suppress(OSError):
            for stale in self.path.parent.glob(f"{glob.escape(self.path.name)}*.tmp"):
                with contextlib.suppress(OSError):
                    stale.unlink()
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=self.path.name, suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump({"version": 1, "sessions": sessions}, fh, ensure_ascii=False, indent=1, sort_keys=True)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise


def workspace_read_only(settings: Settings) -> str:
    """Why the workspace may not be written (``""`` when it may)."""
    access = settings.compaction.workspace_access
    if access != "rw":
        return f"the workspace is {'read-only' if access == 'ro' else 'not accessible'} (compaction.workspace_access" \
               f" = {access!r})"
    ws = settings.workspace_dir
    if not ws.is_dir():
        return f"the workspace {ws} does not exist"
    if not os.access(ws, os.W_OK | os.X_OK):
        return f"the workspace {ws} is read-only"
    return ""


def _prompt(text: str, today: _dt.date) -> str:
    return text.replace("YYYY-MM-DD", today.isoformat())


def _is_utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def check_flush(settings: Settings, session: str, *, tokens: int | None = None,
                transcript: str | os.PathLike[str] | None = None, cycle: int | None = None,
                record: bool = False, today: _dt.date | None = None) -> FlushCheck:
    """Whether ``session`` should run its memory flush now (module docstring).

    ``tokens`` (told) or ``transcript`` (read: :func:`estimate_transcript`) gives the estimate;
    ``cycle`` (told) overrides the transcript's compaction count (0 without either). With
    ``record``, a due flush is recorded in the ledger in the same locked step, so the next check
    of this cycle says it is done.
    """
    if (not session or len(session) > MAX_SESSION_ID or any(ord(c) < 32 for c in session)
            or not _is_utf8(session)):  # bytes from argv that are not UTF-8 (surrogate-escaped)
        raise UsageError(f"a session id is 1 to {MAX_SESSION_ID} printable characters")
    if tokens is None and transcript is None:
        raise UsageError("give the session's token count or its transcript")
    if tokens is not None and tokens < 0:
        raise UsageError(f"tokens must be 0 or more, not {tokens}")
    if cycle is not None and cycle < 0:  # a count of compaction records: -5 was recorded as cycle -5
        raise UsageError(f"cycle must be 0 or more, not {cycle}")
    est = estimate_transcript(transcript) if transcript is not None else None
    tokens = tokens if tokens is not None else est.tokens  # type: ignore[union-attr]
    cycle = cycle if cycle is not None else (est.cycle if est is not None else 0)
    c = settings.compaction
    threshold = max(0, c.context_window - c.reserve_tokens_floor - c.memory_flush.soft_threshold_tokens)
    today = today or _dt.date.today()
    ledger = FlushLedger(settings.flush_ledger_file)

    def answer(due: bool, reason: str, recorded: bool = False) -> FlushCheck:
        return FlushCheck(session, due, reason, tokens, threshold, cycle, recorded,
                          _prompt(c.memory_flush.system_prompt, today), _prompt(c.memory_flush.prompt, today),
                          str(ledger.path))

    if not c.memory_flush.enabled:
        return answer(False, "the memory flush is off (compaction.memory_flush.enabled = false)")
    ro = workspace_read_only(settings)
    if ro:
        return answer(False, f"skipped: {ro}")
    if tokens < threshold:
        # a transcript the estimate could not read is said so, not taken for a short one
        unread = (f" ({est.malformed} line(s) of the transcript are not JSON and were skipped)"
                  if est is not None and est.malformed else "")
        return answer(False, f"{tokens} tokens, below the flush threshold of {threshold}{unread}")
    with ledger.locked():
        sessions = ledger.read()
        done = sessions.get(session)
        if isinstance(done, dict) and done.get("cycle") == cycle:
            return answer(False, f"already flushed in compaction cycle {cycle} (at {done.get('flushed_at')})")
        reason = f"{tokens} tokens passed the flush threshold of {threshold} in compaction cycle {cycle}"
        if ledger.set_aside is not None:
            reason += f" (the damaged flush ledger was set aside as {ledger.set_aside})"
        if not record:
            return answer(True, reason)
        before = sessions.get(session)
        sessions[session] = {"cycle": cycle, "tokens": tokens,
                             "flushed_at": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")}
        try:
            ledger.write(sessions)
            return answer(True, reason, recorded=True)
        except BaseException as exc:
            if is_stop(exc):  # stopped before the caller was told: the claim is taken back (below)
                _take_back(ledger, sessions, session, before)
            raise


def _take_back(ledger: FlushLedger, sessions: dict[str, dict[str, Any]], session: str,
               before: dict[str, Any] | None) -> None:
    """Undo a recorded flush the caller was never told was due (a stop as it was recorded or
    answered; the ledger's lock held). Before: the ledger said this cycle was flushed, the caller
    had no prompt, and the next check answered "already flushed": the flush was lost (the
    thirty-fifth session's stop audit, F2). Taken back, the next check says it is due again."""
    if before is None:
        sessions.pop(session, None)
    else:
        sessions[session] = before
    try:
        ledger.write(sessions)
    except Exception as exc:  # the stop goes on; a ledger that cannot be written keeps the claim
        log.warning("the flush recorded for %s could not be taken back (%s); `memory-core flush` will say it"
                    " was done", session, exc)


def take_back(settings: Settings, check: FlushCheck) -> None:
    """Undo ``check``'s record (``recorded``) when its answer never reached the caller: the CLI's
    print was stopped. Only while the ledger still holds that very cycle for the session."""
    if not check.recorded:
        return
    ledger = FlushLedger(settings.flush_ledger_file)
    with ledger.locked():
        sessions = ledger.read()
        done = sessions.get(check.session)
        if isinstance(done, dict) and done.get("cycle") == check.cycle:
            _take_back(ledger, sessions, check.session, None)
