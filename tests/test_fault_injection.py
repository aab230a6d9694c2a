"""Fault injection (issue 17): random kill points and random provider misbehaviour, round after round.

Each round edits the workspace, queues a random fault at the fake OpenAI server (duplicate or
missing response indexes, zero/NaN vectors, one vector fewer, a truncated body, a stall past
the client timeout, HTTP 500s, and since issue 22 a 200 HTML page, a non-base64 embedding, a body
dripped a byte at a time, a gzip bomb and an endless body; or nothing), and runs ``memory-core index`` in a child process
that SIGKILLs itself at a random crash point (or not at all), with a random writer (temp file,
writer process, in place). After every round:

* the child ended with 0, 1 (one line on stderr, no traceback) or SIGKILL;
* the live index is whole (probe, chunks = FTS rows = vectors = the files table's count);
* every vector in the cache is the one the provider gives for that chunk's text (a vector
  stored under the wrong chunk, a zero or a NaN would differ), finite and of norm 1;
* with the faults cleared, a rerun completes and indexes exactly the workspace's files.

The seeded short version runs by default; ``-m slow`` runs a longer one with another seed.
"""

from __future__ import annotations

import functools
import json
import os
import random
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from memory_core.index.chunking import sha256_hex
from memory_core.index.pipeline import run_index
from memory_core.sources.discovery import discover_files
from memory_core.storage.cache import EmbeddingCache
from memory_core.storage.store import connect, probe_index
from tests.conftest import ROOT, openai_settings, vector_count
from tests.fakes.common import Fault, fake_vector
from tests.fakes.openai_fake import OpenAIFake

DIMS = 64
MODEL = "text-embedding-3-small"
KILL_POINTS = [None, None, "discover", "chunk", "embed", "build", "before-swap", "after-swap"]
WRITERS = ["copy", "process", "inplace"]
FAULTS = ["none", "dup_index", "gap_index", "zero", "nan", "fewer", "reorder", "malformed", "hang", "500",
          # issue 22: a 200 HTML page, a non-base64 embedding, a dripped body, a gzip bomb, an endless body
          "html", "not_base64", "drip", "gzip_bomb", "endless"]


def _whole(index: Path) -> frozenset[str]:
    """The indexed paths, after checking that the live index is a complete one."""
    meta, problem = probe_index(index)
    assert problem is None and meta is not None, problem
    conn = connect(index, readonly=True)
    try:
        n = conn.execute("SELECT count(*) FROM chunks").fetchone()[0]
        assert conn.execute("SELECT count(*) FROM chunks_fts").fetchone()[0] == n
        assert vector_count(conn) == n
        assert conn.execute("SELECT coalesce(sum(chunks), 0) FROM files").fetchone()[0] == n
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        return frozenset(r[0] for r in conn.execute("SELECT path FROM files"))
    finally:
        conn.close()


def _cache_is_valid(s, texts_by_hash: dict[str, str]) -> int:
    """Every cached vector is the provider's vector for its chunk's text; returns the count."""
    meta, _ = probe_index(s.index_file)
    with EmbeddingCache(s.cache_file, "openai", MODEL, meta["provider_key"]) as cache:
        rows = list(cache.conn.execute("SELECT hash, embedding FROM cache_vectors WHERE model_id = ?",
                                       (cache.model_id,)))
    for digest, emb in rows:
        v = np.frombuffer(emb, dtype="<f4")
        assert v.shape == (DIMS,) and np.isfinite(v).all() and abs(float(np.linalg.norm(v)) - 1) < 1e-4
        text = texts_by_hash.get(digest.hex())
        assert text is not None, "a cached vector for a text never sent"
        assert np.allclose(v, np.asarray(fake_vector(text, DIMS), dtype=np.float32)), "vector under the wrong chunk"
    return len(rows)


def _edit(ws: Path, rng: random.Random, round_no: int) -> None:
    notes = sorted((ws / "memory").glob("*.md"))
    action = rng.choice(["add", "add", "change", "delete"] if len(notes) > 3 else ["add"])
    if action == "add":
        # several chunks (a request carries up to 3): a response's indexes matter
        body = "\n\n".join(f"## item {i}\nround {round_no} note {i}: {rng.random():.12f} about the capybara queue, "
                           + "the rollout, the replicas and the on-call rota. " * 6 for i in range(rng.randint(12, 30)))
        (ws / "memory" / f"fi-{round_no}.md").write_text(f"# round {round_no}\n\n{body}\n")
    elif action == "change":
        p = rng.choice(notes)
        p.write_text(p.read_text() + "".join(f"\n## appended {i} in round {round_no}\n{rng.random():.12f} more words"
                                             " about the queue and its consumers.\n" * 8 for i in range(6)))
    else:
        rng.choice(notes).unlink()


def _inject(fake: OpenAIFake, fault: str, n: int | None) -> None:
    """Queue ``fault`` for the next ``n`` embedding requests (None: all of them)."""
    if fault in ("dup_index", "gap_index", "zero", "nan", "fewer", "reorder"):
        fake.bad_payload_next(fault, n)
    elif fault == "malformed":
        fake.malformed_next(n)  # HTTP 200 with a truncated JSON body
    elif fault == "hang":
        fake.hang_next(n, seconds=1.5)  # past the client's 0.5 s timeout
    elif fault == "500":
        fake.fail_next(n, 500)
    elif fault == "html":
        fake.inject(Fault("raw", body=b"<html><body>Sign in</body></html>", headers={"Content-Type": "text/html"}), n)
    elif fault == "not_base64":
        body = json.dumps({"object": "list", "model": MODEL, "usage": {"prompt_tokens": 1, "total_tokens": 1},
                           "data": [{"object": "embedding", "index": 0, "embedding": "<b>not base64</b>"}]})
        fake.inject(Fault("raw", body=body.encode()), n)
    elif fault == "drip":
        fake.inject(Fault("drip", seconds=0.05), n)  # a byte every 50 ms: past the 0.5 s limit of an attempt
    elif fault == "gzip_bomb":
        fake.inject(Fault("raw", body=_gzip_bomb(300), headers={"Content-Type": "application/json",
                                                            "Content-Encoding": "gzip"}), n)
    elif fault == "endless":
        fake.inject(Fault("endless"), n)


@functools.cache
def _gzip_bomb(mib: int) -> bytes:
    """``mib`` MiB of spaces, gzip-compressed to ~1/1000 (300 MiB: over the 256 MiB cap of a response)."""
    import zlib

    z = zlib.compressobj(9, zlib.DEFLATED, 31)
    return b"".join(z.compress(b" " * (1 << 20)) for _ in range(mib)) + z.flush()



def _rounds(tmp_path: Path, seed: int, rounds: int, *, every_fault: bool = False) -> dict[str, int]:
    """``every_fault``: the faults in a seeded order, each once (``rounds`` = len(FAULTS))."""
    rng = random.Random(seed)
    order = rng.sample(FAULTS, len(FAULTS)) if every_fault else []
    ws = tmp_path / "ws"
    shutil.copytree(ROOT / "examples" / "workspace", ws, ignore=shutil.ignore_patterns(".memory-core"))
    seen: dict[str, int] = {"killed": 0, "failed": 0, "ok": 0}
    with OpenAIFake(dims=DIMS) as fake:
        s = openai_settings(ws, fake, remote={"max_inputs_per_request": 3, "max_attempts": 2, "timeout_s": 0.5})
        run_index(s)
        cfg = tmp_path / "c.toml"
        cfg.write_text(
            f'workspace = "{ws}"\nprovider = "openai"\nmodel = "{MODEL}"\n'
            f'[remote]\nbase_url = "{fake.base_url}"\ndimensions = {DIMS}\nmax_inputs_per_request = 3\n'
            "max_attempts = 2\ntimeout_s = 0.5\nbackoff_initial_s = 0.01\nbackoff_max_s = 0.05\nretry_budget_s = 5\n")
        for r in range(rounds):
            _edit(ws, rng, r)
            fault = order[r] if every_fault else rng.choice(FAULTS)
            n, kill, writer = rng.choice([1, 2, 3, None]), rng.choice(KILL_POINTS), rng.choice(WRITERS)
            if every_fault:  # the short version: every fault meets every response, before any kill
                n = None
                kill = None if kill in ("discover", "chunk", "embed") else kill
            fake.clear_faults()
            _inject(fake, fault, n)
            env = dict(os.environ, PYTHONPATH=str(ROOT), OPENAI_API_KEY="sk-test-key-0123456789",
                       MEMORY_CORE_WRITER=writer)
            env.pop("MEMORY_CORE_FAILPOINT", None)
            if kill:
                env["MEMORY_CORE_FAILPOINT"] = kill
            proc = subprocess.run([sys.executable, "-m", "memory_core.apps.cli", "index", "--config", str(cfg),
                                   "--engine", "local", "--no-progress"], env=env, capture_output=True, text=True,
                                  timeout=180)
            where = f"round {r}: fault {fault} x{n or 'all'}, kill at {kill}, writer {writer}"
            assert proc.returncode in (0, 1, -signal.SIGKILL), f"{where}: exit {proc.returncode}\n{proc.stderr[-3000:]}"
            assert "Traceback" not in proc.stderr, f"{where}\n{proc.stderr[-3000:]}"
            if proc.returncode == 1:
                assert proc.stderr.count("memory-core: error:") == 1, f"{where}\n{proc.stderr[-3000:]}"
            seen[{0: "ok", 1: "failed"}.get(proc.returncode, "killed")] += 1
            _whole(s.index_file)
            texts = {sha256_hex(t): t for t in fake.input_texts}
            _cache_is_valid(s, texts)
            fake.clear_faults()
            run_index(s)  # the rerun completes ...
            expected = frozenset(f.path for f in discover_files(s).files)
            assert _whole(s.index_file) == expected, where  # ... and indexes exactly the workspace
            _cache_is_valid(s, {sha256_hex(t): t for t in fake.input_texts})
            assert not [p for p in s.index_file.parent.iterdir() if ".tmp-" in p.name], where
    return seen


def test_random_faults_and_kills_short(tmp_path):
    seen = _rounds(tmp_path, seed=17, rounds=len(FAULTS), every_fault=True)
    assert sum(seen.values()) == len(FAULTS)


@pytest.mark.slow
def test_random_faults_and_kills_long(tmp_path):
    seen = _rounds(tmp_path, seed=1717, rounds=60)
    assert seen["killed"] and seen["failed"] and seen["ok"]  # every outcome was reached
