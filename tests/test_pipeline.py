"""The reindex pipeline end to end on real SQLite (FTS5 + sqlite-vec) with the real openai SDK
talking to a fake OpenAI server on 127.0.0.1 that counts what it receives."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from memory_core.config import load_settings
from memory_core.errors import PathError
from memory_core.index.chunking import chunk_markdown
from memory_core.index.pipeline import run_index
from memory_core.query.search import Searcher
from memory_core.storage.store import connect
from tests.conftest import openai_settings


def index_rows(settings, sql: str, args=()):
    conn = connect(settings.index_file, readonly=True)
    try:
        return conn.execute(sql, args).fetchall()
    finally:
        conn.close()


def test_first_build_then_no_change_makes_zero_calls(workspace, openai_fake):
    s = openai_settings(workspace, openai_fake)
    first = run_index(s)
    assert first.swapped and first.full and first.full_reason == "no index yet"
    assert first.chunks_embedded == first.chunks_total > 20
    assert openai_fake.embedded_inputs == first.chunks_embedded
    # every request is within OpenAI's documented limits and there are as few as they allow
    assert openai_fake.embed_requests == 1
    n_req = openai_fake.embed_requests
    mtime = os.stat(s.index_file).st_mtime_ns
    again = run_index(s)
    assert openai_fake.embed_requests == n_req
    assert not again.swapped and again.files_unchanged == again.files_scanned
    assert os.stat(s.index_file).st_mtime_ns == mtime  # no rebuild when nothing changed


def test_one_edit_sends_only_its_changed_chunks(workspace, openai_fake):
    s = openai_settings(workspace, openai_fake, chunking={"tokens": 100, "overlap": 10})
    run_index(s)
    before = set(openai_fake.input_texts)
    target = workspace / "memory" / "2026-09-04.md"
    text = target.read_text()
    target.write_text(text + "\n## 23:50\nRemember: replica lag alert threshold raised to 45s.\n")
    old_chunks = {c.hash for c in chunk_markdown(text, 100, 10)}
    new_chunks = [c for c in chunk_markdown(target.read_text(), 100, 10) if c.hash not in old_chunks]
    n_before = len(openai_fake.input_texts)
    summary = run_index(s)
    sent = openai_fake.input_texts[n_before:]
    assert summary.files_changed == 1 and summary.files_unchanged == summary.files_scanned - 1
    assert sorted(sent) == sorted(c.text for c in new_chunks if c.text.strip())
    assert not set(sent) & before
    # fake vectors are random, so look at enough results for the keyword side to show
    with Searcher(s) as searcher:
        res = searcher.search("replica lag alert threshold raised 45s", min_score=0, max_results=30)
    assert any(r.path == "memory/2026-09-04.md" and "45s" in r.snippet for r in res)


def test_deleted_file_rows_are_gone(workspace, openai_fake):
    s = openai_settings(workspace, openai_fake)
    run_index(s)
    victim = "memory/howto/deploy-checklist.md"
    rids = [r for (r,) in index_rows(s, "SELECT rid FROM chunks WHERE path = ?", (victim,))]
    assert rids
    (workspace / victim).unlink()
    summary = run_index(s)
    assert summary.files_removed == 1
    assert index_rows(s, "SELECT count(*) FROM chunks WHERE path = ?", (victim,))[0][0] == 0
    assert index_rows(s, "SELECT count(*) FROM files WHERE path = ?", (victim,))[0][0] == 0
    # chunks_fts is contentless (no path column): its rows are the chunks' rids
    lit = ",".join(map(str, rids))
    assert index_rows(s, f"SELECT count(*) FROM chunks_fts_docsize WHERE id IN ({lit})")[0][0] == 0
    assert index_rows(s, f"SELECT count(*) FROM chunks_fts WHERE chunks_fts MATCH 'deploy' AND rowid IN ({lit})")[0][0] == 0
    n = index_rows(s, "SELECT count(*) FROM chunks")[0][0]
    assert index_rows(s, "SELECT count(*) FROM chunks_fts")[0][0] == n


def test_model_change_forces_full_rebuild_and_reuses_nothing_wrong(workspace, openai_fake):
    s = openai_settings(workspace, openai_fake)
    first = run_index(s)
    n = openai_fake.embedded_inputs
    s2 = openai_settings(workspace, openai_fake, model="text-embedding-3-large")
    second = run_index(s2)
    assert second.full and second.full_reason == "model changed from text-embedding-3-small to text-embedding-3-large"
    assert openai_fake.embedded_inputs == n + first.chunks_total  # new model: every chunk embedded again
    models = {r[0] for r in index_rows(s2, "SELECT DISTINCT model FROM chunks")}
    assert models == {"text-embedding-3-large"}
    # back to the first model: everything comes from the cache
    third = run_index(s)
    assert third.full and third.chunks_embedded == 0 and third.chunks_from_cache == third.chunks_total


def test_a_full_rebuild_counts_against_the_live_index(workspace):
    """A full rebuild re-chunks every file, but its counts say what changed since the live index:
    it said every file was new and none removed (the CLI, --json, the flow's artifact and the
    swapped event showed "34 new, 0 removed" after one note was deleted and one edited)."""
    s = load_settings(None, {"workspace": str(workspace), "provider": "none"})
    first = run_index(s)
    (workspace / "memory" / "2026-09-01.md").unlink()
    with (workspace / "memory" / "2026-09-03.md").open("a") as fh:
        fh.write("- one more line about the narwhal census\n")
    full = run_index(s, full=True)
    assert full.swapped and full.full and full.full_reason == "requested"
    assert (full.files_new, full.files_changed, full.files_removed) == (0, 1, 1)
    assert full.files_unchanged == first.files_scanned - 2 and full.files_scanned == first.files_scanned - 1
    # still a rebuild: every file was chunked again
    assert full.chunks_indexed == full.chunks_total
    paths = {r[0] for r in index_rows(s, "SELECT path FROM files")}
    assert "memory/2026-09-01.md" not in paths and len(paths) == full.files_scanned
    with Searcher(s) as searcher:
        assert any(r.path == "memory/2026-09-03.md" for r in searcher.search("narwhal census", min_score=0))
    # another workspace's index (its paths name other files): every file is new there
    other = workspace.parent / "other"
    other.mkdir()
    (other / "memory").mkdir()
    (other / "memory" / "2026-09-03.md").write_text("# Elsewhere\n\nnot the same note\n")
    s2 = load_settings(None, {"workspace": str(other), "provider": "none", "index_path": str(s.index_file)})
    moved = run_index(s2, full=True)
    assert (moved.files_new, moved.files_changed, moved.files_unchanged, moved.files_removed) == (1, 0, 0, 0)


def test_keyword_only_mode_indexes_and_finds(workspace):
    s = load_settings(None, {"workspace": str(workspace), "provider": "none"})
    summary = run_index(s)
    assert summary.chunks_total > 20 and summary.provider == "none"
    with Searcher(s) as searcher:
        res = searcher.search("pgbackrest restore", min_score=0)
        assert res and res[0].path == "memory/howto/restore-postgres-backup.md"
        assert searcher.status().vector_search.startswith("off")


def test_bad_files_warn_and_the_run_completes(workspace, openai_fake):
    mem = workspace / "memory"
    (mem / "bad-utf8.md").write_bytes(b"caf\xe9 notes about espresso \xff\xfe\n")
    (mem / "binary.md").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + os.urandom(256))
    (mem / "empty.md").write_text("")
    (mem / "oneline.md").write_text(" ".join(f"w{i}" for i in range(700_000))[: 5 * 1024 * 1024])
    s = openai_settings(workspace, openai_fake)
    summary = run_index(s)
    assert summary.swapped
    joined = "\n".join(summary.warnings)
    assert "binary.md" in joined and "bad-utf8.md" in joined
    files = {r[0] for r in index_rows(s, "SELECT path FROM files")}
    assert "memory/binary.md" not in files
    assert {"memory/bad-utf8.md", "memory/empty.md", "memory/oneline.md"} <= files
    big = index_rows(s, "SELECT count(*), max(length(text)) FROM chunks WHERE path = 'memory/oneline.md'")[0]
    assert big[0] > 1000 and big[1] <= 2 * 1600 + 1  # the reference carries a whole segment as overlap
    assert index_rows(s, "SELECT count(*) FROM chunks WHERE path = 'memory/empty.md'")[0][0] == 0
    with Searcher(s) as searcher:
        assert any(r.path == "memory/bad-utf8.md" for r in searcher.search("espresso", min_score=0))


def test_get_refuses_paths_outside_the_sources(workspace, tmp_path):
    s = load_settings(None, {"workspace": str(workspace), "provider": "none"})
    run_index(s)
    (tmp_path / "secret.md").write_text("top secret\n")
    with Searcher(s) as searcher:
        got = searcher.read_file("memory/2026-09-04.md", from_line=2, lines=3)
        lines = (workspace / "memory" / "2026-09-04.md").read_text().split("\n")
        assert got.text == "\n".join(lines[1:4])
        for bad in ["../secret.md", str(tmp_path / "secret.md"), "/etc/passwd", "memory/../../secret.md",
                    "memory/%2e%2e/%2e%2e/secret.md", "memory/nope.md", "notes/reading-list.md", ""]:
            with pytest.raises(PathError):
                searcher.read_file(bad)


def test_citations_point_at_the_right_lines(workspace):
    s = load_settings(None, {"workspace": str(workspace), "provider": "none"})
    run_index(s)
    with Searcher(s) as searcher:
        results = searcher.search("Lisbon hotel confirmation", min_score=0)
        assert results and any("lisbon" in r.snippet.lower() for r in results)
        for r in results:
            lines = (workspace / r.path).read_text().split("\n")
            chunk = "\n".join(lines[r.start_line - 1:r.end_line])
            assert r.citation == f"{r.path}#L{r.start_line}-L{r.end_line}"
            # the snippet's first line is on the cited lines
            first = r.snippet.strip().split("\n")[0].strip(" .…")[:40]
            assert first in chunk


def test_extra_paths_are_indexed(workspace):
    s = load_settings(None, {"workspace": str(workspace), "provider": "none", "extra_paths": ["notes"]})
    run_index(s)
    paths = {r[0] for r in index_rows(s, "SELECT path FROM files")}
    assert "notes/reading-list.md" in paths and not any(p.endswith(".txt") for p in paths)


def test_index_files_are_private(workspace, openai_fake):
    s = openai_settings(workspace, openai_fake)
    run_index(s)
    for p in (s.index_file, s.cache_file):
        assert (os.stat(p).st_mode & 0o077) == 0, p


def test_missing_workspace_is_a_usage_error(tmp_path: Path):
    from memory_core.errors import UsageError

    s = load_settings(None, {"workspace": str(tmp_path / "missing"), "provider": "none"})
    with pytest.raises(UsageError, match="workspace not found"):
        run_index(s)
    assert not (tmp_path / "missing").exists()
