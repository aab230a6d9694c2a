"""Issue 37, several sessions: a session's or note's relevance as a whole helps rank its chunks
(``query.file_support``): each hybrid result is placed by its score plus ``file_support`` x the
calibrated relevance of the mean cosine of its file's best 3 chunks, read over all the file's
chunks (``retrieval.file_cosines``), not only those retrieved. Placement only: the results, their
scores and the threshold are those of ``file_support`` 0; one side alone keeps its order."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import apsw
import numpy as np
import pytest

from memory_core.config import Settings, load_settings
from memory_core.embeddings.registry import create_provider
from memory_core.index.pipeline import run_index
from memory_core.query import ranking, retrieval
from memory_core.query.retrieval import Candidates
from memory_core.query.search import Searcher
from tests.test_file_diversity import kayak_notes


def _hit(path: str, score: float, i: int) -> ranking.Hit:
    return ranking.Hit(id=f"{path}:{i}", path=path, source="memory", start_line=i, end_line=i, text="t",
                       score=score, relevance=score)


def test_file_support_is_the_relevance_of_the_mean_of_a_files_best_cosines() -> None:
    cal = ranking.Calibration(0.2, 0.8, "config")
    got = ranking.file_support({"a.md": [0.6, 0.5, 0.4], "b.md": [0.5], "c.md": []}, cal)
    assert set(got) == {"a.md", "b.md"}  # a file without cosines has no support
    assert got["a.md"] == pytest.approx(ranking.vector_relevance(0.5, cal))
    assert got["b.md"] == pytest.approx(ranking.vector_relevance(0.5, cal))
    assert ranking.file_support({"d.md": [0.3]}, cal)["d.md"] < got["a.md"]


def test_a_lift_places_a_supported_file_above_a_slightly_better_chunk() -> None:
    hits = [_hit("brush.md", 0.60, 1), _hit("about.md", 0.55, 1), _hit("about.md", 0.50, 2), _hit("x.md", 0.2, 1)]
    lift = {"brush.md": 0.05, "about.md": 0.30, "x.md": 0.0}
    got = ranking.diversify_files(hits, 0.8, lift)
    # about.md: 0.85, then its 2nd chunk (0.50 + 0.30) x 0.8 = 0.64 = brush.md's 0.65 - 0.01
    assert [(h.path, h.start_line) for h in got] == [("about.md", 1), ("brush.md", 1), ("about.md", 2), ("x.md", 1)]
    assert [h.score for h in got] == [0.55, 0.60, 0.50, 0.2]  # scores unchanged
    assert ranking.diversify_files(hits, 0.8, None) == ranking.diversify_files(hits, 0.8)
    assert ranking.diversify_files(hits, 1.0, None) == hits
    # with diversity off, a lift alone still places files
    assert ranking.diversify_files(hits, 1.0, lift)[0].path == "about.md"


@pytest.fixture(scope="module")
def kayak(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tests/test_file_diversity.py's notes: a long note about the kayak course, a short one that
    mentions it once among errands."""
    return kayak_notes(tmp_path_factory.mktemp("support") / "ws")


@dataclass
class Retrieved:
    """The kayak notes indexed with the local model, and "kayak course" retrieved with one
    candidate a side: its candidates, its query vector, and each candidate file's own 3 best
    cosines (what a file left out of the read gets)."""

    settings: Settings
    cands: Candidates
    qvec: np.ndarray
    own: dict[str, list[float]]


@pytest.fixture(scope="module")
def retrieved(kayak: Path) -> Retrieved:
    s = load_settings(None, {"workspace": str(kayak), "provider": "local"})
    run_index(s)
    with Searcher(s) as searcher:
        cands = searcher.retrieve("kayak course", 1)
    provider, _ = create_provider(s)
    assert provider is not None
    qvec = np.asarray(provider.embed_query("kayak course"), dtype=np.float32)
    own = {p: sorted((h.vector_score for h in cands.union if h.path == p), reverse=True)[:3]
           for p in {h.path for h in cands.union}}
    return Retrieved(s, cands, qvec, own)


def _expected_best3(index: Path, path: str, qvec: np.ndarray) -> list[float]:
    """The file's 3 best cosines, straight from the index file's stored float32 vectors."""
    conn = apsw.Connection(str(index), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        rows = [bytes(b) for (b,) in conn.execute("SELECT embedding FROM chunks WHERE path = ?", (path,))]
    finally:
        conn.close()
    m = np.frombuffer(b"".join(rows), dtype="<f4").reshape(len(rows), -1)
    q = qvec / np.linalg.norm(qvec)
    cos = (m @ q) / np.linalg.norm(m, axis=1)
    return sorted((float(c) for c in cos), reverse=True)[:3]


def test_a_file_about_the_question_keeps_its_chunks_above_one_that_brushes_it(retrieved: Retrieved) -> None:
    s = retrieved.settings
    assert s.query.file_support == 0.5  # the default
    off = s.model_copy(update={"query": s.query.model_copy(update={"file_support": 0.0})})
    # every chunk of a file counts, not only the retrieved: with one candidate a side, the long
    # note's three best cosines are still all read
    assert len(retrieved.own["memory/kayak.md"]) < 3
    want = _expected_best3(s.index_file, "memory/kayak.md", retrieved.qvec)
    assert len(want) == 3
    assert retrieved.cands.file_cosines["memory/kayak.md"] == pytest.approx(want, abs=1e-4)
    with Searcher(s) as searcher:
        got = searcher.search("kayak course", max_results=3)
        # the note about the course as a whole holds the short answer; file diversity alone shows
        # the errands note's mention instead of its third chunk (tests/test_file_diversity.py)
        assert [h.path for h in got] == ["memory/kayak.md"] * 3, [(h.citation, h.score) for h in got]
        searcher.settings = off
        plain = searcher.search("kayak course", max_results=3)
        assert "memory/errands.md" in [h.path for h in plain]
        assert searcher.retrieve("kayak course", 24).file_cosines == {}  # off: nothing read
        # placement only: the same results with the same scores
        every_off = {(h.citation, h.score) for h in searcher.search("kayak course", max_results=50)}
        searcher.settings = s
        assert {(h.citation, h.score) for h in searcher.search("kayak course", max_results=50)} == every_off
        # one side alone keeps its own order
        kw = [h.citation for h in searcher.search("kayak course", max_results=5, mode="keyword")]
        searcher.settings = off
        assert kw == [h.citation for h in searcher.search("kayak course", max_results=5, mode="keyword")]
        searcher.settings = s
        # a query the model cannot read (CJK, an English-only model) reads nothing for it
        assert searcher.retrieve("林薇 里斯本", 24).file_cosines == {}
        # a query that names a day is ranked by that day's chunks first (the notes were written
        # today), an identifier is matched verbatim: nothing read for either
        assert searcher.retrieve("kayak course today", 24).file_cosines == {}
        assert searcher.retrieve("kayak course LRK-4471", 24).file_cosines == {}
        # a day nothing was written on changes nothing: ranked as the same words alone
        assert searcher.retrieve("kayak course on 2026-01-12", 24).file_cosines
        assert searcher.retrieve("kayak course", 24).file_cosines  # the same words alone: read


def test_the_setting_is_checked() -> None:
    from memory_core.errors import ConfigError

    with pytest.raises(ConfigError, match="file_support"):
        load_settings(None, {"workspace": "/tmp", "query": {"file_support": -1}})


def test_the_read_budget_falls_back_to_the_candidates_cosines(retrieved: Retrieved) -> None:
    """Past ``max_reads`` vectors (or ``max_files`` files), a file's support comes from its
    retrieved chunks only: a search never reads more than the budget says."""
    r = retrieved
    idx = retrieval._Index(r.settings.index_file)
    try:
        assert retrieval.file_cosines(idx, r.qvec, r.cands.union, max_reads=0) == r.own
        assert retrieval.file_cosines(idx, r.qvec, r.cands.union, max_files=0) == r.own
        full = retrieval.file_cosines(idx, r.qvec, r.cands.union)
    finally:
        idx.conn.close()
    assert len(full["memory/kayak.md"]) == 3 and len(r.own["memory/kayak.md"]) < 3


def test_a_failing_read_falls_back_and_never_fails_the_search(retrieved: Retrieved,
                                                              caplog: pytest.LogCaptureFixture) -> None:
    """An index whose connection fails mid-search (here: closed under it) costs the placement
    signal, not the answer: the candidates' own cosines, and a warning."""
    r = retrieved
    idx = retrieval._Index(r.settings.index_file)
    idx.conn.close()
    with caplog.at_level("WARNING"):
        got = retrieval.file_cosines(idx, r.qvec, r.cands.union)
    assert got == r.own
    assert "their retrieved chunks count" in caplog.text


def test_a_files_support_counts_its_chunks_as_wholes_not_their_best_window(tmp_path: Path) -> None:
    """A note's chunk is found by its best window (tests/test_note_windows.py), but its file's
    relevance as a whole is what its chunk says as a whole: the chunk vector's own cosine. Before,
    the support of a one-chunk note was its best window's cosine again, a second vote for one
    passage (on one-document files: docs/search.md, "A session's relevance as a whole")."""
    from tests.conftest import model_cosines
    from tests.test_note_windows import QUERY, _settings, _workspace

    s = _settings(_workspace(tmp_path / "ws"))
    run_index(s)
    note = "memory/2026-10-05.md"
    with Searcher(s) as searcher:
        cands = searcher.retrieve(QUERY, 24)
        (hit,) = [h for h in cands.union if h.path == note]
        assert hit.vector_score > 0  # found by its best window
        texts = [h.text for h in cands.union if h.path == note]
        whole = float(model_cosines(s, QUERY, texts)[0])
        assert cands.file_cosines[note] == pytest.approx([whole], abs=1e-4)
        assert hit.vector_score > whole + 0.05  # the window's cosine is not the file's
        # placement only: the same results and scores as without the support, in some order
        got = searcher.search(QUERY, max_results=10)
        searcher.settings = s.model_copy(update={"query": s.query.model_copy(update={"file_support": 0.0})})
        off = searcher.search(QUERY, max_results=10)
    assert sorted((h.citation, h.score) for h in got) == sorted((h.citation, h.score) for h in off)


def _placed(share: float) -> list[tuple[str, float]]:
    """Two one-chunk files ranked by rank_candidates: ``a.md`` matched on its words, ``b.md`` by
    meaning alone, with ``share`` as the candidates' multi-chunk share."""
    from memory_core.query.rank import rank_candidates

    q = load_settings(None, {"workspace": "/tmp"}).query
    cal = ranking.Calibration(0.2, 0.8, "config")
    a = ranking.Hit(id="a", path="a.md", source="memory", start_line=1, end_line=3, text="kayak course notes",
                    vector_score=0.35, bm25=15.0, in_vector=True, in_keyword=True, rid=1)
    b = ranking.Hit(id="b", path="b.md", source="memory", start_line=1, end_line=3, text="paddling lessons",
                    vector_score=0.6, in_vector=True, rid=2)
    cands = Candidates("kayak course", [a], [a, b], True, [a, b], cal, 10.0,
                       file_cosines={"a.md": [0.35], "b.md": [0.6]}, multi_chunk_share=share)
    return [(r.path, r.score) for r in rank_candidates(q, cands, max_results=5)]


def test_one_chunk_files_get_no_second_vote_for_the_vector_side() -> None:
    """A one-chunk file's relevance as a whole is its chunk's: its support is that chunk's vector
    relevance again. Where no candidate file has several chunks (a collection of documents) the
    support weighs nothing; scores never change, only the placing."""
    alone = _placed(0.0)
    assert [p for p, _ in alone] == ["a.md", "b.md"]  # a.md scores higher: its words and some meaning
    assert alone[0][1] > alone[1][1]
    lifted = _placed(1.0)  # as if files had several chunks: b.md's meaning lifts it above
    assert [p for p, _ in lifted] == ["b.md", "a.md"]
    assert sorted(lifted) == sorted(alone)  # the same scores


def test_the_multi_chunk_share_counts_the_candidate_files_chunks_in_the_index(retrieved: Retrieved) -> None:
    s = retrieved.settings
    conn = apsw.Connection(str(s.index_file), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        counts: dict[str, int] = {}
        for (path,) in conn.execute("SELECT path FROM chunks"):
            counts[path] = counts.get(path, 0) + 1
    finally:
        conn.close()
    assert counts["memory/kayak.md"] > 1
    idx = retrieval._Index(s.index_file)
    try:  # a path the index does not hold has no chunk: not a file of several
        assert retrieval.multi_chunk_share(idx, ["memory/kayak.md", "memory/gone.md"]) == 0.5
        assert retrieval.multi_chunk_share(idx, ["memory/gone.md", "memory/gone.md"]) == 0.0
        assert retrieval.multi_chunk_share(idx, []) == 1.0
        paths = [h.path for h in retrieved.cands.union]
        want = sum(counts.get(p, 0) > 1 for p in set(paths)) / len(set(paths))
        assert retrieved.cands.multi_chunk_share == pytest.approx(want)
    finally:
        idx.conn.close()
