"""Chunk edges: a result whose best match sits at its chunk's edge also shows the neighbouring
message (transcript) or line (note), read from the index (``query.edge_lines``, issue 37).

The budget: at most one neighbour each side (``edge_lines`` is 0 or 1), each cut to
:data:`EDGE_MAX_CHARS`, the whole snippet still within ``SNIPPET_MAX_CHARS``; a neighbour is
added only when the chunk's edge (:func:`edge_runs`: a note's first or last line; a
transcript's first or last run of one speaker's messages, at most :data:`EDGE_RUN_MAX`) holds
the message or line that matches the most distinct query terms of any of its messages or lines,
and only when the excerpt of the chunk reaches that edge. A transcript chunk whose best match
is a question still open at its end (:func:`open_question`: asked, and only held by the others,
"hang on") also gets the neighbour after, wherever the question sits; that neighbour reaches
through holds and the asker's own messages to the first answer, at most
:data:`EDGE_THROUGH_MAX` messages (:func:`_through`), within the same characters. The
citation's lines grow to the neighbour's only when it is in the snippet. Scores never change.

A neighbour is found in the chunks table (the next or previous chunk of the same path in line
order, past the chunker's overlap), never by reading the source file; when its exact line
number cannot be known from the index (a transcript whose JSONL lines between messages hold
other records, and the neighbour is neither the chunk's first nor last message), none is added.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import apsw

from memory_core.sources.sessions import LABEL_PREFIXES as SPEAKERS
from memory_core.sources.sessions import chunk_messages

EDGE_MAX_CHARS = 300
"""The most characters of one neighbouring message or line added to a snippet."""


@dataclass(frozen=True)
class Neighbour:
    line: int  # its line: a note's line, a transcript message's JSONL line
    text: str
    # a transcript message's time (``YYYY-MM-DDTHH:MM`` UTC) when the index records it (the first message of
    # its day in its chunk: chunk_days), else its UTC day (``YYYY-MM-DD``: the day of the last recorded
    # message at or before it), so a snippet can stamp a neighbour said on another day; None: unknown
    when: str | None = None


Neighbours = Callable[[str, str, int, int, str, bool, bool, str], tuple[Neighbour | None, Neighbour | None]]
"""``(path, source, start_line, end_line, text, before, after, asker)`` -> the neighbours asked
for; ``asker``: the speaker label of the chunk's open question (:func:`asker`), whose answer the
neighbour after reaches through holds (:func:`_through`), or ""."""


def units(text: str, source: str) -> list[str]:
    """A chunk's messages (transcript: the chunker's fixed-width cuts of a long message joined
    again; a piece before the first speaker stays its own, partial unit) or lines (note)."""
    if source != "sessions":
        return text.split("\n")
    return [m.replace("\n", "") for m in chunk_messages(text)]


EDGE_RUN_MAX = 3
"""The most messages of one speaker's run at a transcript chunk's edge that count as that edge."""


def _speaker(unit: str) -> str:
    return unit[:unit.find(": ") + 2] if unit.startswith(SPEAKERS) else ""


def edge_runs(us: list[str], source: str) -> tuple[int, int]:
    """How many of a chunk's units (:func:`units`) at its start and at its end are that edge: a
    note's first and last line; a transcript's first and last run of messages by one speaker
    (:func:`_who`: the role and the sender's name; people who text split one thought over several short messages: "found a flat!!", "carver
    rd", "moving in march"), at most :data:`EDGE_RUN_MAX` each."""
    if source != "sessions" or not us:
        return 1, 1

    def run(seq: list[str]) -> int:
        who = _who(seq[0])
        n = 1
        while who and n < min(len(seq), EDGE_RUN_MAX) and _who(seq[n]) == who:
            n += 1
        return n

    return run(us), run(us[::-1])


HOLD_MAX_WORDS = 3
"""The most words of a reply that only holds a question open ("hang on", "scrolling up", "lemme check")."""

# a question that asks for something (not yes or no) has one of these among its first words, or anywhere
# when it ends with "?" (people who text drop the "?": "which platform does the Brighton train go from")
_ASKING = frozenset({"who", "whom", "whose", "what", "whats", "when", "where", "which", "why", "how"})
ASKING_WITHIN = 3
_NAME = re.compile(r"[^\W\d_][\w.'-]{0,20}(?: [^\W\d_][\w.'-]{0,20})?: ")


def _who(unit: str) -> str:
    """Who wrote a message: its role label, and the sender's name written before the text when there
    is one (``Assistant: Siobhan: ``): in a group chat every other person shares the one role."""
    role = _speaker(unit)
    if not role:
        return ""
    m = _NAME.match(unit, len(role))
    return unit[:m.end()] if m else role


def _body(unit: str) -> str:
    """A message's text without its role label and a sender's name written before it (``Kate: ``)."""
    body = unit[len(_speaker(unit)):]
    m = _NAME.match(body)
    return body[m.end():] if m else body


def asks(unit: str) -> bool:
    """The message asks for something, not for yes or no: a question word (who, what, when, where,
    which, why, how) among its first :data:`ASKING_WITHIN` words, or anywhere when it ends with "?"
    ("which platform does the Brighton train go from", "btw what time is ur train", "u know where
    it is?"). A yes-or-no question ("hiking tmrw?") is answered by a word, which says nothing
    about whether its answer is still to come."""
    body = _body(unit).strip()
    words = [w.strip(".,!?;:\"'()").replace("'", "").replace("\u2019", "") for w in body.lower().split()]
    if any(w in _ASKING for w in words[:ASKING_WITHIN]):
        return True
    return body.endswith("?") and any(w in _ASKING for w in words)


def holds(unit: str) -> bool:
    """A message that only holds a question open: at most :data:`HOLD_MAX_WORDS` words, no digit."""
    body = _body(unit)
    return len(body.split()) <= HOLD_MAX_WORDS and not any(ch.isdigit() for ch in body)


def open_question(us: list[str], i: int, source: str) -> bool:
    """Message ``i`` of a transcript chunk is a question that no other speaker answers in the rest
    of the chunk: every later message by another speaker only holds it open (at most
    :data:`HOLD_MAX_WORDS` words, no digit: "hang on", "scrolling up"). Its answer, if any, is past
    the chunk's end, as when someone looks it up and answers a few messages on."""
    if source != "sessions" or not 0 <= i < len(us) or not asks(us[i]):
        return False
    who = _who(us[i])
    if not who:
        return False
    return all(holds(u) for u in us[i + 1:] if _who(u) not in ("", who))


def asker(us: list[str], best: list[int], source: str) -> str:
    """The speaker label of the chunk's open question (:func:`open_question`) among the units
    ``best`` (those matching the most query terms), or ""."""
    return next((_who(us[i]) for i in best if open_question(us, i, source)), "")


def _carried(prev: list[str], nxt: list[str]) -> int:
    """How many leading units of ``nxt`` repeat the end of ``prev`` (the chunker's overlap; the
    first carried unit may be the tail of a message cut in pieces)."""
    for k in range(min(len(prev), len(nxt)), 0, -1):
        if nxt[1:k] == prev[len(prev) - k + 1:] and prev[len(prev) - k].endswith(nxt[0]):
            return k
    return 0


def _note_lines(us: list[str], start: int, end: int) -> list[str] | None:
    """A note chunk's lines ``start``..``end`` from its units, or None when they are not one a
    line (a long line cut in pieces). A file's last chunk holds the empty piece after the final
    newline beyond its end line (``chunking.end_at_last_line``): left out."""
    n = end - start + 1
    if len(us) == n + 1 and us[-1] == "":
        return us[:n]
    return us if len(us) == n else None


def _dense(start: int, end: int, us: list[str]) -> bool:
    """Every JSONL line of the chunk's span holds one of its messages (so message i is line start + i)."""
    return bool(us) and us[0].startswith(SPEAKERS) and len(us) == end - start + 1


EDGE_THROUGH_MAX = 3
"""The most messages past a chunk's end shown after an open question: the other speakers' holds
("hang on", "lemme check") and the asker's own messages before the first message that answers."""


def _through(nxt: list[str], i: int, n_start: int, who: str) -> Neighbour | None:
    """From message ``i`` of the next chunk's ``nxt`` (its first line ``n_start``), the messages up
    to the first by a speaker other than ``who`` that does not only hold the question open, at
    most :data:`EDGE_THROUGH_MAX`; None when none is within them."""
    for j in range(i, min(len(nxt), i + EDGE_THROUGH_MAX)):
        w = _who(nxt[j])
        if w and w != who and not holds(nxt[j]):
            return Neighbour(n_start + j, "\n".join(nxt[i:j + 1]))
    return None


def _after(source: str, start: int, end: int, text: str, row: tuple[Any, ...] | None,
           who: str = "") -> Neighbour | None:
    if row is None:
        return None
    n_start, n_end, n_text = int(row[0]), int(row[1]), str(row[2])
    nxt = units(n_text, source)
    if source != "sessions":
        got_lines = _note_lines(nxt, n_start, n_end)
        if got_lines is None:  # a long line cut in pieces: lines unknown
            return None
        for line in range(end + 1, n_end + 1):
            got = got_lines[line - n_start]
            if got.strip():
                return Neighbour(line, got)
        return None
    if _dense(n_start, n_end, nxt):
        i = end + 1 - n_start
        if not 0 <= i < len(nxt):
            return None
        return (_through(nxt, i, n_start, who) if who else None) or Neighbour(end + 1, nxt[i])
    k = _carried(units(text, source), nxt) if n_start <= end else 0
    if k >= len(nxt) or not nxt[k].startswith(SPEAKERS):
        return None
    if k == 0 and n_start > end:
        return Neighbour(n_start, nxt[0])
    if k == len(nxt) - 1 and n_end > end:
        return Neighbour(n_end, nxt[k])
    return None


def _before(source: str, start: int, end: int, text: str, row: tuple[Any, ...] | None) -> Neighbour | None:
    if row is None:
        return None
    p_start, p_end, p_text = int(row[0]), int(row[1]), str(row[2])
    prev = units(p_text, source)
    if source != "sessions":
        prev_lines = _note_lines(prev, p_start, p_end)
        if prev_lines is None:
            return None
        for line in range(min(start - 1, p_end), p_start - 1, -1):
            got = prev_lines[line - p_start]
            if got.strip():
                return Neighbour(line, got)
        return None
    if _dense(p_start, p_end, prev):
        i = start - 1 - p_start
        return Neighbour(start - 1, prev[i]) if 0 <= i < len(prev) else None
    k = _carried(prev, units(text, source)) if p_end >= start else 0
    i = len(prev) - k - 1
    if i < 0 or not prev[i].startswith(SPEAKERS):
        return None
    if k == 0 and p_end < start:
        return Neighbour(p_end, prev[i])
    if i == 0 and p_start < start:
        return Neighbour(p_start, prev[0])
    return None


NEXT_SQL = ("SELECT start_line, end_line, text, rid FROM chunks WHERE path = ? AND source = ? AND start_line >= ?"
            " AND end_line > ? ORDER BY start_line, end_line LIMIT 1")
PREV_SQL = ("SELECT start_line, end_line, text, rid FROM chunks WHERE path = ? AND source = ? AND start_line < ?"
            " AND end_line <= ? ORDER BY start_line DESC, end_line DESC LIMIT 1")


def index_neighbours(conn: Any) -> Neighbours:
    """:data:`Neighbours` read from the chunks table of the open index ``conn``."""
    def find(path: str, source: str, start: int, end: int, text: str, before: bool,
             after: bool, who: str = "") -> tuple[Neighbour | None, Neighbour | None]:
        b = a = None
        if before and start > 1:
            prev = conn.execute(PREV_SQL, (path, source, start, end)).fetchone()
            b = _before(source, start, end, text, prev)
            if source == "sessions":
                b = _timed(conn, prev, b)
        if after:
            nxt = conn.execute(NEXT_SQL, (path, source, start, end)).fetchone()
            a = _after(source, start, end, text, nxt, who)
            if source == "sessions":
                a = _timed(conn, nxt, a)
        return b, a

    return find


WHEN_SQL = "SELECT first, line FROM chunk_days WHERE rid = ? AND line <= ? ORDER BY line DESC, first DESC LIMIT 1"


def _timed(conn: Any, chunk: tuple[Any, ...] | None, n: Neighbour | None) -> Neighbour | None:
    """``n`` (a message of the neighbouring ``chunk`` row: start, end, text, rid) with its time or
    day, where the index records it (:attr:`Neighbour.when`)."""
    if n is None or chunk is None or len(chunk) < 4:
        return n
    try:
        row = conn.execute(WHEN_SQL, (int(chunk[3]), n.line)).fetchone()
    except apsw.SQLError:  # an index of schema 5, without chunk_days: no time, as before
        return n
    if not row or not row[0]:
        return n
    first, line = str(row[0]), int(row[1])
    return Neighbour(n.line, n.text, first if line == n.line else first[:10])
