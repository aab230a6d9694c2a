"""POSIX record locks (which SQLite takes) belong to a process and a file: closing ANY descriptor of
the file drops every lock the process holds on it, also a live connection's in another thread.
memory-core's own descriptors of its SQLite files (the index header read, the cache's safe create
and truncation check) go through one registry (:mod:`memory_core.storage.openfiles`) that never
closes one while a connection of this process is on that file (docs/reliability.md N7, N8, BP8).
Real SQLite, another process as the writer."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from memory_core.config import load_settings
from memory_core.index.pipeline import run_index
from memory_core.storage.store import check_index_target, connect_reader

# a writer in another process that never waits: "busy" while a reader of ours holds its SHARED lock
WRITE = ("import apsw, sys\nc = apsw.Connection(sys.argv[1])\nc.set_busy_timeout(0)\ntry:\n"
         "    c.execute('BEGIN IMMEDIATE'); c.execute('UPDATE meta SET value = value'); c.execute('COMMIT')\n"
         "    print('committed')\nexcept apsw.BusyError:\n    print('busy')\n")


def _write_elsewhere(index: Path) -> str:
    got = subprocess.run([sys.executable, "-c", WRITE, str(index)], capture_output=True, text=True, timeout=60)
    return got.stdout.strip() or got.stderr


def _index(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    (ws / "MEMORY.md").write_text("# Memory\n\nThe walrus budget is 9,100 EUR.\n")
    settings = load_settings(None, {"workspace": str(ws), "provider": "none"})
    run_index(settings)
    return Path(settings.index_file)


def _our_descriptors(path: Path) -> int:
    """How many of this process's descriptors are open on ``path``'s file (Linux: /proc/self/fd)."""
    st = os.stat(path)
    n = 0
    for name in os.listdir("/proc/self/fd"):
        try:
            fst = os.stat(f"/proc/self/fd/{name}")
        except OSError:
            continue
        n += (fst.st_dev, fst.st_ino) == (st.st_dev, st.st_ino)
    return n


def test_n8_a_search_keeps_its_lock_while_the_process_reads_many_other_indexes(tmp_path: Path) -> None:
    """The header read kept one descriptor per index path (N7) but, past 64 paths, closed the least
    recently read one with ``os.close`` even while a connection of this process was reading that
    file (a server serving many agents' indexes): that dropped the reader's SHARED lock, and a writer
    in another process committed under it instead of waiting."""
    index = _index(tmp_path)
    others = []
    for i in range(70):  # more indexes than the kept descriptors' bound
        other = tmp_path / f"agent{i}" / "index.sqlite"
        other.parent.mkdir()
        shutil.copyfile(index, other)
        others.append(other)
    reader = connect_reader(index)
    try:
        reader.execute("BEGIN")
        assert reader.execute("SELECT count(*) FROM chunks").fetchone()[0] == 1  # a search mid-read
        assert check_index_target(index)  # its freshness probe: the header read through a kept descriptor
        for other in others:  # meanwhile other agents' searches check their indexes
            assert check_index_target(other)
        assert _write_elsewhere(index) == "busy"  # before: "committed" under the live reader
        reader.execute("COMMIT")
    finally:
        reader.close()
    assert _write_elsewhere(index) == "committed"


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts descriptors through /proc")
def test_n8_a_kept_descriptor_is_closed_with_the_last_connection_and_none_is_kept_without_one(
        tmp_path: Path) -> None:
    index = _index(tmp_path)
    assert check_index_target(index) and _our_descriptors(index) == 0  # no connection: nothing kept
    first, second = connect_reader(index), connect_reader(index)  # each reads the header first
    assert check_index_target(index)
    assert _our_descriptors(index) == 3  # SQLite's two and ours
    first.close()
    assert check_index_target(index) and _our_descriptors(index) == 2  # one connection left: ours reused
    second.close()
    assert _our_descriptors(index) == 0  # the last one closed: so is ours


def test_n8_a_replaced_index_keeps_the_old_files_reader_locked_until_it_closes(tmp_path: Path) -> None:
    """A rebuild renames a new file over the index while a search of this process still reads the old
    one: the old file's descriptor is not closed under that reader (SQLite's journal goes by path, so
    another process's reader of the old file could roll the new file's journal into it once our
    SHARED lock were gone); it is closed with the reader."""
    index = _index(tmp_path)
    old, new = tmp_path / "old.sqlite", tmp_path / "new.sqlite"
    os.link(index, old)  # a name for the old file, to reach it from another process
    shutil.copyfile(index, new)  # (before the reader: the copy opens and closes the old file)
    reader = connect_reader(index)
    try:
        reader.execute("BEGIN")
        assert reader.execute("SELECT count(*) FROM chunks").fetchone()[0] == 1
        os.replace(new, index)  # a rebuild publishes
        assert check_index_target(index)  # a probe sees the new file: opens its header
        assert _write_elsewhere(old) == "busy"
        reader.execute("COMMIT")
    finally:
        reader.close()
    assert _write_elsewhere(old) == "committed"


def test_n8_copying_the_live_index_keeps_a_searchs_lock(tmp_path: Path) -> None:
    """A large incremental run copies the live index (``copy_private``); in a process that also serves
    searches (the MCP server, ``watch``) the copy's open-and-close of the file dropped a search's
    SHARED lock."""
    from memory_core.storage.store import copy_private

    index = _index(tmp_path)
    reader = connect_reader(index)
    try:
        reader.execute("BEGIN")
        assert reader.execute("SELECT count(*) FROM chunks").fetchone()[0] == 1
        copy_private(index, tmp_path / "copy.sqlite")
        assert _write_elsewhere(index) == "busy"
        reader.execute("COMMIT")
    finally:
        reader.close()
    assert (tmp_path / "copy.sqlite").read_bytes() == index.read_bytes()  # (not above: this opens and closes it)
