"""A provider that answers one vector for every text (a misconfigured gateway or caching proxy),
and the way out of the bad vectors it left (docs/reliability.md, M2).

Such answers passed every check: 66 different texts got one vector, which went into the index and
the embedding cache; every search ranked every chunk alike; and once the provider was fixed even
``index --full`` took the bad vectors back from the cache (and the live index). Now a response
that gives three or more texts the model tells apart one and the same vector is refused as the
other impossible answers are (ProviderError, nothing cached), on every provider path (sync, and a
Batch API job's output), while the identical vectors a model does give (the same text; for the
uncased local model, texts that differ only in case) are accepted; and ``index --re-embed``
embeds every chunk again, reading no cached vector, the fresh vectors replacing the bad ones.
A request of one or two texts (an incremental run's changed chunk) is compared with vectors
received before for other texts (memory_core/index/answer_check.py): before, such a run stored
whatever the gateway answered.

Real parts: the official OpenAI SDK against the fake server on 127.0.0.1, the CLI in a
subprocess, real SQLite indexes and caches, the real local model, a real Prefect server.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from memory_core.config import load_settings
from memory_core.embeddings.base import check_vectors
from memory_core.errors import ProviderError
from memory_core.index.pipeline import run_index
from memory_core.storage.cache import EmbeddingCache
from memory_core.storage.store import connect, probe_index
from tests.conftest import EXAMPLES, ROOT, vector_rows
from tests.fakes.common import fake_vector
from tests.fakes.openai_fake import OpenAIFake

DIMS = 64
MODEL = "text-embedding-3-small"
ONE_LINE = re.compile(r"memory-core: error: openai returned the same vector for (\d+) different texts \(a gateway or"
                      r" cache answering one vector for every input\?\); refused, nothing was cached")


def _ws(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    shutil.copytree(EXAMPLES / "workspace", ws, ignore=shutil.ignore_patterns(".memory-core"))
    return ws


def _config(tmp_path: Path, srv: Any, *remote: str) -> Path:
    cfg = tmp_path / "mc.toml"
    cfg.write_text(f'provider = "openai"\nmodel = "{MODEL}"\n[remote]\napi_key = "sk-test-key-0123456789"\n'
                   f'base_url = "{srv.base_url}"\ndimensions = {DIMS}\nbackoff_initial_s = 0.01\n'
                   + "".join(f"{line}\n" for line in remote))
    return cfg


def _cli(*args: str | Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "memory_core.apps.cli", *map(str, args)], capture_output=True,
                          text=True, env=env, timeout=300, cwd=ROOT)


def _index(ws: Path, cfg: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    return _cli("index", "-w", ws, "--config", cfg, "--engine", "local", "--no-progress", *flags)


def _cache_rows(ws: Path) -> dict[bytes, bytes]:
    """digest -> vector of every entry of the cache file (no run is open: journals are folded)."""
    path = ws / ".memory-core" / "index.cache.sqlite"
    assert not list(path.parent.glob("index.cache.sqlite-journal-*"))
    if not path.exists():
        return {}
    conn = connect(path, readonly=True)
    try:
        return dict(conn.execute("SELECT hash, embedding FROM cache_vectors"))
    finally:
        conn.close()


def _chunks(ws: Path) -> list[tuple[Any, ...]]:
    conn = connect(ws / ".memory-core" / "index.sqlite", readonly=True)
    try:
        vector_rows(conn)  # every vector has its sign bits
        return conn.execute("SELECT path, start_line, hash, text, embedding FROM chunks ORDER BY path, start_line").fetchall()
    finally:
        conn.close()


def _fresh(text: str) -> bytes:
    return np.asarray(fake_vector(text, DIMS), dtype="<f4").tobytes()


def _long_note(topic: str) -> str:
    """A note of several chunks (one request of the run holds all of them)."""
    return f"# {topic}\n\n" + "\n\n".join(f"## part {i}\n" + f"{topic} detail {i}: the rollout, the replicas, the"
                                          " on-call rota and the queue consumers. " * 30 for i in range(4))


# -- the refusal ----------------------------------------------------------------------------------

def test_one_vector_for_every_text_fails_the_first_build_with_one_line_and_caches_nothing(tmp_path: Path) -> None:
    ws = _ws(tmp_path)
    with OpenAIFake(dims=DIMS) as srv:
        srv.same_vector = True  # a gateway answering one vector whatever it is asked
        cfg = _config(tmp_path, srv)
        r = _index(ws, cfg)
        js = _index(ws, cfg, "--json")
        assert srv.embed_requests == 2  # asked once a run (not retried: it is no passing fault)
    assert r.returncode == 1, r.stdout + r.stderr
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and ONE_LINE.fullmatch(lines[0]), r.stderr
    assert int(ONE_LINE.fullmatch(lines[0])[1]) > 30  # type: ignore[index]
    assert r.stdout == ""
    assert js.returncode == 1
    import json

    out = json.loads(js.stdout)
    assert ONE_LINE.fullmatch(f"memory-core: error: {out['error']}") and out["chunks_embedded"] == 0
    assert not (ws / ".memory-core" / "index.sqlite").exists()  # no index is made of them
    assert _cache_rows(ws) == {}  # and nothing is cached


def test_one_vector_for_every_text_leaves_the_live_index_and_the_cache_as_they_were(tmp_path: Path) -> None:
    ws = _ws(tmp_path)
    with OpenAIFake(dims=DIMS) as srv:
        cfg = _config(tmp_path, srv)
        assert _index(ws, cfg).returncode == 0
        before, cached = _chunks(ws), _cache_rows(ws)
        (ws / "memory" / "gateway.md").write_text(_long_note("gateway"))
        srv.same_vector = True
        r = _index(ws, cfg)
        assert r.returncode == 1 and ONE_LINE.fullmatch(r.stderr.strip()), r.stderr
        assert _chunks(ws) == before and _cache_rows(ws) == cached
        srv.same_vector = False  # the provider is fixed: the next run embeds the note, each part its own vector
        assert _index(ws, cfg).returncode == 0
    rows = [row for row in _chunks(ws) if row[0] == "memory/gateway.md"]
    assert len(rows) >= 3 and all(emb == _fresh(text) for _, _, _, text, emb in rows)


def _hosted(name: str, ws: Path) -> tuple[Any, Any]:
    """(the fake server, a settings builder for it) of a hosted provider."""
    from tests.conftest import openai_settings
    from tests.fakes.gemini_fake import GeminiFake
    from tests.fakes.mistral_fake import MistralFake
    from tests.fakes.voyage_fake import VoyageFake
    from tests.test_mistral import KEY as MISTRAL_KEY
    from tests.test_mistral import mistral_settings
    from tests.test_providers_gemini_voyage import gemini_settings, voyage_settings

    made = {"openai": (lambda: OpenAIFake(dims=DIMS), openai_settings),
            "gemini": (lambda: GeminiFake(dims=None), gemini_settings),
            "voyage": (lambda: VoyageFake(dims=None, api_key="pa-key"), voyage_settings),
            "mistral": (lambda: MistralFake(api_key=MISTRAL_KEY), mistral_settings)}[name]
    return made[0](), made[1]


@pytest.mark.parametrize("name", ["openai", "gemini", "voyage", "mistral"])
def test_every_hosted_provider_refuses_one_vector_for_every_text(tmp_path: Path, name: str) -> None:
    ws = _ws(tmp_path)
    server, settings_for = _hosted(name, ws)
    with server as srv:
        s = settings_for(ws, srv)
        srv.same_vector = True
        with pytest.raises(ProviderError, match=rf"^{name} returned the same vector for \d+ different texts"):
            run_index(s)
        assert not s.index_file.exists()
        assert _cache_rows(ws) == {}
        srv.same_vector = False
        assert run_index(s).swapped
    assert len({row[4] for row in _chunks(ws)}) == len(_chunks(ws))


def test_a_batch_job_answering_one_vector_for_every_line_is_refused(workspace: Path, caplog: Any) -> None:
    """The Batch API's output is read line by line, one vector a line: a job whose lines all got
    one vector is refused whole (nothing cached), and its chunks go to sync requests, which the
    same gateway answers the same way: the run fails with the one line, nothing cached."""
    with OpenAIFake(dims=DIMS, batch_delay=0.05) as srv:
        srv.same_vector = True
        s = load_settings(None, {
            "workspace": str(workspace), "provider": "openai", "model": MODEL,
            "remote": {"api_key": "sk-test-key-0123456789", "base_url": srv.base_url, "dimensions": DIMS,
                       "backoff_initial_s": 0.01, "max_attempts": 2},
            "batch": {"enabled": True, "poll_interval_s": 0.02, "max_requests_per_job": 1000, "timeout_minutes": 1}})
        with pytest.raises(ProviderError) as err:
            run_index(s)
        assert srv.batch_creates == 1 and srv.embed_requests >= 1
    assert ONE_LINE.fullmatch(f"memory-core: error: {err.value}"), err.value
    assert any(re.search(r"openai batch \S+ returned the same vector for \d+ different texts", r.getMessage())
               for r in caplog.records), [r.getMessage() for r in caplog.records]
    assert not s.index_file.exists()
    conn = connect(s.cache_file, readonly=True)
    try:
        assert conn.execute("SELECT count(*) FROM cache_vectors").fetchone()[0] == 0
        states = conn.execute("SELECT state, error FROM batch_jobs").fetchall()
    finally:
        conn.close()
    assert len(states) == 1 and "same_vector" in states[0][1], states


# -- what a model does give: never refused -------------------------------------------------------

def test_identical_vectors_a_model_gives_are_accepted() -> None:
    rng = np.random.default_rng(7)
    v = rng.normal(size=DIMS).astype(np.float32)
    one = np.stack([v, v, v])
    # the same text three times, two texts, texts a hosted model reads alike: accepted
    for texts in (["a note"] * 3, ["a note", "a note", "another note"], ["Rate  limit", "rate limit", "RATE LIMIT\n"]):
        assert check_vectors(one, 3, provider="openai", texts=texts).shape == (3, DIMS)
    assert check_vectors(one[:2], 2, provider="openai", texts=["one", "two"]).shape == (2, DIMS)
    # texts that differ only past the model's window (max_tokens // 4 characters: surely within it)
    head = "x" * 40
    assert check_vectors(one, 3, provider="openai", texts=[head + "1", head + "2", head + "3"],
                         told_apart=lambda ts: len({t[:40] for t in ts})).shape == (3, DIMS)
    # different vectors for the same texts: of course
    assert check_vectors(rng.normal(size=(3, DIMS)), 3, provider="openai", texts=["a", "b", "c"]).shape == (3, DIMS)
    # three different texts, one vector: refused
    with pytest.raises(ProviderError, match=r"^voyage returned the same vector for 3 different texts"):
        check_vectors(one, 3, provider="voyage", texts=["alpha", "beta", "gamma"])
    # a single differing bit is another vector
    bits = one.copy().view(np.uint32)
    bits[2, 5] ^= 1
    assert check_vectors(bits.view(np.float32), 3, provider="openai", texts=["alpha", "beta", "gamma"]).shape == (3, DIMS)


def test_the_uncased_local_model_gives_texts_differing_in_case_one_vector_and_is_not_refused(tmp_path: Path) -> None:
    from memory_core.embeddings.local import local_model_available
    from memory_core.embeddings.registry import create_provider

    if not local_model_available():
        pytest.skip("the local model is not installed")
    provider, _ = create_provider(load_settings(None, {"provider": "local"}, env={}))
    try:
        same = ["Rate limit", "RATE LIMIT", "rate limit"]
        vecs = provider.embed_documents(same)  # one vector for the three, bit for bit: no error
        assert len({row.tobytes() for row in vecs}) == 1
        assert provider.texts_told_apart(same) == 1
        assert provider.texts_told_apart(["café au lait", "CAFE AU LAIT", "Café au lait"]) == 1
        long = "word " * 400  # past the 256-piece window, they differ only at their ends
        assert provider.texts_told_apart([long + "a", long + "b", long + "c"]) == 1
        assert provider.texts_told_apart(["Rate limit", "rate limiting", "rate"]) == 3
    finally:
        provider.close()
    # a run over three notes the model reads alike indexes them
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    for name, text in (("a", "Rate limit"), ("b", "RATE LIMIT"), ("c", "rate limit")):
        (ws / "memory" / f"{name}.md").write_text(text + "\n")
    summary = run_index(load_settings(None, {"workspace": str(ws), "provider": "local"}, env={}))
    assert summary.swapped and summary.chunks_embedded == 3


# -- the way out: index --re-embed ----------------------------------------------------------------

# `memory-core index` as it was before requests of one or two texts were checked (answer_check)
_UNCHECKED = ("import sys; from memory_core.index import answer_check;"
              " answer_check.SmallRequestCheck.check = lambda self, hashes, vectors: None;"
              " from memory_core.apps.cli import main; sys.exit(main(sys.argv[1:]))")


def _index_unchecked(ws: Path, cfg: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-c", _UNCHECKED, "index", "-w", str(ws), "--config", str(cfg), "--engine",
                           "local", "--no-progress"], capture_output=True, text=True, env=env, timeout=300, cwd=ROOT)


def _poisoned(tmp_path: Path, srv: Any) -> tuple[Path, Path]:
    """A workspace whose index and cache hold the one vector a gateway answered: requests of two
    texts each (``max_inputs_per_request = 2``) gave no request three texts to compare, before
    such requests were compared with the vectors received for other texts (runs as they were)."""
    ws = _ws(tmp_path)
    (ws / "memory" / "gateway.md").write_text(_long_note("gateway"))
    cfg = _config(tmp_path, srv, "max_inputs_per_request = 2")
    srv.same_vector = True
    assert _index_unchecked(ws, cfg).returncode == 0
    # an edit while the gateway was broken: the old text's (bad) vector is kept in the cache
    (ws / "memory" / "gateway.md").write_text(_long_note("gateway").replace("# gateway", "# gateway notes", 1))
    assert _index_unchecked(ws, cfg).returncode == 0
    srv.same_vector = False  # the provider is fixed
    return ws, cfg


def test_re_embed_replaces_the_bad_vectors_of_the_index_and_the_cache(tmp_path: Path) -> None:
    with OpenAIFake(dims=DIMS) as srv:
        ws, cfg = _poisoned(tmp_path, srv)
        bad = _fresh(srv.SAME_VECTOR_TEXT)
        assert {row[4] for row in _chunks(ws)} == {bad}
        assert bad in _cache_rows(ws).values()
        full = _index(ws, cfg, "--full")  # the bug: every vector came back from the cache and the index
        assert full.returncode == 0 and {row[4] for row in _chunks(ws)} == {bad}
        srv.reset_log()
        r = _index(ws, cfg, "--re-embed")
        assert r.returncode == 0, r.stderr
        rows = _chunks(ws)
        assert "every chunk re-embedded" in r.stdout
        assert f"chunks: {len(rows)} total, {len(rows)} from new/changed files, {len(rows)} embedded, 0 from cache" \
            in r.stdout, r.stdout
        assert {t for t in srv.input_texts} >= {row[3] for row in rows}  # each chunk sent again
        # every chunk has the fixed provider's vector; the cache holds no bad vector
        assert all(emb == _fresh(text) for _, _, _, text, emb in rows)
        assert bad not in _cache_rows(ws).values()
        # lookups (the live index, then the cache) now find the fresh vectors
        meta, _ = probe_index(ws / ".memory-core" / "index.sqlite")
        with EmbeddingCache(ws / ".memory-core" / "index.cache.sqlite", "openai", MODEL, meta["provider_key"]) as cache:
            from memory_core.storage.cache import LiveVectors

            live = LiveVectors.open(ws / ".memory-core" / "index.sqlite", "openai", MODEL, meta["provider_key"], DIMS)
            assert live is not None
            cache.live.append(live)
            got = cache.get_many([row[2] for row in rows], DIMS)
        assert got == {h: emb for _, _, h, _, emb in rows}
        search = _cli("search", "what did Priya say about rate limiting", "--mode", "vector", "-w", ws,
                      "--config", cfg, "--json")
        srv.reset_log()
        # the edit reverted: the old text's chunk is embedded afresh, not taken from the bad cache entry
        (ws / "memory" / "gateway.md").write_text(_long_note("gateway"))
        assert _index(ws, cfg).returncode == 0
        assert srv.embed_requests >= 1
    assert all(emb == _fresh(text) for _, _, _, text, emb in _chunks(ws))
    import json

    scores = [r["score"] for r in json.loads(search.stdout)["results"]]
    assert scores and len(set(scores)) == len(scores)  # no longer every chunk alike


@pytest.mark.prefect_server
def test_the_reindex_flow_takes_re_embed(prefect_api: Any, tmp_path: Path) -> None:
    from flows.reindex import reindex
    from tests.prefect_server import drain_workers, read_flow_run

    with OpenAIFake(dims=DIMS) as srv:
        ws, cfg = _poisoned(tmp_path, srv)
        state = reindex(workspace=str(ws), config_file=str(cfg), re_embed=True, return_state=True)
        drain_workers()
        fr = read_flow_run(state.state_details.flow_run_id)
    assert state.is_completed(), state.message
    result = state.result()
    assert result["re_embedded"] and result["chunks_from_cache"] == 0 and fr.name.endswith("-full"), fr.name
    assert all(emb == _fresh(text) for _, _, _, text, emb in _chunks(ws))


class _FailsAfter(OpenAIFake):
    """Answers ``answers`` embedding requests, then refuses every other one (None: answers all)."""

    answers: int | None = None

    def _h_embed(self, rec: Any, m: Any, fault: Any) -> Any:
        with self.lock:
            if self.answers is not None:
                if self.answers <= 0:
                    return self.error(400, "Input is not allowed.")
                self.answers -= 1
        return super()._h_embed(rec, m, fault)


def _answered(srv: Any) -> set[str]:
    return {t for req in srv.requests_of("embed") if req.status == 200 for t in req.inputs}


@pytest.mark.parametrize("retry", ["--re-embed", "plain run"])
def test_a_re_embed_that_fails_is_continued_and_pays_once(tmp_path: Path, retry: str) -> None:
    """A re-embed the provider fails halfway: the live index stays as it was and the vectors it
    did receive replace the cached ones. Retried, by ``--re-embed`` or by a plain run (a
    scheduled one), the re-embed goes on: what was received is not sent again, every chunk ends
    with a fresh vector, and once published the next plain run is a plain run. Before (audit G2,
    the thirty-ninth session) a retried re-embed sent every chunk again, and a plain run between
    took the live index's old vectors and its trim dropped the fresh ones."""
    import hashlib

    with _FailsAfter(dims=DIMS) as srv:
        ws, cfg = _poisoned(tmp_path, srv)
        before = _chunks(ws)
        srv.reset_log()
        srv.answers = 5
        r = _index(ws, cfg, "--re-embed")
        assert r.returncode == 1 and "Input is not allowed" in r.stderr, r.stderr
        assert _chunks(ws) == before
        first = _answered(srv)
        assert len([req for req in srv.requests_of("embed") if req.status == 200]) == 5 and first
        cached = _cache_rows(ws)
        for text in first:
            assert cached[hashlib.sha256(text.encode()).digest()] == _fresh(text)
        srv.answers = None
        srv.reset_log()
        again = _index(ws, cfg, *(["--re-embed"] if retry == "--re-embed" else []))
        assert again.returncode == 0, again.stderr
        if retry == "plain run":
            assert "continuing the re-embed begun" in again.stderr + again.stdout
        assert "every chunk re-embedded" in again.stdout
        rows = _chunks(ws)
        assert not first & set(srv.input_texts)  # nothing received before is paid for again
        assert first | set(srv.input_texts) >= {row[3] for row in rows}
        assert all(emb == _fresh(text) for _, _, _, text, emb in rows)
        srv.reset_log()
        (ws / "memory" / "later.md").write_text("# later\n\nthe renewal is over\n")
        plain = _index(ws, cfg)
        assert plain.returncode == 0 and "continuing the re-embed" not in plain.stderr + plain.stdout
        assert "every chunk re-embedded" not in plain.stdout
        assert set(srv.input_texts) == {"# later\n\nthe renewal is over\n"}, srv.input_texts
    assert all(emb == _fresh(text) for _, _, _, text, emb in _chunks(ws))


class _StallsAfter(OpenAIFake):
    """Answers ``answers`` embedding requests, then holds every other one until ``release``."""

    answers = 10**9

    def __init__(self, **kw: Any) -> None:
        import threading

        super().__init__(**kw)
        self.release = threading.Event()

    def _h_embed(self, rec: Any, m: Any, fault: Any) -> Any:
        with self.lock:
            stall = self.answers <= 0
            self.answers -= 1
        if stall:
            self.release.wait(60)
        return super()._h_embed(rec, m, fault)


def test_a_killed_re_embed_retried_does_not_pay_again(tmp_path: Path) -> None:
    """A re-embed SIGKILLed halfway (its journal is an orphan): the retry folds what it received
    and sends only the rest."""
    import hashlib
    import signal
    import time

    with _StallsAfter(dims=DIMS) as srv:
        ws, cfg = _poisoned(tmp_path, srv)
        srv.reset_log()
        srv.answers = 4
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        proc = subprocess.Popen([sys.executable, "-m", "memory_core.apps.cli", "index", "-w", str(ws), "--config",
                                 str(cfg), "--engine", "local", "--no-progress", "--re-embed"], env=env, cwd=ROOT,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        journals = ws / ".memory-core"
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:  # 4 answered and journaled; the fifth held
            from memory_core.storage import cache_journal as J

            if sum(J.entry_count(p) for p in journals.glob("index.cache.sqlite-journal-*")) >= 8:
                break
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
        srv.release.set()
        meta, _ = probe_index(ws / ".memory-core" / "index.sqlite")
        with EmbeddingCache(ws / ".memory-core" / "index.cache.sqlite", "openai", MODEL, meta["provider_key"]):
            pass  # folds the killed run's orphan journal
        received = {t for req in srv.requests_of("embed") if req.status == 200 for t in req.inputs}
        cached = _cache_rows(ws)
        kept = {t for t in received if cached.get(hashlib.sha256(t.encode()).digest()) == _fresh(t)}
        assert len(kept) >= 8
        srv.answers = 10**9
        srv.reset_log()
        r = _index(ws, cfg, "--re-embed")
        assert r.returncode == 0, r.stderr
        assert not kept & set(srv.input_texts)
    assert all(emb == _fresh(text) for _, _, _, text, emb in _chunks(ws))


def test_re_embed_is_on_the_python_api(tmp_path: Path) -> None:
    from memory_core.api import Memory

    with OpenAIFake(dims=DIMS) as srv:
        ws, cfg = _poisoned(tmp_path, srv)
        s = load_settings(cfg, {"workspace": str(ws)})
        with Memory(s, refresh=False) as memory:
            done = memory.index(re_embed=True)
    assert done.swapped and done.full and done.re_embedded and done.chunks_from_cache == 0
    assert "every chunk re-embedded" in "\n".join(done.lines())
    assert all(emb == _fresh(text) for _, _, _, text, emb in _chunks(ws))


@pytest.mark.parametrize("scale,said", [(1e30, "too long to measure"), (1e-30, "too short to measure"),
                                        (0.0, "all-zero vector")])
def test_a_vector_float32_cannot_measure_is_named_for_what_it_is(scale: float, said: str) -> None:
    """Audit D: a vector whose length overflows or underflows float32 was refused as 'an all-zero
    vector'. It is still refused (its cosine cannot be computed), as what it is, and as a fault
    of that answer (ProviderAnswerError: a reader does not take the provider for down)."""
    from memory_core.errors import ProviderAnswerError

    ok = np.ones((2, 8), dtype=np.float32)
    bad = np.vstack([ok, np.full((1, 8), scale, dtype=np.float32)])
    with pytest.raises(ProviderAnswerError, match=said):
        check_vectors(bad, 3, provider="openai", dims=8)


def test_a_small_window_model_behind_an_openai_endpoint_is_not_refused(tmp_path: Path) -> None:
    """Audit G (the thirty-ninth session): an OpenAI-compatible server may serve a 256-token model
    under any name and cut longer inputs without a word. Three templated notes alike in their first
    1,000 characters then get one vector, legitimately; the check compared 2,048 characters (the
    8,192 tokens memory-core takes an `openai` model to read) and failed the run."""
    from memory_core.index.indexer import Indexer
    from tests.conftest import openai_settings

    header = ("Template: weekly review. Answer each prompt below in full sentences and keep the headings as they"
              " are. What went well this week, what did not, what will you change next week, who helped you. ") * 6
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    (ws / "MEMORY.md").write_text("# Memory\n\nlikes tea\n")
    with OpenAIFake(dims=DIMS) as srv:
        srv.vector_text = lambda text: text[:1000]  # the served model reads its window only
        s = openai_settings(ws, srv, remote={"max_attempts": 1})
        Indexer(s).run()
        for i, body in enumerate(["shipped the parser", "fixed the flaky test", "planned the offsite"]):
            (ws / "memory" / f"2026-11-0{i + 1}.md").write_text(f"{header}\n\n# Week {i + 1}\n\n{body}\n")
        assert Indexer(s).run().swapped
        # a gateway answering one vector still is refused: texts differing in their first 64 characters
        del srv.vector_text  # (the fake's own again)
        srv.same_vector = True
        for i in range(3):
            (ws / "memory" / f"2026-12-0{i + 1}.md").write_text(f"note {i}: {'abcdefgh'[i] * 30}\n")
        with pytest.raises(ProviderError, match="same vector"):
            Indexer(s).run()
    from memory_core.embeddings.base import SURE_WINDOW_TOKENS

    assert SURE_WINDOW_TOKENS // 4 == 64


def test_re_embed_keeps_the_vectors_other_indexes_paid_for_in_a_shared_cache(tmp_path: Path) -> None:
    """Audit G (the thirty-ninth session): after index A's --re-embed, the cache dropped every
    vector of the model, index B's too: B's next run paid again for the 20 vectors its failed run
    had received. A shared cache now keeps them (the run says so)."""
    import random

    from memory_core.errors import MemoryCoreError
    from memory_core.index.indexer import Indexer
    from tests.conftest import openai_settings

    rnd = random.Random(2)
    words = ["alpha", "beta", "gamma", "delta", "cabbage", "rice", "bike", "euro", "sprint", "demo", "tomato", "lamp", "film", "budget", "knee"]
    cache = tmp_path / "shared-cache.sqlite"

    def make(name: str, n: int) -> Path:
        ws = tmp_path / name
        (ws / "memory").mkdir(parents=True)
        for i in range(n):
            (ws / "memory" / f"{name}{i}.md").write_text(f"# {name}{i}\n\n" + " ".join(rnd.choice(words) for _ in range(120)))
        return ws

    a, b = make("a", 10), make("b", 40)
    with OpenAIFake(dims=DIMS) as srv:
        remote = {"max_inputs_per_request": 4, "max_attempts": 1}
        sa = openai_settings(a, srv, cache={"path": str(cache)}, remote=remote)
        sb = openai_settings(b, srv, cache={"path": str(cache)}, remote=remote)
        Indexer(sa).run()
        srv.reset_log()
        srv.slow_next(5, 0.0)
        srv.fail_next(None, status=400, message="boom")
        with pytest.raises(MemoryCoreError):
            Indexer(sb).run()
        paid = set(srv.sync_billed_texts)
        srv.clear_faults()
        assert paid
        assert Indexer(sa).run(re_embed=True).re_embedded
        srv.reset_log()
        Indexer(sb).run()
        assert not paid & set(srv.sync_billed_texts)  # none paid twice


# -- requests of one or two texts (memory_core/index/answer_check.py) ----------------------------

EARLIER = re.compile(r"memory-core: error: openai returned the same vector for (\d+) different texts, one of them"
                     r" embedded before \(a gateway or cache answering one vector for every input\?\); refused,"
                     r" nothing was cached; vectors it answered before may be in the index: once it answers"
                     r" rightly, `memory-core index --re-embed` replaces them")


def _small_ws(tmp_path: Path) -> Path:
    """A workspace of short notes, one chunk each."""
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    (ws / "MEMORY.md").write_text("# Memory\n\nPriya owns the payments rollout.\n")
    for name, text in (("a", "the Lisbon trip is in May"), ("b", "otters sleep holding hands"),
                       ("c", "the staging database was moved to eu-west-1"), ("d", "Sam prefers tea to coffee")):
        (ws / "memory" / f"{name}.md").write_text(f"# {name}\n\n{text}\n")
    return ws


def _chunk_text(ws: Path, path: str) -> str:
    conn = connect(ws / ".memory-core" / "index.sqlite", readonly=True)
    try:
        (text,) = conn.execute("SELECT text FROM chunks WHERE path = ?", (path,)).fetchone()
    finally:
        conn.close()
    return str(text)


def test_a_one_chunk_run_answered_with_another_texts_vector_is_refused(tmp_path: Path) -> None:
    """A caching proxy stuck on its last answer: an incremental run that changes one note sends one
    text, and got back the vector of the note embedded before it. Before, that vector was stored
    for the second note (the check needs three texts in one request); now it is refused as one
    vector for two different texts: one line, exit 1, the live index and the cache as they were."""
    ws = _small_ws(tmp_path)
    with OpenAIFake(dims=DIMS) as srv:
        cfg = _config(tmp_path, srv)
        assert _index(ws, cfg).returncode == 0
        (ws / "memory" / "a.md").write_text("# a\n\nthe Lisbon trip moved to June\n")
        assert _index(ws, cfg).returncode == 0  # a sound answer for one text
        last = _chunk_text(ws, "memory/a.md")
        before, cached = _chunks(ws), _cache_rows(ws)
        srv.vector_text = lambda text: last  # the proxy answers every text with its last answer
        (ws / "memory" / "b.md").write_text("# b\n\nsea otters hold hands while they sleep\n")
        srv.reset_log()
        r = _index(ws, cfg)
        assert srv.input_texts == [(ws / "memory" / "b.md").read_text()]  # one text asked
        assert (r.returncode, r.stdout) == (1, ""), r.stdout + r.stderr
        assert EARLIER.fullmatch(r.stderr.strip()) and EARLIER.fullmatch(r.stderr.strip())[1] == "2", r.stderr  # type: ignore[index]
        assert _chunks(ws) == before and _cache_rows(ws) == cached  # nothing stored, the live index unchanged
        del srv.vector_text  # the proxy fixed: the note gets its own vector
        assert _index(ws, cfg).returncode == 0
    (b,) = [row for row in _chunks(ws) if row[0] == "memory/b.md"]
    assert b[4] == _fresh(b[3])


def test_a_gateway_answering_one_vector_is_refused_from_its_second_small_request(tmp_path: Path) -> None:
    """A gateway that answers one vector no text had: the first request of one text cannot be told
    from a sound answer (stored: the way out is --re-embed); the next small request is compared
    with it and refused, and so is a request of two texts given one vector."""
    ws = _small_ws(tmp_path)
    with OpenAIFake(dims=DIMS) as srv:
        cfg = _config(tmp_path, srv)
        assert _index(ws, cfg).returncode == 0
        srv.same_vector = True
        (ws / "memory" / "a.md").write_text("# a\n\nthe Lisbon trip moved to June\n")
        assert _index(ws, cfg).returncode == 0
        bad = _fresh(srv.SAME_VECTOR_TEXT)
        assert [row[4] for row in _chunks(ws) if row[0] == "memory/a.md"] == [bad]
        before, cached = _chunks(ws), _cache_rows(ws)
        (ws / "memory" / "b.md").write_text("# b\n\nsea otters hold hands while they sleep\n")
        r = _index(ws, cfg)
        assert r.returncode == 1 and EARLIER.fullmatch(r.stderr.strip()), r.stderr
        assert _chunks(ws) == before and _cache_rows(ws) == cached
        srv.same_vector = False
        assert _index(ws, cfg, "--re-embed").returncode == 0
        fresh, cached = _chunks(ws), _cache_rows(ws)
        assert all(emb == _fresh(text) for _, _, _, text, emb in fresh)
        srv.same_vector = True  # broken again, and a run sends two texts: one vector for both, refused at once
        (ws / "memory" / "c.md").write_text("# c\n\nthe staging database moved back to us-east-1\n")
        (ws / "memory" / "d.md").write_text("# d\n\nSam drinks coffee after all\n")
        srv.reset_log()
        r = _index(ws, cfg)
        assert len(srv.requests_of("embed")) == 1 and len(srv.input_texts) == 2
        assert r.returncode == 1 and re.fullmatch(
            r"memory-core: error: openai returned the same vector for 2 different texts(, one of them embedded"
            r" before)? \(a gateway .*", r.stderr.strip()), r.stderr
        assert _chunks(ws) == fresh and _cache_rows(ws) == cached


def test_small_requests_a_model_answers_are_not_refused(tmp_path: Path) -> None:
    """A sound provider's runs of one and two changed chunks, the same text again, and a small
    model behind an OpenAI endpoint (audit G) whose window ends before an edit: its new chunk gets
    the old chunk's vector, legitimately (they differ past its window), and is stored."""
    from memory_core.index.indexer import Indexer
    from tests.conftest import openai_settings

    ws = _small_ws(tmp_path)
    header = ("Template: weekly review. Answer each prompt below in full sentences and keep the headings as they"
              " are. What went well this week, what did not, what will you change next week. ") * 8
    (ws / "memory" / "review.md").write_text(f"{header}\n\nshipped the parser\n")
    with OpenAIFake(dims=DIMS) as srv:
        srv.vector_text = lambda text: text[:1000]  # the served model reads its window only (the notes are shorter)
        s = openai_settings(ws, srv, remote={"max_attempts": 1})
        Indexer(s).run()
        (ws / "memory" / "a.md").write_text("# a\n\nthe Lisbon trip moved to June\n")
        assert Indexer(s).run().chunks_embedded == 1
        (ws / "memory" / "b.md").write_text("# b\n\nsea otters hold hands while they sleep\n")
        (ws / "memory" / "c.md").write_text("# c\n\nthe staging database moved back to us-east-1\n")
        assert Indexer(s).run().chunks_embedded == 2
        (ws / "memory" / "e.md").write_text((ws / "memory" / "a.md").read_text())  # the same text: its own vector
        (ws / "memory" / "a.md").write_text("# a\n\nthe Lisbon trip moved to July\n")
        assert Indexer(s).run().swapped
        old = [row for row in _chunks(ws) if row[0] == "memory/review.md"]
        (ws / "memory" / "review.md").write_text(f"{header}\n\nshipped the parser and fixed the flaky test\n")
        srv.reset_log()
        summary = Indexer(s).run()
        assert summary.swapped and summary.chunks_embedded == 1 and len(srv.input_texts) == 1
    new = [row for row in _chunks(ws) if row[0] == "memory/review.md"]
    assert len(old) == len(new) == 1 and new[0][3] != old[0][3] and new[0][4] == old[0][4]


def test_what_a_small_request_is_compared_with() -> None:
    from memory_core.embeddings.base import SAME_VECTOR_COSINE, check_not_a_known_vector

    rng = np.random.default_rng(3)
    v = rng.normal(size=DIMS).astype(np.float32)
    other = rng.normal(size=DIMS).astype(np.float32)
    loose = __import__("memory_core.embeddings.base", fromlist=["loose_text_key"]).loose_text_key

    def told_apart(texts: Any) -> int:
        return len({loose(t, 256) for t in texts})

    def check(arr: Any, hashes: list[str], texts: list[str], known: list[tuple[str, str, bytes]]) -> None:
        check_not_a_known_vector(np.asarray(arr, dtype=np.float32), hashes, texts, known, provider="openai",
                                 told_apart=told_apart)

    known = [("k1", "an earlier note", v.tobytes()), ("k2", "another note", other.tobytes())]
    with pytest.raises(ProviderError, match=r"^openai returned the same vector for 2 different texts, one of them"
                                            r" embedded before"):
        check([v], ["h1"], ["a new note"], known)
    with pytest.raises(ProviderError, match=r"^openai returned the same vector for 2 different texts \(a gateway"):
        check([other * 2, other], ["h1", "h2"], ["first", "second"], [])  # the request's two texts: one direction
    # not refused: a vector of its own, the same text (hash) known, a text alike in the window a small
    # model reads, and a near-duplicate text's vector that is close but not one (cosine 0.9999)
    check([rng.normal(size=DIMS)], ["h1"], ["a new note"], known)
    check([v], ["k1"], ["an earlier note"], known)
    check([v], ["h1"], ["An  earlier note" + " x" * 200 + " (edited past the window)"],
          [("k1", "an earlier note" + " x" * 200, v.tobytes())])
    near = v + np.float32(0.0142 * np.linalg.norm(v) / np.sqrt(DIMS)) * rng.normal(size=DIMS).astype(np.float32)
    cos = float(near @ v / np.linalg.norm(near) / np.linalg.norm(v))
    assert 0.9998 < cos < SAME_VECTOR_COSINE, cos
    check([near], ["h1"], ["a new note"], known)
    # three texts or more: check_not_one_vector's (not judged here)
    check([v, v, v], ["h1", "h2", "h3"], ["x", "y", "z"], known)
