"""The QMD backend against the real ``qmd`` CLI (BM25 mode), and its fallback to the builtin index.

qmd is installed once per test session by scripts/install-qmd.sh into pytest's cache folder;
the tests skip only when npm is absent. ``embed``, ``vsearch`` and ``query`` need GGUF models
from the Hugging Face hub, which cannot be reached here: their failure must fall back.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from memory_core.config import Settings, load_settings
from memory_core.index.pipeline import run_index
from memory_core.index.qmd import qmd_embed, qmd_update
from memory_core.query.backends import open_searcher
from memory_core.query.qmd import QmdSearcher, parse_results
from memory_core.query.search import Searcher
from memory_core.storage.qmd import QmdError, handelize, state_dir

ROOT = Path(__file__).resolve().parent.parent
ODD_NAME = "Team Notes_v2 (draft).md"
ODD_TEXT = "# Team\n\nintro line\n\nThe quokka budget for offsite planning is 4200 euros.\nlast line\n"


@pytest.fixture(scope="session")
def qmd_command(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    """The path of a real qmd, installed by scripts/install-qmd.sh once per session."""
    if shutil.which("npm") is None:
        pytest.skip("npm is not installed: qmd is an npm package and cannot be installed")
    cache = getattr(request.config, "cache", None)  # None with -p no:cacheprovider
    prefix = (os.environ.get("MEMORY_CORE_QMD_PREFIX")
              or str(cache.mkdir("qmd-tools") if cache is not None else tmp_path_factory.mktemp("qmd-tools")))
    res = subprocess.run(["bash", str(ROOT / "scripts" / "install-qmd.sh"), prefix], capture_output=True,
                         text=True, timeout=900)
    assert res.returncode == 0, f"scripts/install-qmd.sh failed:\n{res.stderr[-3000:]}"
    return res.stdout.strip().splitlines()[-1]


@pytest.fixture
def qmd_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """qmd's home (its models folder) in tmp; any model download goes to a dead proxy and fails."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    for var in ("HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy", "ALL_PROXY"):
        monkeypatch.setenv(var, "http://127.0.0.1:9")
    monkeypatch.delenv("PREFECT_API_URL", raising=False)


def qmd_settings(ws: Path, command: str, **over: Any) -> Settings:
    qmd = {"command": command, "timeout_s": 60}
    qmd.update(over.pop("qmd", {}))
    return load_settings(None, {"workspace": str(ws), "provider": "none", "backend": "qmd", "qmd": qmd, **over})


def line_of(path: Path, needle: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if needle in line)


def test_qmd_end_to_end_bm25(workspace: Path, qmd_command: str, qmd_env: None, tmp_path: Path) -> None:
    (workspace / "memory" / ODD_NAME).write_text(ODD_TEXT)
    extra = tmp_path / "extra"
    extra.mkdir()
    (extra / "Vendor_List.md").write_text("# Vendors\n\nzephyrine catering quote arrives Friday\n")
    s = qmd_settings(workspace, qmd_command, sources=["memory", "sessions"], extra_paths=[str(extra)])
    first = run_index(s)  # the builtin index, and qmd's collections beside it (one run does both)
    assert "qmd-update" in first.stage_seconds and "qmd-embed" not in first.stage_seconds  # BM25: no vectors
    assert not any("qmd" in w for w in first.warnings), first.warnings
    with open_searcher(s) as searcher:
        assert isinstance(searcher, QmdSearcher)
        res = searcher.search("quokka budget offsite")
        assert res and searcher.provider_note == ""
        top = res[0]
        # qmd calls it memory/team-notes-v2-draft.md; memory-core maps it back to the real file
        assert top.path == f"memory/{ODD_NAME}" and top.source == "memory"
        want = line_of(workspace / "memory" / ODD_NAME, "quokka budget")
        assert top.start_line <= want <= top.end_line
        assert top.citation == f"memory/{ODD_NAME}#L{top.start_line}-L{top.end_line}"
        assert "quokka budget" in top.snippet
        got = searcher.read_file(top.path, from_line=top.start_line, lines=top.end_line - top.start_line + 1)
        assert "quokka budget" in got.text
        # an extra path, and a transcript: cited by its JSONL lines
        ext = searcher.search("zephyrine catering")
        assert ext and ext[0].path == str(extra / "Vendor_List.md")
        ses = searcher.search("Rossio station umbrella", sources=["sessions"])
        assert ses and all(r.source == "sessions" for r in ses)
        jsonl = workspace / "sessions" / "2026-11-09-lisbon-itinerary.jsonl"
        assert ses[0].path == "sessions/2026-11-09-lisbon-itinerary.jsonl"
        want = line_of(jsonl, "Rossio station 7:50")
        assert ses[0].start_line <= want <= ses[0].end_line
        assert searcher.search("quokka budget", sources=["sessions"]) == []
        st = searcher.status()
    assert st.backend == "qmd" and st.qmd is not None and st.qmd.command == qmd_command
    assert st.qmd.fallback_in_use is False and st.qmd.last_search is not None and st.qmd.last_search.ok is True
    assert {c.name for c in st.qmd.collections} == {"mc-root", "mc-memory", "mc-extra-1", "mc-sessions"}
    # a change reaches qmd with the next update; a removed file leaves its results
    (workspace / "memory" / ODD_NAME).unlink()
    (workspace / "memory" / "new-note.md").write_text("# New\n\nthe marmoset invoice is overdue\n")
    run_index(s)
    with open_searcher(s) as searcher:
        assert [r.path for r in searcher.search("marmoset invoice")] == ["memory/new-note.md"]
        assert searcher.search("quokka budget offsite") == []
        assert searcher.provider_note == ""


def test_handelize_matches_qmd(workspace: Path, qmd_command: str, qmd_env: None) -> None:
    names = ["Ünïcode Tëst_file.md", "a_-b..c.md", "x+y=z (1).md", "CAPS-lock.md", "dir.with.dots/Inner File.md"]
    for i, name in enumerate(names):
        p = workspace / "memory" / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(f"# t\n\nsnorkelword{i} here\n")
    s = qmd_settings(workspace, qmd_command)
    run_index(s)
    assert qmd_update(s).ok
    with open_searcher(s) as searcher:
        for i, name in enumerate(names):
            res = searcher.search(f"snorkelword{i}")
            assert [r.path for r in res] == [f"memory/{name}"], (name, handelize(name))


def test_missing_qmd_falls_back_and_says_so(workspace: Path, qmd_env: None, tmp_path: Path) -> None:
    s = qmd_settings(workspace, str(tmp_path / "no-such-qmd"))
    run_index(s)
    run = qmd_update(s)
    assert not run.ok and run.kind == "missing"
    with open_searcher(s) as searcher:
        res = searcher.search("Lisbon hotel confirmation", min_score=0)
        with Searcher(s) as builtin:
            assert [r.citation for r in res] == [r.citation for r in builtin.search("Lisbon hotel confirmation",
                                                                                      min_score=0)]
        assert res and "answered from the builtin index" in searcher.provider_note
        assert "not found" in searcher.provider_note
        st = searcher.status()
    assert st.qmd is not None and st.qmd.fallback_in_use is True
    assert st.qmd.last_search is not None and st.qmd.last_search.kind == "missing"
    assert st.qmd.last_update is not None and st.qmd.last_update.ok is False


def test_qmd_failure_falls_back_and_the_next_search_tries_again(workspace: Path, qmd_command: str,
                                                                 qmd_env: None) -> None:
    s = qmd_settings(workspace, qmd_command)
    run_index(s)
    assert qmd_update(s).ok
    config = state_dir(s) / "config" / "memory-core.yml"
    good = config.read_text()
    config.write_text("collections: [this is: not yaml\n")  # qmd cannot read its config: exits 1
    with open_searcher(s) as searcher:
        res = searcher.search("Lisbon hotel confirmation", min_score=0)
        assert res and "qmd search failed" in searcher.provider_note
        assert "exited with" in searcher.provider_note
        qmd = searcher.status().qmd
        assert qmd is not None and qmd.fallback_in_use is True
        config.write_text(good)
        res = searcher.search("Lisbon hotel confirmation")
        assert res and searcher.provider_note == ""
        st = searcher.status()
    assert st.qmd is not None and st.qmd.fallback_in_use is False
    assert st.qmd.last_search is not None and st.qmd.last_search.ok is True


def test_vsearch_query_and_embed_cannot_get_models_here_and_fall_back(workspace: Path, qmd_command: str,
                                                                       qmd_env: None) -> None:
    s = qmd_settings(workspace, qmd_command, qmd={"embed_timeout_s": 8, "timeout_s": 8})
    run_index(s)
    assert qmd_update(s).ok
    emb = qmd_embed(s)  # needs embeddinggemma from the Hugging Face hub: fails or times out
    assert not emb.ok and emb.kind in ("failed", "timeout")
    for mode in ("vsearch", "query"):
        sm = qmd_settings(workspace, qmd_command, qmd={"search_mode": mode, "timeout_s": 8})
        with open_searcher(sm) as searcher:
            res = searcher.search("Lisbon hotel confirmation", min_score=0)
            assert res, mode
            assert f"qmd {mode} failed" in searcher.provider_note and "builtin index" in searcher.provider_note
            st = searcher.status()
            assert st.qmd is not None and st.qmd.fallback_in_use is True and st.qmd.search_mode == mode
            assert st.qmd.last_embed is not None and st.qmd.last_embed.ok is False


def test_unreadable_output_falls_back(workspace: Path, qmd_env: None) -> None:
    echo = shutil.which("echo")
    assert echo is not None
    s = qmd_settings(workspace, echo)  # a real program whose output is not qmd's JSON
    run_index(s)
    with open_searcher(s) as searcher:
        assert searcher.search("Lisbon hotel confirmation", min_score=0)
        assert "not JSON" in searcher.provider_note
        qmd = searcher.status().qmd
        assert qmd is not None and qmd.last_search is not None and qmd.last_search.kind == "unreadable"


def test_parse_results_on_real_shapes(workspace: Path, qmd_command: str, qmd_env: None) -> None:
    s = qmd_settings(workspace, qmd_command)
    assert qmd_update(s).ok
    from memory_core.storage.qmd import run_qmd

    out, err = run_qmd(s, ["search", "--json", "-n", "3", "--", "Lisbon hotel"], timeout=60)
    hits = parse_results(out, err)
    assert hits and all(h.collection in ("mc-root", "mc-memory") and h.start_line <= h.end_line for h in hits)
    with pytest.raises(QmdError) as exc:
        parse_results(out[: len(out) // 2])  # cut short
    assert exc.value.kind == "unreadable"
    none, _ = run_qmd(s, ["search", "--json", "--", "xylophonequartz"], timeout=60)
    assert parse_results(none) == []  # qmd prints "No results found." even with --json
    with pytest.raises(QmdError, match="without a file"):
        parse_results(json.dumps([{"score": 1}]))


def test_cli_status_and_search_with_the_qmd_backend(workspace: Path, qmd_env: None, tmp_path: Path) -> None:
    cfg = tmp_path / "mc.toml"
    cfg.write_text(f'workspace = "{workspace}"\nprovider = "none"\nbackend = "qmd"\n'
                   f'[qmd]\ncommand = "{tmp_path / "absent-qmd"}"\n')
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    base = [sys.executable, "-m", "memory_core.apps.cli"]
    assert subprocess.run([*base, "index", "--config", str(cfg), "--engine", "local"], env=env,
                          capture_output=True, timeout=300).returncode == 0
    res = subprocess.run([*base, "search", "--config", str(cfg), "Lisbon hotel"], env=env, capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 0 and "answered from the builtin index" in res.stderr and "#L" in res.stdout
    st = subprocess.run([*base, "status", "--config", str(cfg), "--json"], env=env, capture_output=True, text=True,
                        timeout=120)
    data = json.loads(st.stdout)
    assert data["backend"] == "qmd" and data["qmd"]["fallback_in_use"] is True


def test_on_search_sync_updates_qmd_too(workspace: Path, qmd_command: str, qmd_env: None) -> None:
    from memory_core.apps.mcp_server import MemoryTools

    s = qmd_settings(workspace, qmd_command, sync={"on_search": True})
    run_index(s)
    assert qmd_update(s).ok
    tools = MemoryTools(s)
    try:
        (workspace / "memory" / "fresh.md").write_text("# Fresh\n\nthe wombat ledger closes Thursday\n")
        first = tools.search({"query": "wombat ledger"})  # starts the run (test_sync checks the answer's index)
        # qmd is updated by the run this search starts; if the builtin index got there first, qmd's
        # empty answer falls back to it (a documented reason), never to a qmd failure
        assert "note" not in first or "failed" not in first["note"]
        assert tools.sync.wait_idle()
        run = tools.sync.runs[-1]
        assert run.ok and run.summary is not None and "qmd-update" in run.summary.stage_seconds
        assert not any("qmd" in w for w in run.summary.warnings)
        again = tools.search({"query": "wombat ledger"})
        assert [r["path"] for r in again["results"]] == ["memory/fresh.md"] and "note" not in again
        assert tools.status({})["qmd"]["last_search"]["ok"] is True
    finally:
        tools.close()


def test_the_transcript_export_never_writes_through_a_symlink_and_is_private(workspace: Path, tmp_path: Path) -> None:
    """issue 22 #5 and #4: `<state>/sessions/<stem>.tmp` was written through a planted symlink
    (its target overwritten); qmd's state was 0755 and the exported transcripts 0644."""
    from memory_core.index.qmd import export_sessions

    s = qmd_settings(workspace, "qmd", sources=["memory", "sessions"])
    out = state_dir(s) / "sessions"
    out.mkdir(parents=True)
    os.chmod(state_dir(s), 0o755)
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me\n")
    stems = [p.stem for p in (workspace / "sessions").glob("*.jsonl")]
    assert stems
    for stem in stems:
        (out / f"{stem}.tmp").symlink_to(victim)
    (out / f"{stems[0]}.md").symlink_to(victim)  # a link at the export's own name: replaced, not followed
    table = export_sessions(s)
    assert victim.read_text() == "keep me\n"
    assert len(table) == len(stems)
    for name in table:
        p = out / name
        assert not p.is_symlink() and p.stat().st_mode & 0o077 == 0 and "User:" in p.read_text()
    assert state_dir(s).stat().st_mode & 0o777 == 0o700


# -- a qmd that misbehaves (issue 22 #6, #7, #8, #9, #4): a real program standing in for qmd ------

FAKE_QMD = r'''#!{python}
import os, subprocess, sys
args = sys.argv[3:]  # after --index NAME
if args and args[0] == "update" and os.environ.get("FAKE_QMD_UPDATE_SLEEP"):  # a long update
    import time
    open(os.environ["FAKE_QMD_STARTED"], "w").write(str(os.getpid()))
    time.sleep(float(os.environ["FAKE_QMD_UPDATE_SLEEP"]))
    sys.exit(0)
if args and args[0] in ("search", "vsearch", "query"):
    mode = os.environ.get("FAKE_QMD_MODE", "file")
    if mode == "detach":  # a child in its own session keeps stdout open; qmd itself exits at once
        child = subprocess.Popen(["sleep", "120"], start_new_session=True)
        open(os.environ["FAKE_QMD_PID"], "w").write(str(child.pid))
        print("No results found.")
        sys.exit(0)
    if mode == "huge":
        chunk = "x" * (1 << 20)
        for _ in range(40):
            sys.stdout.write(chunk)
        sys.exit(0)
    sys.stdout.write(open(os.environ["FAKE_QMD_OUT"], encoding="utf-8").read())
sys.exit(0)
'''


@pytest.fixture
def fake_qmd(tmp_path: Path, qmd_env: None, monkeypatch: pytest.MonkeyPatch) -> Any:
    exe = tmp_path / "fake-qmd"
    exe.write_text(FAKE_QMD.replace("{python}", sys.executable))
    exe.chmod(0o755)
    out = tmp_path / "qmd-out.json"
    monkeypatch.setenv("FAKE_QMD_OUT", str(out))

    def answer(rows: Any) -> None:
        out.write_text(rows if isinstance(rows, str) else json.dumps(rows), encoding="utf-8")

    return exe, answer


def test_hostile_qmd_output_falls_back_and_never_crashes(workspace: Path, fake_qmd: Any,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    exe, answer = fake_qmd
    s = qmd_settings(workspace, str(exe))
    run_index(s)
    assert qmd_update(s).ok
    bad = {
        "nested": "[" * 100_000 + "]" * 100_000,
        "nan score": '[{"file": "qmd://mc-root/memory.md", "score": NaN, "snippet": "@@ -1,1 @@\\nx"}]',
        "huge": None,
    }
    for what, text in bad.items():
        if text is None:
            monkeypatch.setenv("FAKE_QMD_MODE", "huge")
        else:
            monkeypatch.setenv("FAKE_QMD_MODE", "file")
            answer(text)
        with open_searcher(s) as searcher:
            res = searcher.search_response("Lisbon hotel confirmation", min_score=0).to_dict()
        assert res["results"] and "answered from the builtin index" in res["note"], what
        json.dumps(res, allow_nan=False).encode("utf-8")  # valid JSON, valid UTF-8
    # a lone surrogate in a snippet: kept as U+FFFD, the answer is still qmd's
    monkeypatch.setenv("FAKE_QMD_MODE", "file")
    answer('[{"file": "qmd://mc-root/memory.md", "score": 0.8, "snippet": "@@ -1,1 @@\\n\\ud800 Lisbon"}]')
    with open_searcher(s) as searcher:
        res = searcher.search_response("Lisbon hotel confirmation", min_score=0).to_dict()
    assert res["results"] and "\ufffd" in res["results"][0]["snippet"] and not res.get("note")
    json.dumps(res).encode("utf-8")


def test_a_qmd_that_leaves_a_detached_child_does_not_hang_search(workspace: Path, fake_qmd: Any, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    exe, _ = fake_qmd
    pidfile = tmp_path / "child.pid"
    s = qmd_settings(workspace, str(exe), qmd={"timeout_s": 5})
    run_index(s)
    assert qmd_update(s).ok
    monkeypatch.setenv("FAKE_QMD_MODE", "detach")
    monkeypatch.setenv("FAKE_QMD_PID", str(pidfile))
    cmd = [sys.executable, "-m", "memory_core.apps.cli", "search", "-w", str(workspace), "--config",
           str(tmp_path / "mc.toml"), "Lisbon hotel"]
    (tmp_path / "mc.toml").write_text(f'provider = "none"\nbackend = "qmd"\n[qmd]\ncommand = "{exe}"\n'
                                      "timeout_s = 5\n")
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=30,
                              env={**os.environ, "PYTHONPATH": str(ROOT)})
        assert proc.returncode == 0, proc.stderr
    finally:
        if pidfile.exists():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pidfile.read_text()), 9)


def test_qmd_name_collisions_scores_labels_dates_and_redaction(workspace: Path, fake_qmd: Any,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    exe, answer = fake_qmd
    mem = workspace / "memory"
    (mem / "a-b.md").write_text("# dash\nthe heron budget is 10\n")
    (mem / "a_b.md").write_text("# underscore\nthe egret budget is 20\n")
    (mem / "2026-03-04.md").write_text("# day\nsecret OPENAI_API_KEY=sk-proj-abcdefghijklmnopqrstuvwxyz012345\n")
    s = qmd_settings(workspace, str(exe), redact="all")
    run_index(s)
    assert qmd_update(s).ok
    monkeypatch.setenv("FAKE_QMD_MODE", "file")
    answer([
        {"file": "qmd://mc-memory/a-b.md", "score": 0.9, "snippet": "@@ -2,1 @@\nthe heron budget is 10"},
        {"file": "qmd://mc-memory/a-b.md", "score": 0.8, "snippet": "@@ -2,1 @@\nthe egret budget is 20"},
        {"file": "qmd://mc-memory/2026-03-04.md", "score": 0.7,
         "snippet": "@@ -2,1 @@\nsecret OPENAI_API_KEY=sk-proj-abcdefghijklmnopqrstuvwxyz012345"},
        {"file": "qmd://mc-root/memory.md", "score": 0.1, "snippet": "@@ -1,1 @@\n# x"},
    ])
    with open_searcher(s) as searcher:
        res = [r for r in searcher.search("budget", min_score=0.5) if r.score >= 0.5]  # the answer's threshold passed
    assert [(r.path, r.start_line) for r in res] == [("memory/a-b.md", 2), ("memory/a_b.md", 2),
                                                     ("memory/2026-03-04.md", 2)]
    assert all(r.match == "keyword" and r.vector_score == 0.0 for r in res)  # BM25: not a vector hit
    assert res[2].date == "2026-03-04"
    assert "abcdefghijklmnopqrstuvwxyz" not in res[2].snippet and "sk-pro" in res[2].snippet


def test_an_empty_qmd_answer_falls_back_when_the_builtin_index_has_strong_matches(
        workspace: Path, qmd_command: str, qmd_env: None) -> None:
    """qmd's `search` ANDs every query word: a question in plain words finds nothing there while
    the builtin index has clear matches. The answer comes from the builtin index and says why."""
    s = qmd_settings(workspace, qmd_command)
    run_index(s)
    question = "what did we decide about the Lisbon hotel"
    with open_searcher(s) as searcher:
        assert searcher.qmd_search(question, 6, None, None) == []  # qmd itself: nothing
        res = searcher.search_response(question).to_dict()
        st = searcher.status()
        # qmd answers a query whose every word is in one note: its own answer, no fallback
        direct = searcher.search_response("Lisbon hotel").to_dict()
        # neither has anything: qmd's empty answer stands
        nothing = searcher.search_response("xylophone zeppelin quokka").to_dict()
    assert res["results"] and res["results"][0]["score"] >= s.qmd.fallback_min_score
    assert "Lisbon" in res["results"][0]["snippet"]
    fb = res["fallback"]
    assert (fb["from"], fb["to"]) == ("qmd", "builtin") and "qmd search found nothing" in fb["reason"]
    assert res["backend"] == "builtin" and "answered from the builtin index" in res["note"]
    assert st.qmd is not None and st.qmd.fallback_in_use is True and "found nothing" in st.qmd.fallback_reason
    assert st.qmd.last_search is not None and st.qmd.last_search.ok is True  # qmd did not fail: it found nothing
    assert direct["results"] and direct["fallback"] is None
    assert (direct["backend"], direct["provider"], direct["model"]) == ("qmd", "qmd", "qmd search")
    assert nothing["results"] == [] and nothing["fallback"] is None and nothing["backend"] == "qmd"
    # turned off: qmd's empty answer is the answer
    off = qmd_settings(workspace, qmd_command, qmd={"fallback_on_empty": False})
    with open_searcher(off) as searcher:
        res = searcher.search_response(question).to_dict()
    assert res["results"] == [] and res["fallback"] is None and res["backend"] == "qmd"


def test_qmd_hits_keep_min_score_and_cite_the_files_real_lines(workspace: Path, fake_qmd: Any,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """issue 39 Q1: qmd's answer below min_score (the settings' when the caller gives none, as the
    builtin index applies it) is left out, and a line header past the file (a 1-line note cited
    as #L999999999-L1000000000) is cited within the file's real lines."""
    exe, answer = fake_qmd
    (workspace / "memory" / "one.md").write_text("the heron budget is 10\n")  # lines 1-2, as the chunker counts
    (workspace / "memory" / "five.md").write_text("a\nb\nthe egret budget is 20\nd\ne")
    s = qmd_settings(workspace, str(exe))
    run_index(s)
    assert qmd_update(s).ok
    monkeypatch.setenv("FAKE_QMD_MODE", "file")
    floor = s.query.threshold()
    assert floor > 0
    answer([
        {"file": "qmd://mc-memory/one.md", "score": 0.9, "snippet": "@@ -999999999,2 @@\nthe heron budget is 10"},
        {"file": "qmd://mc-memory/five.md", "score": 0.8, "snippet": "@@ -3,9 @@\nthe egret budget is 20\nd\ne"},
        {"file": "qmd://mc-root/memory.md", "score": floor / 2, "snippet": "@@ -1,1 @@\n# x"},
    ])
    with open_searcher(s) as searcher:
        res = searcher.search("heron budget")
        cited = [searcher.read_file(r.citation) for r in res[:2]]
    # the answer's threshold, as the builtin index's: its best result reaches min_score, the rest
    # are listed down to query.result_floor (0 by default; min_score gives a per-result threshold)
    assert [r.citation for r in res][:2] == ["memory/one.md#L1-L2", "memory/five.md#L3-L5"]
    assert res[0].score >= floor and "MEMORY.md" in {r.path for r in res}
    per_result = s.model_copy(update={"query": s.query.model_copy(update={"result_floor": floor})})
    with open_searcher(per_result) as searcher:
        assert [r.citation for r in searcher.search("heron budget")] == ["memory/one.md#L1-L2", "memory/five.md#L3-L5"]
    answer([{"file": "qmd://mc-root/memory.md", "score": floor / 2, "snippet": "@@ -1,1 @@\n# x"}])
    no_fallback = s.model_copy(update={"qmd": s.qmd.model_copy(update={"fallback_on_empty": False})})
    with open_searcher(no_fallback) as searcher:
        assert searcher.search("heron budget") == []  # nothing matches this well
        assert "MEMORY.md" in {r.path for r in searcher.search("heron budget", min_score=0)}
    assert "heron budget" in cited[0].text and cited[1].text == "the egret budget is 20\nd\ne"


# -- a stop while qmd brings its collections up to date -----------------------------------------

LOSE_ON_SIGUSR1 = """
import os, signal, sys, time

signal.signal(signal.SIGINT, signal.default_int_handler)  # Ctrl-C as at a terminal


class LostStop:
    def __del__(self):
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.2)  # the KeyboardInterrupt is raised in this finalizer: Python swallows it


signal.signal(signal.SIGUSR1, lambda signum, frame: LostStop())
from memory_core.apps.cli import main
sys.exit(main())
"""


@pytest.mark.parametrize("how", ["sigterm", "ctrl-c-lost-in-a-finalizer"])
def test_a_stop_while_qmd_updates_ends_the_run_as_stopped_after_its_publish(workspace: Path, fake_qmd: Any,
                                                                           tmp_path: Path, how: str) -> None:
    """`memory-core index` with `backend = "qmd"`: the builtin index is published, then `qmd update`
    runs (here for up to a minute). A SIGTERM there was taken by the qmd step's error handling for
    a qmd failure: the command said `qmd update failed (stopped by SIGTERM)` and exited 0, as if
    the run had finished. A Ctrl-C lost in a finalizer was not acted on at all: qmd ran to its end
    and the command exited 0. Both now end the run as a stop after its publish (R1): qmd's process
    group is killed at once, and the command says the index was published and what was cut short."""
    import signal
    import time

    exe, _ = fake_qmd
    started = tmp_path / "update-started"
    cfg = tmp_path / "mc.toml"
    cfg.write_text(f'provider = "none"\nbackend = "qmd"\n[qmd]\ncommand = "{exe}"\ntimeout_s = 10\n'
                   "update_timeout_s = 120\n")
    script = tmp_path / "index_cli.py"
    script.write_text(LOSE_ON_SIGUSR1)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "FAKE_QMD_UPDATE_SLEEP": "60", "FAKE_QMD_STARTED": str(started)}
    proc = subprocess.Popen([sys.executable, str(script), "index", "-w", str(workspace), "--config", str(cfg),
                             "--no-progress"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not started.exists() and time.monotonic() < deadline:
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.05)
        assert started.exists()
        qmd_pid = int(started.read_text())
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM if how == "sigterm" else signal.SIGUSR1)
        out, err = proc.communicate(timeout=100)
        took = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
    if how == "sigterm":
        assert proc.returncode == 1, (proc.returncode, out, err[-3000:])
        assert "stopped by SIGTERM after the new index was published" in err, err[-3000:]
    else:
        assert "Exception ignored in: <function LostStop.__del__" in err, err[-3000:]  # it was lost
        assert proc.returncode == 130, (proc.returncode, out, err[-3000:])
        assert "interrupted after the new index was published" in err, err[-3000:]
    assert "bringing qmd up to date" in err, err[-3000:]  # what the stop cut short
    assert "qmd update failed" not in err, err[-3000:]
    assert took < 20, took  # before: the sleeping qmd's whole minute (the lost Ctrl-C)
    assert (workspace / ".memory-core" / "index.sqlite").exists()  # the builtin index was published
    assert not _running(qmd_pid)  # qmd's process group was killed with the run


def _running(pid: int, wait_s: float = 5.0) -> bool:
    """``pid`` is a live process (not gone, not a zombie) ``wait_s`` from now, or as soon as it is not."""
    import time

    deadline = time.monotonic() + wait_s
    while True:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return False
        if state in ("Z", "X"):
            return False
        if time.monotonic() >= deadline:
            return True
        time.sleep(0.1)
