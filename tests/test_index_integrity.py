"""The thirty-ninth session's integrity work (audit D of the thirty-eighth): damage confined to the
sign-bit codes is a damaged index like any other, an index a newer memory-core wrote is neither
read nor rebuilt down unless told, and a SQLite I/O error on a full disk says the disk is full.

Before: lost or short code blocks left ``status`` saying ok while the vector side found nothing,
or raised a generic SQLite error (once a numpy TypeError) on every search and every later run,
with no word of ``index --full``; a newer schema was read as current, then rebuilt down."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import apsw
import pytest

from memory_core import errors
from memory_core.errors import IndexDamagedError, IndexNewerError, classify_error
from memory_core.index.pipeline import run_index
from memory_core.query.search import Searcher
from memory_core.storage import vectors
from memory_core.storage.indexmeta import REDACTION_VERSION
from memory_core.storage.store import SCHEMA_VERSION, read_meta, write_meta
from tests.conftest import openai_settings

ROOT = Path(__file__).resolve().parent.parent
QUERY = "postgres replication lag"


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _edit(conn_path: Path, sql: str, *args: object) -> None:
    conn = apsw.Connection(str(conn_path))
    try:
        conn.execute(sql, args)
    finally:
        conn.close()


def _cli(ws: Path, srv: object, *argv: str) -> subprocess.CompletedProcess[str]:
    cfg = ws.parent / "mc.toml"
    cfg.write_text('provider = "openai"\nmodel = "text-embedding-3-small"\n[remote]\n'
                   f'api_key = "sk-test-key-0123456789"\nbase_url = "{srv.base_url}"\ndimensions = 64\n'  # type: ignore[attr-defined]
                   "backoff_initial_s = 0.01\nbackoff_max_s = 0.05\n", encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMORY_CORE_")}
    return subprocess.run([sys.executable, "-m", "memory_core.apps.cli", *argv, "-w", str(ws), "--config", str(cfg)],
                          capture_output=True, text=True, env=dict(env, PYTHONPATH=str(ROOT)), timeout=300)


@pytest.mark.parametrize("damage", ["rows lost", "block cut short", "codes NULL-length"])
def test_damaged_codes_are_a_damaged_index_and_the_next_run_rebuilds(workspace, openai_fake, damage):
    s = openai_settings(workspace, openai_fake)
    first = run_index(s)
    with Searcher(s) as searcher:
        assert searcher.search(QUERY, min_score=0, mode="vector")
    if damage == "rows lost":
        _edit(s.index_file, f"DELETE FROM {vectors.BITS_TABLE}")
    elif damage == "block cut short":
        _edit(s.index_file, f"UPDATE {vectors.BITS_TABLE} SET codes = substr(codes, 1, length(codes) - 8)")
    else:
        _edit(s.index_file, f"UPDATE {vectors.BITS_TABLE} SET codes = x''")
    with Searcher(s) as searcher:
        st = searcher.status()
        assert st.state == "damaged" and vectors.BITS_TABLE in (st.problem or "")
    with pytest.raises(IndexDamagedError, match=r"index --full"), Searcher(s) as searcher:
        searcher.search(QUERY, mode="vector")
    (workspace / "MEMORY.md").write_text((workspace / "MEMORY.md").read_text() + "\nZebras crossed the road.\n")
    again = run_index(s)  # an incremental run would have failed its verification, every time
    assert again.full and again.swapped and "damaged" in again.full_reason
    assert again.chunks_total >= first.chunks_total
    with Searcher(s) as searcher:
        assert searcher.status().state == "ok"
        assert searcher.search(QUERY, min_score=0, mode="vector")


def test_a_long_lived_reader_refuses_codes_that_do_not_fit(workspace, openai_fake):
    """A reader that loads every code (the MCP server's) met a short block as a numpy error."""
    s = openai_settings(workspace, openai_fake)
    run_index(s)
    conn = apsw.Connection(str(s.index_file))
    dims = read_meta(conn)["dims"]  # type: ignore[index]
    conn.execute(f"UPDATE {vectors.BITS_TABLE} SET codes = substr(codes, 1, length(codes) - 8)")
    with pytest.raises(vectors.CodesDamaged):
        vectors.BitIndex(conn, dims)
    with pytest.raises(vectors.CodesDamaged):
        vectors.streamed_candidates(conn, dims, __import__("numpy").ones(dims, dtype="float32"), 10)
    conn.close()


def test_a_garbage_page_in_the_codes_is_one_line_and_a_rebuild(workspace, openai_fake):
    """Through the CLI: a damaged b-tree page of the codes table (64 bytes of garbage)."""
    assert _cli(workspace, openai_fake, "index").returncode == 0
    idx = workspace / ".memory-core" / "index.sqlite"
    conn = apsw.Connection(str(idx))
    page = conn.execute(f"SELECT pageno FROM dbstat WHERE name = '{vectors.BITS_TABLE}'"
                        " AND pagetype IN ('leaf', 'internal')").fetchone()[0]
    size = conn.execute("PRAGMA page_size").fetchone()[0]
    conn.close()
    with open(idx, "r+b") as f:
        f.seek((page - 1) * size + 8)
        f.write(b"\xff" * 64)
    st = _cli(workspace, openai_fake, "status")
    assert st.returncode == 1 and "state: damaged" in st.stdout, st.stdout + st.stderr
    for mode in ("hybrid", "vector"):
        got = _cli(workspace, openai_fake, "search", QUERY, "--mode", mode)
        assert got.returncode == 1 and "Traceback" not in got.stderr, got.stderr
        assert "is damaged" in got.stderr and "index --full" in got.stderr and got.stderr.count("\n") == 1
        assert "left as it was" not in got.stderr  # a search changes nothing
    (workspace / "MEMORY.md").write_text((workspace / "MEMORY.md").read_text() + "\nZebras crossed the road.\n")
    run = _cli(workspace, openai_fake, "index")
    assert run.returncode == 0 and "live index damaged" in run.stdout + run.stderr, run.stdout + run.stderr
    assert _cli(workspace, openai_fake, "status").returncode == 0
    got = _cli(workspace, openai_fake, "search", QUERY, "--mode", "vector")
    assert got.returncode == 0 and "#L" in got.stdout


def _mark_newer(path: Path, key: str, value: int) -> None:
    conn = apsw.Connection(str(path))
    meta = read_meta(conn)
    assert meta is not None
    meta[key] = value
    write_meta(conn, meta)
    conn.close()


@pytest.mark.parametrize("key,ours", [("schema_version", SCHEMA_VERSION), ("redaction", REDACTION_VERSION)])
def test_an_index_of_a_newer_memory_core_is_not_read_nor_rebuilt_down_unless_told(workspace, openai_fake, key, ours):
    s = openai_settings(workspace, openai_fake)
    run_index(s)
    _mark_newer(s.index_file, key, ours + 1)
    before = _digest(s.index_file)
    with Searcher(s) as searcher:
        st = searcher.status()
        assert st.state == "newer" and "newer memory-core" in (st.problem or "") and st.to_dict()["problem"]
    with pytest.raises(IndexNewerError, match=r"upgrade memory-core.*index --full"), Searcher(s) as searcher:
        searcher.search(QUERY)
    (workspace / "MEMORY.md").write_text((workspace / "MEMORY.md").read_text() + "\nZebras crossed the road.\n")
    with pytest.raises(IndexNewerError):
        run_index(s)
    assert _digest(s.index_file) == before  # not rebuilt down
    told = run_index(s, full=True)
    assert told.swapped and "newer memory-core" in told.full_reason
    with Searcher(s) as searcher:
        assert searcher.status().state == "ok" and searcher.search(QUERY, min_score=0)


def test_the_cli_says_newer_with_exit_2(workspace, openai_fake):
    assert _cli(workspace, openai_fake, "index").returncode == 0
    _mark_newer(workspace / ".memory-core" / "index.sqlite", "schema_version", SCHEMA_VERSION + 1)
    st = _cli(workspace, openai_fake, "status", "--json")
    assert st.returncode == 1 and json.loads(st.stdout)["state"] == "newer"
    for argv in (("search", QUERY), ("index",)):
        got = _cli(workspace, openai_fake, *argv)
        assert got.returncode == 2 and "written by a newer memory-core" in got.stderr, got.stderr
        assert got.stderr.count("\n") == 1


def test_an_io_error_on_a_nearly_full_disk_says_the_disk_is_full(tmp_path, monkeypatch):
    """SQLite reports a write that ran out of room while it grew a WAL or -shm file as a plain
    I/O error (the audit: 16-24 KB free on a tmpfs). It is read against the free space where the
    command's files are: the threshold is moved here, as a test cannot fill a disk."""
    errors.note_folders(tmp_path / "not-yet" / "index-folder", tmp_path)
    exc = apsw.IOError("disk I/O error")
    monkeypatch.setattr(errors, "FULL_BELOW", 1 << 62)  # every disk counts as nearly full
    said = str(classify_error(exc))
    assert said.startswith("the disk is full:") and "KiB free where" in said and "left as it was" in said
    monkeypatch.setattr(errors, "FULL_BELOW", 0)
    assert str(classify_error(exc)).startswith("disk I/O error (SQLite")
    assert "left as it was" not in str(classify_error(exc, changes=False))
    damaged = classify_error(apsw.CorruptError("database disk image is malformed"))
    assert isinstance(damaged, IndexDamagedError) and "index --full" in str(damaged)


def _commit_beside(path: Path) -> bool:
    """A consistent in-place commit by another connection: one more code and one more vector in
    the meta's counts (what an in-place run's commit changes together). False: the file was locked
    by a reader's transaction, so it could not commit (a real writer waits for it)."""
    other = apsw.Connection(str(path))
    other.setbusytimeout(0)
    try:
        with other:
            meta = read_meta(other)
            assert meta is not None
            meta["counts"]["vectors"] += 1
            other.execute(f"UPDATE {vectors.BITS_TABLE} SET live = live + 1 WHERE block ="
                          f" (SELECT min(block) FROM {vectors.BITS_TABLE})")
            write_meta(other, meta)
        return True
    except apsw.BusyError:
        return False
    finally:
        other.close()


@pytest.mark.parametrize("reader", ["probe", "searcher"])
def test_a_commit_between_the_meta_and_the_codes_is_not_damage(workspace, openai_fake, monkeypatch, reader):
    """Audit G (the thirty-ninth session): the probe and a reader's opening read the meta, then the
    codes, in separate statements; an in-place update committing between them made a healthy index
    read as damaged (59 of 22,295 probes; a long-lived searcher's search failed with the rebuild
    hint). Here the commit is made exactly there, on every opening."""
    from memory_core.query import retrieval
    from memory_core.storage import store

    s = openai_settings(workspace, openai_fake)
    run_index(s)
    real = vectors.codes_problem
    committed: list[bool] = []

    def between(conn, meta):  # type: ignore[no-untyped-def]
        committed.append(_commit_beside(s.index_file))
        return real(conn, meta)

    monkeypatch.setattr(vectors, "codes_problem", between)
    if reader == "probe":
        assert store.probe_index(s.index_file)[1] is None
    else:
        retrieval._Index(s.index_file).close()
    assert committed == [False]  # the reader held one snapshot: the writer waits for it
    assert _commit_beside(s.index_file)  # and commits once the reader is done
