"""SIGKILL campaign for the memory store (issue 39): a process storing memories is killed at each
of the store's failpoints and at random moments; after every kill no acknowledged memory is lost,
the table reads whole (nothing set aside), every stored memory is found by keyword and by vector,
and the next store and recall work. The pattern of tests/test_killpoints.py and the write tool's
kill tests (tests/test_notes_attack.py): real processes, the real LanceDB, the OpenAI SDK against
the loopback fake."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from memory_core.config import load_settings
from memory_core.notes.memory_store import TABLE, MemoryStore
from tests.conftest import ROOT

# stores memories (each with a word of its own, okapi<i>) and prints each id once store() returned
CHILD = r"""
import os, sys, pathlib
from memory_core.config import load_settings
from memory_core.notes import memory_store as ms
ms.COMPACT_EVERY = int(os.environ.get("COMPACT_EVERY", "64"))
import lancedb  # noqa: F401  (seconds to import: the kills land in the stores, not in the import)
s = ms.MemoryStore(load_settings(pathlib.Path(sys.argv[1])))
print("ready", flush=True)
start, n = int(sys.argv[2]), int(sys.argv[3])
for i in range(start, start + n):
    r = s.store(f"memory {i} says the okapi{i} ledger closes at {i} o'clock", category="fact")
    print(r.memory.id, i, flush=True)
"""


def _config(ws: Path, base_url: str) -> Path:
    cfg = ws / "memory-core.toml"
    cfg.write_text(f'workspace = "{ws}"\nprovider = "openai"\nmodel = "text-embedding-3-small"\n[remote]\n'
                   f'base_url = "{base_url}"\napi_key = "sk-test-key-0123456789"\ndimensions = 64\n'
                   'backoff_initial_s = 0.01\nbackoff_max_s = 0.05\nmax_attempts = 2\ntimeout_s = 30\n')
    return cfg


def _child(cfg: Path, start: int, n: int, **env: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", CHILD, str(cfg), str(start), str(n)],
                            env=dict(os.environ, PYTHONPATH=str(ROOT), **env), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _acks(out: str) -> dict[str, int]:
    rows = [line.split() for line in out.splitlines() if line.strip() and line != "ready"]
    return {mid: int(i) for mid, i in rows}


def _check(cfg: Path, acked: dict[str, int]) -> None:
    """What must hold after any kill."""
    with MemoryStore(load_settings(cfg)) as s:
        if acked:
            assert s._damaged() is False
        missing = sorted(i for mid, i in acked.items() if s.get(mid) is None)
        assert not missing, f"acknowledged memories lost: {missing}"
        mems = s.list()
        assert {m.id for m in mems} >= set(acked)
        for m in mems:  # every stored memory (acknowledged or in flight) is found by its own word
            word = m.text.split()[4]
            hits = s.recall(word, max_results=3, mode="keyword").hits
            assert hits and hits[0].memory.id == m.id, (word, [h.memory.text for h in hits])
            hits = s.recall(m.text, max_results=3, mode="vector").hits
            assert hits and hits[0].memory.id == m.id
        assert s.set_aside is None, "a killed store was set aside as damaged"
        # the next store and recall work
        res = s.store(f"after the kill number {len(mems)} the tapir{len(mems)} rests", category="fact")
        assert res.action == "created" and s.get(res.memory.id) is not None
        assert s.recall(f"tapir{len(mems)}", mode="keyword").hits[0].memory.id == res.memory.id
        s.forget(res.memory.id)
        assert not list(s.path.glob(f".{TABLE}.creating-*")), "a killed creator's folder stayed"
        assert not [p for p in (*s.path.parent.iterdir(), *s.path.iterdir()) if ".damaged-" in p.name]


@pytest.mark.parametrize("point", ["store-created", "store-committed", "store-indexed"])
def test_sigkill_at_each_store_failpoint(workspace: Path, openai_fake: Any, point: str) -> None:
    """``store-created``: the first memory's table is written, its full-text index not yet. The
    old code created both in place: killed between, the table had no index and every keyword
    recall failed (vector side only) until the next store. Now the table is made whole aside and
    renamed into place; the killed creator's folder goes with the next first store."""
    cfg = _config(workspace, openai_fake.base_url)
    acked: dict[str, int] = {}
    if point != "store-created":
        proc = _child(cfg, 0, 3)
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err[-2000:]
        acked = _acks(out)
        assert len(acked) == 3
    proc = _child(cfg, 100, 3, MEMORY_CORE_FAILPOINT=point)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == -signal.SIGKILL, err[-2000:]
    assert not _acks(out)  # killed in its first store
    _check(cfg, acked)


@pytest.mark.slow
def test_sigkill_at_random_moments(workspace: Path, openai_fake: Any) -> None:
    """Kills at random moments of a stream of stores, beside a second writer that is not killed
    (it waits for the store's lock the killed one may hold), with a compaction every 4 versions
    (in production every 64) so kills land in compactions and version clean-ups too."""
    cfg = _config(workspace, openai_fake.base_url)
    rng = random.Random(39)
    acked: dict[str, int] = {}
    for n in range(8):
        proc = _child(cfg, n * 100, 100, COMPACT_EVERY="4")
        # a second writer beside it, not killed: the kills never hold it up or lose its memories
        other = _child(cfg, 10_000 + n * 100, 4, COMPACT_EVERY="4")
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready", proc.communicate(timeout=60)[1][-2000:]
        first = proc.stdout.readline()  # the first store done: the next kill lands among stores
        assert first.strip(), proc.communicate(timeout=60)[1][-2000:]
        time.sleep(rng.uniform(0.0, 1.5))
        os.kill(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate(timeout=300)
        assert proc.returncode == -signal.SIGKILL
        acked.update(_acks(first + out))
        out, err = other.communicate(timeout=300)
        assert other.returncode == 0, err[-2000:]
        assert len(_acks(out)) == 4
        acked.update(_acks(out))
        _check(cfg, acked)
    assert len(acked) >= 8


FORGET_CHILD = r"""
import sys, pathlib
from memory_core.config import load_settings
from memory_core.notes import memory_store as ms
s = ms.MemoryStore(load_settings(pathlib.Path(sys.argv[1])))
print("forgetting", flush=True)
s.forget(sys.argv[2])
print("forgot", flush=True)
"""


def test_a_forget_killed_before_its_text_left_the_disk_is_finished_by_the_next_write(
        workspace: Path, openai_fake: Any) -> None:
    """Killed between a forget's delete and the rewrite that takes its text off the disk
    (``store-forget-deleted``), the text stayed in a data file until the next forget or update (the
    twenty-third session's audit 1). The forget leaves a marker; the next write of any kind (a
    new memory here) purges, and the marker goes."""
    from tests.test_store_attack import _files_holding

    cfg = _config(workspace, openai_fake.base_url)
    with MemoryStore(load_settings(cfg)) as s:
        gone = s.store("Dana's alarm code is tango-7-lima-9-kilo", category="fact").memory.id
        s.store("The team offsite is at Lakeview Lodge", category="fact")
        path = s.path
    proc = subprocess.Popen([sys.executable, "-c", FORGET_CHILD, str(cfg), gone], text=True,
                            env=dict(os.environ, PYTHONPATH=str(ROOT), MEMORY_CORE_FAILPOINT="store-forget-deleted"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == -signal.SIGKILL, err[-2000:]
    assert "forgot" not in out
    marker = path.with_name(f".{path.name}.purge")
    assert marker.is_file()
    assert _files_holding(path, b"tango-7-lima"), "(the kill came before the rewrite)"
    with MemoryStore(load_settings(cfg)) as s:
        assert s.get(gone) is None  # the delete was committed
        assert s.store("The garden hose is in the shed", category="fact").action == "created"
        assert _files_holding(path, b"tango-7-lima") == [], "the next write left the forgotten text on disk"
        assert not marker.exists()
        assert s.count() == 2 and s.recall("Lakeview", min_score=0).hits
