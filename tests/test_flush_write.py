"""The memory flush before compaction and ``memory_write`` (issue 23 part 2): the flush check on
a transcript crossing the threshold, once per compaction cycle; ``memory_write`` through the
official MCP client followed by a search that finds the text; bad input refused with nothing
lost and the live index untouched."""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import threading
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from memory_core.apps.cli import main
from memory_core.config import load_settings
from memory_core.errors import PathError, UsageError
from memory_core.index.pipeline import run_index
from memory_core.notes.flush import check_flush, estimate_transcript
from memory_core.notes.write import append_note
from tests.test_mcp import _run, _stdio, _text


def _today() -> str:
    """Today's daily note's day, read when asked (a module constant went stale past midnight)."""
    return _dt.date.today().isoformat()


def _msg(role: str, text: str) -> str:
    content: Any = text if role == "user" else [{"type": "text", "text": text}]
    return json.dumps({"type": "message", "message": {"role": role, "content": content}}) + "\n"


def _config(ws: Path, tmp_path: Path, extra: str = "") -> Path:
    cfg = tmp_path / f"flush-{hashlib.sha256(extra.encode()).hexdigest()[:8]}.toml"
    cfg.write_text(f'workspace = "{ws}"\nprovider = "none"\n[compaction]\ncontext_window = 3000\n'
                   f'reserve_tokens_floor = 1000\n{extra}[compaction.memory_flush]\nsoft_threshold_tokens = 500\n'
                   'prompt = "Write lasting notes to memory/YYYY-MM-DD.md; reply NO_REPLY if nothing."\n')
    return cfg


def _flush(capsys: pytest.CaptureFixture[str], cfg: Path, *args: str) -> dict[str, Any]:
    assert main(["flush", "-c", str(cfg), *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_flush_check_on_a_transcript_crossing_the_threshold_once_per_cycle(
        workspace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = _config(workspace, tmp_path)  # threshold 3000 - 1000 - 500 = 1500 tokens (6000 characters)
    tr = tmp_path / "s1.jsonl"
    tr.write_text(json.dumps({"type": "session-meta"}) + "\n" + "not json\n")
    check = ["s1", "--transcript", str(tr), "--record"]
    for _ in range(10):  # 10 x 2 x 200 chars = 4000 chars, 1000 tokens: below
        tr.open("a").write(_msg("user", "u" * 200) + _msg("assistant", "a" * 200))
    first = _flush(capsys, cfg, *check)
    assert (first["due"], first["tokens"], first["threshold"], first["cycle"]) == (False, 1000, 1500, 0)
    assert "below the flush threshold of 1500" in first["reason"] and not Path(first["ledger"]).exists()

    for _ in range(6):  # +2400 chars: 1600 tokens, past the threshold
        tr.open("a").write(_msg("user", "u" * 200) + _msg("assistant", "a" * 200))
    due = _flush(capsys, cfg, *check)
    assert due["due"] and due["recorded"] and due["tokens"] == 1600 and due["cycle"] == 0
    assert due["system_prompt"] == "Session nearing compaction. Store durable memories now."
    assert due["prompt"] == f"Write lasting notes to memory/{_today()}.md; reply NO_REPLY if nothing."
    ledger = json.loads(Path(due["ledger"]).read_text())
    assert ledger["sessions"]["s1"]["cycle"] == 0 and ledger["sessions"]["s1"]["tokens"] == 1600

    # once per cycle: the session keeps growing, no second flush
    tr.open("a").write(_msg("user", "u" * 2000))
    again = _flush(capsys, cfg, *check)
    assert not again["due"] and "already flushed in compaction cycle 0" in again["reason"]
    assert _flush(capsys, cfg, "s2", "--tokens", "1600")["due"]  # another session has its own cycle

    # compaction: a new cycle whose context is the summary and what follows
    tr.open("a").write(json.dumps({"type": "compaction", "summary": "s" * 800}) + "\n")
    est = estimate_transcript(tr)
    assert (est.cycle, est.tokens, est.messages) == (1, 200, 0)
    assert not _flush(capsys, cfg, *check)["due"]
    for _ in range(10):  # 200 + 1500 tokens
        tr.open("a").write(_msg("user", "u" * 300) + _msg("assistant", "a" * 300))
    second = _flush(capsys, cfg, *check)
    assert second["due"] and second["cycle"] == 1 and second["recorded"]
    assert not _flush(capsys, cfg, *check)["due"]

    # the text form says the same
    assert main(["flush", "-c", str(cfg), "s3", "--tokens", "99"]) == 0
    assert capsys.readouterr().out.startswith("not due: 99 tokens, below the flush threshold of 1500")


def test_a_flat_transcript_counts_as_the_indexer_reads_it(workspace: Path, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """OpenAI-style records (``{"role", "content"}``, no ``message`` object) are messages to the
    indexer, and so to the flush's estimate: a long flat session counted 0 tokens and was never due
    (the thirty-eighth session's audit). A transcript of lines that are not JSON says so."""
    nested, flat = tmp_path / "nested.jsonl", tmp_path / "flat.jsonl"
    for i in range(16):  # about 1,650 tokens: past the threshold of 1,500
        role, text = ("user" if i % 2 == 0 else "assistant"), f"turn {i} " + "w" * 400
        nested.open("a").write(_msg(role, text))
        flat.open("a").write(json.dumps({"role": role, "content": text}) + "\n")
    a, b = estimate_transcript(nested), estimate_transcript(flat)
    assert (b.tokens, b.messages) == (a.tokens, a.messages) and b.tokens > 1500 and b.messages == 16
    cfg = _config(workspace, tmp_path)
    assert _flush(capsys, cfg, "flat", "--transcript", str(flat))["due"]
    garbage = tmp_path / "garbage.jsonl"
    garbage.write_bytes(b"\x00\x01 not json\n{broken\n\n")
    said = _flush(capsys, cfg, "junk", "--transcript", str(garbage))
    assert not said["due"] and said["reason"].endswith("(2 line(s) of the transcript are not JSON and were skipped)")


def test_a_cycle_is_claimed_once_when_many_ask_at_once(workspace: Path, tmp_path: Path) -> None:
    settings = load_settings(_config(workspace, tmp_path))
    results: list[Any] = []

    def claim() -> None:
        results.append(check_flush(settings, "busy", tokens=2000, cycle=3, record=True))

    threads = [threading.Thread(target=claim) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(r.due for r in results) == 1 and sum(r.recorded for r in results) == 1


def test_no_flush_when_off_or_the_workspace_is_read_only(workspace: Path, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    ro = _config(workspace, tmp_path, 'workspace_access = "ro"\n')
    res = _flush(capsys, ro, "s1", "--tokens", "2999")
    assert not res["due"] and "skipped: the workspace is read-only" in res["reason"]
    off = tmp_path / "off.toml"
    off.write_text(f'workspace = "{workspace}"\n[compaction.memory_flush]\nenabled = false\n')
    res = _flush(capsys, off, "s1", "--tokens", "10000000")
    assert not res["due"] and "memory flush is off" in res["reason"]
    # bad input: one line, exit 2
    assert main(["flush", "-c", str(ro), "s1", "--transcript", str(tmp_path / "nope.jsonl")]) == 2
    err = capsys.readouterr().err
    assert "cannot read transcript" in err and err.count("\n") == 1


def _index_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_memory_write_over_mcp_then_search_finds_it(workspace: Path, tmp_path: Path) -> None:
    cfg = _config(workspace, tmp_path)
    settings = load_settings(cfg)
    run_index(settings)
    daily = workspace / "memory" / f"{_today()}.md"
    errlog = open(tmp_path / "server.err", "w")  # noqa: SIM115 - closed below
    seen: dict[str, Any] = {}

    async def session() -> None:
        async with Client(_stdio(workspace, errlog, "-c", str(cfg))) as client:
            tools = {t.name: t for t in (await client.list_tools()).tools}
            assert tools["memory_write"].annotations.read_only_hint is False
            assert "memory_search finds it" in tools["memory_write"].description

            w = await client.call_tool("memory_write", {"text": "Decision: the wombat budget review moves to"
                                                                 " Thursdays at 10:00.\npassword: hunter2hunter2"})
            assert not w.is_error, _text(w)
            res = w.structured_content
            assert res["path"] == f"memory/{_today()}.md" and res["indexed"] and res["redacted"]
            assert res["citation"] == f"memory/{_today()}.md#L{res['start_line']}-L{res['end_line']}"
            found = await client.call_tool("memory_search", {"query": "wombat budget review", "maxResults": 3})
            hits = found.structured_content["results"]
            assert hits and hits[0]["path"] == res["path"] and "wombat budget review" in hits[0]["snippet"]
            got = await client.call_tool("memory_get", {"path": res["citation"]})
            assert got.structured_content["text"].startswith("Decision: the wombat budget review")

            # a second note is appended below the first: nothing lost, and found too
            w2 = await client.call_tool("memory_write", {"text": "The quetzal vendor contract ends in March."})
            res2 = w2.structured_content
            assert res2["start_line"] == res["end_line"] + 2  # after one blank line
            f2 = await client.call_tool("memory_search", {"query": "quetzal vendor contract", "maxResults": 1})
            assert f2.structured_content["results"][0]["path"] == res["path"]
            # MEMORY.md, the curated file
            w3 = await client.call_tool("memory_write", {"text": "Dana prefers aisle seats.", "path": "MEMORY.md"})
            assert not w3.is_error and w3.structured_content["path"] == "MEMORY.md"
            f3 = await client.call_tool("memory_search", {"query": "Dana aisle seats", "maxResults": 1})
            assert f3.structured_content["results"][0]["path"] == "MEMORY.md"

            # refused: paths outside the memory files; the note and the index stay as they were
            before_note, before_index = daily.read_bytes(), _index_digest(settings.index_file)
            for bad in ["../outside.md", "/etc/motd.md", "notes.txt", "memory/../../x.md", "memory/.hidden.md",
                        "sessions/a.md", "memory/x.txt"]:
                r = await client.call_tool("memory_write", {"text": "nope", "path": bad})
                assert r.is_error and _text(r).startswith("memory_write: refusing to write"), (bad, _text(r))
                assert "memory_search result" not in _text(r)  # a read's hint: a write has no search to take it from
            r = await client.call_tool("memory_write", {"text": ""})
            assert r.is_error and "text" in _text(r)
            assert daily.read_bytes() == before_note and _index_digest(settings.index_file) == before_index
            assert not (workspace.parent / "outside.md").exists()

            # the flush prompt carries the configured prompts, today's date filled in
            prompts = (await client.list_prompts()).prompts
            assert [p.name for p in prompts] == ["memory_flush"]
            p = await client.get_prompt("memory_flush")
            seen["prompt"] = [(m.role, m.content.text) for m in p.messages]
            seen["meta"] = p.meta

    try:
        _run(session)
    finally:
        errlog.close()
    # one user turn (an MCP prompt has no system role): the system prompt's text first; _meta holds both apart
    assert seen["prompt"] == [("user", "Session nearing compaction. Store durable memories now.\n\n"
                                       f"Write lasting notes to memory/{_today()}.md; reply NO_REPLY if nothing.")]
    assert {k: seen["meta"][k] for k in ("systemPrompt", "prompt")} == {"systemPrompt": "Session nearing compaction. Store durable memories now.",
                            "prompt": f"Write lasting notes to memory/{_today()}.md; reply NO_REPLY if nothing."}
    text = daily.read_text()
    assert "hunter2hunter2" not in text and "password: ***" in text  # masked before it touched the disk
    assert text.count("wombat budget review") == 1 and "quetzal vendor contract" in text
    assert "Traceback" not in (tmp_path / "server.err").read_text()


def test_write_to_a_read_only_workspace_is_refused_and_loses_nothing(workspace: Path, tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    cfg = _config(workspace, tmp_path)
    run_index(load_settings(cfg))
    memory_md = (workspace / "MEMORY.md").read_bytes()
    ro = _config(workspace, tmp_path, 'workspace_access = "ro"\n')
    index = workspace / ".memory-core" / "index.sqlite"
    before = _index_digest(index)
    rc = main(["write", "-c", str(ro), "Remember this", "--path", "MEMORY.md"])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1
    assert "refusing to write: the workspace is read-only (compaction.workspace_access = 'ro')" in err
    assert "nothing was written" in err
    assert (workspace / "MEMORY.md").read_bytes() == memory_md and _index_digest(index) == before
    assert not (workspace / "memory" / f"{_today()}.md").exists()
    # an unwritable folder (not as root: root writes anyway)
    if os.geteuid() != 0:
        os.chmod(workspace / "memory", 0o555)
        try:
            rc = main(["write", "-c", str(cfg), "Remember this", "--path", "memory/new.md"])
            assert rc == 2 and "not writable" in capsys.readouterr().err
        finally:
            os.chmod(workspace / "memory", 0o755)
    # through the CLI, then found by the CLI's search
    assert main(["write", "-c", str(cfg), "The ocelot sprint retro is on Friday."]) == 0
    assert capsys.readouterr().out.startswith(f"wrote memory/{_today()}.md#L1-L1; indexed")
    assert main(["search", "-c", str(cfg), "ocelot sprint retro", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["results"][0]["path"] == f"memory/{_today()}.md"


def test_writes_never_follow_symlinks_and_never_lose_each_other(workspace: Path, tmp_path: Path) -> None:
    settings = load_settings(_config(workspace, tmp_path))
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "x.md").write_text("keep\n")
    (workspace / "memory" / "linked").symlink_to(outside)
    with pytest.raises(PathError, match="symlink"):
        append_note(settings, "nope", "memory/linked/x.md")
    (workspace / "memory" / "evil.md").symlink_to(outside / "x.md")
    with pytest.raises(UsageError):
        append_note(settings, "nope", "memory/evil.md")
    assert (outside / "x.md").read_text() == "keep\n" and (workspace / "memory" / "evil.md").is_symlink()

    # 8 writers x 15 notes at once into one file: every note is there, whole
    def writer(n: int) -> None:
        for i in range(15):
            append_note(settings, f"note {n}-{i} " + "z" * 50, "memory/busy.md")

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    lines = [ln for ln in (workspace / "memory" / "busy.md").read_text().split("\n") if ln]
    assert sorted(lines) == sorted(f"note {n}-{i} " + "z" * 50 for n in range(8) for i in range(15))
    assert not [p for p in (workspace / "memory").iterdir() if ".write-" in p.name]  # no temp file left


def test_concurrent_writes_each_say_indexed_when_the_index_holds_them(workspace: Path) -> None:
    """Several processes write to one daily note at once, each with its own index run. A write
    was judged by the note's size after the run, which already held later writers' text: 11 of
    30 answered `indexed: false` though the index held them (helper audit, seventeenth session);
    an agent told so may write the note twice. Each is now judged by its own lines."""
    import subprocess
    import sys

    from memory_core.query.search import Searcher
    from tests.conftest import ROOT

    env = dict(os.environ, PYTHONPATH=str(ROOT), MEMORY_CORE_PROVIDER="none")
    script = ("import json, sys\nfrom memory_core.apps.cli import main\n"
              "for i in range(4):\n"
              "    main(['write', '-w', sys.argv[1], '--json', f'entry p{sys.argv[2]}m{i}"
              " about the okapi feeding rota'])\n")
    procs = [subprocess.Popen([sys.executable, "-c", script, str(workspace), str(p)], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for p in range(5)]
    answers = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
        dec = json.JSONDecoder()
        pos = 0
        while pos < len(out.strip()):
            obj, end = dec.raw_decode(out, pos)
            answers.append(obj)
            pos = end
            while pos < len(out) and out[pos].isspace():
                pos += 1
    assert len(answers) == 20
    assert all(a["indexed"] for a in answers), [a for a in answers if not a["indexed"]]
    note = workspace / answers[0]["path"]
    text = note.read_text()
    s = load_settings(None, {"workspace": str(workspace), "provider": "none"})
    with Searcher(s) as searcher:
        indexed = "\n".join(r[0] for r in searcher._current().conn.execute(
            "SELECT text FROM chunks WHERE path = ?", (answers[0]["path"],)))
    for p in range(5):
        for i in range(4):
            assert f"entry p{p}m{i} " in text and f"entry p{p}m{i} " in indexed


def test_a_write_is_indexed_even_when_another_writer_appends_after_its_run(workspace: Path) -> None:
    """The race above made certain: this write's index run ends, then another writer appends to
    the same note before the write checks. The index holds this write: `indexed` is true. A
    write whose run did not index it still says false."""
    from memory_core.index.indexer import Indexer
    from memory_core.notes.write import write_memory

    s = load_settings(None, {"workspace": str(workspace), "provider": "none"})
    day = _dt.date(2026, 11, 30)

    def run_then_another_writer() -> None:
        with Indexer(s) as indexer:
            indexer.run()
        append_note(s, "a later writer's line about the tapir", today=day)

    res = write_memory(s, "the okapi feeding rota moves to Tuesdays", runner=run_then_another_writer, today=day)
    assert res.indexed, res.note
    skipped = write_memory(s, "the zebra rota is unchanged", runner=lambda: None, today=day)
    assert not skipped.indexed and "does not hold it" in skipped.note
