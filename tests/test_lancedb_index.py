"""Issue 25, past one machine: the index exported to a LanceDB table and searched from it with the
embedded index's ranking and citations (real lancedb, vectors from the OpenAI fake server)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from memory_core.apps.cli import main
from memory_core.errors import IndexMissingError, UsageError
from memory_core.export.lancedb import export_lancedb
from memory_core.index.pipeline import run_index
from memory_core.query.backends import open_searcher
from memory_core.query.lancedb import LanceSearcher
from memory_core.storage.lancedb import doc_tokens
from tests.conftest import openai_settings

QUERIES = ["postgres replication lag", "pgbackrest restore", "who is on call", "LRK-812", "Minji"]


@pytest.fixture
def exported(workspace: Path, openai_fake: Any, tmp_path: Path):
    settings = openai_settings(workspace, openai_fake, sources=["memory", "sessions"])
    run_index(settings)
    uri = str(tmp_path / "lance")
    summary = export_lancedb(settings.index_file, uri)
    return settings, uri, summary


def test_export_and_search_rank_as_the_index(exported):
    settings, uri, summary = exported
    with open_searcher(settings) as idx, LanceSearcher(settings, uri) as ls:
        assert summary.rows == ls.n_chunks == idx.status().chunks and summary.dims == 64
        # notes: one vector per chunk in both (transcript chunks also have per-exchange vectors in the
        # index, not exported: docs/lancedb-index.md)
        for q in QUERIES:
            for mode in ("hybrid", "vector", "keyword"):
                a = idx.search(q, max_results=5, min_score=0, mode=mode, sources=["memory"])
                b = ls.search(q, max_results=5, min_score=0, mode=mode, sources=["memory"])
                assert b, (q, mode)
                if mode == "vector":  # exact KNN over the same vectors, the same calibration: the same list
                    assert [r.citation for r in b] == [r.citation for r in a], q
                    assert [r.score for r in b] == pytest.approx([r.score for r in a], abs=1e-5)
                else:  # BM25 from another engine: the same best hit, close scores
                    assert b[0].citation == a[0].citation, (q, mode)
                    assert b[0].score == pytest.approx(a[0].score, abs=0.08), (q, mode)
                for r in b:
                    assert r.citation == f"{r.path}#L{r.start_line}-L{r.end_line}" and r.snippet
        only = ls.search("postgres", min_score=0, sources=["sessions"])
        assert only and {r.source for r in only} == {"sessions"}
        # a transcript chunk is dated by its earliest message, as the index dates it (not its file's mtime)
        same = idx.search("postgres", min_score=0, sources=["sessions"])
        dated = {r.citation: r.date for r in same}
        assert all(r.date and "T" in r.date and r.date == dated.get(r.citation, r.date) for r in only), \
            [(r.citation, r.date) for r in only]
        assert ls.search("xylophone zeppelin quokka") == []
        # a month nothing was written in, whose name the export does not hold: the same answer as the words alone
        assert [(r.citation, r.score) for r in ls.search("postgres replication lag in February", min_score=0)] == \
            [(r.citation, r.score) for r in ls.search("postgres replication lag", min_score=0)]
        res = ls.search_response("pgbackrest restore", max_results=2).to_dict()
        assert len(res["results"]) == 2 and {"path", "startLine", "citation", "score"} <= set(res["results"][0])
        # the metadata of the embedded index's answer (memory_core/query/answers.py), the same provider
        assert {k: res[k] for k in ("provider", "model", "backend", "mode", "fallback")} == {
            "provider": "openai", "model": "text-embedding-3-small", "backend": "builtin", "mode": "hybrid",
            "fallback": None}
        kw = ls.search_response("pgbackrest restore", max_results=80, mode="keyword", chat_type="group").to_dict()
        assert kw["mode"] == "keyword" and "clamped to 50" in kw["note"]
        assert all("Source:" not in r["snippet"] for r in kw["results"])  # auto citations: none in a group


def test_reexport_replaces_in_one_swap_and_refuses_foreign_tables(exported, workspace: Path, tmp_path: Path):
    settings, uri, _ = exported
    with LanceSearcher(settings, uri) as ls:
        v1 = ls.status()["export_id"]
    (workspace / "memory" / "zebra.md").write_text("# Zebra\n\nThe zebrafish tank pump is serviced quarterly.\n")
    run_index(settings)
    export_lancedb(settings.index_file, uri)
    with LanceSearcher(settings, uri) as ls:
        assert ls.status()["export_id"] not in ("", v1)  # a new export, built aside and renamed into place
        assert ls.search("zebrafish pump", min_score=0)[0].path == "memory/zebra.md"
    import lancedb

    other = tmp_path / "other"
    lancedb.connect(str(other)).create_table("chunks", data=[{"id": "x", "vector": [1.0, 0.0]}])
    with pytest.raises(UsageError, match="not a memory-core export"):
        export_lancedb(settings.index_file, str(other))
    with pytest.raises(IndexMissingError, match="no memory-core export"):
        LanceSearcher(settings, str(tmp_path / "nothing"))


def test_cli_export_and_search(exported, capsys, tmp_path: Path):
    settings, _, _ = exported
    ws = str(settings.workspace_dir)
    (Path(ws) / "memory-core.toml").write_text(
        f'provider = "openai"\nmodel = "text-embedding-3-small"\n[remote]\nbase_url = "{settings.remote.base_url}"\n'
        'api_key = "sk-test-key-0123456789"\ndimensions = 64\n')
    out = str(tmp_path / "cli-lance")
    assert main(["export", "-w", ws, "--format", "lancedb", out, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["format"] == "lancedb"
    assert main(["search", "-w", ws, "pgbackrest restore", "--json", "-n", "3"]) == 0
    embedded = json.loads(capsys.readouterr().out)["results"]
    assert main(["search", "-w", ws, "pgbackrest restore", "--json", "-n", "3", "--lancedb", out]) == 0
    lance = json.loads(capsys.readouterr().out)
    assert lance["results"][0]["citation"] == embedded[0]["citation"]
    assert lance["provider"] == "openai" and lance["citations"] == settings.query.citations
    assert main(["search", "-w", ws, "x", "--lancedb", str(tmp_path / "none")]) == 2
    assert "no memory-core export" in capsys.readouterr().err


def test_doc_tokens_match_lancedb_words():
    assert doc_tokens("Café_au-lait stg-db-4417 MEMORY.md") == ["cafe", "au", "lait", "stg", "db", "4417", "memory", "md"]


def _four_days(ws: Path) -> None:
    """One short transcript on each of four January 2024 days, each on its own topic."""
    topics = {"2024-01-05": "the kayak course", "2024-01-07": "a second-hand bike", "2024-01-12": "the dentist",
              "2024-01-16": "tax forms"}
    for day, topic in topics.items():
        rows = [{"type": "session", "version": 3, "id": day, "timestamp": f"{day}T09:00:00Z"},
                {"type": "message", "id": f"{day}-1", "timestamp": f"{day}T09:00:00Z",
                 "message": {"role": "user", "content": [{"type": "text", "text": f"Let me tell you about {topic}."}]}}]
        (ws / "sessions" / f"s{day}.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")


def test_an_exports_yearless_and_relative_days_resolve_on_its_own_timeline(tmp_path: Path) -> None:
    """Twentieth session's audit: `search --lancedb` read "on 1/7" and "on Friday" against today's
    clock (the index reads them against the memory's newest day), so a memory of January 2024
    answered them with nothing of that day. Both read the same days now."""
    ws = tmp_path / "ws"
    (ws / "sessions").mkdir(parents=True)
    _four_days(ws)
    from memory_core.config import load_settings

    settings = load_settings(None, {"workspace": str(ws), "provider": "none", "sources": ["sessions"]})
    run_index(settings)
    uri = str(tmp_path / "lance")
    export_lancedb(settings.index_file, uri)
    with open_searcher(settings) as idx, LanceSearcher(settings, uri) as ls:
        # both topics asked of, the day deciding which (an export's BM25 scores a word every chunk has as 0)
        for q, day in (("the bike or the dentist on 1/7?", "2024-01-07"),
                       ("the bike or the dentist on 7 January?", "2024-01-07"),
                       ("the bike or the dentist on Friday?", "2024-01-12")):  # the Friday before the 16th
            a, b = idx.search(q, max_results=2), ls.search(q, max_results=2)
            assert a and a[0].path == f"sessions/s{day}.jsonl", (q, [r.citation for r in a])
            assert b and b[0].path == a[0].path, (q, [r.citation for r in b])


def test_an_exports_named_day_adds_that_days_chunks(tmp_path: Path) -> None:
    """Twenty-second session (a helper's audit): `search --lancedb` added no candidates for a day a
    question names, so "what happened on 12 January?" (words every chunk has, or none) answered
    with nothing of that day, where the index answers with the day's transcript and note. The
    export's chunks of the day (their one exported date) are candidates now, as the index's are."""
    ws = tmp_path / "ws"
    (ws / "sessions").mkdir(parents=True)
    (ws / "memory").mkdir()
    _four_days(ws)
    (ws / "memory" / "2024-01-12.md").write_text("# Friday\n\n- Filled in the insurance claim.\n")
    from memory_core.config import load_settings

    settings = load_settings(None, {"workspace": str(ws), "provider": "none", "sources": ["memory", "sessions"]})
    run_index(settings)
    uri = str(tmp_path / "lance")
    export_lancedb(settings.index_file, uri)
    with open_searcher(settings) as idx, LanceSearcher(settings, uri) as ls:
        for q in ("what happened on 12 January 2024?", "what did we talk about on 12/01/2024?"):
            a, b = idx.search(q, max_results=4), ls.search(q, max_results=4)
            want = {"sessions/s2024-01-12.jsonl", "memory/2024-01-12.md"}
            assert {r.path for r in a} == want, (q, [r.citation for r in a])
            assert {r.path for r in b} == want, (q, [r.citation for r in b])
            assert all(r.match == "date" for r in b)


def test_an_export_prints_no_native_warnings(tmp_path: Path) -> None:
    """LanceDB's native code logged "WARN lance::dataset::write::insert] No existing dataset at ...,
    it will be created" twice on every export (a helper's README audit): memory-core sets
    LANCEDB_LOG to errors unless the user set it."""
    import os
    import subprocess
    import sys

    ws = tmp_path / "ws"
    (ws / "sessions").mkdir(parents=True)
    _four_days(ws)
    env = {k: v for k, v in os.environ.items() if k != "LANCEDB_LOG"}
    run = [sys.executable, "-m", "memory_core.apps.cli"]
    subprocess.run([*run, "index", "-w", str(ws), "--provider", "none", "--sessions", "--engine", "local",
                    "--no-progress"], check=True, env=env, capture_output=True)
    out = subprocess.run([*run, "export", "-w", str(ws), "--format", "lancedb", str(tmp_path / "lance")],
                         env=env, capture_output=True, text=True)
    assert out.returncode == 0 and "exported" in out.stdout, out
    assert "WARN" not in out.stderr and "No existing dataset" not in out.stderr, out.stderr
    shown = subprocess.run([*run, "export", "-w", str(ws), "--format", "lancedb", str(tmp_path / "again")],
                           env={**env, "LANCEDB_LOG": "warn"}, capture_output=True, text=True)
    assert "No existing dataset" in shown.stderr  # the user's own setting wins
