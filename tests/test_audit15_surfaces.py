"""The newest surfaces again (the fifteenth session's outside audit, docs/reliability.md "The newest
surfaces again"): N1 a secret labelled further up its section, N2 secrets typed into a query, N3
numbers the memory store's duplicate check read as the same. Each test fails on the code before
its fix. Real SQLite, the real openai SDK against the fake OpenAI server, the real local model."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from memory_core.config import load_settings
from memory_core.index.pipeline import run_index
from memory_core.notes.memory_store import MemoryStore, same_fact
from memory_core.notes.write import append_note, write_memory
from memory_core.query.search import Searcher
from memory_core.sources.redact import redact, redact_lines
from tests.conftest import openai_settings
from tests.test_notes_attack import _chunk_texts

AWS = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
LISTED = f"AWS credentials for the deploy bot\n- key id: AKIAIOSFODNN7EXAMPLE\n- {AWS}"


# -- N1: a secret whose label is two or more lines up --------------------------------------------

@pytest.mark.parametrize("text", [
    LISTED,                                                       # the key id line between
    f"AWS credentials for the deploy bot\n\n{AWS}",               # a blank line between
    f"## AWS\n\nthe deploy bot signs in with\n{AWS}",             # the section's heading names it
    f"# Ops\n\nAWS, for the deploy bot:\n- region eu-west-1\n- id AKIAIOSFODNN7EXAMPLE\n- {AWS}",
])
def test_n1_a_secret_labelled_further_up_its_section_is_masked_in_a_note_as_in_a_message(text: str) -> None:
    assert AWS not in redact(text)  # a transcript message is read whole
    out = redact_lines(text)
    assert AWS not in out and out.count("\n") == text.count("\n"), out


def test_n1_a_section_is_the_context_a_label_reaches() -> None:
    # the heading of another section does not reach it: a note's sections are separate contexts
    text = f"# Build\n\nthe artifact digest\n{AWS}\nis pinned\n\n## AWS\n\nnothing here"
    assert AWS in redact_lines(text)


def test_n1_the_write_tool_and_the_store_mask_it_on_disk_in_the_index_and_in_the_store(tmp_path: Path) -> None:
    from memory_core.embeddings.local import local_model_available

    ws = tmp_path / "ws"
    ws.mkdir()
    settings = load_settings(None, {"workspace": str(ws), "provider": "none"})
    res = write_memory(settings, LISTED, "MEMORY.md")
    assert res.redacted
    assert AWS not in (ws / "MEMORY.md").read_text()
    assert "AKIAIOSFODNN7EXAMPLE" not in (ws / "MEMORY.md").read_text()
    assert AWS not in _chunk_texts(settings.index_file)
    # across two writes: the label written first, the key in a later write to the same note
    append_note(settings, "AWS credentials for the backup job\n- key id: AKIAIOSFODNN7EXAMPLF", "memory/ops.md")
    append_note(settings, f"- {AWS}", "memory/ops.md")
    assert AWS not in (ws / "memory" / "ops.md").read_text()
    if not local_model_available():
        pytest.skip("the local model is not installed")
    with MemoryStore(load_settings(None, {"workspace": str(ws), "provider": "local"})) as store:
        got = store.store(LISTED, category="fact")
        assert got.redacted and AWS not in got.memory.text


# -- N2: a secret typed into a query ---------------------------------------------------------------

def test_n2_a_query_is_redacted_before_a_hosted_provider_embeds_it(workspace: Path, openai_fake: Any) -> None:
    settings = openai_settings(workspace, openai_fake)
    assert settings.redact == "all"  # a hosted provider: what leaves the machine is redacted
    run_index(settings)
    token = "ghp_" + "abcdefghijklmnopqrstuvwxyz0123456789"
    before = len(openai_fake.input_texts)
    with Searcher(settings) as s:
        s.search(f"is my github token {token} still in memory?")
        s.search("the wifi password: hunter2hunter2")
    sent = openai_fake.input_texts[before:]
    assert len(sent) == 2, sent  # both were embedded, masked
    assert not any(token in t or "hunter2hunter2" in t for t in sent), sent
    assert "is my github token" in sent[0]
    # the memory store's recall too
    with MemoryStore(settings) as store:
        store.store("The deploy bot uses the ops account.", category="fact")
        n = len(openai_fake.input_texts)
        store.recall(f"where is {token} used?")
        assert openai_fake.input_texts[n:] and not any(token in t for t in openai_fake.input_texts[n:])


def test_n2_with_a_local_model_the_query_is_embedded_as_typed() -> None:
    from memory_core.sources.redact import query_for_provider

    q = "the wifi password: hunter2hunter2"
    assert query_for_provider(q, "sessions") == q  # it never leaves the machine
    assert "hunter2hunter2" not in query_for_provider(q, "all")


# -- N3: numbers the duplicate check read as the same --------------------------------------------

DIFFERENT_NUMBERS = [
    ("Give the patient 1,5 mg of lorazepam at night.", "Give the patient 15 mg of lorazepam at night."),
    ("The freezer must stay at -18 °C.", "The freezer must stay at 18 °C."),
    ("The account balance is -2400 EUR.", "The account balance is 2400 EUR."),
    ("Our timezone offset is UTC-5.", "Our timezone offset is UTC+5."),
    ("Version 1,10 of the API is deprecated.", "Version 110 of the API is deprecated."),
    ("The rack draws 2,5 kW at peak.", "The rack draws 25 kW at peak."),
    ("The freezer must stay at \u221218 °C.", "The freezer must stay at 18 °C."),
]


def test_n3_decimal_commas_and_signs_are_part_of_the_number() -> None:
    for a, b in DIFFERENT_NUMBERS:
        assert not same_fact(a, b), (a, b)
    # the same number written otherwise is still the same fact
    assert same_fact("The budget is 2,400 EUR.", "The budget is 2400 EUR")
    assert same_fact("Our offset is UTC+5.", "our offset is UTC 5")
    assert same_fact("It froze at \u22123 degrees", "It froze at -3 degrees")
    assert same_fact("We met on 2026-03-04.", "we met on 2026-03-04")


def test_n3_a_stored_dose_is_not_replaced_by_another(tmp_path: Path) -> None:
    from memory_core.embeddings.local import local_model_available

    if not local_model_available():
        pytest.skip("the local model is not installed")
    with MemoryStore(load_settings(None, {"workspace": str(tmp_path), "provider": "local"})) as store:
        for a, b in DIFFERENT_NUMBERS[:4]:
            first = store.store(a, category="fact")
            second = store.store(b, category="fact")
            assert second.action == "created" and second.memory.id != first.memory.id, (a, b, second)
        assert {m.text for m in store.list()} == {t for pair in DIFFERENT_NUMBERS[:4] for t in pair}


# -- N7: a reader's lock dropped by another thread's check of the index file ------------------------

def test_n7_a_search_in_progress_keeps_its_lock_while_another_checks_the_index(tmp_path: Path) -> None:
    """POSIX locks belong to the process: the header read of check_index_target (every new reader,
    every search's freshness probe) closed a descriptor of the index file and so dropped the SHARED
    lock of another thread's read transaction; a writer in another process then committed under
    that reader instead of waiting (an in-place update waits for readers)."""
    import subprocess
    import sys

    from memory_core.storage.store import connect_reader, probe_index

    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    (ws / "MEMORY.md").write_text("# Memory\n\nThe walrus budget is 9,100 EUR.\n")
    settings = load_settings(None, {"workspace": str(ws), "provider": "none"})
    run_index(settings)
    reader = connect_reader(settings.index_file)
    try:
        reader.execute("BEGIN")
        assert reader.execute("SELECT count(*) FROM chunks").fetchone()[0] == 1  # a search mid-read
        # meanwhile, in this process: a freshness probe and a new reader, as concurrent searches do
        assert probe_index(settings.index_file)[1] is None
        connect_reader(settings.index_file).close()
        write = ("import apsw, sys\nc = apsw.Connection(sys.argv[1])\nc.set_busy_timeout(0)\ntry:\n"
                 "    c.execute('BEGIN IMMEDIATE'); c.execute('UPDATE meta SET value = value'); c.execute('COMMIT')\n"
                 "    print('committed')\nexcept apsw.BusyError:\n    print('busy')\n")
        got = subprocess.run([sys.executable, "-c", write, str(settings.index_file)], capture_output=True,
                             text=True, timeout=60)
        assert got.stdout.strip() == "busy", got  # before: "committed" under the live reader
        reader.execute("COMMIT")
    finally:
        reader.close()
