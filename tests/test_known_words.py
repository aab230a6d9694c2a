"""A question none of whose words memory holds (corpus coverage 0): answered when the model knows
every one of those words (two or more of them) and its nearest chunk is above the unrelated level
(a question put in other words than memory's); emptied by the threshold when a missing word is
only pieces to the model (a dish, a name, a typo, a made-up word: its cosine is the echo of the
pieces), when it names an identifier, or when it is one word alone (a lookup that found nothing).

Before, every such question kept the 0.15 threshold, so "Who has my power tool at the moment?"
about the lent drill got nothing: the `min_score` 0 gap of issue 37 on convo and chats."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from memory_core.config import Settings, load_settings
from memory_core.embeddings.base import NoProvider
from memory_core.embeddings.local import LocalProvider
from memory_core.index.pipeline import run_index
from memory_core.query import ranking
from memory_core.query.search import Searcher
from tests.test_conversation_dates import _session  # (ISO UTC stamp, role, text) messages

OTHER_WORDS = "Who has my power tool at the moment?"  # the transcript says "cordless drill", "borrowed"


@pytest.fixture(scope="module")
def memory(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    ws = tmp_path_factory.mktemp("known-words") / "ws"
    (ws / "sessions").mkdir(parents=True)
    (ws / "MEMORY.md").write_text("# Memory\n\nThe garden shed key is under the blue flowerpot.\n")
    _session(ws / "sessions" / "lent.jsonl", [
        ("2026-10-03T09:00:00Z", "user", "Tom from next door borrowed my cordless drill this morning to hang his shelves."),
        ("2026-10-03T09:01:00Z", "assistant", "Noted: Tom has your cordless drill; he borrowed it to hang shelves."),
        ("2026-10-03T09:02:00Z", "user", "He said he'd bring it back after the weekend."),
    ])
    for i, (said, answer) in enumerate([
        ("We made sourdough bread and the starter finally doubled.", "Lovely, fresh bread for Sunday."),
        ("Ran ten kilometres along the river, knee felt fine.", "Great run, the knee is holding up."),
        ("Moved the savings into the fixed deposit account.", "The deposit pays more interest."),
    ]):
        _session(ws / "sessions" / f"day-{i}.jsonl", [(f"2026-10-0{5 + i}T18:00:00Z", "user", said),
                                                      (f"2026-10-0{5 + i}T18:01:00Z", "assistant", answer)])
    s = load_settings(None, {"workspace": str(ws), "provider": "local", "sources": ["memory", "sessions"]})
    run_index(s)
    return s


def _support(searcher: Searcher, query: str) -> tuple[float, float, bool, float]:
    """(corpus coverage, best cosine, the model knows the missing words, the unrelated cosine)."""
    c = searcher.retrieve(query, searcher.candidate_count(6))
    return (c.corpus_coverage, max(h.vector_score for h in c.union), c.knows_absent_words,
            c.calibration.cos_low)


def test_a_question_in_other_words_than_memory_is_answered(memory: Settings) -> None:
    with Searcher(memory) as s:
        coverage, cosine, knows, unrelated = _support(s, OTHER_WORDS)
        assert coverage == 0 and knows and cosine > unrelated, (coverage, cosine, knows)
        hits = s.search(OTHER_WORDS)
        assert hits and hits[0].path == "sessions/lent.jsonl", [(h.path, h.score) for h in hits]
        # listed with its low score, as a supported question's weak results are: still thresholdable
        assert hits[0].score < ranking.DEFAULT_MIN_SCORE
        assert s.search(OTHER_WORDS, min_score=ranking.DEFAULT_MIN_SCORE) == []
        # the answer says what these results are
        note = s.search_response(OTHER_WORDS).note
        assert "weak matches only" in note and "none of the question's words are in memory" in note, note


@pytest.mark.parametrize("query", ["okonomiyaki", "Where did I put the okonomiyaki?", "zzqx wvbn",
                                   "DS-82", "Who has the LRK-4417 ticket?",  # identifiers: matched verbatim
                                   "bicycle"])  # one word memory lacks: a lookup that found nothing
def test_a_lookup_memory_cannot_read_keeps_the_threshold(memory: Settings, query: str) -> None:
    """A missing word the model knows only in pieces, an identifier, or one missing word alone."""
    with Searcher(memory) as s:
        coverage, _cosine, knows, _ = _support(s, query)
        assert coverage == 0 and not knows
        assert s.search(query) == []
        assert s.search(query, min_score=0.0)  # the candidates exist: the threshold emptied the answer


def test_one_missing_word_is_a_lookup_even_near_something(memory: Settings) -> None:
    """"bicycle" is a word the model knows and the run by the river is at cosine ~0.31, above the
    unrelated level: asked alone it is still a lookup that found nothing."""
    with Searcher(memory) as s:
        coverage, cosine, knows, unrelated = _support(s, "bicycle")
        assert coverage == 0 and cosine > unrelated and not knows, (cosine, unrelated)
        assert s.search("bicycle") == []


def test_a_question_of_known_words_far_from_everything_is_still_empty(memory: Settings) -> None:
    query = "What is my brother-in-law's job?"
    with Searcher(memory) as s:
        coverage, cosine, knows, unrelated = _support(s, query)
        assert coverage == 0 and knows and cosine <= unrelated, (cosine, unrelated)
        assert s.search(query) == []


def test_the_local_model_knows_a_word_it_holds_whole(memory: Settings) -> None:
    p = LocalProvider(memory)
    try:
        assert p.knows_words(["drummer", "gear", "band", "28"]) is True
        assert p.knows_words(["Drummer"]) is True  # an uncased model: as its tokenizer reads it
        for pieces in (["okonomiyaki"], ["drummer", "siobhan"], ["zzqx"]):
            assert p.knows_words(pieces) is False, pieces
    finally:
        p.close()
    # a model whose vocabulary is not known here (a hosted one): no answer, the threshold stays
    assert NoProvider().knows_words(["drummer"]) is None


def test_support_needs_the_words_or_the_model_to_know_them_and_a_near_chunk() -> None:
    cal = ranking.Calibration(0.2, 0.8, "model table")
    assert ranking.query_supported(0.5, 0.3, cal)
    assert not ranking.query_supported(0.5, 0.15, cal)  # "how do I tune a guitar": nothing near
    assert not ranking.query_supported(0.0, 0.35, cal)  # "okonomiyaki": pieces to the model
    assert ranking.query_supported(0.0, 0.35, cal, knows_absent_words=True)
    assert not ranking.query_supported(0.0, 0.18, cal, knows_absent_words=True)
    assert not ranking.query_supported(0.0, None, cal, knows_absent_words=True)  # no vector side
    assert not ranking.query_supported(0.0, math.nan, cal, knows_absent_words=True)


def test_the_lancedb_index_reads_the_same_questions(memory: Settings, tmp_path: Path) -> None:
    """The embedded LanceDB export answers through the same rule (its own word counts)."""
    pytest.importorskip("lancedb")
    from memory_core.export.lancedb import export_lancedb
    from memory_core.query.lancedb import LanceSearcher

    uri = str(tmp_path / "lance")
    export_lancedb(memory.index_file, uri)
    with LanceSearcher(memory, uri) as ls:
        c = ls.retrieve(OTHER_WORDS, 30)
        assert c.corpus_coverage == 0 and c.knows_absent_words
        hits = ls.search(OTHER_WORDS)
        assert hits and hits[0].path == "sessions/lent.jsonl", [(h.path, h.score) for h in hits]
        assert "none of the question's words are in memory" in ls.search_response(OTHER_WORDS).note
        for q in ("okonomiyaki", "bicycle", "DS-82"):
            assert not ls.retrieve(q, 30).knows_absent_words, q
            assert ls.search(q) == [], q
