import os
from pathlib import Path

import pytest

from memory_core.config import load_settings
from memory_core.errors import PathError
from memory_core.sources.discovery import discover_files, resolve_indexed_path


def make_ws(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    (ws / "memory" / "deep" / "er").mkdir(parents=True)
    (ws / "MEMORY.md").write_text("# top\n")
    (ws / "memory" / "2026-01-02.md").write_text("day\n")
    (ws / "memory" / "deep" / "er" / "note.md").write_text("deep\n")
    (ws / "memory" / "ignored.txt").write_text("not md\n")
    (ws / "other.md").write_text("not a source\n")
    return ws


def paths(settings) -> list[str]:
    return [f.path for f in discover_files(settings).files]


def test_memory_sources_sorted_and_recursive(tmp_path):
    ws = make_ws(tmp_path)
    s = load_settings(None, {"workspace": str(ws)})
    assert paths(s) == ["MEMORY.md", "memory/2026-01-02.md", "memory/deep/er/note.md"]
    f = discover_files(s).files[0]
    assert f.size == 6 and f.source == "memory" and f.mtime_ms > 0 and f.abs_path == str(ws / "MEMORY.md")


def test_symlinks_are_never_followed(tmp_path):
    ws = make_ws(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.md").write_text("secret\n")
    os.symlink(outside, ws / "memory" / "linkdir")
    os.symlink(outside / "secret.md", ws / "memory" / "link.md")
    os.symlink(ws / "memory", ws / "memory" / "deep" / "loop")  # a loop
    s = load_settings(None, {"workspace": str(ws)})
    assert paths(s) == ["MEMORY.md", "memory/2026-01-02.md", "memory/deep/er/note.md"]


def test_a_symlink_inside_memory_or_sessions_is_skipped_with_a_warning(tmp_path):
    """A note, folder or transcript linked in was skipped without a word (twenty-second session's
    leftovers): each now names itself in the run's warnings; other files and links do not."""
    ws = make_ws(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.md").write_text("secret\n")
    (outside / "t.jsonl").write_text("")
    (outside / "x.txt").write_text("x\n")
    os.symlink(outside, ws / "memory" / "linkdir")
    os.symlink(outside / "secret.md", ws / "memory" / "link.md")
    os.symlink(outside / "x.txt", ws / "memory" / "other.txt")  # not a note: no word
    os.symlink(tmp_path / "nowhere.md", ws / "memory" / "dangling.md")
    (ws / "sessions").mkdir()
    os.symlink(outside / "t.jsonl", ws / "sessions" / "linked.jsonl")
    s = load_settings(None, {"workspace": str(ws), "sources": ["memory", "sessions"]})
    d = discover_files(s)
    assert [f.path for f in d.files] == ["MEMORY.md", "memory/2026-01-02.md", "memory/deep/er/note.md"]
    linked = sorted(w.split(":")[0] for w in d.warnings if "a symlink; symlinks are not followed" in w)
    assert linked == sorted(f"skipped {ws / p}" for p in (
        "memory/linkdir", "memory/link.md", "memory/dangling.md", "sessions/linked.jsonl")), d.warnings
    assert not any("other.txt" in w for w in d.warnings)


def test_a_symlinked_memory_folder_or_memory_md_is_not_followed_and_says_so(tmp_path):
    """`memory/` (or MEMORY.md) a symlink, as dotfiles and sync setups make it: nothing of it was
    indexed and nothing said why (helper audit, seventeenth session). Still not followed; a
    warning says so and what to do."""
    notes = tmp_path / "real-notes"
    notes.mkdir()
    (notes / "a.md").write_text("a\n")
    (notes / "MEMORY.md").write_text("top\n")
    ws = tmp_path / "ws"
    ws.mkdir()
    os.symlink(notes, ws / "memory")
    os.symlink(notes / "MEMORY.md", ws / "MEMORY.md")
    d = discover_files(load_settings(None, {"workspace": str(ws)}))
    assert d.files == []
    assert any(w.startswith("memory/ is a symlink") and "extra_paths" in w for w in d.warnings), d.warnings
    assert any(w.startswith("MEMORY.md is a symlink") for w in d.warnings), d.warnings
    # a real folder and file: no such warning
    assert not any("symlink" in w for w in discover_files(load_settings(None, {"workspace": str(make_ws(tmp_path / "plain"))})).warnings)


def test_extra_paths_files_dirs_and_duplicates(tmp_path):
    ws = make_ws(tmp_path)
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "a.md").write_text("a\n")
    (notes / "b.txt").write_text("b\n")
    s = load_settings(None, {"workspace": str(ws), "extra_paths": [
        str(notes), "memory/2026-01-02.md", "other.md", str(notes / "a.md"), "missing.md", str(notes / "b.txt"),
    ]})
    d = discover_files(s)
    got = [f.path for f in d.files]
    assert got.count("memory/2026-01-02.md") == 1  # duplicate by real path
    assert "other.md" in got
    assert str((notes / "a.md").as_posix()) in got and got.count(str(notes / "a.md")) == 1
    assert not any(p.endswith("b.txt") for p in got)
    assert any("missing.md" in w for w in d.warnings)
    assert any("b.txt" in w for w in d.warnings)


def test_sessions_dir_not_recursive(tmp_path):
    ws = make_ws(tmp_path)
    sd = ws / "sessions"
    (sd / "sub").mkdir(parents=True)
    (sd / "one.jsonl").write_text("{}\n")
    (sd / "sub" / "two.jsonl").write_text("{}\n")
    (sd / "notes.md").write_text("x\n")
    s = load_settings(None, {"workspace": str(ws), "sources": ["memory", "sessions"]})
    assert "sessions/one.jsonl" in paths(s)
    assert not any("two.jsonl" in p for p in paths(s))


def test_missing_workspace_is_a_clear_error(tmp_path):
    s = load_settings(None, {"workspace": str(tmp_path / "nope")})
    with pytest.raises(PathError, match="workspace not found"):
        discover_files(s)


def test_resolve_indexed_path_refuses_escapes(tmp_path):
    ws = make_ws(tmp_path)
    (tmp_path / "outside.md").write_text("x\n")
    os.symlink(tmp_path / "outside.md", ws / "memory" / "evil.md")
    s = load_settings(None, {"workspace": str(ws)})
    assert resolve_indexed_path(s, "memory/2026-01-02.md") == str(ws / "memory" / "2026-01-02.md")
    for bad in ["../outside.md", "memory/../../outside.md", str(tmp_path / "outside.md"), "memory/evil.md",
                "other.md", "/etc/passwd", "", "memory/\x00.md"]:
        with pytest.raises(PathError):
            resolve_indexed_path(s, bad)
