"""Keyword-only search is FTS5's exact ``ORDER BY bm25(), rowid LIMIT k``, whichever way it is
computed, on text that exercises the tokenizer: a differential test over random notes and queries.

Keyword-only mode (``--mode keyword``, provider ``none``, a query that cannot be embedded) has three
ways to rank: FTS5's own statement; the phrases' postings kept in memory (numpy, bm25()'s
arithmetic; a source filter as a mask of row ids); and, for a query of rarer and common words, the rarer words' best rows rescored by
the whole query (``retrieval._exact_top_by_rarer``, from the rows' texts through FTS5's tokenizer
or the postings). Each must give FTS5's rows and scores bit for bit, ties by row id included. The
thresholds that choose them are lowered so that a few hundred chunks take every way; the test
counts that each way was taken, so it cannot pass by testing one.

The text mixes what tokenizers get wrong: Porter's inflections (deploy / deploying / deployment),
diacritics folded by unicode61 (café / cafe, résumé), ``ß``, CJK segmented per character, Korean
particles, identifiers (``pg-replica-1``, ``v4.18.2``), ``foo_bar``, apostrophes, punctuation and
case, with a few words in most chunks (bm25()'s IDF floor) and others in a handful, and 30 chunks
that tie on a rare word and differ only by common ones (the rarer words' bound must refuse them).
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from memory_core.config import load_settings
from memory_core.index.pipeline import run_index
from memory_core.query import retrieval
from memory_core.query.search import Searcher
from memory_core.storage import textsearch
from memory_core.storage.store import connect_reader

COMMON = ["note", "memory", "server", "Server", "notes"]
MID = ["deploy", "deploys", "deployed", "deploying", "deployment", "run", "running", "runs", "ran",
       "café", "cafe", "naïve", "naive", "résumé", "resume", "don't", "dont", "v4.18.2", "502",
       "pg-replica-1", "LRK-4471", "lrk", "4471", "foo_bar", "foo", "bar", "Postgres", "postgres",
       "replication", "lag", "数据库", "服务器", "数据", "서버에서", "서버", "東京", "ÅNGSTRÖM", "straße",
       "strasse", "e-mail", "email"]
RARE = ["zeta", "okonomiyaki", "kubernetes", "beekeeping", "sourdough", "x86_64", "μs", "ß"]
PUNCT = [",", ".", "!", "?", ":", ";", "(", ")", '"', "'", "-", "—", "…"]


def _text(rng: random.Random) -> str:
    words = []
    for _ in range(rng.choice([3, 5, 8, 12, 20, 40, 120])):
        r = rng.random()
        w = rng.choice(COMMON) if r < 0.6 else rng.choice(MID) if r < 0.98 else rng.choice(RARE)
        words.append(w + rng.choice(PUNCT) if rng.random() < 0.1 else w)
    if rng.random() < 0.8:  # in most chunks: bm25()'s IDF floor
        words.append(rng.choice(["note", "note.", "Note"]))
    if rng.random() < 0.6:
        words.insert(0, "memory")
    return " ".join(words)


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Any:
    rng = random.Random(11)
    ws = tmp_path_factory.mktemp("kw") / "ws"
    (ws / "memory").mkdir(parents=True)
    (ws / "sessions").mkdir()
    for i in range(500):
        (ws / "memory" / f"n{i:03d}.md").write_text("\n".join(_text(rng) for _ in range(rng.randint(1, 3))) + "\n")
    for i in range(30):  # tied by "sourdough" alone (same length); only the common words order them
        (ws / "memory" / f"t{i:02d}.md").write_text(" ".join(["sourdough"] + ["note"] * (i % 5) + ["memory"] * (6 - i % 5)) + "\n")
    for i in range(40):
        recs = [{"type": "message", "message": {"role": rng.choice(["user", "assistant"]), "content": _text(rng)}}
                for _ in range(rng.randint(1, 4))]
        (ws / "sessions" / f"s{i:02d}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    s = load_settings(None, {"workspace": str(ws), "provider": "none", "sources": ["memory", "sessions"]})
    run_index(s)
    return s


def _fts5_top(conn: Any, match: str, k: int, source: str | None) -> list[tuple[int, float]]:
    src = "" if source is None else " AND (SELECT source FROM chunks WHERE rid = chunks_fts.rowid) = ?"
    rows = conn.execute(f"SELECT rowid, bm25(chunks_fts) AS r FROM chunks_fts WHERE chunks_fts MATCH ?{src}"
                        " ORDER BY r, rowid LIMIT ?", (match, *([source] if source else []), k)).fetchall()
    return [(r, -b) for r, b in rows]


def test_keyword_only_search_is_fts5_bm25_exactly_on_every_path(workspace: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(3)
    taken = {"rarer": 0, "rarer_fell_back": 0, "postings": 0, "postings_of_a_source": 0, "texts": 0}

    def spy(fn: Any, hit: str, miss: str | None = None) -> Any:
        def wrapped(*a: Any, **kw: Any) -> Any:
            got = fn(*a, **kw)
            if got is not None:
                taken[hit] += 1
            elif miss:
                taken[miss] += 1
            return got
        return wrapped

    monkeypatch.setattr(retrieval, "_exact_top_by_rarer", spy(retrieval._exact_top_by_rarer, "rarer", "rarer_fell_back"))
    real_top = retrieval.keyword_top

    def top_spy(*a: Any, **kw: Any) -> Any:
        got = real_top(*a, **kw)
        if got is not None:
            taken["postings"] += 1
            taken["postings_of_a_source"] += bool(kw.get("sources"))
        return got

    monkeypatch.setattr(retrieval, "keyword_top", top_spy)
    monkeypatch.setattr(retrieval, "_bm25_of_texts", spy(retrieval._bm25_of_texts, "texts"))
    vocab = COMMON + MID + RARE + ["nothing", "the", "and", "数", "库"]
    conn = connect_reader(workspace.index_file)
    compared = 0
    try:
        for lowered in (False, True):
            if lowered:  # postings from 10 matched rows up, the rarer words' from 5
                monkeypatch.setattr(retrieval, "KEYWORD_POSTINGS_MIN", 10)
                monkeypatch.setattr(retrieval, "RARER_POSTINGS_MIN", 5)
            se = Searcher(workspace)
            for n in range(300):
                if n % 60 == 0:  # a new reader now and then: nothing kept yet
                    se.close()
                    se = Searcher(workspace)
                q = " ".join(rng.choice(vocab) + (rng.choice(PUNCT) if rng.random() < 0.1 else "")
                             for _ in range(rng.randint(1, 6)))
                k = rng.choice([1, 2, 5, 10, 24, 60])
                source = rng.choice([None, None, None, "memory", "sessions"])
                match = textsearch.build_match_query(q)
                if not match:
                    continue
                got = se.retrieve(q, k, vector=False, sources=(source,) if source else None).keyword
                assert [(h.rid, h.bm25) for h in got] == _fts5_top(conn, match, k, source), (q, k, source, lowered)
                compared += 1
            se.close()
    finally:
        conn.close()
    assert compared >= 550
    # every way was taken, and the rarer words' bound also refused (then every phrase ranked)
    assert taken["rarer"] >= 100 and taken["rarer_fell_back"] >= 5, taken
    assert taken["postings"] >= 50 and taken["postings_of_a_source"] >= 10 and taken["texts"] >= 50, taken


def test_bm25_of_any_rows_is_fts5s(workspace: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The exact BM25 the searcher gives vector candidates (``retrieval.bm25_of_rows``: from kept
    postings, from the rows' texts, or from FTS5 by row id) is FTS5's bm25() of those rows."""
    monkeypatch.setattr(retrieval, "KEYWORD_POSTINGS_MIN", 10)
    rng = random.Random(4)
    conn = connect_reader(workspace.index_file)
    assert retrieval._register_bm25(conn)
    idx = retrieval._Index(Path(workspace.index_file))
    texts = dict(conn.execute("SELECT rid, text FROM chunks"))
    rids = sorted(texts)
    vocab = COMMON + MID + RARE
    try:
        for n in range(150):
            q = " ".join(rng.choice(vocab) for _ in range(rng.randint(1, 5)))
            match = textsearch.build_match_query(q)
            if not match:
                continue
            some = rng.sample(rids, rng.randint(1, 60))
            got = retrieval.bm25_of_rows(idx, q, match, some, conn, texts=texts if n % 2 else None)
            ref = conn.execute(f"SELECT rowid, bm25(chunks_fts) FROM chunks_fts WHERE chunks_fts MATCH ?"
                               f" AND rowid IN ({','.join(map(str, some))})", (match,)).fetchall()
            assert sorted(got) == sorted(ref), q
    finally:
        idx.close()
        conn.close()
