"""The LanceDB memory store, third outside attack (issue 39): S1-S6, and the store tools' output
schemas; a fifth look of our own: S7-S13. Each test names its finding and fails on the code before
its fix (docs/reliability.md)."""

from __future__ import annotations

import glob
import json
import math
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from memory_core.apps.cli import main
from memory_core.apps.mcp_store_tools import StoreTools, store_tool_definitions
from memory_core.config import load_settings
from memory_core.errors import ProviderError, UnsafePathError, UsageError
from memory_core.notes.memory_store import MemoryStore, same_fact
from tests.conftest import ROOT, openai_settings

# pairs an embedding model puts side by side (the attack: 4 of 10 overwritten with the local model)
DIFFERENT_FACTS = [
    ("The user is allergic to peanuts", "The user is not allergic to peanuts"),
    ("The team standup is on Tuesday", "The team standup is on Thursday"),
    ("The monthly cloud budget is 2400 EUR", "The monthly cloud budget is 4200 EUR"),
    ("The product launch is on March 3", "The product launch is on March 30"),
    ("Dana can attend the review", "Dana cannot attend the review"),
]


def test_s1_same_fact_tells_different_facts_apart() -> None:
    for a, b in DIFFERENT_FACTS:
        assert not same_fact(a, b), (a, b)
    assert same_fact("The user prefers dark mode in every editor", "the user prefers dark mode in every editor.")
    assert same_fact("We deploy only on Tuesdays", "We deploy only on Tuesdays!")


def _local_store(tmp_path: Path) -> MemoryStore:
    """A memory store in ``tmp_path`` with the real local model (skipped where it is not installed)."""
    from memory_core.embeddings.local import local_model_available

    if not local_model_available():
        pytest.skip("the local model is not installed")
    return MemoryStore(load_settings(None, {"workspace": str(tmp_path), "provider": "local"}))


def _stored_beside(s: MemoryStore, pairs: list[tuple[str, str]]) -> list[tuple[Any, Any]]:
    """Store each pair's first then second text: the second must be a memory of its own."""
    out = []
    for a, b in pairs:
        first = s.store(a, category="fact")
        second = s.store(b, category="fact")
        assert second.action == "created" and second.memory.id != first.memory.id, (a, b, second)
        out.append((first, second))
    return out


def test_s1_a_near_duplicate_that_says_another_thing_is_kept_beside_it(tmp_path: Path) -> None:
    with _local_store(tmp_path) as s:
        first, second = _stored_beside(s, DIFFERENT_FACTS)[0]
        # past the old 0.95 rule: the answer names the memory it kept
        assert second.kept_similar is not None and second.kept_similar["id"] == first.memory.id
        texts = {m.text for m in s.list()}
        assert texts == {t for pair in DIFFERENT_FACTS for t in pair}, "a different fact replaced another"
        # the same thing said again is still an update
        res = s.store("the user is allergic to peanuts!", category="fact")
        assert res.action == "updated" and res.previous_text == "The user is allergic to peanuts"
        assert s.count() == len(DIFFERENT_FACTS) * 2


# pairs the local model puts at cosine 0.96-0.99 whose difference is a stop word or the word order
# (the fifth look, S9: each one overwrote the other)
OPPOSITE_FACTS = [
    ("Turn the heating up at night", "Turn the heating down at night"),
    ("The spare key is above the door", "The spare key is below the door"),
    ("The budget is over the limit", "The budget is under the limit"),
    ("Alice reports to Bob", "Bob reports to Alice"),
    ("Migrate the database from Postgres to MySQL", "Migrate the database from MySQL to Postgres"),
    ("I owe you 50 EUR", "You owe me 50 EUR"),
]


def test_s8_a_damaged_store_sets_aside_its_table_never_the_folder_around_it(tmp_path: Path, openai_fake: Any) -> None:
    """A damaged store was set aside by renaming its whole configured folder: with ``lancedb_path``
    an agent's notes folder (or, through a config the agents check let pass, another agent's
    workspace), the notes went with it, and with ``lancedb_path = "."`` the workspace itself.
    Now only the table's folder moves, renamed inside the store's."""
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    (ws / "memory" / "2026-01-02.md").write_text("The vault code is 9930.\n")
    (ws / "MEMORY.md").write_text("# notes\n")
    settings = openai_settings(ws, openai_fake, lancedb_path=str(ws / "memory"))  # the store among the notes
    with MemoryStore(settings) as s:
        s.store("the deploy day is Tuesday")
        assert s.path == ws / "memory"
    for f in glob.glob(str(ws / "memory" / "memories.lance" / "_versions" / "*.manifest")):
        Path(f).write_bytes(b"garbage" * 10)
    with MemoryStore(settings) as s:
        assert s.list() == []
        assert s.set_aside is not None and s.set_aside.parent == ws / "memory"
    assert sorted(p.name for p in ws.iterdir()) == [".memory.lock", "MEMORY.md", "memory"]
    assert (ws / "memory" / "2026-01-02.md").read_text() == "The vault code is 9930.\n"
    assert not [p for p in tmp_path.rglob("*") if ".damaged-" in p.name and p != s.set_aside]


def test_s9_same_fact_keeps_directions_pronouns_and_word_order() -> None:
    for a, b in OPPOSITE_FACTS:
        assert not same_fact(a, b), (a, b)
    # the same thing said again: case, punctuation, articles and plurals aside
    assert same_fact("Turn the heating up at night", "turn the heating up at night.")
    assert same_fact("Alice reports to Bob", "Alice reports to Bob!")
    assert same_fact("The budget is 2,400 EUR", "the budget is 2400 EUR")
    assert same_fact("The user can't eat peanuts", "the user can\u2019t eat peanuts")
    assert same_fact("Backups run on Tuesdays", "The backup runs on Tuesday")


def test_s9_a_near_duplicate_with_another_direction_or_order_is_kept_beside_it(tmp_path: Path) -> None:
    with _local_store(tmp_path) as s:
        _stored_beside(s, OPPOSITE_FACTS)
        assert {m.text for m in s.list()} == {t for pair in OPPOSITE_FACTS for t in pair}, "a fact was overwritten"
        res = s.store("turn the heating up at night", category="fact")  # the same thing again: an update
        assert res.action == "updated" and res.previous_text == "Turn the heating up at night"
        assert s.count() == len(OPPOSITE_FACTS) * 2


def _toml(base_url: str) -> str:
    return ('provider = "openai"\nmodel = "text-embedding-3-small"\n[remote]\n'
            f'base_url = "{base_url}"\napi_key = "sk-test-key-0123456789"\ndimensions = 64\n'
            'backoff_initial_s = 0.01\nbackoff_max_s = 0.05\nmax_attempts = 2\ntimeout_s = 30\n')


def test_s2_four_processes_storing_the_first_memory_at_once_all_land(workspace: Path, openai_fake: Any,
                                                                     tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(workspace)  # the config names no workspace: the current folder, as in the processes
    (workspace / "memory-core.toml").write_text(_toml(openai_fake.base_url))
    gate = tmp_path / "go"
    # each process, about to create the table, says so and waits at the gate: all four would
    # create it at once when nothing keeps them apart (the old code: 3 tracebacks)
    code = ("import os, sys, time, pathlib; from memory_core.config import load_settings;"
            " import fcntl; from memory_core.notes import memory_store as ms; real = ms.MemoryStore._create\n"
            "real_flock = fcntl.flock\n"
            "def flock(fd, op):\n"  # waiting for the store's lock counts as being at the gate
            "    (pathlib.Path(sys.argv[2]).parent / f'waiting-{os.getpid()}').touch()\n"
            "    return real_flock(fd, op)\n"
            "fcntl.flock = flock\n"
            "def gated(self, *a):\n"
            "    (pathlib.Path(sys.argv[2]).parent / f'ready-{os.getpid()}').touch()\n"
            "    while not pathlib.Path(sys.argv[2]).exists(): time.sleep(0.01)\n"
            "    return real(self, *a)\n"
            "ms.MemoryStore._create = gated\n"
            "s = ms.MemoryStore(load_settings(pathlib.Path(sys.argv[1]) / 'memory-core.toml'))\n"
            "print(s.store(sys.argv[3]).action)")
    procs = [subprocess.Popen([sys.executable, "-c", code, str(workspace), str(gate), f"fact number {n} is true"],
                              env=dict(os.environ, PYTHONPATH=str(ROOT)), cwd=str(workspace),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for n in range(4)]
    import time

    # all four at the gate, or (kept apart by the store's lock) one there and the others waiting for it
    def arrived() -> int:
        return len({p.name.split("-", 1)[1] for p in (*tmp_path.glob("ready-*"), *tmp_path.glob("waiting-*"))})

    until = time.monotonic() + 60
    while arrived() < 4 and time.monotonic() < until and all(p.poll() is None for p in procs):
        time.sleep(0.05)
    gate.touch()
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0] * 4, [o[1][-500:] for o in outs]
    assert sorted(o[0].strip() for o in outs) == ["created"] * 4
    with MemoryStore(load_settings(workspace / "memory-core.toml")) as s:
        assert sorted(m.text for m in s.list()) == [f"fact number {n} is true" for n in range(4)]


def test_s3_a_damaged_store_is_set_aside_and_starts_again(workspace: Path, openai_fake: Any,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    settings = openai_settings(workspace, openai_fake)
    with MemoryStore(settings) as s:
        s.store("The backup bucket is in eu-west-1")
        s.store("Releases are cut on Mondays")
        path = s.path
    for f in glob.glob(str(path / "memories.lance" / "_versions" / "*.manifest")):
        Path(f).write_bytes(b"garbage" * 10)
    with MemoryStore(settings) as s:
        assert s.list() == [] and s.recall("backup bucket").hits == []
        # the table's folder, set aside inside the store's (S8: never the configured folder)
        assert s.set_aside is not None and s.set_aside.name.startswith("memories.lance.damaged-")
        assert s.store("The backup bucket is in eu-west-2").action == "created"
        assert [m.text for m in s.list()] == ["The backup bucket is in eu-west-2"]
    aside = [p for p in path.iterdir() if p.name.startswith("memories.lance.damaged-")]
    assert len(aside) == 1 and (aside[0] / "_versions").is_dir()  # kept for a look by hand
    # a data file damaged: the same, through the CLI, one store at a time
    for f in glob.glob(str(path / "memories.lance" / "data" / "*")):
        Path(f).write_bytes(b"garbage" * 10)
    (workspace / "memory-core.toml").write_text(_toml(openai_fake.base_url))
    assert main(["memory", "recall", "-w", str(workspace), "backup bucket", "--json"]) == 0
    assert main(["memory", "store", "-w", str(workspace), "The backup bucket is in eu-west-3"]) == 0
    assert main(["memory", "list", "-w", str(workspace), "--json"]) == 0
    out = capsys.readouterr().out
    assert json.loads(out[out.rindex('{\n  "memories"'):])["count"] == 1
    # a table folder without its versions
    shutil.rmtree(path / "memories.lance" / "_versions")
    with MemoryStore(settings) as s:
        assert s.list() == [] and s.set_aside is not None
    assert len([p for p in path.iterdir() if p.name.startswith("memories.lance.damaged-")]) == 3


def test_s4_a_symlinked_store_folder_or_lock_is_refused(workspace: Path, openai_fake: Any, tmp_path: Path) -> None:
    settings = openai_settings(workspace, openai_fake)
    outside = tmp_path / "outside"
    outside.mkdir()
    folder = settings.lancedb_dir
    folder.parent.mkdir(parents=True, exist_ok=True)
    folder.symlink_to(outside)
    with MemoryStore(settings) as s:
        with pytest.raises(UnsafePathError, match="symbolic link"):
            s.store("written outside the workspace?")
        with pytest.raises(UnsafePathError):
            s.list()
    assert list(outside.iterdir()) == []
    folder.unlink()
    lock = folder.with_name(f".{folder.name}.lock")
    lock.symlink_to(outside / "lock-through-a-link")
    with MemoryStore(settings) as s, pytest.raises(UnsafePathError, match="lock"):
        s.store("a memory")
    assert list(outside.iterdir()) == []
    lock.unlink()
    folder.mkdir()
    (folder / "memories.lance").symlink_to(outside)
    with MemoryStore(settings) as s, pytest.raises(UnsafePathError):
        s.store("a memory")
    assert list(outside.iterdir()) == []


def test_s5_a_stalled_provider_costs_a_store_the_search_deadline(workspace: Path, openai_fake: Any) -> None:
    openai_fake.delay = 4.0  # every answer 4 s late; the deadline is 1 s
    settings = openai_settings(workspace, openai_fake, query={"embed_timeout_s": 1},
                               remote={"timeout_s": 30, "max_attempts": 2})
    with MemoryStore(settings) as s:
        with pytest.raises(ProviderError, match="deadline"):
            s.store("The on-call rota changes on Fridays")
        assert s.count() == 0


def test_s5_a_waiting_store_does_not_hold_list_or_recall(workspace: Path, openai_fake: Any) -> None:
    settings = openai_settings(workspace, openai_fake, query={"embed_timeout_s": 60})
    with MemoryStore(settings) as s:
        s.store("The on-call rota changes on Fridays")
        openai_fake.delay = 4.0
        stored = threading.Event()
        t = threading.Thread(target=lambda: (s.store("The pager rotation is weekly"), stored.set()))
        t.start()
        try:
            while not openai_fake.requests or len(openai_fake.requests) < 2:  # the store is waiting on it
                threading.Event().wait(0.01)
            listed = s.list()  # answered while the store waits for its vector
            assert not stored.is_set() and [m.text for m in listed] == ["The on-call rota changes on Fridays"]
            assert s.recall("rota", mode="keyword").hits
            assert not stored.is_set()
        finally:
            t.join()
        assert stored.is_set() and s.count() == 2


def test_s6_inf_nan_and_lone_surrogates_get_one_line(workspace: Path, openai_fake: Any) -> None:
    with MemoryStore(openai_settings(workspace, openai_fake)) as s:
        s.store("The wiki lives at wiki.example.org")
        for bad in (math.inf, math.nan, 0, -3, "10"):
            with pytest.raises(UsageError, match="max_results must be"):
                s.recall("wiki", max_results=bad)  # type: ignore[arg-type]
        with pytest.raises(UsageError, match="min_score must be"):
            s.recall("wiki", min_score=math.nan)
        with pytest.raises(UsageError, match="limit must be"):
            s.list(limit=math.inf)  # type: ignore[arg-type]
        res = s.store("bytes \udcff from a pipe")
        assert res.memory.text == "bytes \ufffd from a pipe"
        assert s.recall("pipe \udcfe", min_score=0).hits


def test_store_tools_declare_output_schemas_their_answers_meet(workspace: Path, openai_fake: Any) -> None:
    defs = {t.name: t for t in store_tool_definitions()}
    assert all(defs[n].output_schema for n in ("memory_store", "memory_recall", "memory_list", "memory_forget"))
    tools = StoreTools(openai_settings(workspace, openai_fake))
    try:
        h = tools.handlers()
        stored = h["memory_store"]({"text": "The VPN gateway is vpn-3", "category": "fact"})
        again = h["memory_store"]({"text": "The VPN gateway is vpn-3"})
        answers = {
            "memory_store": [stored, again],
            "memory_recall": [h["memory_recall"]({"query": "VPN gateway", "minScore": 0})],
            "memory_list": [h["memory_list"]({})],
            "memory_forget": [h["memory_forget"]({"query": "VPN"}), h["memory_forget"]({"memoryId": stored["id"]})],
        }
        for name, outs in answers.items():
            for out in outs:
                jsonschema.validate(out, defs[name].output_schema)
    finally:
        tools.close()


# -- the fifth look at the memory store (an audit of our own): S7-S14, docs/reliability.md -----

def test_s7_running_out_of_file_descriptors_never_sets_a_healthy_store_aside(workspace: Path, openai_fake: Any,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """A process at its open-file limit (the MCP server with many clients) got LanceDB's "Too many
    open files (os error 24)" on a list; any IO error counted as damage, the fresh look failed
    the same way, and the healthy store was renamed ``lancedb.damaged-*``: list and recall then
    answered empty and the next store began a new table. Now a limit of the process or the system
    (or a permission) is one line and nothing moves; damage is confirmed from the files alone."""
    import resource

    from memory_core.errors import RunError
    from memory_core.notes import memory_store as ms

    settings = openai_settings(workspace, openai_fake)
    with MemoryStore(settings) as s:
        for i in range(5):
            s.store(f"important memory number {i} word{i}")
        path = s.path
    held: list[int] = []
    real_lock = ms.open_lock_file

    def lock_with_one_free(lock: Any, what: str) -> int:  # the store's lock file still opens
        if held:
            os.close(held.pop())
        return real_lock(lock, what)

    monkeypatch.setattr(ms, "open_lock_file", lock_with_one_free)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    store = MemoryStore(settings)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(soft, 2048), hard))
    try:
        try:
            while True:  # every descriptor taken: the process is at its limit
                held.append(os.open(os.devnull, os.O_RDONLY))
        except OSError:
            pass
        with pytest.raises(RunError) as err:
            store.list()
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert "Too many open files" in str(err.value) and "nothing was moved" in str(err.value)
    assert str(err.value).count("\n") == 0
    assert store.set_aside is None and (path / "memories.lance").is_dir()
    assert not [p for p in path.parent.iterdir() if ".damaged-" in p.name]
    assert len(store.list()) == 5 and store.recall("word3", mode="keyword").hits  # the limit passed
    store.close()
    # a permission or a memory limit, as LanceDB words them, is no damage either (real messages)
    for msg in ("lance error: LanceError(IO): Generic LocalFileSystem error: Unable to open file /x/data/1.lance:"
                " Permission denied (os error 13), /rustc/src/result.rs:1896:29",
                "lance error: LanceError(IO): Generic LocalFileSystem error: Unable to walk dir: IO error for"
                " operation on /x/_versions: Too many open files (os error 24)"):
        assert not ms._is_damage(RuntimeError(msg))
    assert ms._is_damage(RuntimeError("lance error: LanceError(IO): file size is too small"))


def test_s10_a_text_of_nuls_and_spaces_is_no_memory(workspace: Path, openai_fake: Any,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """NULs become spaces before the text is checked: "\\x00" was stored as a blank memory " "
    (answered ``created``), and later blank texts "updated" it."""
    with MemoryStore(openai_settings(workspace, openai_fake)) as s:
        for bad in ("\x00", " \x00\x00 \n", "\x00\t\x00"):
            with pytest.raises(UsageError, match="needs some text"):
                s.store(bad)
        tools = StoreTools(s.settings, store=s)
        with pytest.raises(UsageError, match="needs some text"):
            tools.handlers()["memory_store"]({"text": "\x00\x00"})
        assert s.count() == 0 and not s.path.exists()
        # a NUL inside a text is a space, at either end it goes with the spaces
        assert s.store("\x00the gate opens at 7731\x00").memory.text == "the gate opens at 7731"  # not a code: kept
        assert s.store("the\x00gate code is 7731").memory.text == "the gate code is ***"  # a gate code is masked (redact.pin_code)
    (workspace / "memory-core.toml").write_text(_toml(openai_fake.base_url))
    capsys.readouterr()
    assert main(["memory", "store", "-w", str(workspace), "\x00 \x00"]) == 2
    err = capsys.readouterr().err
    assert "needs some text" in err and err.count("\n") == 1


def test_s13_a_relative_store_path_is_made_absolute(workspace: Path, openai_fake: Any, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """``--store .`` died with a ValueError traceback (no name to put the lock beside), and
    ``--store ..`` locked ``./....lock`` while the same folder by its absolute path locked
    ``.<name>.lock`` beside it: two processes were not kept apart."""
    settings = openai_settings(workspace, openai_fake)
    root = tmp_path / "stores"
    sub = root / "work"
    sub.mkdir(parents=True)
    monkeypatch.chdir(sub)
    with MemoryStore(settings, path=".") as s:
        assert s.path == sub and s.store("stored in the current folder").action == "created"
    assert (sub / "memories.lance").is_dir() and (root / ".work.lock").is_file()
    up, absolute = MemoryStore(settings, path=".."), MemoryStore(settings, path=str(root))
    try:
        assert up.path == absolute.path == root
        absolute.store("the first memory, stored through the absolute path")  # the table exists: stores are quick
        done = threading.Event()
        with up._file_lock():  # one name's lock holds a store through the other name back
            t = threading.Thread(target=lambda: (absolute.store("stored while '..' held the lock"), done.set()))
            t.start()
            assert not done.wait(3.0), "the two names of one folder took two different locks"
        t.join(timeout=60)
        assert done.is_set() and len(up.list()) == 2
    finally:
        up.close()
        absolute.close()
    assert not list(sub.glob(".*.lock")) and (tmp_path / ".stores.lock").is_file()
    # the root (no name) and the workspace itself: one line each
    with pytest.raises(UsageError, match="a folder of its own"):
        MemoryStore(settings, path="/")
    monkeypatch.chdir(workspace)
    with pytest.raises(UsageError, match="cannot be the workspace itself"):
        MemoryStore(settings, path=".")
    (workspace / "memory-core.toml").write_text(_toml(openai_fake.base_url))
    capsys.readouterr()
    assert main(["memory", "store", "-w", str(workspace), "--store", ".", "a memory"]) == 2
    err = capsys.readouterr().err
    assert "cannot be the workspace itself" in err and err.count("\n") == 1
    assert not (workspace / "memories.lance").exists()


CJK_MEMORIES = {"zh": "服务器每周二凌晨备份", "ja": "ユーザーはダークモードが好き",
                "en": "The server is backed up every Tuesday night"}


def test_s11_cjk_memories_are_found_by_their_words(workspace: Path, openai_fake: Any, tmp_path: Path) -> None:
    """LanceDB's ``simple`` tokenizer indexed a CJK run as one token (and dropped one over 40
    bytes: the Japanese memory was not indexed at all) while the query was split into CJK
    bigrams: keyword recall never found a Chinese or Japanese memory, not even by its own text,
    and hybrid recall lost its keyword half. The index now segments CJK into words (ICU) and the
    query is split by the index's own tokenizer."""
    with MemoryStore(openai_settings(workspace, openai_fake)) as s:
        ids = {k: s.store(v, category="fact").memory.id for k, v in CJK_MEMORIES.items()}
        for query, want in [(CJK_MEMORIES["zh"], "zh"), ("备份", "zh"), ("服务器 备份", "zh"), ("凌晨备份", "zh"),
                            (CJK_MEMORIES["ja"], "ja"), ("ダークモード", "ja"), ("ダークモードが好き", "ja"),
                            ("backed up", "en"), ("Tuesday", "en")]:
            hits = s.recall(query, mode="keyword", min_score=0).hits
            assert hits and hits[0].memory.id == ids[want], (query, [h.memory.text for h in hits])
            assert all(h.memory.id == ids[want] for h in hits), (query, [h.memory.text for h in hits])
        hybrid = s.recall("服务器 备份", min_score=0).hits
        assert hybrid[0].memory.id == ids["zh"] and hybrid[0].text_score > 0 and hybrid[0].match in ("both", "keyword")
    from memory_core.embeddings.local import local_model_available

    if not local_model_available():
        return
    # with the English-only local model: the keyword side decides a mostly-CJK query, as in the index
    with MemoryStore(load_settings(None, {"workspace": str(tmp_path), "provider": "local"})) as s:
        for text in ("服务器每周二凌晨备份", "用户喜欢深色模式", "项目预算是九千欧元"):
            s.store(text)
        hits = s.recall("服务器 备份").hits
        assert hits and hits[0].memory.text == "服务器每周二凌晨备份" and hits[0].match == "both", hits


def test_s11_a_store_indexed_by_an_older_version_is_reindexed_on_open(workspace: Path, openai_fake: Any) -> None:
    """A store made before the fix keeps its ``simple`` full-text index until something rebuilds
    it: opening it rebuilds the index once (under the store's lock), so its CJK memories are found
    without a new store."""
    import lancedb
    from lancedb.index import FTS

    def tokenizer(table: Any) -> str:
        return str(next(i.index_details["base_tokenizer"] for i in table.list_indices() if i.columns == ["text"]))

    settings = openai_settings(workspace, openai_fake)
    with MemoryStore(settings) as s:
        ids = {k: s.store(v).memory.id for k, v in CJK_MEMORIES.items()}
        path = s.path
    old = lancedb.connect(str(path)).open_table("memories")
    old.create_index("text", config=FTS(stem=False, remove_stop_words=False), replace=True)  # as before the fix
    assert tokenizer(old) == "simple"
    with MemoryStore(settings) as s:
        assert [h.memory.id for h in s.recall("备份", mode="keyword").hits] == [ids["zh"]]
        assert [h.memory.id for h in s.recall("ダークモード", mode="keyword").hits] == [ids["ja"]]
        assert s.count() == 3
    assert tokenizer(lancedb.connect(str(path)).open_table("memories")) == "icu/split"


def test_s12_memory_search_keeps_stored_memories_to_the_injection_budget(workspace: Path, openai_fake: Any) -> None:
    """``memory_search`` with ``sources: ["store"]`` cut each store result's snippet to
    ``query.max_injected_chars`` but handed the agent the memory's whole ``text`` beside it (up to
    8,000 characters a result, never counted): 297 snippet characters and 7,956 more. Now its store
    results carry no ``text``; ``memory_recall`` keeps it and ``memory_get`` of the citation reads it."""
    from memory_core.apps.mcp_server import SEARCH_OUTPUT_SCHEMA
    from memory_core.query.search import Searcher

    settings = openai_settings(workspace, openai_fake, query={"max_injected_chars": 300})
    long_text = ("Deploy runbook: " + " ".join(f"step{i} check the replica lag" for i in range(300)))[:7900]
    with MemoryStore(settings) as st, Searcher(settings) as searcher:
        big = st.store(long_text).memory
        st.store("Deploy runbook short version: check the replica lag first")
        ans = searcher.search_response("deploy runbook replica lag", min_score=0, sources=["store"],
                                       extra=st).to_dict()
        results = ans["results"]
        assert results and all(r["source"] == "store" and "text" not in r for r in results), results
        assert sum(len(r["snippet"]) for r in results) <= 300
        # what a result carries besides its snippet is its fields, not the memory again
        assert max(len(json.dumps({k: v for k, v in r.items() if k != "snippet"})) for r in results) < 600
        jsonschema.validate(results, SEARCH_OUTPUT_SCHEMA["properties"]["results"])
        tools = StoreTools(settings, store=st)
        recalled = tools.handlers()["memory_recall"]({"query": "deploy runbook replica lag", "minScore": 0})
        assert len(big.text) > 7800 and any(r["text"] == big.text for r in recalled["results"])
        assert tools.get(f"store:{big.id}")["text"] == big.text


def test_a_relative_lancedb_path_is_one_folder_through_the_api_and_the_cli(tmp_path: Path, monkeypatch: Any) -> None:
    """Twentieth session's audit: `memory store --store mystore` stored in ./mystore, while
    `open_memory("ws", lancedb_path="mystore")` opened ws/mystore (relative to the workspace, where
    `index_path` is relative to the current folder): memories stored through one door were not seen
    through the other. A relative path given to the API is the current folder's, as the CLI's."""
    from memory_core import open_memory

    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    (ws / "MEMORY.md").write_text("# notes\n")
    monkeypatch.chdir(tmp_path)
    assert main(["memory", "store", "-w", "ws", "--store", "mystore", "The rota changes on Mondays"]) == 0
    assert (tmp_path / "mystore").is_dir() and not (ws / "mystore").exists()
    mem = open_memory("ws", lancedb_path="mystore")
    try:
        assert mem.settings.lancedb_dir == tmp_path / "mystore"
        assert [m.text for m in mem.store.list()] == ["The rota changes on Mondays"]
    finally:
        mem.close()


def _files_holding(folder: Path, needle: bytes) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file() and needle in p.read_bytes())


def _texts_in_every_version(folder: Path) -> list[str]:
    """The texts of every version of the store's table that LanceDB can still check out."""
    import lancedb

    t = lancedb.connect(str(folder)).open_table("memories")
    texts = []
    for v in t.list_versions():
        t.checkout(v["version"])
        texts += [str(r["text"]) for r in t.to_arrow().to_pylist()]
    return texts


def test_f4_a_forgotten_or_replaced_text_leaves_the_stores_files(workspace: Path, openai_fake: Any,
                                                                 monkeypatch: Any) -> None:
    """F4 (audit 23): after a forget, the text was still in a data file under the store's folder and
    ``table.checkout(1)`` returned it whole (old versions were removed every 64 versions, and only
    once a day old); so was the text an update replaced. Now neither is in any file of the store,
    nor in any version LanceDB can check out, including when a compaction put it in a data file
    shared with other memories (where a delete only marks the row)."""
    from memory_core.notes import memory_store as ms
    from tests.fakes.common import fake_vector

    # a restatement (case, a final "!") embeds as its first text did, as a real model puts them side by side
    monkeypatch.setattr(openai_fake, "vector_for",
                        lambda text, dims, model=None: fake_vector(text.lower().rstrip(".!"), dims))
    monkeypatch.setattr(ms, "COMPACT_EVERY", 2)  # compacted: the memories share data files
    secret, offsite = "Dana's home alarm disarm sequence is tango-7-lima-9-kilo", "The team offsite is at Lakeview Lodge"
    with MemoryStore(openai_settings(workspace, openai_fake)) as s:
        gone = s.store(secret, category="fact").memory.id
        s.store(offsite, category="fact")
        for i in range(12):  # a forget then deletes under 10% of a shared file's rows: no compaction rewrites it
            s.store(f"Unrelated memory number {i} about the garden", category="other")
        assert _files_holding(s.path, b"tango-7-lima") and secret in _texts_in_every_version(s.path)

        assert s.forget(gone).text == secret
        assert s.get(gone) is None and s.count() == 13
        assert _files_holding(s.path, b"tango-7-lima") == [], "the forgotten text is still on disk"
        assert secret not in _texts_in_every_version(s.path), "an older version still holds the forgotten text"

        again = s.store("the team offsite is at Lakeview Lodge!")
        assert again.action == "updated" and again.previous_text == offsite
        assert _files_holding(s.path, offsite.encode()) == [], "the replaced text is still on disk"
        assert offsite not in _texts_in_every_version(s.path)

        # the store works on: recall by a word and by the vector, list, a new store
        assert [m.text for m in s.list() if "Lakeview" in m.text] == ["the team offsite is at Lakeview Lodge!"]
        assert s.recall("Lakeview", min_score=0).hits[0].memory.id == again.memory.id
        assert s.store("A new memory after the forget").action == "created" and s.count() == 14
