"""The fast paths of a query give exactly what the straightforward statements give (issue 25).

``memory_core.query.retrieval.complete`` scores the vector side's candidates with
:func:`memory_core.query.retrieval._bm25_given_df` (FTS5's bm25() arithmetic with cached document counts)
instead of ``bm25(chunks_fts)`` restricted by ``rowid IN (...)``, which walked every phrase's
doclist once per row id. Here both run on real
indexes and every candidate's raw scores, the IDF sum and the corpus coverage are compared with
the statements the code used before, kept below as the reference.
"""

from __future__ import annotations

import json
import math
import random

import numpy as np
import pytest

from bench.corpus import WORDS, generate
from memory_core.config import load_settings
from memory_core.index.pipeline import run_index
from memory_core.query import ranking, retrieval
from memory_core.query.search import Searcher
from memory_core.storage import textsearch
from memory_core.storage.store import connect_reader
from tests.conftest import openai_settings

NOTES = {
    "memory/projects/payments.md": "# Payments\n\nTicket LRK-4471: the refund webhook retries forever when the "
                                   "acquirer answers 409. Fix: treat 409 as final and alert on-call. p99 latency.\n",
    "memory/notes/ids.md": "# Ids\n\nLRK-4471 LRK-4471 and pg-replica-1 failover; v4.18.2 shipped. 502 502 502.\n",
    "memory/notes/cjk.md": "# 服务器\n\n服务器错误 again: 金银价格 went up. サーバー 確認. 서버에서 에러가 발생한 경우.\n",
    "memory/notes/snake.md": "# Snake\n\nThe FOO_bar flag and foo bar baz, foo_bar_baz, deploying deployments.\n",
    "memory/notes/long.md": "# Long\n\n" + " ".join(["replication lag postgres"] * 60) + "\n",
}
QUERIES = [
    "postgres replication lag", "deploy rollback canary release kubernetes pod node", "LRK-4471",
    "refund webhook loops on HTTP 409", "pg-replica-1 failover", "what did I do", "the and of",
    "服务器错误", "サーバー 確認", "서버에서 에러", "FOO_bar flag", "deploying deployments", "p99 latency 502",
    "nothingmatchesthisword", "postgres nothingmatchesthisword", "v4.18.2 release notes", "\"quoted\" NEAR(bar*)",
]


def _reference(conn, query: str, union: list[ranking.Hit], n: int) -> tuple[dict[int, tuple[float, bool]], float, float]:
    """The statements ``retrieval.complete`` ran before: bm25() restricted by ``rowid IN``, ``count(*)`` per term."""
    match = textsearch.build_match_query(query)
    lit = ",".join(str(h.rid) for h in union)
    bm25: dict[int, float] = {}
    if match and union:
        bm25 = dict(conn.execute("SELECT rowid, bm25(chunks_fts) FROM chunks_fts WHERE chunks_fts MATCH ?"
                                 f" AND rowid IN ({lit})", (match,)))
    idents: set[int] = set()
    for ident in ranking.identifiers(query) if union else []:
        idents |= {r for (r,) in conn.execute(f"SELECT rowid FROM chunks_fts WHERE chunks_fts MATCH ? AND rowid IN ({lit})",
                                              (textsearch.fts_string(ident.lower()),))}
    words = textsearch.query_terms(query)
    terms = [] if all(textsearch.is_stop_word(w) for w in words) else [textsearch.fts_string(w) for w in words]
    idfs, present = [], 0.0
    for t in terms:
        df = conn.execute("SELECT count(*) FROM chunks_fts WHERE chunks_fts MATCH ?", (t,)).fetchone()[0]
        idf = max(1e-6, math.log((n - df + 0.5) / (df + 0.5))) if n else 1e-6
        idfs.append(idf)
        present += idf if df > 0 else 0.0
    total = sum(idfs)
    coverage = present / total if total > 0 and not ranking.mostly_cjk(query) else 1.0
    return {h.rid: (bm25.get(h.rid, 0.0), h.rid in idents) for h in union}, total, coverage


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory):
    from tests.fakes.openai_fake import OpenAIFake

    ws = tmp_path_factory.mktemp("speed") / "ws"
    generate(ws, 60, seed=3)  # ~250 chunks of the scale bench's corpus: every word is common
    for rel, text in NOTES.items():
        (ws / rel).parent.mkdir(parents=True, exist_ok=True)
        (ws / rel).write_text(text)
    with OpenAIFake(dims=64) as srv:
        s = openai_settings(ws, srv)
        run_index(s)
        # an in-place update: FTS5 then holds deleted rows' entries until a merge drops them
        for i, f in enumerate(sorted((ws / "memory").glob("*.md"))[:12]):
            f.write_text(f.read_text()[: 200 + 50 * i] + "\n\npostgres replication lag, edited.\n")
        assert run_index(s).published == "in place"
        yield s


def test_bm25_given_df_is_fts5_bm25_on_every_matching_row(index) -> None:
    conn = connect_reader(index.index_file)
    assert retrieval._register_bm25(conn)
    rng = random.Random(1)
    queries = QUERIES + [" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 8))) for _ in range(30)]
    compared = 0
    for q in queries:
        match = textsearch.build_match_query(q)
        if not match:
            continue
        phrases = [textsearch.fts_string(t) for t in textsearch.query_terms(q)]
        assert " OR ".join(phrases) == match
        dfs = [conn.execute("SELECT count(*) FROM chunks_fts WHERE chunks_fts MATCH ?", (p,)).fetchone()[0]
               for p in phrases]
        rows = conn.execute(f"SELECT rowid, bm25(chunks_fts), memory_core_bm25(chunks_fts, {','.join(map(str, dfs))})"
                            " FROM chunks_fts WHERE chunks_fts MATCH ?", (match,)).fetchall()
        for rid, theirs, ours in rows:
            assert ours == theirs, (q, rid, theirs, ours)  # bit for bit
        compared += len(rows)
    assert compared > 1000


@pytest.mark.parametrize("path", ["postings", "postings read through FTS5", "own_bm25", "bm25"])
def test_candidates_scores_are_the_straightforward_statements(index, monkeypatch, path) -> None:
    own_bm25 = path != "bm25"
    if not own_bm25:  # an apsw without auxiliary functions: bm25() itself
        monkeypatch.setattr(retrieval, "_register_bm25", lambda conn: False)
    if path.startswith("postings"):  # every keyword query from the phrases' postings once they are kept
        monkeypatch.setattr(retrieval, "KEYWORD_POSTINGS_MIN", 0)
    if path == "postings read through FTS5":  # no fts5vocab table: read by the auxiliary function
        monkeypatch.setattr(retrieval._Index, "_vocab_conn", lambda self: None)
    rng = random.Random(2)
    queries = QUERIES + [" ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 8))) for _ in range(20)]
    queries = queries + queries  # a phrase's postings are read on its second use
    with Searcher(index) as s:
        conn = connect_reader(index.index_file)
        n = conn.execute("SELECT count(*) FROM chunks").fetchone()[0]
        rows = dict(conn.execute("SELECT rid, embedding FROM chunks"))
        checked_bm25 = checked_ident = common_skipped = 0
        for q in queries:
            c = s.retrieve(q, 40)
            assert c.embedded
            assert s._current().own_bm25 is own_bm25
            ref, idf_total, coverage = _reference(conn, q, c.union, n)
            assert c.idf_total == idf_total and c.corpus_coverage == coverage, q
            qv = np.asarray(s._query_provider(s._current()).embed_query(q), dtype=np.float32)
            for h in c.union:
                bm25, has_ident = ref[h.rid]
                assert h.bm25 == max(0.0, -bm25), (q, h.rid)
                assert h.text_score == (ranking.bm25_rank_to_score(bm25) if h.rid in ref and bm25 else h.text_score)
                if not h.in_keyword:
                    assert h.text_score == (ranking.bm25_rank_to_score(bm25) if bm25 else 0.0), (q, h.rid)
                    checked_bm25 += bool(bm25)
                assert h.has_identifier == has_ident, (q, h.rid)
                checked_ident += has_ident
                v = np.frombuffer(rows[h.rid], dtype="<f4")
                assert h.vector_score == pytest.approx(float(v @ qv / (np.linalg.norm(v) * np.linalg.norm(qv))),
                                                       abs=1e-6)
            for h in c.keyword:  # the side lists share the union's scores
                assert h.bm25 == max(0.0, -ref[h.rid][0])
            # beside the vector side, the keyword side is FTS5's top 40 by the phrases in fewer than
            # half the rows, each scored by the whole query's bm25()
            # (an apsw without auxiliary functions could not score them without bm25()'s walks: all)
            assert [(h.rid, h.bm25) for h in c.keyword] == _keyword_side(conn, q, 40, n if own_bm25 else None), q
            common_skipped += not c.keyword
            # a keyword-only query: FTS5's top 40 in FTS5's order (ties by row id), the same bm25()
            k_only = s.retrieve(q, 40, vector=False)
            assert [(h.rid, h.bm25) for h in k_only.keyword] == _keyword_side(conn, q, 40, None), q
        post = s._current()._postings
        if path.startswith("postings"):
            assert post is not None and len(post.tf) > 50
            assert (post.vocab is None) is (path != "postings")
        else:
            assert post is None or not post.tf
        conn.close()
    assert checked_bm25 > 100 and checked_ident > 0
    assert (common_skipped > 5) is own_bm25  # queries of common words alone: no keyword candidates


def _keyword_side(conn, query: str, k: int, n: int | None) -> list[tuple[int, float]]:
    """FTS5's top ``k`` of ``query`` as ``(rid, bm25)``; with ``n`` (the rows) by the phrases in fewer
    than half of them (none: no rows), each row scored by the whole query, ties by row id."""
    match = textsearch.build_match_query(query)
    if not match:
        return []
    full = match
    if n is not None:
        phrases = [textsearch.fts_string(t) for t in textsearch.query_terms(query)]
        kept = [p for p in phrases if 2 * conn.execute("SELECT count(*) FROM chunks_fts WHERE chunks_fts MATCH ?",
                                                         (p,)).fetchone()[0] < n]
        if not kept:
            return []
        match = " OR ".join(kept)
    top = conn.execute("SELECT rowid, bm25(chunks_fts) AS r FROM chunks_fts WHERE chunks_fts MATCH ?"
                       " ORDER BY r LIMIT ?", (match, k)).fetchall()
    if match != full:
        lit = ",".join(str(r) for r, _ in top)
        exact = dict(conn.execute(f"SELECT rowid, bm25(chunks_fts) FROM chunks_fts WHERE chunks_fts MATCH ?"
                                  f" AND rowid IN ({lit})", (full,)).fetchall())
        top = sorted(((r, exact[r]) for r, _ in top), key=lambda x: (x[1], x[0]))
    return [(r, max(0.0, -b)) for r, b in top]


def test_keyword_top_from_postings_is_fts5_order_with_ties(tmp_path, monkeypatch) -> None:
    """Rows with the same words and length tie in bm25(): FTS5's sorter keeps the lower row ids first."""
    monkeypatch.setattr(retrieval, "KEYWORD_POSTINGS_MIN", 0)
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    rng = random.Random(4)
    for i in range(120):  # many files with identical text: ties across the cut at k
        words = ["alpha beta"] * (i % 3 + 1) + [rng.choice(["gamma", "delta"])] * (i % 2 + 1)
        (ws / "memory" / f"n{i:03d}.md").write_text(" ".join(words) + "\n")
    s = load_settings(None, {"workspace": str(ws), "provider": "none"})
    run_index(s)
    compared = 0
    with Searcher(s) as se:
        idx = se._current()
        for q in ["alpha gamma", "beta delta alpha", "gamma", "alpha beta gamma delta"] * 2:
            for k in (1, 7, 40, 500):
                match = textsearch.build_match_query(q)
                ref = idx.conn.execute("SELECT rowid, bm25(chunks_fts) AS r FROM chunks_fts WHERE chunks_fts MATCH ?"
                                       " ORDER BY r LIMIT ?", (match, k)).fetchall()
                got = retrieval.keyword_top(idx, q, match, k, idx.conn)
                if got is not None:
                    assert got == [tuple(r) for r in ref], (q, k)
                    compared += 1
        assert idx._postings is not None and len(idx._postings.tf) == 4 and compared >= 12
        assert len({b for _, b in ref}) < len(ref) / 4  # ties it had to keep in order


def test_bm25_of_texts_is_fts5_bm25_bit_for_bit(index) -> None:
    """The vector candidates of a query of common words are scored from their texts through FTS5's
    own tokenizer (no seek into each doclist per row): the same bm25() as FTS5's for every row of
    the index, CJK, ``foo_bar`` phrases and repeated words included; a text FTS5 did not index for
    that row (another token count) is refused, so the caller asks FTS5."""
    conn = connect_reader(index.index_file)
    assert retrieval._register_bm25(conn)
    idx = retrieval._Index(index.index_file)
    texts = dict(conn.execute("SELECT rid, text FROM chunks"))
    rng = random.Random(5)
    queries = QUERIES + [" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 6))) for _ in range(20)]
    compared = multi = 0
    for q in queries:
        match = textsearch.build_match_query(q)
        if not match:
            continue
        phrases = [textsearch.fts_string(t) for t in textsearch.query_terms(q)]
        dfs = [idx.idf_df(p) for p in phrases]
        got = retrieval._bm25_of_texts(idx, phrases, dfs, texts, conn)
        assert got is not None, q
        theirs = dict(conn.execute("SELECT rowid, bm25(chunks_fts) FROM chunks_fts WHERE chunks_fts MATCH ?", (match,)))
        assert dict(got) == theirs, q  # the same rows, bit for bit
        compared += len(got)
        multi += any(" " in p for p in phrases) and bool(got)
    assert compared > 1000 and multi >= 2
    rid = next(iter(texts))
    assert retrieval._bm25_of_texts(idx, ['"postgres"'], [1], {rid: texts[rid] + " postgres"}, conn) is None
    idx.close()
    conn.close()


def test_common_words_rank_again_when_the_vector_side_fails(tmp_path) -> None:
    """A query of words in most chunks leaves the keyword candidates to the vector side; when the
    query cannot be embedded (the provider answers 400), the keyword side ranks by every phrase
    again, so the search still answers (FTS5's own top k), instead of an empty list."""
    from tests.fakes.openai_fake import OpenAIFake

    ws = tmp_path / "ws"
    generate(ws, 30, seed=4)  # every word of bench.corpus.WORDS is in most chunks
    with OpenAIFake(dims=64) as srv:
        s = openai_settings(ws, srv)
        run_index(s)
        q = "postgres replication lag"
        with Searcher(s) as searcher:
            both = searcher.retrieve(q, 20)
            assert both.embedded and both.vector and not both.keyword  # common words alone: no keyword side
            srv.fail_next(None, status=400, message="bad request")
            alone = searcher.retrieve(q, 20)
        assert not alone.embedded
        conn = connect_reader(s.index_file)
        top = conn.execute("SELECT rowid FROM chunks_fts WHERE chunks_fts MATCH ? ORDER BY bm25(chunks_fts)"
                           " LIMIT 20", (textsearch.build_match_query(q),)).fetchall()
        conn.close()
        assert [h.rid for h in alone.keyword] == [r for (r,) in top] and len(top) == 20


def test_a_keyword_only_query_is_exact_from_its_rarer_words(tmp_path, monkeypatch) -> None:
    """A keyword-only query of rare and common words takes its top k from the rarer words' best
    rows, rescored by the whole query, when the bound proves that is FTS5's top k; when rows tie
    by the rare words and only the common ones (each adding < 2.2e-6) order them, it cannot, and
    every phrase ranks every row. Both give FTS5's ``ORDER BY bm25() LIMIT k``, scores included."""
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    rng = random.Random(6)
    filler = ["alpha", "beta", "gamma"]
    for i in range(300):  # alpha, beta and gamma in every chunk: common
        words = [rng.choice(filler) for _ in range(rng.randint(4, 30))] + filler
        if i % 10 == 0:  # zeta in 30 chunks, as often as it falls
            words += ["zeta"] * rng.randint(1, 4)
        if 100 <= i < 140:  # omega once in 40 chunks of the same length: tied by omega alone
            words = ["omega"] + ["alpha"] * (i % 7) + ["beta"] * (9 - i % 7)
        (ws / "memory" / f"n{i:03d}.md").write_text(" ".join(words) + "\n")
    (ws / "sessions").mkdir()
    for i in range(20):  # transcripts too: a query limited to one source is ranked within it
        text = " ".join([rng.choice(filler) for _ in range(rng.randint(4, 30))] + filler + ["zeta"] * (i % 3))
        record = {"type": "message", "message": {"role": "user", "content": text}}
        (ws / "sessions" / f"s{i:02d}.jsonl").write_text(json.dumps(record) + "\n")
    s = load_settings(None, {"workspace": str(ws), "provider": "none", "sources": ["memory", "sessions"]})
    run_index(s)
    took: list[tuple[str, bool]] = []
    real = retrieval._exact_top_by_rarer

    def spy(idx, query, *args, **kwargs):
        got = real(idx, query, *args, **kwargs)
        took.append((query, got is not None))
        return got

    monkeypatch.setattr(retrieval, "_exact_top_by_rarer", spy)
    conn = connect_reader(s.index_file)
    with Searcher(s) as se:
        # omega's 40 rows tie by omega alone: proven only once the 2k rows taken hold all 40
        for q, fast in [("zeta alpha", lambda k: True), ("zeta alpha beta gamma", lambda k: True),
                        ("omega alpha", lambda k: 2 * k >= 40), ("omega beta", lambda k: 2 * k >= 40),
                        ("zeta omega alpha", lambda k: None)]:
            for k in (1, 5, 10, 25):
                took.clear()
                got = [(h.rid, h.bm25) for h in se.retrieve(q, k, vector=False).keyword]
                ref = conn.execute("SELECT rowid, bm25(chunks_fts) AS r FROM chunks_fts WHERE chunks_fts MATCH ?"
                                   " ORDER BY r, rowid LIMIT ?", (textsearch.build_match_query(q), k)).fetchall()
                assert got == [(r, -b) for r, b in ref], (q, k)
                assert took and took[0][0] == q
                if fast(k) is not None:
                    assert took[0][1] is fast(k), (q, k)
        for src in (("sessions",), ("memory",)):
            for k in (1, 5, 10):
                got = [(h.rid, h.bm25) for h in se.retrieve("zeta alpha", k, vector=False, sources=src).keyword]
                ref = conn.execute("SELECT rowid, bm25(chunks_fts) AS r FROM chunks_fts WHERE chunks_fts MATCH ?"
                                   " AND (SELECT source FROM chunks WHERE rid = chunks_fts.rowid) = ?"
                                   " ORDER BY r, rowid LIMIT ?", ('"zeta" OR "alpha"', src[0], k)).fetchall()
                assert got == [(r, -b) for r, b in ref] and ref, (src, k)
        # the tie the common words break is real: omega's rows, ordered by alpha's count
        tied = conn.execute("SELECT rowid, bm25(chunks_fts) FROM chunks_fts WHERE chunks_fts MATCH '\"omega\"'").fetchall()
        assert len({round(b, 9) for _, b in tied}) == 1 and len(tied) == 40
    conn.close()
