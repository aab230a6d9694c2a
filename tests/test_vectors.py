"""The vector store (memory_core.storage.vectors): sign-bit codes kept in step with the float32 vectors
through appends and in-place deletes, the scan-then-rescore search against an exact search,
and an index of the previous schema (vectors in sqlite-vec's vec0) still searched, then rebuilt."""

from __future__ import annotations

import numpy as np
import pytest

from memory_core.embeddings.registry import create_provider
from memory_core.index.pipeline import run_index
from memory_core.query.search import Searcher
from memory_core.storage import vectors
from memory_core.storage.store import SCHEMA_VERSION, connect, load_vec, probe_index
from tests.conftest import openai_settings, vector_rows


def _clustered(n: int, dims: int, seed: int, centres: int = 600) -> np.ndarray:
    """Unit vectors around a few centres: neighbours have a real order, as embeddings do."""
    c = np.random.default_rng(0).standard_normal((centres, dims)).astype(np.float32)
    rng = np.random.default_rng(seed)
    m = c[rng.integers(0, centres, n)] + rng.uniform(1.0, 2.0, (n, 1)).astype(np.float32) * \
        rng.standard_normal((n, dims)).astype(np.float32)
    return m / np.linalg.norm(m, axis=1, keepdims=True)


def _db(tmp_path, dims):  # a table like the index's: chunks(rid, embedding) and the codes
    conn = connect(tmp_path / "v.sqlite")
    conn.execute("CREATE TABLE chunks(rid INTEGER PRIMARY KEY, embedding BLOB)")
    vectors.create(conn)
    return conn


def _append(conn, start, m):
    rids = list(range(start, start + len(m)))
    blobs = [v.astype("<f4").tobytes() for v in m]
    with conn:  # one transaction, as the index writer's
        conn.executemany("INSERT INTO chunks VALUES(?,?)", zip(rids, blobs, strict=True))
        vectors.append(conn, rids, blobs, m.shape[1])
    return rids


def test_codes_follow_appends_and_in_place_deletes(tmp_path, monkeypatch):
    monkeypatch.setattr(vectors, "BLOCK_ROWS", 64)
    dims = 100  # not a multiple of 64: codes are padded to whole words
    conn = _db(tmp_path, dims)
    live: dict[int, np.ndarray] = {}
    m = _clustered(400, dims, 1)
    rid = 1
    for size in (50, 30, 100, 7):  # the tail block fills up before a new one starts
        for r, v in zip(_append(conn, rid, m[rid - 1:rid - 1 + size]), m[rid - 1:rid - 1 + size], strict=True):
            live[r] = v
        rid += size
    # blocks: 1-64, 65-128, 129-187; the last one goes whole
    gone = [3, 4, 50, 51, 52, 120, *range(129, 188)]
    assert vectors.delete(conn, gone + [9999]) == len(gone)
    conn.execute(f"DELETE FROM chunks WHERE rid IN ({','.join(map(str, gone))})")
    for g in gone:
        live.pop(g)
    for r, v in zip(_append(conn, rid, m[rid - 1:rid + 59]), m[rid - 1:rid + 59], strict=True):
        live[r] = v
    assert vectors.count(conn) == len(live)
    assert len(vector_rows(conn)) == len(live)  # one code per vector, each its vector's sign bits
    blocks = conn.execute(f"SELECT block, live, rids FROM {vectors.BITS_TABLE}").fetchall()
    assert all(len(raw) // 8 <= 64 for _, _, raw in blocks)
    assert not [b for b, n, _ in blocks if n == 0]  # the emptied block was dropped
    idx = vectors.BitIndex(conn, dims)
    assert sorted(idx.rids.tolist()) == sorted(live)
    if load_vec(conn):  # the same bits as sqlite-vec's vec_quantize_binary
        v = m[0, :96].astype("<f4")  # sqlite-vec wants a multiple of 8 dimensions
        ours = vectors.quantize(v[None, :])[0].tobytes()
        theirs = conn.execute("SELECT vec_quantize_binary(?)", (v.tobytes(),)).fetchone()[0]
        assert ours[:len(theirs)] == theirs


def test_scan_then_rescore_finds_what_an_exact_search_finds(tmp_path):
    dims, n = 256, 20000
    conn = _db(tmp_path, dims)
    m = _clustered(n, dims, 2)
    _append(conn, 1, m)
    idx = vectors.BitIndex(conn, dims)
    queries = _clustered(40, dims, 3)
    all_codes = vectors.quantize(m)
    recall = []
    for q in queries:
        exact = np.argsort(-(m @ q), kind="stable")[:10] + 1
        got = [r for r, _ in idx.search(conn, q, 10)]
        recall.append(len(set(got) & set(exact.tolist())) / 10)
        # the cosines are the exact ones, best first
        cos = [c for _, c in idx.search(conn, q, 10)]
        assert cos == sorted(cos, reverse=True)
        np.testing.assert_allclose(cos, np.sort(m[np.asarray(got) - 1] @ q)[::-1], rtol=1e-5)
        # nearest(r) keeps every row as near by its bits as the r-th
        ham = np.unpackbits(all_codes ^ vectors.quantize(q[None, :])[0], axis=1).sum(axis=1)
        near = set(idx.nearest(q, 300).tolist())
        cut = np.sort(ham)[299]
        assert {i + 1 for i in np.flatnonzero(ham <= cut)} == near
    assert np.mean(recall) >= 0.98, recall
    # the asymmetric score is the query's dot product with the rows' signs (+1 / -1)
    codes = vectors.quantize(m[:50])
    signs = np.unpackbits(codes, axis=1, bitorder="little")[:, :dims].astype(np.float32) * 2 - 1
    np.testing.assert_allclose(vectors.asymmetric_scores(queries[0], codes), signs @ queries[0], rtol=1e-4, atol=1e-5)
    # rescoring every row is the exact search itself
    q = queries[0]
    all_rows = vectors.cosines(q, vectors.read_vectors(conn, list(range(1, n + 1))))
    assert len(all_rows) == n
    assert max(all_rows, key=all_rows.get) == int(np.argmax(m @ q)) + 1


def _to_schema_2(index) -> None:
    """Rewrite a schema-3 index as the previous version wrote it: vectors in vec0 only."""
    conn = connect(index)
    assert load_vec(conn)
    meta = probe_index(index)[0]
    dims = meta["dims"]
    conn.execute("BEGIN")
    conn.execute(f"CREATE VIRTUAL TABLE chunks_vec USING vec0(embedding float[{dims}] distance_metric=cosine)")
    conn.execute("INSERT INTO chunks_vec(rowid, embedding) SELECT rid, embedding FROM chunks")
    conn.execute("UPDATE chunks SET embedding = NULL")
    conn.execute(f"DROP TABLE {vectors.BITS_TABLE}")
    meta.update(schema_version=2, vector_store="vec0")
    from memory_core.storage.store import write_meta

    write_meta(conn, meta)
    conn.execute("COMMIT")
    conn.close()


@pytest.mark.parametrize(("mode", "reads"), [("hybrid", "points"), ("hybrid", "knn"), ("vector", "points")])
def test_an_index_of_schema_2_is_searched_alike_and_rebuilt_by_the_next_run(workspace, openai_fake, monkeypatch,
                                                                           tmp_path, mode, reads):
    # the keyword candidates' cosines: one vec0 point read each, or one KNN restricted to them
    monkeypatch.setattr("memory_core.query.retrieval.POINT_READS_PER_SCAN", 10**9 if reads == "points" else 0)
    s = openai_settings(workspace, openai_fake)
    run_index(s)
    queries = ["replica lag alert", "postgres replication", "who owns the canary release"]

    def answers():
        with Searcher(s) as se:
            out = [[(r.citation, r.score, r.vector_score, r.text_score) for r in se.search(q, mode=mode, min_score=0)]
                   for q in queries]
            return out, se.status().vector_search

    new, how = answers()
    assert how.startswith("sign bits")
    _to_schema_2(s.index_file)
    old, how = answers()
    assert "vec0" in how and "--full" in how
    for a, b in zip(new, old, strict=True):
        assert [x[0] for x in a] == [x[0] for x in b]
        np.testing.assert_allclose([x[1:] for x in a], [x[1:] for x in b], atol=2e-6)
    summary = run_index(s)  # an incremental run rebuilds the old schema in full
    assert summary.swapped
    assert probe_index(s.index_file)[0]["schema_version"] == SCHEMA_VERSION
    assert answers()[0] == new


def test_vector_recall_against_exact_search_is_measured_and_reported(workspace, openai_fake, monkeypatch, tmp_path):
    from memory_core.apps.evaluation import format_report, run_eval

    s = openai_settings(workspace, openai_fake)
    run_index(s)
    queries = ["replica lag alert", "postgres replication", "who owns the canary release", "garlic recipe"]
    qfile, qrels = tmp_path / "q.jsonl", tmp_path / "qrels.tsv"
    qfile.write_text("".join(f'{{"_id": "q{i}", "text": "{q}"}}\n' for i, q in enumerate(queries)))
    with Searcher(s) as se:
        path = se.indexed_paths()[0]
        assert se.vector_recall(queries) == 1.0  # a small index: every row is rescored exactly
    qrels.write_text("".join(f"q{i}\t{path}\t1\n" for i in range(len(queries))))
    report = run_eval(s, qfile, qrels)
    assert report["vector_recall_at_10"] == 1.0
    assert "vector side recall@10 against an exact search: 1.0000" in format_report(report)
    # starve the rescoring: the measure sees what the scan misses
    monkeypatch.setattr(vectors, "rescore_count", lambda want, n, widen=1: min(n, 10 * widen))
    monkeypatch.setattr(vectors, "scan_count", lambda r, n: min(n, 10))
    with Searcher(s) as se:
        assert se.vector_recall(queries) < 1.0


def test_searchers_of_one_process_share_the_codes_until_the_index_changes(workspace, openai_fake, monkeypatch):
    monkeypatch.setenv("MEMORY_CORE_WRITER", "inplace")
    s = openai_settings(workspace, openai_fake)
    run_index(s)
    with Searcher(s) as a, Searcher(s) as b:
        a.search("replica lag", mode="vector")  # a's first vector query scans the stored codes
        assert a._current()._bits is None
        a.search("replica lag", mode="vector")  # its second loads them
        b.search("replica lag", mode="vector")  # b's first finds them loaded
        bits = a._current()._bits
        assert bits is not None and b._current()._bits is bits
        with open(workspace / "MEMORY.md", "a") as fh:
            fh.write("\n## 23:59 late\n- a new note about the gateway quorum and five replicas.\n")
        assert run_index(s).published == "in place"
        a.search("replica lag", mode="vector")
        new = a._current()._bits
        # the update, carried by the change log
        assert new is not bits and set(new.arrays()[0].tolist()) != set(bits.arrays()[0].tolist())
        b.search("replica lag", mode="vector")
        assert b._current()._bits is new


def _with_deletions(tmp_path, monkeypatch, n, dims):
    """Codes of ``n`` clustered vectors in blocks of 512 rows, every 7th row from the 5th deleted:
    (connection, vectors, deleted row ids)."""
    monkeypatch.setattr(vectors, "BLOCK_ROWS", 512)
    conn = _db(tmp_path, dims)
    m = _clustered(n, dims, 3)
    _append(conn, 1, m)
    gone = list(range(5, n, 7))
    with conn:
        vectors.delete(conn, gone)
        conn.execute(f"DELETE FROM chunks WHERE rid IN ({','.join(map(str, gone))})")
    return conn, m, gone


@pytest.mark.parametrize("n, want", [(30, 10), (1500, 10), (9000, 10), (9000, 150)])
def test_a_streamed_scan_gives_the_loaded_index_candidates(tmp_path, monkeypatch, n, want):
    """A reader's first vector query scans the stored codes block by block
    (vectors.streamed_candidates) instead of loading them: the same candidates in the same order
    as BitIndex.candidates, through every branch (fewer rows than rescored, a scan of every
    row, a cut by distance), deleted rows included."""
    dims = 130
    conn, m, gone = _with_deletions(tmp_path, monkeypatch, n, dims)
    loaded = vectors.BitIndex(conn, dims)
    for q in _clustered(6, dims, 11):
        streamed = vectors.streamed_candidates(conn, dims, q, want)
        assert streamed.tolist() == loaded.candidates(q, want).tolist()
        assert not set(streamed.tolist()) & set(gone)
        assert vectors.best_by_cosine(conn, q, streamed, want) == loaded.search(conn, q, want)


def test_the_first_query_of_a_reader_streams_and_answers_as_the_loaded_index(workspace, openai_fake, monkeypatch):
    s = openai_settings(workspace, openai_fake)
    run_index(s)
    loads = []
    init = vectors.BitIndex.__init__

    def counting(bi, conn, dims, table=vectors.BITS_TABLE):  # type: ignore[no-untyped-def]
        loads.append(table)
        init(bi, conn, dims, table)

    monkeypatch.setattr(vectors.BitIndex, "__init__", counting)
    with Searcher(s) as searcher:
        first = [(r.path, r.start_line, r.score) for r in searcher.search("gateway quorum replicas", mode="vector")]
        assert vectors.BITS_TABLE not in loads  # streamed
        second = [(r.path, r.start_line, r.score) for r in searcher.search("gateway quorum replicas", mode="vector")]
        assert vectors.BITS_TABLE in loads  # loaded for the next queries
        assert first == second and first


@pytest.mark.parametrize("n, want, share", [(1500, 10, 0.05), (9000, 10, 0.3), (9000, 150, 0.3), (9000, 10, 0.02)])
def test_a_source_filter_scans_as_if_the_index_held_its_rows_alone(tmp_path, monkeypatch, n, want, share):
    """The rows of some sources (``keep`` / ``only``) get the candidates an index of those rows
    alone gives, loaded or streamed, deleted rows and all: not the nearest of every source that
    happen to be theirs (4x as many fetched and filtered missed a small source's best rows)."""
    dims = 130
    conn, m, gone = _with_deletions(tmp_path, monkeypatch, n, dims)
    rng = np.random.default_rng(2)
    only = np.sort(rng.choice(np.arange(1, n + 1), int(n * share), replace=False))
    alone = connect(tmp_path / "alone.sqlite")  # the same rows of the sources, nothing else
    alone.execute("CREATE TABLE chunks(rid INTEGER PRIMARY KEY, embedding BLOB)")
    vectors.create(alone)
    kept = [int(r) for r in only if r not in set(gone)]
    with alone:
        blobs = [m[r - 1].astype("<f4").tobytes() for r in kept]
        alone.executemany("INSERT INTO chunks VALUES(?,?)", zip(kept, blobs, strict=True))
        vectors.append(alone, kept, blobs, dims)
    full, by_itself = vectors.BitIndex(conn, dims), vectors.BitIndex(alone, dims)
    keep = full.keep_mask(only)
    for q in _clustered(6, dims, 11):
        want_rows = by_itself.candidates(q, want).tolist()
        assert full.candidates(q, want, keep).tolist() == want_rows
        assert vectors.streamed_candidates(conn, dims, q, want, only=only).tolist() == want_rows
        top = full.search(conn, q, want, keep)
        assert top == by_itself.search(alone, q, want) and {r for r, _ in top} <= set(kept)
        # what the filter used to do: the 4x nearest of every row, then those of the sources
        old = [r for r, _ in full.search(conn, q, 4 * want) if r in set(kept)][:want]
        if share <= 0.05:
            assert len(old) < len(top) or [r for r, _ in top] != old


def test_a_small_source_gets_its_own_nearest_chunks(workspace, openai_fake, monkeypatch):
    """``--source sessions`` where transcripts are a few chunks among hundreds of notes: the vector
    side returns the transcripts' nearest chunks by exact cosine (a chunk's own vector or its best
    exchange), on a reader's first query (streamed) and once its codes are loaded."""
    for i in range(150):  # many notes, few transcript chunks
        (workspace / "memory" / f"filler-{i:03d}.md").write_text(
            f"# Filler {i}\n\n" + " ".join(f"word{(i * 7 + j) % 97}" for j in range(60)) + "\n")
    s = openai_settings(workspace, openai_fake, sources=["memory", "sessions"])
    run_index(s)
    conn = connect(s.index_file)
    n_all, n_sessions = conn.execute("SELECT count(*), sum(source = 'sessions') FROM chunks").fetchone()
    assert n_sessions and n_all > 20 * n_sessions
    provider, _ = create_provider(s)
    with Searcher(s) as searcher:
        for q in ["gateway quorum replicas", "hotel in lisbon", "the 502 errors in ingest", "rate limit review"]:
            qv = np.asarray(provider.embed_query(q), dtype=np.float32)
            qv = qv / np.linalg.norm(qv)
            best: dict[int, float] = {}
            for rid, emb in conn.execute("SELECT rid, embedding FROM chunks WHERE source = 'sessions'"):
                best[rid] = float(np.frombuffer(emb, dtype="<f4") @ qv / np.linalg.norm(np.frombuffer(emb, "<f4")))
            for rid, emb in conn.execute(f"SELECT chunk, embedding FROM {vectors.PARTS_TABLE}"):
                if rid in best:
                    v = np.frombuffer(emb, dtype="<f4")
                    best[rid] = max(best[rid], float(v @ qv / np.linalg.norm(v)))
            exact = sorted(best, key=lambda r: (-best[r], r))[:5]
            for _ in range(2):  # streamed, then loaded
                got = searcher.retrieve(q, 5, sources=("sessions",)).vector
                assert [h.rid for h in got] == exact, q
                assert [h.vector_score for h in got] == pytest.approx([best[r] for r in exact], abs=1e-5)


def test_chunks_with_many_matching_parts_do_not_crowd_out_the_next_nearest_chunk(tmp_path):
    """The vector side reads part vectors (note windows, exchanges) until ``want`` chunks own them:
    four notes of 7+ on-topic windows each once took every part a search read, and the note whose
    one matching window made it the 5th nearest by its best cosine was no candidate at all."""
    import re
    import zlib

    from memory_core.query import retrieval
    from tests.fakes.openai_fake import OpenAIFake

    dims = 256

    def text_vec(text: str) -> np.ndarray:  # a sum of random word vectors: dense, deterministic
        v = sum(np.random.default_rng(zlib.crc32(w.encode())).standard_normal(dims)
                for w in re.findall(r"[a-z0-9_]+", text.lower()))
        return (v / np.linalg.norm(v)).astype(np.float32)

    class WordsFake(OpenAIFake):
        def vector_for(self, text, dims_, model=None):
            return text_vec(text).tolist()

    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)

    def note(name: str, lines: list[str]) -> None:
        (ws / "memory" / f"{name}.md").write_text("\n".join("- " + ln for ln in lines) + "\n")

    def words(tag: str, n: int) -> str:
        return " ".join(f"{tag}x{j}" for j in range(n))

    for c in range(4):  # bicycles on every line: every window of these notes is near the query
        note(f"a-crowd{c}", [f"bicycle bicycle bicycle {words(f'c{c}l{i}', 3)}" for i in range(16)])
    # one line about the bicycle among unrelated ones: what part vectors are for
    note("b-target", [("bicycle bicycle bicycle bicycle" if i == 5 else words(f"tl{i}", 6)) for i in range(12)])
    for d in range(40):  # a bicycle thinly on every line
        note(f"c-thin{d:02d}", [f"bicycle {words(f'd{d}l{i}', 30)}" for i in range(12)])
    with WordsFake(dims=dims) as srv:
        s = openai_settings(ws, srv, remote={"dimensions": dims},
                            chunking={"tokens": 1200, "overlap": 0, "note_windows": True})
        run_index(s, full=True)
    conn = connect(s.index_file)
    q = text_vec("bicycle")
    best = {r: float(np.frombuffer(e, "<f4") @ q / np.linalg.norm(np.frombuffer(e, "<f4")))
            for r, e in conn.execute("SELECT rid, embedding FROM chunks")}
    for c, e in conn.execute(f"SELECT chunk, embedding FROM {vectors.PARTS_TABLE}"):
        v = np.frombuffer(e, "<f4")
        best[c] = max(best[c], float(v @ q / np.linalg.norm(v)))
    target = next(r for (r,) in conn.execute("SELECT rid FROM chunks WHERE path = 'memory/b-target.md'"))
    conn.close()
    for want in (6, 10, 24):
        exact = sorted(best, key=lambda r: (-best[r], r))[:want]
        assert target in exact  # the 5th nearest by its best cosine
        idx = retrieval._Index(s.index_file)
        try:
            got = idx.nearest(q, want)
        finally:
            idx.close()
        assert [r for r, _ in got] == exact, want
        assert [c for _, c in got] == pytest.approx([best[r] for r in exact], abs=1e-5)
