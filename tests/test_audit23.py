"""The twenty-third session's outside audit: what a removed note leaves in the index file, agents
merged when no agent is named, indexes kept in one folder. Each test fails on the code before its fix."""

from __future__ import annotations

from pathlib import Path

from memory_core.config import load_settings
from memory_core.index.pipeline import run_index


def _none(ws: Path, **kw: object) -> object:
    return load_settings(None, {"workspace": str(ws), "provider": "none", **kw})


def test_a_removed_or_rewritten_notes_text_is_not_left_in_the_index_files_bytes(tmp_path: Path) -> None:
    """F8: after an in-place run removed a note, its text was still in the index file's free
    pages (no ``secure_delete``): anyone who could read the file read what was deleted."""
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    for i in range(30):
        (ws / "memory" / f"n{i:02d}.md").write_text(f"# note {i}\n\nThe heron waits by pond {i}.\n" * 20)
    (ws / "memory" / "secret.md").write_text("Quetzalcoatl protocol: the gorgonzola vault opens at dawn.\n")
    (ws / "memory" / "edited.md").write_text("The wifi code is zebracorn-lanternfish.\n")
    s = _none(ws)
    run_index(s)
    index = Path(s.index_file)  # type: ignore[attr-defined]
    assert b"gorgonzola" in index.read_bytes() and b"zebracorn" in index.read_bytes()
    (ws / "memory" / "secret.md").unlink()
    (ws / "memory" / "edited.md").write_text("The wifi code is written on the router.\n")
    summary = run_index(s)
    assert summary.published == "in place", summary.published  # the case that left them
    data = index.read_bytes()
    # the chunks' text (FTS5's contentless segments keep single stemmed tokens until they merge)
    assert b"the gorgonzola vault opens" not in data and b"Quetzalcoatl protocol" not in data
    assert b"zebracorn-lanternfish" not in data
    assert b"written on the router" in data


def test_indexes_kept_in_one_folder_do_not_remove_each_others_work_folders(tmp_path: Path) -> None:
    """F1: two indexes in one folder shared ``.memory-core-work``; a run of one removed the other's
    live work folder as stale (it holds only its own index's lock), and that run failed after it
    had submitted Batch API jobs. Each index keeps its own; the layout before's leftovers go once
    they are a day old."""
    import os
    import time

    from memory_core.index.stages import work_root

    folder = tmp_path / "indexes"
    folder.mkdir()
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    (ws / "memory" / "a.md").write_text("The heron waits by the pond.\n")
    a, b = folder / "a.sqlite", folder / "b.sqlite"
    live = work_root(b) / "20261130T101010-abc123" / "batch"
    live.mkdir(parents=True)
    (live / "jobs.hashes").write_text("b's run")
    legacy_old = folder / ".memory-core-work" / "20200101T000000-abcdef"
    legacy_new = folder / ".memory-core-work" / "20261130T090000-fedcba"
    for d in (legacy_old, legacy_new):
        d.mkdir(parents=True)
    day_ago = time.time() - 2 * 86_400
    os.utime(legacy_old, (day_ago, day_ago))
    run_index(_none(ws, index_path=str(a)))
    assert (live / "jobs.hashes").read_text() == "b's run"
    assert not legacy_old.exists() and legacy_new.exists()
    assert work_root(a) != work_root(b) and work_root(a).parent == folder / ".memory-core-work"
