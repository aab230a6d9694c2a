"""The Python API (memory_core.open_memory): index, search, read a citation, with typed results.

Through the real pipeline and index, the official OpenAI SDK against the loopback fake server
(the README's example runs with the local model; the test of that is in test_user_walk).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import memory_core
from memory_core import FileText, Memory, RunSummary, SearchResult, open_memory
from memory_core.errors import ConfigError, IndexMissingError, PathError, UsageError

ROOT = Path(__file__).resolve().parent.parent


def _open(ws: Path, srv: Any, **kw: Any) -> Memory:
    remote = {"api_key": "sk-test-key-0123456789", "base_url": srv.base_url, "dimensions": 64,
              "backoff_initial_s": 0.01, "backoff_max_s": 0.05, "timeout_s": 10}
    return open_memory(ws, provider="openai", model="text-embedding-3-small", remote=remote,
                       index_path=str(ws.parent / "mem.sqlite"), **kw)


def test_index_search_read_round_trip(workspace: Path, openai_fake: Any) -> None:
    with _open(workspace, openai_fake) as memory:
        summary = memory.index()
        assert isinstance(summary, RunSummary)
        assert summary.files_new > 0 and summary.chunks_embedded > 0 and summary.swapped
        assert Path(summary.index_path) == workspace.parent / "mem.sqlite"

        hits = memory.search("replication lag on the replica", max_results=5)
        assert hits and all(isinstance(h, SearchResult) for h in hits)
        # placed, not sorted by score alone: file diversity and a file's relevance as a whole
        # (query.file_diversity, query.file_support; docs/search.md) may put a lower score first
        assert len(hits) <= 5 and len({h.citation for h in hits}) == len(hits)
        assert all(0 <= h.score <= 1 for h in hits)
        top = hits[0]
        got = memory.read(top.citation)
        assert isinstance(got, FileText)
        assert (got.path, got.start_line, got.end_line) == (top.path, top.start_line, top.end_line)
        # the cited lines, exactly as the file has them
        lines = (workspace / top.path).read_text(encoding="utf-8").split("\n")
        assert got.text == "\n".join(lines[top.start_line - 1:top.end_line])

        # a second run finds nothing to do and embeds nothing
        again = memory.index()
        assert again.files_new == again.files_changed == 0 and again.chunks_embedded == 0
        assert memory.status().files == summary.files_new and memory.status().state == "ok"


def test_search_sees_a_reindex_published_by_another_memory(workspace: Path, openai_fake: Any) -> None:
    with _open(workspace, openai_fake) as reader, _open(workspace, openai_fake) as writer:
        writer.index()
        assert reader.search("zebrafish hatchery audit", mode="keyword") == []
        (workspace / "memory" / "zebrafish.md").write_text("# Zebrafish\n\nThe zebrafish hatchery audit is on Friday.\n")
        writer.index()
        hits = reader.search("zebrafish hatchery audit", mode="keyword")
        assert [h.path for h in hits] == ["memory/zebrafish.md"]
        assert reader.read("memory/zebrafish.md", from_line=3, lines=1).text == "The zebrafish hatchery audit is on Friday."


def test_errors_are_the_librarys_own(workspace: Path, openai_fake: Any, tmp_path: Path) -> None:
    with pytest.raises(ConfigError):
        open_memory(workspace, query={"min_score": "high"})
    with _open(workspace, openai_fake) as memory:
        with pytest.raises(IndexMissingError):
            memory.search("anything")
        memory.index()
        with pytest.raises(PathError):
            memory.read("../outside.md")
        with pytest.raises(PathError):
            memory.read("memory/not-indexed.md")
        assert memory.search("postgres", sources=["memory"])  # a search the bad calls below are not
        # what returned nothing and said nothing, or raised Python's own errors (thirty-eighth session's audit)
        for bad, said in ((dict(sources="memory"), "sources must be a list"),
                          (dict(sources=["memroy"]), "unknown source(s) ['memroy']"),
                          (dict(sources=["store"]), "the store is searched by answer()"),
                          (dict(mode="fuzzy"), "mode must be one of")):
            with pytest.raises(UsageError) as got:
                memory.search("postgres", **bad)  # type: ignore[arg-type]
            assert said in str(got.value)
        for query in (5, b"postgres", None):
            with pytest.raises(UsageError, match="query must be text"):
                memory.search(query)  # type: ignore[arg-type]
        assert memory.answer("postgres", sources=["memory", "store"]).results is not None
        # at most 50 results, as answer(), MCP and `search -n 60` give (the API gave 60)
        assert len(memory.search("the", max_results=60, min_score=0)) == len(
            memory.answer("the", max_results=60, min_score=0).results) <= 50


def test_settings_come_from_config_then_keywords(workspace: Path, tmp_path: Path) -> None:
    cfg = tmp_path / "memory-core.toml"
    cfg.write_text(f'workspace = "{workspace}"\nprovider = "none"\n[query]\nmax_results = 3\nmin_score = 0.4\n')
    m = open_memory(config=cfg, query={"min_score": 0.1})
    assert (m.settings.workspace_dir, m.settings.query.max_results, m.settings.query.min_score) == (workspace, 3, 0.1)
    m.index()
    assert 0 < len(m.search("postgres replica")) <= 3
    m.close()


def test_import_is_cheap_and_exports_the_api() -> None:
    code = ("import sys, memory_core; heavy = [m for m in ('memory_core.query.search', 'memory_core.index.pipeline', 'numpy',"
            " 'apsw') if m in sys.modules]; print(heavy); memory_core.open_memory; print(sorted(memory_core.__all__))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT).stdout
    first, second = out.splitlines()
    assert first == "[]"
    assert {"open_memory", "Memory", "SearchResult", "RunSummary", "FileText"} <= set(eval(second))
    with pytest.raises(AttributeError):
        memory_core.no_such_name  # noqa: B018


def test_the_readme_example_runs_as_written(tmp_path: Path) -> None:
    """README "Python API": the block, run on a copy of the example workspace with the local model."""
    pytest.importorskip("sentence_transformers")
    import re
    import shutil

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("## Python API"):]
    block = re.search(r"```python\n(.*?)```", section, re.S)
    assert block is not None
    ws = tmp_path / "workspace"
    shutil.copytree(ROOT / "examples" / "workspace", ws, ignore=shutil.ignore_patterns(".memory-core"))
    code = block.group(1).replace('"examples/workspace"', repr(str(ws)))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.splitlines()
    results = [ln for ln in lines if ln.startswith("memory/") and "#L" in ln.split()[0]]
    assert 1 <= len(results) <= 3, out.stdout
    assert any(r.startswith("memory/2026-10-02.md#L") for r in results), out.stdout  # the day the hotel was booked
    # the read: lines 7-12 of that day's note, as the file has them
    want = (ws / "memory" / "2026-10-02.md").read_text(encoding="utf-8").split("\n")[6:12]
    assert "\n".join(want) in out.stdout
    assert (ws / ".memory-core" / "index.sqlite").exists()


def test_a_memory_keeps_itself_fresh_and_says_when_it_is_stale(workspace: Path) -> None:
    """open_memory's Memory is a long-lived reader with the seeds' sync defaults: a note written
    by hand is found without calling index(); an answer from an index known to be stale (the
    writer lock held by another process, so no refresh can run) says so."""
    import time

    from memory_core import SearchAnswer
    from memory_core.storage.store import IndexLock

    def found(memory: Memory, query: str, path: str, bound_s: float = 12.0) -> bool:
        deadline = time.monotonic() + bound_s
        while time.monotonic() < deadline:
            if path in [h.path for h in memory.search(query, min_score=0)]:
                return True
            time.sleep(0.2)
        return False

    with open_memory(workspace, provider="none") as memory:
        memory.index()
        assert memory.answer("capybara rota").stale is False
        assert memory.sync is not None and memory.sync._watcher is not None  # watching since the first call
        (workspace / "memory" / "capybara.md").write_text("# Rota\n\nThe capybara feeding rota starts on Monday.\n")
        assert found(memory, "capybara feeding rota", "memory/capybara.md")
        with IndexLock(memory.settings.index_file, wait=False):
            (workspace / "memory" / "okapi.md").write_text("# Okapi\n\nThe okapi enclosure opens in May.\n")
            memory.sync.forget_dirty()  # what the watch event does; not waiting for it keeps the test short
            ans = memory.answer("okapi enclosure", min_score=0)
            assert isinstance(ans, SearchAnswer) and ans.stale and ans.stale_reason == "1 new"
            assert "the index is stale (1 new)" in ans.note and ans.to_dict()["stale"] is True
            assert "memory/okapi.md" not in [r["path"] for r in ans.results]
            assert memory.freshness().stale
        assert found(memory, "okapi enclosure", "memory/okapi.md")

    # turned off: nothing refreshes, and the answer still says the index is stale
    off = {"on_search": False, "on_session_start": False, "watch": False}
    with open_memory(workspace, provider="none", sync=off) as memory:
        (workspace / "memory" / "ibis.md").write_text("# Ibis\n\nThe ibis count is on Tuesday.\n")
        ans = memory.answer("ibis count", min_score=0)
        assert ans.stale and not ans.refreshing and "memory/ibis.md" not in [r["path"] for r in ans.results]
        assert memory.sync is not None and memory.sync.runs == []


def test_a_source_another_process_adds_is_watched_too(workspace: Path) -> None:
    """A Memory started on a notes-only index; another process then runs ``index --sessions``: its
    watches were planned from the sources at start, so a transcript written next went unseen for
    a minute by the MCP server (answers said ``stale: false``) and until the half-hourly full scan
    by ``watch`` (the thirty-eighth session's audit). The watches now follow the index's record."""
    import json
    import time

    from memory_core.config import load_settings
    from memory_core.index.pipeline import run_index

    with open_memory(workspace, provider="none") as memory:
        memory.index()
        assert memory.search("axolotl", min_score=0) == []
        assert memory.sync is not None and memory.sync._watcher is not None
        deadline = time.monotonic() + 10
        while not memory.sync._watcher.watching and time.monotonic() < deadline:
            time.sleep(0.05)
        other = load_settings(None, {"workspace": str(workspace), "provider": "none",
                                     "sources": ["memory", "sessions"]})
        assert run_index(other).swapped  # as `memory-core index --sessions` in another process
        time.sleep(3)  # the watcher looks at the index's record every 2 s (ROOT_CHECK_S)
        assert memory.sync._watcher.watching
        assert memory.search("axolotl", min_score=0) == []  # a clean check, made while watching: trusted
        line = json.dumps({"type": "message", "timestamp": "2026-11-20T10:00:00Z",
                           "message": {"role": "user", "content": "the axolotl tank needs a new filter"}})
        (workspace / "sessions" / "axolotl.jsonl").write_text(line + "\n")
        deadline, got = time.monotonic() + 12, []
        while time.monotonic() < deadline:
            got = [h.path for h in memory.search("axolotl", min_score=0)]
            if "sessions/axolotl.jsonl" in got:
                break
            time.sleep(0.3)
        assert "sessions/axolotl.jsonl" in got, got


def test_read_and_status_never_wait_behind_searches(workspace: Path) -> None:
    """Issue 39 M1: searches waiting on a stalled provider held every searcher of the pool, so an
    MCP client's memory_get / memory_status waited behind them. Read and status have a searcher of
    their own: with the whole search pool held, they still answer."""
    import threading

    with open_memory(workspace, provider="none", sync={"on_session_start": False, "on_search": False,
                                                       "watch": False}) as memory:
        memory.index()
        memory._max = 1  # a pool of one searcher, held below as a stalled search would hold it
        held, release = threading.Event(), threading.Event()

        def stalled_search() -> None:
            with memory._borrow():
                held.set()
                release.wait(60)

        searching = threading.Thread(target=stalled_search, daemon=True)
        searching.start()
        assert held.wait(30)
        answers: dict[str, Any] = {}

        def read_and_status() -> None:
            answers["status"] = memory.status()
            answers["read"] = memory.read("MEMORY.md", lines=3)

        reader = threading.Thread(target=read_and_status, daemon=True)
        reader.start()
        reader.join(20)  # a deadlock bound, not a timing: before the fix it waits for `release`
        blocked = reader.is_alive()
        release.set()
        searching.join(30)
        reader.join(60)
        assert not blocked, "read/status waited for the search pool"
        assert answers["status"].state == "ok" and answers["status"].chunks
        assert answers["read"].lines == 3 and answers["read"].path == "MEMORY.md"
