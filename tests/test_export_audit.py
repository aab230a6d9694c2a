"""Reading the memory back out (the thirteenth session's audit, docs/reliability.md): the export to
Parquet / JSON Lines / LanceDB and `search --lancedb`, each test on real SQLite and real LanceDB."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from memory_core.apps.cli import main
from memory_core.config import load_settings
from memory_core.index.pipeline import run_index
from tests.conftest import openai_settings


@pytest.fixture
def keyword_ws(tmp_path: Path) -> Path:
    """A small keyword-only workspace (provider none) with its index built."""
    ws = tmp_path / "kw"
    (ws / "memory").mkdir(parents=True)
    (ws / "memory" / "plan.md").write_text(
        "# Plan\n\nWe will migrate the billing service to Kubernetes next sprint.\n"
        "The decision was made by the platform team.\n")
    (ws / "memory" / "food.md").write_text("# Food\n\nThe best restaurant near the office is Tasca do Chico.\n")
    (ws / "memory-core.toml").write_text('provider = "none"\n')
    run_index(load_settings(None, {"workspace": str(ws), "provider": "none"}))
    return ws


@pytest.fixture
def vector_ws(workspace: Path, openai_fake: Any) -> Path:
    """The example workspace indexed with 64-d vectors (the OpenAI fake), its config written for the CLI."""
    settings = openai_settings(workspace, openai_fake)
    (workspace / "memory-core.toml").write_text(
        f'provider = "openai"\nmodel = "text-embedding-3-small"\n[remote]\nbase_url = "{settings.remote.base_url}"\n'
        'api_key = "sk-test-key-0123456789"\ndimensions = 64\n')
    run_index(settings)
    return workspace


def test_e8b_a_keyword_only_export_says_it_has_no_vectors(keyword_ws: Path, tmp_path: Path, capsys) -> None:
    for out in (str(tmp_path / "x.parquet"), str(tmp_path / "x.jsonl")):
        assert main(["export", "-w", str(keyword_ws), out, "--json"]) == 0
        got = json.loads(capsys.readouterr().out)
        assert got["vectors"] is False and got["dims"] is None, got


SLOW_EXPORT = """
import sys, time
import memory_core.export.files as f
orig = f._batches
def slow(*a, **k):  # a large index: many more row groups still to write (timing only)
    for b in orig(*a, **k):
        yield b
        print("wrote a batch", flush=True)
        time.sleep(60)
f._batches = slow
from memory_core.apps.cli import main
sys.exit(main(sys.argv[1:]))
"""


def _stopped_export(args: list[str], tmp_path: Path) -> tuple[int, str]:
    """Run ``memory-core ARGS`` (its batches slowed down), SIGTERM it after its first batch."""
    import os
    import signal
    import subprocess
    import sys

    script = tmp_path / "slow_export.py"
    script.write_text(SLOW_EXPORT)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    proc = subprocess.Popen([sys.executable, str(script), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)
    assert proc.stdout is not None
    assert proc.stdout.readline().startswith("wrote a batch")
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    return proc.returncode, err


def test_e4a_sigterm_during_an_export_leaves_no_temp_file(keyword_ws: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    rc, err = _stopped_export(["export", "-w", str(keyword_ws), str(out / "chunks.parquet"), "--json"], tmp_path)
    assert rc == 1 and "Traceback" not in err and "stopped by SIGTERM" in err, err
    assert list(out.iterdir()) == []  # before: .chunks.parquet.tmp-PID-xxxx (0600, the memory's text)


def test_e6_an_export_never_replaces_a_users_own_terms_table(keyword_ws: Path, tmp_path: Path, capsys) -> None:
    import lancedb

    uri = tmp_path / "mydb"
    lancedb.connect(str(uri)).create_table("terms", data=[{"term": "glossary entry", "definition": "the user's own"}])
    assert main(["export", "-w", str(keyword_ws), "--format", "lancedb", str(uri)]) == 2
    assert "'terms' that is not a memory-core export" in capsys.readouterr().err
    t = lancedb.connect(str(uri)).open_table("terms")
    assert t.schema.names == ["term", "definition"] and t.count_rows() == 1
    assert main(["export", "-w", str(keyword_ws), "--format", "lancedb", str(uri), "--force"]) == 0
    assert main(["export", "-w", str(keyword_ws), "--format", "lancedb", str(uri)]) == 0  # now an earlier export


def test_e8c_no_vectors_is_honoured_by_the_lancedb_export(vector_ws: Path, tmp_path: Path, capsys) -> None:
    import lancedb

    uri = str(tmp_path / "ldb")
    assert main(["export", "-w", str(vector_ws), "--format", "lancedb", "--no-vectors", uri, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["vectors"] is False
    assert "vector" not in lancedb.connect(uri).open_table("chunks").schema.names
    # its search answers from the words alone
    assert main(["search", "-w", str(vector_ws), "pgbackrest restore", "--lancedb", uri, "--json"]) == 0
    res = json.loads(capsys.readouterr().out)["results"]
    assert res and all(r["match"] == "keyword" for r in res), res


def test_e5_search_lancedb_refuses_foreign_tables_and_answers_an_empty_export(tmp_path: Path, capsys) -> None:
    import lancedb

    ws = tmp_path / "empty"
    (ws / "memory").mkdir(parents=True)
    (ws / "memory-core.toml").write_text('provider = "none"\n')
    assert main(["index", "-w", str(ws)]) == 0
    empty = str(tmp_path / "empty-export")
    assert main(["export", "-w", str(ws), "--format", "lancedb", empty]) == 0
    capsys.readouterr()
    # the export of an empty index: no results (before: a traceback, exit 1)
    assert main(["search", "-w", str(ws), "hello", "--lancedb", empty]) == 0
    assert capsys.readouterr().out.strip() == "no results"
    # a LanceDB database whose chunks/terms are someone else's: one line, exit 2
    foreign = tmp_path / "foreign"
    db = lancedb.connect(str(foreign))
    db.create_table("chunks", data=[{"id": "a", "body": "hello world", "vector": [0.1, 0.2]}])
    db.create_table("terms", data=[{"term": "hello", "n": 1}])
    assert main(["search", "-w", str(ws), "hello", "--lancedb", str(foreign)]) == 2
    err = capsys.readouterr().err
    assert "not a memory-core export" in err and len(err.strip().splitlines()) == 1, err
    # a local path that does not exist: an error, and no folder made
    typo = tmp_path / "typo"
    assert main(["search", "-w", str(ws), "hello", "--lancedb", str(typo)]) == 2
    assert "no memory-core export" in capsys.readouterr().err and not typo.exists()


def test_e8d_search_lancedb_on_a_file_says_it_is_not_an_export_folder(keyword_ws: Path, tmp_path: Path,
                                                                       capsys) -> None:
    out = str(tmp_path / "x.parquet")
    assert main(["export", "-w", str(keyword_ws), out]) == 0
    capsys.readouterr()
    assert main(["search", "-w", str(keyword_ws), "billing", "--lancedb", out]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"memory-core: error: {out} is not a LanceDB export folder (it is a file; `memory-core export" \
                  " --format lancedb DIR` writes a folder)", err


def export_then_stop_the_next(keyword_ws: Path, uri: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Export the workspace to ``uri``, add a note (zebra.md) and index it, then export again and
    stop that export with Ctrl-C while the full-text index is being built."""
    from lancedb.table import LanceTable

    ws = str(keyword_ws)
    assert main(["export", "-w", ws, "--format", "lancedb", uri]) == 0
    (keyword_ws / "memory" / "zebra.md").write_text("# Zebra\n\nThe zebrafish tank pump is serviced quarterly.\n")
    assert main(["index", "-w", ws]) == 0
    real = LanceTable.create_index

    def ctrl_c(self: Any, *a: Any, **k: Any) -> Any:
        raise KeyboardInterrupt

    monkeypatch.setattr(LanceTable, "create_index", ctrl_c)
    assert main(["export", "-w", ws, "--format", "lancedb", uri]) == 130
    monkeypatch.setattr(LanceTable, "create_index", real)


def test_e4b_a_stopped_lancedb_export_leaves_the_previous_one_whole(keyword_ws: Path, tmp_path: Path, capsys,
                                                                    monkeypatch) -> None:
    import lancedb

    ws, uri = str(keyword_ws), str(tmp_path / "ldb")
    export_then_stop_the_next(keyword_ws, uri, monkeypatch)
    capsys.readouterr()
    # the previous export, whole: searched as before (before: a traceback, exit 1, until a re-export)
    assert main(["search", "-w", ws, "billing migrate", "--lancedb", uri, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["results"][0]["path"] == "memory/plan.md"
    assert main(["search", "-w", ws, "zebrafish", "--lancedb", uri]) == 0
    assert capsys.readouterr().out.strip() == "no results"
    # no staging left (the lock file of exports into the folder stays, empty)
    assert sorted(p.name for p in Path(uri).iterdir()) == [".export.lock", "chunks.lance", "terms.lance"]
    # the chunks table replaced in place, its full-text index not built (what a stop did before, and
    # what object storage sees during an export): the previous whole version answers
    from datetime import timedelta

    db = lancedb.connect(uri)
    db.create_table("chunks", data=db.open_table("chunks").to_arrow(), mode="overwrite")
    assert main(["search", "-w", ws, "billing migrate", "--lancedb", uri, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["results"][0]["path"] == "memory/plan.md"
    # and with no whole version left (the earlier ones removed): incomplete, one line, exit 2
    db.open_table("chunks").optimize(cleanup_older_than=timedelta(0))
    assert main(["search", "-w", ws, "billing", "--lancedb", uri]) == 2
    err = capsys.readouterr().err
    assert "is incomplete" in err and len(err.strip().splitlines()) == 1, err


def readers_through_exports(keyword_ws: Path, uri: str, exports: int) -> None:
    """Two readers search the LanceDB export at ``uri`` while it is exported again ``exports`` times
    back to back: every search answers, and finds the one note."""
    import threading

    from memory_core.export.lancedb import export_lancedb
    from memory_core.query.lancedb import LanceSearcher

    settings = load_settings(None, {"workspace": str(keyword_ws), "provider": "none"})
    export_lancedb(settings.index_file, uri)
    errors: list[BaseException] = []
    answers: list[int] = []
    done = threading.Event()

    def read() -> None:
        while not done.is_set():
            try:
                with LanceSearcher(settings, uri) as ls:
                    answers.append(len(ls.search("billing migrate", min_score=0, mode="keyword")))
            except BaseException as exc:  # noqa: BLE001 - any failure of a reader is the bug
                errors.append(exc)
                return

    readers = [threading.Thread(target=read) for _ in range(2)]
    for t in readers:
        t.start()
    try:
        for _ in range(exports):
            export_lancedb(settings.index_file, uri)
    finally:
        done.set()
        for t in readers:
            t.join()
    assert not errors, errors[:1]
    assert answers and all(a == 1 for a in answers)


def test_e4b_readers_see_a_whole_export_while_it_is_replaced(keyword_ws: Path, tmp_path: Path) -> None:
    readers_through_exports(keyword_ws, str(tmp_path / "ldb"), 6)


def test_e7_a_reexport_keeps_no_earlier_version_on_disk(tmp_path: Path) -> None:
    import lancedb

    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    (ws / "memory" / "ops.md").write_text("# Ops\n\nthe wifi password is\nSup3rSecretWifi99\n")
    (ws / "memory" / "other.md").write_text("# Other\n\nnothing here\n")
    (ws / "memory-core.toml").write_text('provider = "none"\n')
    uri = tmp_path / "ldb"
    assert main(["index", "-w", str(ws)]) == 0
    assert main(["export", "-w", str(ws), "--format", "lancedb", str(uri)]) == 0
    (ws / "memory" / "ops.md").unlink()  # the note deleted (or its secret masked since)
    assert main(["index", "-w", str(ws)]) == 0
    assert main(["export", "-w", str(ws), "--format", "lancedb", str(uri)]) == 0
    assert not [p for p in uri.rglob("*") if p.is_file() and b"Sup3rSecretWifi99" in p.read_bytes()]
    db = lancedb.connect(str(uri))
    for name in ("chunks", "terms"):
        assert len(db.open_table(name).list_versions()) == 1, name  # nothing older to check out


def test_e2_search_lancedb_stems_as_the_index_does(keyword_ws: Path, tmp_path: Path, capsys) -> None:
    ws, uri = str(keyword_ws), str(tmp_path / "ldb")
    assert main(["export", "-w", ws, "--format", "lancedb", uri]) == 0
    capsys.readouterr()
    for q, path in (("migrating", "memory/plan.md"), ("decisions", "memory/plan.md"),
                    ("restaurants", "memory/food.md")):
        got = []
        for extra in ([], ["--lancedb", uri]):
            assert main(["search", "-w", ws, q, "--mode", "keyword", "--json", *extra]) == 0
            got.append([(r["citation"], round(r["score"], 2)) for r in json.loads(capsys.readouterr().out)["results"]])
        assert got[0] and got[0][0][0].startswith(path + "#") and got[1] == got[0], (q, got)
    from memory_core.storage.lancedb import index_words

    # the export's words are the index's FTS5 tokens: Porter stems, diacritics removed, CJK split
    assert index_words("Migrating the Café decisions 金银") == ["migrat", "the", "cafe", "decis", "金", "银"]


def test_e3_search_lancedb_places_results_by_their_files_relevance_as_the_index_does(workspace: Path,
                                                                                      openai_fake: Any,
                                                                                      tmp_path: Path) -> None:
    from memory_core.export.lancedb import export_lancedb
    from memory_core.query.backends import open_searcher
    from memory_core.query.lancedb import LanceSearcher

    # no part vectors (not exported: docs/lancedb-index.md), so the two paths hold the same vectors
    settings = openai_settings(workspace, openai_fake, sources=["memory"],
                               chunking={"note_windows": False, "exchange_vectors": False})
    run_index(settings)
    uri = str(tmp_path / "ldb")
    export_lancedb(settings.index_file, uri)
    placed = 0
    with open_searcher(settings) as idx, LanceSearcher(settings, uri) as ls:
        for q in ("staff track", "search service", "redis", "postgres replication lag", "who is on call"):
            a = idx.retrieve(q, 24)
            b = ls.retrieve(q, 24)
            assert set(b.file_cosines) == set(a.file_cosines), q  # before: {} on the LanceDB side
            for path, cos in a.file_cosines.items():
                assert b.file_cosines[path] == pytest.approx(cos, abs=1e-5), (q, path)
            assert b.multi_chunk_share == pytest.approx(a.multi_chunk_share), q
            placed += bool(a.file_cosines)
            ra = [r.citation for r in idx.search(q, max_results=6, mode="hybrid")]
            rb = [r.citation for r in ls.search(q, max_results=6, mode="hybrid")]
            assert ra[:1] == rb[:1], (q, ra, rb)
    assert placed >= 3  # the file support did apply


def _export_ids(uri: str) -> set[str]:
    """The export ids of the folder's two tables: one id when they are of one export."""
    import lancedb

    from memory_core.storage.lancedb import EXPORT_ID

    db = lancedb.connect(uri)
    return {(db.open_table(name).schema.metadata or {})[EXPORT_ID.encode()].decode() for name in ("chunks", "terms")}


def _hold(lock: Path) -> int:
    """An exclusive flock on ``lock``, as another export holding the folder does."""
    import fcntl
    import os

    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    os.write(fd, b"pid 4242 on elsewhere since 2026-01-01T00:00:00")
    return fd


def test_f7_a_second_lancedb_export_to_one_folder_waits_or_says_who_holds_it(keyword_ws: Path, tmp_path: Path,
                                                                              capsys) -> None:
    """F7 (audit 23): two exports to one folder at once swapped their tables in turn: one failed
    (``No such file or directory (.../terms.lance)``) or both exited 0 leaving ``chunks`` of one
    export and ``terms`` of the other (every search then ``incomplete``, exit 2). An export now holds
    the folder's lock (``.export.lock``) throughout; another waits for it (``lock.timeout_s``) or,
    with ``lock.wait = false``, fails at once naming its holder, as a second index run does."""
    import os
    import threading
    import time

    from memory_core.export.lancedb import export_lancedb

    ws, uri = str(keyword_ws), str(tmp_path / "ldb")
    index = load_settings(None, {"workspace": ws, "provider": "none"}).index_file
    assert main(["export", "-w", ws, "--format", "lancedb", uri]) == 0
    before = _export_ids(uri)
    assert len(before) == 1
    capsys.readouterr()

    fd = _hold(Path(uri) / ".export.lock")
    try:
        # lock.wait = false: one line naming the holder, exit 1, the folder's export as it was
        (keyword_ws / "memory-core.toml").write_text('provider = "none"\n[lock]\nwait = false\n')
        assert main(["export", "-w", ws, "--format", "lancedb", uri]) == 1
        err = capsys.readouterr().err.strip()
        assert err == f"memory-core: error: another export is writing {uri} (pid 4242 on elsewhere since" \
                      " 2026-01-01T00:00:00)", err
        assert _export_ids(uri) == before
        # waiting (the default): the export starts once the holder lets go
        done: list[Any] = []
        t = threading.Thread(target=lambda: done.append(export_lancedb(index, uri, timeout_s=30)))
        t0 = time.monotonic()
        t.start()
        time.sleep(1.0)
        assert not done and _export_ids(uri) == before, "an export went on while another held the folder"
    finally:
        os.close(fd)
    t.join(30)
    assert done and done[0].rows > 0 and time.monotonic() - t0 >= 1.0
    after = _export_ids(uri)
    assert len(after) == 1 and after != before
    assert main(["search", "-w", ws, "billing migrate", "--lancedb", uri]) == 0


def test_f7_two_lancedb_exports_racing_leave_one_whole_export(keyword_ws: Path, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    """Two exports at once (threads): the first stops between renaming its ``terms`` and its ``chunks``
    into place until the second is done or 2 s have passed. Before: the second swapped its tables
    meanwhile, the first then put its ``chunks`` beside the second's ``terms`` (or failed on a table
    the second had moved aside). Now the second waits for the first: both finish, one whole export."""
    import os
    import threading

    from memory_core.export.lancedb import export_lancedb

    ws, uri = str(keyword_ws), str(tmp_path / "ldb")
    index = load_settings(None, {"workspace": ws, "provider": "none"}).index_file
    assert main(["export", "-w", ws, "--format", "lancedb", uri]) == 0
    real = os.rename
    second_done, first_swapping = threading.Event(), threading.Event()

    def rename(a: Any, b: Any, *k: Any, **kw: Any) -> None:
        real(a, b, *k, **kw)
        if threading.current_thread().name == "first" and str(b) == os.path.join(uri, "terms.lance"):
            first_swapping.set()
            second_done.wait(2.0)

    monkeypatch.setattr(os, "rename", rename)
    errors: list[BaseException] = []

    def run(after: threading.Event | None) -> None:
        try:
            if after is not None:
                after.wait(10)
            export_lancedb(index, uri)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            if after is not None:
                second_done.set()

    first = threading.Thread(target=run, args=(None,), name="first")
    second = threading.Thread(target=run, args=(first_swapping,), name="second")
    first.start()
    second.start()
    first.join(60)
    second.join(60)
    assert errors == [], errors
    assert len(_export_ids(uri)) == 1, "chunks and terms of two different exports"
    capsys.readouterr()
    assert main(["search", "-w", ws, "billing migrate", "--lancedb", uri]) == 0
    assert sorted(p.name for p in Path(uri).iterdir()) == [".export.lock", "chunks.lance", "terms.lance"]


def test_f7_a_symlinked_export_lock_is_refused(keyword_ws: Path, tmp_path: Path, capsys) -> None:
    """The export folder's lock is never opened through a symlink (docs/reliability.md): refused,
    exit 2, the link's target untouched and the folder's export as it was."""
    ws, uri = str(keyword_ws), str(tmp_path / "ldb")
    assert main(["export", "-w", ws, "--format", "lancedb", uri]) == 0
    before = _export_ids(uri)
    target = tmp_path / "precious.txt"
    target.write_text("keep me\n")
    lock = Path(uri) / ".export.lock"
    lock.unlink(missing_ok=True)
    lock.symlink_to(target)
    capsys.readouterr()
    assert main(["export", "-w", ws, "--format", "lancedb", uri]) == 2
    err = capsys.readouterr().err
    assert "symbolic link" in err and len(err.strip().splitlines()) == 1, err
    assert target.read_text() == "keep me\n" and _export_ids(uri) == before
