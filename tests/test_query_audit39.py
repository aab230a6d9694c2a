"""The thirty-ninth session's audit of the query side (F) and of its own new code (G), the parts
about readers: a query or path that is not well-formed Unicode, an index of a newer memory-core met
by `export`, and what a reader says when it is interrupted."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import apsw
import pytest

from memory_core.apps import cli
from memory_core.config import load_settings
from memory_core.embeddings.local import local_model_available
from memory_core.errors import IndexNewerError, PathError
from memory_core.index.pipeline import run_index
from memory_core.query.search import Searcher
from memory_core.storage.store import SCHEMA_VERSION, read_meta, write_meta

ROOT = Path(__file__).resolve().parent.parent
needs_model = pytest.mark.skipif(not local_model_available(), reason="the local model is not installed")


@pytest.fixture(scope="module")
def local_ws(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import shutil

    from tests.conftest import EXAMPLES

    ws = tmp_path_factory.mktemp("q39") / "ws"
    shutil.copytree(EXAMPLES / "workspace", ws, ignore=shutil.ignore_patterns(".memory-core"))
    run_index(load_settings(None, {"workspace": str(ws), "provider": "local"}, env={}))
    return ws


def _cli(ws: Path, *argv: str) -> subprocess.CompletedProcess[bytes]:
    """The CLI with arguments as bytes: a byte that is not UTF-8 reaches Python as a lone surrogate."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMORY_CORE_")}
    return subprocess.run([sys.executable.encode(), b"-m", b"memory_core.apps.cli", *(a.encode("utf-8", "surrogateescape")
                                                                                     for a in argv), b"-w", bytes(ws)],
                          capture_output=True, env=dict(env, PYTHONPATH=str(ROOT)), timeout=300)


@needs_model
def test_a_query_with_a_byte_that_is_not_utf8_is_answered(local_ws: Path) -> None:
    """From a Latin-1 terminal: before, the local tokenizer's TypeError, a traceback, exit 1."""
    got = _cli(local_ws, "search", "caf\udce9 postgres replication")
    assert got.returncode == 0, got.stderr.decode()
    assert b"Traceback" not in got.stderr and b"#L" in got.stdout


def test_a_path_with_a_byte_that_is_not_utf8_is_not_an_indexed_file(local_ws: Path) -> None:
    """Before: UnicodeEncodeError from SQLite, a traceback, exit 1."""
    got = _cli(local_ws, "get", "memory/caf\udce9.md")
    assert got.returncode == 2 and b"Traceback" not in got.stderr, got.stderr.decode()
    assert b"not an indexed file" in got.stderr


@needs_model
def test_the_api_answers_lone_surrogates_as_the_library(local_ws: Path) -> None:
    """Before: a raw TypeError (search) and UnicodeEncodeError (read) out of the API."""
    s = load_settings(None, {"workspace": str(local_ws), "provider": "local"}, env={})
    with Searcher(s) as se:
        assert se.search("postgres \ud800 replication lag", min_score=0)
        assert se.search("\udce9", min_score=0) is not None
        with pytest.raises(PathError, match="not an indexed file"):
            se.read_file("memory/\ud800.md")


def test_export_refuses_an_index_of_a_newer_memory_core(workspace: Path, tmp_path: Path) -> None:
    """Audit G: `export` read such an index as current (exit 0) where search, get and index refuse."""
    s = load_settings(None, {"workspace": str(workspace), "provider": "none"}, env={})
    run_index(s)
    conn = apsw.Connection(str(s.index_file))
    meta = read_meta(conn)
    assert meta is not None
    meta["schema_version"] = SCHEMA_VERSION + 1
    write_meta(conn, meta)
    conn.close()
    from memory_core.export.files import export_index

    out = tmp_path / "out.jsonl"
    with pytest.raises(IndexNewerError):
        export_index(s.index_file, out, fmt="jsonl")
    assert not out.exists()
    assert cli.main(["export", "-w", str(workspace), str(out)]) == 2 and not out.exists()


@pytest.mark.parametrize("command,said", [("search", "memory-core: interrupted\n"),
                                          ("index", "memory-core: interrupted; the live index was left as it was\n")])
def test_an_interrupted_reader_does_not_speak_of_the_live_index(command: str, said: str, monkeypatch: pytest.MonkeyPatch,
                                                                capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """Audit G: Ctrl-C in `search`, `get` or `status` said the live index was left as it was, as if
    they could have changed it; a writer still says so."""
    def stopped(args: object) -> int:
        raise KeyboardInterrupt

    monkeypatch.setitem(cli.COMMANDS, command, stopped)
    assert cli.main([command, "-w", str(tmp_path), *(["query"] if command == "search" else [])]) == 130
    assert capsys.readouterr().err == said


def test_a_query_only_of_a_day_claims_no_fallback(workspace: Path, openai_fake: object) -> None:
    """Audit F: a query only of the day it names (nothing left to embed) said
    `fallback: {to: keyword, reason: the query could not be embedded}` though the provider was up,
    and one of a day memory holds nothing of said `nothing scored at least 0.15`, though nothing
    was scored."""
    from tests.conftest import openai_settings

    s = openai_settings(workspace, openai_fake, sources=["memory", "sessions"])
    run_index(s)
    with Searcher(s) as se:
        dated = se.search_response("2026-11-02").to_dict()
        assert dated["results"] and {r["match"] for r in dated["results"]} == {"date"}
        assert dated["fallback"] is None
        words = se.search_response("rate limit headers on 2026-11-02").to_dict()
        assert words["results"] and words["fallback"] is None
    plain = workspace.parent / "plain"  # notes of no day at all
    plain.mkdir()
    (plain / "MEMORY.md").write_text("# Memory\n\nThe team prefers green tea.\n")
    s = openai_settings(plain, openai_fake)
    run_index(s)
    with Searcher(s) as se:
        for q in ("yesterday", "last week"):
            none = se.search_response(q).to_dict()
            assert not none["results"] and none["fallback"] is None
            assert "names a day and nothing else" in none["note"] and "scored" not in none["note"]


@pytest.mark.parametrize("query,day", [
    ("what did we plan on the 31st of February?", None),
    ("on the thirtieth of February", None),
    ("February the thirtieth", None),
    ("the thirty first of April", None),
    ("on the 31st of January", (1, 31)),
    ("on the 29th of February", (2, 29)),
    ("on the 12th", (11, 12)),
])
def test_an_impossible_day_written_as_an_ordinal_is_no_day(query: str, day: tuple[int, int] | None) -> None:
    """Audit F: 'the 31st of February' was read as the latest 31st (2026-10-31) and 'the thirtieth of
    February' as the latest 30th, where '31 February' is rightly no day."""
    import datetime as dt

    from memory_core.query.dates import query_date_range

    got = query_date_range(query, anchor=lambda: dt.date(2026, 11, 20))
    assert (None if got is None else (got.start.month, got.start.day)) == day


def test_get_of_a_day_that_does_not_exist_or_a_huge_path_is_refused_briefly(workspace: Path) -> None:
    """Audit F: `memory/9999-99-99.md` read as an empty daily note (its digits had the shape of a
    day), and a 100,000-character path was echoed whole in the error, into an agent's context."""
    s = load_settings(None, {"workspace": str(workspace), "provider": "none"}, env={})
    run_index(s)
    with Searcher(s) as se:
        assert se.read_file("memory/2031-02-28.md").text == ""  # a day to come: an empty daily note
        for bad in ("memory/9999-99-99.md", "memory/2026-02-30.md"):
            with pytest.raises(PathError, match="not an indexed file"):
                se.read_file(bad)
        for huge in ("memory/" + "x" * 100_000 + ".md", "../" + "y" * 100_000):
            with pytest.raises(PathError) as caught:
                se.read_file(huge)
            assert len(str(caught.value)) < 400, str(caught.value)[:300]
