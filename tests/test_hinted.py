"""Watch-hinted incremental runs: a run given the paths that changed looks at those only, gives
the index a full-scan run gives, and scans everything when a path cannot be judged alone; the
watcher hands its events' paths over, or None when they may not say everything."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from memory_core.config import Settings, load_settings
from memory_core.index.indexer import Indexer
from memory_core.index.pipeline import run_index
from memory_core.index.runtypes import RunSummary
from memory_core.runtime.watching import Watcher
from memory_core.storage.store import connect
from tests.test_watch import indexed_text, started_watcher

DEBOUNCE = 0.25
STAMP_NS = 1_790_000_000_123_000_000  # one mtime for the same change made in two copies


def settings_for(ws: Path) -> Settings:
    return load_settings(None, {"workspace": str(ws), "provider": "none", "sources": ["memory", "sessions"],
                                "sessions": {"delta_bytes": 1, "delta_messages": 1}})


def rows(s: Settings) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """The chunks (id, path, source, lines, hash, text) and the files table of an index."""
    conn = connect(s.index_file, readonly=True)
    try:
        chunks = sorted(conn.execute("SELECT id, path, source, start_line, end_line, hash, text FROM chunks"))
        files = sorted(conn.execute("SELECT path, source, hash, mtime, size, chunks, lines FROM files"))
        return chunks, files
    finally:
        conn.close()


text_of = indexed_text  # the chunk text an index holds for a path (tests/test_watch.py)


def write(path: Path, text: str, *, append: bool = False) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a" if append else "w") as fh:
        fh.write(text)
    os.utime(path, ns=(STAMP_NS, STAMP_NS))


def counts(s: RunSummary) -> tuple[int, ...]:
    return (s.files_scanned, s.files_new, s.files_changed, s.files_unchanged, s.files_removed, s.sessions_carried,
            s.chunks_total)


@pytest.fixture
def indexed(workspace: Path) -> Settings:
    s = settings_for(workspace)
    run_index(s)
    return s


def copy_of(tmp_path: Path, workspace: Path) -> Settings:
    """The workspace and its index, copied (mtimes kept): the same start for a full-scan run."""
    twin = tmp_path / "twin"
    shutil.copytree(workspace, twin, symlinks=True)
    return settings_for(twin)


def changes(ws: Path) -> set[str]:
    """An edit, an addition (in a folder that exists, and in a new one), a deletion, a rename and
    a transcript append; the absolute paths a watcher would name."""
    mem = ws / "memory"
    write(mem / "2026-09-04.md", "\nThe narwhal drill passed.\n", append=True)
    write(mem / "fresh.md", "# Fresh\nwombat protocol notes\n")
    write(mem / "later" / "deep.md", "# Deep\naxolotl census\n")
    (mem / "howto" / "deploy-checklist.md").unlink()
    (mem / "2026-09-08.md").rename(mem / "renamed.md")
    transcript = sorted((ws / "sessions").glob("*.jsonl"))[0]
    write(transcript, '{"type":"message","message":{"role":"user","content":"the capybara budget"}}\n', append=True)
    return {str(p) for p in [mem / "2026-09-04.md", mem / "fresh.md", mem / "later" / "deep.md",
                             mem / "howto" / "deploy-checklist.md", mem / "2026-09-08.md", mem / "renamed.md",
                             transcript]}


def test_a_hinted_run_gives_the_index_of_a_full_scan(indexed, workspace, tmp_path):
    twin = copy_of(tmp_path, workspace)
    assert rows(twin) == rows(indexed)
    hint = changes(workspace)
    changes(twin.workspace_dir)

    with Indexer(indexed) as ix:
        hinted = ix.run_changed(frozenset(hint))
    full = run_index(twin)
    assert hinted.hinted and hinted.hinted_paths == len(hint) and not hinted.hint_fallback
    assert not full.hinted
    assert hinted.files_new == 3 and hinted.files_changed == 2 and hinted.files_removed == 2
    assert counts(hinted) == counts(full)
    assert rows(indexed) == rows(twin)
    transcript = next(f"sessions/{Path(p).name}" for p in hint if p.endswith(".jsonl"))
    assert "narwhal" in text_of(indexed, "memory/2026-09-04.md") and "capybara" in text_of(indexed, transcript)
    assert "hinted: 7 paths looked at" in "\n".join(hinted.lines())


def test_a_hinted_run_looks_at_the_named_paths_only(indexed, workspace, monkeypatch):
    mem = workspace / "memory"
    behind = mem / "2026-09-10.md"
    write(behind, "\nchanged behind the watcher's back: quokka\n", append=True)  # no event for it
    named = mem / "2026-09-14.md"
    write(named, "\nthe named change: pelican\n", append=True)

    looked: list[str] = []
    real_lstat, real_scandir, real_stat = os.lstat, os.scandir, os.stat
    monkeypatch.setattr(os, "lstat", lambda p, *a, **k: (looked.append(os.fspath(p)), real_lstat(p, *a, **k))[1])
    monkeypatch.setattr(os, "stat", lambda p, *a, **k: (looked.append(os.fspath(p)), real_stat(p, *a, **k))[1])
    monkeypatch.setattr(os, "scandir", lambda p=".": (looked.append(f"scandir {os.fspath(p)}"), real_scandir(p))[1])
    summary = run_index(indexed, only_paths={str(named)})
    monkeypatch.undo()

    assert summary.hinted and summary.hinted_paths == 1 and summary.files_changed == 1
    assert str(named) in looked
    assert str(behind) not in looked
    assert not any(p == f"scandir {mem}" or p.startswith(f"scandir {mem}{os.sep}") for p in looked)
    assert "pelican" in text_of(indexed, "memory/2026-09-14.md")
    assert "quokka" not in text_of(indexed, "memory/2026-09-10.md")  # as recorded: nobody named it
    later = run_index(indexed)  # the next full scan picks it up
    assert not later.hinted and later.files_changed == 1
    assert "quokka" in text_of(indexed, "memory/2026-09-10.md")


@pytest.mark.parametrize("case", ["new folder", "removed folder", "renamed folder", "a source root"])
def test_a_folder_makes_the_run_scan_everything(indexed, workspace, tmp_path, case):
    twin = copy_of(tmp_path, workspace)
    mem = workspace / "memory"

    def change(ws: Path) -> str:
        m = ws / "memory"
        if case == "new folder":
            write(m / "trip" / "a.md", "# Trip\nthe gannet route\n")
            write(m / "trip" / "b" / "c.md", "# C\nthe puffin route\n")
            return str(m / "trip")
        if case == "removed folder":
            shutil.rmtree(m / "projects")
            return str(m / "projects")
        if case == "renamed folder":
            (m / "projects").rename(m / "archive")
            return str(m / "projects")  # the moved-from half only: the other half is lost
        write(m / "trip" / "a.md", "# Trip\nthe gannet route\n")
        return str(m)

    hint = change(workspace)
    change(twin.workspace_dir)
    assert mem.exists()
    summary = run_index(indexed, only_paths={hint})
    assert not summary.hinted and summary.hint_fallback, summary.hint_fallback
    assert "full scan (" in "\n".join(summary.lines())
    full = run_index(twin)
    assert counts(summary) == counts(full) and summary.swapped
    assert rows(indexed) == rows(twin)


def test_no_index_yet_and_full_rebuilds_scan_everything(workspace):
    s = settings_for(workspace)
    first = run_index(s, only_paths=set())
    assert not first.hinted and first.hint_fallback == "no index yet" and first.files_new > 5
    again = run_index(s, full=True, only_paths=set())
    assert not again.hinted and again.full and again.files_scanned == first.files_scanned
    none = run_index(s, only_paths=set())  # nothing named: nothing looked at, nothing to do
    assert none.hinted and none.hinted_paths == 0 and not none.swapped
    assert none.files_unchanged == first.files_new and none.files_scanned == first.files_scanned


# -- the watcher hands its paths over -------------------------------------------------------------

class SpyRunner:
    """The in-process runner, recording what the watcher handed to each run."""

    def __init__(self, settings: Settings) -> None:
        self.inner = Indexer(settings)
        self.hints: list[frozenset[str] | None] = []
        self.fail_next = 0
        self.description = "spy"

    def __call__(self) -> Any:  # pragma: no cover - the watcher calls run_changed
        raise AssertionError("called without hints")

    def run_changed(self, changed: frozenset[str] | None) -> RunSummary:
        self.hints.append(changed)
        if self.fail_next:
            self.fail_next -= 1
            from memory_core.errors import RunError

            raise RunError("simulated outage")
        return self.inner.run_changed(changed)

    def close(self) -> None:
        self.inner.close()


def wait_for(pred: Callable[[], Any], timeout: float = 15.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while not (got := pred()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.03)
    return got


@pytest.fixture
def watched(indexed: Settings) -> Iterator[tuple[Watcher, SpyRunner]]:
    runner = SpyRunner(indexed)
    with started_watcher(indexed, runner, DEBOUNCE) as w:
        yield w, runner


def next_run(w: Watcher, runner: SpyRunner, n: int, what: str) -> RunSummary:
    wait_for(lambda: len(w.runs) >= n and w.wait_idle(10), what=what)
    rec = w.runs[n - 1]
    assert rec.ok, rec.error
    assert isinstance(rec.summary, RunSummary)
    return rec.summary


def test_the_watcher_hands_over_the_paths_it_saw(watched, indexed, tmp_path):
    w, runner = watched
    mem = indexed.workspace_dir / "memory"

    def run_after(what: str) -> tuple[frozenset[str] | None, RunSummary]:
        n = len(w.runs) + 1
        summary = next_run(w, runner, n, what)
        return runner.hints[n - 1], summary

    def indexed_paths() -> set[str]:
        return {f[0] for f in rows(indexed)[1]}

    assert runner.hints == [None]  # the start-up run scans everything
    note = mem / "2026-09-04.md"
    note.write_text(note.read_text() + "\nthe narwhal drill\n")
    (mem / "fresh.md").write_text("# Fresh\nwombat\n")
    hint, s = run_after("the edit's run")
    assert hint == frozenset({str(note), str(mem / "fresh.md")}), runner.hints
    assert s.hinted and s.hinted_paths == 2 and s.files_changed == 1 and s.files_new == 1
    assert "hinted: 2 paths looked at" in w.runs[-1].line()
    assert "narwhal" in text_of(indexed, "memory/2026-09-04.md")

    # a folder made (with files): the paths do not say everything, the run scans
    (mem / "trip.v2").mkdir()
    (mem / "trip.v2" / "a.md").write_text("# Trip\ngannet\n")
    hint, s = run_after("the folder's run")
    assert hint is None and not s.hinted and "memory/trip.v2/a.md" in indexed_paths()

    # hinted again; a deletion and a rename of a file are paths too
    (mem / "fresh.md").rename(mem / "kept.md")
    (mem / "2026-09-01.md").unlink()
    hint, s = run_after("the rename's run")
    assert hint == frozenset({str(mem / "fresh.md"), str(mem / "kept.md"), str(mem / "2026-09-01.md")})
    assert s.hinted and s.files_removed == 2 and s.files_new == 1
    assert {"memory/kept.md"} <= indexed_paths() and not {"memory/fresh.md", "memory/2026-09-01.md"} & indexed_paths()

    # a folder moved away: one event, for the folder; the run finds indexed files were under it
    (mem / "projects").rename(tmp_path / "away")
    hint, s = run_after("the moved folder's run")
    assert hint == frozenset({str(mem / "projects")}), runner.hints
    assert not s.hinted and s.hint_fallback.startswith("a folder holding memory/projects/")
    assert not any(p.startswith("memory/projects/") for p in indexed_paths())
    # one with a dot in its name starts no run, but the next run is told
    runs = len(w.runs)
    (mem / "trip.v2").rename(tmp_path / "trip")
    time.sleep(DEBOUNCE + 0.5)
    assert len(w.runs) == runs and "memory/trip.v2/a.md" in indexed_paths()
    (mem / "kept.md").write_text("# Kept\nibis\n")
    hint, s = run_after("the run after it")
    assert hint == frozenset({str(mem / "trip.v2"), str(mem / "kept.md")}) and not s.hinted
    assert "memory/trip.v2/a.md" not in indexed_paths()

    # a failed run: its retry, and the run after it, scan everything
    runner.fail_next = 1
    (mem / "kept.md").write_text("# Kept\nokapi\n")
    n = len(w.runs)
    wait_for(lambda: len(w.runs) >= n + 2 and w.wait_idle(10), what="the retry")
    assert not w.runs[n].ok and runner.hints[n] is not None
    assert w.runs[n + 1].ok and runner.hints[n + 1] is None and "okapi" in text_of(indexed, "memory/kept.md")

    # the interval timer's run scans everything
    w.notify([], reason="interval", full_scan="the interval")
    hint, s = run_after("the interval's run")
    assert hint is None
    # and the next change is hinted again
    (mem / "kept.md").write_text("# Kept\nokapi and ibis\n")
    hint, s = run_after("hinted again")
    assert hint == frozenset({str(mem / "kept.md")}) and s.hinted


def test_too_many_paths_or_an_old_full_scan_mean_a_scan(indexed):
    runner = SpyRunner(indexed)
    w = Watcher(indexed, runner, debounce=DEBOUNCE, root_check_s=0.3, max_hinted_paths=2)
    w.start()
    try:
        assert w.wait_ready(15)
        mem = indexed.workspace_dir / "memory"
        for name in ("x.md", "y.md", "z.md"):
            (mem / name).write_text(f"# {name}\n")
        wait_for(lambda: len(w.runs) >= 2 and w.wait_idle(10) and {"memory/z.md"} <= {f[0] for f in rows(indexed)[1]},
                 what="the run")
        assert all(h is None for h in runner.hints), runner.hints
        (mem / "x.md").write_text("# x again\n")
        wait_for(lambda: "again" in text_of(indexed, "memory/x.md"), what="the hinted run")
        assert runner.hints[-1] == frozenset({str(mem / "x.md")})
        w.full_scan_every_s = 0.0  # the last full scan is too old: scan
        (mem / "x.md").write_text("# x once more\n")
        wait_for(lambda: "once more" in text_of(indexed, "memory/x.md"), what="the old-scan run")
        assert runner.hints[-1] is None
    finally:
        w.stop()


def test_the_sync_watch_runs_are_hinted(indexed):
    from memory_core.runtime.sync import SyncManager

    pytest.importorskip("watchfiles")
    s = indexed.model_copy(update={"sync": indexed.sync.model_copy(update={"watch": True, "watch_debounce_ms": 200})})
    sync = SyncManager(s)
    sync.start()
    try:
        assert sync._watcher is not None and sync._watcher.wait_ready(10)
        mem = s.workspace_dir / "memory"
        (mem / "one.md").write_text("# One\nthe first heron\n")  # the first watch run: a full scan
        wait_for(lambda: any(r.reason == "watch" and r.ok for r in sync.runs), what="the first run")
        assert sync._watcher.wait_idle(10)
        # an edit after it is a hinted run; on a loaded machine one run may still scan everything
        # (a run that did not finish, or events of the first write late: the watcher's rules), so
        # up to three edits, and one of them must be hinted
        for word in ("second", "third", "fourth"):
            (mem / "one.md").write_text(f"# One\nthe {word} heron\n")
            wait_for(lambda w=word: w in text_of(s, "memory/one.md"), what="the hinted run")
            watch_runs = [r.summary for r in sync.runs if r.reason == "watch"]
            if isinstance(watch_runs[-1], RunSummary) and watch_runs[-1].hinted:
                break
            assert sync._watcher.wait_idle(10)
        assert isinstance(watch_runs[0], RunSummary) and not watch_runs[0].hinted
        assert isinstance(watch_runs[-1], RunSummary) and watch_runs[-1].hinted
        assert watch_runs[-1].hinted_paths == 1
    finally:
        sync.close()


def test_a_failed_sync_watch_run_is_not_taken_as_done(indexed, monkeypatch):
    """The sync manager's watch runner raises when its run failed, so the watcher retries it and
    scans everything next (before, the watcher took a failed run for a finished one)."""
    from memory_core.runtime.sync import SyncManager, _WatchRuns

    sync = SyncManager(indexed)

    def failing() -> Any:
        raise RuntimeError("boom")

    monkeypatch.setattr(sync, "runner", failing)
    with pytest.raises(Exception, match="boom"):
        _WatchRuns(sync).run_changed(frozenset())
    sync.close()


def test_each_path_is_judged_by_the_scan_s_rules(tmp_path):
    """discover_changed agrees with discover_files path by path: symlinks, other suffixes, names
    in a symlinked folder, an extra file, transcripts; and leaves hard links and paths outside
    every source to the scan."""
    from memory_core.sources.discovery import HintUnclear, discover_changed, discover_files

    ws = tmp_path / "ws"
    mem = ws / "memory"
    (mem / "deep").mkdir(parents=True)
    (ws / "sessions").mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "o.md").write_text("outside\n")
    write(ws / "MEMORY.md", "# top\n")
    write(mem / "deep" / "a.md", "a\n")
    write(mem / "b.MD", "b\n")
    write(mem / "c.txt", "not md\n")
    write(ws / "notes" / "extra.md", "extra\n")
    write(ws / "sessions" / "t.jsonl", "{}\n")
    write(ws / "sessions" / "t.json", "{}\n")
    os.symlink(outside / "o.md", mem / "link.md")
    os.symlink(outside, mem / "linkdir")
    os.link(mem / "deep" / "a.md", mem / "hard.md")
    s = load_settings(None, {"workspace": str(ws), "provider": "none", "sources": ["memory", "sessions"],
                             "extra_paths": ["notes/extra.md"]})
    scanned = discover_files(s)
    scan = {f.path: f for f in scanned.files}
    judged = [ws / "MEMORY.md", ws / "memory.md", mem / "b.MD", mem / "c.txt", mem / "link.md",
              mem / "linkdir" / "o.md", mem / "gone.md", ws / "notes" / "extra.md", ws / "sessions" / "t.jsonl",
              ws / "sessions" / "t.json", ws / "sessions" / "gone.jsonl"]
    for p in judged:
        got = discover_changed(s, [str(p)])
        # a symlink says it was skipped, as the scan says it (and nothing else says anything)
        linked = p.parent.name == "linkdir" or p.name == "link.md"
        assert got.checked == 1 and (set(got.warnings) <= set(scanned.warnings) and len(got.warnings) == 1
                                     if linked else not got.warnings), (p, got.warnings)
        assert [(f.path, f.source, f.size, f.mtime_ms) for f in got.files] == [
            (f.path, f.source, f.size, f.mtime_ms) for f in scan.values() if f.abs_path == str(p)], p
        if not got.files:
            assert not set(got.gone) & set(scan), p
    assert discover_changed(s, [str(mem / "gone.md")]).gone == {"memory/gone.md"}
    assert discover_changed(s, [str(ws / "sessions" / "gone.jsonl")]).gone == {"sessions/gone.jsonl"}
    for unclear in [mem / "hard.md", mem / "deep", ws / "other.md", mem, outside / "o.md"]:
        with pytest.raises(HintUnclear):
            discover_changed(s, [str(unclear)])


def test_a_scan_plans_what_listing_every_file_plans(indexed, workspace, tmp_path, monkeypatch):
    """An incremental run's scan compares each file's stat with its recorded one as it walks, and
    lists only those that differ (scan_against): its plan must be the plan of listing every file
    and comparing them all with their whole files rows (the scan before it), for edits, additions,
    a deletion, a rename, a transcript append, a touch (same bytes, new mtime), a hard link and a
    symlink."""
    from memory_core.embeddings.registry import create_provider
    from memory_core.index import stages
    from memory_core.sources import discovery

    changes(workspace)
    mem = workspace / "memory"
    os.utime(mem / "2026-09-10.md", ns=(STAMP_NS, STAMP_NS))  # touched: same bytes
    os.link(mem / "fresh.md", mem / "fresh-link.md")  # one file reached twice: listed once
    (mem / "alias.md").symlink_to(mem / "2026-09-04.md")  # never followed
    provider = create_provider(indexed)[0]

    def plan() -> tuple[Any, ...]:
        p = stages.discover_stage(indexed, provider, "test")
        return ([(f.path, f.source, f.mtime_ms, f.size, f.hash) for f in p.to_index], p.removed, p.counts,
                p.warnings, p.full)

    fast = plan()
    listed: list[int] = []

    def every_file(settings: Settings, recorded: Any) -> discovery.Scan:  # the scan before: list them all
        d = discovery.discover_files(settings)
        listed.append(len(d.files))
        return discovery.Scan(changed=d.files, unchanged=0, seen={f.path for f in d.files}, warnings=d.warnings)

    monkeypatch.setattr(stages, "scan_against", every_file)
    assert plan() == fast and listed
    to_index, removed, n, _, full = fast
    assert not full and n["unchanged"] > 0 and n["new"] == 3 and n["changed"] == 2 and removed
    assert "memory/2026-09-10.md" not in [p for p, *_ in to_index]  # the touch: same bytes, kept
