"""``[sessions] recursive = true``: every ``*.jsonl`` below the sessions folder is a transcript,
indexed as ``sessions/<path below the folder>`` (Codex CLI keeps its rollouts in
``~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl``, and an index of that folder was empty). Off (the
default, OpenClaw's flat folder) nothing changes, and a folder holding transcripts only in
subfolders says how to index them. Keyword-only indexes (provider none), real runs and readers."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from memory_core.apps.cli import main
from memory_core.config import Settings, load_settings
from memory_core.errors import PathError
from memory_core.index.pipeline import run_index
from memory_core.query.search import Searcher
from memory_core.runtime.resolve import resolve_settings
from memory_core.runtime.watching import SourceFilter
from memory_core.sources.discovery import discover_changed, resolve_indexed_path
from memory_core.storage.store import connect
from tests.test_hinted import SpyRunner, next_run
from tests.test_transcript_forms import CODEX, _write
from tests.test_watch import started_watcher

DAY = Path("2026") / "11" / "21"
NESTED = f"sessions/{DAY.as_posix()}/rollout-a.jsonl"
QUERY = "which node pool is billing pinned to"


def said(text: str, when: str = "2026-11-22T09:00:00.000Z") -> list[dict[str, Any]]:
    """A Codex rollout holding one user message."""
    return [{"timestamp": when, "type": "session_meta", "payload": {"id": "s2", "cwd": "/src"}},
            {"timestamp": when, "type": "response_item", "payload": {
                "type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}}]


@pytest.fixture
def codex(tmp_path: Path) -> Path:
    """A Codex CLI sessions folder (outside the workspace) holding one rollout in a dated folder."""
    sessions = tmp_path / "home" / ".codex" / "sessions"
    _write(sessions / DAY / "rollout-a.jsonl", CODEX)
    (tmp_path / "ws").mkdir()
    return sessions


def settings_of(tmp_path: Path, sessions: Path, recursive: bool | None) -> Settings:
    told: dict[str, Any] = {"dir": str(sessions), "delta_bytes": 1, "delta_messages": 1}
    if recursive is not None:
        told["recursive"] = recursive
    return load_settings(None, {"workspace": str(tmp_path / "ws"), "provider": "none", "sources": ["sessions"],
                                "sessions": told})


def files(s: Settings) -> dict[str, tuple[Any, ...]]:
    conn = connect(s.index_file, readonly=True)
    try:
        return {r[0]: tuple(r[1:]) for r in conn.execute("SELECT path, source, hash, mtime, size FROM files")}
    finally:
        conn.close()


def chunks(s: Settings, path: str) -> list[tuple[Any, ...]]:
    conn = connect(s.index_file, readonly=True)
    try:
        return sorted(conn.execute("SELECT id, start_line, end_line, hash, text FROM chunks WHERE path = ?", (path,)))
    finally:
        conn.close()


def hint_of(warnings: list[str]) -> list[str]:
    return [w for w in warnings if "holds transcripts only in subfolders" in w]


def test_a_dated_tree_is_indexed_found_and_read(tmp_path: Path, codex: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    s = settings_of(tmp_path, codex, True)
    summary = run_index(s)
    assert not summary.warnings, summary.warnings
    assert list(files(s)) == [NESTED] and summary.chunks_total == 1
    with Searcher(s) as searcher:
        hits = searcher.search(QUERY, max_results=3)
        assert hits and hits[0].path == NESTED and hits[0].citation.startswith(NESTED + "#L")
        got = searcher.read_file(hits[0].citation)
    assert "Pin the billing service to node pool blue" in got.text
    # a reader told nothing (no config file: only the index) reads it too: the index records the setting
    assert resolve_settings({"workspace": str(tmp_path / "ws")}).settings.sessions.recursive is True
    capsys.readouterr()
    assert main(["get", "-w", str(tmp_path / "ws"), f"{NESTED}#L3"]) == 0
    assert "node pool blue" in capsys.readouterr().out


def test_off_indexes_no_subfolder_and_says_how(tmp_path: Path, codex: Path) -> None:
    s = settings_of(tmp_path, codex, None)  # the default
    first, again = run_index(s), run_index(s)
    assert files(s) == {} and first.chunks_total == 0
    for summary in (first, again):  # the full scan and the scan against the recorded stats: once each
        assert hint_of(summary.warnings) == [
            f"sessions folder {codex} holds transcripts only in subfolders ({DAY.as_posix()}/rollout-a.jsonl);"
            " set [sessions] recursive = true to index them"], summary.warnings
    # OpenClaw's shape, transcripts at the top: not a word
    _write(codex / "top.jsonl", said("the heron count is 12"))
    third = run_index(s)
    assert list(files(s)) == ["sessions/top.jsonl"] and not hint_of(third.warnings), third.warnings
    # a nested path is no transcript of an index read flat, even if asked
    with pytest.raises(PathError, match="recursive = true"):
        resolve_indexed_path(s, NESTED)


def test_turning_it_on_and_off_adds_and_removes_the_nested_files(tmp_path: Path, codex: Path) -> None:
    """No rebuild either way: the next run finds the nested transcripts come or go; a transcript at
    the top keeps its path and its rows."""
    _write(codex / "top.jsonl", said("the heron count is 12"))
    off = settings_of(tmp_path, codex, False)
    run_index(off)
    before = files(off), chunks(off, "sessions/top.jsonl")
    assert list(before[0]) == ["sessions/top.jsonl"]
    assert not run_index(off).swapped  # nothing to do: an index of the flat folder is as it was

    on = settings_of(tmp_path, codex, True)
    turned_on = run_index(on)
    assert not turned_on.full and (turned_on.files_new, turned_on.files_unchanged) == (1, 1)
    assert set(files(on)) == {"sessions/top.jsonl", NESTED}
    assert files(on)["sessions/top.jsonl"] == before[0]["sessions/top.jsonl"]
    assert chunks(on, "sessions/top.jsonl") == before[1]

    turned_off = run_index(off)
    assert not turned_off.full and turned_off.files_removed == 1
    assert (files(off), chunks(off, "sessions/top.jsonl")) == before
    assert chunks(off, NESTED) == []
    with Searcher(off) as searcher:
        assert searcher.search(QUERY, max_results=3, min_score=0) == []


def test_symlinks_and_bad_names_below_are_skipped_and_said(tmp_path: Path, codex: Path) -> None:
    outside = tmp_path / "outside"
    _write(outside / "rollout-x.jsonl", said("the secret otter plan"))
    os.symlink(outside, codex / "2026" / "linked")
    os.symlink(outside / "rollout-x.jsonl", codex / DAY / "rollout-link.jsonl")
    bad = os.path.join(os.fsencode(codex / "2026"), b"caf\xe9")
    os.mkdir(bad)
    _write(Path(os.fsdecode(bad)) / "rollout-y.jsonl", said("the otter in a badly named folder"))
    s = settings_of(tmp_path, codex, True)
    summary = run_index(s)
    assert list(files(s)) == [NESTED]
    text = "\n".join(summary.warnings)
    assert f"skipped {codex / '2026' / 'linked'}: a symlink; symlinks are not followed" in text
    assert f"skipped {codex / DAY / 'rollout-link.jsonl'}: a symlink" in text
    assert "caf\\xe9: its name is not valid UTF-8" in text
    with Searcher(s) as searcher:
        assert searcher.search("otter", max_results=3, min_score=0) == []


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a folder of mode 000")
def test_an_unreadable_subfolder_is_said(tmp_path: Path, codex: Path) -> None:
    locked = codex / "2026" / "12"
    _write(locked / "rollout-z.jsonl", said("the locked otter"))
    locked.chmod(0)
    try:
        summary = run_index(settings_of(tmp_path, codex, True))
    finally:
        locked.chmod(0o755)
    assert f"skipped unreadable directory {locked}" in summary.warnings
    assert summary.files_new == 1  # the readable rollout still is


def test_get_reads_a_nested_transcript_and_refuses_escapes(tmp_path: Path, codex: Path) -> None:
    _write(tmp_path / "home" / ".codex" / "secret.jsonl", said("the hidden otter"))
    s = settings_of(tmp_path, codex, True)
    run_index(s)
    assert resolve_indexed_path(s, NESTED) == str((codex / DAY / "rollout-a.jsonl").resolve())
    for bad in ("sessions/../secret.jsonl", f"sessions/{DAY.as_posix()}/../../../../secret.jsonl",
                "sessions/2026//11/21/rollout-a.jsonl", "sessions/./2026/11/21/rollout-a.jsonl", "sessions/2026/"):
        with pytest.raises(PathError):
            resolve_indexed_path(s, bad)
    with Searcher(s) as searcher:
        assert "node pool blue" in searcher.read_file(NESTED).text
        with pytest.raises(PathError):
            searcher.read_file("sessions/../secret.jsonl")
        # a folder on the way swapped for a symlink after indexing: not followed
        (codex / "2026").rename(codex / "2026-real")
        os.symlink(codex / "2026-real", codex / "2026")
        with pytest.raises(PathError, match="symlink"):
            searcher.read_file(NESTED)


def test_an_incremental_run_finds_a_new_dated_folder(tmp_path: Path, codex: Path) -> None:
    s = settings_of(tmp_path, codex, True)
    run_index(s)
    new = Path("2026") / "11" / "22" / "rollout-b.jsonl"
    _write(codex / new, said("the quokka migration is on Thursday"))
    summary = run_index(s)
    assert not summary.full and (summary.files_new, summary.files_unchanged) == (1, 1)
    with Searcher(s) as searcher:
        hits = searcher.search("quokka migration", max_results=3)
        assert hits and hits[0].path == f"sessions/{new.as_posix()}"


def test_a_run_given_the_changed_paths_judges_nested_ones(tmp_path: Path, codex: Path) -> None:
    """The watcher's paths: a rollout appended to, a new one, one gone, one in a symlinked folder are
    judged alone; a new folder (or the setting turned) makes the run scan everything."""
    s = settings_of(tmp_path, codex, True)
    run_index(s)
    rollout = codex / DAY / "rollout-a.jsonl"
    with rollout.open("a") as fh:
        fh.write("".join(json.dumps(r) + "\n" for r in said("also pin the cron jobs to the heron pool")[1:]))
    fresh = _write(codex / DAY / "rollout-b.jsonl", said("the quokka migration is on Thursday"))
    summary = run_index(s, only_paths={str(rollout), str(fresh)})
    assert summary.hinted and not summary.hint_fallback, summary.hint_fallback
    assert (summary.files_changed, summary.files_new) == (1, 1)
    with Searcher(s) as searcher:
        assert searcher.search("cron jobs heron pool", max_results=3)[0].path == NESTED

    fresh.unlink()
    gone = run_index(s, only_paths={str(fresh)})
    assert gone.hinted and gone.files_removed == 1 and set(files(s)) == {NESTED}

    outside = tmp_path / "outside"
    _write(outside / "rollout-x.jsonl", said("the otter"))
    os.symlink(outside, codex / "2026" / "linked")
    got = discover_changed(s, [str(codex / "2026" / "linked" / "rollout-x.jsonl")])
    assert got.files == [] and got.gone == {"sessions/2026/linked/rollout-x.jsonl"}
    assert len(got.warnings) == 1 and "a symlink" in got.warnings[0]

    folder = codex / "2026" / "12"
    _write(folder / "01" / "rollout-c.jsonl", said("the gannet route"))
    scanned = run_index(s, only_paths={str(folder)})
    assert not scanned.hinted and scanned.hint_fallback == f"{folder} is a folder"
    assert "sessions/2026/12/01/rollout-c.jsonl" in files(s)

    off = settings_of(tmp_path, codex, False)
    turned = run_index(off, only_paths={str(rollout)})
    assert not turned.hinted and turned.hint_fallback == "[sessions] recursive turned off"
    assert files(off) == {}


def test_the_watcher_watches_the_subfolders(tmp_path: Path, codex: Path) -> None:
    s = settings_of(tmp_path, codex, True)
    f = SourceFilter(s)
    assert str(codex) in f.plan().recursive
    assert f.relevant(str(codex / DAY / "rollout-new.jsonl")) and not f.relevant(str(codex / DAY / "notes.txt"))
    assert str(codex) in SourceFilter(settings_of(tmp_path, codex, False)).plan().flat

    run_index(s)
    runner = SpyRunner(s)
    try:
        with started_watcher(s, runner, 0.25) as w:
            next_run(w, runner, 1, "the start-up run")
            rollout = codex / DAY / "rollout-b.jsonl"
            _write(rollout, said("the quokka migration is on Thursday"))
            summary = next_run(w, runner, 2, "the new rollout's run")
            assert runner.hints[1] is not None and str(rollout) in runner.hints[1], runner.hints
            assert summary.hinted and summary.files_new == 1
            time.sleep(0.3)
            _write(codex / "2026" / "12" / "01" / "rollout-c.jsonl", said("the gannet route"))
            deadline = time.monotonic() + 15
            while "sessions/2026/12/01/rollout-c.jsonl" not in files(s):
                assert time.monotonic() < deadline, "the new dated folder was not indexed"
                time.sleep(0.05)
    finally:
        runner.close()
    with Searcher(s) as searcher:
        hits = searcher.search("quokka migration", max_results=3)
        assert hits[0].path == f"sessions/{DAY.as_posix()}/rollout-b.jsonl"


def test_hidden_folders_below_are_not_walked(tmp_path: Path) -> None:
    """A sessions folder set to the workspace itself: the index's own folder (its batch work files
    are JSONL) and ``.git`` are no agent's sessions; a visible dated folder is."""
    ws = tmp_path / "ws"
    _write(ws / ".memory-core" / "batch" / "requests.jsonl", said("the lantern batch request"))
    _write(ws / ".git" / "hooks.jsonl", said("the lantern hook"))
    _write(ws / "2026" / "11" / "rollout.jsonl", said("the lantern in the dated folder"))
    s = load_settings(None, {"workspace": str(ws), "provider": "none", "sources": ["sessions"],
                             "sessions": {"dir": str(ws), "recursive": True}})
    summary = run_index(s)
    assert list(files(s)) == ["sessions/2026/11/rollout.jsonl"] and not summary.warnings, summary.warnings
    assert discover_changed(s, [str(ws / ".memory-core" / "batch" / "requests.jsonl")]).files == []
