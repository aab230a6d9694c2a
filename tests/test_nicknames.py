"""A given name asked by another of its forms (twenty-seventh session): "Bob" of chats whose
messages are labelled "Robert:", "Liz" beside "Elizabeth". The forms come from the ``nicknames``
package's table; memory decides which of them is a name here. Real indexes (SQLite, FTS5) of JSONL
transcripts."""

from __future__ import annotations

from pathlib import Path

import pytest

from memory_core.config import Settings, load_settings
from memory_core.index.pipeline import run_index
from memory_core.query import retrieval
from memory_core.query.search import Searcher
from tests.test_name_aliases import _session

SESSIONS: list[tuple[str, str, list[tuple[str, str]]]] = [
    # the export labels his messages "Robert:"; nobody writes "Bob"
    ("robert-1", "2026-02-02", [
        ("Ben", "how is the boat coming along"),
        ("Robert", "the boat needs a new hull coat before spring, I sanded it all weekend and my arms are done"),
        ("Ben", "sounds like hard work"),
    ]),
    ("robert-2", "2026-02-04", [("Robert", "booked the dentist for thursday"), ("Ben", "good luck")]),
    # Kate's boat message is shorter: the keyword side alone ranks it first
    ("kate-1", "2026-02-03", [("Kate", "the boat sank"), ("Ben", "no way")]),
    # Elizabeth is "Liz" to her friends and "Elizabeth:" in the export
    ("liz-1", "2026-02-05", [
        ("Ben", "Liz are you coming to the quiz"),
        ("Elizabeth", "cannot, the flat viewing is at seven"),
    ]),
    ("liz-2", "2026-02-06", [
        ("Elizabeth", "the landlord of the flat on Carver Road wants a deposit of two months"),
        ("Ben", "that is steep"),
    ]),
    ("liz-3", "2026-02-07", [("Kate", "Liz was so funny at the quiz"), ("Ben", "she always is")]),
    # "bill" is a word here, not a name; William is a name; a month is no one's name
    ("william-1", "2026-02-08", [
        ("William", "the garage bill came to 300"),
        ("Ben", "ouch, William that is a lot"),
    ]),
    ("august-1", "2026-02-09", [("Kate", "we go to Spain in August"), ("Ben", "August is so hot there")]),
    # two men Al may be
    ("al-1", "2026-02-10", [("Albert", "the van is free on saturday"), ("Alfred", "I can drive it")]),
    # a name the stemmer shortens ("anneliese" is indexed as annelies), and an office others bake for
    ("anneliese-1", "2026-02-11", [
        ("Anneliese", "my rye sourdough failed again, far too much water"),
        ("Ben", "next time"),
    ]),
    ("anneliese-2", "2026-02-12", [
        ("Ben", "Anneliese what are the buns for"),
        ("Anneliese", "cinnamon buns for the office tomorrow"),
    ]),
    ("office-1", "2026-02-13", [
        ("Kate", "someone left cake in the office"),
        ("Ben", "the office gets all the cake"),
    ]),
    # Susan, whom a question may call Sue, only ever talks about the dentist
    ("susan-1", "2026-02-15", [
        ("Susan", "the dentist moved my appointment to friday"),
        ("Ben", "annoying"),
    ]),
    # Jorge, whom a question may spell George by ear (a sound-alike first letter), and Filip / Philip
    ("jorge-1", "2026-02-16", [
        ("Jorge", "my thesis defence is on the 20th and I am terrified"),
        ("Ben", "Jorge you will be fine"),
    ]),
    ("kate-2", "2026-02-17", [("Kate", "thesis defence passed!"), ("Ben", "wow")]),
    ("filip-1", "2026-02-18", [("Filip", "the kayak trip is off, the river is too high"), ("Ben", "shame")]),
    # Virginia drinks tea; nobody writes "ginger", a form of her name in the table and a spice
    ("virginia-1", "2026-02-19", [("Virginia", "hot tea with honey helps my sore throat"), ("Ben", "get well")]),
    # both halves written: a double name left as it is
    ("jean-1", "2026-02-14", [("Ben", "Jean and Luc came by"), ("Kate", "Jean is Luc's brother")]),
]


@pytest.fixture(scope="module")
def chats(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    ws = tmp_path_factory.mktemp("nicknames") / "ws"
    (ws / "sessions").mkdir(parents=True)
    for name, day, turns in SESSIONS:
        _session(ws / "sessions" / f"{name}.jsonl", day, turns)
    s = load_settings(None, {"workspace": str(ws), "provider": "none", "sources": ["sessions"]})
    run_index(s)
    return s


def _asked(chats: Settings, question: str, searched_as: str) -> list[str]:
    """The paths of ``question``'s answer, best first, once the keyword side is seen to search it
    as ``searched_as``."""
    with Searcher(chats) as s:
        assert retrieval.respelled(s._current(), question) == searched_as, question
        return [h.path for h in s.search(question)]


def test_a_nickname_memory_never_writes_is_searched_as_the_name_it_does(chats: Settings) -> None:
    """"What did Bob say about the boat?": memory never writes "Bob", so before, the question
    counted a word memory lacks and, with the keyword side alone, got nothing at all. Bob is Robert
    in the table, and memory writes Robert as a name: the keyword side searches "robert" in its
    place, and Robert's boat message comes before Kate's shorter one."""
    with Searcher(chats) as s:
        assert retrieval.nickname_in_memory(s._current(), "Bob", ["what", "did", "bob", "say", "boat"]) == "robert"
    paths = _asked(chats, "What did Bob say about the boat?", "What did robert say about the boat?")
    assert paths[:1] == ["sessions/robert-1.jsonl"], paths


def test_a_name_memory_writes_in_two_forms_is_searched_in_both(chats: Settings) -> None:
    """"Liz" is in memory (Ben and Kate call her so) but her own messages say "Elizabeth:". Asked
    what Liz said about the quiz, Kate's shorter "Liz was so funny at the quiz" came first before;
    both forms searched, Elizabeth's own answer does."""
    paths = _asked(chats, "What did Liz say about the quiz?", "What did Liz elizabeth say about the quiz?")
    assert paths[:2] == ["sessions/liz-1.jsonl", "sessions/liz-3.jsonl"], paths


def test_words_months_and_ambiguous_forms_are_left_alone(chats: Settings) -> None:
    """A word in lower case is not a name ("the garage bill"). A form the table gives to two names
    memory writes is not guessed: Al may be Albert or Alfred, Bill William or Robert. A month is no
    one's name (Gus / August)."""
    with Searcher(chats) as s:
        idx = s._current()
        assert retrieval.respelled(idx, "how much was the garage bill?") == "how much was the garage bill?"
        # capitalised, Bill is a name, but the table gives it to William and to Robert, both named here
        assert retrieval.nickname_in_memory(idx, "Bill", ["bill"]) is None
        assert retrieval.respelled(idx, "What did Bill say about the garage?") == "What did Bill say about the garage?"
        assert retrieval.nickname_in_memory(idx, "Willy", ["willy"]) == "william"
        assert retrieval.nickname_in_memory(idx, "Gus", ["gus"]) is None
        assert retrieval.respelled(idx, "What did Gus say?") == "What did Gus say?"
        assert retrieval.respelled(idx, "Where do we go in August?") == "Where do we go in August?"
        assert retrieval.nickname_in_memory(idx, "Al", ["al"]) is None
        assert retrieval.respelled(idx, "Who can drive, Al?") == "Who can drive, Al?"
        # a sentence's first word is a name only where memory writes its form beside the question's
        # other words (as for respelling): Susan is beside "dentist", never beside "landlord"
        assert retrieval.respelled(idx, "Sue said what about the dentist?") == "susan said what about the dentist?"
        assert retrieval.respelled(idx, "Sue the landlord?") == "Sue the landlord?"
        assert retrieval.respelled(idx, "Bob?") == "robert?"  # asked alone: nothing else to read it by
        # a form the question writes itself is not added again
        assert retrieval.respelled(idx, "Did Liz and Elizabeth meet?") == "Did Liz and Elizabeth meet?"


def test_a_near_name_the_stemmer_shortens_is_searched_as_written(chats: Settings) -> None:
    """The index holds porter stems, and "anneliese" is indexed as ``annelies``, which a query reads
    as ``anneli``: the near spelling of "Annelise" was found and then searched as a word in no
    chunk, so the question kept a word memory lacks. Now it is searched as "anneliese"."""
    with Searcher(chats) as s:
        assert retrieval.near_spelling(s._current(), "annelise") == "anneliese"
    paths = _asked(chats, "What happened to Annelise's rye bread?", "What happened to anneliese's rye bread?")
    assert paths[:1] == ["sessions/anneliese-1.jsonl"], paths


def test_a_hyphenated_name_is_joined_as_memory_writes_it(chats: Settings) -> None:
    """"Anna-Lise" is two words to the tokenizer, neither in memory: each was respelled apart (or
    left), and the question about what she baked for the office found Kate's office cake first.
    Joined, it is the near spelling of the Anneliese memory writes. "Jean-Luc", whose halves memory
    writes both, is left as it is."""
    _asked(chats, "Did Jean-Luc call?", "Did Jean-Luc call?")  # both halves written: left as it is
    paths = _asked(chats, "What did Anna-Lise bake for the office?", "What did anneliese bake for the office?")
    assert paths[:1] == ["sessions/anneliese-2.jsonl"], paths


def test_an_export_reads_names_as_the_index_does(chats: Settings, tmp_path: Path) -> None:
    """`search --lancedb` searched a name as typed: a misspelt one, a nickname and a short name the
    export writes otherwise found nothing, or the wrong chat, where the index answers. The export's
    own words now give the same forms (its terms table, its full-text index), so both backends
    search the same words and answer first with the same chat."""
    from memory_core.export.lancedb import export_lancedb
    from memory_core.query.lancedb import LanceSearcher

    uri = str(tmp_path / "lance")
    export_lancedb(chats.index_file, uri)
    questions = {
        "What did Bob say about the boat?": "sessions/robert-1.jsonl",
        "What did Liz say about the quiz?": "sessions/liz-1.jsonl",
        "What happened to Annelise's rye bread?": "sessions/anneliese-1.jsonl",
        "What did Anna-Lise bake for the office?": "sessions/anneliese-2.jsonl",
    }
    with Searcher(chats) as s, LanceSearcher(chats, uri) as ls:
        idx = s._current()
        for q, path in questions.items():
            assert retrieval.respelled(ls.lexicon, q) == retrieval.respelled(idx, q), q
            got = ls.search(q)
            assert got and got[0].path == path, (q, [(h.path, h.score) for h in got])
        for q in ("how much was the garage bill?", "What did Gus say?", "Who can drive, Al?", "Did Jean-Luc call?"):
            assert retrieval.respelled(ls.lexicon, q) == q, q


def test_a_name_spelled_by_ear_with_another_first_letter_is_respelled(chats: Settings) -> None:
    """"George" for the Jorge memory writes, "Philip" for Filip: the near spelling was looked for
    only among words of the same first letter, so neither was found, and the question about
    George's defence answered with Kate's shorter message about hers. Words whose first letters
    sound alike (g / j, c / k / q, s / z, f / v, ph / f) are compared now; the consonant skeleton
    must still be the same."""
    with Searcher(chats) as s:
        idx = s._current()
        assert retrieval.near_spelling(idx, "george") == "jorg"  # Jorge's stem, as the keyword side reads it
        assert retrieval.near_spelling(idx, "philip") == "filip"
    paths = _asked(chats, "When is George's thesis defence?", "When is jorg's thesis defence?")
    assert paths[:1] == ["sessions/jorge-1.jsonl"], paths
    assert _asked(chats, "Why is the kayak trip with Philip off?", "Why is the kayak trip with filip off?")[:1] == \
        ["sessions/filip-1.jsonl"]


def test_a_nickname_typed_in_lower_case_is_searched_as_the_name_memory_writes(chats: Settings) -> None:
    """A question typed all in lower case ("what did bob say about the boat?") left "bob" as typed:
    case was the only evidence of a name, and "bob" is a word of the model's vocabulary, so the
    keyword side found nothing (twenty-seventh session's leftover). Memory never writes "bob" and
    writes Robert, the table's one form of it, beside "boat": it is searched as "robert". A word
    memory writes ("bill"), a form memory writes beside none of the question's other words, a
    word with no form memory names, and a word not asked about as a person stay as typed."""
    paths = _asked(chats, "what did bob say about the boat?", "what did robert say about the boat?")
    assert paths[:1] == ["sessions/robert-1.jsonl"], paths
    with Searcher(chats) as s:
        idx = s._current()
        assert retrieval.respelled(idx, "sue said what about the dentist?") == "susan said what about the dentist?"
        assert retrieval.respelled(idx, "how is bob's boat?") == "how is robert's boat?"
        # the subject of a question, after an auxiliary: "did katherine climb", "did kathryn twist"
        # (the chat sets' questions lower-cased) were left as typed by the talk-word rule alone
        assert retrieval.respelled(idx, "did bob sand the boat?") == "did robert sand the boat?"
        assert retrieval.respelled(idx, "when did sue and ben see the dentist?") == \
            "when did susan and ben see the dentist?"
        # only as a person asked about (a word of the talk after it, or the possessive): the first
        # form of the rule read everyday words the table lists as names beside the question's
        # other words ("rob the boat" -> Robert, "sue the dentist" -> Susan; an audit found "rich in
        # iron" -> Richard, "to be frank" -> Francis)
        assert retrieval.respelled(idx, "how do I rob the boat?") == "how do I rob the boat?"
        assert retrieval.respelled(idx, "should we sue the dentist?") == "should we sue the dentist?"
        assert retrieval.respelled(idx, "can sue the dentist?") == "can sue the dentist?"  # a verb: "the" follows
        assert retrieval.respelled(idx, "was sue seeing the dentist?") == "was sue seeing the dentist?"  # not after "was"
        assert retrieval.respelled(idx, "bob?") == "bob?"
        assert retrieval.respelled(idx, "how much was the garage bill?") == "how much was the garage bill?"
        assert retrieval.respelled(idx, "sue the landlord?") == "sue the landlord?"  # Susan is never beside it
        assert retrieval.respelled(idx, "who can drive, al?") == "who can drive, al?"  # Albert or Alfred
        assert retrieval.respelled(idx, "what did gus say?") == "what did gus say?"  # August is a month
        # the subject's verb, when the word after the name is not a stop word: a common verb, or a
        # word followed by an object's first word or by nothing (the N1 hole of docs/reliability.md: "does
        # ginger tea help?" searched Virginia, whom memory writes beside "tea")
        assert retrieval.respelled(idx, "did bob buy paint for the boat?") == "did robert buy paint for the boat?"
        assert retrieval.respelled(idx, "did bob refinance the boat?") == "did robert refinance the boat?"
        assert retrieval.respelled(idx, "when did ginny drink tea?") == "when did virginia drink tea?"
        assert retrieval.respelled(idx, "does ginger tea help?") == "does ginger tea help?"
        assert retrieval.respelled(idx, "does ginger tea help a sore throat?") == "does ginger tea help a sore throat?"


def test_names_memory_writes_with_accents_or_a_final_y_are_names(tmp_path: Path) -> None:
    """The audit of the twenty-eighth session: memory writing "José" or "Harry" never counted them
    as names, because the check looked for the plain, accent-free term ("jose") and for the
    porter stem ("harri") in the text. So "Jsoe said what about the heating?" and "Hary said what
    about the boiler?" (a sentence's first word, respelled only to a name memory writes) stayed as
    typed, while "Muhhamed" was respelled."""
    ws = tmp_path / "ws"
    (ws / "sessions").mkdir(parents=True)
    _session(ws / "sessions" / "a.jsonl", "2026-03-01", [
        ("José", "the heating is off again in the flat"), ("Ben", "José call the landlord"),
        ("Harry", "the boiler is making that noise"), ("Ben", "Harry did you bleed it"),
    ])
    _session(ws / "sessions" / "b.jsonl", "2026-03-02", [("José", "fixed the heating"), ("Harry", "boiler fine now")])
    _session(ws / "sessions" / "c.jsonl", "2026-03-03", [("Ben", "the heating bill is high"), ("Ben", "the boiler too")])
    s = load_settings(None, {"workspace": str(ws), "provider": "none", "sources": ["sessions"]})
    run_index(s)
    with Searcher(s) as searcher:
        idx = searcher._current()
        assert retrieval.name_in_memory(idx, "jose") and retrieval.name_in_memory(idx, "harri")
        assert retrieval.respelled(idx, "Jsoe said what about the heating?").startswith("jose ")
        assert retrieval.respelled(idx, "Hary said what about the boiler?") .startswith("harr")
