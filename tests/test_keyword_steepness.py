"""Long queries grade the keyword side more sharply (thirty-fourth session; docs/search.md, "Long
queries grade the keyword side more sharply"): in the hybrid fusion, the keyword curve's exponent
rises from 1 (at most 5 content words) to 2 (7 and more), so a chunk matching most of a long
query's words is no longer passed by a sibling matching a third of them at a slightly higher
cosine. Short questions, one-side modes and mostly-CJK queries rank as before."""

from __future__ import annotations

import pytest

from memory_core.config import load_settings
from memory_core.query import ranking
from memory_core.query.rank import rank_candidates
from memory_core.query.retrieval import Candidates

LONG = "Compute the inverse discrete Fourier transform of a real input signal along one axis"
SHORT = "inverse Fourier transform"


def test_the_exponent_follows_the_querys_content_words() -> None:
    assert ranking.keyword_steepness("what are Kate's hobbies?") == 1.0
    assert ranking.keyword_steepness("what did we do?") == 1.0  # stop words only
    assert ranking.keyword_steepness(SHORT) == 1.0
    # 5 content words: as before; 6: half-way; 7 and more: 2
    assert ranking.keyword_steepness("kayak course river bank weekend") == 1.0
    assert ranking.keyword_steepness("kayak course river bank weekend rain") == pytest.approx(1.5)
    assert ranking.keyword_steepness("kayak course river bank weekend rain cancelled") == 2.0
    assert ranking.keyword_steepness(LONG) == 2.0
    # a single letter is no word: the "s" of a possessive, a variable's name
    assert ranking.keyword_steepness("how did the whole saga with Mo's car go?") == 1.0  # whole saga mo car go
    assert ranking.keyword_steepness("Kate's Anneliese's Jorge's Siobhan's Muhammad's G x") == 1.0
    # a word said twice counts once
    assert ranking.keyword_steepness("kayak kayak kayak kayak kayak kayak kayak course") == 1.0
    # a mostly-CJK query is searched by bigrams, not words: the keyword side alone ranks it, as before
    assert ranking.keyword_steepness("你曾经和我推荐过几个厨艺节目还有哪些电影和书籍呢") == 1.0


def test_the_curve_is_steeper_and_still_increasing() -> None:
    idf = 10.0
    flat = [ranking.keyword_relevance(b, idf) for b in (1, 3, 5, 7, 9, 12)]
    steep = [ranking.keyword_relevance(b, idf, steepness=2.0) for b in (1, 3, 5, 7, 9, 12)]
    assert steep == sorted(steep) and len(set(steep)) == len(steep)  # keyword order kept
    assert steep[2] == pytest.approx(flat[2]) == pytest.approx(0.5)  # half a match: 0.5 on both
    assert steep[0] < flat[0] and steep[-1] > flat[-1]  # a partial match lower, a full one higher
    # the gap between three quarters of the query and a third of it, doubled or more
    assert (ranking.keyword_relevance(7.5, idf, steepness=2.0) - ranking.keyword_relevance(3.3, idf, steepness=2.0)) \
        > 1.5 * (ranking.keyword_relevance(7.5, idf) - ranking.keyword_relevance(3.3, idf))
    assert ranking.keyword_relevance(0.0, idf, steepness=2.0) == 0.0
    assert ranking.keyword_relevance(9.0, idf, 0.5, steepness=2.0) == pytest.approx(
        0.5 * ranking.keyword_relevance(9.0, idf, steepness=2.0))  # the coverage factor as before


def _ranked(query: str, mode: str = "hybrid") -> list[tuple[str, float]]:
    """An answer matching 90 % of the query's words at cosine 0.45, a sibling matching 40 % at 0.58,
    ranked by rank_candidates (file support off: the fusion alone)."""
    q = load_settings(None, {"workspace": "/tmp", "query": {"file_support": 0.0}}).query
    cal = ranking.Calibration(0.2, 0.8, "config")
    answer = ranking.Hit(id="a", path="answer.md", source="memory", start_line=1, end_line=3, text="answer",
                         vector_score=0.45, bm25=9.0, in_vector=True, in_keyword=True, rid=1)
    sibling = ranking.Hit(id="b", path="sibling.md", source="memory", start_line=1, end_line=3, text="sibling",
                          vector_score=0.58, bm25=4.0, in_vector=True, in_keyword=True, rid=2)
    cands = Candidates(query, [answer, sibling], [sibling, answer], True, [answer, sibling], cal, 10.0)
    return [(r.path, r.score) for r in rank_candidates(q, cands, max_results=5, mode=mode)]


def test_a_long_querys_keyword_match_comes_before_a_nearer_sibling() -> None:
    long_ = _ranked(LONG)
    assert [p for p, _ in long_] == ["answer.md", "sibling.md"], long_
    # the same raw scores for a short question: the flat curve, the nearer sibling first, as before
    short = _ranked(SHORT)
    assert [p for p, _ in short] == ["sibling.md", "answer.md"], short
    # scores stay absolute: the sibling's relevance moves only by its own keyword match's curve
    assert dict(long_)["sibling.md"] < dict(short)["sibling.md"]
    assert dict(long_)["answer.md"] > dict(short)["answer.md"]


def test_one_side_alone_ranks_and_scores_as_before() -> None:
    for mode in ("keyword", "vector"):
        assert _ranked(LONG, mode) == _ranked(SHORT, mode), mode
    assert [p for p, _ in _ranked(LONG, "keyword")] == ["answer.md", "sibling.md"]  # BM25's order
