"""Chunk edges (issue 37): the answer one message (transcript) or line (note) past the end of the
chunk that matches the question is shown with it, and cited (``query.edge_lines``). Real indexes
(the real chunker, SQLite, FTS5, the local model)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from memory_core.config import SNIPPET_MAX_CHARS, Settings, load_settings
from memory_core.index.pipeline import run_index
from memory_core.query.edges import EDGE_MAX_CHARS
from memory_core.query.search import Searcher

pytest.importorskip("sentence_transformers")

WIDTH = 185  # every message or line this long: 3 to a chunk of 150 tokens (600 characters), no overlap
FILLER = [
    "The sprint review moved to Thursday afternoon and the demo is not ready yet",
    "My tomato seedlings look leggy on the windowsill, they want more light",
    "Which film should we watch tonight, something light and funny",
    "The quarterly spreadsheet has a broken formula in column F again",
    "I ran nine kilometres this morning and my knee felt fine",
    "Fried rice with shredded cabbage, ginger and an egg on top for dinner",
    "The train to the coast leaves at seven, we should pack the night before",
    "Remember to water the ferns on the balcony while the neighbours are away",
]
QUESTION = "Priya recommended a sourdough bakery near the office, I keep forgetting its name"
ANSWER = "It was Brotzeit on Canal Street, the shop with the blue door and the rye starter"
NOTE_QUESTION = "Marek suggested a plumber for the boiler that keeps losing pressure"
NOTE_ANSWER = "Kowalski and Sons, ring them before eight, ask for the older brother"


def _pad(text: str, width: int = WIDTH) -> str:
    words = ["and", "then", "some", "more", "chatter", "about", "the", "weather", "of", "the", "week", "ahead"]
    out, i = text, 0
    while len(out) < width:
        out += " " + words[i % len(words)]
        i += 1
    return out[:width].rstrip()


def _transcript(messages: list[str]) -> str:
    recs: list[dict[str, Any]] = [{"type": "session", "version": 3, "id": "s", "timestamp": "2026-10-01T09:00:00.000Z"}]
    for n, text in enumerate(messages):
        role = "assistant" if n % 2 == 0 else "user"
        recs.append({"type": "message", "timestamp": f"2026-10-01T09:{n:02d}:00.000Z",
                     "message": {"role": role, "content": [{"type": "text", "text": text}]}})
        if n == 6:  # a record that is not a message: the JSONL lines are not one per message
            recs.append({"type": "custom", "customType": "model-change", "data": {}})
    return "\n".join(json.dumps(r) for r in recs) + "\n"


def _settings(ws: Path, **query: Any) -> Settings:
    return load_settings(None, {"workspace": str(ws), "provider": "local", "sources": ["memory", "sessions"],
                                "chunking": {"tokens": 150, "overlap": 0}, "query": query})


@pytest.fixture(scope="module")
def edges(tmp_path_factory: pytest.TempPathFactory) -> Path:
    ws = tmp_path_factory.mktemp("edges") / "ws"
    (ws / "sessions").mkdir(parents=True)
    (ws / "memory").mkdir()
    (ws / "MEMORY.md").write_text("# Memory\n\n- Prefers short answers.\n")
    # messages 4-6 (JSONL lines 5-7) are the second chunk: the question ends it, the answer (line 8) opens
    # the third, whose lines are not one per message (line 9 is another record)
    msgs = [_pad(f) for f in FILLER[:5]] + [_pad(QUESTION), _pad(ANSWER)] + [_pad(f) for f in FILLER[5:]]
    (ws / "sessions" / "chat.jsonl").write_text(_transcript(msgs))
    lines = [_pad(f) for f in FILLER[:5]] + [_pad(NOTE_QUESTION), _pad(NOTE_ANSWER)] + [_pad(f) for f in FILLER[5:]]
    (ws / "memory" / "house.md").write_text("\n".join(lines) + "\n")
    run_index(_settings(ws))
    return ws


def _chunk_of(s: Searcher, path: str, needle: str) -> tuple[int, int, str]:
    rows = s._current().conn.execute("SELECT start_line, end_line, text FROM chunks WHERE path = ?", (path,)).fetchall()
    (row,) = [r for r in rows if needle in r[2]]
    return int(row[0]), int(row[1]), str(row[2])


def test_the_answer_one_message_past_the_chunk_is_shown_and_cited(edges: Path) -> None:
    q = "Which sourdough bakery did Priya recommend?"
    with Searcher(_settings(edges)) as s:
        start, end, text = _chunk_of(s, "sessions/chat.jsonl", "Priya")
        a_start, _, a_text = _chunk_of(s, "sessions/chat.jsonl", "Brotzeit")
        # the setup: the question is the last message of its chunk, the answer the first of the next
        assert text.rsplit("\n", 1)[-1].startswith("User: Priya") and a_text.startswith("Assistant: It was Brotzeit")
        assert a_start == end + 1
        top = s.search(q)[0]
        assert (top.path, top.start_line) == ("sessions/chat.jsonl", start)
        assert "Brotzeit on Canal Street" in top.snippet and top.snippet.index("Priya") < top.snippet.index("Brotzeit")
        assert (top.end_line, top.citation) == (a_start, f"sessions/chat.jsonl#L{start}-L{a_start}")
        assert len(top.snippet) <= SNIPPET_MAX_CHARS
        assert top.snippet.split("\n")[-1] == "Assistant: " + _pad(ANSWER) and len(_pad(ANSWER)) < EDGE_MAX_CHARS
    with Searcher(_settings(edges, edge_lines=0)) as s:
        off = s.search(q)[0]
        assert (off.start_line, off.end_line) == (start, end) and "Brotzeit" not in off.snippet
        assert off.score == top.score  # the neighbour is shown, the ranking does not move


def test_the_answer_one_line_past_a_note_chunk_is_shown_and_cited(edges: Path) -> None:
    q = "Which plumber did Marek suggest for the boiler?"
    with Searcher(_settings(edges)) as s:
        start, end, text = _chunk_of(s, "memory/house.md", "Marek")
        assert text.rsplit("\n", 1)[-1].startswith("Marek") and end == 6
        top = s.search(q)[0]
        assert (top.path, top.start_line, top.end_line) == ("memory/house.md", start, 7)
        assert top.citation == f"memory/house.md#L{start}-L7" and "Kowalski and Sons" in top.snippet
    with Searcher(_settings(edges, edge_lines=0)) as s:
        off = s.search(q)[0]
        assert (off.start_line, off.end_line) == (start, end) and "Kowalski" not in off.snippet


def test_a_result_whose_match_is_inside_its_chunk_is_left_as_it_was(edges: Path) -> None:
    """The match in the middle message of its chunk: no neighbour, the same snippet and citation."""
    q = "leggy tomato seedlings windowsill"
    with Searcher(_settings(edges)) as s, Searcher(_settings(edges, edge_lines=0)) as off:
        on_hits = [(h.citation, h.snippet) for h in s.search(q, sources=["sessions"])]
        assert on_hits and on_hits[0][0] == "sessions/chat.jsonl#L2-L4"
        assert on_hits == [(h.citation, h.snippet) for h in off.search(q, sources=["sessions"])]


def _roles_transcript(messages: list[tuple[str, str]]) -> str:
    recs: list[dict[str, Any]] = [{"type": "session", "version": 3, "id": "r", "timestamp": "2026-10-02T09:00:00.000Z"}]
    for n, (role, text) in enumerate(messages):
        recs.append({"type": "message", "timestamp": f"2026-10-02T09:{n:02d}:00.000Z",
                     "message": {"role": role, "content": [{"type": "text", "text": text}]}})
    return "\n".join(json.dumps(r) for r in recs) + "\n"


FLAT = "Kate: found a flat on Carver Road at last, two bedrooms and a tiny garden"
SIGNED = "Kate: signed everything at the agency this morning, so relieved"
RENT = "Kate: 1150 a month, moving in on the first of March, help me carry boxes"
PLOT = "Jorge: got an allotment plot in Brixton at last, right next to the shed"
REPLY = "Ben: nice one, send pics when the beans come up"
FEE = "Jorge: 40 quid a year, keys from the warden on Saturday"


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two chats whose second chunk (JSONL lines 5-7) ends in the matched message's run: the same
    speaker goes on past the chunk's end (flat.jsonl), or another speaker answers first (plot.jsonl)."""
    ws = tmp_path_factory.mktemp("runs") / "ws"
    (ws / "sessions").mkdir(parents=True)
    head = [("user", _pad(FILLER[0])), ("assistant", _pad(FILLER[1])), ("user", _pad(FILLER[2])),
            ("user", _pad(FILLER[3]))]
    tail = [("user", _pad(FILLER[5])), ("assistant", _pad(FILLER[6]))]
    (ws / "sessions" / "flat.jsonl").write_text(_roles_transcript(
        [*head, ("assistant", _pad(FLAT)), ("assistant", _pad(SIGNED)), ("assistant", _pad(RENT)), *tail]))
    (ws / "sessions" / "plot.jsonl").write_text(_roles_transcript(
        [*head, ("assistant", _pad(PLOT)), ("user", _pad(REPLY)), ("assistant", _pad(FEE)), *tail]))
    run_index(_settings(ws))
    return ws


def test_a_match_in_the_speakers_last_run_shows_what_they_said_next(runs: Path) -> None:
    """Texting splits one thought over several messages: the match is the first message of the
    run of one speaker that ends the chunk (not its last message), and the run goes on past the
    chunk's end: the next message is shown and cited. The rule of the last message alone missed it."""
    with Searcher(_settings(runs)) as s:
        start, end, text = _chunk_of(s, "sessions/flat.jsonl", "Carver Road")
        assert (start, end) == (5, 7) and text.split("\n")[-2].startswith("Assistant: Kate: found a flat")
        top = s.search("Which flat did Kate find on Carver Road?")[0]
        assert (top.path, top.start_line) == ("sessions/flat.jsonl", 5)
        assert (top.end_line, top.citation) == (8, "sessions/flat.jsonl#L5-L8")
        assert "1150 a month" in top.snippet and len(top.snippet) <= SNIPPET_MAX_CHARS
    with Searcher(_settings(runs, edge_lines=0)) as s:
        off = s.search("Which flat did Kate find on Carver Road?")[0]
        assert (off.start_line, off.end_line) == (5, 7) and "1150" not in off.snippet


def test_a_match_before_another_speakers_reply_is_not_at_the_edge(runs: Path) -> None:
    """Another speaker's message after the match ends the run: the match is inside the chunk, and
    its snippet and citation stay the chunk's."""
    with Searcher(_settings(runs)) as s:
        start, end, text = _chunk_of(s, "sessions/plot.jsonl", "Brixton")
        assert (start, end) == (5, 7) and text.split("\n")[-1].startswith("User: Ben: nice one")
        top = s.search("Where did Jorge get an allotment plot?")[0]
        assert (top.path, top.start_line, top.end_line) == ("sessions/plot.jsonl", 5, 7)
        assert "40 quid" not in top.snippet


ASKED = "Kate: which platform does the Brighton train go from on Saturday morning"
HELD = ["Ben: hang on", "Ben: scrolling up"]
TOLD = "Ben: platform 9b, the one at the far end past the coffee kiosk"
YES_NO = "Kate: are we still on for the Brighton train on Saturday morning"
GIG = "Jorge: how much is the venue paying us for the gig at the Crooked Anchor"
PAID = "Siobhan: 200 plus free drinks, cash on the night"


@pytest.fixture(scope="module")
def asked(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A question whose answer comes a few messages on, past its chunk's end (train.jsonl): Kate
    asks, Ben holds it ("hang on"), Kate talks on, the chunk ends; then Ben "scrolling up" and the
    answer. The same with a yes-or-no question (yesno.jsonl), and with the answer inside the
    chunk (told.jsonl)."""
    ws = tmp_path_factory.mktemp("asked") / "ws"
    (ws / "sessions").mkdir(parents=True)
    head = [("user", _pad(FILLER[0])), ("assistant", _pad(FILLER[1])), ("user", _pad(FILLER[2]))]
    side = [("assistant", "Kate: " + _pad(FILLER[3], 175)), ("assistant", "Kate: " + _pad(FILLER[4], 175))]
    tail = [("user", _pad(FILLER[5])), ("assistant", _pad(FILLER[6]))]
    for name, question, then in (("train", ASKED, [("user", HELD[1]), ("user", TOLD)]),
                                 ("yesno", YES_NO, [("user", HELD[1]), ("user", TOLD)])):
        (ws / "sessions" / f"{name}.jsonl").write_text(_roles_transcript(
            [*head, ("assistant", _pad(question, 170)), ("user", HELD[0]), *side, *then, *tail]))
    (ws / "sessions" / "told.jsonl").write_text(_roles_transcript(
        [*head, ("assistant", _pad(ASKED, 170)), ("user", TOLD), *side, ("user", HELD[1]), *tail]))
    # a group chat: every other person shares the assistant role; the sender's name tells them apart
    jorge = [("assistant", "Jorge: " + _pad(FILLER[3], 175)), ("assistant", "Jorge: " + _pad(FILLER[4], 175))]
    (ws / "sessions" / "group.jsonl").write_text(_roles_transcript(
        [*head, ("assistant", _pad(GIG, 170)), ("assistant", "Siobhan: one sec"), *jorge,
         ("assistant", "Siobhan: hang on"), ("assistant", PAID), *tail]))
    run_index(_settings(ws))
    return ws


def test_an_open_questions_answer_past_the_chunk_is_shown_and_cited(asked: Path) -> None:
    """The question is the chunk's best match, inside it (not at its edge), and nobody has answered
    it by the chunk's end (Ben only held it: "hang on"): the answer is past the edge, after another
    hold, and is shown and cited with it. The edge rule alone (the speaker's last run) missed it."""
    q = "Which platform does the Brighton train leave from?"
    with Searcher(_settings(asked)) as s:
        start, end, text = _chunk_of(s, "sessions/train.jsonl", "which platform")
        n_start, _, n_text = _chunk_of(s, "sessions/train.jsonl", "platform 9b")
        # the setup: the question opens its chunk, Ben's "hang on" and Kate's side talk end it, the next
        # chunk opens with Ben's second hold and then the answer
        assert (start, end) == (5, 8) and text.split("\n")[1] == "User: " + HELD[0]
        assert n_start == end + 1 and n_text.split("\n")[:2] == ["User: " + HELD[1], "User: " + TOLD]
        top = next(h for h in s.search(q) if h.path == "sessions/train.jsonl")
        assert (top.start_line, top.end_line) == (5, 10)
        assert top.citation == "sessions/train.jsonl#L5-L10"
        assert top.snippet.endswith("User: " + HELD[1] + "\nUser: " + TOLD) and len(top.snippet) <= SNIPPET_MAX_CHARS
    with Searcher(_settings(asked, edge_lines=0)) as s:
        off = next(h for h in s.search(q) if h.path == "sessions/train.jsonl")
        assert (off.start_line, off.end_line) == (5, 8) and "9b" not in off.snippet and off.score == top.score


def test_in_a_group_chat_the_senders_name_tells_who_answers(asked: Path) -> None:
    """Jorge and Siobhan share the assistant role; Siobhan's "one sec" and "hang on" hold Jorge's
    question, her "200 plus free drinks" answers it: told apart by the sender's name, not the role."""
    with Searcher(_settings(asked)) as s:
        start, end, _ = _chunk_of(s, "sessions/group.jsonl", "paying us")
        assert (start, end) == (5, 8)
        top = next(h for h in s.search("How much is the venue paying the band for the gig?")
                   if h.path == "sessions/group.jsonl")
        assert (top.start_line, top.end_line) == (5, 10) and top.snippet.endswith("Assistant: " + PAID)


def test_a_yes_or_no_question_or_an_answered_one_is_not_extended(asked: Path) -> None:
    """A yes-or-no question is answered by a word ("sure"), so a short reply does not leave it open;
    a question answered inside its chunk has nothing to wait for: neither result reaches past its
    chunk's end."""
    with Searcher(_settings(asked)) as s:
        yes_no = next(h for h in s.search("Are we still on for the Brighton train on Saturday?")
                      if h.path == "sessions/yesno.jsonl")
        assert yes_no.end_line == 8 and "9b" not in yes_no.snippet
        told = next(h for h in s.search("Which platform does the Brighton train leave from?")
                    if h.path == "sessions/told.jsonl")
        _, end, text = _chunk_of(s, "sessions/told.jsonl", "which platform")
        assert "User: " + TOLD in text.split("\n") and told.end_line == end == 7


def test_what_asks_and_what_holds() -> None:
    from memory_core.query.edges import asks, edge_runs, holds, open_question

    assert asks("Assistant: Kate: which platform does the Brighton train go from")
    assert asks("User: Ben: btw what time is ur train") and asks("User: u know where it is?")
    assert not asks("User: Ben: hiking tmrw?") and not asks("Assistant: Kate: the tram was packed")
    assert holds("User: Ben: hang on") and holds("User: lemme check")
    assert not holds("User: Ben: 9b") and not holds("User: Ben: the one at the far end")
    chunk = ["Assistant: Kate: which platform does the Brighton train go from", "User: Ben: hang on",
             "Assistant: Kate: the tram was packed"]
    assert open_question(chunk, 0, "sessions") and not open_question(chunk, 0, "memory")
    assert not open_question([*chunk, "User: Ben: 9b at the far end"], 0, "sessions")
    assert not open_question(chunk, 2, "sessions")
    group = ["Assistant: Jorge: how much is the venue paying us", "Assistant: Siobhan: one sec",
             "Assistant: Jorge: ordered new boots"]
    assert open_question(group, 0, "sessions")
    assert not open_question([*group, "Assistant: Siobhan: 200 plus free drinks"], 0, "sessions")
    # one speaker's run is one person's, also where people share a role
    assert edge_runs(["Assistant: Jorge: x", "Assistant: Kate: a", "Assistant: Kate: b"], "sessions") == (1, 2)
    assert edge_runs(["User: a", "User: b", "Assistant: c"], "sessions") == (2, 1)


def test_a_notes_last_chunk_is_a_neighbour_though_it_holds_the_final_newline() -> None:
    """A note's last chunk ends at its last line but its text still holds the final newline
    (``chunking.end_at_last_line``): one more piece than lines. It is still the neighbour of the
    chunk before it (the answer on its first line), and has the chunk before as its own."""
    from memory_core.query.edges import Neighbour, _after, _before

    last = (7, 8, NOTE_ANSWER + "\nthe end\n")  # lines 7-8, and the empty piece after the newline
    assert _after("memory", 4, 6, "a\nb\n" + NOTE_QUESTION, last) == Neighbour(7, NOTE_ANSWER)
    assert _before("memory", 7, 8, last[2], (4, 6, "a\nb\n" + NOTE_QUESTION)) == Neighbour(6, NOTE_QUESTION)
    # a chunk that really ends at a blank line has as many pieces as lines: read as it is
    assert _after("memory", 1, 3, "a\nb\nc", (4, 6, "\nx\n")) == Neighbour(5, "x")
    # a long line cut in pieces: its lines are unknown, no neighbour
    assert _after("memory", 1, 3, "a\nb\nc", (4, 5, "p1\np2\np3\np4")) is None
