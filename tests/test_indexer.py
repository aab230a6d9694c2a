"""The one in-process indexer (memory_core.index.indexer): every way of reindexing in this process
(`index --engine local`, watch, the sync triggers, the Python API) runs through it, so each
reused provider starts every run with a full retry budget, and each caller keeps its own lock
semantics. Real runs against the loopback OpenAI fake and real keyword-only indexes."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from memory_core.api import Memory
from memory_core.apps.cli import main
from memory_core.apps.watch import make_runner
from memory_core.config import Settings, load_settings
from memory_core.errors import IndexLockedError
from memory_core.index.indexer import Indexer, RunRecord
from memory_core.index.runtypes import RunSummary
from memory_core.runtime.sync import SyncManager
from memory_core.storage.store import IndexLock
from tests.conftest import openai_settings

RETRY_AFTER = 0.7  # one required wait per run; two do not fit in one budget
BUDGET = 1.0


@contextmanager
def sync_path(s: Settings) -> Iterator[Callable[[str], RunSummary]]:
    """The sync triggers' runs: SyncManager's own runner (what memory_write and on_search use)."""
    sync = SyncManager(s)

    def run(reason: str) -> RunSummary:
        rec = sync.reindex_now(reason)
        assert rec.ok, rec.error
        assert isinstance(rec.summary, RunSummary)
        return rec.summary

    try:
        yield run
    finally:
        sync.close()


@contextmanager
def watch_path(s: Settings) -> Iterator[Callable[[str], RunSummary]]:
    """watch's in-process runner, as `memory-core watch` makes it."""
    runner = make_runner(s, env={})
    try:
        yield lambda reason: runner()  # type: ignore[return-value]
    finally:
        runner.close()


@contextmanager
def api_path(s: Settings) -> Iterator[Callable[[str], RunSummary]]:
    """The Python API: one Memory, indexed again and again."""
    with Memory(s) as memory:
        yield lambda reason: memory.index()


@pytest.mark.parametrize("path", [sync_path, watch_path, api_path], ids=["sync", "watch", "api"])
def test_every_run_of_a_reused_provider_starts_with_a_full_retry_budget(workspace: Path, openai_fake: Any,
                                                                         path: Any) -> None:
    """Each run waits once for a Retry-After of 0.7 s within a 1 s budget: the second run fits only
    if its budget starts full (a sync run once reused the spent budget of the run before)."""
    s = openai_settings(workspace, openai_fake, remote={"retry_budget_s": BUDGET})
    with path(s) as run:
        openai_fake.fail_next(1, 429, retry_after=RETRY_AFTER)
        first = run("first")
        assert first.swapped and first.provider == "openai"
        (workspace / "memory" / "budget.md").write_text("# Budget\n\nthe second run embeds this okapi note\n")
        openai_fake.fail_next(1, 429, retry_after=RETRY_AFTER)
        second = run("second")  # with the budget left over (0.3 s) the 0.7 s wait is refused
        assert second.swapped and second.files_new == 1


def test_the_provider_is_created_once_and_closed_by_its_owner(workspace: Path) -> None:
    s = load_settings(None, {"workspace": str(workspace), "provider": "none"})
    closed: list[str] = []
    with Indexer(s) as indexer:
        provider = indexer.provider
        provider.close = lambda: closed.append("own")  # type: ignore[method-assign]
        assert indexer.run().swapped and indexer.run(full=True).swapped
        assert indexer.provider is provider and indexer.description == "in-process runs, provider none"
    assert closed == ["own"]
    given = Indexer(s, provider=provider, reason="told")
    assert given.run().provider == "none" and given.reason == "told"
    given.close()
    assert closed == ["own"]  # a provider handed in stays the caller's


def test_each_caller_keeps_its_lock_semantics(workspace: Path) -> None:
    """The sync triggers never wait for another process's run (the run is recorded as skipped);
    the CLI, watch and the API wait as `lock.wait` says (default: wait)."""
    s = load_settings(None, {"workspace": str(workspace), "provider": "none", "lock": {"timeout_s": 30}})
    Indexer(s).run()
    (workspace / "memory" / "locked.md").write_text("# Locked\n\nthe tapir waits\n")
    with IndexLock(s.index_file, wait=False):
        with pytest.raises(IndexLockedError):
            Indexer(s, wait_for_lock=False).run()
        sync = SyncManager(s)
        try:
            rec = sync.reindex_now("locked")
        finally:
            sync.close()
        assert not rec.ok and rec.skipped and rec.to_dict()["skipped"] is True
        done: list[RunSummary] = []
        waiting = threading.Thread(target=lambda: done.append(Indexer(s).run()))
        waiting.start()
        waiting.join(1.0)
        assert waiting.is_alive() and not done  # waiting for the lock
    waiting.join(30)
    assert done and done[0].files_new == 1


def test_the_cli_runs_the_indexer(workspace: Path, capsys: Any) -> None:
    """`index --engine local` prints the Indexer's RunSummary as JSON, as before."""
    assert main(["index", "-w", str(workspace), "--provider", "none", "--engine", "local", "--json",
                 "--no-progress"]) == 0
    out = json.loads(capsys.readouterr().out)
    again = Indexer(load_settings(None, {"workspace": str(workspace), "provider": "none"})).run()
    assert out["files_new"] > 0 and out["swapped"] is True
    assert set(out) == set(again.to_dict()) and again.files_scanned == out["files_scanned"] and not again.swapped


def test_one_run_record_for_watch_and_sync() -> None:
    ok = RunRecord(1, "startup", 0.0, 0.25, ok=True)
    assert ok.line() == "run 1 (startup, 0.25s)" and ok.warnings == []
    failed = RunRecord(2, "retry", 0.0, 1.0, ok=False, error="boom", changed=["memory/a.md"])
    assert failed.line() == "run 2 (retry, 1.00s): failed: boom"
    assert failed.to_dict() == {"number": 2, "reason": "retry", "changed": ["memory/a.md"], "started_at": 0.0,
                                "seconds": 1.0, "ok": False, "skipped": False, "summary": None, "error": "boom",
                                "stopped": None}
