"""A query provider that is down (issue 39: walk item and M1).

Before: every search of a provider that answers 500 (or refuses) retried its query embedding up
to ``remote.max_attempts`` (6) within the reader's deadline, ~10 s per CLI search, and a
long-lived reader paid that again on every query. Now a reader tries a query embedding at most
twice, remembers the outage (in process, and beside the index for the next CLI searches),
answers keyword-only at once while it lasts, says so, and tries again after a backoff; a search
does not wait on an embedding another search has been waiting on for a while.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from memory_core.apps.cli import main
from memory_core.index.pipeline import run_index
from memory_core.query.search import Searcher
from memory_core.storage import indexmeta
from tests.conftest import openai_settings


@pytest.fixture(autouse=True)
def _fresh_memory() -> Any:
    indexmeta.ProviderOutages.forget()
    yield
    indexmeta.ProviderOutages.forget()


def test_a_long_lived_reader_remembers_the_outage_then_tries_again(workspace: Path, openai_fake: Any,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    s = openai_settings(workspace, openai_fake)
    run_index(s)
    openai_fake.reset_log()
    openai_fake.fail_next(None, status=500)  # down until cleared
    with Searcher(s) as se:
        first = se.search_response("replica lag alert").to_dict()
        tried = openai_fake.embed_requests
        assert tried == indexmeta.READER_ATTEMPTS  # not remote.max_attempts (6)
        assert first["results"] and "keyword-only" in first["note"]
        second = se.search_response("postgres replication").to_dict()
        assert openai_fake.embed_requests == tried  # answered at once: the provider was not asked
        assert second["results"] and "was down" in second["note"] and "not tried again until" in second["note"]
        assert se.status().note.count("keyword-only") == 1
        # the backoff has passed (made 0 here): one query tries again, and the provider is back
        openai_fake.clear_faults()
        monkeypatch.setattr(indexmeta, "OUTAGE_FIRST_S", 0.0)
        for k, (_, n, why) in list(indexmeta.ProviderOutages._down.items()):
            indexmeta.ProviderOutages._down[k] = (0.0, n, why)
        back = se.search_response("replica lag alert").to_dict()
        assert openai_fake.embed_requests == tried + 1
        assert back["results"] and not back.get("note") and any(r["vector_score"] > 0 for r in back["results"])


def test_cli_searches_of_a_provider_that_is_down_wait_once(workspace: Path, openai_fake: Any,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    """The first CLI search tries the provider at most twice; the next ones (new processes: the
    memory is the file beside the index, simulated here by forgetting the in-process one) answer
    keyword-only without asking it."""
    s = openai_settings(workspace, openai_fake)
    run_index(s)
    cfg = workspace / "mc.toml"
    cfg.write_text(f'provider = "openai"\nmodel = "text-embedding-3-small"\n[remote]\nbase_url = "{openai_fake.base_url}"\n'
                   'dimensions = 64\nbackoff_initial_s = 0.01\nbackoff_max_s = 0.05\n')
    openai_fake.reset_log()
    openai_fake.fail_next(None, status=500)
    argv = ["search", "-c", str(cfg), "-w", str(workspace), "replica lag alert"]
    env = {"OPENAI_API_KEY": "sk-test-key-0123456789"}
    with pytest.MonkeyPatch.context() as mp:
        for k, v in env.items():
            mp.setenv(k, v)
        assert main(argv) == 0
        assert openai_fake.embed_requests == indexmeta.READER_ATTEMPTS
        assert "keyword-only" in capsys.readouterr().err
        indexmeta.ProviderOutages.forget()  # a new process
        assert main(argv) == 0
        assert openai_fake.embed_requests == indexmeta.READER_ATTEMPTS
        err = capsys.readouterr().err
        assert "was down" in err and "keyword-only" in err
    marker = s.index_file.with_name(s.index_file.name + ".provider-outage.json")
    assert marker.stat().st_mode & 0o077 == 0
    assert "sk-test" not in marker.read_text()


def test_a_search_does_not_wait_on_a_stalled_embedding(workspace: Path, openai_fake: Any,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """While one search waits on a stalled provider, another searcher of the process answers
    keyword-only without sending its own request (M1: the MCP server's searchers stay free)."""
    s = openai_settings(workspace, openai_fake)
    run_index(s)
    openai_fake.reset_log()
    openai_fake.hang_next(1, seconds=5.0)
    stalled: dict[str, Any] = {}

    def slow() -> None:
        with Searcher(s) as se:
            stalled["res"] = se.search_response("replica lag alert").to_dict()

    t = threading.Thread(target=slow)
    t.start()
    try:
        while openai_fake.embed_requests < 1 and t.is_alive():
            threading.Event().wait(0.01)
        monkeypatch.setattr(indexmeta, "STALL_S", 0.0)  # the first has waited "long enough"
        with Searcher(s) as other:
            res = other.search_response("postgres replication").to_dict()
        assert res["results"] and "has not answered another query" in res["note"]
        assert openai_fake.embed_requests == 1  # no request of its own
    finally:
        t.join()
    assert "res" in stalled


@pytest.mark.parametrize("kind", ["zero", "nan"])
def test_one_bad_answer_is_not_an_outage(workspace: Path, openai_fake: Any, kind: str) -> None:
    """A provider that answered one query with a vector that cannot be used (all zeros, NaN) is
    not down: that query is answered keyword-only, the next one is embedded. Before, the bad
    answer was remembered as an outage and every reader answered keyword-only for 30 s (then 60,
    120, ... for each bad answer in a row)."""
    s = openai_settings(workspace, openai_fake)
    run_index(s)
    openai_fake.reset_log()
    openai_fake.bad_payload_next(kind)
    with Searcher(s) as se:
        first = se.search_response("replica lag alert").to_dict()
        assert first["results"] and "keyword-only" in first["note"]
        asked = openai_fake.embed_requests
        second = se.search_response("postgres replication").to_dict()
        assert openai_fake.embed_requests == asked + 1  # asked again at once
        assert not second.get("note") and any(r["vector_score"] > 0 for r in second["results"])
    assert not indexmeta.ProviderOutages._down
