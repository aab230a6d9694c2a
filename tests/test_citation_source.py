"""A citation reads the file the index indexed under its path, decided by the ``files`` row's source.

An extra path folder named ``sessions`` (notes) while transcripts come from ``[sessions] dir =
"chats"``: its notes are indexed as ``sessions/<name>.md`` (source ``memory``). ``get`` of such a
citation was resolved in the transcripts folder because of the ``sessions/`` prefix: it failed
("indexed but no longer exists"), or, once ``chats/plan.md`` existed (never indexed), read THAT
file's text. The normal layouts (transcripts in the default ``sessions/``, notes in ``memory/``,
extra paths) read as before.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memory_core.apps.cli import main
from memory_core.apps.mcp_server import MemoryTools
from memory_core.config import load_settings
from memory_core.errors import PathError
from memory_core.index.pipeline import run_index
from memory_core.query.search import Searcher
from memory_core.sources.discovery import resolve_indexed_path

NOTE = "# Session notes\nThe quokka workshop session covered budgeting.\n"
DECOY = "UNRELATED draft in the chats folder\nnot the cited text\n"


def _chat(text: str) -> str:
    return json.dumps({"type": "message", "timestamp": "2026-10-21T12:30:55Z",
                       "message": {"role": "user", "content": text}}) + "\n"


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    """Notes in an extra path folder ``sessions/``, transcripts in ``chats/``, indexed by the CLI."""
    ws = tmp_path / "ws"
    for d in ("sessions", "chats", "memory"):
        (ws / d).mkdir(parents=True)
    (ws / "MEMORY.md").write_text("root\n")
    (ws / "sessions" / "plan.md").write_text(NOTE)
    (ws / "chats" / "c1.jsonl").write_text(_chat("chat about the ibis feeder"))
    (ws / "memory-core.toml").write_text(
        'provider = "none"\nsources = ["memory", "sessions"]\nextra_paths = ["sessions"]\n[sessions]\ndir = "chats"\n')
    assert main(["index", "-w", str(ws), "--no-progress"]) == 0
    return ws


def _settings(ws: Path):
    return load_settings(ws / "memory-core.toml", {"workspace": str(ws)})


def test_cli_get_of_a_note_cited_under_sessions_reads_that_note(ws: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with Searcher(_settings(ws)) as searcher:
        hit = searcher.search("quokka workshop", min_score=0)[0]
        assert (hit.citation, hit.source) == ("sessions/plan.md#L1-L2", "memory")  # its 2 lines
        got = searcher.read_file(hit.citation)
    assert (got.source, got.text) == ("memory", NOTE.rstrip("\n"))
    capsys.readouterr()
    assert main(["get", "-w", str(ws), "sessions/plan.md#L1-L3"]) == 0
    assert "quokka workshop" in capsys.readouterr().out
    # a file of that name in the transcripts folder (never indexed) is not what the citation reads
    (ws / "chats" / "plan.md").write_text(DECOY)
    assert main(["get", "-w", str(ws), "sessions/plan.md#L1-L3"]) == 0
    out = capsys.readouterr().out
    assert "quokka workshop" in out and "UNRELATED" not in out
    # the note gone: the citation says so, and still does not read the other file
    (ws / "sessions" / "plan.md").unlink()
    assert main(["get", "-w", str(ws), "sessions/plan.md#L1-L3"]) == 2
    cap = capsys.readouterr()
    assert "no longer exists" in cap.err and "UNRELATED" not in cap.out + cap.err


def test_mcp_memory_get_reads_the_indexed_note(ws: Path) -> None:
    (ws / "chats" / "plan.md").write_text(DECOY)
    tools = MemoryTools(_settings(ws))
    try:
        got = tools.get({"path": "sessions/plan.md#L1-L3"})
        assert "quokka workshop" in str(got["text"]) and "UNRELATED" not in str(got["text"])
        chat = tools.get({"path": "sessions/c1.jsonl"})  # the transcript, from the chats folder
        assert "ibis feeder" in str(chat["text"])
    finally:
        tools.close()


def test_the_transcript_in_the_other_sessions_folder_still_reads(ws: Path) -> None:
    (ws / "sessions" / "c1.jsonl").write_text(_chat("a decoy transcript nobody indexed"))
    with Searcher(_settings(ws)) as searcher:
        got = searcher.read_file("sessions/c1.jsonl#L1")
    assert got.source == "sessions" and "ibis feeder" in got.text and "decoy" not in got.text


def test_resolve_indexed_path_follows_the_rows_source(ws: Path) -> None:
    s = _settings(ws)
    assert resolve_indexed_path(s, "sessions/plan.md", source="memory") == str(ws / "sessions" / "plan.md")
    assert resolve_indexed_path(s, "sessions/c1.jsonl", source="sessions") == str(ws / "chats" / "c1.jsonl")
    assert resolve_indexed_path(s, "MEMORY.md", source="memory") == str(ws / "MEMORY.md")
    # the path-safety checks are the same whichever the source
    for bad, source in [("sessions/../../etc/passwd", "memory"), ("../outside.md", "memory"),
                        ("chats/c1.jsonl", "memory"), ("sessions/../x.jsonl", "sessions"),
                        ("sessions/a/b.jsonl", "sessions"), ("memory/a.md", "sessions"), ("", "memory"),
                        ("sessions/\x00.md", "memory")]:
        with pytest.raises(PathError):
            resolve_indexed_path(s, bad, source=source)


def test_normal_layouts_read_as_before(tmp_path: Path) -> None:
    """Transcripts in the default ``sessions/`` (with ``.md`` notes there too as an extra path),
    notes in ``memory/``, an extra path folder outside the workspace."""
    ws, extra = tmp_path / "ws", tmp_path / "elsewhere"
    (ws / "memory").mkdir(parents=True)
    (ws / "sessions").mkdir()
    extra.mkdir()
    (ws / "MEMORY.md").write_text("the heron budget is 10 EUR\n")
    (ws / "memory" / "a.md").write_text("the lynx census is in May\n")
    (ws / "sessions" / "s.jsonl").write_text(_chat("the kestrel survey starts Monday"))
    (ws / "sessions" / "notes.md").write_text("the otter notes sit beside the transcripts\n")
    (extra / "far.md").write_text("the marten log lives outside\n")
    s = load_settings(None, {"workspace": str(ws), "provider": "none", "sources": ["memory", "sessions"],
                             "extra_paths": ["sessions", str(extra)]})
    run_index(s)
    want = {"MEMORY.md": ("memory", "heron"), "memory/a.md": ("memory", "lynx"),
            "sessions/s.jsonl": ("sessions", "kestrel"), "sessions/notes.md": ("memory", "otter"),
            str(extra / "far.md"): ("memory", "marten")}
    with Searcher(s) as searcher:
        for path, (source, word) in want.items():
            got = searcher.read_file(path)
            assert got.source == source and word in got.text, path
