"""Tests for memory_core.query.ranking: reference examples, fusion and min_score behaviour, decay, MMR,
snippets and dedupe."""

from __future__ import annotations

import math
import random
import statistics
from datetime import UTC, date, datetime

import pytest

from memory_core.query import ranking
from memory_core.query.ranking import (
    SNIPPET_MAX_CHARS,
    Hit,
    apply_temporal_decay,
    bm25_rank_to_score,
    date_from_path,
    dedupe_overlapping,
    fuse,
    is_evergreen,
    jaccard,
    make_snippet,
    merge_hybrid_reference,
    mmr_rerank,
    normalize_weights,
    temporal_decay_multiplier,
)
from memory_core.storage.textsearch import keyword_tokens, query_terms

MINMAX_FLOOR = 0.2  # the noise floor the min-max fusion was designed for (its former default min_score)


def hit(
    id: str,
    *,
    v: float = 0.0,
    t: float = 0.0,
    score: float = 0.0,
    text: str = "",
    snippet: str = "",
    path: str = "memory/notes.md",
    lines: tuple[int, int] = (1, 1),
    mtime_ms: int | None = None,
    source: str = "memory",
    date: str | None = None,
) -> Hit:
    return Hit(
        id=id,
        path=path,
        source=source,
        start_line=lines[0],
        end_line=lines[1],
        text=text,
        vector_score=v,
        text_score=t,
        score=score,
        snippet=snippet,
        mtime_ms=mtime_ms,
        date=date,
    )


# ---------------------------------------------------------------------------------------------
# Reference examples
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("rank", "expected"),
    [(0, 1.0), (1, 0.5), (10, 0.0909), (-1, 0.5), (-4.2, 0.8077), (math.inf, 0.001), (math.nan, 0.001)],
)
def test_bm25_rank_to_score(rank: float, expected: float) -> None:
    assert bm25_rank_to_score(rank) == pytest.approx(expected, abs=1e-4)


def test_merge_hybrid_reference_examples() -> None:
    merged = merge_hybrid_reference([hit("a", v=0.9)], [hit("b", t=1.0)], 0.7, 0.3)
    assert [(h.id, round(h.score, 6)) for h in merged] == [("a", 0.63), ("b", 0.3)]

    merged = merge_hybrid_reference(
        [hit("a", v=0.2, snippet="vec-a")], [hit("a", t=1.0, snippet="kw-a")], 0.5, 0.5
    )
    assert len(merged) == 1
    assert merged[0].snippet == "kw-a"
    assert merged[0].score == pytest.approx(0.6)


@pytest.mark.parametrize(("age", "expected"), [(10, 0.7937), (30, 0.5), (60, 0.25), (0, 1.0), (-5, 1.0)])
def test_temporal_decay_multiplier(age: float, expected: float) -> None:
    assert temporal_decay_multiplier(age, 30) == pytest.approx(expected, abs=1e-4)


def test_temporal_decay_multiplier_bad_half_life() -> None:
    assert temporal_decay_multiplier(100, 0) == 1.0
    assert temporal_decay_multiplier(100, -3) == 1.0
    assert temporal_decay_multiplier(100, math.nan) == 1.0


MMR_ITEMS = [
    ("1", 1.0, "machine learning neural networks"),
    ("2", 0.95, "machine learning deep learning"),
    ("3", 0.9, "database systems sql queries"),
    ("4", 0.85, "machine learning algorithms"),
]


@pytest.mark.parametrize(("lam", "expected"), [(0.5, ["1", "3", "2", "4"]), (0.7, ["1", "2", "3", "4"])])
def test_mmr_reference_examples(lam: float, expected: list[str]) -> None:
    items = [hit(i, score=s, text=t) for i, s, t in MMR_ITEMS]
    assert [h.id for h in mmr_rerank(items, lam)] == expected


# ---------------------------------------------------------------------------------------------
# fuse(): shape of the scores
# ---------------------------------------------------------------------------------------------
def test_normalize_weights() -> None:
    assert normalize_weights(0.7, 0.3) == pytest.approx((0.7, 0.3))
    assert normalize_weights(2.0, 1.0) == pytest.approx((0.5, 0.5))  # clamped to 1 each
    assert normalize_weights(0.6, -1) == pytest.approx((1.0, 0.0))
    assert normalize_weights(0, 0) == (0.5, 0.5)


def test_fuse_merges_and_keeps_raw_scores() -> None:
    vec = [hit("a", v=0.6, snippet="vec-a"), hit("b", v=0.4), hit("c", v=0.3), hit("d", v=0.2)]
    kw = [hit("a", t=0.8, snippet="kw-a"), hit("e", t=0.5)]
    fused = fuse(vec, kw)
    by_id = {h.id: h for h in fused}
    assert set(by_id) == {"a", "b", "c", "d", "e"}
    assert by_id["a"].vector_score == 0.6 and by_id["a"].text_score == 0.8
    assert by_id["a"].snippet == "kw-a"
    assert by_id["e"].vector_score == 0.0
    assert [h.id for h in fused][0] == "a"
    assert all(0.0 <= h.score <= 1.0 for h in fused)
    assert fused == sorted(fused, key=lambda h: h.score, reverse=True)
    # inputs untouched
    assert vec[0].text_score == 0.0 and vec[0].snippet == "vec-a"


def test_fuse_is_not_pure_minmax() -> None:
    """The best hit is not automatically 1.0 and the worst candidate is not 0."""
    vec = [hit(f"v{i}", v=c) for i, c in enumerate([0.31, 0.30, 0.29, 0.28, 0.27, 0.26])]
    fused = fuse(vec, [])
    assert fused[0].score < 0.9  # a flat pool: weak confidence
    assert fused[-1].score > 0.0  # the last candidate keeps a score
    assert fused[-1].score == pytest.approx(fused[0].score * 0.2)


def test_fuse_keyword_only_mode_uses_bm25_anchor() -> None:
    strong = fuse([], [hit("a", t=bm25_rank_to_score(-9.0)), hit("b", t=bm25_rank_to_score(-2.0))])
    weak = fuse([], [hit("a", t=bm25_rank_to_score(-0.2)), hit("b", t=bm25_rank_to_score(-0.1))])
    assert strong[0].score == pytest.approx(0.5 + 0.5 * 0.9)
    assert weak[0].score < strong[0].score
    assert weak[0].score >= 0.5  # never below the anchor floor: keyword-only lists are not emptied
    # explicit weights as the query module passes them in keyword-only mode
    assert fuse([], [hit("a", t=0.9)], vector_weight=0.0, text_weight=1.0)[0].score == pytest.approx(0.95)


def test_fuse_empty_and_bad_method() -> None:
    assert fuse([], []) == []
    with pytest.raises(ValueError):
        fuse([hit("a", v=1)], [], method="max")


def test_fuse_duplicate_ids_within_a_side_keep_best() -> None:
    fused = fuse([hit("a", v=0.2), hit("a", v=0.5), hit("b", v=0.1)], [])
    assert [h.id for h in fused] == ["a", "b"]
    assert fused[0].vector_score == 0.5


def test_fuse_non_finite_scores_do_not_poison() -> None:
    fused = fuse([hit("a", v=0.5), hit("b", v=math.nan), hit("c", v=0.3)], [hit("d", t=math.inf)])
    assert all(math.isfinite(h.score) and 0.0 <= h.score <= 1.0 for h in fused)
    assert fused[0].id == "a"


def test_fuse_rrf_rescaled() -> None:
    vec = [hit("a", v=0.9), hit("b", v=0.8), hit("c", v=0.7)]
    kw = [hit("a", t=0.9), hit("c", t=0.8), hit("d", t=0.1)]
    fused = fuse(vec, kw, method="rrf", vector_weight=0.7, text_weight=0.3)
    by_id = {h.id: h.score for h in fused}
    assert by_id["a"] == pytest.approx(1.0)  # rank 1 on both sides
    assert by_id["b"] == pytest.approx(0.7 * 61 / 62)
    assert by_id["d"] == pytest.approx(0.3 * 61 / 63)
    assert all(0.0 <= s <= 1.0 for s in by_id.values())
    # raw RRF would be ~0.016; rescaled scores make min_score usable
    assert sum(s >= MINMAX_FLOOR for s in by_id.values()) == 4
    # vector-only rank 1 equals the vector weight (default weights 0.5 / 0.5)
    assert fuse([hit("x", v=0.1)], [hit("y", t=0.1)], method="rrf")[0].score == pytest.approx(0.5)
    assert fuse([hit("x", v=0.1)], [hit("y", t=0.1)], method="rrf", vector_weight=0.7,
                text_weight=0.3)[0].score == pytest.approx(0.7)


def test_fuse_keyword_positions_are_bm25_shares() -> None:
    """Keyword hits are placed by their BM25 as a share of the best hit's, whatever the pool size."""
    ranks = [-8.0, -4.0, -2.0, -1.0]
    kw = [hit(f"k{i}", t=bm25_rank_to_score(r)) for i, r in enumerate(ranks)]
    anchor = 0.5 + 0.5 * bm25_rank_to_score(-8.0)
    by_id = {h.id: h.score for h in fuse([], kw)}
    for i, r in enumerate(ranks):
        assert by_id[f"k{i}"] == pytest.approx(anchor * r / -8.0)
    # the same hits in a longer pool keep their scores (a truncated pool changes nothing above it)
    longer = kw + [hit(f"z{i}", t=bm25_rank_to_score(-0.1)) for i in range(50)]
    assert {h.id: h.score for h in fuse([], longer) if h.id in by_id} == pytest.approx(by_id)
    # hybrid: a keyword-only hit contributes w_t * anchor * share
    vec = [hit(f"v{i}", v=0.5 - i / 100) for i in range(8)]
    fused = {h.id: h.score for h in fuse(vec, kw, vector_weight=0.5, text_weight=0.5)}
    assert fused["k1"] == pytest.approx(0.5 * anchor * 0.5)


# ---------------------------------------------------------------------------------------------
# fuse(): min_score behaviour across embedding dimensions
# ---------------------------------------------------------------------------------------------
def synthetic_pool(
    rng: random.Random,
    background: tuple[float, float],
    relevant: tuple[float, float],
    n: int = 24,
    n_rel: int = 3,
) -> list[Hit]:
    """A KNN candidate pool: ``n_rel`` relevant cosines above a uniform background."""
    cos = [rng.uniform(*relevant) for _ in range(n_rel)] + [
        rng.uniform(*background) for _ in range(n - n_rel)
    ]
    return [hit(f"d{i}", v=c) for i, c in enumerate(cos)]


# 384-d models (MiniLM): cosines ~0.2-0.6; 3072-d models: ~0.1-0.4.
MODELS = {
    "384d": {"background": (0.2, 0.42), "relevant": (0.5, 0.6)},
    "3072d": {"background": (0.1, 0.26), "relevant": (0.3, 0.4)},
}
# the best keyword hit is not among the vector candidates (an exact term the embedding missed)
KEYWORD_HITS = [hit("kw_only", t=0.9), hit("d0", t=0.85), hit("d1", t=0.6)]


def fused_by_rank(model: str, seed: int, *, relevant: bool = True, keyword: bool = True) -> list[float]:
    rng = random.Random(seed)
    m = MODELS[model]
    pool = synthetic_pool(rng, m["background"], m["relevant"], n_rel=3 if relevant else 0)
    return [h.score for h in fuse(pool, KEYWORD_HITS if keyword else [])]


def reference_by_rank(model: str, seed: int) -> list[float]:
    rng = random.Random(seed)
    m = MODELS[model]
    pool = synthetic_pool(rng, m["background"], m["relevant"])
    return [h.score for h in merge_hybrid_reference(pool, KEYWORD_HITS, 0.7, 0.3)]


def test_fused_scores_comparable_across_dimensions() -> None:
    ours, ref = [], []
    for seed in range(40):
        a, b = fused_by_rank("384d", seed), fused_by_rank("3072d", seed + 1000)
        ours.append(statistics.mean(abs(x - y) for x, y in zip(a[:10], b[:10], strict=True)))
        a, b = reference_by_rank("384d", seed), reference_by_rank("3072d", seed + 1000)
        ref.append(statistics.mean(abs(x - y) for x, y in zip(a[:10], b[:10], strict=True)))
    print(
        f"\nmean |384d - 3072d| over top-10 fused scores: ours {statistics.mean(ours):.3f}, "
        f"reference raw blend {statistics.mean(ref):.3f}"
    )
    assert statistics.mean(ours) < 0.05
    assert statistics.mean(ours) < statistics.mean(ref) / 2


@pytest.mark.parametrize("model", list(MODELS))
def test_default_min_score_keeps_good_hits(model: str) -> None:
    for seed in range(40):
        rng = random.Random(seed)
        m = MODELS[model]
        pool = synthetic_pool(rng, m["background"], m["relevant"])
        fused = fuse(pool, KEYWORD_HITS)
        kept = {h.id for h in fused if h.score >= MINMAX_FLOOR}
        # all three relevant docs (two with keyword support, one vector-only) and the best
        # keyword hit (not a vector candidate) survive; the bottom of the pool does not
        assert {"d0", "d1", "d2", "kw_only"} <= kept
        assert len(kept) < len(fused)
        # the reference's raw blend with its 0.35 threshold drops relevant vector-only hits of
        # 3072-d models and every keyword-only hit
        ref_kept = {h.id for h in merge_hybrid_reference(pool, KEYWORD_HITS, 0.7, 0.3) if h.score >= 0.35}
        assert "kw_only" not in ref_kept
        if model == "3072d":
            assert "d2" not in ref_kept


@pytest.mark.parametrize("model", list(MODELS))
def test_relevant_queries_score_above_background_only(model: str) -> None:
    """A pool with a clear winner gets a higher top score than a pool of background only."""
    rel = [fused_by_rank(model, seed, keyword=False)[0] for seed in range(40)]
    flat = [fused_by_rank(model, seed, relevant=False, keyword=False)[0] for seed in range(40)]
    print(
        f"\n{model}: top vector-only score, clear winner {statistics.mean(rel):.3f}, "
        f"background only {statistics.mean(flat):.3f}"
    )
    assert all(r >= f for r, f in zip(rel, flat, strict=True))
    assert statistics.mean(rel) >= statistics.mean(flat) + 0.1
    assert statistics.mean(rel) >= 0.95


def test_min_score_never_empties_a_list() -> None:
    rng = random.Random(7)
    for _ in range(500):
        n = rng.randint(1, 60)
        lo = rng.uniform(-0.2, 0.8)
        hi = lo + rng.uniform(0.0, 0.3)
        vec = [hit(f"v{i}", v=rng.uniform(lo, hi)) for i in range(n)]
        kw = [hit(f"k{i}", t=rng.uniform(0.0, 0.99)) for i in range(rng.randint(0, 10))]
        for v, k in ((vec, kw), (vec, []), ([], kw)):
            fused = fuse(v, k)
            if fused:
                assert fused[0].score >= MINMAX_FLOOR
                assert all(0.0 <= h.score <= 1.0 for h in fused)


# ---------------------------------------------------------------------------------------------
# Temporal decay
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("memory/2026-01-15.md", date(2026, 1, 15)),
        ("ws/memory/2024-02-29.md", date(2024, 2, 29)),
        ("./memory/2026-03-01.md", date(2026, 3, 1)),
        ("memory\\2026-03-01.md", date(2026, 3, 1)),
        ("memory/2026-02-30.md", None),
        ("memory/2026-13-01.md", None),
        ("memory/2025-02-29.md", None),
        ("memory/2026-01-15.txt", None),
        ("memory/notes-2026-01-15.md", None),
        ("notes/2026-01-15.md", None),
        ("MEMORY.md", None),
    ],
)
def test_date_from_path(path: str, expected: date | None) -> None:
    assert date_from_path(path) == expected


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("MEMORY.md", True),
        ("memory.md", True),
        ("./MEMORY.md", True),
        ("memory/projects.md", True),
        ("memory/people/alice.md", True),
        ("memory/2026-02-30.md", True),  # invalid date: undated, so evergreen
        ("memory/2026-01-15.md", False),
        ("notes/ideas.md", False),
        ("sessions/abc.jsonl", False),
        ("docs/MEMORY.md", False),
    ],
)
def test_is_evergreen(path: str, expected: bool) -> None:
    assert is_evergreen(path) is expected


def test_apply_temporal_decay() -> None:
    now = datetime(2026, 3, 31, tzinfo=UTC)
    day_ms = 86_400_000
    now_ms = int(now.timestamp() * 1000)
    hits = [
        hit("dated", score=1.0, path="memory/2026-03-01.md", mtime_ms=now_ms),  # path date wins: 30 days
        hit("evergreen", score=0.6, path="MEMORY.md", mtime_ms=now_ms - 300 * day_ms),
        hit("session", score=0.9, path="sessions/s1.jsonl", source="sessions", mtime_ms=now_ms - 10 * day_ms),
        hit("no_mtime", score=0.3, path="notes/x.md"),
        hit("future", score=0.2, path="notes/y.md", mtime_ms=now_ms + 5 * day_ms),
    ]
    out = apply_temporal_decay(hits, 30, now, floor=0.0)  # a plain exponential
    by_id = {h.id: h.score for h in out}
    assert by_id["dated"] == pytest.approx(0.5)
    assert by_id["evergreen"] == pytest.approx(0.6)
    assert by_id["session"] == pytest.approx(0.9 * 0.7937, abs=1e-4)
    assert by_id["no_mtime"] == pytest.approx(0.3)
    assert by_id["future"] == pytest.approx(0.2)
    assert [h.id for h in out] == ["session", "evergreen", "dated", "no_mtime", "future"]
    # the default floor: one half-life old keeps (1 + 0.7) / 2 of its score
    default = {h.id: h.score for h in apply_temporal_decay(hits, 30, now)}
    assert default["dated"] == pytest.approx(0.85) and default["session"] == pytest.approx(0.9 * (0.7 + 0.3 * 0.7937), abs=1e-4)
    out = apply_temporal_decay(hits, 30, now, floor=0.0)
    assert hits[0].score == 1.0  # input untouched
    # now as epoch seconds (time.time()) and as a naive UTC datetime give the same result
    assert [h.score for h in apply_temporal_decay(hits, 30, now.timestamp(), floor=0.0)] == [h.score for h in out]
    assert [h.score for h in apply_temporal_decay(hits, 30, datetime(2026, 3, 31), floor=0.0)] == [h.score for h in out]


# ---------------------------------------------------------------------------------------------
# MMR
# ---------------------------------------------------------------------------------------------
def test_mmr_cjk_snippets_are_not_identical() -> None:
    items = [
        hit("gold1", score=1.0, text="最近金银价格波动很大，我们决定减少黄金仓位。"),
        hit("gold2", score=0.95, text="最近金银价格波动很大，决定减少黄金仓位。"),
        hit("db", score=0.9, text="用户服务的数据库迁移方案：先双写，再回填。"),
    ]
    # near-duplicates are similar, different notes are not; all-CJK texts are not "identical"
    tok = {h.id: keyword_tokens(h.text) for h in items}
    assert jaccard(tok["gold1"], tok["gold2"]) > 0.8
    assert jaccard(tok["gold1"], tok["db"]) < 0.2
    assert [h.id for h in mmr_rerank(items, 0.5)] == ["gold1", "db", "gold2"]
    assert [h.id for h in mmr_rerank(items, 1.0)] == ["gold1", "gold2", "db"]


def test_mmr_edge_cases() -> None:
    assert mmr_rerank([], 0.7) == []
    one = [hit("a", score=0.3)]
    assert mmr_rerank(one, 0.7) == one
    # equal scores: relevance 1 for all; ties -> earlier item
    same = [hit("a", score=0.5, text="x y"), hit("b", score=0.5, text="p q")]
    assert [h.id for h in mmr_rerank(same, 0.7)] == ["a", "b"]
    # snippet preferred over text when present
    items = [
        hit("a", score=1.0, text="alpha", snippet="shared words here"),
        hit("b", score=0.9, text="alpha", snippet="shared words here"),
        hit("c", score=0.8, text="alpha", snippet="different entirely"),
    ]
    assert [h.id for h in mmr_rerank(items, 0.5)] == ["a", "c", "b"]
    assert [h.id for h in mmr_rerank(items, 0.5, key=lambda h: h.text)] == ["a", "b", "c"]


def test_jaccard() -> None:
    assert jaccard(frozenset(), frozenset()) == 1.0
    assert jaccard(frozenset({"a"}), frozenset()) == 0.0
    assert jaccard(frozenset({"a", "b"}), frozenset({"b", "c"})) == pytest.approx(1 / 3)


# ---------------------------------------------------------------------------------------------
# Snippets
# ---------------------------------------------------------------------------------------------
FILLER = " ".join(f"filler{i} words about nothing in particular." for i in range(120))


def test_snippet_whole_text_when_it_fits() -> None:
    text = "short note\nwith two lines"
    assert make_snippet(text, ["note"]) == text
    assert make_snippet("x" * 700, []) == "x" * 700


def test_snippet_centres_deep_match() -> None:
    text = FILLER + "\nThe database migration to PostgreSQL finished on Friday.\n" + FILLER
    assert len(text) > 3 * SNIPPET_MAX_CHARS
    snippet = make_snippet(text, query_terms("when did the postgresql migration finish"))
    assert len(snippet) <= SNIPPET_MAX_CHARS
    assert snippet in text
    assert "The database migration to PostgreSQL finished on Friday." in snippet
    centre = text.index("PostgreSQL")
    start = text.index(snippet)
    assert start < centre < start + len(snippet)
    assert abs((centre - start) - len(snippet) / 2) < 250  # roughly centred
    # cut at word boundaries
    assert text[start - 1].isspace()
    end = start + len(snippet)
    assert end == len(text) or text[end].isspace()


def test_snippet_match_near_start_keeps_head() -> None:
    text = "# Title\nThe api key lives in the vault.\n" + FILLER
    snippet = make_snippet(text, ["vault"])
    assert snippet.startswith("# Title")
    assert len(snippet) <= SNIPPET_MAX_CHARS


def test_snippet_prefers_window_with_most_terms() -> None:
    text = FILLER + " redis here. " + FILLER + "\nredis session cache expiry is 24 hours\n" + FILLER
    snippet = make_snippet(text, ["redis", "session", "cache", "expiry"])
    assert "redis session cache expiry is 24 hours" in snippet


def test_snippet_stem_match() -> None:
    text = FILLER + "\nWe finished the deployment of the new cluster.\n" + FILLER
    assert "deployment" in make_snippet(text, ["deploying"])


def test_snippet_no_match_returns_head_at_boundary() -> None:
    snippet = make_snippet(FILLER, ["zzz"])
    assert FILLER.startswith(snippet)
    assert len(snippet) <= SNIPPET_MAX_CHARS
    assert FILLER[len(snippet)].isspace()


def test_snippet_cjk() -> None:
    para = "这是一段没有关系的文字，用来填充笔记的内容。" * 40
    text = para + "最近金银价格波动很大，我们决定减少黄金仓位。" + para
    snippet = make_snippet(text, query_terms("金银价格"))
    assert len(snippet) <= SNIPPET_MAX_CHARS
    assert snippet in text
    assert "金银价格" in snippet
    # cut after CJK punctuation
    start = text.index(snippet)
    assert text[start - 1] in "。，"


def test_snippet_tiny_max_chars() -> None:
    assert make_snippet("hello world", ["world"], max_chars=0) == ""
    assert len(make_snippet(FILLER, ["filler50"], max_chars=40)) <= 40


# ---------------------------------------------------------------------------------------------
# Dedupe
# ---------------------------------------------------------------------------------------------
def test_dedupe_overlapping() -> None:
    hits = [
        hit("a", score=0.9, lines=(1, 20)),
        hit("b", score=0.8, lines=(17, 36)),  # 4/20 lines overlap with a: neighbour chunk, kept
        hit("c", score=0.7, lines=(5, 22)),  # 16/18 lines inside a: dropped
        hit("d", score=0.95, lines=(10, 30), path="memory/other.md"),  # other file: kept
        hit("e", score=0.6, lines=(30, 40)),  # 7/11 lines inside b: dropped
        hit("f", score=0.5, lines=(1, 20), source="sessions"),  # other source: kept
    ]
    assert [h.id for h in dedupe_overlapping(hits)] == ["a", "b", "d", "f"]


def test_dedupe_better_hit_wins_regardless_of_position() -> None:
    hits = [hit("worse", score=0.4, lines=(1, 10)), hit("better", score=0.8, lines=(2, 10))]
    assert [h.id for h in dedupe_overlapping(hits)] == ["better"]
    # exactly half is not "more than half"
    hits = [hit("a", score=0.9, lines=(1, 4)), hit("b", score=0.8, lines=(3, 6))]
    assert [h.id for h in dedupe_overlapping(hits)] == ["a", "b"]
    assert dedupe_overlapping([]) == []


def test_decay_reorders_but_never_buries_the_only_old_match() -> None:
    """An old chunk that answers (relevance 0.6, a year old) stays above recent ones that do not
    (0.35, 0.3): decay only reorders comparably relevant results."""
    now = datetime(2026, 11, 26, tzinfo=UTC)
    hits = [hit("old-answer", score=0.6, path="memory/2025-11-20.md"),
            hit("new-noise", score=0.35, path="memory/2026-11-25.md"),
            hit("new-noise-2", score=0.3, path="sessions/s.jsonl", source="sessions", date="2026-11-24T10:00")]
    assert [h.id for h in apply_temporal_decay(hits, 30, now)] == ["old-answer", "new-noise", "new-noise-2"]
    # with a plain exponential (floor 0) it sank to the bottom: what the floor fixes
    assert [h.id for h in apply_temporal_decay(hits, 30, now, floor=0.0)][-1] == "old-answer"
    # comparable relevance: the newer one wins
    close = [hit("old", score=0.5, path="memory/2025-11-20.md"), hit("new", score=0.45, path="memory/2026-11-25.md")]
    assert [h.id for h in apply_temporal_decay(close, 30, now)] == ["new", "old"]
    # a transcript chunk's own date is its age, not the file's modification time
    s1 = hit("s", score=1.0, path="sessions/a.jsonl", source="sessions", date="2026-10-27T09:00",
             mtime_ms=int(now.timestamp() * 1000))
    assert apply_temporal_decay([s1], 30, now)[0].score == pytest.approx(0.85)


def _scored(*scores: float) -> list[Hit]:
    return [Hit(id=str(i), path=f"f{i}.md", source="memory", start_line=1, end_line=2, text="x", score=s)
            for i, s in enumerate(scores)]


def test_min_score_is_the_answers_threshold_not_each_results() -> None:
    """The answer's best result must reach min_score; the rest are listed down to result_floor
    (a second session's weaker evidence is not hidden)."""
    kept = ranking.answer_threshold(_scored(0.5, 0.1, 0.04, 0.0), 0.15)
    assert [h.score for h in kept] == [0.5, 0.1, 0.04, 0.0]
    assert ranking.answer_threshold(_scored(0.14, 0.1), 0.15) == []  # nothing matches this well
    assert [h.score for h in ranking.answer_threshold(_scored(0.5, 0.1, 0.04), 0.15, 0.05)] == [0.5, 0.1]
    assert [h.score for h in ranking.answer_threshold(_scored(0.5, 0.1), 0.15, 0.15)] == [0.5]
