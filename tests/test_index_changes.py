"""A long-lived reader carries what it keeps in memory (every sign-bit code, the common words'
postings) across the index's incremental runs by the index's change log
(memory_core.storage.index_changes), instead of reading it all again: real SQLite, FTS5, the openai SDK
against the fake server, in-place and copy runs. What it carries must equal what a fresh reader
reads, bit for bit, and its answers a fresh reader's."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from memory_core.index import writer
from memory_core.index.pipeline import run_index
from memory_core.query import retrieval
from memory_core.query.search import Searcher
from memory_core.storage import index_changes, store, vectors
from memory_core.storage.store import connect_reader
from tests.conftest import openai_settings

QUERIES = ["gateway quorum replicas", "postgres failover", "staging cluster retired", "deploy window friday",
           "the outage review", "lisbon trip hotel"]


@pytest.fixture(autouse=True)
def _every_query_on_postings(monkeypatch):
    # the examples are small: make every keyword query use the in-memory postings, as common
    # words do at scale, so that they are kept and carried
    monkeypatch.setattr(retrieval, "KEYWORD_POSTINGS_MIN", 0)
    monkeypatch.delenv("MEMORY_CORE_WRITER", raising=False)


class _Loads:
    """Counts full loads of the codes (BitIndex.__init__) and carried ones (BitIndex.updated)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.full = self.carried = 0
        init, upd = vectors.BitIndex.__init__, vectors.BitIndex.updated

        def counting_init(bi, conn, dims, table=vectors.BITS_TABLE):  # type: ignore[no-untyped-def]
            if table == vectors.BITS_TABLE:
                self.full += 1
            init(bi, conn, dims, table)

        def counting_updated(bi, conn, delta):  # type: ignore[no-untyped-def]
            self.carried += 1
            return upd(bi, conn, delta)

        monkeypatch.setattr(vectors.BitIndex, "__init__", counting_init)
        monkeypatch.setattr(vectors.BitIndex, "updated", counting_updated)


@contextlib.contextmanager
def _warm_reader(workspace: Path, srv, monkeypatch) -> Iterator[tuple[Any, Searcher, _Loads]]:  # type: ignore[no-untyped-def]
    """An index of ``workspace``, and a searcher that has answered QUERIES (and counts loads)."""
    s = openai_settings(workspace, srv)
    run_index(s)
    loads = _Loads(monkeypatch)
    with Searcher(s) as searcher:
        _warm(searcher)
        yield s, searcher, loads


def _warm(searcher: Searcher) -> None:
    for q in QUERIES:
        searcher.search(q, min_score=0.0)
        searcher.search(q, min_score=0.0)  # a phrase read through FTS5 is kept on its second use


def _answers(searcher: Searcher) -> list[list[tuple[str, float]]]:
    return [[(r.path + f":{r.start_line}", round(r.score, 12)) for r in searcher.search(q, min_score=0.0)]
            for q in QUERIES]


def _assert_same_as_fresh(searcher: Searcher, index: Path) -> None:
    """What the searcher holds now equals what a reader that opens the file anew reads."""
    for q in QUERIES:  # the first queries after the change carry what the searcher keeps
        searcher.search(q, min_score=0.0)
    idx = searcher._current()
    carried = idx.bit_index()
    fresh_idx = retrieval._Index(index)
    try:
        fresh = vectors.BitIndex(fresh_idx.conn, int(idx.dims or 0))
        (c_rids, c_words), (f_rids, f_words) = carried.arrays(), fresh.arrays()
        assert np.array_equal(c_rids, f_rids) and len(carried) == len(fresh)
        assert np.array_equal(c_words, f_words)
        post = idx.kept_postings()
        assert post is not None and post.tf, "the warm queries kept postings"
        conn = fresh_idx.keyword_conn()
        assert conn is not None
        ref = retrieval._Postings(post.size - 1, fresh_idx._vocab_conn())
        nz = ref.lengths > 0
        assert np.array_equal(post.lengths[nz], ref.lengths[nz]) and not post.lengths[~nz].any()
        for phrase, tf in post.tf.items():
            df = fresh_idx.df(phrase, conn)
            assert idx.df(phrase) == df, phrase
            if df:
                assert ref.read(conn, phrase, df) or ref.read(conn, phrase, df)
                assert np.array_equal(tf.astype(np.int64), ref.tf[phrase].astype(np.int64)), phrase
            else:
                assert not tf.any()
        if post.tf and ref.tf:
            assert (post.n_row, post.total_tokens) == (ref.n_row, ref.total_tokens)
    finally:
        fresh_idx.close()
    with Searcher(searcher.settings) as other:  # and the answers of a reader that reads it all anew
        assert _answers(searcher) == _answers(other)


def _append(ws: Path, name: str, text: str) -> None:
    with open(ws / name, "a") as fh:
        fh.write(text)


def test_a_warm_reader_carries_its_codes_and_postings_across_in_place_runs(workspace, openai_fake, monkeypatch):
    with _warm_reader(workspace, openai_fake, monkeypatch) as (s, searcher, loads):
        assert loads.full == 1 and loads.carried == 0
        # an edit, a removed file and a new one, in place
        _append(workspace, "MEMORY.md", "\n## 23:59 late note\n- the gateway quorum moved to five replicas.\n")
        (workspace / "memory" / "2026-09-03.md").unlink(missing_ok=True)
        (workspace / "memory" / "added-today.md").write_text("# Added\nThe staging cluster was retired on Monday.\n")
        assert run_index(s).published == "in place"
        _assert_same_as_fresh(searcher, s.index_file)
        assert loads.carried == 1
        before = loads.full
        # two more runs before the reader looks again: the log links all three states
        _append(workspace, "memory/added-today.md", "\nThe postgres failover drill is on friday.\n")
        assert run_index(s).published == "in place"
        (workspace / "memory" / "added-today.md").unlink()
        assert run_index(s).published == "in place"
        _assert_same_as_fresh(searcher, s.index_file)
        assert loads.carried == 2
        assert loads.full == before + 1  # the fresh reader's own load in the check above, not the searcher's


def test_a_row_id_that_comes_back_is_read_anew(workspace, openai_fake, monkeypatch):
    """A run's new rows take the ids after the highest in the file when it starts: when one run
    removes the file with the highest ids and a later one adds another, the new rows take the
    same ids with other codes and words (the reader looks after both runs: one delta)."""
    s = openai_settings(workspace, openai_fake)
    (workspace / "memory" / "zz-last.md").write_text("# Last\nThe lisbon trip hotel was booked for the deploy window.\n")
    run_index(s)
    conn = connect_reader(s.index_file)
    top_before = conn.execute("SELECT max(rid) FROM chunks").fetchone()[0]
    last_rids = [r for (r,) in conn.execute("SELECT rid FROM chunks WHERE path = 'memory/zz-last.md'")]
    conn.close()
    assert top_before in last_rids
    with Searcher(s) as searcher:
        _warm(searcher)
        (workspace / "memory" / "zz-last.md").unlink()
        assert run_index(s).published == "in place"
        (workspace / "memory" / "zz-new.md").write_text("# New\nThe outage review moved the gateway quorum.\n")
        assert run_index(s).published == "in place"
        conn = connect_reader(s.index_file)
        reused = conn.execute("SELECT count(*) FROM chunks WHERE path = 'memory/zz-new.md' AND rid <= ?",
                              (top_before,)).fetchone()[0]
        conn.close()
        assert reused, "the new file's rows reuse the removed file's ids (what this test is about)"
        _assert_same_as_fresh(searcher, s.index_file)


def test_a_copy_run_is_carried_too(workspace, openai_fake, monkeypatch):
    with _warm_reader(workspace, openai_fake, monkeypatch) as (s, searcher, loads):
        monkeypatch.setattr(writer, "IN_PLACE_MAX_BYTES", 10)
        _append(workspace, "MEMORY.md", "\n## 23:59 late note\n- the gateway quorum moved to five replicas.\n")
        summary = run_index(s)
        assert summary.published != "in place" and summary.swapped  # a new file, renamed over the old
        _assert_same_as_fresh(searcher, s.index_file)
        assert loads.carried == 1


def test_without_a_link_in_the_log_the_reader_reads_it_all_again(workspace, openai_fake, monkeypatch, tmp_path):
    with _warm_reader(workspace, openai_fake, monkeypatch) as (s, searcher, loads):
        _append(workspace, "MEMORY.md", "\n- the gateway quorum moved to five replicas.\n")
        run_index(s, full=True)  # a full build: a new file without a log
        conn = connect_reader(s.index_file)
        assert not store.has_table(conn, index_changes.TABLE)
        conn.close()
        _assert_same_as_fresh(searcher, s.index_file)
        assert loads.carried == 0
        # a reader further behind than the log keeps
        monkeypatch.setattr(index_changes, "KEEP", 2)
        for i in range(3):
            _append(workspace, "MEMORY.md", f"\n- note {i} on the postgres failover.\n")
            assert run_index(s).published == "in place"
        conn = connect_reader(s.index_file)
        assert conn.execute(f"SELECT count(*) FROM {index_changes.TABLE}").fetchone()[0] == 2
        conn.close()
        _assert_same_as_fresh(searcher, s.index_file)
        assert loads.carried == 0


def test_the_log_is_written_with_the_run_or_not_at_all(workspace, openai_fake):
    """A run that fails before its commit leaves no row; each row names the rows the run removed
    and the first id it could add, and links the states one after another."""
    s = openai_settings(workspace, openai_fake)
    run_index(s)
    conn = connect_reader(s.index_file)
    start = index_changes.meta_digest(conn)
    old = {p: sorted(r for (r,) in conn.execute("SELECT rid FROM chunks WHERE path = ?", (p,)))
           for p in ("memory/2026-09-03.md",)}
    top = conn.execute("SELECT max(rid) FROM chunks").fetchone()[0]
    conn.close()
    (workspace / "memory" / "2026-09-03.md").unlink()
    (workspace / "memory" / "added-today.md").write_text("# Added\nThe staging cluster was retired on Monday.\n")
    assert run_index(s).published == "in place"
    conn = connect_reader(s.index_file)
    rows = conn.execute(f"SELECT before, after, deleted, added_from FROM {index_changes.TABLE}").fetchall()
    now = index_changes.meta_digest(conn)
    added = [r for (r,) in conn.execute("SELECT rid FROM chunks WHERE path = 'memory/added-today.md'")]
    conn.close()
    assert len(rows) == 1
    before, after, deleted, added_from = rows[0]
    assert (before, after) == (start, now)
    assert np.frombuffer(deleted, dtype="<i8").tolist() == old["memory/2026-09-03.md"]
    assert added_from == top + 1 and min(added) >= added_from
    # a run that does not commit: its row goes with the rest of its transaction
    w = writer.IndexWriter(s.index_file, full=False, dims=64, in_place=True)
    w.open()
    w.delete_paths(["MEMORY.md"])
    w.set_meta({"built_at": "never"})
    w._log_change()
    w.abort()
    conn = connect_reader(s.index_file)
    assert conn.execute(f"SELECT count(*) FROM {index_changes.TABLE}").fetchone()[0] == 1
    assert index_changes.meta_digest(conn) == now
    conn.close()


def test_since_links_only_a_whole_chain(tmp_path):
    conn = store.connect(tmp_path / "log.sqlite")
    conn.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
    digests = []
    for i in range(4):
        conn.execute("BEGIN")
        before = index_changes.meta_digest(conn)
        store.write_meta(conn, {"built_at": i})
        index_changes.record(conn, before, np.array([10 * i + 2, 10 * i + 1]), 100 - i)
        conn.execute("COMMIT")
        digests.append((before, index_changes.meta_digest(conn)))
    d = index_changes.since(conn, digests[1][0], digests[3][1])
    assert d is not None and d.deleted.tolist() == [11, 12, 21, 22, 31, 32] and d.added_from == 97
    assert index_changes.since(conn, digests[0][0], digests[2][1]) is None  # not the state now
    assert index_changes.since(conn, "unknown", digests[3][1]) is None
    assert index_changes.since(conn, digests[3][1], digests[3][1]) is not None  # no change
    conn.close()



def test_codes_carried_by_mask_and_tail_answer_as_a_fresh_load(tmp_path):
    """Rounds of deletes and appends much smaller than the index: the carried codes keep the
    loaded base, mask its deleted rows and hold the added ones in a tail until they pass 1/16 of
    it; at every round the live rows, their words and the nearest rows equal a fresh load's."""
    rng = np.random.default_rng(7)
    dims = 64
    conn = store.connect(tmp_path / "bits.sqlite")
    vectors.create(conn)
    top = 20_000
    m = rng.standard_normal((top, dims)).astype("<f4")
    vectors.append(conn, list(range(1, top + 1)), [v.tobytes() for v in m], dims)
    bits = vectors.BitIndex(conn, dims)
    queries = rng.standard_normal((5, dims)).astype(np.float32)
    masked = folded = 0
    for _ in range(12):
        live = vectors.BitIndex(conn, dims).arrays()[0]
        gone = rng.choice(live, size=150, replace=False)
        if rng.random() < 0.5:  # the highest rows too: their ids come back in the next append
            gone = np.union1d(gone, live[-20:])
        conn.execute("BEGIN")
        vectors.delete(conn, gone.tolist())
        high = int(vectors.BitIndex(conn, dims).arrays()[0].max())  # as the writer: after the highest live row
        new = list(range(high + 1, high + 1 + 200))
        vectors.append(conn, new, [v.tobytes() for v in rng.standard_normal((200, dims)).astype("<f4")], dims)
        conn.execute("COMMIT")
        bits = bits.updated(conn, index_changes.Delta(np.sort(gone).astype(np.int64), high + 1))
        if bits._dead is not None or len(bits._tail_rids):
            masked += 1
        else:
            folded += 1
        fresh = vectors.BitIndex(conn, dims)
        (c_rids, c_words), (f_rids, f_words) = bits.arrays(), fresh.arrays()
        assert np.array_equal(c_rids, f_rids) and np.array_equal(c_words, f_words) and len(bits) == len(fresh)
        for q in queries:
            assert set(bits.nearest(q, 50).tolist()) == set(fresh.nearest(q, 50).tolist())
            assert set(bits.candidates(q, 10).tolist()) == set(fresh.candidates(q, 10).tolist())
    assert masked and folded  # both ways were taken
    conn.close()


def test_a_state_no_vector_query_asked_passes_the_codes_on(workspace, openai_fake, monkeypatch):
    """Keyword-only queries between two runs open the middle state without loading its codes:
    the codes of the first state are still carried to the third."""
    with _warm_reader(workspace, openai_fake, monkeypatch) as (s, searcher, loads):
        _append(workspace, "MEMORY.md", "\n- the gateway quorum moved to five replicas.\n")
        assert run_index(s).published == "in place"
        searcher.search("gateway quorum", mode="keyword")  # opens the middle state
        _append(workspace, "MEMORY.md", "\n- the postgres failover drill is on friday.\n")
        assert run_index(s).published == "in place"
        full = loads.full
        _assert_same_as_fresh(searcher, s.index_file)
        assert loads.carried == 1 and loads.full == full + 1  # + the fresh reader's own load in the check


def _common_words_memory(tmp_path: Path, openai_fake: Any, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Any, list[Path], list[str]]:
    """A memory whose words (bench.corpus.WORDS) are in most chunks, indexed; and the phrases each
    search counts from here on (the list the counting query appends to)."""
    from bench.corpus import generate

    ws = tmp_path / "ws"
    files = generate(ws, 30, seed=4)
    s = openai_settings(ws, openai_fake)
    run_index(s)
    counted: list[str] = []
    int_of = retrieval.int_of

    def counting(conn, sql, bindings=()):  # type: ignore[no-untyped-def]
        if "LIMIT ?)" in sql:
            counted.append(bindings[0])
        return int_of(conn, sql, bindings)

    monkeypatch.setattr(retrieval, "int_of", counting)
    return ws, s, files, counted


def test_common_words_stay_common_across_runs_without_counting_them_again(tmp_path, openai_fake, monkeypatch):
    """A word in half the chunks or more is counted once, a little past half (its IDF is bm25()'s
    floor from there up); after an incremental run the reader keeps it common by the change log
    while what the run deleted cannot have taken it below half, and counts it again when it can."""
    ws, s, files, counted = _common_words_memory(tmp_path, openai_fake, monkeypatch)
    q = "postgres replication lag"
    phrases = {'"postgres"', '"replication"', '"lag"'}

    def answers(searcher: Searcher) -> list[tuple[str, int, float]]:
        return [(r.path, r.start_line, r.score) for r in searcher.search(q, min_score=0.0)]

    with Searcher(s) as searcher:
        answers(searcher)
        first = searcher._current()
        assert set(first.common) == phrases and set(counted) == phrases
        counted.clear()
        _append(ws, files[0].relative_to(ws).as_posix(), "\n## 23:59 late\n- postgres replication lag again.\n")
        assert run_index(s).published == "in place"
        got = answers(searcher)
        assert searcher._current() is not first
        assert counted == [] and set(searcher._current().common) == phrases  # kept, not counted
        with Searcher(s) as fresh:
            assert answers(fresh) == got
        counted.clear()
        for f in files[1:16]:  # half the files: the words may have fallen below half
            f.unlink()
        run_index(s)
        got = answers(searcher)
        assert set(counted) == phrases  # counted again
        with Searcher(s) as fresh:
            assert answers(fresh) == got


def test_two_threads_of_one_search_never_count_a_carried_common_word(tmp_path, openai_fake, monkeypatch):
    """A search's keyword side (a worker thread) and its other thread both ask for the common words'
    counts of a state just opened after an incremental run. The first takes over the previous
    state's counts by the change log; the second waits for it rather than counting them again
    (before: the hand-over was marked done as it began, so the second, arriving meanwhile, found
    neither and counted: the full suite under load failed the test above so)."""
    import threading
    import time

    ws, s, files, counted = _common_words_memory(tmp_path, openai_fake, monkeypatch)
    with Searcher(s) as searcher:
        searcher.search("postgres replication lag", min_score=0.0)
        assert '"postgres"' in searcher._current().common
        _append(ws, files[0].relative_to(ws).as_posix(), "\n## 23:59 late\n- postgres replication lag again.\n")
        assert run_index(s).published == "in place"
        idx = searcher._current()
        since = index_changes.since

        def slow_since(*a: Any) -> Any:  # the hand-over takes a while (a loaded machine)
            time.sleep(0.3)
            return since(*a)

        monkeypatch.setattr(retrieval.index_changes, "since", slow_since)
        counted.clear()
        first = threading.Thread(target=idx.idf_df, args=('"postgres"',))
        first.start()
        time.sleep(0.1)  # the first thread is inside the hand-over
        other = idx.keyword_conn()
        assert other is not None
        assert idx.idf_df('"postgres"', other) >= idx.half_rows()
        first.join()
        assert counted == []
