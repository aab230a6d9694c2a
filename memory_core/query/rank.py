"""Ranking one query's candidates into results: what :meth:`memory_core.query.search.Searcher.rank` does.

:func:`rank_candidates` is the pipeline, in order (the pure steps are in :mod:`memory_core.query.ranking`,
the named day's lift in :mod:`memory_core.query.dates`)::

    fuse (ranking.fuse_calibrated, or ranking.fuse) ─ a named day's lift (dates.lift_named_days)
      ─ the answer's best relevance >= min_score, the others >= result_floor ─ temporal decay ─ dedupe ─ MMR
      ─ placed by score + the file's relevance as a whole (hybrid, query.file_support), each file's
        further chunks after other files' (query.file_diversity) ─ top max_results
      ─ snippets and citations (SearchResult)

Pure given the candidates and the query settings: evaluation replays it per setting.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

from memory_core.config import SNIPPET_MAX_CHARS, QuerySettings
from memory_core.query import ranking
from memory_core.query.answers import cut_at_word
from memory_core.query.dates import date_from_path, lift_named_days, said_at
from memory_core.query.edges import EDGE_MAX_CHARS, Neighbours, asker, edge_runs, units
from memory_core.query.retrieval import Candidates
from memory_core.sources.sessions import LABEL_PREFIXES, normalize_session_text
from memory_core.storage import textsearch

ELLIPSIS = "…"


@dataclass(frozen=True)
class SearchResult:
    path: str
    start_line: int
    end_line: int
    score: float
    snippet: str
    source: str
    citation: str
    vector_score: float = 0.0
    text_score: float = 0.0
    match: str = "vector"  # how it matched: "keyword", "vector" or "both"
    # ISO date the chunk was written, when known: a daily note's (its name), a transcript message's;
    # None for a note without a date in its name (an evergreen note: its file's mtime is when it
    # was last copied, not written: a fresh clone said "written today" of every one)
    date: str | None = None

    def to_dict(self) -> dict[str, object]:
        return asdict(self)

    def to_agent(self) -> dict[str, object]:
        """OpenClaw's ``memory_search`` result fields (``path, startLine, endLine, score, snippet,
        source, citation``), then what memory-core adds (``match``, ``date``, the raw side scores),
        each once: no snake_case copies of the line numbers (an agent paid for them twice)."""
        return {
            "path": self.path, "startLine": self.start_line, "endLine": self.end_line, "score": self.score,
            "snippet": self.snippet, "source": self.source, "citation": self.citation,
            "match": self.match, "date": self.date,
            "vector_score": self.vector_score, "text_score": self.text_score,
        }


AGENT_RESULT_KEYS = ("path", "startLine", "endLine", "score", "snippet", "source", "citation", "match", "date",
                     "vector_score", "text_score")


# a transcript chunk holds one message per line ("User: ..."); a message longer than the chunker's
# max_chars was cut into pieces at a fixed width, each on its own line (inside a word:
# "func retryAfterSecon\nds"): a line break not followed by a speaker is such a cut
_MESSAGE_CUT = re.compile(r"\n(?!(?:User|Assistant): )")


def joined_messages(text: str) -> str:
    """A transcript chunk's text with each message whole on its line: the chunker's fixed-width
    cuts of a long message are joined again (they fell inside words), and a chunk that starts
    or ends inside a message (at such a cut) starts or ends with ``…`` at a word boundary instead
    of half a word."""
    text = _MESSAGE_CUT.sub("", text)
    if text and not text.startswith(LABEL_PREFIXES):  # begins inside a message
        head, sep, rest = text.partition(" ")
        text = ELLIPSIS + (rest if sep and rest else head)
    last = text.rsplit("\n", 1)[-1]
    if last and not last.startswith(LABEL_PREFIXES) and last[-1].isalnum():  # ends inside a message, maybe mid-word
        body, sep, _ = text.rpartition(" ")
        if sep and body:
            text = body + " " + ELLIPSIS
    return text


Messages = Callable[[str, int, int], "list[str] | None"]
"""``(path, start_line, end_line)`` -> a transcript's messages on those JSONL lines as a person reads
them, each with its own line breaks (:func:`memory_core.query.reading.transcript_messages`), or None."""


def _stamped_text(h: ranking.Hit, messages: Messages | None) -> tuple[str, list[tuple[int, str]]]:
    """What a snippet is cut from: a note's chunk; a transcript chunk's messages with their own line
    breaks when ``messages`` can read them (the index holds each message on one line, whitespace
    collapsed, as the reference hashes it), else its indexed messages, whole (:func:`joined_messages`);
    and in a transcript chunk that spans days (``h.day_starts``) each later
    day's first message starts with its own time (``[2026-03-06 08:10 UTC] User: ...``): the
    chunk's one stamp told the time of its first message only, and a message said two days later
    was read as said then. Also the (offset, stamp) of each such mark in the text."""
    if h.source != "sessions":
        return h.text, []
    joined = joined_messages(h.text)
    if messages is not None:
        got = messages(h.path, h.start_line, h.end_line)
        # the transcript as it is now must still say what was indexed (a file rewritten since,
        # its lines shifted, would show other messages under this citation): every whole message
        # of the chunk is one of them, once collapsed
        if got and _still_says(joined, got):
            got = list(got)
            at: dict[int, str] = {}
            for when, line in h.day_starts:
                k = len(messages(h.path, h.start_line, line - 1) or []) if line > h.start_line else 0
                if 0 < k < len(got) and k not in at:
                    at[k] = said_at(h.source, when)
                    got[k] = at[k] + got[k]
            marks: list[tuple[int, str]] = []
            pos = 0
            for k, m in enumerate(got):
                if k in at:
                    marks.append((pos, at[k]))
                pos += len(m) + 1
            return "\n".join(got), marks
    return joined, []


def _stamp_at(h: ranking.Hit, text: str, marks: list[tuple[int, str]], shown: str) -> str:
    """The stamp for a snippet showing ``shown`` (a verbatim piece of ``text``): the time of the
    day in force where it begins (the chunk's first, or a later day's mark before it); "" when it
    begins with that day's own mark."""
    stamp = said_at(h.source, h.date)
    if not marks:
        return stamp
    at = text.find(shown)
    for pos, mark in marks:
        if pos > at:
            break
        stamp = "" if pos == at else mark
    return stamp


def _still_says(joined: str, shown: list[str]) -> bool:
    """Every whole message of a transcript chunk's indexed text (``joined``: one a line, the first
    and last maybe partial, marked by ``…``) is one of ``shown`` with its whitespace collapsed."""
    flat = {normalize_session_text(m) for m in shown}
    lines = joined.split("\n")
    whole = [ln for ln in lines if ln.startswith(LABEL_PREFIXES) and not ln.endswith(ELLIPSIS)]
    return bool(whole) and all(ln in flat for ln in whole)


def _dated_snippet(h: ranking.Hit, terms: list[str], text: str, marks: list[tuple[int, str]] | None = None) -> str:
    """The snippet of ``text`` (:func:`_stamped_text`); a transcript's starts with when it was said
    (``[2026-11-02 15:20 UTC] ``): the time of the day it begins in."""
    stamp = said_at(h.source, h.date)
    if not stamp:
        return ranking.make_snippet(text, terms, SNIPPET_MAX_CHARS)
    shown = ranking.make_snippet(text, terms, SNIPPET_MAX_CHARS - len(stamp))
    return _stamp_at(h, text, marks or [], shown) + shown


def _edge_excerpt(text: str, room: int, *, before: bool, after: bool) -> str:
    """The excerpt of ``text`` that keeps the edge a neighbour is added at: its end (``after``)
    or its start (``before``), whole lines where they fit; "" when that edge's line does not fit."""
    if len(text) <= room:
        return text
    if before and after or room <= 0:
        return ""
    if after:
        tail = text[len(text) - room:]
        cut = tail.find("\n")
        if cut < 0:  # the last line alone is longer than the room: its end, from a word
            return ""
        return tail[cut + 1:]
    head = text[:room]
    cut = head.rfind("\n")
    return head[:cut] if cut > 0 else ""


DAY_CONTEXT_CHARS = 200
"""At most this much of the message before the named day's first one stays in a snippet that must
skip the chunk's start to show that day (:func:`_day_snippet`)."""


def _day_snippet(h: ranking.Hit, messages: Messages | None) -> str | None:
    """The snippet of a transcript chunk that began the day before the day the query names
    (``h.day_start``): that day's first message is marked with its time
    (``[2026-01-17 00:40 UTC]``) and always shown, after the chunk's start when both fit in the
    snippet, else after the message before it (cut to :data:`DAY_CONTEXT_CHARS`, from ``…``): the
    answer sent past midnight, or a session that went on for days, shows the day asked about and
    what led to it. None when the messages cannot be read or no longer say what was indexed; the
    cited lines stay the chunk's."""
    if h.day_start is None or messages is None or h.source != "sessions":
        return None
    when, line = h.day_start
    shown = messages(h.path, h.start_line, h.end_line)
    k = len(messages(h.path, h.start_line, line - 1) or [])
    if not shown or not 0 < k < len(shown) or not _still_says(joined_messages(h.text), shown):
        return None
    lines = [*shown[:k], said_at(h.source, when) + shown[k], *shown[k + 1:]]
    stamp = said_at(h.source, h.date)
    room = SNIPPET_MAX_CHARS - len(stamp)
    if len("\n".join(lines[:k + 1])) <= room:
        return stamp + ranking.make_snippet("\n".join(lines), [], room)
    prev = lines[k - 1]
    if len(prev) > DAY_CONTEXT_CHARS:  # its end, from a word: what led to the day's first message
        tail = prev[-DAY_CONTEXT_CHARS:]
        prev = tail[tail.find(" ") + 1:] if " " in tail else tail
    return ranking.make_snippet(ELLIPSIS + " " + prev + "\n" + "\n".join(lines[k:]), [], SNIPPET_MAX_CHARS)


def _edge_snippet(h: ranking.Hit, terms: list[str], neighbours: Neighbours | None,
                  messages: Messages | None = None) -> tuple[str, int, int]:
    """The snippet and cited lines of ``h``: :func:`_day_snippet` for a chunk that began the day
    before the named one; else :func:`_dated_snippet`, with the neighbouring message or line on the
    side where the chunk's best match sits (:mod:`memory_core.query.edges`: the budget)."""
    day = _day_snippet(h, messages)
    if day is not None:
        return day, h.start_line, h.end_line
    text, marks = _stamped_text(h, messages)
    plain = (_dated_snippet(h, terms, text, marks), h.start_line, h.end_line)
    if neighbours is None or h.source not in ("sessions", "memory") or not terms:
        return plain
    us = units(h.text, h.source)
    hits = [len({m[2] for m in ranking._find_matches(u, terms)}) for u in us]
    best = max(hits, default=0)
    if best == 0:
        return plain
    joined = joined_messages(h.text) if h.source == "sessions" else h.text
    # a transcript chunk cut inside a message has its rest beside it, not another message
    head, tail = edge_runs(us, h.source)
    want_b = max(hits[:head]) == best and not joined.startswith(ELLIPSIS)
    # a question no one has answered by the chunk's end: its answer is past the edge, wherever it sits
    who = asker(us, [i for i, n in enumerate(hits) if n == best], h.source)
    want_a = (max(hits[-tail:]) == best or bool(who)) and not joined.endswith(ELLIPSIS)
    if not (want_b or want_a):
        return plain
    before, after = neighbours(h.path, h.source, h.start_line, h.end_line, h.text, want_b, want_a, who)
    stamp = said_at(h.source, h.date)
    # a neighbour said on another day than the chunk's text beside it carries its own time
    last_day = (marks[-1][1][1:11] if marks else (h.date or "")[:10])
    add_b = cut_at_word(before.text, EDGE_MAX_CHARS) if before is not None else ""
    if add_b and before is not None and before.when and before.when[:10] != (h.date or "")[:10]:
        add_b = said_at(h.source, before.when) + add_b
    add_a = cut_at_word(after.text, EDGE_MAX_CHARS) if after is not None else ""
    if add_a and after is not None and after.when and after.when[:10] != last_day:
        add_a = said_at(h.source, after.when) + add_a
    for b, a in ((add_b, add_a), ("", add_a), (add_b, "")):
        if not (a or b):
            continue
        room = SNIPPET_MAX_CHARS - len(stamp) - (len(b) + 1 if b else 0) - (len(a) + 1 if a else 0)
        body = _edge_excerpt(text.strip(), room, before=bool(b), after=bool(a))
        if not body:
            continue  # the edge's message or line does not fit beside its neighbour
        start = before.line if b and before is not None else h.start_line
        end = after.line if a and after is not None else h.end_line
        # the stamp goes on the chunk's text, not on the message added before it (said earlier: it
        # was shown under the chunk's time)
        return (b + "\n" if b else "") + _stamp_at(h, text, marks, body) + body + ("\n" + a if a else ""), start, end
    return plain


def _written_on(h: ranking.Hit) -> str | None:
    """The day a result was written, as the answer shows it (:attr:`SearchResult.date`): a
    transcript chunk's message or header time (``YYYY-MM-DDTHH:MM``), a day in the file's name,
    else None. A file's mtime says when it was copied, not written (a fresh clone showed every
    undated note and transcript as "written today"); it still places an undated file on a day a
    query names and ages it for temporal decay."""
    if h.source == "sessions" and h.date and "T" in h.date:
        return h.date
    d = date_from_path(h.path)
    return d.isoformat() if d is not None else None


def wants_file_support(q: QuerySettings, cands: Candidates) -> bool:
    """Whether a hybrid ranking of these candidates places results by their file's relevance as a
    whole (``query.file_support``, a signal of the vector side), and so whether
    :meth:`~memory_core.query.search.Searcher.retrieve` reads the files' cosines for it: the vector
    side answered and the model reads the query; not when the vector side has no weight, when the
    query names a day (that day's chunks come first), nor when it names an identifier, which is
    matched verbatim (the model finds LRK-4417 as near to "LRK-4471" as the note that names it)."""
    return (q.file_support > 0 and q.normalised_weights()[0] > 0 and cands.embedded and cands.dates is None
            and cands.calibration.reads(cands.query) and not ranking.names_identifier(cands.query))


def rank_candidates(q: QuerySettings, cands: Candidates, *, max_results: int | None = None,
                    min_score: float | None = None, mode: str = "hybrid",
                    neighbours: Neighbours | None = None, messages: Messages | None = None) -> list[SearchResult]:
    """Score, threshold, decay, dedupe, diversify and cut ``cands``; make snippets and citations.

    ``neighbours``: where a result whose best match sits at its chunk's edge finds the message or
    line beside it (``query.edge_lines``; :mod:`memory_core.query.edges`); None: snippets of the
    chunk alone. ``messages``: where a transcript result's messages are read with their own line
    breaks (:data:`Messages`); None: the indexed text, one line a message.

    ``min_score`` applies to the relevance (the fused score) before temporal decay; decay and
    MMR only reorder what passed it. ``mode="vector"`` / ``"keyword"`` rank one side alone.
    Pure given the candidates and ``q`` (the query settings): evaluation replays it per setting.
    """
    max_results = q.max_results if max_results is None else max(1, int(max_results))
    dated = False  # a day the query names lifted its chunks (none: ranked as a query naming no day)
    by_support = q.by_support(min_score) and q.fusion == "calibrated"
    min_score = q.threshold(min_score)
    gate = min_score  # what the answer's best result must reach
    vec = cands.vector if mode != "keyword" else []
    kw = cands.keyword if mode != "vector" else []
    # the vector side answered and the model can read the query (else its cosines are noise)
    readable = cands.embedded and cands.calibration.reads(cands.query)
    if q.fusion == "calibrated":
        # the union holds both sides and the chunks of a day the query names (neither side's)
        union = cands.union or [*cands.vector, *(h for h in cands.keyword if not h.in_vector)]
        if mode == "hybrid":
            pool = union
            vw, tw = q.normalised_weights() if readable else (0.0, 1.0)
            if vw > 0 and tw > 0 and ranking.names_identifier(cands.query):
                vw, tw = vw * (1 - ranking.IDENTIFIER_SHIFT), tw + vw * ranking.IDENTIFIER_SHIFT
        elif mode == "vector":
            pool, vw, tw = [h for h in union if h.in_vector or not h.in_keyword], 1.0, 0.0
        else:
            pool, vw, tw = [h for h in union if h.in_keyword or not h.in_vector], 0.0, 1.0
        hits = ranking.fuse_calibrated(pool, cands.calibration, cands.idf_total,
                                       vector_weight=vw, text_weight=tw, corpus_coverage=cands.corpus_coverage,
                                       keyword_steepness=ranking.keyword_steepness(cands.query))
        if cands.dates is not None:  # the query names a day: what was written that day comes first
            dated = lift_named_days(hits, cands.dates, min_score)
        if by_support:
            # min_score unset: it empties only the answer to a query memory does not support
            best_cos = max((h.vector_score for h in union), default=None) if readable else None
            # a query of stop words only ("what did we do?") has no words memory could hold: not supported
            if cands.idf_total > 0 and ranking.query_supported(cands.corpus_coverage, best_cos, cands.calibration,
                                                               cands.knows_absent_words):
                gate = 0.0
    elif not vec or not kw:
        hits = ranking.fuse(vec, kw, method=q.fusion, vector_weight=1.0 if vec else 0.0,
                            text_weight=1.0 if kw else 0.0)
    else:
        vw, tw = q.normalised_weights()
        hits = ranking.fuse(vec, kw, method=q.fusion, vector_weight=vw, text_weight=tw)
    # relevance, before decay: min_score decides whether memory holds an answer (its best result),
    # result_floor which of the rest it lists
    hits = ranking.answer_threshold(hits, gate, min(q.result_floor, min_score))
    for h in hits:
        h.relevance = h.score
    if q.temporal_decay.enabled:
        hits = ranking.apply_temporal_decay(hits, q.temporal_decay.half_life_days, now=time.time(),
                                            floor=q.temporal_decay.floor)
    hits = ranking.dedupe_overlapping(hits)
    if q.mmr.enabled:
        hits = ranking.mmr_rerank(hits, q.mmr.lambda_)
    # one side alone keeps exactly that side's order (so does a hybrid search the vector side did not
    # answer: a keyword-only index answers as keyword mode); a named day's own chunks stay before
    # the other days' (dates.lift_named_days), which a further chunk's lower placing would undo
    if mode == "hybrid" and cands.embedded and not dated:
        # weighed by the share of candidate files with several chunks (retrieval.multi_chunk_share)
        weight = q.file_support * cands.multi_chunk_share
        lift = ({p: weight * v for p, v in ranking.file_support(cands.file_cosines, cands.calibration).items()}
                if wants_file_support(q, cands) else None)
        hits = ranking.diversify_files(hits, q.file_diversity, lift)
    hits = hits[:max_results]
    terms = textsearch.query_terms(cands.query) or cands.query.split() if hits else []
    if q.edge_lines <= 0:
        neighbours = None
    out = []
    for h in hits:
        snippet, start, end = _edge_snippet(h, terms, neighbours, messages)
        out.append(SearchResult(
            path=h.path, start_line=start, end_line=end, score=round(float(h.relevance), 6),
            snippet=snippet, source=h.source, citation=f"{h.path}#L{start}-L{end}",
            vector_score=round(float(h.vector_score), 6), text_score=round(float(h.text_score), 6),
            match=ranking.match_kind(h) if mode == "hybrid" or h.date_lifted else mode,
            date=_written_on(h),
        ))
    return out
