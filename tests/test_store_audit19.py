"""The memory store after the nineteenth session.

- A capitalised word at a sentence's start lost its final s in the duplicate check
  (:func:`memory_core.notes.memory_store.same_fact`): "Windows laptops need the VPN client." then
  "Window laptops need the VPN client." (cosine 0.97 with the local model) were one fact, so the
  second replaced the first; so did Teams / Team, Sales / Sale, Actions / Action. Such a word is now
  a plural only when the other text shows it is an ordinary word (written lowercase there, or its
  verb changes number with it: "Users get" / "User gets"); else two memories, none lost.
- The MCP server's store tools kept a :class:`MemoryStore` of their own beside its
  :class:`memory_core.api.Memory`'s (what ``Memory.answer`` merges and ``Memory.read`` of a
  ``store:<id>`` citation reads). The server routed ``memory_search`` and ``memory_get`` of the store
  to the tools' instance, so only that one opened; and two instances give the same answers anyway
  (each read sees the latest commit: ``read_consistency_interval=0``; a write, an update, a forget
  and a table set aside through one were read at once through the other). The server now has one:
  the memory's, which the tools, ``memory_search`` and ``memory_get`` all use.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from memory_core.apps.mcp_server import MemoryTools
from memory_core.config import load_settings
from memory_core.index.pipeline import run_index
from memory_core.notes.memory_store import MemoryStore, same_fact
from tests.conftest import openai_settings
from tests.test_lancedb_store import _client, _run, _text, _toml

# a name capitalised at a sentence's start, and the word without its s: different facts (the first
# two pairs at cosine 0.97 with the local model: the second replaced the first)
NAMES_AT_START = [
    ("Windows laptops need the VPN client.", "Window laptops need the VPN client."),
    ("Teams calls are recorded.", "Team calls are recorded."),
    ("Windows builds use MSVC.", "Window builds use MSVC."),
    ("Sales owns the pricing page.", "Sale owns the pricing page."),
    ("Actions runs the deploy workflow.", "Action runs the deploy workflow."),
    ("Jenkins runs the nightly build.", "Jenkin runs the nightly build."),
    ("Windows is installed", "Window is installed"),
    ("The VPN is required. Windows laptops need the client.", "The VPN is required. Window laptops need the client."),
    ("- Teams calls are recorded", "- Team calls are recorded"),
]

# an ordinary plural at a sentence's start, shown so by the other text: still one fact
PLURALS_AT_START = [
    ("Cats need water", "Cat needs water"),  # the verb changes number with it
    ("Backups run on Tuesdays", "The backup runs on Tuesday"),  # written lowercase in the other
    ("Users get an email. Reminders run daily", "User gets an email. Reminder runs daily"),
    ("Windows laptops need the VPN client.", "windows laptops need the VPN client"),
    ("Windows laptops need the VPN client.", "Windows laptops need the VPN client!"),
    ("Window laptops need the VPN client.", "window laptops need the VPN client"),
]


def test_a_name_at_a_sentence_start_keeps_its_s() -> None:
    for a, b in NAMES_AT_START:
        assert not same_fact(a, b), (a, b)
        assert not same_fact(b, a), (b, a)


def test_an_ordinary_plural_at_a_sentence_start_is_still_a_plural() -> None:
    for a, b in PLURALS_AT_START:
        assert same_fact(a, b), (a, b)
        assert same_fact(b, a), (b, a)
    # a name inside a sentence was never a plural, an acronym's S never (unchanged)
    assert not same_fact("We chat in Teams", "We chat in Team")
    assert not same_fact("The DNS server is down", "The DN server is down")


def assert_pairs_kept_apart(tmp_path: Path, pairs: list[tuple[str, str]], again: str) -> None:
    """Each pair stored with the local model: near-identical by cosine, the second is kept beside
    the first (the answer's keptSimilar names it); ``again`` (the first pair's first said again) is
    an update of it. Skipped without the local model."""
    from memory_core.embeddings.local import local_model_available

    if not local_model_available():
        pytest.skip("the local model is not installed")
    with MemoryStore(load_settings(None, {"workspace": str(tmp_path), "provider": "local"})) as store:
        for a, b in pairs:
            first = store.store(a, category="fact")
            second = store.store(b, category="fact")
            assert second.action == "created" and second.memory.id != first.memory.id, (a, b, second)
            assert second.kept_similar is not None and second.kept_similar["id"] == first.memory.id
        assert {m.text for m in store.list()} == {t for pair in pairs for t in pair}
        res = store.store(again, category="fact")
        assert res.action == "updated" and res.previous_text == pairs[0][0], res
        assert store.count() == 2 * len(pairs)


def test_a_name_at_a_sentence_start_is_not_replaced_by_the_word_without_its_s(tmp_path: Path) -> None:
    # the same name said again is an update of the one stored
    assert_pairs_kept_apart(tmp_path, NAMES_AT_START[:2], "windows laptops need the VPN client")


# -- one memory store per MCP server (per agent) -------------------------------------------------

def test_the_store_tools_memory_search_and_memory_get_share_the_memorys_store(workspace: Path,
                                                                               openai_fake: Any) -> None:
    settings = openai_settings(workspace, openai_fake)
    run_index(settings)
    tools = MemoryTools(settings)
    try:
        stored = tools.handlers["memory_store"]({"text": "The walrus standup moved to room Orca", "category": "fact"})
        store = tools.memory.store
        # one instance: the tools opened the memory's own store, and keep using it
        assert tools.store_tools.store is store and tools.memory._store is store
        cite = f"store:{stored['id']}"
        assert tools.get({"path": cite})["text"] == "The walrus standup moved to room Orca"
        res = tools.search({"query": "walrus standup room", "minScore": 0, "sources": ["memory", "store"]})
        hits = res["results"]
        assert isinstance(hits, list) and cite in [h["citation"] for h in hits]
        tools.handlers["memory_forget"]({"memoryId": stored["id"]})
        assert tools.memory.store is store and tools.store_tools.store is store
    finally:
        tools.close()
    assert tools.memory._store is None  # closed with the memory


def test_mcp_a_stored_memory_reads_back_through_its_citation(workspace: Path, openai_fake: Any,
                                                            tmp_path: Path) -> None:
    """Through the real server: what memory_store wrote, updated or forgot is what memory_get of its
    store:<id> citation and memory_search with the store answer, at once."""
    (workspace / "memory-core.toml").write_text(_toml(openai_fake.base_url))
    run_index(load_settings(workspace / "memory-core.toml", {"workspace": str(workspace)}))
    errlog = open(tmp_path / "server.err", "w")  # noqa: SIM115 - closed below
    text = "The narwhal deploy key lives in vault path ops/narwhal"

    async def session() -> None:
        async with Client(_client(workspace, errlog)) as client:
            r = await client.call_tool("memory_get", {"path": "store:" + "0" * 32})  # Memory's store opened first
            assert r.is_error and "no memory with id" in _text(r)
            r = await client.call_tool("memory_store", {"text": text, "category": "fact"})
            assert not r.is_error and r.structured_content["action"] == "created", _text(r)
            mid = r.structured_content["id"]
            r = await client.call_tool("memory_get", {"path": f"store:{mid}"})
            assert not r.is_error and r.structured_content["text"] == text, _text(r)
            r = await client.call_tool("memory_store", {"text": text, "importance": 0.9})
            assert r.structured_content["action"] == "updated" and r.structured_content["id"] == mid
            r = await client.call_tool("memory_search", {"query": "narwhal deploy key vault", "min_score": 0,
                                                         "sources": ["store"]})
            assert not r.is_error, _text(r)
            assert [h["citation"] for h in r.structured_content["results"]] == [f"store:{mid}"]
            r = await client.call_tool("memory_forget", {"memoryId": mid})
            assert not r.is_error and r.structured_content["action"] == "deleted"
            r = await client.call_tool("memory_get", {"path": f"store:{mid}"})
            assert r.is_error and "no memory with id" in _text(r)
            r = await client.call_tool("memory_search", {"query": "narwhal deploy key vault", "min_score": 0,
                                                         "sources": ["store"]})
            assert r.structured_content["results"] == []
            r = await client.call_tool("memory_store", {"text": text + ".", "category": "fact"})
            again = r.structured_content["id"]
            assert again != mid
            r = await client.call_tool("memory_get", {"path": f"store:{again}"})
            assert r.structured_content["text"] == text + "."

    try:
        _run(session)
    finally:
        errlog.close()
    assert "Traceback" not in (tmp_path / "server.err").read_text()

