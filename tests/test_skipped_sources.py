"""Source files every run skips with a warning (a UTF-16 note: "looks binary (NUL bytes)"; a note
over the size limit; an unreadable one) are remembered with their stat in the index's meta, so an
unchanged workspace is not dirty because of them: no `stale: true` answers, no search-triggered
run, `status` not dirty for ever. They are looked at again (and warned about again) when they
change; incremental, hinted and full runs keep the record right. Real SQLite, real files."""

from __future__ import annotations

import builtins
import contextlib
import errno
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn

import pytest

from memory_core.apps.mcp_server import MemoryTools
from memory_core.config import Settings, load_settings
from memory_core.index.pipeline import run_index
from memory_core.index.stages import MAX_FILE_BYTES
from memory_core.query.search import Searcher
from memory_core.sources.freshness import SKIPPED_KEY, dirty_state
from memory_core.storage.store import connect, probe_index
from tests.conftest import forget_meta_key

UTF16 = "# Groceries\n\nmilk, eggs, capybara chow\n".encode("utf-16")


def keyword_settings(ws: Path, **sync: Any) -> Settings:
    return load_settings(None, {"workspace": str(ws), "provider": "none", "sync": sync})


def skipped(s: Settings) -> dict[str, Any]:
    meta = probe_index(s.index_file)[0] or {}
    return dict(meta.get(SKIPPED_KEY) or {})


def indexed_paths(s: Settings) -> set[str]:
    conn = connect(s.index_file, readonly=True)
    try:
        return {r[0] for r in conn.execute("SELECT path FROM files")}
    finally:
        conn.close()


def with_skipped_files(ws: Path) -> tuple[Path, Path]:
    mem = ws / "memory"
    (mem / "windows-note.md").write_bytes(UTF16)
    big = mem / "huge.md"
    with big.open("wb") as fh:  # sparse: over the limit without writing 64 MiB
        fh.truncate(MAX_FILE_BYTES + 1024 * 1024)
    return mem / "windows-note.md", big


def test_a_skipped_file_does_not_keep_an_unchanged_workspace_dirty(workspace: Path) -> None:
    note, big = with_skipped_files(workspace)
    s = keyword_settings(workspace)
    first = run_index(s)
    joined = "\n".join(first.warnings)
    assert "windows-note.md looks binary (NUL bytes); skipped" in joined and "huge.md is 65 MiB" in joined
    assert first.files_skipped == 2
    # not indexed (searches and memory_get never see them), but remembered as skipped
    assert not {"memory/windows-note.md", "memory/huge.md"} & indexed_paths(s)
    d = dirty_state(s)
    assert not d.dirty and d.reason == ""  # was: dirty for ever, "2 new"
    assert {p: k[3] for p, k in skipped(s).items()} == {"memory/windows-note.md": "binary",
                                                          "memory/huge.md": "too-large"}

    again = run_index(s)  # nothing to do: the skipped files are not read (nor warned about) again
    assert not again.swapped and again.files_unchanged == again.files_scanned == first.files_scanned
    assert again.files_new == again.files_changed == 0 and not again.warnings
    hinted = run_index(s, only_paths=[str(note)])  # a watcher's event for it, unchanged: no run either
    assert hinted.hinted and not hinted.swapped and hinted.files_unchanged >= 1 and not hinted.warnings

    # a search on the unchanged workspace: not stale, and no reindex run started
    tools = MemoryTools(keyword_settings(workspace, on_search=True, on_session_start=False, watch=False))
    try:
        out = tools.search({"query": "heron", "min_score": 0})
        assert out["stale"] is False and tools.sync.wait_idle() and tools.sync.runs == []
        assert tools.status({})["dirty"] is False
    finally:
        tools.close()

    # the note changes, still UTF-16: dirty (changed), the run reads it and warns again
    note.write_bytes(UTF16 + "more\n".encode("utf-16"))
    assert dirty_state(s).changed == ["memory/windows-note.md"]
    changed = run_index(s)
    assert changed.files_changed == 1 and changed.files_new == 0 and changed.files_skipped == 1
    assert any("windows-note.md looks binary" in w for w in changed.warnings)
    assert not dirty_state(s).dirty and skipped(s)["memory/windows-note.md"][2] == note.stat().st_size
    assert "memory/huge.md" in skipped(s)  # carried by the incremental run

    # saved as UTF-8 at last: indexed and found; no longer a skip
    note.write_text("# Groceries\n\nmilk, eggs, capybara chow\n")
    fixed = run_index(s)
    assert fixed.files_changed == 1 and fixed.files_skipped == 0 and not fixed.warnings
    assert "memory/windows-note.md" in indexed_paths(s) and list(skipped(s)) == ["memory/huge.md"]
    with Searcher(s) as searcher:
        assert searcher.search("capybara chow", min_score=0)[0].path == "memory/windows-note.md"

    # a full rebuild looks at every file again (and warns), counts the skipped one unchanged
    full = run_index(s, full=True)
    assert full.full and full.files_unchanged == full.files_scanned and full.files_skipped == 1
    assert any("huge.md is 65 MiB" in w for w in full.warnings) and list(skipped(s)) == ["memory/huge.md"]
    assert not dirty_state(s).dirty

    # gone: neither dirty nor "removed" (it never was indexed); the next run that writes forgets it
    big.unlink()
    assert not dirty_state(s).dirty
    (workspace / "memory" / "new.md").write_text("# New\n\nthe heron rota\n")
    after = run_index(s)
    assert after.files_new == 1 and after.files_removed == 0 and skipped(s) == {}


def test_an_index_written_before_skips_were_recorded_learns_them(workspace: Path) -> None:
    """An index whose meta has no skipped files (written before this) is read as before: the
    skipped note counts as new once; the next run records it."""
    with_skipped_files(workspace)
    s = keyword_settings(workspace)
    run_index(s)
    forget_meta_key(s.index_file, SKIPPED_KEY)
    assert dirty_state(s).new == ["memory/huge.md", "memory/windows-note.md"]
    run_index(s)
    assert not dirty_state(s).dirty and len(skipped(s)) == 2


@contextlib.contextmanager
def unreadable(path: Path) -> Iterator[None]:
    """``path`` cannot be read inside the block: mode 000 for a normal user; for root (whom no
    mode stops, as in CI) opening it fails with EACCES at the OS calls, ``open``/``os.open``, and
    ``os.access`` says so. Its size and mtime stay as they were either way."""
    if os.geteuid() != 0:
        path.chmod(0)
        try:
            yield
        finally:
            path.chmod(0o644)
        return
    target = os.path.realpath(path)
    real_open, real_os_open, real_access = builtins.open, os.open, os.access

    def denied(p: object) -> bool:
        return isinstance(p, (str, bytes, os.PathLike)) and os.path.realpath(os.fsdecode(p)) == target

    def fail(p: object) -> NoReturn:
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), os.fsdecode(p))  # type: ignore[arg-type]

    def open_(file: Any, *a: Any, **k: Any) -> Any:
        return fail(file) if denied(file) else real_open(file, *a, **k)

    def os_open(p: Any, *a: Any, **k: Any) -> int:
        return fail(p) if denied(p) else real_os_open(p, *a, **k)

    def access(p: Any, mode: int, *a: Any, **k: Any) -> bool:
        return False if denied(p) and mode & os.R_OK else real_access(p, mode, *a, **k)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(builtins, "open", open_)
        mp.setattr(os, "open", os_open)
        mp.setattr(os, "access", access)
        yield


def test_an_unreadable_file_counts_again_once_it_can_be_read(workspace: Path) -> None:
    locked = workspace / "memory" / "locked.md"
    locked.write_text("# Locked\n\nthe otter key\n")
    s = keyword_settings(workspace)
    with unreadable(locked):
        first = run_index(s)
        assert any("cannot read memory/locked.md" in w for w in first.warnings)
        assert skipped(s)["memory/locked.md"][3] == "unreadable" and not dirty_state(s).dirty
    # readable again: neither size nor mtime changed
    assert dirty_state(s).changed == ["memory/locked.md"]
    run_index(s)
    assert "memory/locked.md" in indexed_paths(s) and not dirty_state(s).dirty


def test_an_indexed_note_that_changed_and_cannot_be_read_keeps_its_rows_and_is_not_dirty_for_ever(
        workspace: Path) -> None:
    """Leftover of the thirteenth session: an indexed note that changes and then cannot be read
    kept its rows (good) but stayed "changed" for freshness, so every search started a run and
    every answer said stale. Its state is now remembered like a skipped file's, until it changes
    again or can be read; then the new text is indexed."""
    note = workspace / "memory" / "otters.md"
    note.write_text("# Otters\n\nthe otter key is under the blue pot\n")
    s = keyword_settings(workspace)
    run_index(s)
    with Searcher(s) as se:
        assert any("blue pot" in r.snippet for r in se.search("otter key", min_score=0))
    note.write_text("# Otters\n\nthe otter key moved to the red shed, and the spare is gone\n")
    with unreadable(note):
        assert dirty_state(s).changed == ["memory/otters.md"]
        run = run_index(s)
        assert any("cannot read memory/otters.md" in w and "keeping its indexed rows" in w for w in run.warnings)
        assert "memory/otters.md" in indexed_paths(s)  # nothing lost
        state = dirty_state(s)
        assert not state.dirty, state  # before: changed ["memory/otters.md"] after every run
        with Searcher(s) as se:
            assert any("blue pot" in r.snippet for r in se.search("otter key", min_score=0))
    assert dirty_state(s).changed == ["memory/otters.md"]  # readable again: a run would read it
    run_index(s)
    assert not dirty_state(s).dirty
    with Searcher(s) as se:
        hits = se.search("otter key", min_score=0)
        assert any("red shed" in r.snippet for r in hits) and not any("blue pot" in r.snippet for r in hits)
