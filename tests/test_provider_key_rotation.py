"""Audit I-M4: rotating a credential is the same provider configuration. The provider key hashed a
secret header outside ``SECRET_HEADERS`` (``Helicone-Auth``, ``X-Portkey-Api-Key``) and the base
URL's credentials (a password, a token as the user name, ``?code=``): rotating one re-embedded the
whole index, dropped the cache's reuse, and the memory store refused new memories. The key now
leaves every credential out; an index, cache, ledger and memory store recorded under the key of the
rule before are this configuration's and take the new key at their next write (nothing embedded
again). The real SDKs over HTTP to the loopback fakes, real SQLite and LanceDB files."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from memory_core.config import Settings, load_settings
from memory_core.embeddings.base import compute_provider_key
from memory_core.embeddings.registry import create_provider
from memory_core.index.chunking import sha256_hex
from memory_core.index.pipeline import run_index
from memory_core.query.search import Searcher
from memory_core.storage.cache import EmbeddingCache
from memory_core.storage.store import connect, probe_index
from tests.conftest import openai_settings
from tests.fakes.openai_fake import OpenAIFake

MODEL = "text-embedding-3-small"
NOTE_A = "# Trip\n\nThe ferry to Skye leaves at 07:40 from Mallaig pier.\n"
NOTE_B = "# Garden\n\nThe quince tree needs pruning before the first frost.\n"


@pytest.fixture
def srv() -> Iterator[OpenAIFake]:
    with OpenAIFake(dims=64) as fake:
        yield fake


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    (ws / "MEMORY.md").write_text("# Notes\n\nPostgres replication lag on pg-replica-1 is alerted at 30 s.\n")
    (ws / "memory" / "a.md").write_text(NOTE_A)
    (ws / "memory" / "b.md").write_text(NOTE_B)
    return ws


def _old_rule_key(provider: str, model: str, base_url: str | None, headers: dict[str, str] | None,
                  **extra: Any) -> str:
    """The provider key as the code before this fix computed it: every header but the six of
    ``SECRET_HEADERS``, and the base URL whole (credentials and all)."""
    old_secret = {"authorization", "x-goog-api-key", "api-key", "x-api-key", "proxy-authorization", "cookie"}
    kept = sorted((k.lower(), v) for k, v in (headers or {}).items() if k.lower() not in old_secret)
    payload: dict[str, Any] = {"provider": provider, "baseUrl": base_url or "", "model": model, "headers": kept}
    payload.update({k: v for k, v in extra.items() if v is not None})
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


def _with_credential(srv: OpenAIFake, kind: str, value: str) -> dict[str, Any]:
    """The ``remote`` settings of a configuration whose credential ``kind`` is ``value``."""
    if kind == "helicone-auth":
        return {"headers": {"Helicone-Auth": f"Bearer {value}", "X-Model-Variant": "a"}}
    if kind == "portkey-key":
        return {"headers": {"X-Portkey-Api-Key": value}}
    if kind == "url-password":
        return {"base_url": srv.base_url.replace("http://", f"http://proxyuser:{value}@")}
    assert kind == "url-token"
    return {"base_url": srv.base_url.replace("http://", f"http://{value}@")}


def _meta_key(s: Settings) -> str:
    meta, _ = probe_index(s.index_file)
    assert meta is not None
    return str(meta["provider_key"])


def _searched(s: Settings, query: str = "ferry Skye") -> list[Any]:
    with Searcher(s) as searcher:
        hits = searcher.search(query, min_score=0)
        assert searcher.provider_note == "", searcher.provider_note
        assert searcher.last_search.embedded is True  # not keyword-only
    return hits


# -- (a) a rotated credential: nothing embedded again, no rebuild ----------------------------------

@pytest.mark.parametrize("kind", ["helicone-auth", "portkey-key", "url-password", "url-token"])
def test_a_rotated_credential_embeds_nothing_again(ws: Path, srv: OpenAIFake, kind: str) -> None:
    first = openai_settings(ws, srv, remote=_with_credential(srv, kind, "rotate-me-credential-1"))
    assert run_index(first).chunks_embedded > 0
    key, sent = _meta_key(first), srv.embed_requests

    rotated = openai_settings(ws, srv, remote=_with_credential(srv, kind, "rotate-me-credential-2"))
    again = run_index(rotated)
    assert not again.full, again.full_reason  # was: "provider settings changed (base URL, dimensions or headers)"
    assert again.chunks_embedded == 0 and srv.embed_requests == sent
    assert _meta_key(rotated) == key
    assert _searched(rotated)
    # a change under the rotated credential is an ordinary incremental run: only its own chunk
    (ws / "memory" / "c.md").write_text("# New\n\nThe boiler service is booked for March.\n")
    third = run_index(rotated)
    assert not third.full and third.chunks_embedded == 1


def test_every_provider_keys_its_configuration_without_its_credentials(tmp_path: Path) -> None:
    """OpenAI, Gemini, Voyage and Mistral each compute their key by the one rule: rotating a
    credential header or the base URL's credentials keeps it, another header or host changes it."""

    def key_of(provider: str, base_url: str, headers: dict[str, str]) -> tuple[str, tuple[str, ...]]:
        s = load_settings(None, {"workspace": str(tmp_path), "provider": provider, "remote": {
            "api_key": "sk-test-key-0123456789", "base_url": base_url, "headers": headers}})
        p, _ = create_provider(s)
        try:
            return p.provider_key, tuple(getattr(p, "legacy_provider_keys", ()))
        finally:
            p.close()

    for provider in ("openai", "gemini", "voyage", "mistral"):
        one = key_of(provider, "http://user:pw-one-111111@127.0.0.1:9/v1?code=code-one-1&api-version=1",
                     {"Helicone-Auth": "Bearer h-one-111111", "X-Portkey-Api-Key": "pk-one-111111"})
        two = key_of(provider, "http://user2:pw-two-222222@127.0.0.1:9/v1?code=code-two-2&api-version=1",
                     {"Helicone-Auth": "Bearer h-two-222222", "X-Portkey-Api-Key": "pk-two-222222"})
        assert one[0] == two[0], provider
        # the key of the rule before differs with each credential, and each is this configuration's
        assert one[1] and two[1] and one[1] != two[1], provider
        other_host = key_of(provider, "http://user:pw-one-111111@127.0.0.2:9/v1?code=code-one-1&api-version=1",
                            {"Helicone-Auth": "Bearer h-one-111111"})
        assert other_host[0] != one[0], provider
        other_version = key_of(provider, "http://127.0.0.1:9/v1?api-version=2", {})
        assert other_version[0] != key_of(provider, "http://127.0.0.1:9/v1?api-version=1", {})[0], provider
        if provider != "voyage":  # the voyageai SDK sends no custom header: they are not part of its key
            a = key_of(provider, "http://127.0.0.1:9/v1", {"X-Model-Variant": "a", "Helicone-Auth": "h-1-111111"})
            b = key_of(provider, "http://127.0.0.1:9/v1", {"X-Model-Variant": "b", "Helicone-Auth": "h-1-111111"})
            assert a[0] != b[0], provider


def test_the_key_rule_leaves_out_credentials_and_keeps_the_rest() -> None:
    def key(base_url: str | None = None, **headers: str) -> str:
        return compute_provider_key("openai", MODEL, base_url=base_url, headers=headers or None, dimensions=64)

    plain = "https://gw.example.com/v1"
    assert key(plain, **{"Helicone-Auth": "a"}) == key(plain, **{"Helicone-Auth": "b"}) == key(plain)
    assert key(plain, **{"X-Portkey-Api-Key": "a"}) == key(plain)
    assert key("https://u:p1@gw.example.com/v1") == key("https://u2:p2@gw.example.com/v1") == key(plain)
    assert key("https://tok1@gw.example.com/v1") == key(plain)
    for param in ("code", "key", "api_key", "api-key", "token", "sig"):
        assert key(f"{plain}?{param}=one") == key(f"{plain}?{param}=two"), param
    assert key(f"{plain}?api-version=1&code=x") != key(f"{plain}?api-version=2&code=x")
    assert key(plain, **{"X-Model-Variant": "a"}) != key(plain, **{"X-Model-Variant": "b"}) != key(plain)
    assert key("https://other.example.com/v1") != key(plain)
    assert key("https://gw.example.com/v2") != key(plain)
    # a configuration with no credential keeps the key it always had (nothing to migrate)
    assert key(plain, **{"X-Team": "s", "Authorization": "Bearer x"}) == _old_rule_key(
        "openai", MODEL, plain, {"X-Team": "s", "Authorization": "Bearer x"}, dimensions=64)


# -- (c) what does change vectors still counts -----------------------------------------------------

def test_a_non_secret_header_change_still_re_embeds(ws: Path, srv: OpenAIFake) -> None:
    first = openai_settings(ws, srv, remote={"headers": {"X-Model-Variant": "a", "Helicone-Auth": "h-111111"}})
    assert run_index(first).chunks_embedded > 0
    key, sent = _meta_key(first), srv.embed_requests
    changed = openai_settings(ws, srv, remote={"headers": {"X-Model-Variant": "b", "Helicone-Auth": "h-111111"}})
    again = run_index(changed)
    assert again.full and "provider settings changed" in again.full_reason
    assert again.chunks_embedded == again.chunks_total > 0 and srv.embed_requests > sent
    assert _meta_key(changed) != key


def test_another_gateway_host_still_re_embeds(ws: Path, srv: OpenAIFake) -> None:
    first = openai_settings(ws, srv, remote=_with_credential(srv, "url-password", "pw-111111"))
    assert run_index(first).chunks_embedded > 0
    key = _meta_key(first)
    with OpenAIFake(dims=64) as other:  # another host:port: another gateway
        moved = openai_settings(ws, other, remote=_with_credential(other, "url-password", "pw-111111"))
        again = run_index(moved)
        assert again.full and again.chunks_embedded == again.chunks_total > 0 and other.embed_requests > 0
    assert _meta_key(moved) != key


# -- (d) the memory store after a rotation ---------------------------------------------------------

def test_the_memory_store_keeps_its_memories_after_a_rotation(ws: Path, srv: OpenAIFake) -> None:
    from memory_core.notes.memory_store import MemoryStore

    with MemoryStore(openai_settings(ws, srv, remote=_with_credential(srv, "helicone-auth", "h-one-111111"))) as st:
        st.store("The ferry to Skye leaves at 07:40 from Mallaig pier.")
    rotated = openai_settings(ws, srv, remote=_with_credential(srv, "helicone-auth", "h-two-222222"))
    with MemoryStore(rotated) as st:
        rec = st.recall("ferry Skye")
        assert rec.hits and rec.embedded and not rec.note, rec.note  # was: keyword-only, "embedded with openai"
        st.store("The quince tree needs pruning before the first frost.")  # was: refused (UsageError)
        assert st.count() == 2


# -- (b) the upgrade: records of the rule before are this configuration's -------------------------

def _cache_keys(s: Settings) -> dict[str, int]:
    conn = connect(s.cache_file, readonly=True)
    try:
        return {k: n for k, n in conn.execute(
            "SELECT m.provider_key, (SELECT count(*) FROM cache_vectors v WHERE v.model_id = m.id)"
            " FROM cache_models m")}
    finally:
        conn.close()


def _built_by_the_version_before(ws: Path, srv: OpenAIFake, monkeypatch: pytest.MonkeyPatch, *,
                                 edit: bool = True) -> tuple[Settings, str]:
    """An index (and, with ``edit``, cached vectors of an edited note, and a memory store) recorded
    as the version before recorded them, under the key of its rule (credentials hashed): its
    settings, and that key."""
    from memory_core.embeddings.openai_provider import OpenAIProvider
    from memory_core.notes.memory_store import MemoryStore

    remote = {"headers": {"Helicone-Auth": "Bearer helicone-111111", "X-Model-Variant": "a"},
              "base_url": srv.base_url.replace("http://", "http://proxyuser:proxy-pw-111111@")}
    s = openai_settings(ws, srv, remote=remote)
    legacy = _old_rule_key("openai", MODEL, remote["base_url"], remote["headers"], dimensions=64)
    with monkeypatch.context() as m:
        m.setattr(OpenAIProvider, "provider_key", property(lambda self: _old_rule_key(
            "openai", self.model, self.base_url, self.headers, dimensions=self.requested_dims)))
        assert run_index(s).chunks_embedded > 0
        if edit:
            # an edit: the old text's vectors leave the index for the cache, under the old key
            (ws / "memory" / "a.md").write_text(NOTE_A + "\nBring the bikes: the 07:40 takes them free.\n")
            assert run_index(s).chunks_embedded == 1
            with MemoryStore(s) as st:
                st.store("The ferry to Skye leaves at 07:40 from Mallaig pier.")
                rec = st.record()
                assert rec is not None and rec.provider_key == legacy
    assert _meta_key(s) == legacy
    return s, legacy


def test_a_full_rebuild_right_after_the_upgrade_embeds_nothing(ws: Path, srv: OpenAIFake,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The first run of this version a --full one (a new file built beside the live one): every
    vector is the live index's, recorded under the key of the rule before."""
    s, legacy = _built_by_the_version_before(ws, srv, monkeypatch, edit=False)
    sent = srv.embed_requests
    full = run_index(s, full=True)
    assert full.full and full.swapped and full.chunks_embedded == 0 and srv.embed_requests == sent
    assert _meta_key(s) != legacy
    assert run_index(s, full=True).chunks_embedded == 0 and srv.embed_requests == sent


def test_the_first_run_after_the_upgrade_takes_the_new_key_with_nothing_changed(
        ws: Path, srv: OpenAIFake, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run with no file changed still publishes the new key (meta only), so a credential rotated
    after it is no change either (the key of the rule before is computed from the credential)."""
    s, legacy = _built_by_the_version_before(ws, srv, monkeypatch, edit=False)
    sent = srv.embed_requests
    run = run_index(s)
    assert not run.full and run.chunks_embedded == 0 and srv.embed_requests == sent
    assert _meta_key(s) != legacy
    rotated = openai_settings(ws, srv, remote={
        "headers": {"Helicone-Auth": "Bearer helicone-222222", "X-Model-Variant": "a"},
        "base_url": srv.base_url.replace("http://", "http://proxyuser:proxy-pw-222222@")})
    again = run_index(rotated)
    assert not again.full, again.full_reason
    assert again.chunks_embedded == 0 and srv.embed_requests == sent
    assert _searched(rotated)


def test_the_upgrade_embeds_nothing_again_and_migrates_the_keys(ws: Path, srv: OpenAIFake,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    from memory_core.notes.memory_store import MemoryStore

    s, legacy = _built_by_the_version_before(ws, srv, monkeypatch)
    assert _cache_keys(s).get(legacy, 0) > 0  # the edited note's old vectors

    # this version: a reader accepts the old key as it is (and writes nothing)
    assert _searched(s)
    assert _meta_key(s) == legacy
    with Searcher(s) as long_lived:
        assert long_lived.search("ferry Skye", min_score=0) and long_lived.last_search.embedded

        # the first run: the edit reverted, its vectors are the cache's (under the old key); no rebuild
        (ws / "memory" / "a.md").write_text(NOTE_A)
        sent = srv.embed_requests  # (a search embeds its query: counted from here)
        run = run_index(s)
        assert not run.full, run.full_reason
        assert run.chunks_embedded == 0 and srv.embed_requests == sent
        new = _meta_key(s)
        assert new != legacy  # the index took the key without credentials as it published
        keys = _cache_keys(s)
        assert legacy not in keys, keys  # the cache's row renamed, not copied

        # a long-lived reader goes on embedding its queries after the index changed key
        assert long_lived.search("ferry Skye", min_score=0) and long_lived.last_search.embedded
        assert long_lived.provider_note == ""

    # the memory store: read as it is, then its next write records the new key; nothing lost
    with MemoryStore(s) as st:
        rec = st.recall("ferry Skye")
        assert rec.hits and rec.embedded and not rec.note, rec.note
        st.store("The quince tree needs pruning before the first frost.")
        assert st.count() == 2
        record = st.record()
        assert record is not None and record.provider_key == new
    with MemoryStore(s) as st:
        assert st.count() == 2 and st.recall("quince pruning").hits

    # a second run, and a full rebuild: nothing embedded
    sent = srv.embed_requests
    assert run_index(s).chunks_embedded == 0
    full = run_index(s, full=True)
    assert full.chunks_embedded == 0 and srv.embed_requests == sent
    assert _meta_key(s) == new and _searched(s)


# -- the cache file's own records under the key of the rule before ---------------------------------

def _vectors(n: int, start: int = 0) -> tuple[list[str], np.ndarray]:
    hashes = [sha256_hex(f"text {i}") for i in range(start, start + n)]
    rng = np.random.default_rng(start)
    return hashes, rng.standard_normal((n, 8)).astype(np.float32) + 0.1


def test_a_cache_holding_both_keys_is_merged_and_loses_no_vector(tmp_path: Path) -> None:
    path = tmp_path / "c.sqlite"
    old_h, old_v = _vectors(10)
    new_h, new_v = _vectors(10, start=5)  # 5..9 under both keys
    with EmbeddingCache(path, "openai", "m", "old") as c:
        c.put_array(old_h, old_v)
        c.begin_renewal(tmp_path / "idx.sqlite")
    with EmbeddingCache(path, "openai", "m", "new") as c:
        c.put_array(new_h, new_v)
    with EmbeddingCache(path, "openai", "m", "new", legacy_keys=("old",)) as c:
        got = c.get_many(old_h + new_h)
        assert set(got) == set(old_h) | set(new_h)  # every vector readable under the new key
        assert got[old_h[0]] == old_v[0].tobytes() and got[new_h[0]] == new_v[0].tobytes()
        assert c.count() == 15
    from memory_core.storage.cache import renewal_pending

    assert renewal_pending(path, "openai", "m", "new", tmp_path / "idx.sqlite") is not None  # moved with them


def test_a_pending_re_embed_under_the_old_key_is_continued(tmp_path: Path) -> None:
    from memory_core.storage.cache import renewal_pending

    path = tmp_path / "c.sqlite"
    with EmbeddingCache(path, "openai", "m", "old") as c:
        since = c.begin_renewal(tmp_path / "idx.sqlite")
    # read before the run's cache opens: the old key counts
    assert renewal_pending(path, "openai", "m", "new", tmp_path / "idx.sqlite", legacy_keys=("old",)) == since
    assert renewal_pending(path, "openai", "m", "new", tmp_path / "idx.sqlite") is None


def test_open_batch_jobs_under_the_old_key_are_found_under_the_new(tmp_path: Path) -> None:
    from memory_core.index.batch_ledger import BatchLedger

    path = tmp_path / "c.sqlite"
    with EmbeddingCache(path, "openai", "m", "old") as c:
        BatchLedger.for_cache(c, index_path="/idx").record_submission(
            "job-1", [(sha256_hex("x"), 3)], requests=1, tokens=3)
    with EmbeddingCache(path, "openai", "m", "new", legacy_keys=("old",)) as c:
        jobs = BatchLedger.for_cache(c, index_path="/idx").open_jobs()
        assert [j.local_id for j in jobs] == ["job-1"] and jobs[0].provider_key == "new"


def test_a_killed_runs_journal_under_the_old_key_is_folded_under_the_new(tmp_path: Path) -> None:
    """A run of the version before, killed: its journal names the old key; the next opening folds
    it into the new key's vectors (none embedded again)."""
    from tests.test_cache_journal import _all, _killed_after

    path = tmp_path / "c.sqlite"
    journal = _killed_after(path, 3)  # stored under ("openai", "m", "k")
    with EmbeddingCache(path, "openai", "m", "k-new", legacy_keys=("k",)) as c:
        assert not journal.exists()
        assert c.get_many(list(_all(3))) == _all(3)
    conn = connect(path, readonly=True)
    try:
        held = dict(conn.execute("SELECT m.provider_key, count(v.rid) FROM cache_models m"
                                 " LEFT JOIN cache_vectors v ON v.model_id = m.id GROUP BY m.id"))
    finally:
        conn.close()
    assert held.get("k", 0) == 0 and held["k-new"] == len(_all(3))  # folded under the new key
