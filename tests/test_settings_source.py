"""Where settings come from (issue 15): the index records what it was built from; readers need
only the index (or its workspace); writers resolve settings in one order (flag, environment,
config file, the live index, defaults), so the CLI, deployments and ``watch --deployment`` keep
one index without full rebuilds; a Prefect profile's ``PREFECT_API_URL`` counts.

Provider: the real openai SDK against tests/fakes/openai_fake.py (64-d vectors); a real Prefect
server (tests/prefect_server.py) and a real process worker for the deployment runs.
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from memory_core.apps.cli import main
from memory_core.config import load_settings
from memory_core.query.search import Searcher
from memory_core.runtime.resolve import resolve_settings
from memory_core.storage.indexmeta import IndexRecord
from memory_core.storage.store import connect, probe_index
from tests.conftest import EXAMPLES

API_KEY = "sk-test-key-0123456789"
OUTSIDE_WORD = "quokkaberry"  # only in the extra path outside the workspace
INSIDE_WORD = "marmotfield"  # only in the extra path inside the workspace


def provider_toml(base_url: str, extra: str = "") -> str:
    return (f'provider = "openai"\nmodel = "text-embedding-3-small"\n{extra}[remote]\nbase_url = "{base_url}"\n'
            "dimensions = 64\nbackoff_initial_s = 0.01\nbackoff_max_s = 0.05\nmax_attempts = 2\ntimeout_s = 60\n")


def make_workspace(tmp: Path) -> tuple[Path, Path]:
    """A copy of the example workspace with transcripts, an extra folder inside it (``notes``)
    and one outside it; returns (workspace, outside folder)."""
    ws = tmp / "ws"
    shutil.copytree(EXAMPLES / "workspace", ws, ignore=shutil.ignore_patterns(".memory-core"))
    shutil.copytree(EXAMPLES / "sessions", ws / "sessions")
    (ws / "notes").mkdir(exist_ok=True)
    (ws / "notes" / "field-notes.md").write_text(f"# Field notes\n\nThe {INSIDE_WORD} survey ran on Tuesday.\n")
    outside = tmp / "outside"
    outside.mkdir()
    (outside / "far.md").write_text(f"# Far away\n\nline two\n\nThe {OUTSIDE_WORD} harvest is in March.\n")
    return ws, outside


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    rc = main(list(args))
    out, err = capsys.readouterr()
    return rc, out, err


def index_meta(path: Path) -> dict[str, Any]:
    meta, problem = probe_index(path)
    assert problem is None and meta is not None
    return meta


def sessions_indexed(path: Path) -> int:
    conn = connect(path, readonly=True)
    try:
        return int(conn.execute("SELECT count(*) FROM files WHERE source = 'sessions'").fetchone()[0])
    finally:
        conn.close()


# -- the order -------------------------------------------------------------------------------------

def test_settings_order_flag_env_config_index_default(tmp_path, openai_fake, monkeypatch, capsys):
    monkeypatch.setenv("OPENAI_API_KEY", API_KEY)
    ws, outside = make_workspace(tmp_path)
    cfg = tmp_path / "given.toml"
    cfg.write_text(provider_toml(openai_fake.base_url))
    monkeypatch.chdir(tmp_path)
    # nothing recorded yet: the defaults
    r = resolve_settings({"workspace": str(ws)}, env={})
    assert r.settings.sources == ["memory"] and r.origins["sources"] == "default" and not r.has_index
    assert r.changes == [] and r.config_file is None

    rc, out, err = cli(capsys, "index", "-w", str(ws), "-c", str(cfg), "--sessions", "--extra-path", "notes",
                       "--engine", "local", "--no-progress")
    assert rc == 0, err
    meta = index_meta(ws / ".memory-core" / "index.sqlite")
    rec = IndexRecord.from_meta(meta)
    assert rec is not None and rec.workspace == str(ws) and rec.sessions_dir == str(ws / "sessions")
    # a hosted provider: notes are redacted too by default (redact = "auto", issue 17)
    assert rec.sources == ["memory", "sessions"] and rec.extra_paths == ["notes"] and rec.redact == "all"
    assert rec.built_from["provider"] == "openai" and rec.built_from["remote"]["base_url"] == openai_fake.base_url
    assert meta["origins"]["sources"] == "--sessions" and meta["origins"]["extra_paths"] == "--extra-path"
    assert meta["origins"]["provider"] == f"config file {cfg}"
    assert API_KEY not in json.dumps(meta)

    # not told: what the index recorded (even the provider's base URL)
    r = resolve_settings({"workspace": str(ws)}, env={})
    s = r.settings
    assert s.sources == ["memory", "sessions"] and s.extra_paths == ["notes"] and s.provider == "openai"
    assert s.remote.base_url == openai_fake.base_url and s.remote.dimensions == 64
    assert r.origins["sources"] == r.origins["provider"] == "the index" and r.changes == []
    # the index path alone finds the workspace it was built from
    r = resolve_settings({"index_path": str(ws / ".memory-core" / "index.sqlite")}, env={})
    assert r.settings.workspace_dir == ws and r.origins["workspace"] == "the index"

    # a config file beats the index; the change says where it came from
    (ws / "memory-core.toml").write_text('sources = ["memory"]\n')
    r = resolve_settings({"workspace": str(ws)}, env={})
    assert r.config_found and r.config_file == ws / "memory-core.toml"
    assert r.settings.sources == ["memory"] and r.settings.provider == "openai"  # the rest still from the index
    [change] = r.changes
    assert (change.setting, change.old, change.new) == ("sources", ["memory", "sessions"], ["memory"])
    assert change.origin == f"config file {ws / 'memory-core.toml'}"
    # $MEMORY_CORE_CONFIG beats the workspace's file; the environment beats the config file; a flag beats all
    r = resolve_settings({"workspace": str(ws)}, env={"MEMORY_CORE_CONFIG": str(cfg)})
    assert r.settings.sources == ["memory", "sessions"] and not r.config_found and r.changes == []
    r = resolve_settings({"workspace": str(ws)}, env={"MEMORY_CORE_CONFIG": str(cfg), "MEMORY_CORE_PROVIDER": "none"})
    assert r.settings.provider == "none" and r.origins["provider"] == "$MEMORY_CORE_PROVIDER"
    r = resolve_settings({"workspace": str(ws), "provider": "local"}, told_by={"provider": "--provider"},
                         env={"MEMORY_CORE_PROVIDER": "none"})
    assert r.settings.provider == "local" and r.origins["provider"] == "--provider"
    assert [c.setting for c in r.changes] == ["sources", "provider"]

    # a run that changes a setting says which and where from; one not told keeps the index
    rc, out, err = cli(capsys, "index", "-w", str(ws), "--engine", "local", "--no-progress")
    assert rc == 0, err
    assert f"full rebuild (sources changed from [memory, sessions] to [memory] by config file {ws / 'memory-core.toml'}" in out
    (ws / "memory-core.toml").unlink()
    rc, out, err = cli(capsys, "index", "-w", str(ws), "--engine", "local", "--no-progress", "--json")
    assert rc == 0 and not json.loads(out)["full"], out
    assert sessions_indexed(ws / ".memory-core" / "index.sqlite") == 0
    rc, out, err = cli(capsys, "index", "-w", str(ws), "--extra-path", "notes", "--extra-path", str(outside),
                       "--engine", "local", "--no-progress")
    assert rc == 0, err
    assert f"full rebuild (extra_paths changed from [notes] to [{outside}, notes] by --extra-path)" in out.splitlines()[0], out
    assert f"extra_paths changed from [notes] to [{outside}, notes] (from --extra-path)" in err


# -- readers need nothing but the index ----------------------------------------------------------

def every_hit_readable(capsys: pytest.CaptureFixture[str], where: list[str], told: dict[str, Any],
                       ws: Path, outside: Path) -> None:
    """Search notes, transcripts and both extra paths with the CLI (given only ``where``) and the
    MCP tools (settings resolved from ``told`` only); read every hit back by its path."""
    from memory_core.apps.mcp_server import MemoryTools

    hits: list[dict[str, Any]] = []
    for q in ("deploy checklist rollback", "502 connections", INSIDE_WORD, OUTSIDE_WORD):
        rc, out, err = cli(capsys, "search", q, *where, "--json", "-n", "8")
        assert rc == 0, err
        found = json.loads(out)["results"]  # the memory_search shape: {results, note?}
        assert found, q
        hits += found
    paths = {h["path"] for h in hits}
    assert {"notes/field-notes.md", str(outside / "far.md")} <= paths
    assert any(p.startswith("sessions/") for p in paths) and any(p.startswith("memory/") for p in paths)
    assert any(h["vector_score"] > 0 for h in hits)  # queries embedded with the index's own provider settings
    for h in hits:
        n = h["endLine"] - h["startLine"] + 1
        rc, out, err = cli(capsys, "get", h["path"], *where, "--from", str(h["startLine"]), "--lines", str(n),
                           "--json")
        assert rc == 0, (h["path"], err)
        got = json.loads(out)
        assert got["lines"] >= 1 and got["source"] == h["source"]
        rc, out, err = cli(capsys, "get", h["citation"], *where, "--json")  # path#L10-L20 as printed
        assert rc == 0 and json.loads(out)["text"] == got["text"], (h["citation"], err)
        if h["source"] == "memory":
            real = Path(h["path"]) if h["path"].startswith("/") else ws / h["path"]
            want = real.read_text().splitlines()[h["startLine"] - 1:h["endLine"]]
            assert got["text"] == "\n".join(want)
    tools = MemoryTools(resolve_settings(told, env={}).settings)
    try:
        for q in (INSIDE_WORD, OUTSIDE_WORD, "502 connections"):
            for r in tools.search({"query": q})["results"]:
                got = tools.get({"path": r["path"], "from_line": r["startLine"], "lines": 5})
                assert got["lines"] >= 1 and got["path"] == r["path"]
        # nothing else: a file in the workspace that is not indexed
        with pytest.raises(Exception, match="not an indexed file"):
            tools.get({"path": "memory-core.toml" if (ws / "memory-core.toml").exists() else "notes/nope.md"})
    finally:
        tools.close()
    rc, out, err = cli(capsys, "get", "sessions/../MEMORY.md", *where)
    assert rc == 2 and "not an indexed file" in err


@pytest.mark.parametrize("config_in_workspace", [False, True], ids=["flags", "workspace-config"])
def test_every_hit_readable_given_only_the_index_or_the_workspace(tmp_path, openai_fake, monkeypatch, capsys,
                                                                   config_in_workspace):
    monkeypatch.setenv("OPENAI_API_KEY", API_KEY)
    ws, outside = make_workspace(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    index = tmp_path / "indexes" / "agent.sqlite"  # not in the workspace
    index.parent.mkdir()  # a typed --index's folder must exist (issue 39)
    if config_in_workspace:
        (ws / "memory-core.toml").write_text(provider_toml(
            openai_fake.base_url, f'sources = ["memory", "sessions"]\nextra_paths = ["notes", "{outside}"]\n'))
        build = ["index", "-w", str(ws)]
    else:
        cfg = tmp_path / "cfg.toml"
        cfg.write_text(provider_toml(openai_fake.base_url))
        build = ["index", "-w", str(ws), "-c", str(cfg), "--sessions", "--extra-path", "notes",
                 "--extra-path", str(outside)]
    monkeypatch.chdir(tmp_path)
    for extra in (["--index", str(index)], []):
        rc, out, err = cli(capsys, *build, *extra, "--engine", "local", "--no-progress")
        assert rc == 0, err
    # readers in another folder, told only the index path, then only the workspace
    monkeypatch.chdir(elsewhere)
    every_hit_readable(capsys, ["--index", str(index)], {"index_path": str(index)}, ws, outside)
    every_hit_readable(capsys, ["-w", str(ws)], {"workspace": str(ws)}, ws, outside)
    # the library's Searcher, given settings that name nothing but the index
    with Searcher(load_settings(None, {"index_path": str(index)}, env={})) as searcher:
        hits = searcher.search(f"{OUTSIDE_WORD} 502 connections {INSIDE_WORD}", max_results=10, min_score=0)
        assert {h.source for h in hits} == {"memory", "sessions"} and any(h.vector_score > 0 for h in hits)
        for h in hits:
            assert searcher.read_file(h.path, from_line=h.start_line, lines=3).lines >= 1
    rc, out, err = cli(capsys, "status", "--index", str(index), "--json")
    st = json.loads(out)
    assert rc == 0 and st["built_from"]["workspace"] == str(ws) and st["built_from"]["sources"] == ["memory", "sessions"]
    assert st["built_from"]["extra_paths"] == sorted(["notes", str(outside)])
    assert st["built_from"]["sessions_dir"] == str(ws / "sessions") and st["built_from"]["provider"] == "openai"


# -- small CLI things --------------------------------------------------------------------------------

def test_cli_usage_errors_version_and_help(tmp_path, monkeypatch, capsys):
    ws, _ = make_workspace(tmp_path)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0 and capsys.readouterr().out.startswith("memory-core ")
    assert cli(capsys, "index", "-w", str(ws), "--provider", "none", "--engine", "local", "--no-progress")[0] == 0
    for args, msg in ((["search", "deploy", "-w", str(ws), "-n", "0"], "must be 1 or more"),
                      (["get", "MEMORY.md", "-w", str(ws), "--lines", "0"], "must be 1 or more"),
                      (["get", "MEMORY.md", "-w", str(ws), "--from", "0"], "must be 1 or more")):
        with pytest.raises(SystemExit) as e:
            main(args)
        assert e.value.code == 2 and msg in capsys.readouterr().err
    n_lines = len((ws / "MEMORY.md").read_text().split("\n"))
    rc, out, err = cli(capsys, "get", "MEMORY.md", "-w", str(ws), "--from", str(n_lines + 5))
    assert rc == 2 and f"line {n_lines + 5} is past the end of MEMORY.md" in err
    rc, out, err = cli(capsys, "export", str(tmp_path / "out.csv"), "-w", str(ws))
    assert rc == 2 and "cannot tell the format" in err and not (tmp_path / "out.csv").exists()
    rc, out, err = cli(capsys, "export", str(tmp_path / "out.pq"), "-w", str(ws))
    assert rc == 0 and (tmp_path / "out.pq").read_bytes()[:4] == b"PAR1"
    # every flag of every command has help text
    from memory_core.apps.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    for name, p in sub.choices.items():
        for action in p._actions:
            assert action.help, f"{name} {action.option_strings or action.dest} has no help"


# -- with a real Prefect server --------------------------------------------------------------------

def _profile_env(srv: Any, home: Path, **extra: str) -> dict[str, str]:
    """A client environment whose only Prefect setting is an active profile naming the server
    (``prefect config set PREFECT_API_URL=...``): no PREFECT_API_URL variable."""
    env = srv.env(PREFECT_HOME=str(home), **extra)
    env.pop("PREFECT_API_URL")
    if not (home / "profiles.toml").exists():
        home.mkdir(parents=True, exist_ok=True)
        for args in (("profile", "create", "team"), ("--profile", "team", "config", "set", f"PREFECT_API_URL={srv.api_url}"),
                     ("profile", "use", "team")):
            srv.cli(*args, env=env)
    return env


def _memory_core(args: list[str], env: dict[str, str], cwd: Path) -> dict[str, Any]:
    res = subprocess.run([sys.executable, "-m", "memory_core.apps.cli", *args], env=env, cwd=cwd, capture_output=True,
                         text=True, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    return json.loads(res.stdout) if "--json" in args else {"out": res.stdout, "err": res.stderr}


def _edit(ws: Path, n: int) -> None:
    with open(ws / "memory" / "2026-11-02.md", "a") as fh:
        fh.write(f"\n- edit {n}: the ledger reconciliation moved to Thursday.\n")


def _mode_of(flow_run_id: Any) -> str:
    from tests.prefect_server import artifact_of, table_figures

    return str(table_figures(artifact_of(flow_run_id, "table"))["mode"])


@pytest.mark.prefect_server
def test_cli_deployment_watch_and_cli_keep_one_index(request, tmp_path, openai_fake):
    """One index driven by the CLI (told --sessions once), a deployment run of the shipped
    prefect.yaml, ``watch --deployment`` and the CLI again, through the flow on the server
    named by a Prefect profile: never a full rebuild, the transcripts kept throughout."""
    from prefect.client.orchestration import get_client
    from prefect.deployments import run_deployment
    from prefect.states import Cancelled

    from tests.prefect_server import ROOT, shared_server, start_process, stop_process

    srv = shared_server(request.config)
    ws, _ = make_workspace(tmp_path)
    (ws / "memory-core.toml").write_text(provider_toml(openai_fake.base_url))  # no sources: the index's
    index = ws / ".memory-core" / "index.sqlite"
    base = {"OPENAI_API_KEY": API_KEY, "PYTHONPATH": str(ROOT)}
    local_env = srv.env(PREFECT_HOME=str(tmp_path / "nohome"), **base)
    local_env.pop("PREFECT_API_URL")
    profile_env = _profile_env(srv, tmp_path / "prefect-home", **base)

    # 1. the CLI, in-process, told --sessions once
    first = _memory_core(["index", "-w", str(ws), "--sessions", "--engine", "local", "--json", "--no-progress"],
                         local_env, tmp_path)
    assert first["full"] and first["full_reason"] == "no index yet"
    assert sessions_indexed(index) == 3

    # 2. a run of the shipped deployment (no sources parameter), on a process worker
    worker_env = srv.env(MEMORY_CORE_WORKSPACE=str(ws), PREFECT_WORKER_QUERY_SECONDS="1", **base)
    res = srv.cli("work-pool", "create", "memory-core", "--type", "process", env=worker_env, check=False)
    assert res.returncode == 0 or "already exists" in res.stdout + res.stderr
    srv.cli("--no-prompt", "deploy", "--all", "--prefect-file", "deployments/prefect.yaml", env=worker_env)
    worker = start_process([str(Path(sys.executable).parent / "prefect"), "worker", "start", "--pool", "memory-core"],
                           env=worker_env, log=tmp_path / "worker.log")
    watch: subprocess.Popen[str] | None = None
    try:
        with srv.settings():
            _edit(ws, 1)
            fr = run_deployment("reindex/incremental", timeout=180, poll_interval=1)
            assert fr.state.is_completed(), (fr.state, (tmp_path / "worker.log").read_text()[-3000:])
            assert "sources" not in fr.parameters and _mode_of(fr.id) == "incremental"
            assert sessions_indexed(index) == 3

            # 3. watch --deployment, its server named by the Prefect profile only
            _edit(ws, 2)
            watch = subprocess.Popen(
                [sys.executable, "-m", "memory_core.apps.cli", "watch", "-w", str(ws), "--deployment", "incremental",
                 "--json"], env=profile_env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            lines: queue.Queue[str] = queue.Queue()
            threading.Thread(target=lambda: [lines.put(x) for x in watch.stdout], daemon=True).start()  # type: ignore[union-attr]
            rec = json.loads(lines.get(timeout=240))
            assert rec["ok"], rec
            flow_run_id = rec["summary"]["flow_run_id"]
            assert _mode_of(flow_run_id) == "incremental"
            with get_client(sync_client=True) as client:
                params = client.read_flow_run(flow_run_id).parameters
            assert params["workspace"] == str(ws) and "sources" not in params and "provider" not in params
            assert sessions_indexed(index) == 3

            # 3b. a stop while the watcher waits for a deployment run (no worker polls now, so the
            # run it starts stays scheduled): that run gets its line, which says the run is not
            # the watcher's to stop (before: no line, `watch stopped`)
            stop_process(worker)
            with get_client(sync_client=True) as client:
                seen = {r.id for r in client.read_flow_runs()}
                _edit(ws, 5)
                deadline = time.monotonic() + 60
                while not (started := [r for r in client.read_flow_runs() if r.id not in seen  # this watcher's only
                                       and "memory-core-watch" in r.tags and r.parameters.get("workspace") == str(ws)]):
                    assert time.monotonic() < deadline, "watch started no deployment run"
                    time.sleep(0.3)
                watch.send_signal(signal.SIGTERM)
                stopped = json.loads(lines.get(timeout=60))
                assert watch.wait(30) == 0
                err = watch.stderr.read()  # type: ignore[union-attr]
                watch = None
                assert stopped["number"] == 2 and stopped["stopped"] == "stopped by SIGTERM", stopped
                assert not stopped["ok"] and "goes on at its worker" in stopped["error"], stopped
                assert err.strip().splitlines()[-1] == "memory-core: watch stopped by SIGTERM", err
                assert "Traceback" not in err, err
                assert len(started) == 1, started
                client.set_flow_run_state(started[0].id, Cancelled(), force=True)  # not for another test's worker
        if watch is not None:
            watch.terminate()
            watch.wait(30)
            watch = None
    finally:
        if watch is not None:
            watch.kill()
            watch.wait(10)
        stop_process(worker)

    # 4. the CLI again, engine auto: the profile's server runs the flow
    st = _memory_core(["status", "-w", str(ws), "--json"], profile_env, tmp_path)
    assert st["index_engine"].startswith(f"prefect (auto: Prefect server {srv.api_url} from Prefect profile 'team')")
    with srv.settings(), get_client(sync_client=True) as client:
        before = {r.id for r in client.read_flow_runs()}
    _edit(ws, 3)
    again = _memory_core(["index", "-w", str(ws), "--json"], profile_env, tmp_path)
    assert not again["full"] and again["files_changed"] == 1
    with srv.settings(), get_client(sync_client=True) as client:
        new = [r for r in client.read_flow_runs() if r.id not in before]
    assert len(new) == 1 and new[0].parameters["workspace"] == str(ws) and new[0].state.is_completed()
    # and in-process once more
    _edit(ws, 4)
    last = _memory_core(["index", "-w", str(ws), "--engine", "local", "--json"], local_env, tmp_path)
    assert not last["full"] and last["files_changed"] == 1
    meta = index_meta(index)
    assert meta["sources"] == ["memory", "sessions"] and sessions_indexed(index) == 3


def test_prefect_api_url_from_the_environment_or_the_active_profile(tmp_path):
    """In a fresh process each time: Prefect reads its profile once per process."""
    from tests.prefect_server import ROOT

    home = tmp_path / "prefect-home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update(PREFECT_HOME=str(home), PYTHONPATH=str(ROOT))

    def engine(**extra: str) -> str:
        code = "from memory_core.runtime.engines import choose_engine; print(choose_engine('auto').line())"
        res = subprocess.run([sys.executable, "-c", code], env={**env, **extra}, cwd=tmp_path, capture_output=True,
                             text=True, timeout=120)
        assert res.returncode == 0, res.stderr
        return res.stdout.strip()

    assert engine().startswith("local (auto: PREFECT_API_URL is set neither in the environment nor in a Prefect")
    (home / "profiles.toml").write_text('active = "team"\n\n[profiles.team]\n'
                                        'PREFECT_API_URL = "http://127.0.0.1:4999/api"\n')
    assert engine() == "prefect (auto: Prefect server http://127.0.0.1:4999/api from Prefect profile 'team')"
    # the variable wins over the profile
    assert engine(PREFECT_API_URL="http://127.0.0.1:4888/api") == \
        "prefect (auto: Prefect server http://127.0.0.1:4888/api from $PREFECT_API_URL)"


def test_a_moved_workspace_takes_its_index_and_transcripts_along(tmp_path, monkeypatch, capsys):
    ws, _ = make_workspace(tmp_path)
    monkeypatch.chdir(tmp_path)
    rc, out, err = cli(capsys, "index", "-w", str(ws), "--sessions", "--extra-path", "notes", "--provider", "none",
                       "--engine", "local", "--no-progress")
    assert rc == 0, err
    moved = tmp_path / "moved"
    shutil.move(str(ws), moved)
    # a reader finds the files where the workspace is now
    rc, out, err = cli(capsys, "get", "notes/field-notes.md", "-w", str(moved), "--lines", "1")
    assert rc == 0 and out.strip() == "# Field notes", err
    # a writer keeps sources and extra paths, follows the workspace's sessions folder, rebuilds nothing
    rc, out, err = cli(capsys, "index", "-w", str(moved), "--engine", "local", "--no-progress", "--json")
    summary = json.loads(out)
    assert rc == 0 and not summary["full"] and summary["files_removed"] == 0, out
    assert f"workspace changed from {ws} to {moved} (from --workspace)" in err
    # a run with nothing to do leaves the index (and its record) as it is; the next one that
    # changes something records the new place
    _edit(moved, 1)
    rc, out, err = cli(capsys, "index", "-w", str(moved), "--engine", "local", "--no-progress", "--json")
    assert rc == 0 and not json.loads(out)["full"] and json.loads(out)["files_changed"] == 1
    rec = IndexRecord.from_meta(index_meta(moved / ".memory-core" / "index.sqlite"))
    assert rec is not None and rec.workspace == str(moved) and rec.sessions_dir == str(moved / "sessions")
    assert sessions_indexed(moved / ".memory-core" / "index.sqlite") == 3


def test_a_workspace_copied_with_its_index_is_read_from_the_copy(tmp_path, monkeypatch, capsys):
    """`cp -a orig copy`: the copy's index records orig as its workspace, and a reader of the copy
    read orig's files (`get -w copy` showed orig's text while `status -w copy` judged freshness
    against the copy's: helper audit, seventeenth session). A reader of an index at a copy's
    default place now reads the copy; orig's own index still reads orig, and an index kept apart
    with --index still reads the workspace it recorded."""
    for k in ("MEMORY_CORE_WORKSPACE", "MEMORY_CORE_INDEX", "MEMORY_CORE_CONFIG", "MEMORY_CORE_AGENT"):
        monkeypatch.delenv(k, raising=False)
    orig = tmp_path / "orig"
    (orig / "memory").mkdir(parents=True)
    (orig / "memory" / "a.md").write_text("# A\n\nthe walrus budget is 9,100 EUR\n")
    (orig / "sessions").mkdir()
    (orig / "sessions" / "s.jsonl").write_text(json.dumps(
        {"type": "message", "message": {"role": "user", "content": "the narwhal ships on Friday"}}) + "\n")
    assert main(["index", "-w", str(orig), "--provider", "none", "--sessions", "--no-progress"]) == 0
    copy = tmp_path / "copy"
    shutil.copytree(orig, copy, symlinks=True)
    (copy / "memory" / "a.md").write_text("# A\n\nthe walrus budget is 12,000 EUR in the copy\n")
    (copy / "sessions" / "s.jsonl").write_text(json.dumps(
        {"type": "message", "message": {"role": "user", "content": "the narwhal ships on Monday"}}) + "\n")
    capsys.readouterr()

    def got(*args: str) -> str:
        assert main(["get", *args]) == 0
        return capsys.readouterr().out

    assert "12,000 EUR in the copy" in got("-w", str(copy), "memory/a.md")
    assert "Monday" in got("-w", str(copy), "sessions/s.jsonl")
    assert "9,100 EUR" in got("-w", str(orig), "memory/a.md")
    assert "Friday" in got("-w", str(orig), "sessions/s.jsonl")
    # an index kept apart (--index) reads the workspace it recorded, wherever it is opened from
    apart = tmp_path / "elsewhere" / "idx.sqlite"
    apart.parent.mkdir()
    assert main(["index", "-w", str(orig), "--index", str(apart), "--provider", "none", "--sessions",
                 "--no-progress"]) == 0
    capsys.readouterr()
    assert "9,100 EUR" in got("--index", str(apart), "memory/a.md")


def test_a_bad_settings_message_names_where_its_value_came_from(tmp_path, monkeypatch, capsys):
    """``MEMORY_CORE_PROVIDER=bogus`` said word for word what a bad ``provider`` in a config file
    says, so a user looked in the config file (README: one line naming the setting or path). Each
    bad setting now says where its value came from: a variable, a config file, a flag or an
    argument; the one that wins is named, not one it overrides."""
    from memory_core.api import open_memory
    from memory_core.errors import ConfigError

    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    cfg = tmp_path / "bad.toml"
    cfg.write_text('provider = "local"\n[query]\nmin_score = 7\n[query.mmr]\nbogus = 1\n')
    monkeypatch.delenv("MEMORY_CORE_CONFIG", raising=False)
    monkeypatch.setenv("MEMORY_CORE_PROVIDER", "bogus")
    assert main(["index", "-w", str(ws), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "provider (from $MEMORY_CORE_PROVIDER): Input should be 'auto'" in err, err
    assert main(["index", "-w", str(ws), "--config", str(cfg), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "provider (from $MEMORY_CORE_PROVIDER)" in err, err  # the variable wins over the file's "local"
    assert f"query.min_score (from config file {cfg}): Input should be less than or equal to 1" in err, err
    assert f"query.mmr.bogus (from config file {cfg}): unknown setting" in err, err
    monkeypatch.delenv("MEMORY_CORE_PROVIDER")
    with pytest.raises(ConfigError, match=r"query\.min_score \(from open_memory argument query\)"):
        open_memory(ws, query={"min_score": 3})
    bad_provider = tmp_path / "p.toml"
    bad_provider.write_text('provider = "x"\n')
    with pytest.raises(ConfigError) as exc:
        load_settings(bad_provider, env={})
    assert str(exc.value).startswith(f"invalid configuration: provider (from config file {bad_provider}): ")
