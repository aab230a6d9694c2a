"""What one ``memory_search`` answer hands an agent: citations, snippet size, result count,
the injection budget and the answer's metadata (OpenClaw's ``memory_search`` response).

- ``query.citations`` (the seeds' citations mode): ``on`` ends every snippet with
  ``Source: <path>#L<start>-L<end>``; ``auto`` (default) leaves the snippet as it is and the
  ``citation`` field carries the reference, except in a group or channel chat (the caller
  says which: ``chat_type``), where citations are suppressed as with ``off``: the seeds put
  citations in direct chats only; ``off`` empties ``citation`` and adds no source line
  (``path`` and the lines stay: ``memory_get`` needs them).
- Snippets keep to OpenClaw's 700 characters (``SNIPPET_MAX_CHARS``), the ``Source:`` line
  included; a longer one (qmd's, for one) is cut at a word boundary with ``…``
  (:func:`cut_at_word`).
- ``maxResults`` above :data:`MAX_RESULTS` is clamped to it (and the note says so), not refused.
- :func:`response_meta`: the provider and model that embedded the query, and whether the
  answer fell back (to keyword-only, or from qmd to the builtin index), with every answer.
- ``query.max_injected_chars``: at most that many snippet characters in one answer (the seeds
  use 4,000 for qmd, the default when ``backend = "qmd"``; unlimited for the builtin backend
  unless set). Results are kept best-first while they fit; the one that crosses the budget is
  cut (at a word boundary, with ``…``), the rest dropped, and the answer's note says so.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from memory_core.config import SNIPPET_MAX_CHARS, Settings
from memory_core.embeddings.catalog import keyword_only
from memory_core.query.results import SearchRun
from memory_core.storage.indexmeta import IndexRecord

QMD_DEFAULT_BUDGET = 4000
ELLIPSIS = "…"
MAX_RESULTS = 50
"""The most results one answer carries; more asked for is clamped to this (OpenClaw clamps too)."""
"""OpenClaw's ``SNIPPET_MAX_CHARS``: the longest snippet an answer carries, a ``Source:`` line included."""
CHAT_TYPES = ("direct", "group", "channel")


@dataclass(frozen=True)
class Shaped:
    results: list[dict[str, Any]]
    note: str = ""


def injection_budget(settings: Settings) -> int | None:
    if settings.query.max_injected_chars is not None:
        return settings.query.max_injected_chars
    return QMD_DEFAULT_BUDGET if settings.backend == "qmd" else None


def citations_mode(settings: Settings, chat_type: str | None = None) -> str:
    """The citations mode of one answer: ``auto`` in a group or channel chat is ``off``."""
    mode = settings.query.citations
    if mode == "auto" and chat_type in ("group", "channel"):
        return "off"
    return mode


def clamp_results(max_results: int | None) -> tuple[int | None, str]:
    """(the result count to ask for, a note when ``max_results`` was above :data:`MAX_RESULTS`)."""
    if max_results is not None and max_results > MAX_RESULTS:
        return MAX_RESULTS, f"maxResults {max_results} clamped to {MAX_RESULTS}"
    return max_results, ""


def _in_word(c: str) -> bool:
    """A letter or digit that a cut beside another one splits a word at (CJK, which has no
    spaces between words, may be cut between any two characters)."""
    return c.isalnum() and c < "\u2e80"


def cut_at_word(text: str, n: int) -> str:
    """``text`` in at most ``n`` characters: whole when it fits, else cut at a word boundary
    and ended with ``…`` (a cut inside a word showed agents half a name, "retryAfterSecon").
    The cut goes back to the last space or line break in the second half of the room; else,
    when it falls inside a word, to the nearest place before it between a word and anything
    else (``/``, ``.``, ``-``, a space); only a text with neither (one long hash) is cut
    inside its word."""
    if len(text) <= n:
        return text
    room = n - len(ELLIPSIS)
    if room <= 0:
        return ELLIPSIS[: max(0, n)]
    cut = room
    if not (text[cut - 1].isspace() or text[cut].isspace()):
        space = max(text.rfind(" ", 0, cut), text.rfind("\n", 0, cut))
        if space > room // 2:
            cut = space
        elif _in_word(text[cut - 1]) and _in_word(text[cut]):
            edge = next((i for i in range(cut - 1, 0, -1) if not (_in_word(text[i - 1]) and _in_word(text[i]))), 0)
            cut = max(space, edge) if max(space, edge) > 0 else cut
    return text[:cut].rstrip() + ELLIPSIS



def shape_results(results: list[dict[str, Any]], settings: Settings, chat_type: str | None = None) -> Shaped:
    """Apply the citations mode and the snippet limit, then the budget (which counts the
    snippets as sent)."""
    mode = citations_mode(settings, chat_type)
    out: list[dict[str, Any]] = []
    for r in results:
        r = dict(r)
        if mode == "on":
            source = f"\nSource: {r['citation']}"
            r["snippet"] = cut_at_word(r["snippet"].rstrip(), SNIPPET_MAX_CHARS - len(source)) + source
        else:
            r["snippet"] = cut_at_word(r["snippet"], SNIPPET_MAX_CHARS)
            if mode == "off":
                r["citation"] = ""
        out.append(r)
    budget = injection_budget(settings)
    if budget is None:
        return Shaped(out)
    kept: list[dict[str, Any]] = []
    used = 0
    cut = 0
    for r in out:
        left = budget - used
        n = len(r["snippet"])
        if n <= left:
            kept.append(r)
            used += n
            continue
        if left > len(ELLIPSIS):
            r["snippet"] = cut_at_word(r["snippet"], left)
            kept.append(r)
            used += len(r["snippet"])
            cut = 1
        break
    dropped = len(out) - len(kept)
    if not cut and not dropped:
        return Shaped(kept)
    parts = []
    if cut:
        parts.append("the last snippet was cut")
    if dropped:
        parts.append(f"{dropped} more result{'s' if dropped != 1 else ''} dropped")
    return Shaped(kept, f"answer cut to the injection budget of {budget} snippet characters: {' and '.join(parts)}"
                        " (memory_get reads more)")


def nothing_found_note(floor: float, counts: dict[str, int] | None, record: IndexRecord | None,
                       sources: list[str] | None, *, query: str = "", days_only: bool = False) -> str:
    """What an answer with no results says: what is actually the case. An empty index, or a
    source asked for that holds nothing (no transcripts indexed), is not "nothing matches".
    ``counts``: the index's chunks by source (None: unknown); ``record``: what it recorded;
    ``sources``: the sources asked for (None: all); ``days_only``: the query was only the days it
    names, searched by date alone."""
    if not query.strip():
        return "the query is empty: nothing was searched"
    if counts is not None:
        if not any(counts.values()):
            return ("the index holds nothing yet: no note or transcript is indexed (is the workspace right?"
                    " `memory-core index` indexes it; `memory-core status` shows what it holds)")
        built_from = set(record.sources if record is not None else [])
        empty = [s for s in (sources or []) if not counts.get(s)]
        if sources and len(empty) == len(set(sources)):
            what = {"sessions": "transcript", "memory": "note"}
            parts = []
            for s in dict.fromkeys(empty):
                name = what.get(s, s)
                if built_from and s not in built_from:
                    hint = " (`memory-core index --sessions` adds them)" if s == "sessions" else ""
                    parts.append(f"no {name} is indexed: the index was built from {', '.join(sorted(built_from))}"
                                 f" only{hint}")
                else:
                    parts.append(f"no {name} is indexed ({s} holds nothing: none was found when indexing)")
            return "; ".join(parts)
    if days_only:  # it was searched by date alone: no score was the cause
        return ("the question names a day and nothing else, and memory holds nothing of that day (or those days);"
                " ask about what happened, or name another day")
    return (f"nothing scored at least {floor:g} (min_score): the memory holds nothing that matches this"
            " well; try other words, or a lower min_score to see weaker matches")


_FALLBACK_FROM = re.compile(r"^fallback: (\S+)")


@dataclass(frozen=True)
class AnswerMeta:
    """What embedded an answer's query and how it ran (:func:`response_meta`)."""

    provider: str
    model: str | None
    backend: str
    mode: str
    fallback: dict[str, str] | None  # None, or {from, to, reason}: JSON as the answer carries it


def response_meta(record: IndexRecord | None, last: SearchRun, note: str, mode: str) -> AnswerMeta:
    """``provider``, ``model``, ``backend``, ``mode`` and ``fallback`` of one answer.

    ``record``: what the searched index recorded (None: nothing); ``last``: what the search did;
    ``note``: the searcher's provider note.
    ``fallback`` is ``None`` or ``{"from", "to", "reason"}``: ``to`` is ``"keyword"`` when an
    index with vectors answered keyword-only (the query could not be embedded), ``"builtin"``
    when qmd could not answer, or the provider the index was built with when that was its
    configured fallback.
    """
    rec = record if record is not None else IndexRecord()
    provider: str | None = rec.provider
    model = rec.model
    vectors = rec.has_vectors
    fallback: dict[str, str] | None = None
    built = rec.provider_reason or ""
    m = _FALLBACK_FROM.match(built)
    if m:
        fallback = {"from": m.group(1), "to": str(provider), "reason": built}
    if last.qmd_fallback:
        fallback = {"from": "qmd", "to": "builtin", "reason": last.qmd_fallback}
    elif last.backend == "qmd":
        provider, model = "qmd", f"qmd {last.qmd_mode or 'search'}"
        vectors = False
    if vectors and mode != "keyword" and last.embedded is False and not last.qmd_fallback:
        fallback = {"from": str(provider), "to": "keyword",
                    "reason": note or "the query could not be embedded; keyword-only results"}
    return AnswerMeta(provider=provider or "none", model=None if keyword_only(provider) else model,
                      backend=last.backend, mode=mode, fallback=fallback)
