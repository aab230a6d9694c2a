"""Evaluation (memory-core eval) and search quality through real indexes.

Metric functions against hand-computed values; the eval command end to end on a keyword-only
index; CJK and Korean queries finding their notes; min_score behaviour with a 64-d and a
1536-d embedding; hostile query strings through ``Searcher.search``; the labelled example set
(keyword-only here, with the real local model in the slow suite).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import re
import shutil
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from memory_core.apps.evaluation import (
    PlainBaselines,
    add_eval_parser,
    cmd_eval,
    convex_fusion,
    evaluate_run,
    file_ranking,
    format_report,
    load_corpus_map,
    load_qrels,
    load_queries,
    mrr_at_k,
    ndcg_at_k,
    recall_at_k,
    resolve_corpus_ids,
    run_eval,
)
from memory_core.config import Settings, load_settings
from memory_core.embeddings.base import EmbeddingProvider, compute_provider_key
from memory_core.errors import UsageError
from memory_core.index.pipeline import run_index
from memory_core.query import ranking
from memory_core.query.search import Searcher
from tests.conftest import EXAMPLES, ROOT
from tests.test_textsearch import HOSTILE

EVAL = ROOT / "eval"


# ---------------------------------------------------------------------------------------------
# Metrics: hand-computed values
# ---------------------------------------------------------------------------------------------
def test_ndcg_hand_computed() -> None:
    rels = {"a": 2, "b": 1, "c": 0}
    # a at rank 2, b at rank 3: DCG = 2/log2(3) + 1/log2(4) = 1.26186 + 0.5
    # ideal: a, b: IDCG = 2/log2(2) + 1/log2(3) = 2 + 0.63093
    assert ndcg_at_k(["x", "a", "b"], rels, 10) == pytest.approx((2 / math.log2(3) + 0.5) / (2 + 1 / math.log2(3)))
    assert ndcg_at_k(["a", "b"], rels, 10) == pytest.approx(1.0)
    assert ndcg_at_k(["b", "a"], rels, 10) == pytest.approx((1 + 2 / math.log2(3)) / (2 + 1 / math.log2(3)))
    assert ndcg_at_k(["x", "y"], rels, 10) == 0.0
    assert ndcg_at_k(["c"], rels, 10) == 0.0  # judged non-relevant: no gain
    # cut at k: a at rank 11 does not count
    assert ndcg_at_k([f"x{i}" for i in range(10)] + ["a"], {"a": 1}, 10) == 0.0
    assert ndcg_at_k(["a"], {"c": 0}, 10) == 0.0  # nothing relevant: 0, not a division error
    # binary relevance, one relevant document at rank 4: 1/log2(5)
    assert ndcg_at_k(["w", "x", "y", "a"], {"a": 1}, 10) == pytest.approx(1 / math.log2(5))


def test_recall_and_mrr_hand_computed() -> None:
    rels = {"a": 1, "b": 2, "c": 1, "d": 0}
    ranked = ["d", "b", "x", "a"] + [f"y{i}" for i in range(200)] + ["c"]
    assert recall_at_k(ranked, rels, 10) == pytest.approx(2 / 3)
    assert recall_at_k(ranked, rels, 100) == pytest.approx(2 / 3)
    assert recall_at_k(ranked, rels, 1000) == pytest.approx(1.0)
    assert recall_at_k(ranked, {"d": 0}, 10) == 0.0
    assert mrr_at_k(ranked, rels, 10) == pytest.approx(1 / 2)
    assert mrr_at_k(["x"] * 10 + ["a"], rels, 10) == 0.0
    assert mrr_at_k(["a"], rels, 10) == 1.0


def test_evaluate_run_means_over_judged_queries() -> None:
    qrels = {"q1": {"a": 1}, "q2": {"b": 1, "c": 1}, "q3": {"z": 0}}  # q3 has nothing relevant: skipped
    run = {"q1": ["a"], "q2": ["x", "c"]}
    m = evaluate_run(run, qrels)
    # q1: ndcg 1, r@10 1, mrr 1. q2: c at rank 2: DCG 1/log2(3); IDCG 1 + 1/log2(3); r@10 1/2; mrr 1/2
    q2_ndcg = (1 / math.log2(3)) / (1 + 1 / math.log2(3))
    assert m["ndcg@10"] == pytest.approx((1 + q2_ndcg) / 2)
    assert m["recall@10"] == pytest.approx((1 + 0.5) / 2)
    assert m["recall@100"] == pytest.approx(0.75)
    assert m["mrr@10"] == pytest.approx(0.75)
    # a query missing from the run scores 0
    assert evaluate_run({}, qrels)["ndcg@10"] == 0.0
    assert evaluate_run({}, {})["mrr@10"] == 0.0


def test_file_ranking_is_best_chunk_rank() -> None:
    assert file_ranking(["a.md", "b.md", "a.md", "c.md", "b.md"]) == ["a.md", "b.md", "c.md"]


# ---------------------------------------------------------------------------------------------
# Inputs and corpus id mapping
# ---------------------------------------------------------------------------------------------
def test_loaders(tmp_path: Path) -> None:
    q = tmp_path / "q.jsonl"
    q.write_text('{"_id": "1", "text": "hello", "metadata": {}}\n\n{"_id": 2, "text": "金银"}\n', encoding="utf-8")
    assert load_queries(q) == {"1": "hello", "2": "金银"}
    r = tmp_path / "r.tsv"
    r.write_text("query-id\tcorpus-id\tscore\n1\tdoc1\t1\n1\tdoc2\t2\n# comment\n\n2\tdoc3\t0\n")
    assert load_qrels(r) == {"1": {"doc1": 1, "doc2": 2}, "2": {"doc3": 0}}
    m = tmp_path / "m.tsv"
    m.write_text("corpus-id\tpath\n4983\tmemory/papers/4983.md\n")
    assert load_corpus_map(m) == {"4983": "memory/papers/4983.md"}
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": 1}\n')
    with pytest.raises(UsageError, match=r"bad.jsonl:1"):
        load_queries(bad)
    bad_qrels = tmp_path / "bad.tsv"
    bad_qrels.write_text("1\tdoc1\t1\n2\tdoc2\thigh\n")
    with pytest.raises(UsageError, match=r"bad.tsv:2"):
        load_qrels(bad_qrels)
    with pytest.raises(UsageError, match="not found"):
        load_queries(tmp_path / "missing.jsonl")


def test_resolve_corpus_ids() -> None:
    paths = ["MEMORY.md", "memory/2026-09-04.md", "memory/a/notes.md", "memory/b/notes.md", "memory/papers/4983.md"]
    mapping, unresolved = resolve_corpus_ids(
        ["memory/2026-09-04.md", "memory/2026-09-04", "MEMORY", "2026-09-04", "4983", "notes", "x", "m1"],
        paths, {"m1": "memory/a/notes.md"},
    )
    assert mapping == {
        "memory/2026-09-04.md": "memory/2026-09-04.md", "memory/2026-09-04": "memory/2026-09-04.md",
        "MEMORY": "MEMORY.md", "2026-09-04": "memory/2026-09-04.md", "4983": "memory/papers/4983.md",
        "m1": "memory/a/notes.md",
    }
    assert unresolved == ["notes", "x"]  # "notes" is ambiguous: two files have that name


# ---------------------------------------------------------------------------------------------
# A tiny "semantic" embedding provider with a chosen dimension
# ---------------------------------------------------------------------------------------------
_TOKEN_RE = re.compile(r"[^\W_]+")


class BagOfWordsProvider(EmbeddingProvider):
    """Deterministic text embeddings: the normalised sum of one random unit vector per word (CJK:
    per character and bigram). Cosines follow word overlap, plus the random background of the
    dimension (~1/sqrt(d)): a 64-d model spreads unrelated texts much wider than a 1536-d one.

    With ``base_dims``, the same ``base_dims`` model is embedded into ``dims`` dimensions by a
    fixed rotation plus a component ``common`` shared by every text: rankings are identical, raw
    cosines are squeezed into ``common + (1 - common) * cos`` (as large hosted models crowd
    their cosines into a narrow band).
    """

    name = "fake"
    default_chunk_tokens = 200
    default_chunk_overlap = 40

    def __init__(self, dims: int, *, base_dims: int | None = None, common: float = 0.0) -> None:
        self.dims = dims
        self.base_dims = base_dims or dims
        self.model = f"bow-{self.base_dims}-in-{dims}-c{common}"
        self._key = compute_provider_key("fake", self.model, dimensions=dims)
        self._cache: dict[str, np.ndarray] = {}
        self._rot: tuple[np.ndarray, np.ndarray, float] | None = None
        if base_dims:
            g = np.random.default_rng(99).standard_normal((dims, base_dims + 1))
            q, _ = np.linalg.qr(g)
            self._rot = (q[:, :base_dims].astype(np.float32), q[:, base_dims].astype(np.float32), common)

    @property
    def provider_key(self) -> str:
        return self._key

    def _word(self, w: str) -> np.ndarray:
        v = self._cache.get(w)
        if v is None:
            seed = int.from_bytes(hashlib.blake2b(w.encode(), digest_size=8).digest(), "little")
            v = np.random.default_rng(seed).standard_normal(self.base_dims).astype(np.float32)
            v /= np.linalg.norm(v)
            self._cache[w] = v
        return v

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        base = np.zeros((len(texts), self.base_dims), dtype=np.float32)
        for i, t in enumerate(texts):
            words = sorted(ranking.keyword_tokens(t) - {"the", "a", "of", "to", "and", "in", "on"})
            v = sum((self._word(w) for w in words), np.zeros(self.base_dims, dtype=np.float32))
            if not words:
                v = self._word("\x00" + t)
            base[i] = v / (np.linalg.norm(v) or 1.0)
        if self._rot is None:
            return base
        q, u, common = self._rot
        out = math.sqrt(1 - common) * base @ q.T + math.sqrt(common) * u
        return (out / np.linalg.norm(out, axis=1, keepdims=True)).astype(np.float32)

    def embed_query(self, text: str) -> np.ndarray:
        return self.embed_documents([text])[0]


def _copy_examples(dst: Path) -> Path:
    shutil.copytree(EXAMPLES / "workspace", dst, ignore=shutil.ignore_patterns(".memory-core"))
    return dst


@pytest.fixture(scope="module")
def keyword_index(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    """The example workspace indexed without embeddings (keyword-only)."""
    ws = _copy_examples(tmp_path_factory.mktemp("kw") / "ws")
    s = load_settings(None, {"workspace": str(ws), "provider": "none"})
    run_index(s)
    return s


@pytest.fixture(scope="module", params=[64, 1536], ids=["64d", "1536d"])
def vector_index(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    """The example workspace indexed with a 64-d or 1536-d bag-of-words provider."""
    dims = request.param
    ws = _copy_examples(tmp_path_factory.mktemp(f"v{dims}") / "ws")
    s = load_settings(None, {"workspace": str(ws), "provider": "none"})
    provider = BagOfWordsProvider(dims)
    run_index(s, provider=provider)
    return s, provider


# ---------------------------------------------------------------------------------------------
# The eval command end to end
# ---------------------------------------------------------------------------------------------
def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="memory-core")
    sub = parser.add_subparsers(dest="command")
    add_eval_parser(sub)
    return parser.parse_args(["eval", *argv])


def test_eval_command_end_to_end(keyword_index: Settings, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    q = tmp_path / "queries.jsonl"
    q.write_text("\n".join(json.dumps(x, ensure_ascii=False) for x in [
        {"_id": "gold", "text": "金银价格"},
        {"_id": "none", "text": "DS-82"},  # appears in no indexed file: nothing found
        {"_id": "unjudged", "text": "Lisbon"},
    ]) + "\n", encoding="utf-8")
    r = tmp_path / "qrels.tsv"
    r.write_text("query-id\tcorpus-id\tscore\ngold\tmemory/2026-10-08\t1\nnone\tmemory/2026-09-01\t1\n"
                 "none\tnot-a-file\t1\n")
    args = _parse(["-w", str(keyword_index.workspace_dir), "--queries", str(q), "--qrels", str(r),
                   "--json", "--sides", "--per-query", str(tmp_path / "pq.tsv")])
    assert cmd_eval(args) == 0
    out, err = capsys.readouterr()
    report = json.loads(out)
    # gold: the one relevant file first -> 1 everywhere; none: two relevant, neither found -> 0
    assert report["queries"] == 2
    assert report["metrics"]["hybrid"] == pytest.approx(
        {"ndcg@10": 0.5, "recall@10": 0.5, "recall@100": 0.5, "mrr@10": 0.5})
    assert report["metrics"]["keyword"] == report["metrics"]["hybrid"]  # keyword-only index
    assert report["metrics"]["vector"] is None
    assert report["unresolved_documents"] == ["not-a-file"]
    # the calibration check: results by score band, the share in a relevant file
    bands = report["calibration"]
    assert len(bands) == 10 and bands[0]["from"] == 0 and bands[-1]["to"] == 1
    top = [b for b in bands if b["results"]][-1]
    assert top["relevant"] == 1.0  # the 金银价格 note, the best-scored result
    assert "1 of 3 judged documents are not files of the index" in err
    # the sides at the configured min_score and at 0, plain BM25; no plain convex fusion without vectors
    assert set(report["metrics"]) == {"hybrid", "vector", "keyword", "hybrid@0", "vector@0", "keyword@0",
                                      "bm25", "convex"}
    assert report["metrics"]["convex"] is None and report["metrics"]["vector@0"] is None
    assert report["metrics"]["bm25"] is not None
    rows = (tmp_path / "pq.tsv").read_text().splitlines()
    assert rows[0].split("\t")[:2] == ["side", "query-id"] and len(rows) == 1 + 7 * 2

    # the text report
    args = _parse(["-w", str(keyword_index.workspace_dir), "--queries", str(q), "--qrels", str(r),
                   "--sides", "--min-score", "0"])
    assert cmd_eval(args) == 0
    out, _ = capsys.readouterr()
    assert "ndcg@10" in out and "hybrid*" in out and "n/a" in out and "min_score 0" in out
    assert re.search(r"hybrid\*\s+0\.5000\s+0\.5000\s+0\.5000\s+0\.5000", out)
    assert "plain baselines over the same chunks" in out and re.search(r"^bm25\s+\d", out, re.M)
    assert "hybrid@0" not in out  # min_score 0 already: no second row at 0


def test_convex_fusion_hand_computed() -> None:
    # keyword 10, 5, 0 -> 1, .5, 0; vector .1, .9, .5 -> 0, 1, .5; fused .5, .75, .25
    assert convex_fusion({1: 10.0, 2: 5.0, 3: 0.0}, {1: 0.1, 2: 0.9, 3: 0.5}) == [2, 1, 3]
    assert convex_fusion({1: 10.0, 2: 5.0, 3: 0.0}, {1: 0.1, 2: 0.9, 3: 0.5}, weight=0.0) == [1, 2, 3]
    assert convex_fusion({1: 1.0, 2: 1.0}, {1: 0.3, 2: 0.3}) == [1, 2]  # ties by row id


def test_sides_report_plain_baselines_over_the_same_chunks(tmp_path: Path) -> None:
    """``eval --sides`` ranks the index's own chunks by plain BM25 and by a plain 0.5/0.5 convex
    fusion: BM25's order here is known (both rare words > one word in a short note > one word in
    a long one; no match: not returned), and the convex fusion reaches, through the vector side,
    a note that shares no word with the query."""
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    filler = " ".join(f"filler{i} words{i} here{i}" for i in range(40))
    notes = {
        "a.md": "The quokka met a zebra.\n",
        "b.md": "A zebra crossing.\n",
        "c.md": f"{filler} zebra {filler}\n",
        "d.md": "Pelicans eat fish near the harbour.\n",
    }
    for name, text in notes.items():
        (ws / "memory" / name).write_text(text)
    s = load_settings(None, {"workspace": str(ws), "provider": "none"})
    provider = BagOfWordsProvider(64)
    run_index(s, provider=provider)
    q = tmp_path / "queries.jsonl"
    q.write_text(json.dumps({"_id": "z", "text": "quokka zebra"}) + "\n"
                 + json.dumps({"_id": "p", "text": "pelicans harbour quokka"}) + "\n")
    r = tmp_path / "qrels.tsv"
    r.write_text("z\tmemory/c.md\t1\np\tmemory/d.md\t1\n")

    with PlainBaselines(s, provider) as plain:
        assert sorted(set(plain.paths.values())) == [f"memory/{n}" for n in sorted(notes)]  # the index's chunks
        got = plain.rank("quokka zebra")
        assert file_ranking(got["bm25"]) == ["memory/a.md", "memory/b.md", "memory/c.md"]  # chunks, then files
        assert got["convex"] is not None and got["convex"][0] == "memory/a.md"
        assert set(got["convex"]) == set(plain.paths.values())  # the vector side brings every chunk
        scores = dict(plain.bm25_scores("quokka zebra"))
        assert len(scores) == len(got["bm25"]) >= 3 and all(v > 0 for v in scores.values())

    report = run_eval(s, q, r, sides=True, provider=provider, min_score=0.3)
    pq = report["per_query"]
    assert pq["bm25"]["z"]["mrr@10"] == pytest.approx(1 / 3)  # c.md third by BM25
    assert pq["bm25"]["p"]["recall@100"] == 1.0  # "pelicans harbour" are in d.md
    assert report["metrics"]["convex"] is not None and pq["convex"]["p"]["recall@10"] == 1.0
    assert {"hybrid@0", "keyword@0", "vector@0"} <= set(report["metrics"])  # min_score 0.3: the sides at 0 too
    assert report["settings"]["min_score"] == 0.3
    lines = "\n".join(format_report(report))
    assert re.search(r"^convex\s+\d", lines, re.M) and re.search(r"^hybrid@0\s+\d", lines, re.M)
    # the index's recorded vector scan plan (measured when it was built) is in the report (issue 39)
    scan = report["vector_scan"]
    assert scan is not None and scan["measured"] is True and scan["mode"] in {"bits", "exact"}
    assert "exact cosines" in scan["summary"]  # 4 notes: every vector is read, nothing to measure
    assert f"vector scan (recorded at build): {scan['summary']}" in lines


def test_eval_bad_inputs(keyword_index: Settings, tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="queries file not found"):
        cmd_eval(_parse(["-w", str(keyword_index.workspace_dir), "--queries", str(tmp_path / "x.jsonl"),
                         "--qrels", str(tmp_path / "y.tsv")]))
    # a threshold out of 0-1 is refused as search refuses it (nan, 5 and -3 ran: at 5 every metric was 0)
    for bad in ("nan", "5", "-3"):
        with pytest.raises(UsageError, match="--min-score must be between 0 and 1"):
            cmd_eval(_parse(["-w", str(keyword_index.workspace_dir), "--queries", str(EVAL / "examples-queries.jsonl"),
                             "--qrels", str(EVAL / "examples-qrels.tsv"), "--min-score", bad]))


def test_labelled_examples_keyword_only(keyword_index: Settings) -> None:
    """The labelled example set (eval/) through the keyword-only index."""
    report = run_eval(keyword_index, EVAL / "examples-queries.jsonl", EVAL / "examples-qrels.tsv")
    m = report["metrics"]["hybrid"]
    print(f"\nexamples, keyword-only: {m}")
    assert report["queries"] >= 40 and not report["unresolved_documents"]
    assert m["ndcg@10"] >= 0.85 and m["mrr@10"] >= 0.9


# ---------------------------------------------------------------------------------------------
# CJK and Korean queries through a real index
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("金银价格", "memory/2026-10-08.md"),
        ("金价", "memory/2026-10-08.md"),
        ("林薇", "memory/2026-10-08.md"),
        ("辛特拉", "memory/2026-10-08.md"),
        ("署名検証", "memory/2026-10-06.md"),
        ("田中由紀", "memory/2026-10-06.md"),
        ("楓フーズ", "memory/2026-10-06.md"),
        ("申し訳ございません", "memory/2026-10-06.md"),
        ("서버 에러", "memory/people/minji.md"),
        ("퇴근할게요", "memory/2026-10-21.md"),
        ("박민지", "memory/people/minji.md"),
        ("arroz con gandules", "memory/2026-09-20.md"),
    ],
)
def test_cjk_queries_find_their_notes(keyword_index: Settings, query: str, expected: str) -> None:
    with Searcher(keyword_index) as s:
        paths = [r.path for r in s.search(query)]
    assert expected in paths[:3], paths


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("서버에서 에러를 확인", {"memory/2026-10-21.md", "memory/people/minji.md"}),  # particles 에서 / 를
        ("롤백을", {"memory/people/minji.md", "memory/2026-10-21.md"}),
        ("민지가", {"memory/people/minji.md"}),  # 민지 appears inside 박민지 and 민지가
        ("재시작이", {"memory/people/minji.md"}),
    ],
)
def test_korean_particles_hit_the_bare_word(keyword_index: Settings, query: str, expected: set[str]) -> None:
    with Searcher(keyword_index) as s:
        results = s.search(query)
    assert results and expected & {r.path for r in results[:3]}
    assert all(r.text_score > 0 for r in results)


# ---------------------------------------------------------------------------------------------
# min_score with two embedding dimensions
# ---------------------------------------------------------------------------------------------
QUESTIONS = [
    ("postgres replication lag on the replica", {"memory/2026-09-04.md", "memory/howto/check-replication-lag.md"}),
    ("Priya rate limiting per API key GCRA", {"memory/2026-09-10.md", "memory/people/priya.md",
                                              "memory/projects/rate-limiting.md"}),
    ("Lisbon hotel confirmation", {"memory/2026-10-02.md", "memory/2026-11-09.md", "MEMORY.md"}),
    ("金银价格", {"memory/2026-10-08.md"}),
    ("CRLF line endings in the synonyms file", {"memory/projects/search-service.md", "memory/2026-10-15.md"}),
]


def test_min_score_keeps_answers_in_both_dimensions(vector_index) -> None:
    settings, provider = vector_index
    with Searcher(settings, provider=provider) as s:
        assert s.status().dims == provider.dims
        for query, relevant in QUESTIONS:
            results = s.search(query)  # default min_score
            assert results, query
            assert results[0].path in relevant, (query, [r.citation for r in results])
            assert results[0].score >= ranking.DEFAULT_MIN_SCORE  # the answer's threshold: its best result
        # scores are absolute: a query that shares nothing with any note finds nothing, though
        # the vector side always has nearest neighbours
        assert s.search("zzqx wvbn") == []
        assert s.search("zzqx wvbn", min_score=0.0)


def test_min_score_means_the_same_in_64d_and_1536d(tmp_path_factory: pytest.TempPathFactory) -> None:
    """One model as 64-d vectors and as 1536-d vectors whose cosines are squeezed into a narrow
    band: raw cosines differ a lot, fused scores (and so what min_score keeps) do not."""
    runs = {}
    for name, provider in (("64d", BagOfWordsProvider(64)),
                           ("1536d", BagOfWordsProvider(1536, base_dims=64, common=0.6))):
        ws = _copy_examples(tmp_path_factory.mktemp(f"cmp{name}") / "ws")
        s = load_settings(None, {"workspace": str(ws), "provider": "none"})
        run_index(s, provider=provider)
        with Searcher(s, provider=provider) as searcher:
            runs[name] = [searcher.search(q, max_results=20, min_score=0.0) for q, _ in QUESTIONS]
            runs[name + " kept"] = [searcher.search(q, max_results=20) for q, _ in QUESTIONS]
    for a, b in zip(runs["64d"], runs["1536d"], strict=True):
        assert [r.citation for r in a] == [r.citation for r in b]
        assert [r.score for r in a] == pytest.approx([r.score for r in b], abs=1e-4)
        cos_a = [r.vector_score for r in a if r.vector_score]
        cos_b = [r.vector_score for r in b if r.vector_score]
        assert min(cos_b) > min(cos_a) + 0.2  # 0.6 + 0.4 * cos: a different scale altogether
    for a, b in zip(runs["64d kept"], runs["1536d kept"], strict=True):
        assert [r.citation for r in a] == [r.citation for r in b]
    # the raw blend of the reference (0.7 * cosine + 0.3 * text) with its 0.35 threshold does not
    # have this property: the same hits cross the threshold in one model and not in the other
    ref = {name: [[0.7 * r.vector_score + 0.3 * r.text_score >= 0.35 for r in res] for res in runs[name]]
           for name in ("64d", "1536d")}
    assert ref["64d"] != ref["1536d"]


# ---------------------------------------------------------------------------------------------
# Hostile query strings through Searcher.search
# ---------------------------------------------------------------------------------------------
def test_hostile_queries_through_search(vector_index, keyword_index: Settings) -> None:
    settings, provider = vector_index
    with Searcher(settings, provider=provider) as hybrid, Searcher(keyword_index) as kw:
        for query in [*HOSTILE, "", "   ", "memory/2026-09-04.md#L1-L24", "' OR 1=1 --", "%_%", "\\"]:
            for s in (hybrid, kw):
                for mode in ("hybrid", "vector", "keyword"):
                    results = s.search(query, max_results=5, mode=mode)
                    assert all(0.0 <= r.score <= 1.0 and len(r.snippet) <= 700 for r in results)
        # operators are words: "NOT" finds notes with the word "not", it does not negate anything
        # (a query of stop words only is not a match by its words: its candidates score 0)
        assert kw.search("NOT NOT NOT", min_score=0)
        same = [r.citation for r in kw.search("replication lisbon")]
        assert [r.citation for r in kw.search('replication" OR "lisbon')] == same
        words = [r.citation for r in kw.search("text replication near lisbon")]
        assert [r.citation for r in kw.search('text:replication AND NEAR(lisbon*')] == words


def test_search_modes_and_sources(vector_index) -> None:
    settings, provider = vector_index
    with Searcher(settings, provider=provider) as s:
        kw = s.search("pgbackrest restore", mode="keyword")
        vec = s.search("pgbackrest restore", mode="vector", min_score=0.0)
        assert kw and all(r.vector_score == 0 for r in kw)
        assert vec and all(r.text_score == 0 for r in vec)
        assert s.search("pgbackrest restore", sources=["sessions"]) == []
        with pytest.raises(ValueError):
            s.search("x", mode="both")


# ---------------------------------------------------------------------------------------------
# The labelled example set with the real local model (slow: ~1 min on a laptop CPU)
# ---------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_labelled_examples_hybrid_beats_both_sides(tmp_path: Path) -> None:
    pytest.importorskip("sentence_transformers")
    ws = _copy_examples(tmp_path / "ws")
    s = load_settings(None, {"workspace": str(ws), "provider": "local"})
    run_index(s)
    report = run_eval(s, EVAL / "examples-queries.jsonl", EVAL / "examples-qrels.tsv", sides=True)
    m = {side: v["ndcg@10"] for side, v in report["metrics"].items() if v is not None}
    print(f"\nexamples, all-MiniLM-L6-v2: {report['metrics']}")
    assert report["hybrid_used_vectors"]
    assert m["hybrid"] > m["vector"] and m["hybrid"] > m["keyword"]
    assert m["hybrid"] >= 0.9


def test_concurrent_searches_share_one_searcher(vector_index) -> None:
    """Threads may share a searcher: its connections are never used by two statements at once."""
    from concurrent.futures import ThreadPoolExecutor

    settings, provider = vector_index
    queries = [q for q, _ in QUESTIONS] * 8
    with Searcher(settings, provider=provider) as s:
        expected = [[r.citation for r in s.search(q)] for q in queries]
        with ThreadPoolExecutor(max_workers=6) as pool:
            got = list(pool.map(lambda q: [r.citation for r in s.search(q)], queries))
        with ThreadPoolExecutor(max_workers=3) as pool:
            list(pool.map(lambda _: (s.status(), s.read_file("MEMORY.md", lines=3)), range(12)))
    assert got == expected
    s2 = Searcher(settings, provider=provider)
    s2.parallel = False
    with s2:
        assert [[r.citation for r in s2.search(q)] for q in queries[:5]] == expected[:5]


def test_eval_resolves_the_workspace_config_as_search_does(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Twentieth session's audit: `eval -w ws` read neither the workspace's memory-core.toml nor the
    agent's settings (its own settings path), so an `index_path` there was not found ("no index at
    ws/.memory-core/index.sqlite") and its `[query]` fusion and weights were not what it measured."""
    ws = _copy_examples(tmp_path / "ws")
    (ws / "memory-core.toml").write_text('index_path = "alt/idx.sqlite"\nprovider = "none"\n\n'
                                         '[query]\nfusion = "rrf"\ntext_weight = 0.9\nvector_weight = 0.1\n')
    run_index(load_settings(str(ws / "memory-core.toml"), {"workspace": str(ws)}))
    assert (ws / "alt" / "idx.sqlite").is_file()
    q = tmp_path / "queries.jsonl"
    q.write_text(json.dumps({"_id": "gold", "text": "金银价格"}, ensure_ascii=False) + "\n", encoding="utf-8")
    r = tmp_path / "qrels.tsv"
    r.write_text("query-id\tcorpus-id\tscore\ngold\tmemory/2026-10-08\t1\n")
    assert cmd_eval(_parse(["-w", str(ws), "--queries", str(q), "--qrels", str(r), "--json"])) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["metrics"]["hybrid"]["ndcg@10"] == 1.0
    assert report["settings"]["fusion"] == "rrf"
    assert report["settings"]["text_weight"] == 0.9 and report["settings"]["vector_weight"] == 0.1
    # a flag is told over the file
    assert cmd_eval(_parse(["-w", str(ws), "--queries", str(q), "--qrels", str(r), "--json",
                            "--fusion", "calibrated"])) == 0
    assert json.loads(capsys.readouterr().out)["settings"]["fusion"] == "calibrated"
