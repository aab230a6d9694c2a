"""Chat transcripts as a memory source, end to end: redaction before indexing, delta thresholds,
citations to JSONL lines, malformed lines, the sources filter."""

from __future__ import annotations

import json
import logging

from memory_core.config import load_settings
from memory_core.index.pipeline import run_index
from memory_core.query.search import Searcher
from memory_core.sources.freshness import dirty_state
from tests.conftest import openai_settings

SECRETS = [
    "sk-fake0123456789abcdefghijklmnop",
    "hunter2hunter2",
    "fakeTokenAbcdefghijklmnop123",
    "ghp_FAKE0123456789abcdefghijklmnopqrstuv",
]
SECRET_FILE = "2026-10-21-ingest-502-debug.jsonl"


def _message(role: str, text: str) -> str:
    return json.dumps({"type": "message", "message": {"role": role, "content": text}})


def test_secrets_never_reach_provider_index_cache_or_logs(workspace, openai_fake, caplog):
    caplog.set_level(logging.DEBUG)
    raw = (workspace / "sessions" / SECRET_FILE).read_text()
    assert all(s in raw for s in SECRETS)  # the fixture really carries them
    s = openai_settings(workspace, openai_fake, sources=["memory", "sessions"])
    summary = run_index(s)
    assert summary.swapped
    sent = "\n".join(r.raw.decode("utf-8", "replace") for r in openai_fake.requests)
    assert "sessions" in {r[0] for r in []} or "Assistant:" in sent or "User:" in sent
    blobs = {"requests": sent, "index": s.index_file.read_bytes().decode("utf-8", "replace"),
             "cache": s.cache_file.read_bytes().decode("utf-8", "replace"), "logs": caplog.text}
    wal = s.cache_file.with_name(s.cache_file.name + "-wal")
    if wal.exists():
        blobs["cache-wal"] = wal.read_bytes().decode("utf-8", "replace")
    for where, text in blobs.items():
        for secret in SECRETS:
            assert secret not in text, f"{secret[:6]}… leaked into {where}"
    # get on a transcript returns the redacted JSONL lines
    with Searcher(s) as searcher:
        got = searcher.read_file(f"sessions/{SECRET_FILE}")
        assert got.lines > 10 and not any(sec in got.text for sec in SECRETS)


def test_citations_resolve_to_jsonl_lines_and_source_filter(workspace):
    s = load_settings(None, {"workspace": str(workspace), "provider": "none", "sources": ["memory", "sessions"]})
    run_index(s)
    lines = (workspace / "sessions" / "2026-11-09-lisbon-itinerary.jsonl").read_text().split("\n")
    with Searcher(s) as searcher:
        res = searcher.search("Sintra tickets", sources=["sessions"], min_score=0)
        assert res and all(r.source == "sessions" and r.path.startswith("sessions/") for r in res)
        top = next(r for r in res if r.path == "sessions/2026-11-09-lisbon-itinerary.jsonl")
        cited = "\n".join(lines[top.start_line - 1:top.end_line])
        assert "Sintra" in cited
        first = json.loads(lines[top.start_line - 1])
        assert first["type"] == "message"
        got = searcher.read_file(top.path, from_line=top.start_line, lines=top.end_line - top.start_line + 1)
        # readable messages, not JSONL: the first cited line is the first cited message, with its time
        stamp = first["timestamp"][:16].replace("T", " ")
        assert got.text.split("\n")[0] == f"[{stamp} UTC] User: " + first["message"]["content"]
        only_memory = searcher.search("Sintra tickets", sources=["memory"], min_score=0)
        assert all(r.source == "memory" for r in only_memory)


def test_malformed_lines_do_not_stop_the_run(workspace):
    sd = workspace / "sessions"
    (sd / "broken.jsonl").write_text(
        "not json at all\n\n" + _message("user", "the quokka migration plan is approved") + "\n{\"type\": \"mess\n"
        + "\x00\x01 binary junk\n" + _message("assistant", "noted: quokka plan approved") + "\n"
    )
    s = load_settings(None, {"workspace": str(workspace), "provider": "none", "sources": ["memory", "sessions"]})
    summary = run_index(s)
    assert summary.swapped
    # the lines named (twenty-second session: a helper's audit wanted them to find and fix): 1, 4, 5
    assert "sessions/broken.jsonl: 3 malformed lines (not JSON) skipped (line 1, 4, 5)" in summary.warnings, \
        summary.warnings
    with Searcher(s) as searcher:
        res = searcher.search("quokka", min_score=0)
        assert res and res[0].path == "sessions/broken.jsonl" and (res[0].start_line, res[0].end_line) == (3, 6)


def test_delta_thresholds(workspace):
    sd = workspace / "sessions"
    path = sd / "grow.jsonl"
    path.write_text("".join(_message("user", f"note {i} about the walrus project") + "\n" for i in range(5)))
    s = load_settings(None, {"workspace": str(workspace), "provider": "none", "sources": ["memory", "sessions"],
                             "sessions": {"delta_bytes": 4000, "delta_messages": 10}})
    run_index(s)
    # below both thresholds: carried over, the new line is not searchable yet
    with path.open("a") as fh:
        fh.write(_message("assistant", "the narwhal decision is final") + "\n")
    small = run_index(s)
    assert small.sessions_carried == 1 and small.files_changed == 0
    # and the run says so: a changed file kept by rule is not "nothing to do" (twentieth session's audit)
    assert small.outcome() == "unchanged: 1 transcript(s) grew below the session delta and keep their indexed rows"
    assert any(line.startswith("transcripts grown below the session delta: 1,") and "`memory-core index`" in line
               for line in small.lines())
    assert any(line.startswith("files:") and "1 grown below the session delta" in line for line in small.lines())
    with Searcher(s) as searcher:
        assert not searcher.search("narwhal", min_score=0)
    # status names it (not dirty: a trigger's run would keep it as it is)
    st = dirty_state(s)
    assert not st.dirty and st.below_delta == ["sessions/grow.jsonl"]
    # growth accumulates against the indexed size: past delta_messages it is reindexed
    with path.open("a") as fh:
        for i in range(10):
            fh.write(_message("user", f"follow up {i}") + "\n")
    big = run_index(s)
    assert big.files_changed == 1 and big.sessions_carried == 0
    with Searcher(s) as searcher:
        assert any(r.path == "sessions/grow.jsonl" for r in searcher.search("narwhal", min_score=0))
    # a new transcript is always picked up, a deleted one always dropped
    (sd / "new.jsonl").write_text(_message("user", "zebra crossing") + "\n")
    path.unlink()
    last = run_index(s)
    assert last.files_new == 1 and last.files_removed == 1


def test_a_run_asked_for_indexes_every_grown_transcript(workspace, capsys):
    """Twenty-first session's audit (a daily user): two messages appended to a transcript were not
    searchable after `memory-core index`, which said the transcript "grew below the session
    delta", and `status` said clean. The delta is for the runs triggers start on their own; a run
    someone asks for (`memory-core index`, `Memory.index()`) indexes what grew. `status` names
    the transcripts a trigger's run would keep."""
    from memory_core.api import Memory
    from memory_core.apps.cli import main

    sd = workspace / "sessions"
    path = sd / "daily.jsonl"
    path.write_text("".join(_message("user", f"note {i} about the walrus project") + "\n" for i in range(5)))
    cfg = {"workspace": str(workspace), "provider": "none", "sources": ["memory", "sessions"]}
    (workspace / "memory-core.toml").write_text('provider = "none"\nsources = ["memory", "sessions"]\n')
    assert main(["index", "-w", str(workspace), "--engine", "local", "--no-progress"]) == 0
    with path.open("a") as fh:
        fh.write(_message("assistant", "the narwhal decision is final") + "\n")
    capsys.readouterr()
    assert main(["status", "-w", str(workspace), "--json"]) == 0
    st = json.loads(capsys.readouterr().out)
    assert st["dirty"] is False and st["below_delta"] == ["sessions/daily.jsonl"] and "memory-core index" in st[
        "below_delta_note"]
    assert main(["index", "-w", str(workspace), "--engine", "local", "--no-progress"]) == 0
    assert "grew below the session delta" not in capsys.readouterr().err
    assert main(["search", "-w", str(workspace), "narwhal", "--json"]) == 0
    assert any(r["path"] == "sessions/daily.jsonl" for r in json.loads(capsys.readouterr().out)["results"])
    # the API's explicit run the same; a trigger's run (Indexer.run, as sync and watch call it) keeps the delta
    with path.open("a") as fh:
        fh.write(_message("user", "the walrus moved to the aquarium") + "\n")
    with Memory(load_settings(None, cfg), refresh=False) as memory:
        assert memory.indexer.run().sessions_carried == 1
        done = memory.index()
        assert done.sessions_carried == 0 and done.files_changed == 1
        assert any(r.path == "sessions/daily.jsonl" for r in memory.search("aquarium", min_score=0))


def test_an_edit_of_indexed_messages_reindexes_the_transcript_whatever_its_size(workspace):
    """The delta thresholds are for a transcript that grows: a message edited in place (same size,
    or a few bytes more) or one inserted near the top kept the old rows, so search showed the old
    words, cited lines that now hold other messages, and `status` called the index fresh (helper
    audit, seventeenth session). Any change of the indexed bytes now reindexes it; a pure append
    below the thresholds is still carried."""
    from memory_core.sources.freshness import dirty_state

    sd = workspace / "sessions"
    path = sd / "kayak.jsonl"
    msgs = [_message("user", "kayak rental costs 40 EUR a day"), _message("assistant", "noted the kayak price"),
            *(_message("user", f"small talk {i} about the weather") for i in range(8)),
            _message("assistant", "the tokenizer bug needs a backslash fix")]
    path.write_text("".join(m + "\n" for m in msgs))
    s = load_settings(None, {"workspace": str(workspace), "provider": "none", "sources": ["memory", "sessions"]})
    run_index(s)
    assert not dirty_state(s).dirty

    # the same size: 40 -> 65
    path.write_text(path.read_text().replace("costs 40 EUR", "costs 65 EUR"))
    assert "sessions/kayak.jsonl" in dirty_state(s).changed
    edited = run_index(s)
    assert (edited.files_changed, edited.sessions_carried) == (1, 0), edited.lines()
    with Searcher(s) as searcher:
        top = searcher.search("kayak rental", min_score=0)[0]
        assert "65 EUR" in top.snippet and "40 EUR" not in top.snippet
    assert not dirty_state(s).dirty

    # a few bytes more: one short message inserted near the top shifts every later line
    lines = path.read_text().split("\n")
    path.write_text("\n".join([lines[0], _message("user", "hi"), *lines[1:]]))
    assert "sessions/kayak.jsonl" in dirty_state(s).changed
    inserted = run_index(s)
    assert (inserted.files_changed, inserted.sessions_carried) == (1, 0), inserted.lines()
    now = path.read_text().split("\n")
    with Searcher(s) as searcher:
        hit = next(r for r in searcher.search("tokenizer backslash", min_score=0) if r.path == "sessions/kayak.jsonl")
        cited = "\n".join(now[hit.start_line - 1:hit.end_line])
        assert "backslash fix" in cited, (hit.start_line, hit.end_line)

    # only touched (same bytes, a new mtime): nothing to do, and fresh
    path.touch()
    assert not dirty_state(s).dirty
    touched = run_index(s)
    assert (touched.files_changed, touched.sessions_carried) == (0, 0)
    # a pure append below the thresholds is still carried, and the index still called fresh for it
    with path.open("a") as fh:
        fh.write(_message("user", "one more line") + "\n")
    assert not dirty_state(s).dirty
    appended = run_index(s)
    assert (appended.files_changed, appended.sessions_carried) == (0, 1)


def test_chat_logs_in_the_flat_role_content_format_are_indexed_and_cited(workspace):
    """`{"role": "user", "content": ...}` lines (OpenAI's and most SDKs' chat logs) and Responses
    items (`input_text` / `output_text` parts) were indexed as nothing, with no warning (helper
    audit, seventeenth session). They are messages now, cited by their JSONL lines; system and
    tool lines and other records are still not indexed."""
    path = workspace / "sessions" / "sdk-log.jsonl"
    records = [
        {"role": "system", "content": "you are a travel agent"},
        {"role": "user", "content": "plan the okapi safari for March", "timestamp": "2026-03-04T10:00:00Z"},
        {"role": "assistant", "content": [{"type": "output_text", "text": "The okapi safari starts on Friday"}]},
        {"type": "function_call", "name": "book", "arguments": "{}"},
        {"role": "tool", "content": "booked: okapi lodge"},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "and the tapir tour?"}]},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    s = load_settings(None, {"workspace": str(workspace), "provider": "none", "sources": ["memory", "sessions"]})
    run_index(s)
    with Searcher(s) as searcher:
        hit = next(r for r in searcher.search("okapi safari", min_score=0) if r.path == "sessions/sdk-log.jsonl")
        assert (hit.start_line, hit.end_line) == (2, 6) and "booked" not in hit.snippet
        assert hit.date and hit.date.startswith("2026-03-04")
        got = searcher.read_file("sessions/sdk-log.jsonl", from_line=2, lines=2)
        assert got.text.split("\n") == ["[2026-03-04 10:00 UTC] User: plan the okapi safari for March",
                                        "Assistant: The okapi safari starts on Friday"]
        assert any(r.path == "sessions/sdk-log.jsonl" for r in searcher.search("tapir tour", min_score=0))
        assert not any(r.path == "sessions/sdk-log.jsonl" for r in searcher.search("travel agent", min_score=0))


def test_a_messages_name_is_its_speaker_in_the_index_and_on_read_back(tmp_path):
    """A chat log that keeps who spoke in OpenAI's `name` field (`{"role": "user", "name": "Kate",
    ...}`) lost it: "What did Kate say about the ferry?" matched only "ferry", and Tom's message,
    which says it twice, came first. The name is now the message's speaker, written as a chat
    export writes it (`User: Kate: ...`), on the index and on read back; a text that already
    starts with it is not labelled twice, and a `name` that is no participant's (a `:` in it, an
    over-long one, not a string) is left out."""
    sessions = tmp_path / "sessions"
    sessions.mkdir()
    kate = [{"role": "user", "name": "Kate", "content": "the ferry to the island was cancelled, storm warning"},
            {"role": "user", "name": "Kate", "content": "Kate: told you"},
            {"role": "assistant", "name": "note: internal", "content": "checking the timetable"},
            {"role": "assistant", "name": "x" * 65, "content": "nothing else runs today"},
            {"role": "assistant", "name": 7, "content": "sorry to hear"}]
    tom = [{"role": "user", "name": "Tom", "content": "ferry ferry, the ferry again"}]
    (sessions / "kate.jsonl").write_text("".join(json.dumps(r) + "\n" for r in kate))
    (sessions / "tom.jsonl").write_text("".join(json.dumps(r) + "\n" for r in tom))
    s = load_settings(None, {"workspace": str(tmp_path), "provider": "none", "sources": ["sessions"]})
    run_index(s)
    with Searcher(s) as searcher:
        hits = searcher.search("What did Kate say about the ferry?", min_score=0)
        assert hits[0].path == "sessions/kate.jsonl"
        assert [r.path for r in searcher.search("Tom", min_score=0)] == ["sessions/tom.jsonl"]
        got = searcher.read_file("sessions/kate.jsonl", from_line=1, lines=5)
        assert got.text.split("\n") == [
            "User: Kate: the ferry to the island was cancelled, storm warning",
            "User: Kate: told you",
            "Assistant: checking the timetable",
            "Assistant: nothing else runs today",
            "Assistant: sorry to hear",
        ]
