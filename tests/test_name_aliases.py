"""A short name memory writes beside a longer one (twenty-sixth session): "Mo" asked of chats whose
messages are labelled "Muhammad:". Real indexes (SQLite, FTS5) of JSONL transcripts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memory_core.config import Settings, load_settings
from memory_core.index.pipeline import run_index
from memory_core.query import retrieval
from memory_core.query.search import Searcher


def _session(path: Path, day: str, turns: list[tuple[str, str]]) -> None:
    recs: list[dict[str, object]] = [{"type": "session", "version": 3, "id": path.stem, "timestamp": f"{day}T18:00:00Z"}]
    for n, (who, text) in enumerate(turns):
        recs.append({"type": "message", "timestamp": f"{day}T18:{n:02d}:00Z",
                     "message": {"role": "user" if who == "Ben" else "assistant",
                                 "content": [{"type": "text", "text": f"{who}: {text}"}]}})
    path.write_text("\n".join(json.dumps(r) for r in recs) + "\n")


@pytest.fixture(scope="module")
def chats(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    ws = tmp_path_factory.mktemp("aliases") / "ws"
    (ws / "sessions").mkdir(parents=True)
    # Ben calls him Mo; the chat export labels his messages with his full name
    _session(ws / "sessions" / "mo-1.jsonl", "2026-01-05", [
        ("Ben", "hey Mo how was the flight"), ("Muhammad", "long but fine, landed at 6"),
        ("Ben", "good to hear"), ("Muhammad", "jet lag is brutal")])
    _session(ws / "sessions" / "mo-2.jsonl", "2026-01-07", [
        ("Ben", "Mo did u sort the insurance"), ("Muhammad", "yes finally, renewed it online"),
        ("Ben", "nice one")])
    _session(ws / "sessions" / "mo-3.jsonl", "2026-01-09", [
        ("Muhammad", "the boiler in the new flat broke, the plumber reckons the valve has to go"),
        ("Ben", "ugh how much"), ("Muhammad", "about 200 he reckons")])
    _session(ws / "sessions" / "mo-4.jsonl", "2026-01-11", [
        ("Ben", "thanks Mo for the lift"), ("Muhammad", "anytime")])
    # other people talk about a boiler and a car, and John and James share a chat
    _session(ws / "sessions" / "kate-1.jsonl", "2026-01-09", [
        ("Kate", "the boiler broke, no hot water"), ("Ben", "oh no")])
    for i, topic in enumerate(("the pottery class", "the new bakery", "the climbing wall", "the pub quiz")):
        _session(ws / "sessions" / f"kate-{i + 2}.jsonl", f"2026-01-1{i}", [
            ("Kate", f"have u been to {topic}"), ("Ben", "not yet"), ("Kate", "we should go")])
    for i, day in enumerate(("2026-01-06", "2026-01-08", "2026-01-10")):
        _session(ws / "sessions" / f"jj-{i}.jsonl", day, [
            ("John", f"the car is at the garage again {i}"), ("James", "which garage this time"),
            ("John", "the one by the station"), ("Ben", "John u need a new car")])
    s = load_settings(None, {"workspace": str(ws), "provider": "none", "sources": ["sessions"]})
    run_index(s)
    return s


def test_a_short_name_is_searched_with_the_name_memory_writes_beside_it(chats: Settings) -> None:
    """"What did Mo say about the boiler?": memory never writes "Mo" beside the answer, only the
    chat's label "Muhammad:", so Kate's shorter boiler message ranked above his. "Mo" is in every
    chunk that holds it beside "Muhammad", so the keyword side searches both."""
    with Searcher(chats) as s:
        idx = s._current()
        assert retrieval.alias_of(idx, "Mo") == "muhammad"
        assert retrieval.respelled(idx, "What did Mo say about the boiler?") == \
            "What did Mo muhammad say about the boiler?"
        hits = s.search("What did Mo say about the boiler?")
    paths = [h.path for h in hits]
    # Muhammad's boiler above Kate's (her chunk is shorter: before, it came first)
    assert "sessions/mo-3.jsonl" in paths and "sessions/kate-1.jsonl" in paths, paths
    assert paths.index("sessions/mo-3.jsonl") < paths.index("sessions/kate-1.jsonl"), \
        [(h.path, h.score) for h in hits]


def test_the_other_person_of_a_chat_is_no_alias(chats: Settings) -> None:
    """John and James share every chunk John is in, but "James" does not begin with John's
    consonants (``gn`` / ``gms``): the question about John is not widened to James's messages.
    Nor is a name that is not short (Muhammad), nor one whose chunks name no longer name."""
    with Searcher(chats) as s:
        idx = s._current()
        assert retrieval.alias_of(idx, "John") is None
        assert retrieval.respelled(idx, "What did John say about the car?") == "What did John say about the car?"
        assert retrieval.respelled(idx, "What did Kate say?") == "What did Kate say?"
        assert retrieval.respelled(idx, "What did Muhammad say?") == "What did Muhammad say?"
        # a lower-case "mo" (one more month, a slip) is no name to widen
        assert retrieval.respelled(idx, "one more mo") == "one more mo"
        # nor is an acronym written in capitals ("the MO of the thief": the twenty-eighth session's audit)
        assert retrieval.respelled(idx, "What was the MO of the thief?") == "What was the MO of the thief?"


def test_a_greeting_before_a_name_is_no_name(tmp_path: Path) -> None:
    """MemoryBank's notes start each turn with "**Assistant:** Hi Henry": "Hi" is capitalised in
    every chunk beside Henry (``h`` / ``hnr``), but only where a sentence starts, and "Assistant" is
    a role label. A name is written capitalised somewhere else too ("thanks Mo")."""
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    for day in range(1, 5):
        (ws / "memory" / f"2026-04-0{day}.md").write_text(
            f"# 2026-04-0{day}\n\n**User:** Hi, it is Henry again.\n\n**Assistant:** Hi Henry, how was day {day}?\n")
    s = load_settings(None, {"workspace": str(ws), "provider": "none"})
    run_index(s)
    with Searcher(s) as se:
        idx = se._current()
        assert retrieval.alias_of(idx, "Hi") is None
        assert retrieval.respelled(idx, "Hi, how was day 3?") == "Hi, how was day 3?"
