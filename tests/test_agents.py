"""Many agents from one config (issue 23 part 3): the agent id selects the workspace, index, qmd
state and LanceDB folder; ``--agent`` in the CLI; one MCP server serving two agents that never
see each other's memories (through the official MCP client over stdio); unknown agents and
shared paths are one clear error."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters, stdio_client

from memory_core.apps.cli import main
from memory_core.errors import ConfigError
from memory_core.runtime.agents import UnknownAgentError
from memory_core.runtime.resolve import resolve_agents, resolve_settings
from memory_core.storage.qmd import state_dir
from tests.conftest import ROOT
from tests.test_mcp import _run, _text


def make_fleet(tmp_path: Path) -> tuple[Path, dict[str, Path]]:
    """Two agents: alpha from the templates, beta with its own workspace; each with its own notes."""
    root = tmp_path / "agents"
    ws = {"alpha": root / "alpha" / "workspace", "beta": tmp_path / "beta-notes"}
    notes = {"alpha": "The walrus project budget is 9,100 EUR, approved by Priya.",
             "beta": "The narwhal migration moves the billing cluster on Friday."}
    for agent, w in ws.items():
        (w / "memory").mkdir(parents=True)
        (w / "MEMORY.md").write_text(f"# {agent}\n\n{notes[agent]}\n")
    cfg = tmp_path / "fleet.toml"
    cfg.write_text(f'''provider = "none"
[agents]
default = "alpha"
workspace = "{root}/{{agent}}/workspace"
index_path = "agents/{{agent}}/memory.sqlite"
[[agents.list]]
id = "alpha"
[[agents.list]]
id = "beta"
workspace = "{ws['beta']}"
lancedb_path = "{tmp_path}/lance/beta"
''')
    return cfg, ws


def test_an_agent_selects_its_paths_and_the_cli_takes_agent(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg, ws = make_fleet(tmp_path)
    fleet = resolve_agents(cfg)
    assert list(fleet) == ["alpha", "beta"]
    alpha, beta = fleet["alpha"], fleet["beta"]
    assert (alpha.agent, alpha.workspace_dir, alpha.index_file) == (
        "alpha", ws["alpha"], tmp_path / "agents" / "alpha" / "memory.sqlite")  # relative to the config file
    assert (beta.workspace_dir, beta.index_file) == (ws["beta"], tmp_path / "agents" / "beta" / "memory.sqlite")
    assert state_dir(alpha) == tmp_path / "agents" / "alpha" / "qmd"
    assert alpha.lancedb_dir == tmp_path / "agents" / "alpha" / "lancedb"
    assert beta.lancedb_dir == tmp_path / "lance" / "beta"
    assert alpha.flush_ledger_file != beta.flush_ledger_file
    # no agent named: agents.default; an explicit -w wins over the agent's
    assert resolve_settings({}, config_file=cfg).settings.agent == "alpha"
    assert resolve_settings({"workspace": str(ws["beta"])}, config_file=cfg).settings.workspace_dir == ws["beta"]
    # and so does $MEMORY_CORE_WORKSPACE (above a config file, as without agents; it was ignored for the
    # default agent's); an agent named explicitly still takes its own
    env = {"MEMORY_CORE_WORKSPACE": str(ws["beta"])}
    got = resolve_settings({}, config_file=cfg, env=env).settings
    assert (got.agent, got.workspace_dir) == (None, ws["beta"])
    assert resolve_settings({}, config_file=cfg, env=env, agent="alpha").settings.workspace_dir == ws["alpha"]

    for agent in ("alpha", "beta"):
        assert main(["index", "-c", str(cfg), "--agent", agent, "--engine", "local", "--no-progress"]) == 0
    capsys.readouterr()
    assert fleet["alpha"].index_file.exists() and fleet["beta"].index_file.exists()
    assert not (ws["alpha"] / ".memory-core").exists()  # the template's index, not the workspace default
    assert main(["search", "-c", str(cfg), "--agent", "beta", "walrus project budget", "--min-score", "0",
                 "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert all("walrus" not in r["snippet"] for r in res["results"])
    assert main(["search", "-c", str(cfg), "--agent", "alpha", "walrus project budget", "--json"]) == 0
    assert "walrus project budget" in json.loads(capsys.readouterr().out)["results"][0]["snippet"]
    assert main(["status", "-c", str(cfg), "--agent", "beta", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["index_path"] == str(beta.index_file)

    # an unknown agent, or an agent without a config: one line, exit 2, nothing written
    for argv in (["search", "-c", str(cfg), "--agent", "gamma", "walrus"],
                 ["write", "-c", str(cfg), "--agent", "gamma", "x"],
                 ["search", "-w", str(ws["beta"]), "--agent", "alpha", "walrus"]):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert "unknown agent" in err and err.count("\n") == 1, err
    assert "the config's agents: alpha, beta" in (main(["status", "-c", str(cfg), "--agent", "Gamma/.."]) == 2
                                                  and capsys.readouterr().err)


def test_agents_sharing_a_store_or_badly_listed_are_config_errors(tmp_path: Path) -> None:
    cfg, ws = make_fleet(tmp_path)
    shared = tmp_path / "shared.toml"
    shared.write_text(cfg.read_text().replace('index_path = "agents/{agent}/memory.sqlite"',
                                              'index_path = "agents/one.sqlite"'))
    with pytest.raises(ConfigError, match="agents 'alpha' and 'beta' share the index"):
        resolve_agents(shared)
    with pytest.raises(UnknownAgentError, match="unknown agent 'gamma'"):
        resolve_agents(cfg, ["alpha", "gamma"])
    dup = tmp_path / "dup.toml"
    dup.write_text(cfg.read_text() + '[[agents.list]]\nid = "beta"\n')
    with pytest.raises(ConfigError, match="agent beta is listed twice"):
        resolve_agents(dup)
    bad = tmp_path / "bad.toml"
    bad.write_text(cfg.read_text().replace('id = "beta"', 'id = "../beta"'))
    with pytest.raises(ConfigError, match="agents.list"):
        resolve_agents(bad)


def test_two_agents_through_one_mcp_server_never_see_each_other(tmp_path: Path) -> None:
    cfg, ws = make_fleet(tmp_path)
    for agent in ("alpha", "beta"):
        assert main(["index", "-c", str(cfg), "--agent", agent, "--engine", "local", "--no-progress"]) == 0
    errlog = open(tmp_path / "server.err", "w")  # noqa: SIM115 - closed below
    seen: dict[str, Any] = {}

    async def search(client: Any, agent: str | None, query: str) -> list[dict[str, Any]]:
        args: dict[str, Any] = {"query": query, "minScore": 0, "maxResults": 20}
        if agent:
            args["agent"] = agent
        r = await client.call_tool("memory_search", args)
        assert not r.is_error, _text(r)
        assert r.structured_content["agent"] == (agent or "alpha")
        return r.structured_content["results"]

    async def fleet_session() -> None:
        params = StdioServerParameters(command=sys.executable, cwd=str(ROOT),
                                       args=["-m", "memory_core.apps.cli", "mcp", "-c", str(cfg)])
        async with Client(stdio_client(params, errlog=errlog)) as client:
            tools = {t.name: t for t in (await client.list_tools()).tools}
            for t in tools.values():
                assert t.input_schema["properties"]["agent"]["enum"] == ["alpha", "beta"]
            alpha = await search(client, "alpha", "walrus project budget")
            assert "walrus project budget" in alpha[0]["snippet"]
            assert all("narwhal" not in h["snippet"] for h in alpha)
            beta = await search(client, "beta", "walrus project budget")
            assert all("walrus" not in h["snippet"] for h in beta)
            assert "narwhal migration" in (await search(client, "beta", "narwhal migration"))[0]["snippet"]
            assert all("narwhal" not in h["snippet"] for h in await search(client, None, "narwhal migration"))

            # a note written for beta is found for beta, and never for alpha
            w = await client.call_tool("memory_write", {"agent": "beta", "text": "The okapi audit is due in May."})
            assert not w.is_error and w.structured_content["indexed"], _text(w)
            assert "okapi audit" in (await search(client, "beta", "okapi audit"))[0]["snippet"]
            assert all("okapi" not in h["snippet"] for h in await search(client, "alpha", "okapi audit"))
            assert not list((ws["alpha"] / "memory").iterdir())
            # alpha's files cannot be read through beta
            g = await client.call_tool("memory_get", {"agent": "beta", "path": str(ws["alpha"] / "MEMORY.md")})
            assert g.is_error and "walrus" not in _text(g)
            st = await client.call_tool("memory_status", {"agent": "beta"})
            seen["status"] = st.structured_content
            bad = await client.call_tool("memory_search", {"agent": "gamma", "query": "walrus"})
            assert bad.is_error and "unknown agent 'gamma'" in _text(bad) and "alpha, beta" in _text(bad)

        # one agent per connection: --agent pins it, and the tools take no agent
        params = StdioServerParameters(command=sys.executable, cwd=str(ROOT),
                                       args=["-m", "memory_core.apps.cli", "mcp", "-c", str(cfg), "--agent", "beta"])
        async with Client(stdio_client(params, errlog=errlog)) as client:
            tools = {t.name: t for t in (await client.list_tools()).tools}
            assert "agent" not in tools["memory_search"].input_schema["properties"]
            r = await client.call_tool("memory_search", {"query": "okapi audit", "minScore": 0})
            assert "okapi audit" in r.structured_content["results"][0]["snippet"]

    try:
        _run(fleet_session)
    finally:
        errlog.close()
    assert seen["status"]["index_path"] == str(tmp_path / "agents" / "beta" / "memory.sqlite")
    assert "Traceback" not in (tmp_path / "server.err").read_text()


def _shared_setups(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    """Configs where two agents would see each other's memories without sharing a path by
    name (issue 39, A1), with what the error must say."""
    cfg, ws = make_fleet(tmp_path)
    base = cfg.read_text()
    out: dict[str, tuple[Path, str]] = {}
    # a global [sessions] dir: every agent indexes the same transcripts
    (tmp_path / "all-sessions").mkdir()
    p = tmp_path / "sessions.toml"
    p.write_text('sources = ["memory", "sessions"]\n' + base.replace(
        "[agents]", f'[sessions]\ndir = "{tmp_path}/all-sessions"\n[agents]', 1))
    out["sessions"] = (p, "share the sessions folder")
    # a workspace nested in another's (beta's notes inside alpha's memory/ folder)
    p = tmp_path / "nested.toml"
    p.write_text(base.replace(f'workspace = "{ws["beta"]}"', f'workspace = "{ws["alpha"]}/memory/beta"'))
    out["nested"] = (p, "is inside agent")
    # a symlinked alias of alpha's workspace as beta's (its index and store beside it)
    alias = tmp_path / "beta-alias"
    alias.symlink_to(ws["alpha"], target_is_directory=True)
    p = tmp_path / "alias.toml"
    p.write_text(base.replace(f'workspace = "{ws["beta"]}"', f'workspace = "{alias}"'))
    out["alias"] = (p, "share the workspace")
    # a symlinked alias of alpha's index folder as beta's: one index, one store
    (tmp_path / "agents" / "alpha").mkdir(parents=True, exist_ok=True)
    (tmp_path / "beta-index").symlink_to(tmp_path / "agents" / "alpha", target_is_directory=True)
    p = tmp_path / "index-alias.toml"
    p.write_text(base.replace(f'lancedb_path = "{tmp_path}/lance/beta"',
                              f'lancedb_path = "{tmp_path}/beta-index/lancedb"\nindex_path = "{tmp_path}/beta-index/memory.sqlite"'))
    out["index alias"] = (p, "share the index")
    return out


def test_agents_that_would_see_each_other_are_refused_on_every_entry_point(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A global sessions folder, a nested workspace and symlinked aliases (of a workspace, of an
    index's folder) are refused like a shared path: for the fleet (MCP server without --agent),
    for one agent's settings (--agent, $MEMORY_CORE_AGENT, agents.default), and by the CLI with
    one line and exit 2, before anything is read or written."""
    for name, (cfg, says) in _shared_setups(tmp_path).items():
        with pytest.raises(ConfigError, match=says):
            resolve_agents(cfg)
        with pytest.raises(ConfigError, match=says):
            resolve_agents(cfg, ["alpha"])  # serving one agent still checks it against the others
        for agent in ("alpha", "beta"):
            with pytest.raises(ConfigError, match=says):
                resolve_settings({}, config_file=cfg, agent=agent)
        with pytest.raises(ConfigError, match=says):
            resolve_settings({}, config_file=cfg, env={"MEMORY_CORE_AGENT": "beta"})
        with pytest.raises(ConfigError, match=says):
            resolve_settings({}, config_file=cfg)  # agents.default
        for argv in (["search", "-c", str(cfg), "--agent", "beta", "walrus"],
                     ["index", "-c", str(cfg), "--agent", "alpha", "--engine", "local", "--no-progress"]):
            assert main(argv) == 2, (name, argv)
            err = capsys.readouterr().err
            assert says in err and err.count("\n") == 1 and "Traceback" not in err, (name, err)
        assert not (tmp_path / "agents" / "alpha" / "memory.sqlite").exists(), name
    # the well-separated fleet still resolves, and a -w of another agent's workspace is refused
    cfg, ws = make_fleet(tmp_path / "ok")
    assert list(resolve_agents(cfg)) == ["alpha", "beta"]
    assert resolve_settings({}, config_file=cfg, agent="beta").settings.workspace_dir == ws["beta"]
    with pytest.raises(ConfigError, match="share the workspace"):
        resolve_settings({"workspace": str(ws["alpha"])}, config_file=cfg, agent="beta")


def test_agents_may_share_a_documents_folder_but_not_index_anothers_workspace(tmp_path: Path) -> None:
    cfg, ws = make_fleet(tmp_path)
    docs = tmp_path / "team-docs"
    docs.mkdir()
    shared = tmp_path / "docs.toml"
    shared.write_text(f'extra_paths = ["{docs}"]\n' + cfg.read_text())
    assert list(resolve_agents(shared)) == ["alpha", "beta"]
    into = tmp_path / "into.toml"
    into.write_text(f'extra_paths = ["{ws["beta"]}/memory"]\n' + cfg.read_text())
    with pytest.raises(ConfigError, match="extra path .* is inside agent 'beta'"):
        resolve_agents(into)


def test_the_agent_a_call_serves_is_decided_in_one_place(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``--agent``, else ``$MEMORY_CORE_AGENT`` (runtime.agents.requested_agent): the settings and
    the MCP server's choice between one agent and the whole fleet ask the same function, so
    ``$MEMORY_CORE_AGENT`` makes ``memory-core mcp`` serve that agent alone, as ``--agent`` does."""
    from memory_core.apps.cli import _fleet, build_parser
    from memory_core.runtime.agents import requested_agent

    cfg, ws = make_fleet(tmp_path)
    monkeypatch.delenv("MEMORY_CORE_AGENT", raising=False)
    parse = build_parser().parse_args
    fleet = _fleet(parse(["mcp", "-c", str(cfg)]))
    assert fleet is not None and list(fleet) == ["alpha", "beta"]
    assert _fleet(parse(["mcp", "-c", str(cfg), "--agent", "beta"])) is None
    monkeypatch.setenv("MEMORY_CORE_AGENT", "beta")
    assert requested_agent(None) == "beta" and requested_agent("alpha") == "alpha"
    assert _fleet(parse(["mcp", "-c", str(cfg)])) is None  # one agent: beta, as resolve_settings says
    assert resolve_settings({}, config_file=cfg).settings.workspace_dir == ws["beta"]
    assert parse(["search", "-c", str(cfg), "x"]).agent is None  # the flag's default is not the variable


def test_an_empty_agent_is_refused_not_taken_for_the_default(tmp_path: Path, openai_fake: Any,
                                                             monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """A2: ``--agent ""`` (a script's ``--agent "$AGENT"`` with the variable unset),
    ``open_memory(agent="")`` and ``resolve_settings(agent="")`` acted on agents.default's memory
    (a forget meant for some agent deleted from another's store) while the MCP server refused ""
    as unknown. Only an agent not given at all falls back to $MEMORY_CORE_AGENT or the default."""
    from memory_core.api import open_memory
    from memory_core.notes.memory_store import MemoryStore
    from memory_core.runtime.agents import requested_agent
    from tests.conftest import openai_settings

    cfg, ws = make_fleet(tmp_path)
    monkeypatch.delenv("MEMORY_CORE_AGENT", raising=False)
    alpha = resolve_agents(cfg)["alpha"]
    with MemoryStore(openai_settings(ws["alpha"], openai_fake), path=alpha.lancedb_dir) as s:
        mid = s.store("alpha's private memory: the vault code is 4417").memory.id
    for empty in ("", "  "):
        with pytest.raises(UnknownAgentError, match="empty agent id"):
            requested_agent(empty, {"MEMORY_CORE_AGENT": "beta"})
        with pytest.raises(UnknownAgentError, match="empty agent id"):
            resolve_settings({}, config_file=cfg, agent=empty, env={})
        with pytest.raises(UnknownAgentError, match="empty agent id"):
            open_memory(config=cfg, agent=empty)
    for argv in (["memory", "forget", "-c", str(cfg), "--agent", "", mid], ["memory", "list", "-c", str(cfg),
                 "--agent", ""], ["search", "-c", str(cfg), "--agent", " ", "vault"],
                 ["mcp", "-c", str(cfg), "--agent", ""]):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert "unknown agent" in err and err.count("\n") == 1, (argv, err)
    with MemoryStore(alpha) as s:
        assert s.get(mid) is not None, "a forget with an empty agent deleted the default agent's memory"
    # not given: $MEMORY_CORE_AGENT, else agents.default
    assert requested_agent(None, {"MEMORY_CORE_AGENT": "beta"}) == "beta"
    assert requested_agent(None, {}) is None
    assert resolve_settings({}, config_file=cfg, env={}).settings.agent == "alpha"


def test_a_lancedb_folder_overlapping_another_agents_folders_is_refused(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """S8: only LanceDB folders that were exactly equal were refused. Agent a's ``lancedb_path``
    inside agent b's workspace (its notes folder), nested in b's LanceDB folder, or holding b's
    index folder was accepted, and a's damaged store then renamed b's notes folder away. A LanceDB
    folder that is, lies inside or contains another agent's LanceDB folder, workspace or index
    folder is now a configuration error, on every entry point."""
    cfg, ws = make_fleet(tmp_path)
    base = cfg.read_text()
    beta_lance = f'lancedb_path = "{tmp_path}/lance/beta"'
    setups = {
        "in beta's notes": (base.replace('id = "alpha"', f'id = "alpha"\nlancedb_path = "{ws["beta"]}/memory"'),
                            "agent 'alpha''s LanceDB folder .* is inside agent 'beta''s workspace"),
        "nested stores": (base.replace(beta_lance, f'lancedb_path = "{tmp_path}/agents/alpha/lancedb/beta"'),
                          "LanceDB folder .* (is inside|contains) agent '(alpha|beta)''s LanceDB folder"),
        "holds an index": (base.replace(beta_lance, f'lancedb_path = "{tmp_path}/agents"'),
                           "LanceDB folder .* (is inside|contains) agent '(alpha|beta)''s LanceDB folder"),
        "in an index folder": (base.replace(beta_lance, f'lancedb_path = "{tmp_path}/agents/alpha/beta-store"'),
                               "agent 'beta''s LanceDB folder .* is inside agent 'alpha''s index folder"),
        "is a workspace": (base.replace(beta_lance, f'lancedb_path = "{ws["alpha"]}"'),
                           "agent 'beta''s LanceDB folder is agent 'alpha''s workspace"),
    }
    for name, (text, says) in setups.items():
        p = tmp_path / f"{name.replace(' ', '-')}.toml"
        p.write_text(text)
        with pytest.raises(ConfigError, match=says):
            resolve_agents(p)
        for agent in ("alpha", "beta"):
            with pytest.raises(ConfigError, match=says):
                resolve_settings({}, config_file=p, agent=agent)
        assert main(["memory", "list", "-c", str(p), "--agent", "alpha"]) == 2, name
        err = capsys.readouterr().err
        assert "LanceDB folder" in err and err.count("\n") == 1, (name, err)
    assert sorted(p.name for p in (ws["beta"] / "memory").iterdir()) == []  # nothing written there
    assert list(resolve_agents(cfg)) == ["alpha", "beta"]  # the well-separated fleet still resolves


def test_a_run_naming_no_agent_cannot_write_a_listed_agents_memory(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """With a config that lists agents and no agent named (a workspace or an index given instead,
    by flags or $MEMORY_CORE_WORKSPACE / $MEMORY_CORE_INDEX), alpha's workspace into beta's index
    was accepted: beta's index was rewritten with alpha's notes and beta's searches showed them
    (twenty-third session's audit, F2). Refused, one line, exit 2, nothing written; an agent's own
    workspace and index, and a scratch index of a workspace, still run without naming it."""
    cfg, ws = make_fleet(tmp_path)
    beta_index = resolve_settings({}, config_file=cfg, agent="beta").settings.index_file
    alpha_index = resolve_settings({}, config_file=cfg, agent="alpha").settings.index_file
    says = "belongs to agent 'beta'"
    with pytest.raises(ConfigError, match=says):
        resolve_settings({"workspace": str(ws["alpha"]), "index_path": str(beta_index)}, config_file=cfg)
    with pytest.raises(ConfigError, match=says):
        resolve_settings({}, config_file=cfg, env={"MEMORY_CORE_WORKSPACE": str(ws["alpha"]),
                                                   "MEMORY_CORE_INDEX": str(beta_index)})
    with pytest.raises(ConfigError, match="LanceDB folder .* belongs to agent 'beta'"):
        resolve_settings({"workspace": str(ws["alpha"]), "lancedb_path": str(tmp_path / "lance" / "beta")},
                         config_file=cfg)
    assert main(["index", "-c", str(cfg), "--agent", "beta", "--engine", "local", "--no-progress"]) == 0
    capsys.readouterr()
    note, index = (ws["alpha"] / "MEMORY.md").read_bytes(), beta_index.read_bytes()
    for argv in (["write", "-c", str(cfg), "-w", str(ws["alpha"]), "--index", str(beta_index), "payroll moves"],
                 ["index", "-c", str(cfg), "-w", str(ws["alpha"]), "--index", str(beta_index), "--engine", "local",
                  "--no-progress"]):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert says in err and err.count("\n") == 1, err
    assert (ws["alpha"] / "MEMORY.md").read_bytes() == note and beta_index.read_bytes() == index
    # the agent's own paths, named or not; a scratch index of its workspace
    got = resolve_settings({"workspace": str(ws["alpha"]), "index_path": str(alpha_index)}, config_file=cfg)
    assert got.settings.index_file == alpha_index
    scratch = tmp_path / "scratch.sqlite"
    assert resolve_settings({"workspace": str(ws["alpha"]), "index_path": str(scratch)},
                            config_file=cfg).settings.index_file == scratch


def test_builtin_agents_whose_indexes_share_a_folder_are_not_told_they_share_a_qmd_state(tmp_path: Path) -> None:
    """``index_path = "/srv/idx/{agent}.sqlite"`` with the builtin backend was refused as sharing
    "the qmd state", a folder neither agent uses (twenty-third session's audit). With a store of
    each its own it resolves; with ``backend = "qmd"`` the shared qmd state is still refused."""
    for name in ("main", "ops"):
        (tmp_path / name / "memory").mkdir(parents=True)
    cfg = tmp_path / "fleet.toml"
    body = f'''provider = "none"
[agents]
workspace = "{tmp_path}/{{agent}}"
index_path = "{tmp_path}/idx/{{agent}}.sqlite"
lancedb_path = "{tmp_path}/stores/{{agent}}"
[[agents.list]]
id = "main"
[[agents.list]]
id = "ops"
'''
    cfg.write_text(body)
    assert list(resolve_agents(cfg)) == ["main", "ops"]
    cfg.write_text('backend = "qmd"\n' + body)
    with pytest.raises(ConfigError, match="share the qmd state"):
        resolve_agents(cfg)
