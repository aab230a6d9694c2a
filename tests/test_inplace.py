"""Small incremental runs edit the live index in one SQLite transaction (memory_core.storage.store
``edit_in_place``): real SQLite + sqlite-vec, the openai SDK against the fake server, and a
SIGKILL in the middle of SQLite's own commit (a VFS that kills the process after the first
page of the database file is overwritten)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from memory_core.index import writer
from memory_core.index.pipeline import run_index
from memory_core.query.search import Searcher
from memory_core.storage import store
from memory_core.storage.store import connect, connect_reader, load_vec, probe_index
from tests.conftest import ROOT, openai_settings
from tests.test_streaming import _snapshot

NOTE = "\n## 23:59 late note\n- the gateway quorum moved to five replicas after the outage review.\n"


def _content(index: Path) -> dict:
    snap = _snapshot(index)
    return {"chunks": snap["chunks"], "files": snap["files"], "counts": snap["meta"]["counts"]}


def _inode(p: Path) -> int:
    return os.stat(p).st_ino


def _edit(ws: Path) -> None:
    with open(ws / "MEMORY.md", "a") as fh:
        fh.write(NOTE)
    (ws / "memory" / "2026-09-03.md").unlink(missing_ok=True)
    (ws / "memory" / "added-today.md").write_text("# Added\nThe staging cluster was retired on Monday.\n")


def test_small_change_is_one_transaction_on_the_live_file(workspace, openai_fake, tmp_path, monkeypatch):
    monkeypatch.delenv("MEMORY_CORE_WRITER", raising=False)
    s = openai_settings(workspace, openai_fake)
    run_index(s)
    ino = _inode(s.index_file)
    _edit(workspace)
    summary = run_index(s)
    assert summary.swapped and summary.published == "in place"
    assert any("updated in place" in line for line in summary.lines())
    assert _inode(s.index_file) == ino  # not replaced
    assert not os.path.exists(str(s.index_file) + "-journal")
    assert not [p for p in s.index_file.parent.iterdir() if ".tmp-" in p.name]
    # the same content as a full build of the same sources
    full = openai_settings(workspace, openai_fake, index_path=str(tmp_path / "full" / "index.sqlite"))
    run_index(full, full=True)
    assert _content(s.index_file) == _content(full.index_file)
    _assert_sound(s.index_file)


def _assert_sound(index: Path) -> None:
    """SQLite's and FTS5's own integrity checks (FTS5's compares its index with its content)."""
    conn = connect(index)
    try:
        load_vec(conn)
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        conn.execute("INSERT INTO chunks_fts(chunks_fts) VALUES('integrity-check')")  # raises if corrupt
    finally:
        conn.close()


def test_big_change_builds_a_new_file(workspace, openai_fake, monkeypatch):
    monkeypatch.delenv("MEMORY_CORE_WRITER", raising=False)
    s = openai_settings(workspace, openai_fake)
    run_index(s)
    ino = _inode(s.index_file)
    monkeypatch.setattr(writer, "IN_PLACE_MAX_BYTES", 10)
    _edit(workspace)
    summary = run_index(s)
    assert summary.swapped and summary.published == "replaced"
    assert _inode(s.index_file) != ino


def test_a_warm_searcher_sees_the_update_and_a_reader_keeps_its_snapshot(workspace, openai_fake, monkeypatch):
    monkeypatch.delenv("MEMORY_CORE_WRITER", raising=False)
    s = openai_settings(workspace, openai_fake)
    run_index(s)
    with Searcher(s) as searcher:
        assert not [r for r in searcher.search("gateway quorum five replicas") if "late note" in r.snippet]
        # a reader in the middle of a read transaction: the commit waits for it, and it sees
        # the old state to its end
        reader = connect_reader(s.index_file)
        reader.execute("BEGIN")
        before = reader.execute("SELECT count(*) FROM chunks").fetchone()[0]
        result: dict = {}

        def run() -> None:
            result["summary"] = run_index(s)

        _edit(workspace)
        t = threading.Thread(target=run)
        t.start()
        time.sleep(0.5)
        assert t.is_alive()  # waiting to commit
        assert reader.execute("SELECT count(*) FROM chunks").fetchone()[0] == before
        assert reader.execute("SELECT count(*) FROM files WHERE path = 'memory/added-today.md'").fetchone()[0] == 0
        reader.execute("COMMIT")
        t.join(30)
        assert not t.is_alive() and result["summary"].published == "in place"
        reader.close()
        hits = searcher.search("gateway quorum five replicas")
        assert any("late note" in r.snippet for r in hits)
        assert "memory/added-today.md" in searcher.indexed_paths()
        assert "memory/2026-09-03.md" not in searcher.indexed_paths()


def test_a_failed_update_rolls_back(workspace, openai_fake, monkeypatch):
    monkeypatch.delenv("MEMORY_CORE_WRITER", raising=False)
    s = openai_settings(workspace, openai_fake)
    run_index(s)
    before = _content(s.index_file)
    ino = _inode(s.index_file)

    def broken_verify(self, *, expect_vectors):  # the run's own check finds a problem
        raise store.RunError("index verification failed: injected")

    monkeypatch.setattr(writer.IndexWriter, "verify", broken_verify)
    _edit(workspace)
    with pytest.raises(store.RunError, match="injected"):
        run_index(s)
    assert _inode(s.index_file) == ino
    assert _content(s.index_file) == before
    assert not os.path.exists(str(s.index_file) + "-journal")


def _cli_run(tmp_path: Path, workspace: Path, srv, **env: str) -> tuple[Path, dict[str, str]]:
    """A config file for `memory-core index` against the fake server, and its environment
    (in-place updates forced)."""
    cfg = tmp_path / "c.toml"
    cfg.write_text(
        f'workspace = "{workspace}"\nprovider = "openai"\nmodel = "text-embedding-3-small"\n'
        f'[remote]\nbase_url = "{srv.base_url}"\ndimensions = 64\n'
    )
    return cfg, dict(os.environ, PYTHONPATH=str(ROOT), OPENAI_API_KEY="sk-test-key-0123456789",
                     MEMORY_CORE_WRITER="inplace", **env)


KILL_IN_COMMIT = r"""
import os, signal, sys
import apsw

TARGET = os.path.realpath(sys.argv[1])


class KillFile(apsw.VFSFile):
    def __init__(self, name, flags, state):
        super().__init__("unix", name, flags)
        path = name.filename() if hasattr(name, "filename") else name
        self.kind = None
        if path and os.path.realpath(path) == TARGET:
            self.kind = "db"
        elif path and os.path.realpath(path) == TARGET + "-journal":
            self.kind = "journal"
        self.state = state

    def xSync(self, flags):
        super().xSync(flags)
        if self.kind == "journal":
            self.state["journal_synced"] = True

    def xWrite(self, data, offset):
        super().xWrite(data, offset)
        if self.kind == "db" and self.state.get("journal_synced"):
            os.kill(os.getpid(), signal.SIGKILL)  # one page of the live file overwritten


class KillVFS(apsw.VFS):
    def __init__(self):
        self.state = {}
        super().__init__("killvfs", "unix", makedefault=True)

    def xOpen(self, name, flags):
        return KillFile(name, flags, self.state)


vfs = KillVFS()
from memory_core.apps.cli import main  # noqa: E402

sys.exit(main(sys.argv[2:]))
"""


@pytest.mark.parametrize("then", ["search", "incremental", "full"])
def test_killed_in_the_middle_of_the_commit(workspace, openai_fake, tmp_path, then):
    """SIGKILL after SQLite has synced its journal and overwritten one page of the live file:
    the file alone is damaged, the hot journal restores it. A reader rolls it back and sees
    the old index; the next run (incremental or full) recovers it before anything else."""
    s = openai_settings(workspace, openai_fake)
    run_index(s)
    before = _content(s.index_file)
    _edit(workspace)
    cfg, env = _cli_run(tmp_path, workspace, openai_fake)
    script = tmp_path / "kill_in_commit.py"
    script.write_text(KILL_IN_COMMIT)
    proc = subprocess.run([sys.executable, str(script), str(s.index_file), "index", "--config", str(cfg),
                           "--engine", "local", "--no-progress"], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL, (proc.returncode, proc.stderr[-2000:])
    journal = Path(str(s.index_file) + "-journal")
    assert journal.exists() and journal.stat().st_size > 0  # a hot journal: the commit was cut short

    if then == "search":
        with Searcher(s) as searcher:
            paths = set(searcher.indexed_paths())
        assert not journal.exists()  # rolled back by the reader
        assert _content(s.index_file) == before
        assert "memory/added-today.md" not in paths and "memory/2026-09-03.md" in paths
        return
    summary = run_index(s, full=(then == "full"))
    assert summary.swapped
    assert not journal.exists()
    meta, problem = probe_index(s.index_file)
    assert problem is None
    full = openai_settings(workspace, openai_fake, index_path=str(tmp_path / "ref" / "index.sqlite"))
    run_index(full, full=True)
    assert _content(s.index_file) == _content(full.index_file)
    _assert_sound(s.index_file)


@pytest.mark.parametrize("stage", ["build", "before-swap", "after-swap"])
def test_sigkill_in_an_in_place_run(workspace, openai_fake, tmp_path, stage):
    """The named crash points in an in-place run: the index is the old one (killed before the
    commit) or the new one (after it), and the next run finishes the job."""
    s = openai_settings(workspace, openai_fake)
    run_index(s)
    before = _content(s.index_file)
    _edit(workspace)
    cfg, env = _cli_run(tmp_path, workspace, openai_fake, MEMORY_CORE_FAILPOINT=stage)
    proc = subprocess.run([sys.executable, "-m", "memory_core.apps.cli", "index", "--config", str(cfg), "--engine",
                           "local", "--no-progress"], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL, (proc.returncode, proc.stderr[-2000:])
    with Searcher(s) as searcher:
        paths = set(searcher.indexed_paths())
    assert ("memory/added-today.md" in paths) == (stage == "after-swap")
    if stage != "after-swap":
        assert _content(s.index_file) == before
    rerun = run_index(s)
    assert rerun.swapped == (stage != "after-swap")
    full = openai_settings(workspace, openai_fake, index_path=str(tmp_path / "ref" / "index.sqlite"))
    run_index(full, full=True)
    assert _content(s.index_file) == _content(full.index_file)


def test_a_warm_searcher_notices_a_commit_that_leaves_size_and_mtime_alone(workspace, openai_fake):
    """Coarse mtime ticks can hide an in-place commit from the (inode, size, mtime) check;
    SQLite's data_version does not."""
    import json

    s = openai_settings(workspace, openai_fake)
    run_index(s)
    with Searcher(s) as searcher:
        before = searcher.index_meta()
        st = os.stat(s.index_file)
        conn = connect(s.index_file)
        try:
            meta = json.loads(conn.execute("SELECT value FROM meta WHERE key = ?", (store.META_KEY,)).fetchone()[0])
            meta["built_at"] = meta["built_at"] + 1  # same length: the file keeps its size
            conn.execute("UPDATE meta SET value = ? WHERE key = ?", (json.dumps(meta), store.META_KEY))
        finally:
            conn.close()
        os.utime(s.index_file, ns=(st.st_atime_ns, st.st_mtime_ns))
        st2 = os.stat(s.index_file)
        assert (st2.st_ino, st2.st_size, st2.st_mtime_ns) == (st.st_ino, st.st_size, st.st_mtime_ns)
        assert searcher.index_meta()["built_at"] == before["built_at"] + 1


def test_the_in_place_bound_grows_with_the_index(monkeypatch):
    """A 1% change of a big index is applied in place (copying it would cost O(index)); the
    bound stops growing at 8x, which caps what one transaction holds until its commit."""
    monkeypatch.delenv("MEMORY_CORE_WRITER", raising=False)
    mib = 1024 * 1024

    def bound(live_mib: int, source_mib: float, removed: int = 0) -> bool:
        return writer.edit_in_place(full=False, live_exists=True, source_bytes=int(source_mib * mib),
                                   removed=removed, live_bytes=live_mib * mib)

    assert bound(50, 2) and not bound(50, 2.1)  # a small index: 2 MiB, as before
    assert not bound(300, 5) and bound(1000, 5)  # 2 MiB per 200 MiB of index
    assert bound(10_000, 16) and not bound(10_000, 16.1)  # at most 16 MiB
    assert not bound(50, 1, removed=1001) and bound(1000, 1, removed=4000)
    assert not writer.edit_in_place(full=True, live_exists=True, source_bytes=1, removed=0, live_bytes=10**10)


def _rids(index: Path, path: str) -> dict[tuple[int, int, str], int]:
    conn = connect(index, readonly=True)
    try:
        return {(a, b, h): rid for rid, a, b, h in conn.execute(
            "SELECT rid, start_line, end_line, hash FROM chunks WHERE path = ?", (path,))}
    finally:
        conn.close()


def test_an_edit_rewrites_the_edited_chunks_rows_not_the_files(workspace, openai_fake, tmp_path, monkeypatch):
    """Issue 25: what an in-place run writes follows the change. The unchanged chunks of an edited
    file keep their rows (rid, FTS row, vector, code); the edited chunk and the new one get new
    rows; the result is what a full build of the same sources holds, and both integrity checks pass."""
    monkeypatch.delenv("MEMORY_CORE_WRITER", raising=False)
    sections = [f"## topic {i}\n" + "".join(f"- fact {i}.{j} about subsystem {i} and its quirks.\n"
                                             for j in range(12)) for i in range(8)]
    big = workspace / "memory" / "big.md"
    big.write_text("".join(sections))
    s = openai_settings(workspace, openai_fake)
    run_index(s)
    before = _rids(s.index_file, "memory/big.md")
    assert len(before) >= 4
    n_sent = len(openai_fake.input_texts)
    # one word of topic 5 changes (same lines); a section is appended
    sections[5] = sections[5].replace("fact 5.3 about", "fact 5.3 (pelican) about")
    big.write_text("".join(sections) + "## topic 8\n- the pelican section, new today.\n")
    summary = run_index(s)
    assert summary.published == "in place"
    after = _rids(s.index_file, "memory/big.md")
    kept = {k: rid for k, rid in after.items() if before.get(k) == rid}
    new = {k: rid for k, rid in after.items() if k not in before}
    assert kept and new and len(kept) + len(new) == len(after)
    assert len(new) <= 3  # the edited chunk (and the chunk around it that overlaps it) and the new one
    assert min(new.values()) > max(before.values())  # new rows, at the end
    assert not set(before.values()) - set(kept.values()) & set(after.values())
    assert len(openai_fake.input_texts) - n_sent == len(new)  # only the changed chunks were embedded
    full = openai_settings(workspace, openai_fake, index_path=str(tmp_path / "full" / "index.sqlite"))
    run_index(full, full=True)
    assert _content(s.index_file) == _content(full.index_file)
    _assert_sound(s.index_file)
    with Searcher(s) as searcher:
        hits = searcher.search("pelican", min_score=0.0, mode="keyword")
        assert {h.path for h in hits} == {"memory/big.md"}
        line = next(i for i, t in enumerate(big.read_text().splitlines(), 1) if "(pelican)" in t)
        assert any(h.start_line <= line <= h.end_line for h in hits)  # the edited chunk's new row
        assert any(h.end_line >= len(big.read_text().splitlines()) for h in hits)  # the new section
    # the file shrinks to one chunk: the others go, FTS and codes with them
    big.write_text(sections[0])
    run_index(s)
    assert len(_rids(s.index_file, "memory/big.md")) == 1
    assert _content(s.index_file) == _content(run_index(full, full=True) and full.index_file)
    _assert_sound(s.index_file)
