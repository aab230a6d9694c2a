"""Issue 25, sizes: ``chunks_fts`` is contentless (schema 5). It holds the inverted index and each
row's length, no copy of the text or of the chunks' fields; an index of schema 4 (text plus six
UNINDEXED columns) is still searched alike and is rebuilt in full by the next run, which embeds
nothing. Real SQLite files, the fake OpenAI server over HTTP."""

from __future__ import annotations

import apsw
import pytest

from memory_core.index.pipeline import run_index
from memory_core.query.search import Searcher
from memory_core.storage.store import SCHEMA_VERSION, connect, fts_tokenizer, probe_index, write_meta
from memory_core.storage.textsearch import segment_many
from tests.conftest import openai_settings

QUERIES = ["replica lag alert", "postgres replication", "who owns the canary release", "deploy checklist"]


def _fts_sql(index) -> str:  # type: ignore[no-untyped-def]
    conn = connect(index, readonly=True)
    try:
        return conn.execute("SELECT sql FROM sqlite_master WHERE name = 'chunks_fts'").fetchone()[0]
    finally:
        conn.close()


def _to_schema_4(index) -> None:  # type: ignore[no-untyped-def]
    """Rewrite the FTS table as schema 4 wrote it: the segmented text and six UNINDEXED columns."""
    conn = connect(index)
    rows = conn.execute("SELECT rid, text, id, path, source, model, start_line, end_line FROM chunks"
                        " ORDER BY rid").fetchall()
    tok = fts_tokenizer().replace("'", "''")
    conn.execute("BEGIN")
    conn.execute("DROP TABLE chunks_fts")
    conn.execute("CREATE VIRTUAL TABLE chunks_fts USING fts5(text, id UNINDEXED, path UNINDEXED, source UNINDEXED,"
                 f" model UNINDEXED, start_line UNINDEXED, end_line UNINDEXED, tokenize='{tok}')")
    conn.executemany("INSERT INTO chunks_fts(rowid, text, id, path, source, model, start_line, end_line)"
                     " VALUES(?,?,?,?,?,?,?,?)",
                     ((r[0], t, *r[2:]) for r, t in zip(rows, segment_many([r[1] for r in rows]), strict=True)))
    meta = probe_index(index)[0]
    meta["schema_version"] = 4
    write_meta(conn, meta)
    conn.execute("COMMIT")
    conn.execute("VACUUM")
    conn.close()


def _answers(s, mode: str, sources: list[str] | None = None):  # type: ignore[no-untyped-def]
    with Searcher(s) as se:
        return [[(r.citation, r.score, r.vector_score, r.text_score) for r in
                 se.search(q, mode=mode, min_score=0, max_results=20, sources=sources)] for q in QUERIES]


def test_the_fts_table_is_contentless_and_checks(workspace, openai_fake):
    s = openai_settings(workspace, openai_fake, sources=["memory", "sessions"])
    run_index(s)
    sql = _fts_sql(s.index_file)
    assert "content=''" in sql and "contentless_delete=1" in sql and "UNINDEXED" not in sql
    conn = connect(s.index_file)
    try:
        n = conn.execute("SELECT count(*) FROM chunks").fetchone()[0]
        assert conn.execute("SELECT count(*) FROM chunks_fts_docsize").fetchone()[0] == n
        assert conn.execute("SELECT count(*) FROM chunks_fts WHERE text IS NOT NULL").fetchone()[0] == 0
        conn.execute("INSERT INTO chunks_fts(chunks_fts) VALUES('integrity-check')")  # the index's structure
        # damage to the index itself is found (the check cannot compare with a text it has not)
        rid, block = conn.execute("SELECT id, block FROM chunks_fts_data WHERE id > 10 ORDER BY length(block)"
                                  " DESC LIMIT 1").fetchone()
        b = bytearray(block)
        for i in range(8, len(b), 16):
            b[i] ^= 0xFF
        conn.execute("UPDATE chunks_fts_data SET block = ? WHERE id = ?", (bytes(b), rid))
        with pytest.raises(apsw.Error):
            conn.execute("INSERT INTO chunks_fts(chunks_fts) VALUES('integrity-check')")
    finally:
        conn.close()


def test_schema_4_is_searched_alike_then_rebuilt_without_embedding(workspace, openai_fake):
    s = openai_settings(workspace, openai_fake, sources=["memory", "sessions"])
    run_index(s)
    new = {m: _answers(s, m) for m in ("keyword", "hybrid")}
    new_src = _answers(s, "keyword", ["sessions"])
    assert any(new_src) and all(c.startswith("sessions/") for a in new_src for c, *_ in a)
    _to_schema_4(s.index_file)
    assert "UNINDEXED" in _fts_sql(s.index_file)
    old_size = s.index_file.stat().st_size
    # the old table is read as before (the source filter joins chunks, whatever the FTS columns)
    for m in ("keyword", "hybrid"):
        assert _answers(s, m) == new[m]
    assert _answers(s, "keyword", ["sessions"]) == new_src
    sent = len(openai_fake.input_texts)
    summary = run_index(s)  # an incremental run: the old schema is rebuilt in full, and says why
    assert summary.full and summary.swapped and f"schema_version changed from 4 to {SCHEMA_VERSION}" in summary.full_reason
    assert summary.chunks_embedded == 0 and len(openai_fake.input_texts) == sent  # every vector reused
    assert probe_index(s.index_file)[0]["schema_version"] == SCHEMA_VERSION >= 5
    assert "content=''" in _fts_sql(s.index_file)
    assert s.index_file.stat().st_size < old_size
    for m in ("keyword", "hybrid"):
        assert _answers(s, m) == new[m]  # bit-identical scores: the same index and lengths
    assert _answers(s, "keyword", ["sessions"]) == new_src


def test_in_place_edits_and_deletes_keep_the_contentless_index_whole(workspace, openai_fake):
    s = openai_settings(workspace, openai_fake)
    run_index(s)
    notes = sorted((workspace / "memory").glob("*.md"))
    notes[0].write_text(notes[0].read_text() + "\n\n## 23:59\n- the zanzibar teapot has a chipped lid.\n")
    notes[1].unlink()
    summary = run_index(s)
    assert not summary.full
    conn = connect(s.index_file)
    try:
        conn.execute("INSERT INTO chunks_fts(chunks_fts) VALUES('integrity-check')")
        rids = {r for (r,) in conn.execute("SELECT rid FROM chunks")}
        assert {r for (r,) in conn.execute("SELECT id FROM chunks_fts_docsize")} == rids
        assert {r for (r,) in conn.execute("SELECT rowid FROM chunks_fts")} == rids
        hit = conn.execute("SELECT c.path FROM chunks_fts JOIN chunks c ON c.rid = chunks_fts.rowid"
                           " WHERE chunks_fts MATCH 'zanzibar'").fetchall()
        assert hit == [("memory/" + notes[0].name,)]
    finally:
        conn.close()
    with Searcher(s) as se:
        assert se.search("zanzibar teapot", mode="keyword", min_score=0)[0].path == "memory/" + notes[0].name


def test_an_sqlite_without_contentless_delete_is_refused_with_a_reason(monkeypatch):
    from memory_core.errors import RunError
    from memory_core.storage import store

    monkeypatch.setattr(store.apsw, "sqlite_lib_version", lambda: "3.42.0")
    with pytest.raises(RunError, match="3.43 or later"):
        store.create_schema(apsw.Connection(":memory:"), 8, with_vec=True)
