"""The write path, audited again (the fortieth session's audit H).

* With ``backend = "qmd"`` a write answered ``indexed: true`` without looking: the check returned
  True for any backend but the builtin one, so a note the indexer skipped, or a run whose
  ``qmd update`` failed, was said indexed.
* ``memory-core write`` (and ``write_memory``) waited up to ``lock.timeout_s`` (600 s) when another
  run held the index, where the MCP tool answers at once that the next run indexes the note; it
  now waits ``WRITE_LOCK_WAIT_S`` (another write's run ends in a second or two).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from memory_core.apps.cli import main
from memory_core.config import load_settings
from memory_core.index.pipeline import run_index
from memory_core.notes.write import WRITE_LOCK_WAIT_S, write_memory
from memory_core.storage.store import IndexLock


def _ws(tmp_path: Path, backend: str = "builtin") -> Path:
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    (ws / "MEMORY.md").write_text("# notes\n")
    (ws / "memory-core.toml").write_text(
        f'provider = "none"\nbackend = "{backend}"\n[qmd]\ncommand = "{tmp_path / "no-qmd-here"}"\n')
    return ws


def _settings(ws: Path):  # type: ignore[no-untyped-def]
    return load_settings(ws / "memory-core.toml", {"workspace": str(ws)})


def test_a_qmd_write_whose_qmd_update_failed_is_not_said_indexed(tmp_path: Path) -> None:
    ws = _ws(tmp_path, "qmd")
    s = _settings(ws)
    run_index(s)
    res = write_memory(s, "The okapi audit is due in May.", "memory/okapi.md")
    assert res.indexed is False, res
    assert "the builtin index holds it" in res.note and "qmd" in res.note and "failed" in res.note, res.note


def test_a_qmd_write_of_a_note_the_indexer_skips_is_not_said_indexed(tmp_path: Path) -> None:
    ws = _ws(tmp_path, "qmd")
    big = ws / "memory" / "big.md"
    line = "filler text line for a very large note\n"
    big.write_text(line * (65 * 1024 * 1024 // len(line) + 10))
    s = _settings(ws)
    run_index(s)
    res = write_memory(s, "The okapi audit is due in May.", "memory/big.md")
    assert res.indexed is False and "the index does not hold it" in res.note, res


def test_a_builtin_write_is_still_said_indexed(tmp_path: Path) -> None:
    s = _settings(_ws(tmp_path))
    run_index(s)
    res = write_memory(s, "The okapi audit is due in May.", "memory/okapi.md")
    assert res.indexed is True and res.note == "", res


def test_a_cli_write_answers_at_once_when_another_run_holds_the_index(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str],
                                                                      caplog: pytest.LogCaptureFixture) -> None:
    ws = _ws(tmp_path)
    s = _settings(ws)
    run_index(s)
    (ws / "memory-core.toml").write_text('provider = "none"\n[lock]\ntimeout_s = 600\n')
    with IndexLock(s.index_file, wait=False):
        assert main(["write", "-w", str(ws), "--path", "memory/okapi.md", "The okapi audit is due in May."]) == 0
    out = capsys.readouterr()
    said = out.out + out.err + caplog.text
    assert "written, but not indexed yet" in said and "another run is writing" in said, said
    # it waited briefly for the other run (another write's ends in a second), not lock.timeout_s
    assert f"waiting up to {WRITE_LOCK_WAIT_S:.0f} s" in said and "waiting up to 600" not in said, said
    assert "The okapi audit is due in May." in (ws / "memory" / "okapi.md").read_text()
    # the next run indexes it
    run_index(s)
    assert write_memory(s, "and the kudu one in June", "memory/okapi.md").indexed


def test_memory_write_answers_within_its_deadline_with_a_stalled_provider(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Audit H4: with a hosted provider that stalls, ``memory_write`` waited for its reindex's
    whole retry budget (46 s at ``remote.timeout_s = 5``; about 6 minutes at the defaults) where
    search and store answer within their deadline. It answers by ``WRITE_REINDEX_DEADLINE_S`` now,
    the note written; the reindex goes on and indexes it once the provider answers."""
    from memory_core.apps import mcp_server
    from memory_core.apps.mcp_server import MemoryTools
    from memory_core.query.search import Searcher
    from tests.fakes.openai_fake import OpenAIFake

    monkeypatch.setattr(mcp_server, "WRITE_REINDEX_DEADLINE_S", 1.0)
    with OpenAIFake(dims=64) as srv:
        ws = tmp_path / "ws"
        (ws / "memory").mkdir(parents=True)
        (ws / "MEMORY.md").write_text("# notes\n\nThe walrus budget is 9100 EUR.\n")
        s = load_settings(None, {"workspace": str(ws), "provider": "openai", "model": "text-embedding-3-small",
                                 "remote": {"api_key": "sk-test-key-0123456789", "base_url": srv.base_url,
                                            "dimensions": 64, "timeout_s": 5},
                                 "sync": {"watch": False, "on_search": False, "on_session_start": False}})
        run_index(s)
        tools = MemoryTools(s)
        try:
            srv.hang_next(None, seconds=60)  # the provider stalls from now on
            out = tools.handlers["memory_write"]({"text": "The narwhal migration is on Friday.",
                                                 "path": "memory/narwhal.md"})
            assert out["indexed"] is False and "still running after 1 s" in str(out["note"]), out
            assert "narwhal migration" in (ws / "memory" / "narwhal.md").read_text()
            srv.clear_faults()  # the provider answers again: the run still going indexes the note
            deadline = time.monotonic() + 120
            while not any(r.reason == "memory_write" for r in tools.sync.runs) and time.monotonic() < deadline:
                time.sleep(0.1)
            assert [r.ok for r in tools.sync.runs if r.reason == "memory_write"] == [True]
        finally:
            tools.close()
        with Searcher(s) as searcher:
            assert any(r.path == "memory/narwhal.md" for r in searcher.search("narwhal migration", min_score=0))
