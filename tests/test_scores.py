"""Absolute, calibrated scores through real indexes (the local model and two widths of another).

The example workspace's negative checks (examples/README.md): "DS-82" and "okonomiyaki" are in no
indexed note, so with the default min_score they return nothing; "okonomiyaki" matches only
notes/restaurants.md once notes/ is indexed. Decay and MMR reorder; they never remove results.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from memory_core.config import Settings, load_settings
from memory_core.errors import ConfigError
from memory_core.index.pipeline import run_index
from memory_core.query import ranking
from memory_core.query.search import Searcher
from tests.test_eval import BagOfWordsProvider
from tests.test_eval import _copy_examples as _copy

pytest.importorskip("sentence_transformers")


@pytest.fixture(scope="module")
def local_index(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    """The example workspace with notes/ as an extra path, embedded with the local model."""
    ws = _copy(tmp_path_factory.mktemp("local") / "ws")
    s = load_settings(None, {"workspace": str(ws), "provider": "local", "extra_paths": [str(ws / "notes")]})
    run_index(s)
    return s


def test_negative_checks_return_nothing(local_index: Settings) -> None:
    with Searcher(local_index) as s:
        assert s.search("DS-82") == []
        # the only note that names it; everything else the vector side finds scores low
        hits = s.search("okonomiyaki")
        assert hits[0].path == "notes/restaurants.md", [(h.path, h.score) for h in hits]
        assert hits[0].match == "both" and hits[0].score >= local_index.query.threshold()
        # min_score is the answer's threshold: what is listed beside its best scores as low as it is
        assert all(h.score < local_index.query.threshold() for h in hits[1:])
        for q in ("zzqx wvbn", "quantum chromodynamics lattice", "how do I tune a guitar"):
            assert s.search(q) == [], q
        # with result_floor = min_score the threshold is each result's again
        strict = local_index.model_copy(update={"query": local_index.query.model_copy(
            update={"result_floor": local_index.query.threshold()})})
        s.settings = strict
        assert [h.path for h in s.search("okonomiyaki")] == ["notes/restaurants.md"]
        s.settings = local_index
        # the candidates exist; they just score low
        loose = s.search("DS-82", min_score=0.0)
        assert loose and max(h.score for h in loose) < ranking.DEFAULT_MIN_SCORE


def test_okonomiyaki_without_notes_is_a_miss(tmp_path: Path, local_index: Settings) -> None:
    ws = _copy(tmp_path / "ws")
    # the index with notes/'s embedding cache as this one's [cache] path, as two workspaces of one
    # user may share one: a lookup reads every index recorded as using the cache, and that index
    # holds a vector for each chunk of this one, so nothing is embedded a second time (34 s of
    # this file's 97 on a 2-core machine)
    s = load_settings(None, {"workspace": str(ws), "provider": "local",
                             "cache": {"path": str(local_index.cache_file)}})
    done = run_index(s)
    assert done.chunks_embedded == 0 and done.exchanges_embedded == 0 and done.chunks_from_cache > 0
    with Searcher(s) as searcher:
        assert searcher.search("okonomiyaki") == []
        top = searcher.search("okonomiyaki", min_score=0.0)[0]
        assert top.text_score == 0 and top.match == "vector" and top.score < 0.2


def test_real_matches_score_high_and_say_how(local_index: Settings) -> None:
    with Searcher(local_index) as s:
        hits = s.search("postgres replication lag on the replica")
        assert hits[0].path in {"memory/2026-09-04.md", "memory/howto/check-replication-lag.md"}
        assert hits[0].score >= 0.7 and hits[0].match == "both"
        assert all(0 <= h.score <= 1 for h in hits)
        # keyword-only mode: the vector side is not consulted
        kw = s.search("postgres replication lag", mode="keyword")
        assert kw and {h.match for h in kw} == {"keyword"} and all(h.vector_score == 0 for h in kw)
        vec = s.search("postgres replication lag", mode="vector")
        assert vec and {h.match for h in vec} == {"vector"} and all(h.text_score == 0 for h in vec)


def test_score_does_not_depend_on_the_other_candidates(local_index: Settings) -> None:
    """A chunk's score is the same whether 6 or 50 results (and 24 or 200 candidates) are asked."""
    with Searcher(local_index) as s:
        few = {h.citation: h.score for h in s.search("rate limiting per API key", max_results=6, min_score=0)}
        many = {h.citation: h.score for h in s.search("rate limiting per API key", max_results=50, min_score=0)}
    assert few and all(many[c] == pytest.approx(v) for c, v in few.items())


def test_decay_and_mmr_reorder_but_never_remove(local_index: Settings) -> None:
    query = "replication lag"
    # every candidate that passes (no cut at max_results: MMR and decay choose which results a
    # short answer shows, so a cut at 20 could drop a different 20th; what must not happen is that
    # a result that passed is removed)
    with Searcher(local_index) as s:
        plain = s.search(query, max_results=200)
    assert len(plain) < 200
    decayed_settings = local_index.model_copy(update={"query": local_index.query.model_copy(update={
        "temporal_decay": local_index.query.temporal_decay.model_copy(update={"enabled": True, "half_life_days": 1.0}),
        "mmr": local_index.query.mmr.model_copy(update={"enabled": True}),
    })})
    with Searcher(decayed_settings) as s:
        decayed = s.search(query, max_results=200)
    # notes from September 2026 are ~60 half-lives old: still returned, same relevance scores
    assert plain and {h.citation for h in decayed} == {h.citation for h in plain}
    assert {h.citation: h.score for h in decayed} == {h.citation: h.score for h in plain}


@pytest.mark.parametrize("dims", [64, 1536])
def test_calibration_of_other_models_comes_from_the_index(tmp_path: Path, dims: int) -> None:
    """A model without a measured table entry is calibrated from the index's background cosine:
    the same model at two widths (the 1536-d one squeezed into a narrow cosine band) keeps the
    same relevance, and a query sharing nothing with the notes returns nothing."""
    provider = BagOfWordsProvider(dims, base_dims=64, common=0.6) if dims == 1536 else BagOfWordsProvider(64)
    ws = _copy(tmp_path / "ws")
    s = load_settings(None, {"workspace": str(ws), "provider": "none"})
    run_index(s, provider=provider)
    with Searcher(s, provider=provider) as searcher:
        cands = searcher.retrieve("pgbackrest restore", 24)
        assert cands.calibration.source == "index background"
        if dims == 1536:
            assert cands.calibration.cos_low > 0.5  # the squeezed band
        hits = searcher.search("pgbackrest restore point in time")
        assert hits and hits[0].path == "memory/howto/restore-postgres-backup.md"
        assert searcher.search("zzqx wvbn") == []


def test_vector_calibration_override(local_index: Settings) -> None:
    strict = local_index.model_copy(update={"query": local_index.query.model_copy(
        update={"vector_calibration": (0.5, 0.9)})})
    with Searcher(local_index) as a, Searcher(strict) as b:
        q = "who looked after the cat while we were away"
        loose = {h.citation: h.score for h in a.search(q, min_score=0)}
        tight = {h.citation: h.score for h in b.search(q, min_score=0)}
        assert b.retrieve(q, 24).calibration.source == "config"
    common = loose.keys() & tight.keys()
    assert common and all(tight[c] <= loose[c] for c in common)
    with pytest.raises(ConfigError, match="vector_calibration"):
        load_settings(None, {"workspace": ".", "query": {"vector_calibration": [0.8, 0.2]}})


def test_keyword_relevance_is_absolute_and_monotone() -> None:
    # a full match at average length (bm25 = idf_total): 1 / (1 + 0.5)
    assert ranking.keyword_relevance(10.0, 10.0) == pytest.approx(2 / 3)
    assert ranking.keyword_relevance(5.0, 10.0) == pytest.approx(0.5)  # half the query's information
    assert ranking.keyword_relevance(0.0, 10.0) == 0.0
    # strictly increasing in BM25 for one query: no ties where BM25 tells chunks apart
    values = [ranking.keyword_relevance(b, 10.0) for b in (0.5, 1, 2, 5, 10, 20, 40)]
    assert all(x < y for x, y in zip(values, values[1:], strict=False)) and values[-1] < 1
    # a query whose rarest words are in no memory: scaled by the share of it that exists
    assert ranking.keyword_relevance(10.0, 10.0, 0.45) == pytest.approx(2 / 3 * 0.45)
    cal = ranking.Calibration.for_model("all-MiniLM-L6-v2", None)
    assert (cal.cos_low, cal.cos_high, cal.source) == (0.2, 0.8, "model table")
    assert ranking.vector_relevance(0.2, cal) == pytest.approx(0.05) and ranking.vector_relevance(0.8, cal) == pytest.approx(0.95)
    assert ranking.vector_relevance(0.5, cal) == pytest.approx(0.5)
    cos = [ranking.vector_relevance(c, cal) for c in (-0.5, 0.1, 0.3, 0.79, 0.85, 0.99)]
    assert all(x < y for x, y in zip(cos, cos[1:], strict=False))  # strictly increasing, no clamp ties
    other = ranking.Calibration.for_model("text-embedding-3-small", 0.1)
    assert other.source == "index background" and other.cos_low == pytest.approx(0.1)


def test_search_mode_setting(tmp_path: Path) -> None:
    """``query.hybrid = false`` means vector-only, as in the reference; ``query.mode`` names it."""
    provider = BagOfWordsProvider(64)
    ws = _copy(tmp_path / "ws")
    base = load_settings(None, {"workspace": str(ws), "provider": "none"})
    run_index(base, provider=provider)
    for overrides, expected in (({}, "hybrid"), ({"hybrid": False}, "vector"), ({"mode": "keyword"}, "keyword"),
                                ({"hybrid": False, "mode": "hybrid"}, "hybrid")):
        s = load_settings(None, {"workspace": str(ws), "provider": "none", "query": overrides})
        assert s.query.search_mode() == expected
        with Searcher(s, provider=provider) as searcher:
            hits = searcher.search("pgbackrest restore point in time", min_score=0)
        kinds = {h.match for h in hits}
        if expected == "vector":
            assert kinds == {"vector"} and all(h.text_score == 0 for h in hits)
        elif expected == "keyword":
            assert kinds == {"keyword"} and all(h.vector_score == 0 for h in hits)
        else:
            assert "both" in kinds
    with pytest.raises(ConfigError, match="mode"):
        load_settings(None, {"workspace": str(ws), "query": {"mode": "both"}})


def test_cjk_queries_with_an_english_only_model_use_the_keyword_side(local_index: Settings) -> None:
    with Searcher(local_index) as s:
        for q in ("林薇 里斯本", "서버 에러 확인", "申し訳ございません"):
            hybrid = [(h.citation, h.score) for h in s.search(q)]
            keyword = [(h.citation, h.score) for h in s.search(q, mode="keyword")]
            matched = [(c, v) for c, v in hybrid if v > 0]
            assert matched and matched == keyword[:len(matched)], q
            # what follows in the answer (min_score is the answer's threshold) matched no side it weighs
            assert all(v == 0 for _, v in hybrid[len(matched):]), q
    assert ranking.mostly_cjk("林薇 里斯本") and not ranking.mostly_cjk("Lisbon trip with 林薇")


def test_the_readme_quick_start_prints_what_the_readme_shows(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """README's quick start: its two commands on a copy of examples/workspace print the results it
    shows (citation and how it matched, in its order; the score within 0.01). A ranking or
    calibration change that moves them must update the README a new user reads first."""
    import re

    from memory_core.apps.cli import main
    from tests.conftest import ROOT

    readme = (ROOT / "README.md").read_text()
    quick = readme[readme.index("## Quick start"):readme.index("## Tests")]
    command = re.search(r'memory-core index -w examples/workspace && memory-core search -w examples/workspace "([^"]+)"',
                        quick)
    assert command, "README's quick start no longer has the index && search command"
    shown = re.findall(r"^(\S+#L\d+-L\d+)  score (\d\.\d{3})  (\w+)  ", quick, re.M)
    assert len(shown) >= 2, "README's quick start shows no sample results"
    ws = _copy(tmp_path / "ws")
    for var in ("MEMORY_CORE_CONFIG", "MEMORY_CORE_PROVIDER", "MEMORY_CORE_AGENT"):
        monkeypatch.delenv(var, raising=False)
    assert main(["index", "-w", str(ws)]) == 0
    capsys.readouterr()
    assert main(["search", "-w", str(ws), command.group(1)]) == 0
    printed = re.findall(r"^(\S+#L\d+-L\d+)  score (\d\.\d{3})  (\w+)  ", capsys.readouterr().out, re.M)
    # the citations and how they matched exactly; the scores to 0.01: the local model's int8 backend
    # (a CPU with VNNI) and its float one give cosines 0.99+ alike, e.g. 0.844 / 0.847
    assert [(c, m) for c, _, m in printed[:len(shown)]] == [(c, m) for c, _, m in shown]
    for (c, ours, _), (_, theirs, _) in zip(printed, shown, strict=False):
        assert abs(float(ours) - float(theirs)) <= 0.01, (c, ours, theirs)
