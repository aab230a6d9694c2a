"""The doors of a run (CLI flags, the API, flow parameters, the watcher's deployment runs) after an
outside audit: an unnamed run that is an agent gets that agent's isolation check (A1), an empty
workspace or index is refused, not taken for the current folder (A3), the flows refuse an empty
agent as the CLI does (A6), `watch --deployment` hands on the config it resolved (A8), and a base
URL's password is never printed as a "change" (I-H2)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

NO_ENV = ("MEMORY_CORE_CONFIG", "MEMORY_CORE_WORKSPACE", "MEMORY_CORE_INDEX", "MEMORY_CORE_AGENT",
          "MEMORY_CORE_PROVIDER", "MEMORY_CORE_MODEL")


def _cli(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    e = {k: v for k, v in os.environ.items() if k not in NO_ENV}
    e.update({"PYTHONPATH": str(ROOT), **(env or {})})
    return subprocess.run([sys.executable, "-m", "memory_core.apps.cli", *args], capture_output=True, text=True,
                          env=e, timeout=300, cwd=cwd or ROOT)


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in NO_ENV:
        monkeypatch.delenv(var, raising=False)


# -- I-H2: a base URL's password ---------------------------------------------------------------

PASSWORD = "ProxyPassw0rd-secret"


def _password_workspace(tmp_path: Path, base_url: str) -> Path:
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    (ws / "MEMORY.md").write_text("# Notes\n\nPostgres replication lag on pg-replica-1.\n")
    (ws / "memory" / "a.md").write_text("otters sleep holding hands\n")
    url = base_url.replace("http://", f"http://proxyuser:{PASSWORD}@")
    (ws / "memory-core.toml").write_text(f'provider = "openai"\n[remote]\napi_key = "sk-test-key-0123456789"\n'
                                         f'base_url = "{url}"\ndimensions = 16\n')
    return ws


def test_ih2_a_base_url_password_is_no_change_and_never_printed(tmp_path: Path) -> None:
    """The index records the URL masked; each later `index` compared that with the configured URL,
    found a "change" and printed it, password in clear, on stderr."""
    from tests.fakes.openai_fake import OpenAIFake

    with OpenAIFake(dims=16) as srv:
        ws = _password_workspace(tmp_path, srv.base_url)
        first = _cli("index", "-w", str(ws), "--engine", "local")
        assert first.returncode == 0, first.stderr
        second = _cli("index", "-w", str(ws), "--engine", "local")
    assert second.returncode == 0, second.stderr
    assert PASSWORD not in first.stdout + first.stderr + second.stdout + second.stderr
    assert "remote changed" not in second.stderr, second.stderr


def test_ih2_a_change_line_masks_the_base_url_password(tmp_path: Path, clean_env: None) -> None:
    """A real change of the base URL is still said, with its password masked."""
    from memory_core.index.pipeline import run_index
    from memory_core.runtime.resolve import resolve_settings
    from tests.conftest import openai_settings
    from tests.fakes.openai_fake import OpenAIFake

    with OpenAIFake(dims=16) as srv:
        ws = _password_workspace(tmp_path, srv.base_url)
        (ws / "memory-core.toml").unlink()
        run_index(openai_settings(ws, srv, remote={"dimensions": 16}))  # recorded without a password
        moved = srv.base_url.replace("http://", f"http://proxyuser:{PASSWORD}@")
        resolved = resolve_settings({"workspace": str(ws), "provider": "openai", "remote": {
            "api_key": "sk-test-key-0123456789", "base_url": moved, "dimensions": 16}})
    lines = [ch.line() for ch in resolved.changes]
    remote = [line for line in lines if line.startswith("remote changed")]
    assert remote and "proxyuser:***@" in remote[0], lines
    assert not any(PASSWORD in line for line in lines), lines


# -- A1: an unnamed run that is an agent gets that agent's check --------------------------------

def _fleet(tmp_path: Path) -> Path:
    for agent, text in (("main", "Main note: the walrus budget is 9100 EUR."),
                        ("ops", "OPS SECRET PLAN: narwhal migration on Friday.")):
        (tmp_path / "fleet" / agent / "ws" / "memory").mkdir(parents=True)
        (tmp_path / "fleet" / agent / "ws" / "MEMORY.md").write_text(text + "\n")
    cfg = tmp_path / "fleet.toml"
    cfg.write_text(f'provider = "none"\n[agents]\ndefault = "main"\nworkspace = "{tmp_path}/fleet/{{agent}}/ws"\n'
                   f'index_path = "{tmp_path}/fleet/{{agent}}/memory.sqlite"\n'
                   '[[agents.list]]\nid = "main"\n[[agents.list]]\nid = "ops"\n')
    return cfg


def test_a1_an_agents_own_workspace_and_index_unnamed_is_that_agent(tmp_path: Path) -> None:
    """`-w <main ws> --index <main idx> --extra-path <ops ws>` is `--agent main --extra-path <ops ws>`:
    refused alike, and main's index keeps none of ops's notes."""
    cfg = _fleet(tmp_path)
    main_ws, main_idx, ops_ws = tmp_path / "fleet/main/ws", tmp_path / "fleet/main/memory.sqlite", tmp_path / "fleet/ops/ws"
    assert _cli("index", "-c", str(cfg), "--agent", "main").returncode == 0
    named = _cli("index", "-c", str(cfg), "--agent", "main", "--extra-path", str(ops_ws))
    unnamed = _cli("index", "-c", str(cfg), "-w", str(main_ws), "--index", str(main_idx), "--extra-path", str(ops_ws))
    assert named.returncode == unnamed.returncode == 2, unnamed.stdout + unnamed.stderr
    assert unnamed.stderr == named.stderr, unnamed.stderr
    assert unnamed.stderr.startswith("memory-core: error: agent 'main''s extra path is agent 'ops''s workspace")
    assert len(unnamed.stderr.splitlines()) == 1
    found = _cli("search", "-c", str(cfg), "--agent", "main", "narwhal")
    assert found.returncode == 0 and "narwhal" not in found.stdout, found.stdout + found.stderr
    # a scratch index of that workspace is no agent's: it runs
    scratch = _cli("index", "-c", str(cfg), "-w", str(main_ws), "--index", str(tmp_path / "scratch.sqlite"),
                   "--extra-path", str(ops_ws))
    assert scratch.returncode == 0, scratch.stderr


def test_a1_open_memory_of_an_agents_workspace_and_index_gets_its_check(tmp_path: Path, clean_env: None) -> None:
    from memory_core import open_memory
    from memory_core.errors import ConfigError

    cfg = _fleet(tmp_path)
    with pytest.raises(ConfigError, match="agent 'main''s extra path is agent 'ops''s workspace"):
        open_memory(tmp_path / "fleet/main/ws", config=cfg, index_path=str(tmp_path / "fleet/main/memory.sqlite"),
                    extra_paths=[str(tmp_path / "fleet/ops/ws")])
    assert not (tmp_path / "fleet/main/memory.sqlite").exists()


# -- A3: an empty workspace or index given is refused, not the current folder --------------------
def _agent_config_elsewhere(tmp_path: Path) -> tuple[Path, Path, Path]:
    """An agent's workspace, a config naming it, and a folder elsewhere that a script runs in."""
    agent = tmp_path / "agent"
    (agent / "memory").mkdir(parents=True)
    (agent / "MEMORY.md").write_text("# agent memory\n")
    cfg = tmp_path / "mc.toml"
    cfg.write_text(f'provider = "none"\nworkspace = "{agent}"\n')
    cwd = tmp_path / "somewhere_else"
    cwd.mkdir()
    return agent, cfg, cwd



def test_a3_an_empty_workspace_flag_is_refused_not_the_current_folder(tmp_path: Path) -> None:
    agent, cfg, cwd = _agent_config_elsewhere(tmp_path)
    for args in (("write", "-c", str(cfg), "-w", "", "Meeting moved to 3pm"),
                 ("index", "-c", str(cfg), "--index", ""), ("status", "-c", str(cfg), "--index", " "),
                 ("mcp", "-c", str(cfg), "-w", "")):
        r = _cli(*args, cwd=cwd)
        flag = "--workspace" if "-w" in args else "--index"
        assert r.returncode == 2, (args, r.stdout, r.stderr)
        assert r.stderr == (f"memory-core: error: {flag} is empty: an empty path is not the current folder; give"
                            f" the {'workspace' if flag == '--workspace' else 'index file'}'s path, or leave {flag}"
                            " out\n"), (args, r.stderr)
    assert list(cwd.iterdir()) == []  # nothing written where the script ran
    # the variable set but empty is unset: the config's workspace
    r = _cli("status", "-c", str(cfg), "--json", cwd=cwd, env={"MEMORY_CORE_WORKSPACE": "", "MEMORY_CORE_INDEX": ""})
    assert f'"index_path": "{agent / ".memory-core" / "index.sqlite"}"' in r.stdout, r.stdout + r.stderr  # (none yet)
    assert list(cwd.iterdir()) == []


EMPTY_CONFIG = ("memory-core: error: --config is empty: an empty path names no config file (not $MEMORY_CORE_CONFIG,"
                " nor <workspace>/memory-core.toml); give the config file's path, or leave --config out\n")


def test_a3_an_empty_config_flag_is_refused_not_the_default_config(tmp_path: Path) -> None:
    """`-c ""` (a script's `-c "$CFG"` with the variable unset) was "not told": every command read
    $MEMORY_CORE_CONFIG or <workspace>/memory-core.toml instead, where `-w ""` and `--index ""`
    are refused. Now every command that takes -c refuses it the same way, before doing anything;
    $MEMORY_CORE_CONFIG set but empty is still unset."""
    agent, cfg, cwd = _agent_config_elsewhere(tmp_path)
    env = {"MEMORY_CORE_CONFIG": str(cfg)}  # what an empty -c fell back to
    commands = (("status",), ("index",), ("search", "agent"), ("get", "MEMORY.md"), ("export", str(cwd / "out.jsonl")),
                ("write", "Meeting moved to 3pm"), ("flush", "--tokens", "10", "s1"), ("memory", "store", "likes tea"),
                ("memory", "recall", "tea"), ("memory", "list"), ("memory", "forget", "1"),
                ("eval", "--queries", "q.jsonl", "--qrels", "r.tsv"), ("watch",), ("mcp",))
    for command in commands:
        n = 2 if command[0] == "memory" else 1  # where the flag goes: after the (sub)command
        for flag, empty in (("-c", ""), ("--config", ""), ("--config", " ")) if command[0] in ("status", "memory") \
                else (("-c", ""),):
            args = (*command[:n], flag, empty, *command[n:])
            r = _cli(*args, cwd=cwd, env=env)
            assert (r.returncode, r.stdout, r.stderr) == (2, "", EMPTY_CONFIG), (args, r.stdout, r.stderr)
    assert list(cwd.iterdir()) == [] and not (agent / ".memory-core").exists()  # nothing written anywhere
    # the variable set but empty is unset: the workspace's own config file, as before
    (cwd / "memory-core.toml").write_text(f'provider = "none"\nindex_path = "{tmp_path / "own.sqlite"}"\n')
    r = _cli("status", "--json", cwd=cwd, env={"MEMORY_CORE_CONFIG": ""})
    assert f'"index_path": "{tmp_path / "own.sqlite"}"' in r.stdout, r.stdout + r.stderr


def test_a3_open_memory_refuses_an_empty_workspace_or_index(tmp_path: Path, clean_env: None,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    from memory_core import open_memory
    from memory_core.errors import UsageError

    monkeypatch.chdir(tmp_path)
    with pytest.raises(UsageError, match="open_memory argument workspace is empty"):
        open_memory("")
    with pytest.raises(UsageError, match="open_memory argument index_path is empty"):
        open_memory(tmp_path, index_path="")


def test_a3_open_memory_refuses_an_empty_config(tmp_path: Path, clean_env: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """`open_memory(ws, config="")` read $MEMORY_CORE_CONFIG (or the workspace's config file) as if
    no config had been given."""
    from memory_core import open_memory
    from memory_core.errors import UsageError

    other = tmp_path / "other.toml"
    other.write_text('provider = "none"\n[query]\nmin_score = 0.77\n')
    monkeypatch.setenv("MEMORY_CORE_CONFIG", str(other))
    for empty in ("", "  "):
        with pytest.raises(UsageError, match=r"^open_memory argument config is empty: an empty path names no config"
                                             r" file .*; give the config file's path, or leave open_memory argument"
                                             r" config out$"):
            open_memory(tmp_path, config=empty)
    with open_memory(tmp_path) as memory:  # config left out: the variable's, as before
        assert memory.settings.query.min_score == 0.77
    monkeypatch.setenv("MEMORY_CORE_CONFIG", "")  # set but empty: unset
    with open_memory(tmp_path) as memory:
        assert memory.settings.query.min_score != 0.77


# -- A6: the flows refuse an empty agent, as the CLI and the API do ------------------------------

def test_a6_the_reindex_parameters_refuse_an_empty_agent(tmp_path: Path, clean_env: None) -> None:
    """`agent=""` was the default agent's memory for the flows (backfill builds the same parameters)."""
    from flows.reindex import ReindexParams
    from memory_core.runtime.agents import UnknownAgentError

    cfg = _fleet(tmp_path)
    with pytest.raises(UnknownAgentError, match="unknown agent '': an empty agent id names no agent"):
        ReindexParams(config_file=str(cfg), agent="").to_settings()
    assert ReindexParams(config_file=str(cfg)).to_settings().agent == "main"  # left out: agents.default


@pytest.mark.prefect_server
def test_a6_a_reindex_run_with_an_empty_agent_fails_and_writes_nothing(prefect_api: object, tmp_path: Path,
                                                                        clean_env: None) -> None:
    from flows.reindex import reindex

    cfg = _fleet(tmp_path)
    state = reindex(config_file=str(cfg), agent="", return_state=True)
    assert state.is_failed() and "unknown agent ''" in (state.message or ""), state.message
    assert not (tmp_path / "fleet/main/memory.sqlite").exists()


# -- A8: `watch --deployment` hands on the config file it resolved -------------------------------

@pytest.mark.prefect_server
def test_a8_watch_deployment_passes_on_the_config_from_the_environment(prefect_api: object, tmp_path: Path,
                                                                       request: pytest.FixtureRequest,
                                                                       clean_env: None) -> None:
    """A watcher given its config by `$MEMORY_CORE_CONFIG` (a relative path) sent the deployment run no
    `config_file`: a worker without the variable failed with `unknown agent 'ops'`."""
    import time

    from prefect.client.orchestration import get_client

    from flows.reindex import ReindexParams, reindex
    from tests.prefect_server import shared_server, start_process, stop_process

    cfg = _fleet(tmp_path)
    reindex.to_deployment(name="doors-a8").apply()
    env = shared_server(request.config).env(PYTHONPATH=str(ROOT), MEMORY_CORE_CONFIG="fleet.toml")
    for var in NO_ENV[1:]:
        env.pop(var, None)
    watch = start_process([sys.executable, "-m", "memory_core.apps.cli", "watch", "--agent", "ops",
                           "--deployment", "reindex/doors-a8"], env=env, log=tmp_path / "watch.log", cwd=tmp_path)
    try:
        deadline = time.monotonic() + 60
        while True:  # no worker polls: the run waits, and its parameters are what a worker would get
            with get_client(sync_client=True) as client:
                runs = [r for r in client.read_flow_runs() if "memory-core-watch" in r.tags
                        and r.parameters.get("workspace") == str(tmp_path / "fleet/ops/ws")]
            if runs:
                break
            assert time.monotonic() < deadline and watch.poll() is None, (tmp_path / "watch.log").read_text()
            time.sleep(0.5)
    finally:
        stop_process(watch)
    with get_client(sync_client=True) as client:
        client.delete_flow_run(runs[0].id)  # never to be run by another module's worker
    params = runs[0].parameters
    assert params["agent"] == "ops" and params["config_file"] == str(cfg), params
    # a worker's environment (no MEMORY_CORE_*): the run's parameters alone
    assert ReindexParams(**params).to_settings().workspace_dir == tmp_path / "fleet/ops/ws"
