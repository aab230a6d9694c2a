"""Runs told nothing keep the index as it is built now: the thirteenth session's audit
(docs/reliability.md, "Reading back and freshness (the thirteenth session's audit)"). Each test
fails on the code before its fix.

S1: a run resolved before another run rebuilt the index (it waited for the writer lock; a
long-lived reader's next refresh) rebuilt it back; S2: a run on the fallback provider made the
index forget its provider."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from memory_core.apps.cli import main
from memory_core.index.pipeline import run_index
from memory_core.runtime.resolve import resolve_settings
from memory_core.storage.indexmeta import IndexRecord
from memory_core.storage.store import probe_index
from tests.fakes.openai_fake import OpenAIFake


def _record(index: Path) -> IndexRecord:
    rec = IndexRecord.from_meta(probe_index(index)[0])
    assert rec is not None
    return rec


def _workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    (ws / "sessions").mkdir()
    (ws / "memory" / "a.md").write_text("# A\n\nThe staging database is pg-staging-3.\n")
    (ws / "sessions" / "s.jsonl").write_text(json.dumps(
        {"type": "message", "timestamp": "2026-01-01T10:00:00Z",
         "message": {"role": "user", "content": "the walrus budget is due on friday"}}) + "\n")
    (ws / "memory-core.toml").write_text('provider = "none"\n')
    return ws


def test_s1_a_run_resolved_before_another_rebuilt_the_index_keeps_it_as_built(tmp_path: Path) -> None:
    """Run B (`memory-core index`, told nothing) resolved its settings, then waited for the
    writer lock while run A (`index --sessions`) added the transcripts; B then rebuilt in full
    with the sources it had read (`sources changed from [memory, sessions] to [memory]`) and the
    transcripts were gone."""
    ws = _workspace(tmp_path)
    assert main(["index", "-w", str(ws), "--no-progress"]) == 0
    waiting = resolve_settings({"workspace": str(ws)}).settings  # B, told nothing, before A
    assert waiting.sources == ["memory"]
    assert main(["index", "-w", str(ws), "--sessions", "--no-progress"]) == 0  # A
    index = ws / ".memory-core" / "index.sqlite"
    assert sorted(_record(index).sources) == ["memory", "sessions"]
    b = run_index(waiting)  # B takes the lock now
    assert not b.full and b.files_removed == 0, (b.full_reason, b.files_removed)
    assert sorted(_record(index).sources) == ["memory", "sessions"]


def test_s1_a_long_lived_reader_keeps_what_a_cli_run_built(tmp_path: Path) -> None:
    """A `Memory` (the MCP server's reader) open while the user ran `memory-core index
    --sessions`: its next refresh (a note written, watched) rebuilt the index with the sources it
    had read at start, and the transcript it had just been given was no longer found."""
    from memory_core.api import open_memory

    ws = _workspace(tmp_path)
    assert main(["index", "-w", str(ws), "--no-progress"]) == 0
    index = ws / ".memory-core" / "index.sqlite"
    with open_memory(ws) as memory:
        assert memory.answer("walrus budget", min_score=0).results == []
        assert main(["index", "-w", str(ws), "--sessions", "--no-progress"]) == 0
        (ws / "memory" / "b.md").write_text("# B\n\nThe quokka migration is on friday.\n")
        deadline = time.monotonic() + 12
        found = False
        while time.monotonic() < deadline and not found:  # the reader refreshes for the new note
            found = any(r["path"] == "memory/b.md" for r in memory.answer("quokka migration", min_score=0).results)
            time.sleep(0.2)
        assert found
        assert any(r["path"] == "sessions/s.jsonl" for r in memory.answer("walrus budget", min_score=0).results)
        assert not memory.freshness().stale
    assert sorted(_record(index).sources) == ["memory", "sessions"]


def test_s2_a_run_on_the_fallback_provider_keeps_the_index_provider(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Built on openai; a run whose environment lacked the API key fell back to `none` and
    recorded no provider at all; the next run, key back and told nothing, resolved `auto` and
    rebuilt on whatever it picked (the local model), not openai."""
    ws = _workspace(tmp_path)
    with OpenAIFake(dims=16) as srv:
        (ws / "memory-core.toml").write_text(f'[remote]\nbase_url = "{srv.base_url}"\ndimensions = 16\n'
                                             '[fallback]\nprovider = "none"\n')
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test-key-0123456789")
        assert main(["index", "-w", str(ws), "--provider", "openai", "--no-progress"]) == 0
        monkeypatch.delenv("OPENAI_API_KEY")
        fell = run_index(resolve_settings({"workspace": str(ws)}).settings)
        assert fell.provider == "none" and fell.provider_reason.startswith("fallback")
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test-key-0123456789")
        back = run_index(resolve_settings({"workspace": str(ws)}).settings)
    assert back.provider == "openai" and back.model == "text-embedding-3-small", (back.provider, back.full_reason)
    assert _record(ws / ".memory-core" / "index.sqlite").dims == 16
