"""Gemini and Voyage sync providers through the real SDKs against the fakes, and the run-time
fallback provider. Real SQLite index, real search."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from memory_core.config import Settings, load_settings
from memory_core.embeddings.registry import create_provider
from memory_core.errors import ConfigError, ProviderError
from memory_core.index.pipeline import run_index
from memory_core.query.search import Searcher
from memory_core.storage.cache import EmbeddingCache, LiveVectors
from memory_core.storage.store import connect, probe_index
from tests.fakes.common import fake_vector
from tests.fakes.gemini_fake import GeminiFake
from tests.fakes.openai_fake import OpenAIFake
from tests.fakes.voyage_fake import VoyageFake

DIMS = 32
NOTE = "# New\nThe espresso machine descaling is due.\n"


@pytest.fixture
def gem() -> Iterator[GeminiFake]:
    with GeminiFake(dims=None, api_key="g-key") as srv:
        yield srv


@pytest.fixture
def voy() -> Iterator[VoyageFake]:
    with VoyageFake(dims=None, api_key="pa-key") as srv:
        yield srv


def gemini_settings(ws: Path, srv: Any, **over: Any) -> Settings:
    remote = {"api_key": "g-key", "base_url": srv.base_url, "dimensions": 768, "backoff_initial_s": 0.01,
              "backoff_max_s": 0.05, "timeout_s": 10}
    remote.update(over.pop("remote", {}))
    return load_settings(None, {"workspace": str(ws), "provider": "gemini", "remote": remote, **over})


def voyage_settings(ws: Path, srv: Any, **over: Any) -> Settings:
    remote = {"api_key": "pa-key", "base_url": srv.base_url, "dimensions": 256, "backoff_initial_s": 0.01,
              "backoff_max_s": 0.05, "timeout_s": 10}
    remote.update(over.pop("remote", {}))
    return load_settings(None, {"workspace": str(ws), "provider": "voyage", "remote": remote, **over})


def vector_count(s: Settings) -> int:
    meta, _ = probe_index(s.index_file)
    assert meta is not None
    return int(meta["counts"]["vectors"])


# -- Gemini ----------------------------------------------------------------------------------

def test_gemini_index_and_search_end_to_end(workspace: Path, gem: GeminiFake) -> None:
    s = gemini_settings(workspace, gem, chunking={"tokens": 60, "overlap": 10})
    summary = run_index(s)
    assert summary.swapped and summary.provider == "gemini" and summary.model == "gemini-embedding-001"
    assert summary.chunks_embedded == summary.chunks_total > 100
    assert vector_count(s) == summary.chunks_total
    embeds = gem.requests_of("embed")
    # never more than 100 texts per call; documents as RETRIEVAL_DOCUMENT, 768 dims, pinned v1beta
    assert len(embeds) >= 2 and max(len(r.inputs) for r in embeds) <= 100
    assert all(set(r.info["task_types"]) == {"RETRIEVAL_DOCUMENT"} for r in embeds)
    assert all(set(r.info["dims"]) == {768} for r in embeds)
    assert all(r.path.startswith("/v1beta/") for r in embeds)
    assert all(r.header("x-goog-api-key") == "g-key" for r in embeds)
    # the fake does not normalise below 3072 dims; the cache (and so the index) holds unit vectors
    meta, _ = probe_index(s.index_file)
    conn = connect(s.index_file, readonly=True)
    text, h = conn.execute("SELECT text, hash FROM chunks LIMIT 1").fetchone()
    conn.close()
    with EmbeddingCache(s.cache_file, "gemini", "gemini-embedding-001", meta["provider_key"]) as cache:
        # the published index is the record of its vectors (the cache was trimmed of them)
        cache.live.append(LiveVectors.open(s.index_file, "gemini", "gemini-embedding-001", meta["provider_key"]))
        v = np.frombuffer(cache.get_many([h])[h], dtype="<f4")
    assert abs(float(np.linalg.norm(v)) - 1.0) < 1e-5
    assert np.allclose(v, fake_vector(text, 768), atol=1e-5)
    with Searcher(s) as searcher:
        res = searcher.search("how do I restore a postgres backup", min_score=0)
        assert res and searcher.provider_note == ""
    q = gem.requests_of("embed")[-1]
    assert q.info["task_types"] == ["RETRIEVAL_QUERY"]


def test_gemini_retries_429_and_5xx_then_succeeds(workspace: Path, gem: GeminiFake) -> None:
    s = gemini_settings(workspace, gem)
    provider, _ = create_provider(s)
    gem.fail_next(2, 429, retry_after_ms=None)
    gem.fail_next(1, 503)
    gem.malformed_next(1)
    vecs = provider.embed_documents(["alpha", "beta"])
    assert vecs.shape == (2, 768) and np.allclose(np.linalg.norm(vecs, axis=1), 1.0)
    assert [r.status for r in gem.requests_of("embed")] == [429, 429, 503, 200, 200]
    gem.fail_next(None, 500)
    with pytest.raises(ProviderError, match="gave up after 6 attempts"):
        provider.embed_documents(["gamma"])
    gem.clear_faults()
    bad = gemini_settings(workspace, gem, remote={"api_key": "wrong"})
    with pytest.raises(ProviderError, match="authentication"):
        create_provider(bad)[0].embed_documents(["x"])


def test_gemini_keys_versions_and_provider_key(workspace: Path, gem: GeminiFake, monkeypatch: pytest.MonkeyPatch) -> None:
    base = gemini_settings(workspace, gem)
    k768 = create_provider(base)[0].provider_key
    assert create_provider(gemini_settings(workspace, gem, remote={"dimensions": 1536}))[0].provider_key != k768
    v1 = create_provider(gemini_settings(workspace, gem, remote={"api_version": "v1"}))[0]
    assert v1.provider_key != k768
    v1.embed_documents(["x"])
    assert gem.requests_of("embed")[-1].path.startswith("/v1/")
    # the API key is not part of the provider key
    assert create_provider(gemini_settings(workspace, gem, remote={"api_key": "other"}))[0].provider_key == k768
    no_key = gemini_settings(workspace, gem, remote={"api_key": None})
    with pytest.raises(ConfigError, match="GEMINI_API_KEY"):
        create_provider(no_key)
    monkeypatch.setenv("GOOGLE_API_KEY", "g-key")
    p = create_provider(no_key)[0]
    assert p.embed_documents(["y"]).shape == (1, 768)
    monkeypatch.setenv("GEMINI_API_KEY", "g-key")
    monkeypatch.setenv("GOOGLE_API_KEY", "wrong")
    assert create_provider(no_key)[0].embed_documents(["z"]).shape == (1, 768)
    with pytest.raises(ConfigError, match="above"):
        create_provider(gemini_settings(workspace, gem, remote={"dimensions": 4096}))
    native = create_provider(gemini_settings(workspace, gem, remote={"dimensions": None}))[0]
    assert native.dims == 3072 and native.default_chunk_tokens * 4 <= 2048 * 4


# -- Voyage ----------------------------------------------------------------------------------

def test_voyage_index_and_search_end_to_end(workspace: Path, voy: VoyageFake) -> None:
    s = voyage_settings(workspace, voy)
    summary = run_index(s)
    assert summary.swapped and summary.provider == "voyage" and summary.model == "voyage-4-large"
    assert summary.chunks_embedded == summary.chunks_total > 50 and vector_count(s) == summary.chunks_total
    embeds = voy.requests_of("embed")
    assert len(embeds) == 1  # 66 short chunks fit one request (1000 texts / 120K tokens)
    body = embeds[0].body
    assert body["input_type"] == "document" and body["output_dimension"] == 256
    assert body["model"] == "voyage-4-large" and body["encoding_format"] == "base64"
    assert embeds[0].header("authorization") == "Bearer pa-key"
    with Searcher(s) as searcher:
        assert searcher.search("replication lag", min_score=0) and searcher.provider_note == ""
    assert voy.requests_of("embed")[-1].body["input_type"] == "query"


def test_voyage_retries_429_and_5xx_then_succeeds(workspace: Path, voy: VoyageFake) -> None:
    s = voyage_settings(workspace, voy)
    provider, _ = create_provider(s)
    voy.fail_next(1, 429, retry_after=0)
    voy.fail_next(1, 500)
    voy.fail_next(1, 503)
    voy.reset_next(1)
    vecs = provider.embed_documents(["one", "two", "three"])
    assert vecs.shape == (3, 256)
    assert np.allclose(vecs[0], fake_vector("one", 256), atol=1e-6)
    assert [r.status for r in voy.requests_of("embed")][-1] == 200 and voy.embed_requests == 5
    voy.fail_next(1, 400, message="Invalid request.")
    with pytest.raises(ProviderError, match="HTTP 400"):
        provider.embed_documents(["x"])
    assert voy.embed_requests == 6  # a 400 is final: not retried


def test_voyage_limits_per_model_and_keys(workspace: Path, voy: VoyageFake, monkeypatch: pytest.MonkeyPatch) -> None:
    large = create_provider(voyage_settings(workspace, voy))[0]
    assert (large.max_inputs_per_request, large.max_tokens_per_request) == (1000, 120_000)
    lite = create_provider(voyage_settings(workspace, voy, model="voyage-4-lite"))[0]
    assert lite.max_tokens_per_request == 1_000_000
    mid = create_provider(voyage_settings(workspace, voy, model="voyage-3.5"))[0]
    assert mid.max_tokens_per_request == 320_000
    assert large.provider_key != create_provider(voyage_settings(workspace, voy, remote={"dimensions": 512}))[0].provider_key
    no_key = voyage_settings(workspace, voy, remote={"api_key": None})
    with pytest.raises(ConfigError, match="VOYAGE_API_KEY"):
        create_provider(no_key)
    monkeypatch.setenv("VOYAGE_API_KEY", "pa-key")
    assert create_provider(no_key)[0].embed_query("q").shape == (256,)


def test_voyage_request_groups_respect_the_token_budget(workspace: Path, voy: VoyageFake) -> None:
    long = "lorem ipsum dolor sit amet " * 40  # ~270 tokens a line
    (workspace / "memory" / "long.md").write_text("\n".join(f"{i} {long}" for i in range(900)))
    s = voyage_settings(workspace, voy, model="voyage-4-large", chunking={"tokens": 2000, "overlap": 0})
    summary = run_index(s)
    embeds = voy.requests_of("embed")
    assert summary.swapped and len(embeds) >= 2
    assert all(r.status == 200 for r in embeds)  # never over 120K tokens in one request
    assert sum(len(r.inputs) for r in embeds) == summary.chunks_embedded


# -- fallback provider -------------------------------------------------------------------------

def test_fallback_when_the_primary_keeps_failing(workspace: Path, gem: GeminiFake) -> None:
    with OpenAIFake(dims=64) as oai:
        data = {
            "workspace": str(workspace), "provider": "openai", "model": "text-embedding-3-small",
            "remote": {"api_key": "sk-x", "base_url": oai.base_url, "dimensions": 64, "backoff_initial_s": 0.01,
                       "backoff_max_s": 0.02, "max_attempts": 3},
            "fallback": {"provider": "gemini", "remote": {"api_key": "g-key", "base_url": gem.base_url,
                                                          "dimensions": 768, "backoff_initial_s": 0.01}},
        }
        s = load_settings(None, data)
        first = run_index(s)  # the primary works: an openai index
        assert first.provider == "openai" and not first.fallback
        (workspace / "memory" / "new-note.md").write_text(NOTE)
        oai.fail_next(None, 500)  # from now on the primary keeps failing
        summary = run_index(s)
        assert summary.provider == "gemini" and summary.model == "gemini-embedding-001"
        assert summary.fallback.primary == "openai/text-embedding-3-small"
        assert summary.fallback.to == "gemini/gemini-embedding-001"
        assert "HTTP 500" in summary.fallback.reason
        assert summary.provider_reason.startswith("fallback: openai")
        # a full rebuild: every chunk embedded by gemini, none mixed in from openai
        assert summary.full and "fallback" in summary.full_reason
        assert summary.swapped and summary.chunks_embedded == summary.chunks_total
        assert gem.embedded_inputs == summary.chunks_total
        assert any("fallback" in line and "never mixed" in line for line in summary.lines())
        assert any("kept failing" in w for w in summary.warnings)
        meta, _ = probe_index(s.index_file)
        assert meta is not None and meta["provider"] == "gemini" and meta["dims"] == 768
        conn = connect(s.index_file, readonly=True)
        assert {r[0] for r in conn.execute("SELECT DISTINCT model FROM chunks")} == {"gemini-embedding-001"}
        conn.close()
        # queries of a fallback-built index are embedded with the fallback's settings
        from memory_core.storage.indexmeta import IndexRecord, open_query_provider

        record = IndexRecord.from_meta(meta)
        assert record is not None
        qp, why = open_query_provider(record, s)  # what every reader uses
        assert qp is not None and qp.provider_key == meta["provider_key"], why
        with Searcher(s, provider=qp) as searcher:  # fake vectors: only the exact text is similar
            res = searcher.search(NOTE, min_score=0)
            assert res and res[0].path == "memory/new-note.md" and res[0].vector_score > 0.99
        # the primary is healthy again: back to openai, a full rebuild served from its cache
        oai.clear_faults()
        n = oai.embedded_inputs
        back = run_index(s)
        assert back.provider == "openai" and back.full and not back.fallback
        assert oai.embedded_inputs - n == 1  # only the new note's chunk was never embedded by openai


def test_fallback_when_the_primary_cannot_start(workspace: Path, gem: GeminiFake) -> None:
    s = load_settings(None, {
        "workspace": str(workspace), "provider": "voyage", "remote": {"api_key": None},
        "fallback": {"provider": "gemini", "remote": {"api_key": "g-key", "base_url": gem.base_url,
                                                      "dimensions": 768}},
    })
    provider, reason = create_provider(s)
    assert provider.name == "gemini" and reason.startswith("fallback: voyage unavailable")
    s2 = load_settings(None, {"workspace": str(workspace), "provider": "voyage", "remote": {"api_key": None}})
    with pytest.raises(ConfigError):
        create_provider(s2)
    assert math.isfinite(float(provider.embed_query("q")[0]))
