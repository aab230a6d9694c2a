"""SIGKILL at every stage of a run: the live index is the old or the new one, complete, never a
mix, and the rerun finishes without embedding anything it already received."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from memory_core.index.chunking import sha256_hex
from memory_core.index.pipeline import run_index
from memory_core.storage.cache import EmbeddingCache
from memory_core.storage.store import connect, probe_index
from tests.conftest import ROOT, index_content, openai_settings

PROBES = ["postgres replication lag", "rate limit", "lisbon hotel", "deploy window", "note"]
STAGES = ["discover", "chunk", "embed", "batch-poll", "build", "before-swap", "after-swap"]


def _consistent_state(index: Path) -> frozenset[str]:
    """The set of indexed paths, after checking the file is a complete index."""
    meta, problem = probe_index(index)
    assert problem is None, problem
    conn = connect(index, readonly=True)
    try:
        n = conn.execute("SELECT count(*) FROM chunks").fetchone()[0]
        assert conn.execute("SELECT count(*) FROM chunks_fts").fetchone()[0] == n
        from tests.conftest import vector_count

        assert vector_count(conn) == n
        assert conn.execute("SELECT coalesce(sum(chunks), 0) FROM files").fetchone()[0] == n
        return frozenset(r[0] for r in conn.execute("SELECT path FROM files"))
    finally:
        conn.close()


@pytest.mark.parametrize("stage", STAGES)
def test_sigkill_at_stage(tmp_path, stage, openai_fake):
    _sigkill_run(tmp_path, stage, openai_fake, "inline")


@pytest.mark.parametrize("stage", ["chunk", "embed", "build", "before-swap", "after-swap"])
def test_sigkill_with_the_writer_process(tmp_path, stage, openai_fake):
    """The same with the temp index written by a child process: the child outlives the killed
    run only long enough to delete its temp file; the result is the same."""
    _sigkill_run(tmp_path, stage, openai_fake, "process")


def _sigkill_run(tmp_path, stage, openai_fake, writer):
    src = ROOT / "examples" / "workspace"
    ws = tmp_path / "ws"
    shutil.copytree(src, ws, ignore=shutil.ignore_patterns(".memory-core", "2026-11-*"))
    s = openai_settings(ws, openai_fake, remote={"max_inputs_per_request": 4})
    run_index(s)
    old_paths = _consistent_state(s.index_file)
    for p in (src / "memory").glob("2026-11-*.md"):
        shutil.copy(p, ws / "memory" / p.name)
    cfg = tmp_path / "c.toml"
    cfg.write_text(
        f'workspace = "{ws}"\nprovider = "openai"\nmodel = "text-embedding-3-small"\n'
        f'[remote]\nbase_url = "{openai_fake.base_url}"\ndimensions = 64\nmax_inputs_per_request = 4\n'
        + ("[batch]\nenabled = true\npoll_interval_s = 0.05\n" if stage == "batch-poll" else "")
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT), OPENAI_API_KEY="sk-test-key-0123456789",
               MEMORY_CORE_FAILPOINT=stage, MEMORY_CORE_WRITER=writer)
    proc = subprocess.run([sys.executable, "-m", "memory_core.apps.cli", "index", "--config", str(cfg), "--engine",
                           "local", "--no-progress"], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL, (proc.returncode, proc.stderr[-2000:])

    state = _consistent_state(s.index_file)
    new_paths = old_paths | {f"memory/{p.name}" for p in (src / "memory").glob("2026-11-*.md")}
    assert state == (new_paths if stage == "after-swap" else old_paths)

    meta, _ = probe_index(s.index_file)
    with EmbeddingCache(s.cache_file, "openai", "text-embedding-3-small", meta["provider_key"]) as cache:
        cached = cache.hashes()
    n_before = len(openai_fake.input_texts)
    rerun = run_index(s)
    sent = openai_fake.input_texts[n_before:]
    assert not {sha256_hex(t) for t in sent} & cached  # nothing received is embedded again
    assert _consistent_state(s.index_file) == new_paths
    if stage == "after-swap":
        assert not rerun.swapped  # the killed run had finished its work
    assert not [p for p in s.index_file.parent.iterdir() if ".tmp-" in p.name]
    # and the index is the one a run that was never killed builds
    clean = openai_settings(ws, openai_fake, remote={"max_inputs_per_request": 4},
                            index_path=str(tmp_path / "clean" / "index.sqlite"))
    run_index(clean, full=True)
    assert index_content(s.index_file, PROBES) == index_content(clean.index_file, PROBES)
