"""Whatever ends a run, both executors keep every vector they received (issue 16).

SIGKILL and SIGTERM in the middle of embedding, for `index --engine local` and for
`index --engine prefect` against a real Prefect server: the live index is untouched, every
vector the provider sent back is in the cache, the rerun embeds only what was never received,
and a SIGTERMed run still says what it had done (exit 1), with either engine. The Prefect run also
prints its URL."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from memory_core.index.chunking import sha256_hex
from memory_core.index.pipeline import run_index
from memory_core.storage.cache import EmbeddingCache
from memory_core.storage.store import probe_index
from tests.conftest import ROOT, openai_settings
from tests.fakes.openai_fake import OpenAIFake
from tests.prefect_server import shared_server


def _config(path: Path, ws: Path, base_url: str) -> None:
    path.write_text(
        f'workspace = "{ws}"\nprovider = "openai"\nmodel = "text-embedding-3-small"\n'
        "[chunking]\ntokens = 100\noverlap = 10\n"
        f'[remote]\nbase_url = "{base_url}"\ndimensions = 64\nmax_inputs_per_request = 8\n'
        "backoff_initial_s = 0.01\n"
    )


@pytest.fixture(params=["local", "prefect"])
def engine(request: pytest.FixtureRequest) -> tuple[str, dict[str, str]]:
    env = dict(os.environ, OPENAI_API_KEY="sk-test-key-0123456789", PYTHONPATH=str(ROOT))
    if request.param == "prefect":
        request.applymarker(pytest.mark.prefect_server)
        env = shared_server(request.config).env(OPENAI_API_KEY="sk-test-key-0123456789", PYTHONPATH=str(ROOT))
    return request.param, env


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_a_stopped_run_keeps_what_it_received(tmp_path: Path, engine: tuple[str, dict[str, str]], sig: int) -> None:
    name, env = engine
    src = ROOT / "examples" / "workspace"
    ws = tmp_path / "ws"
    ws.mkdir()
    shutil.copy(src / "MEMORY.md", ws / "MEMORY.md")
    cfg = tmp_path / "memory-core.toml"
    with OpenAIFake(dims=64) as srv:
        _config(cfg, ws, srv.base_url)
        settings = openai_settings(ws, srv, chunking={"tokens": 100, "overlap": 10},
                                   remote={"max_inputs_per_request": 8})
        first = run_index(settings)
        live_bytes = settings.index_file.read_bytes()
        shutil.copytree(src / "memory", ws / "memory")
        srv.delay = 0.4  # a slow provider
        proc = subprocess.Popen(
            [sys.executable, "-m", "memory_core.apps.cli", "index", "--config", str(cfg), "--engine", name, "--no-progress"],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 120
        while len(srv.sync_billed_texts) < 8 * 12 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
        assert proc.poll() is None, proc.communicate()
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=90)
        time.sleep(0.5)  # let in-flight fake responses finish
        received = {sha256_hex(t) for t in srv.sync_billed_texts}
        stderr = err.decode()

        assert proc.returncode != 0
        assert settings.index_file.read_bytes() == live_bytes  # the live index is exactly the old one
        meta, problem = probe_index(settings.index_file)
        assert problem is None and meta is not None
        if name == "prefect":
            assert "flow run: http" in stderr
        if sig == signal.SIGTERM:
            # both engines: exit 1 and our line (the Prefect run died by the signal, exit -15, with
            # Prefect's "Crash detected!" only, until the eighteenth session's audit)
            ours = [line for line in stderr.splitlines() if line.startswith("memory-core:")]
            assert proc.returncode == 1 and ours and "stopped by SIGTERM" in ours[-1], stderr
            assert "Traceback" not in stderr and "Crash detected" not in stderr, stderr  # ours says it
            if name == "local":
                assert stderr.count("\n") == 1  # one line
            said = int(ours[-1].rsplit("; the ", 1)[1].split(" chunk")[0])
            assert 0 < said <= len(received)

        srv.delay = 0.0
        n_before = len(srv.input_texts)
        with EmbeddingCache(settings.cache_file, "openai", "text-embedding-3-small", meta["provider_key"]) as cache:
            cached = cache.hashes()
        rerun = run_index(settings)
        sent = {sha256_hex(t) for t in srv.input_texts[n_before:]}
        # every response the killed run read is in the cache: what is missing of what the
        # provider answered is at most the requests in flight (2 x 4 threads x 8 inputs), which
        # the provider had answered but the process did not live to read
        in_flight = 2 * 4 * 8
        assert len(received - cached) <= in_flight and len(cached) >= first.chunks_total + 8 * 2
        # the rerun asks only for what is not in the cache
        assert not sent & cached and len(sent & received) <= in_flight
        assert rerun.swapped and rerun.chunks_embedded == len(sent) > 0
        assert rerun.files_scanned > first.files_scanned
        leftovers = [p for p in settings.index_file.parent.iterdir() if ".tmp-" in p.name]
        assert leftovers == [] and not (settings.index_file.parent / ".memory-core-work").exists()
