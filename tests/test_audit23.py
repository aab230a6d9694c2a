"""The twenty-third session's outside audit: what a removed note leaves in the index file, agents
merged when no agent is named, indexes kept in one folder. Each test fails on the code before its fix."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from memory_core.config import load_settings
from memory_core.errors import RunCancelled
from memory_core.index.pipeline import run_index
from memory_core.query.search import Searcher


def _none(ws: Path, **kw: object) -> object:
    return load_settings(None, {"workspace": str(ws), "provider": "none", **kw})


@pytest.mark.parametrize(("writer", "published"), [("auto", "in place"), ("copy", "replaced")])
def test_a_removed_or_rewritten_notes_text_is_not_left_in_the_index_files_bytes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, writer: str, published: str) -> None:
    """F8: after an in-place run removed a note, its text was still in the index file's free
    pages (no ``secure_delete``): anyone who could read the file read what was deleted. Its words
    stayed too (twenty-sixth session): FTS5's contentless table deletes by tombstone, so
    "gorgonzola" and "quetzalcoatl" sat in its segments until FTS5 merged them, after an in-place
    edit or a new file copied from the live one alike."""
    monkeypatch.setenv("MEMORY_CORE_WRITER", writer)
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
    assert summary.published == published, summary.published
    data = index.read_bytes()
    assert b"the gorgonzola vault opens" not in data and b"Quetzalcoatl protocol" not in data
    assert b"zebracorn-lanternfish" not in data
    assert b"written on the router" in data
    # nor its words, FTS5's single tokens (porter stems: "quetzalcoatl", "gorgonzola", "lanternfish")
    for word in (b"gorgonzola", b"quetzalcoatl", b"zebracorn", b"lanternfish"):
        assert word not in data, word
    assert b"router" in data and b"heron" in data
    with Searcher(s) as se:  # type: ignore[arg-type]
        assert [h.path for h in se.search("router")] == ["memory/edited.md"]
        assert se.search("gorgonzola") == [] and len(se.search("heron pond")) > 0


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


@pytest.mark.parametrize(("stop", "code", "says"), [
    (KeyboardInterrupt, 130, "interrupted"), (lambda: RunCancelled("stopped by SIGTERM"), 1, "stopped by SIGTERM")])
def test_a_write_stopped_in_its_reindex_says_what_it_wrote_and_exits_as_the_stop(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        stop: Any, code: int, says: str) -> None:
    """F6: Ctrl-C in `memory-core write`'s reindex printed only "interrupted; the live index was
    left as it was" (exit 130) though the note was written, so a retry wrote it twice; a SIGTERM
    exited 0. Now the write's result (its citation, not indexed), then the stop's line and exit."""
    from memory_core.apps.cli import main
    from memory_core.index.indexer import Indexer

    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    (ws / "memory-core.toml").write_text('provider = "none"\n')

    def stopped(self: Any, *a: Any, **kw: Any) -> Any:
        raise stop()

    monkeypatch.setattr(Indexer, "run", stopped)
    got = main(["write", "-w", str(ws), "--path", "memory/2026-11-30.md", "--json",
                "Kumquat decision: we ship on Tuesday."])
    out, err = capsys.readouterr()
    assert got == code, (out, err)
    res = json.loads(out)
    assert res["citation"] == "memory/2026-11-30.md#L1-L1" and res["indexed"] is False, res
    assert "not indexed" in res["note"] and says in err, err
    assert (ws / "memory" / "2026-11-30.md").read_text() == "Kumquat decision: we ship on Tuesday.\n"


def test_two_indexes_in_one_folder_do_not_share_the_default_memory_store(tmp_path: Path) -> None:
    """F1 (the store): ``--index /srv/idx/alice.sqlite`` and ``bob.sqlite`` shared the default store
    ``/srv/idx/lancedb``: one's `memory list` and store searches showed the other's memories. The
    default is refused with one line naming the other index; a store of its own works, and an
    index alone in its folder keeps the default (its cache file is no other index)."""
    from memory_core.errors import UsageError
    from memory_core.notes.memory_store import MemoryStore

    idx = tmp_path / "idx"
    idx.mkdir()
    settings = {}
    for name in ("alice", "bob"):
        ws = tmp_path / name
        (ws / "memory").mkdir(parents=True)
        (ws / "MEMORY.md").write_text(f"{name}'s notes\n")
        settings[name] = _none(ws, index_path=str(idx / f"{name}.sqlite"))
    run_index(settings["alice"])
    (idx / "alice.cache.sqlite").write_bytes((idx / "alice.sqlite").read_bytes()[:100])  # a cache: no index
    (idx / "notes.sqlite").write_bytes(b"SQLite format 3\x00" + bytes(84))  # someone else's database
    MemoryStore(settings["alice"]).close()  # alone in its folder: the default
    run_index(settings["bob"])
    for me, other in (("alice", "bob.sqlite"), ("bob", "alice.sqlite")):
        with pytest.raises(UsageError, match=f"would be shared: the index folder .* also holds {other}"):
            MemoryStore(settings[me])
    own = _none(tmp_path / "bob", index_path=str(idx / "bob.sqlite"), lancedb_path=str(tmp_path / "bob-store"))
    MemoryStore(own).close()
    MemoryStore(settings["bob"], path=tmp_path / "bob-store").close()


def test_an_answer_says_when_a_transcripts_newest_messages_are_below_the_session_delta(tmp_path: Path) -> None:
    """Audit 23b, finding 1: messages appended to a transcript below the session delta are kept out
    of the automatic runs (the seeds' rule), and the answer said ``stale: false`` though the index
    was older than its sources; an agent searching its own session's newest messages was told the
    index was fresh. It is stale now, with a note naming the transcript and what indexes it."""
    from memory_core.api import Memory

    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    (ws / "sessions").mkdir()
    path = ws / "sessions" / "main.jsonl"

    def message(role: str, text: str, minute: int) -> str:
        return json.dumps({"type": "message", "timestamp": f"2026-11-30T10:{minute:02d}:00Z",
                           "message": {"role": role, "content": [{"type": "text", "text": text}]}}) + "\n"

    path.write_text(message("user", "hello there", 0) + message("assistant", "hi, how can I help?", 1))
    settings = load_settings(None, {"workspace": str(ws), "provider": "none", "sources": ["memory", "sessions"]})
    run_index(settings)
    with Memory(settings, refresh=False) as memory:
        fresh = memory.answer("hello")
        assert fresh.stale is False, fresh
        with path.open("a") as fh:
            fh.write(message("user", "the door code is 4711 for the Porto flat", 2))
        grown = memory.answer("Porto flat door code", min_score=0)
        assert grown.stale is True and "grew below the session delta" in (grown.stale_reason or ""), grown
        assert "sessions/main.jsonl" in (grown.note or "") and "memory-core index" in (grown.note or "")
        assert not grown.refreshing
        memory.index()
        done = memory.answer("Porto flat door code", min_score=0)
        assert done.stale is False and any(r["path"] == "sessions/main.jsonl" for r in done.results), done


def test_a_relative_workspace_stays_the_one_it_named_after_a_chdir(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Audit 23b, finding 2: ``open_memory("ws")`` and then ``os.chdir`` to a folder that also has a
    ``ws/``: the next ``index()`` indexed that folder's notes into this index, with no error (the
    workspace was resolved against the current folder at each use)."""
    from memory_core.api import open_memory

    a, b = tmp_path / "a", tmp_path / "b"
    for root, word in ((a, "HERON"), (b, "OSPREY")):
        (root / "ws" / "memory").mkdir(parents=True)
        (root / "ws" / "memory" / "note.md").write_text(f"The {word} nests by the lake.\n")
        (root / "ws" / "memory-core.toml").write_text('provider = "none"\n')
    monkeypatch.chdir(a)
    with open_memory("ws") as memory:
        memory.index()
        monkeypatch.chdir(b)
        memory.index()
        assert memory.settings.workspace_dir == a / "ws"
        assert [r.path for r in memory.search("heron", min_score=0)] == ["memory/note.md"]
        assert memory.search("osprey", min_score=0) == []
    assert not (b / "ws" / ".memory-core").exists()
