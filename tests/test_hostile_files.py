"""Hostile and unusual files: many files, deep nesting, loops, unreadable files and folders,
a read-only index directory, files that change while a run reads them."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys

import pytest

from memory_core.config import load_settings
from memory_core.index.pipeline import run_index
from memory_core.query.search import Searcher
from memory_core.sources import discovery
from memory_core.storage.store import connect
from tests.conftest import ROOT

IS_ROOT = os.geteuid() == 0
# root reads everything whatever the mode bits say; in a user namespace as an unprivileged
# user it does not, so permission errors are real ones from the kernel
UNSHARE = ["unshare", "--user", "--map-user=65534", "--map-group=65534"] if IS_ROOT else []
needs_unprivileged = pytest.mark.skipif(IS_ROOT and shutil.which("unshare") is None,
                                        reason="needs unshare to drop root's permission override")


def _run_cli(args: list[str]) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([*UNSHARE, sys.executable, "-m", "memory_core.apps.cli", *args], capture_output=True,
                          text=True, env=env, timeout=120)


def test_ten_thousand_files_in_one_folder_and_deep_nesting(tmp_path):
    ws = tmp_path / "ws"
    flat = ws / "memory" / "flat"
    flat.mkdir(parents=True)
    for i in range(10_000):
        (flat / f"n{i:05d}.md").write_text(f"note {i} mentions token{i}\n")
    deep = ws / "memory"
    for i in range(60):
        deep = deep / f"d{i}"
    deep.mkdir(parents=True)
    (deep / "bottom.md").write_text("the deepest note talks about anglerfish\n")
    os.symlink(ws / "memory", deep / "loop")  # a symlink loop, never followed
    s = load_settings(None, {"workspace": str(ws), "provider": "none"})
    summary = run_index(s)
    assert summary.files_scanned == 10_001 and summary.chunks_total == 10_001
    with Searcher(s) as searcher:
        assert searcher.search("anglerfish")[0].path.endswith("d59/bottom.md")
        assert searcher.search("token9876")[0].path == "memory/flat/n09876.md"


def test_file_deleted_or_rewritten_during_the_run(workspace, monkeypatch):
    s = load_settings(None, {"workspace": str(workspace), "provider": "none"})
    victim = workspace / "memory" / "2026-09-01.md"
    rewritten = workspace / "memory" / "2026-09-03.md"
    real = discovery.discover_files

    grown = workspace / "memory" / "2026-09-04.md"

    def racing(settings):  # discovery saw the files; then they change under the run
        d = real(settings)
        victim.unlink()
        rewritten.write_text("# rewritten\ncompletely new text about otters\n")
        with grown.open("a") as fh:  # far past the size discovery saw: read to its end all the same
            fh.write("\n" + "filler line about nothing much\n" * 3000 + "## late\nthe narwhal migration\n")
        return d

    monkeypatch.setattr("memory_core.index.stages.discover_files", racing)
    summary = run_index(s)
    monkeypatch.undo()
    assert summary.swapped
    conn = connect(s.index_file, readonly=True)
    paths = {r[0] for r in conn.execute("SELECT path FROM files")}
    n_chunks = conn.execute("SELECT count(*) FROM chunks").fetchone()[0]
    n_fts = conn.execute("SELECT count(*) FROM chunks_fts").fetchone()[0]
    narwhal = conn.execute("SELECT path FROM chunks WHERE text LIKE '%narwhal migration%'").fetchall()
    conn.close()
    assert narwhal == [("memory/2026-09-04.md",)]  # this run read the grown file to its end
    assert "memory/2026-09-01.md" not in paths and n_chunks == n_fts  # consistent
    assert any("2026-09-01.md" in w for w in summary.warnings)
    again = run_index(s)  # the next run settles whatever changed
    assert again.files_removed == 0 or "memory/2026-09-01.md" not in paths
    with Searcher(s) as searcher:
        assert searcher.search("otters")[0].path == "memory/2026-09-03.md"


@needs_unprivileged
def test_unreadable_file_and_folder_warn_and_skip(tmp_path):
    ws = tmp_path / "ws"
    (ws / "memory" / "locked").mkdir(parents=True)
    (ws / "memory" / "ok.md").write_text("readable note about herons\n")
    (ws / "memory" / "secret.md").write_text("no one may read this\n")
    (ws / "memory" / "locked" / "inner.md").write_text("hidden\n")
    os.chmod(ws / "memory" / "secret.md", 0)
    os.chmod(ws / "memory" / "locked", 0)
    try:
        proc = _run_cli(["index", "-w", str(ws), "--provider", "none", "--engine", "local"])
    finally:
        os.chmod(ws / "memory" / "locked", 0o755)
        os.chmod(ws / "memory" / "secret.md", 0o644)
    assert proc.returncode == 0, proc.stderr
    assert "secret.md" in proc.stderr and "locked" in proc.stderr
    conn = connect(ws / ".memory-core" / "index.sqlite", readonly=True)
    assert {r[0] for r in conn.execute("SELECT path FROM files")} == {"memory/ok.md"}
    conn.close()


@needs_unprivileged
def test_read_only_index_directory_is_a_clear_error(tmp_path):
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    (ws / "memory" / "a.md").write_text("hello\n")
    ro = tmp_path / "readonly"
    ro.mkdir()
    ro.chmod(stat.S_IRUSR | stat.S_IXUSR)
    try:
        proc = _run_cli(["index", "-w", str(ws), "--index", str(ro / "i.sqlite"), "--provider", "none",
                         "--engine", "local"])
    finally:
        ro.chmod(0o755)
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    lines = [x for x in proc.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and "ermission denied" in lines[0] and str(ro) in lines[0], lines


def test_a_note_rewritten_between_discovery_and_reading_is_recorded_as_read(workspace):
    """issue 22 #9: the hash stored was discovery's while the chunks came from a later read: a
    note caught mid-write (truncated) was indexed with text in no finished version of the file,
    and when the write completed the stored hash called it unchanged for ever. The files row now
    holds the hash, size and mtime of the very bytes that were chunked."""
    import hashlib

    from memory_core.embeddings.registry import create_provider
    from memory_core.index import stages
    from memory_core.index.stages import chunk_file, chunk_params

    s = load_settings(None, {"workspace": str(workspace), "provider": "none"})
    note = workspace / "memory" / "projects" / "mid-write.md"
    note.parent.mkdir(parents=True, exist_ok=True)
    full = "# Plan\n\nthe walrus migration starts Monday\nsecond line of the plan\n"
    note.write_text(full)
    run_index(s)
    note.write_text(full + "a third line\n")  # changed: discovery hashes this version
    provider, _ = create_provider(s)
    plan = stages.discover_stage(s, provider, "test")
    (f,) = [x for x in plan.to_index if x.path == "memory/projects/mid-write.md"]
    partial = b"# Plan\n\nthe wal"  # an editor's truncate-then-write, caught half way
    note.write_bytes(partial)
    tokens, overlap = chunk_params(s, provider)
    got = chunk_file(f, s, provider, tokens, overlap, [])
    assert got is not None
    st = os.stat(note)
    assert got.file_row["hash"] == hashlib.sha256(partial).hexdigest()
    assert (got.file_row["size"], got.file_row["mtime_ms"]) == (len(partial), st.st_mtime_ns // 1_000_000)
    # the write completes with the discovered version: a later run sees a different file
    note.write_text(full + "a third line\n")
    assert hashlib.sha256(note.read_bytes()).hexdigest() != got.file_row["hash"]


def test_a_transcript_is_recorded_as_the_bytes_parsed(workspace):
    """issue 22 #9, for transcripts: the files row holds the hash and length of the bytes the
    parse read (a line appended after discovery included), not discovery's."""
    import hashlib

    from memory_core.embeddings.registry import create_provider
    from memory_core.index import stages
    from memory_core.index.stages import chunk_file, chunk_params

    s = load_settings(None, {"workspace": str(workspace), "provider": "none", "sources": ["memory", "sessions"]})
    run_index(s)
    t = workspace / "sessions" / "2026-10-21-ingest-502-debug.jsonl"
    with open(t, "a") as fh:
        fh.write('{"type": "message", "timestamp": "2026-10-21T13:00:00Z", "message": {"role": "user",'
                 ' "content": "' + "one more question about the gateway " * 40 + '"}}\n')
    provider, _ = create_provider(s)
    plan = stages.discover_stage(s, provider, "test", full=True)
    (f,) = [x for x in plan.to_index if x.path == f"sessions/{t.name}"]
    with open(t, "a") as fh:  # appended after discovery, before the parse
        fh.write('{"type": "message", "timestamp": "2026-10-21T13:01:00Z", "message": {"role": "user",'
                 ' "content": "and the very last one"}}\n')
    tokens, overlap = chunk_params(s, provider)
    got = chunk_file(f, s, provider, tokens, overlap, [])
    assert got is not None
    data = t.read_bytes()
    assert got.file_row["hash"] == hashlib.sha256(data).hexdigest() and got.file_row["size"] == len(data)
    assert any("very last one" in c.text for c in got.chunks)
