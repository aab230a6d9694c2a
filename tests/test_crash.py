"""SIGKILL in the middle of embedding: the live index survives and nothing paid for is lost."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from memory_core.cache import EmbeddingCache
from memory_core.chunking import sha256_hex
from memory_core.pipeline import run_index
from memory_core.search import Searcher
from memory_core.store import probe_index
from tests.conftest import ROOT, openai_settings
from tests.fakes.openai_fake import OpenAIFake


def _write_config(path: Path, ws: Path, base_url: str) -> None:
    path.write_text(
        f'workspace = "{ws}"\nprovider = "openai"\nmodel = "text-embedding-3-small"\n'
        "[chunking]\ntokens = 100\noverlap = 10\n"
        f'[remote]\nbase_url = "{base_url}"\ndimensions = 64\nmax_inputs_per_request = 8\n'
        "backoff_initial_s = 0.01\n"
    )


def test_sigkill_during_embedding_keeps_live_index_and_paid_vectors(tmp_path: Path):
    src = ROOT / "examples" / "workspace"
    ws = tmp_path / "ws"
    ws.mkdir()
    shutil.copy(src / "MEMORY.md", ws / "MEMORY.md")
    cfg = tmp_path / "memory-core.toml"
    with OpenAIFake(dims=64) as srv:
        _write_config(cfg, ws, srv.base_url)
        settings = openai_settings(ws, srv, chunking={"tokens": 100, "overlap": 10},
                                   remote={"max_inputs_per_request": 8})
        first = run_index(settings)
        live_bytes = settings.index_file.read_bytes()
        assert first.files_scanned == 1

        shutil.copytree(src / "memory", ws / "memory")
        srv.delay = 0.4  # a slow provider
        env = dict(os.environ, OPENAI_API_KEY="sk-test-key-0123456789", PYTHONPATH=str(ROOT))
        proc = subprocess.Popen(
            [sys.executable, "-m", "memory_core.cli", "index", "--config", str(cfg), "--engine", "local",
             "--no-progress"],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )
        deadline = time.monotonic() + 60
        while len(srv.sync_billed_texts) < 8 * 12 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
        assert proc.poll() is None, proc.communicate()
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        time.sleep(0.5)  # let in-flight fake responses finish

        # the live index is exactly the old one, and searchable
        assert settings.index_file.read_bytes() == live_bytes
        meta, problem = probe_index(settings.index_file)
        assert problem is None
        with Searcher(settings) as s:
            assert s.status()["files"] == 1
            assert s.search("Dana", min_score=0)

        # what was received before the kill is in the cache
        with EmbeddingCache(settings.cache_file, "openai", "text-embedding-3-small",
                            meta["provider_key"]) as cache:
            cached_hashes = cache.hashes()
        assert len(cached_hashes) >= first.chunks_total + 8 * 4

        srv.delay = 0.0
        n_before = len(srv.input_texts)
        rerun = run_index(settings)
        sent = srv.input_texts[n_before:]
        assert rerun.swapped and rerun.chunks_embedded == len(sent) == len(set(sent)) > 0
        # nothing already received is embedded again: the rerun sends exactly the misses
        assert not {sha256_hex(t) for t in sent} & cached_hashes
        assert rerun.chunks_from_cache >= len(cached_hashes) - first.chunks_total
        with Searcher(settings) as s:
            assert s.status()["files"] == rerun.files_scanned > 1
        # the killed run's temp file was cleaned up by the rerun
        leftovers = [p for p in settings.index_file.parent.iterdir() if ".tmp-" in p.name]
        assert leftovers == []
