"""Ranking of memory search results: score fusion, temporal decay, MMR, snippets, dedupe.

All functions are pure and never mutate their inputs (they return new :class:`Hit` objects or
new lists). The searcher's pipeline (``memory_core.query.rank.rank_candidates``)::

    candidates of both sides ─ fuse_calibrated() (or fuse(), query.fusion) ─ a named day's lift (dates)
      ─ answer_threshold() ─ apply_temporal_decay() ─ dedupe_overlapping() ─ mmr_rerank() ─ diversify_files()
      ─ top max_results ─ make_snippet()

``min_score`` (``DEFAULT_MIN_SCORE``, 0.15) tests the relevance of the answer's best result before
decay, ``result_floor`` (``DEFAULT_RESULT_FLOOR``, 0) the others' (:func:`answer_threshold`); decay
(off by default) and MMR only reorder what passed. With ``query.min_score`` unset (the default),
the threshold applies only to a query memory does not support (:func:`query_supported`).

Default fusion, ``fuse_calibrated`` (docs/search.md, "Calibrated scores"): each hit is scored
from its own raw scores, so a score means the same whatever else was found::

    p_v = vector_relevance(cosine): a logistic curve, 0.05 at the model's unrelated cosine, 0.95 at
          a clear match (``KNOWN_COSINE_CALIBRATION``, else from the index's background cosine),
          times 0.7-1 by the query's corpus coverage (``UNSEEN_QUERY_VECTOR_SHARE``)
    p_t = keyword_relevance(bm25) = x / (x + 0.5) * coverage, x = bm25 / (sum of the query's IDF);
          in hybrid mode x^s / (x^s + 0.5^s) * coverage, s from 1 (at most 5 content words) to 2
          (7 and more: ``keyword_steepness``), and at least 0.8 * coverage for a chunk holding an
          identifier of the query
    relevance = 0.7 * (w_v * p_v + w_t * p_t) + 0.3 * max(p_v, p_t)     (``FUSION_MAX_SHARE``)

Weights ``DEFAULT_VECTOR_WEIGHT`` / ``DEFAULT_TEXT_WEIGHT`` (0.5 / 0.5, normalised to sum 1); a
query naming an identifier moves 0.3 of the vector weight to the keyword side; one-side modes
use that side alone. So 0.15 is an absolute floor: a query nothing in memory matches can get
no results (the searcher then says so).

Older fusions, ``fuse`` (``query.fusion = "minmax"`` or ``"rrf"``; docs/search.md, "Older
fusions"). ``"minmax"`` is an anchored, normalised convex combination; each side places its
candidates on [0, 1] and scales them by its confidence ``c_s`` in its best hit::

    vector position  m_v(x) = 1 - (T_v - x) / ((1 + TAIL_PAD) * (T_v - B_v))   (1 if T_v == B_v)
    text position    m_t(h) = bm25(h) / bm25(best hit)
    anchor           A_s    = ANCHOR_FLOOR + (1 - ANCHOR_FLOOR) * c_s
    fused(h)         = w_v * A_v * m_v(h) + w_t * A_t * m_t(h)                  (absent side: 0)

with ``T_v`` / ``B_v`` the best / worst cosine of the vector pool, ``c_t`` the best hit's
``bm25_rank_to_score`` and ``c_v = min(1, ((T_v - L_v) / (1 - L_v)) / VECTOR_HEADROOM_REF)``,
``L_v`` the pool's median cosine (``c_v = 0.5`` for a pool of fewer than 4). These scores are
relative to the candidates: the best hit of either side scores at least ``ANCHOR_FLOOR * w``
(0.25 at 0.5 / 0.5), so a min_score up to that never empties a list that has a candidate. ``"rrf"``:
``sum_s w_s * (k + 1) / (k + rank_s)``, reciprocal rank fusion rescaled so rank 1 on both sides
is 1.0 (k = ``DEFAULT_RRF_K``).
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, date, datetime

from memory_core.config import (  # the defaults are the settings model's; documented and measured here
    DEFAULT_DECAY_FLOOR,
    DEFAULT_MIN_SCORE,
    DEFAULT_RESULT_FLOOR,
    DEFAULT_TEXT_WEIGHT,
    DEFAULT_VECTOR_WEIGHT,
    SNIPPET_MAX_CHARS,
    SUPPORT_MIN_COVERAGE,
)
from memory_core.query.dates import (  # re-exported: dates decides what a path dates
    date_from_path,
    is_evergreen,
)
from memory_core.storage.textsearch import is_stop_word, keyword_tokens, query_terms

__all__ = [
    "ANCHOR_FLOOR",
    "DEFAULT_MIN_SCORE",
    "DEFAULT_RESULT_FLOOR",
    "DEFAULT_RRF_K",
    "DEFAULT_TEXT_WEIGHT",
    "DEFAULT_VECTOR_WEIGHT",
    "SNIPPET_MAX_CHARS",
    "TAIL_PAD",
    "VECTOR_HEADROOM_REF",
    "Hit",
    "answer_threshold",
    "query_supported",
    "apply_temporal_decay",
    "bm25_rank_to_score",
    "date_from_path",
    "dedupe_overlapping",
    "diversify_files",
    "fuse",
    "is_evergreen",
    "jaccard",
    "make_snippet",
    "merge_hybrid_reference",
    "mmr_rerank",
    "normalize_weights",
    "temporal_decay_multiplier",
]

DEFAULT_RRF_K = 60

TAIL_PAD = 0.25
"""Pool-range padding below the worst candidate: the worst candidate's position is 0.2, not 0."""
ANCHOR_FLOOR = 0.5
"""A side's best hit gets at least this share of the side's weight, however weak the side is."""
VECTOR_HEADROOM_REF = 0.2
"""Share of the headroom above the pool median at which vector confidence saturates to 1."""
_MIN_POOL_FOR_BACKGROUND = 4
_DAY_MS = 86_400_000


@dataclass(slots=True)
class Hit:
    """One search result (a chunk), as produced by either retrieval side and by fusion.

    ``vector_score`` is the raw cosine similarity (1 - cosine distance, 0 if not a vector hit);
    ``text_score`` is ``bm25_rank_to_score(bm25)`` (0 if not a keyword hit); ``score`` is the
    ranking score after fusion / decay. ``text`` is the original chunk text (not the segmented
    FTS column); ``snippet`` the text shown to the caller. ``mtime_ms`` is the source file's
    modification time in epoch milliseconds, used by temporal decay for undated files.
    """

    id: str
    path: str
    source: str
    start_line: int
    end_line: int
    text: str
    vector_score: float = 0.0
    text_score: float = 0.0
    score: float = 0.0
    snippet: str = ""
    mtime_ms: int | None = None
    bm25: float = 0.0  # FTS5 -bm25() (0: no query term in the chunk)
    in_vector: bool = False  # among the vector side's nearest candidates
    in_keyword: bool = False  # among the keyword side's candidates
    relevance: float = 0.0  # calibrated relevance before decay / MMR (what min_score tests)
    date: str | None = None  # ISO date the chunk was written (see memory_core.query.dates)
    rid: int = -1  # the chunk's row id in the index
    has_identifier: bool = False  # contains an identifier of the query verbatim (ranking.identifiers)
    date_lifted: bool = False  # passed min_score only because it was written on the day the query names
    day_start: tuple[str, int] | None = None  # the named day's first message (time, JSONL line), in a
    # transcript chunk that began the day before (dates.Dater.day_start): its snippet shows it (rank._day_snippet)
    # a transcript chunk that spans days: each later (UTC) day's first message (time, JSONL line), so its
    # snippet stamps it with its own time, not the chunk's first (dates.Dater.day_starts, rank._stamped_text)
    day_starts: tuple[tuple[str, int], ...] = ()


# ---------------------------------------------------------------------------------------------
# Scores and fusion
# ---------------------------------------------------------------------------------------------
def bm25_rank_to_score(rank: float) -> float:
    """FTS5 ``bm25()`` (negative, lower is better) -> score in (0, 1], higher is better.

    Not finite -> 0.001; ``rank < 0`` -> r / (1 + r) with r = -rank; else 1 / (1 + rank).
    0 -> 1.0, 1 -> 0.5, 10 -> 0.0909, -1 -> 0.5, -4.2 -> 0.8077.
    """
    if not math.isfinite(rank):
        return 0.001
    if rank < 0:
        r = -rank
        return r / (1 + r)
    return 1 / (1 + rank)


def normalize_weights(vector_weight: float, text_weight: float) -> tuple[float, float]:
    """Clamp each weight to [0, 1] and scale them to sum 1 (both 0 -> 0.5 / 0.5)."""
    vw = _clamp01(vector_weight)
    tw = _clamp01(text_weight)
    total = vw + tw
    if total <= 0:
        return 0.5, 0.5
    return vw / total, tw / total


def merge_hybrid_reference(
    vector_hits: Iterable[Hit], keyword_hits: Iterable[Hit], vector_weight: float, text_weight: float
) -> list[Hit]:
    """The reference's ``mergeHybridResults``: raw weighted sum, kept for comparison.

    Merge by id (a keyword hit on a known id sets ``text_score`` and replaces a non-empty
    snippet); ``score = vector_weight * vector_score + text_weight * text_score``; stable sort
    descending. Weights are used as given.
    """
    by_id: dict[str, Hit] = {}
    for h in vector_hits:
        by_id[h.id] = replace(h, text_score=0.0)
    for h in keyword_hits:
        existing = by_id.get(h.id)
        if existing is not None:
            existing.text_score = h.text_score
            if h.snippet:
                existing.snippet = h.snippet
        else:
            by_id[h.id] = replace(h, vector_score=0.0)
    merged = [
        replace(h, score=vector_weight * h.vector_score + text_weight * h.text_score) for h in by_id.values()
    ]
    merged.sort(key=lambda h: h.score, reverse=True)
    return merged


def _clamp01(x: float) -> float:
    if not math.isfinite(x):
        return 0.0
    return min(1.0, max(0.0, x))


def _best_per_id(hits: Iterable[Hit], attr: str) -> list[Hit]:
    """Hits sorted by ``attr`` descending (stable), one per id (the best)."""
    ordered = sorted(hits, key=lambda h: _finite_or(getattr(h, attr), -math.inf), reverse=True)
    seen: set[str] = set()
    out: list[Hit] = []
    for h in ordered:
        if h.id not in seen:
            seen.add(h.id)
            out.append(h)
    return out


def _finite_or(x: float, default: float) -> float:
    return x if math.isfinite(x) else default


def _positions(values: Sequence[float]) -> list[float]:
    """Padded min-max positions: best 1.0, worst TAIL_PAD/(1+TAIL_PAD), non-finite 0."""
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return [0.0] * len(values)
    top, bottom = max(finite), min(finite)
    span = (1 + TAIL_PAD) * (top - bottom)
    if span <= 1e-12:
        return [1.0 if math.isfinite(v) else 0.0 for v in values]
    return [(1 - (top - v) / span) if math.isfinite(v) else 0.0 for v in values]


def _vector_confidence(cosines: Sequence[float]) -> float:
    finite = [v for v in cosines if math.isfinite(v)]
    if len(finite) < _MIN_POOL_FOR_BACKGROUND:
        return 0.5
    import statistics  # here: the vector side only (statistics, fractions, decimal: ~3 ms of a keyword-only start)

    top = max(finite)
    background = statistics.median(finite)
    headroom = max(1e-9, 1.0 - background)
    return _clamp01((top - background) / headroom / VECTOR_HEADROOM_REF)


def _text_confidence(scores: Sequence[float]) -> float:
    finite = [v for v in scores if math.isfinite(v)]
    return _clamp01(max(finite)) if finite else 0.0


def _bm25_shares(scores: Sequence[float]) -> list[float]:
    """Keyword positions: each hit's BM25 as a share of the best hit's BM25 (non-finite -> 0).

    ``text_score`` is ``r / (1 + r)`` of the (positive) BM25 ``r``; it is mapped back to ``r``,
    so the share is linear in BM25 and does not depend on how many candidates were fetched.
    """
    raw = [_bm25_from_score(t) if math.isfinite(t) else -1.0 for t in scores]
    top = max(raw, default=0.0)
    if top <= 0.0:
        return [1.0 if r >= 0.0 else 0.0 for r in raw]
    return [r / top if r >= 0.0 else 0.0 for r in raw]


def _bm25_from_score(t: float) -> float:
    """Inverse of :func:`bm25_rank_to_score` on its ``rank < 0`` branch: ``t / (1 - t)``."""
    t = min(max(t, 0.0), 1.0 - 1e-12)
    return t / (1.0 - t)


def _merge(vec: list[Hit], kw: list[Hit], score: Callable[[str], float]) -> list[Hit]:
    """One new hit per id with both raw side scores and ``score(id)``; inputs are not mutated."""
    kw_by_id = {h.id: h for h in kw}
    out: list[Hit] = []
    for h in vec:
        k = kw_by_id.get(h.id)
        if k is None:
            out.append(replace(h, text_score=0.0, score=score(h.id)))
        else:
            out.append(replace(
                h, text_score=k.text_score, score=score(h.id), snippet=k.snippet or h.snippet,
                text=h.text or k.text, mtime_ms=h.mtime_ms if h.mtime_ms is not None else k.mtime_ms,
            ))
    seen = {h.id for h in vec}
    out.extend(replace(h, vector_score=0.0, score=score(h.id)) for h in kw if h.id not in seen)
    return out


def fuse(
    vector_hits: Iterable[Hit],
    keyword_hits: Iterable[Hit],
    *,
    method: str = "minmax",
    vector_weight: float = 0.5,
    text_weight: float = 0.5,
    rrf_k: int = DEFAULT_RRF_K,
) -> list[Hit]:
    """Fuse vector and keyword candidates into one list sorted by ``score`` (in [0, 1]).

    ``vector_hits`` carry ``vector_score`` (cosine similarity); ``keyword_hits`` carry
    ``text_score`` (:func:`bm25_rank_to_score`). Hits are merged by id (a non-empty keyword
    snippet wins, as in the reference); the returned hits keep both raw side scores. See the
    module docstring for the ``"minmax"`` (default, anchored min-max convex combination) and
    ``"rrf"`` (rescaled reciprocal rank fusion) formulas. Ties keep vector order, then keyword.
    """
    if method not in ("minmax", "rrf"):
        raise ValueError(f"method must be 'minmax' or 'rrf', not {method!r}")
    vec = _best_per_id(vector_hits, "vector_score")
    kw = _best_per_id(keyword_hits, "text_score")
    vw, tw = normalize_weights(vector_weight if vec else 0.0, text_weight if kw else 0.0)
    if not vec and not kw:
        return []
    if not vec or not kw:
        vw, tw = (1.0, 0.0) if vec else (0.0, 1.0)

    vec_part: dict[str, float] = {}
    kw_part: dict[str, float] = {}
    if method == "rrf":
        k = max(0, int(rrf_k))
        for rank, h in enumerate(vec, start=1):
            vec_part[h.id] = (k + 1) / (k + rank)
        for rank, h in enumerate(kw, start=1):
            kw_part[h.id] = (k + 1) / (k + rank)
    else:
        if vec:
            cos = [h.vector_score for h in vec]
            anchor = ANCHOR_FLOOR + (1 - ANCHOR_FLOOR) * _vector_confidence(cos)
            for h, m in zip(vec, _positions(cos), strict=True):
                vec_part[h.id] = anchor * m
        if kw:
            ts = [h.text_score for h in kw]
            anchor = ANCHOR_FLOOR + (1 - ANCHOR_FLOOR) * _text_confidence(ts)
            for h, m in zip(kw, _bm25_shares(ts), strict=True):
                kw_part[h.id] = anchor * m

    def fused(i: str) -> float:
        return _clamp01(vw * vec_part.get(i, 0.0) + tw * kw_part.get(i, 0.0))

    out = _merge(vec, kw, fused)
    out.sort(key=lambda h: h.score, reverse=True)
    return out


# ---------------------------------------------------------------------------------------------
# Calibrated (absolute) scores: the default fusion
# ---------------------------------------------------------------------------------------------
KNOWN_COSINE_CALIBRATION: dict[str, tuple[float, float]] = {
    # all-MiniLM-L6-v2: unrelated text sits at cosine 0.0-0.35 (probes with no relevant document
    # topped out at 0.35-0.45 on cosqa and the example notes), clear matches at 0.55-0.8.
    "all-MiniLM-L6-v2": (0.2, 0.8),
    "sentence-transformers/all-MiniLM-L6-v2": (0.2, 0.8),
}
"""(low, high) cosine landmarks of models measured here: relevance 0 at ``low``, 1 at ``high``."""
ENGLISH_ONLY_MODELS = frozenset({"all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2"})
"""Models that cannot read Chinese, Japanese or Korean: a mostly-CJK query is answered by the
keyword side alone, so hybrid is exactly as good as keyword-only there (docs/search.md)."""


@functools.cache
def _cjk_char_re() -> re.Pattern[str]:
    """Compiled on first use (~3 ms: re walks every code point of the ranges), never for ASCII text."""
    return re.compile("[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]")


def mostly_cjk(text: str) -> bool:
    """More CJK characters (Han, kana, Hangul) than other letters and digits."""
    if text.isascii():
        return False  # no CJK character
    cjk = len(_cjk_char_re().findall(text))
    return cjk > 0 and cjk * 2 > sum(ch.isalnum() for ch in text)
BACKGROUND_HEADROOM = 0.76
"""For other models ``high = bg + BACKGROUND_HEADROOM * (1 - bg)`` with ``bg`` the mean cosine of
random chunk pairs of the index (``low = bg``); for MiniLM on cosqa this gives (0.19, 0.80)."""


@dataclass(frozen=True, slots=True)
class Calibration:
    """How raw side scores become relevance in [0, 1] (see :func:`vector_relevance`)."""

    cos_low: float
    cos_high: float
    source: str  # "model table", "index background", "config"
    english_only: bool = False  # the model cannot read CJK (ENGLISH_ONLY_MODELS)

    def reads(self, query: str) -> bool:
        """Whether the model's cosines for ``query`` mean anything: not a mostly-CJK query with an
        English-only model (its vectors are then noise, and the keyword side alone decides)."""
        return not (self.english_only and mostly_cjk(query))

    @classmethod
    def for_model(cls, model: str | None, background: float | None,
                  override: Sequence[float] | None = None) -> Calibration:
        english = (model or "") in ENGLISH_ONLY_MODELS
        if override is not None:
            return cls(float(override[0]), float(override[1]), "config", english)
        known = KNOWN_COSINE_CALIBRATION.get(model or "")
        if known is not None:
            return cls(known[0], known[1], "model table", english)
        bg = 0.0 if background is None or not math.isfinite(background) else min(0.9, max(-1.0, background))
        return cls(bg, bg + BACKGROUND_HEADROOM * (1 - bg), "index background")


def vector_relevance(cosine: float, cal: Calibration) -> float:
    """A logistic curve in the cosine: 0.05 at the model's unrelated level ``low``, 0.5 half-way,
    0.95 at a clear match ``high``. Strictly increasing, so vector-only mode is exactly the
    cosine order (a clamp to [0, 1] made every cosine above ``high`` tie at 1)."""
    if not math.isfinite(cosine):
        return 0.0
    span = max(1e-6, cal.cos_high - cal.cos_low)
    z = (cosine - (cal.cos_low + cal.cos_high) / 2) * (2 * math.log(19) / span)
    return 1.0 / (1.0 + math.exp(-max(-60.0, min(60.0, z))))


KEYWORD_HALF = 0.5
"""``bm25 / idf_total`` at which keyword relevance is 0.5 (before the corpus coverage factor)."""
FUSION_MAX_SHARE = 0.3
"""Share of the hybrid relevance taken from the stronger side alone (the rest: the weighted mean)."""
UNSEEN_QUERY_VECTOR_SHARE = 0.7
"""Vector relevance kept by a query none of whose words occurs anywhere in the index (scaled
linearly up to all of it when every word does): ``p_v * (0.7 + 0.3 * corpus_coverage)``."""


IDENTIFIER_SHIFT = 0.3
"""A query naming an identifier moves this share of the vector weight to the keyword side
(0.5 / 0.5 -> 0.35 / 0.65): an embedding model sees LRK-4417 and LRK-4471 as near twins."""
_IDENT_RE = re.compile(r"(?<![\w-])[A-Za-z0-9]+(?:[-_.:/#][A-Za-z0-9]+)*(?![\w-])")
_ORDINAL_RE = re.compile(r"^\d+(?:st|nd|rd|th)$", re.IGNORECASE)
_YEAR_RE = re.compile(r"^(?:19|20)\d\d$")


def identifiers(query: str) -> list[str]:
    """Identifier-like tokens of the query, in order (at most 4): letters and digits mixed
    (``LRK-4471``, ``pg-replica-1``, ``v4.18.2``, ``WX-58213``) or a number of 3+ digits
    (``502``); not an ordinal (``4th``), a year or a 2-character token (``Q4``)."""
    out: list[str] = []
    for m in _IDENT_RE.finditer(query[:4096]):
        tok = m.group(0)
        if len(tok) < 3 or _ORDINAL_RE.match(tok) or _YEAR_RE.match(tok):
            continue
        if any(c.isdigit() for c in tok) and (any(c.isalpha() for c in tok) or (tok.isdigit() and len(tok) >= 3)):
            out.append(tok)
            if len(out) == 4:
                break
    return out


def names_identifier(query: str) -> bool:
    """The query holds an identifier-like token (:func:`identifiers`)."""
    return bool(identifiers(query))


IDENTIFIER_MATCH_RELEVANCE = 0.8
"""Hybrid keyword relevance of at least this (times the corpus coverage) for a chunk that contains
an identifier of the query verbatim, however short the rest of its BM25 match."""


KEYWORD_STEEP_FROM = 5
"""Content words a query may have with the keyword curve as it is (``x / (x + 0.5)``)."""
KEYWORD_STEEP_SPAN = 2
"""Content words over :data:`KEYWORD_STEEP_FROM` at which the curve is steepest (7 and more)."""
KEYWORD_STEEP_MAX = 2.0
"""The curve's exponent for a query of :data:`KEYWORD_STEEP_FROM` + :data:`KEYWORD_STEEP_SPAN`
content words or more: ``x^2 / (x^2 + 0.5^2)``."""


def keyword_steepness(query: str) -> float:
    """The exponent of the keyword curve in the hybrid fusion (:func:`keyword_relevance`): 1 for a
    query of at most 5 distinct content words (not stop words, nor single letters or digits: the
    "s" of "Kate's", the "G" of "a graph G"), rising linearly to 2 at 7 and more;
    1 for a mostly-CJK query (its bigrams are not words, and the keyword side alone ranks it).

    Why: ``x`` is the IDF share of the query a chunk matches. Over two or three words it is a coarse
    reading (the answer to "what are Kate's hobbies?" may hold one of them), and the flat curve
    keeps a partial match close to a full one. Over seven or more (a claim, a docstring's summary,
    a long question) it is a fine one, and a chunk matching three quarters of them is much
    likelier the answer than one matching a third; the flat curve gave that difference about 0.04,
    as much as a cosine 0.02 apart, so the vector side's order won where the keyword side had the
    answer first (docs/search.md, "Long queries grade the keyword side more sharply")."""
    if mostly_cjk(query):
        return 1.0
    k = len({t for t in query_terms(query) if len(t) > 1 and not is_stop_word(t)})  # not the "s" of "Kate's"
    return 1.0 + (KEYWORD_STEEP_MAX - 1.0) * _clamp01((k - KEYWORD_STEEP_FROM) / KEYWORD_STEEP_SPAN)


def keyword_relevance(bm25: float, idf_total: float, corpus_coverage: float = 1.0, steepness: float = 1.0) -> float:
    """``x / (x + KEYWORD_HALF) * corpus_coverage`` with ``x = bm25 / idf_total``, in [0, 1); with
    ``steepness`` s (:func:`keyword_steepness`), ``x^s / (x^s + KEYWORD_HALF^s) * corpus_coverage``.

    ``idf_total`` is the sum of FTS5's IDF over the query's terms, i.e. the BM25 that a chunk of
    average length containing each term once would get, so ``x`` is about the share of the query
    matched (1 for a full match; more for repeated terms in a short chunk). For one query the
    curve is strictly increasing in BM25, so keyword-only mode ranks exactly as FTS5's BM25
    (the previous ``sqrt(min(coverage, x))`` clamped at 1 and tied chunks that BM25 tells apart).
    ``corpus_coverage`` is the IDF share of the query's terms that occur anywhere in the index (a
    property of the query and the corpus, not of the other candidates): a query whose rarest words
    are in no memory at all ("how do I tune a guitar" where only "tune" is indexed) cannot be
    well answered by the few words that are, so its keyword relevance is scaled down with it.
    """
    if bm25 <= 0 or idf_total <= 0 or not math.isfinite(bm25):
        return 0.0
    s = steepness if math.isfinite(steepness) and steepness > 0 else 1.0
    xs = (bm25 / idf_total) ** s  # x ** 1.0 is x exactly: the flat curve's scores, bit for bit
    return _clamp01(xs / (xs + KEYWORD_HALF**s) * _clamp01(corpus_coverage))


def match_kind(h: Hit) -> str:
    """How a result matched: ``"both"``, ``"keyword"`` (query terms, not among the nearest
    vectors), ``"vector"`` (among the nearest vectors, no query term) or ``"date"`` (written on
    the day the query names and found for that: its relevance without the day's lift is below
    the threshold it passed, or it matched on neither side)."""
    if h.date_lifted:
        return "date"
    kw = h.bm25 > 0
    if kw and h.in_vector:
        return "both"
    if kw:
        return "keyword"
    return "vector" if h.in_vector or h.in_keyword else "date"


def fuse_calibrated(hits: Iterable[Hit], cal: Calibration, idf_total: float, *, vector_weight: float,
                    text_weight: float, corpus_coverage: float = 1.0, keyword_steepness: float = 1.0) -> list[Hit]:
    """Absolute scores from each hit's own raw scores, sorted (equal scores: higher BM25 first).

    ``p_v = vector_relevance(cosine)``, ``p_t = keyword_relevance(bm25)``; with both weights > 0
    (normalised to sum 1)::

        relevance = (1 - FUSION_MAX_SHARE) * (w_v * p_v + w_t * p_t) + FUSION_MAX_SHARE * max(p_v, p_t)

    so a chunk that one side finds clearly is not pulled down to half by the other side's
    silence, and agreement of both sides still ranks highest. With weight 0 a side is ignored
    (one-side modes: exactly that side's order). ``corpus_coverage`` (the IDF share of the query's
    terms found anywhere in the index) scales the keyword side (see :func:`keyword_relevance`) and,
    by ``UNSEEN_QUERY_VECTOR_SHARE``, the vector side: a query none of whose words any memory
    uses ("zzqx wvbn", "okonomiyaki" in notes that never mention it) is most likely not in memory,
    and its nearest vectors are the model's background. Every hit carries both raw scores (the searcher
    computes the cosine of keyword candidates and the BM25 of vector candidates), so a hit's score
    does not depend on the other candidates.

    The keyword side's weight is scaled by ``corpus_coverage`` (``w_t * cc``, the vector side taking
    the rest): it can only judge the query's words memory holds, and a word memory never uses
    ("t-shirts" where the chats say "tees") says nothing about which chunk answers, so its silence no
    longer costs an answer found by meaning a third of its score. A query none of whose words any
    chunk holds (``cc`` 0) keeps the keyword side's full weight (relevance 0): that absence is
    evidence of a miss ("zzqx wvbn" with a model that hashes words: docs/search.md, "The keyword
    side weighs what memory's words cover").

    ``keyword_steepness`` (:func:`keyword_steepness` of the query; both sides weighed only) grades
    the keyword side more sharply for a query of many content words.
    """
    items = list(hits)
    vw, tw = normalize_weights(vector_weight, text_weight)
    if vector_weight <= 0:
        vw, tw = 0.0, 1.0
    elif text_weight <= 0:
        vw, tw = 1.0, 0.0
    cc = _clamp01(corpus_coverage)
    steep = keyword_steepness if vw > 0 and tw > 0 else 1.0  # one side alone: its curve as it is
    vshare = UNSEEN_QUERY_VECTOR_SHARE + (1 - UNSEEN_QUERY_VECTOR_SHARE) * cc
    if vw > 0 and 0 < cc < 1 and tw > 0:
        # the keyword side weighs what it can judge: the share of the query memory's words cover
        # (a word memory never uses says nothing of which chunk answers); none at all: a miss, as is
        tw *= cc
        vw = 1 - tw
    out = []
    for h in items:
        pv = vector_relevance(h.vector_score, cal) * vshare if vw > 0 else 0.0
        pt = keyword_relevance(h.bm25, idf_total, corpus_coverage, steep) if tw > 0 else 0.0
        if h.has_identifier and vw > 0 and tw > 0:
            pt = max(pt, IDENTIFIER_MATCH_RELEVANCE * _clamp01(corpus_coverage))
        mean = vw * pv + tw * pt
        rel = mean if vw == 0 or tw == 0 else (1 - FUSION_MAX_SHARE) * mean + FUSION_MAX_SHARE * max(pv, pt)
        rel = _clamp01(rel)
        out.append(replace(h, score=rel, relevance=rel))
    out.sort(key=lambda h: (h.score, h.bm25), reverse=True)  # equal relevance: higher BM25 first
    return out


def query_supported(corpus_coverage: float, best_cosine: float | None, cal: Calibration,
                    knows_absent_words: bool = False) -> bool:
    """Memory supports the query on both sides: at least ``SUPPORT_MIN_COVERAGE`` (0.1) of its
    words' IDF occurs somewhere in the index, and its nearest chunk is nearer than the model's
    unrelated level (cosine above ``cal.cos_low``). ``best_cosine`` None (no vector side, or a
    model that cannot read the query): not supported.

    Or, with less coverage, when the model's vocabulary holds whole every word of the query that
    memory lacks, two or more of them, in a query naming no identifier (``knows_absent_words``:
    :meth:`~memory_core.embeddings.base.EmbeddingProvider.knows_words`), and the nearest chunk is
    above the unrelated level all the same. That is a question put in other words than memory's
    ("Who has my power tool at the moment?" about the lent drill, "What gear problems did the
    band have?"): the model read each of its words, so its nearest chunk may be a paraphrase, and
    the answer lists it with its low score. A name, a typo, a dish or a made-up word the memory
    lacks ("okonomiyaki" at cosine 0.35, "zzqx wvbn" at 0.33) is only pieces to the model, so
    its cosine is the echo of those pieces, and the threshold stays; so it does for one missing
    word alone ("bicycle": a lookup that found nothing, however well the model knows the word).

    With ``query.min_score`` unset, the answer to a supported query is never emptied by score:
    on conversations the true answer's best chunk often scores 0.03-0.15 (short messages, words
    other than the question's; the local model's cosines 0.23-0.37), as high as a question memory
    holds nothing for, so a score threshold cost 3-7 points of recall. What tells the probes apart
    is support: "okonomiyaki" (no word of it in memory: coverage 0) and "how do I tune a guitar"
    (the nearest chunk at cosine 0.14, below MiniLM's unrelated 0.2) keep the 0.15 threshold.
    docs/search.md, "The threshold", has the figures."""
    if best_cosine is None or not math.isfinite(best_cosine):
        return False
    return (corpus_coverage >= SUPPORT_MIN_COVERAGE or knows_absent_words) and best_cosine > cal.cos_low


def answer_threshold(hits: Sequence[Hit], min_score: float, result_floor: float = DEFAULT_RESULT_FLOOR) -> list[Hit]:
    """The hits an answer keeps, in their order: none when the best scores below ``min_score``
    (memory holds nothing that matches this well); else every hit scoring at least ``result_floor``
    (with the default 0, every candidate: those of relevance 0, which no side the query weighs
    matched, come last in the order fusion left them, a mostly-CJK query's by cosine).

    The threshold is the answer's, not each result's: a question whose evidence spans sessions
    finds one session clearly and the others weakly (another part of the question, no shared
    word), and a per-result threshold hid exactly those (docs/search.md, "The threshold").
    ``result_floor = min_score`` is the per-result threshold of before."""
    if not hits or max(h.score for h in hits) < min_score:
        return []
    return [h for h in hits if h.score >= result_floor]


# ---------------------------------------------------------------------------------------------
# Temporal decay
# ---------------------------------------------------------------------------------------------
def temporal_decay_multiplier(age_days: float, half_life_days: float) -> float:
    """``exp(-ln2 / half_life * max(0, age))``; 1.0 when the half-life is not a positive number.

    age 10 / half-life 30 -> 0.7937; 30 -> 0.5; 60 -> 0.25.
    """
    if not math.isfinite(half_life_days) or half_life_days <= 0:
        return 1.0
    age = max(0.0, age_days)
    if not math.isfinite(age):
        return 1.0
    return math.exp(-(math.log(2) / half_life_days) * age)


def _now_ms(now: datetime | float | None) -> float:
    if now is None:
        return datetime.now(UTC).timestamp() * 1000.0
    if isinstance(now, datetime):
        if now.tzinfo is None:
            now = now.replace(tzinfo=UTC)
        return now.timestamp() * 1000.0
    return float(now) * 1000.0




def apply_temporal_decay(
    hits: Iterable[Hit], half_life_days: float, now: datetime | float | None = None, *,
    floor: float = DEFAULT_DECAY_FLOOR,
) -> list[Hit]:
    """Weigh each score by its age and re-sort (stable, descending).

    ``score * (floor + (1 - floor) * 2 ** (-age / half_life))``: a new memory keeps its score, one
    half-life old gets ``(1 + floor) / 2`` of it, a very old one ``floor``. Decay only reorders
    among comparably relevant results: with the default floor 0.7 an old chunk of relevance 0.6
    still ranks above a new one of 0.4 (a plain exponential, ``floor = 0``, buried the only old
    chunk that answers under recent irrelevant ones after a few half-lives).

    Age source: evergreen files (:func:`is_evergreen`) do not decay; a dated memory path's date
    (UTC midnight); else the chunk's own date (``Hit.date``: a transcript chunk's first message);
    else the file's ``mtime_ms``; a hit with none of them is left alone. ``now`` is a datetime
    (naive = UTC) or epoch *seconds* as from ``time.time()``; default: the current time.
    """
    now_ms = _now_ms(now)
    fl = _clamp01(floor)
    out: list[Hit] = []
    for h in hits:
        ts_ms = _age_source_ms(h)
        if ts_ms is None:
            out.append(replace(h))
            continue
        age_days = max(0.0, now_ms - ts_ms) / _DAY_MS
        weight = fl + (1 - fl) * temporal_decay_multiplier(age_days, half_life_days)
        out.append(replace(h, score=h.score * weight))
    out.sort(key=lambda h: h.score, reverse=True)
    return out


def _age_source_ms(h: Hit) -> float | None:
    if is_evergreen(h.path):
        return None
    d = date_from_path(h.path)
    if d is None and h.date:
        try:
            d = date.fromisoformat(h.date[:10])
        except ValueError:
            d = None
    if d is not None:
        try:
            return datetime(d.year, d.month, d.day, tzinfo=UTC).timestamp() * 1000.0
        except (OverflowError, ValueError):
            return None
    return float(h.mtime_ms) if h.mtime_ms is not None else None


# ---------------------------------------------------------------------------------------------
# MMR
# ---------------------------------------------------------------------------------------------
def jaccard(a: frozenset[str] | set[str], b: frozenset[str] | set[str]) -> float:
    """|a ∩ b| / |a ∪ b|; two empty sets are identical (1.0), one empty set shares nothing (0.0)."""
    if not a and not b:
        return 1.0
    if not a or not b:
        return 0.0
    inter = len(a & b)
    return inter / (len(a) + len(b) - inter)


def _default_key(h: Hit) -> str:
    return h.snippet or h.text


def mmr_rerank(
    hits: Sequence[Hit], lambda_: float = 0.7, *, key: Callable[[Hit], str] = _default_key
) -> list[Hit]:
    """Maximal Marginal Relevance re-ranking (Carbonell & Goldstein 1998), as the reference.

    Relevance is ``score`` min-max normalised over ``hits`` (all equal -> 1); similarity is the
    Jaccard index of :func:`~memory_core.storage.textsearch.keyword_tokens` of ``key(hit)`` (snippet,
    else text), which handles CJK. Greedily pick argmax ``lambda*rel - (1-lambda)*max_sim(selected)``;
    ties go to the higher raw score, then the earlier hit. ``lambda_`` is clamped to [0, 1];
    1 means a plain stable sort by score. Returns the same hit objects, reordered.
    """
    items = list(hits)
    if len(items) <= 1:
        return items
    lam = _clamp01(lambda_) if math.isfinite(lambda_) else 0.7
    if lam == 1.0:
        return sorted(items, key=lambda h: h.score, reverse=True)
    tokens = [keyword_tokens(key(h)) for h in items]
    scores = [h.score for h in items]
    hi, lo = max(scores), min(scores)
    span = hi - lo
    rel = [1.0 if span == 0 else (s - lo) / span for s in scores]

    remaining = list(range(len(items)))
    max_sim = [0.0] * len(items)
    order: list[int] = []
    while remaining:
        best_i = -1
        best_mmr = -math.inf
        for i in remaining:
            mmr = lam * rel[i] - (1 - lam) * max_sim[i]
            if mmr > best_mmr or (mmr == best_mmr and scores[i] > scores[best_i]):
                best_i, best_mmr = i, mmr
        order.append(best_i)
        remaining.remove(best_i)
        for i in remaining:
            sim = jaccard(tokens[i], tokens[best_i])
            if sim > max_sim[i]:
                max_sim[i] = sim
    return [items[i] for i in order]


# ---------------------------------------------------------------------------------------------
# Snippets
# ---------------------------------------------------------------------------------------------
_SUFFIXES = ("ations", "ation", "ments", "ment", "ings", "ing", "ies", "ied", "ers", "er", "ed", "es", "s")
_CUT_CHARS_CJK = "。！？；，、．!?;,"
_MAX_MATCHES_PER_TERM = 64
_SNAP_WINDOW = 160


@functools.lru_cache(maxsize=1024)
def _term_spec(term: str) -> tuple[str, bool, bool] | None:
    """(needle, word start required, word end required) for one query term, lower-case."""
    t = term.strip().lower()
    if not t:
        return None
    if not t.isascii() and _cjk_char_re().search(t):  # a term with a CJK character
        return t, False, False
    stem = t
    if len(t) >= 5:
        for suf in _SUFFIXES:
            if t.endswith(suf) and len(t) - len(suf) >= 4:
                stem = t[: -len(suf)]
                break
    return stem, True, stem == t and len(t) < 4


@functools.lru_cache(maxsize=1024)
def _term_pattern(term: str) -> re.Pattern[str] | None:
    spec = _term_spec(term)
    if spec is None:
        return None
    needle, start, end = spec
    body = re.escape(needle)
    if not start:
        return re.compile(body)
    return re.compile(rf"(?<![^\W_]){body}" + (r"(?![^\W_])" if end else ""), re.IGNORECASE)


def _find_matches(text: str, terms: Iterable[str]) -> list[tuple[int, int, int]]:
    """(start, end, term index) of every term occurrence (at most 64 per term), sorted.

    A term matches case-insensitively at a word start (``(?<![^\\W_])``), a short unstemmed
    term also at a word end, a CJK term anywhere. ``str.find`` on the lower-cased text does the
    scanning (several times faster than one regex pass per term); texts whose lower-case form
    has a different length fall back to the regexes.
    """
    lower = text.lower()
    aligned = len(lower) == len(text)
    n_text = len(lower)
    matches: list[tuple[int, int, int]] = []
    for idx, term in enumerate(dict.fromkeys(terms)):
        spec = _term_spec(term)
        if spec is None:
            continue
        if not aligned:
            pat = _term_pattern(term)
            assert pat is not None
            for n, m in enumerate(pat.finditer(text)):
                if n >= _MAX_MATCHES_PER_TERM:
                    break
                matches.append((m.start(), m.end(), idx))
            continue
        needle, at_start, at_end = spec
        size = len(needle)
        found = 0
        pos = lower.find(needle)
        while pos >= 0 and found < _MAX_MATCHES_PER_TERM:
            end = pos + size
            if (not at_start or pos == 0 or not lower[pos - 1].isalnum()) and (
                not at_end or end == n_text or not lower[end].isalnum()
            ):
                matches.append((pos, end, idx))
                found += 1
                pos = lower.find(needle, end)
            else:
                pos = lower.find(needle, pos + 1)
    matches.sort()
    return matches


def _snap_start(text: str, start: int, limit: int) -> int:
    """Move ``start`` forward to just after a line break / space / CJK stop, not past ``limit``."""
    if start <= 0:
        return 0
    window_end = min(limit, start + _SNAP_WINDOW)
    if text[start - 1] in "\n":
        return start
    for seps in ("\n", None, _CUT_CHARS_CJK):
        region = text[start:window_end]
        if seps is None:
            m = re.search(r"\s", region)
            if m:
                return start + m.end()
            continue
        positions = [region.find(c) for c in seps]
        positions = [p for p in positions if p >= 0]
        if positions:
            return start + min(positions) + 1
    return start


def _snap_end(text: str, end: int, limit: int) -> int:
    """Move ``end`` back to a line break / space / CJK stop, not before ``limit``."""
    if end >= len(text):
        return len(text)
    if text[end].isspace():
        return end
    window_start = max(limit, end - _SNAP_WINDOW)
    region = text[window_start:end]
    nl = region.rfind("\n")
    if nl >= 0:
        return window_start + nl
    ws = [m.start() for m in re.finditer(r"\s", region)]
    if ws:
        return window_start + ws[-1]
    cjk = max(region.rfind(c) for c in _CUT_CHARS_CJK)
    if cjk >= 0:
        return window_start + cjk + 1
    return end


def make_snippet(text: str, query_terms: Iterable[str], max_chars: int = SNIPPET_MAX_CHARS) -> str:
    """A verbatim excerpt of ``text`` of at most ``max_chars`` characters.

    The whole text when it fits. Otherwise the window covering the most distinct query terms
    (then the most matches; terms match case-insensitively at a word start, English words also
    by a crude stem so "deploying" finds "deployment"; CJK terms as substrings). If that region
    lies within the first ``max_chars`` characters the excerpt starts at the beginning, else it
    is centred on the region. Both ends are moved to a line break, else a space, else CJK
    punctuation, when one is near and the matched region stays inside. A Windows line end
    (``\r\n``, a note saved on Windows) is shown as ``\n``.
    """
    if max_chars <= 0:
        return ""
    if "\r\n" in text:
        text = text.replace("\r\n", "\n")
    if len(text) <= max_chars:
        return text
    matches = _find_matches(text, query_terms)
    span_start, span_end = 0, 0
    if matches:
        best: tuple[int, int, int] = (-1, -1, 0)
        best_range = (0, 0)
        n = len(matches)
        j = 0
        for i in range(n):
            s_i = matches[i][0]
            j = max(j, i)
            while j + 1 < n and matches[j + 1][1] <= s_i + max_chars:
                j += 1
            window = matches[i : j + 1]
            distinct = len({m[2] for m in window})
            cand = (distinct, len(window), -s_i)
            if cand > best:
                best = cand
                best_range = (s_i, max(m[1] for m in window))
        span_start, span_end = best_range
        span_end = min(span_end, span_start + max_chars)
    if span_end <= max_chars:
        start = 0
    else:
        slack = max_chars - (span_end - span_start)
        start = max(0, span_start - slack // 2)
    end = min(len(text), start + max_chars)
    if end == len(text):
        start = max(0, end - max_chars)
    start = _snap_start(text, start, span_start if matches else start + max_chars // 4)
    end = _snap_end(text, end, span_end if matches else max(start, end - max_chars // 4))
    start, end = _whole_words(text, start, end, span_start if matches else end)
    snippet = text[start:end].strip()
    return snippet[:max_chars]


def _in_word(c: str) -> bool:
    """A letter or digit of a word (CJK has no spaces: any two of its characters may be cut apart)."""
    return c.isalnum() and c < "\u2e80"


def _whole_words(text: str, start: int, end: int, keep_from: int) -> tuple[int, int]:
    """Never half a word at either end of a snippet (issue 39: "func retryAfterSecon"): an end
    inside a word moves on to the word's end when the start can move on as far (not past
    ``keep_from``, the first match) to a word's start, else back to the word's start; a start
    inside a word moves on to the next word. Where :func:`_snap_end` could not move the end (the
    match reaches the window's edge, as a stem "deploy" matching "deployment" does)."""
    if 0 < end < len(text) and _in_word(text[end - 1]) and _in_word(text[end]):
        w1 = end
        while w1 < len(text) and _in_word(text[w1]) and w1 - end <= _SNAP_WINDOW:
            w1 += 1
        s2 = start + (w1 - end)
        while 0 < s2 < len(text) and _in_word(text[s2 - 1]) and _in_word(text[s2]):
            s2 += 1
        if w1 - end <= _SNAP_WINDOW and s2 <= keep_from:
            start, end = s2, w1
        else:
            w0 = end
            while w0 > start and _in_word(text[w0 - 1]):
                w0 -= 1
            if w0 > start:
                end = w0
    if 0 < start < end and _in_word(text[start - 1]) and _in_word(text[start]):
        s = start
        while s < end and _in_word(text[s]):
            s += 1
        if s < end:
            start = s
    return start, end


# ---------------------------------------------------------------------------------------------
# Dedupe
# ---------------------------------------------------------------------------------------------
def file_support(file_cosines: Mapping[str, Sequence[float]], cal: Calibration) -> dict[str, float]:
    """Each file's relevance as a whole: :func:`vector_relevance` of the mean of its best chunks'
    cosines (``Candidates.file_cosines``: its best 3 among all its chunks). A session about the
    question in several chunks scores near its best chunk; one that brushes it in one chunk among
    unrelated ones scores well below it."""
    return {p: vector_relevance(sum(cs) / len(cs), cal) for p, cs in file_cosines.items() if cs}


def diversify_files(hits: Sequence[Hit], factor: float, lift: Mapping[str, float] | None = None) -> list[Hit]:
    """``hits`` (best first) reordered so each file's chunks after its first give way to other
    files' chunks: the k-th chunk of a file (k = 0 for its best) is placed by ``score * factor**k``
    (``query.file_diversity``, default ``DEFAULT_FILE_DIVERSITY``); scores are not changed, equal
    keys keep their order. Without ``lift``, each file's best chunk keeps its place relative to the
    other files' best chunks, so the order of files is unchanged; what changes is which chunks a
    short answer shows: a question whose evidence spans sessions sees each session's best chunk
    before a second chunk of the first session (issue 37). ``factor`` 1: no change.

    ``lift`` (path -> a number added to the score of every chunk of that file before the factor:
    ``query.file_support`` x :func:`file_support`) places a file that is about the question as a
    whole above one whose best chunk scores a little higher alone."""
    if (factor >= 1 and not lift) or len(hits) < 2:
        return list(hits)
    lift = lift or {}
    seen: dict[str, int] = {}
    keyed: list[tuple[float, int, Hit]] = []
    for i, h in enumerate(hits):
        k = seen.get(h.path, 0)
        seen[h.path] = k + 1
        keyed.append(((h.score + lift.get(h.path, 0.0)) * min(1.0, factor) ** k, -i, h))
    keyed.sort(key=lambda t: (t[0], t[1]), reverse=True)
    return [h for _, _, h in keyed]


def dedupe_overlapping(hits: Sequence[Hit]) -> list[Hit]:
    """Drop hits that are mostly the same passage as a better hit of the same file.

    Hits are considered best-first (higher ``score``; ties: earlier in ``hits``). A hit is
    dropped when a kept hit with the same ``source`` and ``path`` covers more than half of its
    own line range: ``overlap_lines / own_lines > 0.5`` with inclusive line counts. Neighbouring
    chunks (which share only the chunker's overlap, 80 of 400 tokens by default) survive.
    Survivors keep their input order.
    """
    order = sorted(range(len(hits)), key=lambda i: hits[i].score, reverse=True)
    kept_ranges: dict[tuple[str, str], list[tuple[int, int]]] = {}
    keep: set[int] = set()
    for i in order:
        h = hits[i]
        lo, hi = min(h.start_line, h.end_line), max(h.start_line, h.end_line)
        own = hi - lo + 1
        ranges = kept_ranges.setdefault((h.source, h.path), [])
        if any(min(hi, khi) - max(lo, klo) + 1 > own / 2 for klo, khi in ranges):
            continue
        ranges.append((lo, hi))
        keep.add(i)
    return [h for i, h in enumerate(hits) if i in keep]
