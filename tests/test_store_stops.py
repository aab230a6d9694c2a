"""A stop (Ctrl-C, SIGTERM) of `memory store`, `memory forget` and `eval --per-query` (docs/reliability.md,
"A stop lost on the way", rows S1 and S2).

The CLI runs in a subprocess through the stop audits' wrapper (tests/stopper.py), which sends the
process its own signal at a chosen moment: at one of the memory store's failpoints
(memory_core/failpoints.py), before a function (``STOP_TARGET``), while LanceDB commits
(``STOP_IN_COMMIT``, row L12), or as the eval's per-query file writes a given row (``STOP_ROW``);
as a Ctrl-C or a SIGTERM would land there."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from memory_core.config import load_settings
from memory_core.notes import memory_store
from memory_core.notes.memory_store import MemoryStore
from tests.stopper import EXIT, WORD, cli, last, write_stopper

SIGS = ["INT", "TERM"]


def crossed(points: list[str]) -> list[Any]:
    """(signal, point) pairs, every one: the default run takes each signal and each point once
    (INT at the first point, TERM at the second), the other two (12-21 s each) run with `-m slow`."""
    return [(sig, point) if i == j else pytest.param(sig, point, marks=pytest.mark.slow)
            for i, sig in enumerate(SIGS) for j, point in enumerate(points)]


@pytest.fixture
def stopper(tmp_path: Path) -> Path:
    return write_stopper(tmp_path)


def _files_holding(folder: Path, needle: bytes) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file() and needle in p.read_bytes())


# -- memory store / memory forget ------------------------------------------------------------------

@pytest.fixture
def ws(tmp_path: Path, openai_fake: Any) -> Path:
    """A workspace whose memory store embeds with the OpenAI fake (64-d)."""
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "memory-core.toml").write_text(
        f'workspace = "{ws}"\nprovider = "openai"\nmodel = "text-embedding-3-small"\n[remote]\nbase_url = "{openai_fake.base_url}"\n'
        'api_key = "sk-test-key-0123456789"\ndimensions = 64\nbackoff_initial_s = 0.01\nbackoff_max_s = 0.05\n'
        "max_attempts = 2\ntimeout_s = 30\n")
    return ws


def _memories(ws: Path) -> dict[str, str]:
    res = cli(["memory", "list", "-w", str(ws), "--json"])
    assert res.returncode == 0, res.stderr
    return {m["id"]: m["text"] for m in json.loads(res.stdout)["memories"]}


def _store(ws: Path, text: str) -> str:
    res = cli(["memory", "store", "-w", str(ws), "--json", text])
    assert res.returncode == 0, res.stderr
    return str(json.loads(res.stdout)["id"])


def _store_path(ws: Path) -> Path:
    return ws / ".memory-core" / "lancedb"


def _marker(ws: Path) -> Path:
    return _purge_marker(_store_path(ws))


def _purge_marker(path: Path) -> Path:
    return path.with_name(f".{path.name}.purge")


ROUTER = "The wifi router is in the hallway"


@pytest.mark.parametrize(("sig", "point"), crossed(["store-committed", "store-indexed"]))
def test_a_store_stopped_after_its_commit_says_the_memory_is_stored(ws: Path, stopper: Path, sig: str,
                                                                    point: str) -> None:
    """Before: `interrupted; the live index was left as it was` (a SIGTERM: `stopped by SIGTERM; ...`),
    though `memory list` showed the memory (a retry stored it again, as an update)."""
    first = _store(ws, "The spare key is under the blue flowerpot")
    res = cli(["memory", "store", "-w", str(ws), ROUTER], stopper, STOP_SIG=sig, STOP_FP=point)
    assert res.returncode == EXIT[sig], (res.stdout, res.stderr)
    stored = _memories(ws)
    new = [mid for mid, text in stored.items() if text == ROUTER]
    assert len(new) == 1 and set(stored) == {first, new[0]}, stored
    assert last(res.stderr) == f"memory-core: {WORD[sig]} after storing memory {new[0]} (it is stored)", res.stderr
    assert "left as it was" not in res.stderr
    # the store is whole: the memory is found by its words, and the next store works
    rec = cli(["memory", "recall", "-w", str(ws), "--json", "--mode", "keyword", "hallway router"])
    assert rec.returncode == 0 and json.loads(rec.stdout)["results"][0]["id"] == new[0], rec.stdout
    assert _store(ws, ROUTER) == new[0]  # a retry is an update of it, not a second memory
    assert len(_memories(ws)) == 2


@pytest.mark.parametrize("sig", SIGS)
def test_the_first_store_stopped_after_its_table_went_into_place_says_it_is_stored(ws: Path, stopper: Path,
                                                                                   sig: str) -> None:
    """The first memory's commit is its table's rename into place; the stop lands as the store then
    opens it (its first `_connect`)."""
    res = cli(["memory", "store", "-w", str(ws), ROUTER], stopper, STOP_SIG=sig,
               STOP_TARGET="memory_core.notes.memory_store:MemoryStore._connect")
    assert res.returncode == EXIT[sig], (res.stdout, res.stderr)
    stored = _memories(ws)
    assert list(stored.values()) == [ROUTER], stored
    assert last(res.stderr) == f"memory-core: {WORD[sig]} after storing memory {next(iter(stored))} (it is stored)"


@pytest.mark.parametrize("sig", SIGS)
def test_a_store_stopped_before_its_commit_still_says_nothing_was_stored(ws: Path, stopper: Path, sig: str) -> None:
    """The first memory's table written aside, not yet renamed into place (``store-created``): as before."""
    res = cli(["memory", "store", "-w", str(ws), ROUTER], stopper, STOP_SIG=sig, STOP_FP="store-created")
    assert res.returncode == EXIT[sig], (res.stdout, res.stderr)
    assert "left as it was" in last(res.stderr) and " after " not in last(res.stderr), res.stderr
    assert _memories(ws) == {}


@pytest.mark.parametrize(("sig", "point"), crossed(["store-forget-deleted", "store-indexed"]))
def test_a_forget_stopped_after_its_delete_says_it_is_deleted_and_its_text_leaves_the_disk(
        ws: Path, stopper: Path, sig: str, point: str) -> None:
    """``store-forget-deleted``: the delete committed, the text not yet rewritten out of the store's
    files; ``store-indexed``: rewritten, the old versions not yet removed. Before: `interrupted; the
    live index was left as it was`, the memory gone (a retry: `no memory with id ...`), the purge
    marker left and the text still in the table's files until some later write."""
    gone = _store(ws, "Dana's alarm code is tango-7-lima-9-kilo")
    kept = _store(ws, "The team offsite is at Lakeview Lodge")
    assert _files_holding(_store_path(ws), b"tango-7-lima")
    res = cli(["memory", "forget", "-w", str(ws), gone], stopper, STOP_SIG=sig, STOP_FP=point)
    assert res.returncode == EXIT[sig], (res.stdout, res.stderr)
    assert last(res.stderr) == f"memory-core: {WORD[sig]} after deleting memory {gone} (it is deleted)", res.stderr
    assert "left as it was" not in res.stderr
    assert set(_memories(ws)) == {kept}
    # the purge the forget promises was finished before the stop went on
    assert _files_holding(_store_path(ws), b"tango-7-lima") == []
    assert not _marker(ws).exists()
    rec = cli(["memory", "recall", "-w", str(ws), "--json", "--mode", "keyword", "Lakeview"])
    assert rec.returncode == 0 and json.loads(rec.stdout)["results"][0]["id"] == kept, rec.stdout


@pytest.mark.parametrize("sig", SIGS)
def test_a_stop_while_lancedb_commits_a_store_is_said_after_it(ws: Path, stopper: Path, sig: str) -> None:
    """The stop lands while the main thread waits for LanceDB's merge (its sync call waits on its own
    event loop's thread), and the commit goes in. Before: the wait ended at the stop, the CLI said
    `interrupted; the live index was left as it was`, and `memory list` showed the memory stored."""
    first = _store(ws, "The spare key is under the blue flowerpot")
    res = cli(["memory", "store", "-w", str(ws), ROUTER], stopper, STOP_SIG=sig, STOP_IN_COMMIT="merge")
    assert res.returncode == EXIT[sig], (res.stdout, res.stderr)
    stored = _memories(ws)
    new = [mid for mid, text in stored.items() if text == ROUTER]
    assert len(new) == 1 and set(stored) == {first, new[0]}, stored
    assert last(res.stderr) == f"memory-core: {WORD[sig]} after storing memory {new[0]} (it is stored)", res.stderr
    rec = cli(["memory", "recall", "-w", str(ws), "--json", "--mode", "keyword", "hallway router"])
    assert rec.returncode == 0 and json.loads(rec.stdout)["results"][0]["id"] == new[0], rec.stdout


@pytest.mark.parametrize("sig", SIGS)
def test_a_stop_while_lancedb_commits_a_forget_is_said_after_it(ws: Path, stopper: Path, sig: str) -> None:
    """The same for a forget's delete: it is said as deleted, and its text leaves the disk."""
    gone = _store(ws, "Dana's alarm code is tango-7-lima-9-kilo")
    kept = _store(ws, "The team offsite is at Lakeview Lodge")
    res = cli(["memory", "forget", "-w", str(ws), gone], stopper, STOP_SIG=sig, STOP_IN_COMMIT="delete")
    assert res.returncode == EXIT[sig], (res.stdout, res.stderr)
    assert last(res.stderr) == f"memory-core: {WORD[sig]} after deleting memory {gone} (it is deleted)", res.stderr
    assert set(_memories(ws)) == {kept}
    assert _files_holding(_store_path(ws), b"tango-7-lima") == [] and not _marker(ws).exists()


def test_a_stopped_forget_whose_purge_cannot_be_quick_leaves_it_to_the_next_write(
        ws: Path, stopper: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A store past ``PURGE_ON_STOP_ROWS`` (set to 0 here): the stop goes on at once and says the text
    stays on disk until the next write, which purges it (its marker)."""
    gone = _store(ws, "Dana's alarm code is tango-7-lima-9-kilo")
    kept = _store(ws, "The team offsite is at Lakeview Lodge")
    script = stopper.with_name("small.py")
    script.write_text("import memory_core.notes.memory_store as ms\nms.PURGE_ON_STOP_ROWS = 0\n"
                      + stopper.read_text())
    res = cli(["memory", "forget", "-w", str(ws), gone], script, STOP_SIG="INT", STOP_FP="store-forget-deleted")
    assert res.returncode == 130, (res.stdout, res.stderr)
    assert last(res.stderr) == (f"memory-core: interrupted after deleting memory {gone} (it is deleted; its text"
                                 " stays in the store's files until the next memory is stored or forgotten)")
    assert set(_memories(ws)) == {kept}
    assert _marker(ws).is_file() and _files_holding(_store_path(ws), b"tango-7-lima")
    _store(ws, "The garden hose is in the shed")
    assert _files_holding(_store_path(ws), b"tango-7-lima") == [] and not _marker(ws).exists()


# -- the Python API (and the MCP tools, which call the same methods) --------------------------------

def _stop_at(monkeypatch: pytest.MonkeyPatch, point: str, stop: BaseException) -> None:
    """``stop`` raised the first time the store reaches the failpoint ``point`` (a signal comes once)."""
    fired: list[int] = []

    def failpoint(name: str) -> None:
        if name == point and not fired:
            fired.append(1)
            raise stop

    monkeypatch.setattr(memory_store, "failpoint", failpoint)


@pytest.fixture
def store(ws: Path):
    s = MemoryStore(load_settings(ws / "memory-core.toml"))
    yield s
    s.close()


def test_the_api_stop_after_a_text_replacing_update_carries_command_done(store: MemoryStore,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """An update that replaced a memory's text takes the old text off the disk, as a forget does;
    the OpenAI fake's vectors are a hash of the text, so the test embeds a normalised text."""
    p = store.provider()
    assert p is not None
    embed = p.embed_documents
    monkeypatch.setattr(p, "embed_documents", lambda texts: embed([t.lower().rstrip("!") for t in texts]))
    first = store.store("The user is allergic to peanuts", category="fact")
    assert _files_holding(store.path, b"The user is allergic")
    _stop_at(monkeypatch, "store-committed", KeyboardInterrupt())
    with pytest.raises(KeyboardInterrupt) as exc:
        store.store("the user is allergic to peanuts!", category="fact")
    assert exc.value.command_done == f"storing memory {first.memory.id} (it is stored, updating the near-identical" \
                                     " memory of that id)"  # type: ignore[attr-defined]
    got = store.get(first.memory.id)
    assert got is not None and got.text == "the user is allergic to peanuts!" and store.count() == 1
    assert _files_holding(store.path, b"The user is allergic") == []  # the replaced text is off the disk
    assert not _purge_marker(store.path).exists()


def test_the_api_stops_before_and_after_a_forget(store: MemoryStore, monkeypatch: pytest.MonkeyPatch) -> None:
    from memory_core.errors import RunCancelled

    mid = store.store("Dana's alarm code is tango-7-lima-9-kilo").memory.id
    store.store("The team offsite is at Lakeview Lodge")
    # a RunCancelled (an Exception) in the purge: before, _after_write took it for a failed upkeep,
    # logged a warning and the forget returned as if no stop had come
    _stop_at(monkeypatch, "store-indexed", RunCancelled("stopped by SIGTERM"))
    with pytest.raises(RunCancelled) as exc:
        store.forget(mid)
    assert exc.value.command_done == f"deleting memory {mid} (it is deleted)"  # type: ignore[attr-defined]
    assert store.get(mid) is None and _files_holding(store.path, b"tango-7-lima") == []
    # a stop that ends a store before its commit carries nothing
    _stop_at(monkeypatch, "store-committed", KeyboardInterrupt())
    monkeypatch.setattr(MemoryStore, "_after_write", lambda *a, **k: pytest.fail("no commit, no upkeep"))
    table = store._open()
    monkeypatch.setattr(type(table), "merge_insert", lambda *a, **k: (_ for _ in ()).throw(KeyboardInterrupt()))
    with pytest.raises(KeyboardInterrupt) as before:
        store.store("The garden hose is in the shed")
    assert getattr(before.value, "command_done", None) is None
    assert store.count() == 1


# -- eval --per-query ------------------------------------------------------------------------------

@pytest.fixture
def kw(tmp_path: Path) -> Path:
    """A keyword-only workspace, indexed, with queries and their judgements beside it."""
    ws = tmp_path / "kw"
    (ws / "memory").mkdir(parents=True)
    (ws / "memory" / "heron.md").write_text("# Heron\n\nThe heron waits by the pond.\n")
    (ws / "memory" / "boiler.md").write_text("# Boiler\n\nThe boiler code is 4471.\n")
    (ws / "memory-core.toml").write_text('provider = "none"\n')
    res = cli(["index", "-w", str(ws), "--no-progress"])
    assert res.returncode == 0, res.stderr
    (tmp_path / "queries.jsonl").write_text("".join(json.dumps({"_id": f"q{i}", "text": t}) + "\n" for i, t in
                                                    enumerate(["heron pond", "boiler code", "heron", "4471"])))
    (tmp_path / "qrels.tsv").write_text("query-id\tcorpus-id\tscore\nq0\tmemory/heron\t1\nq1\tmemory/boiler\t1\n"
                                        "q2\tmemory/heron\t1\nq3\tmemory/boiler\t1\n")
    return ws


def _eval_args(kw: Path, out: Path) -> list[str]:
    return ["eval", "-w", str(kw), "--queries", str(kw.parent / "queries.jsonl"), "--qrels",
            str(kw.parent / "qrels.tsv"), "--sides", "--per-query", str(out)]


@pytest.mark.parametrize("sig", SIGS)
def test_an_eval_stopped_as_it_writes_its_per_query_file_leaves_the_old_one_whole(kw: Path, stopper: Path,
                                                                                 sig: str) -> None:
    """Before: the file was opened with "w" in place, so the stop left its header and the rows
    written so far, in place of the complete file of the run before."""
    out = kw.parent / "out" / "pq.tsv"
    out.parent.mkdir()
    res = cli(_eval_args(kw, out))
    assert res.returncode == 0, res.stderr
    whole = out.read_text()
    rows = whole.splitlines()
    assert rows[0].startswith("side\tquery-id\t") and len(rows) > 8
    res = cli(_eval_args(kw, out), stopper, STOP_SIG=sig, STOP_ROW="5")
    assert res.returncode == EXIT[sig], (res.stdout, res.stderr)
    assert WORD[sig] in last(res.stderr), res.stderr
    assert out.read_text() == whole
    assert sorted(p.name for p in out.parent.iterdir()) == ["pq.tsv"], "a temp file was left"
    # a new file is written whole, in place of the old one (through a symlink: its target)
    out.write_text("old\n")
    link = out.with_name("link.tsv")
    link.symlink_to(out.name)
    res = cli(_eval_args(kw, link))
    assert res.returncode == 0, res.stderr
    assert link.is_symlink() and out.read_text() == whole
    assert sorted(p.name for p in out.parent.iterdir()) == ["link.tsv", "pq.tsv"]


@pytest.mark.parametrize("sig", SIGS)
def test_an_eval_stopped_once_its_per_query_file_is_written_says_so(kw: Path, stopper: Path, sig: str) -> None:
    """The stop lands as the report is printed, after the file went into place: the last line names it
    (before: `interrupted; the live index was left as it was`, no word of the new file)."""
    out = kw.parent / "pq.tsv"
    res = cli(_eval_args(kw, out), stopper, STOP_SIG=sig, STOP_TARGET="memory_core.apps.evaluation:format_report")
    assert res.returncode == EXIT[sig], (res.stdout, res.stderr)
    assert last(res.stderr) == f"memory-core: {WORD[sig]} after writing the per-query metrics to {out} (the file" \
                                " is written)", res.stderr
    assert out.read_text().startswith("side\tquery-id\t") and len(out.read_text().splitlines()) > 8


def test_an_eval_per_query_file_that_is_not_a_regular_file_is_written_in_place(kw: Path) -> None:
    """`--per-query /dev/stdout` (a device or a pipe) is written to as before: never replaced."""
    res = cli([*_eval_args(kw, Path("/dev/stdout"))[:-2], "--json", "--per-query", "/dev/stdout"])
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("side\tquery-id\t"), res.stdout[:200]
