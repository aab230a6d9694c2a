"""Many agents from one config: an agent id selects its workspace, index, qmd state and LanceDB folder.

OpenClaw resolves the agent from the session key and keeps each agent's memory in its own
store (``~/.openclaw/agents/<agentId>/...``). memory-core's config names the agents in
``[[agents.list]]`` and derives each one's paths from its entry or from the ``[agents]`` path
templates (``{agent}`` is the id)::

    [agents]
    default = "main"
    workspace = "/srv/agents/{agent}/workspace"
    index_path = "/srv/agents/{agent}/memory.sqlite"
    [[agents.list]]
    id = "main"
    [[agents.list]]
    id = "ops"
    workspace = "/srv/ops-notes"            # overrides the template for this agent

Every entry point takes the agent: ``--agent`` (CLI), ``agent`` (MCP tools, flow parameters),
``$MEMORY_CORE_AGENT``. The rest of the config file applies to every agent. An id that is not
listed is one clear error (:class:`UnknownAgentError`); two agents that would share a
workspace, an index, a qmd state folder or a LanceDB folder are a configuration error, so no
agent ever sees another's memories.
"""

from __future__ import annotations

from typing import Any

from memory_core.config import AGENT_PATHS, AgentsSettings, Settings
from memory_core.errors import ConfigError, UsageError


class UnknownAgentError(UsageError):
    """An agent id the config does not list."""


def agents_of(config: dict[str, Any]) -> AgentsSettings:
    """The ``[agents]`` table of a config file's data (ConfigError when it is invalid)."""
    from memory_core.config import _format_validation_error

    try:
        return AgentsSettings.model_validate(config.get("agents") or {})
    except Exception as exc:  # pydantic's ValidationError, with the table's name in front
        from pydantic import ValidationError

        if isinstance(exc, ValidationError):
            raise ConfigError(_format_validation_error(exc).replace("invalid configuration: ",
                                                                    "invalid configuration: agents.")) from None
        raise


def agent_paths(agents: AgentsSettings, agent: str) -> dict[str, str | None]:
    """The paths of ``agent``: its entry's, else the templates' (``{agent}`` filled in)."""
    entry = next((a for a in agents.agents if a.id == agent), None)
    if entry is None:
        listed = ", ".join(agents.ids) or "none ([[agents.list]] is empty)"
        raise UnknownAgentError(f"unknown agent {agent!r}; the config's agents: {listed}")
    out: dict[str, str | None] = {}
    for key in AGENT_PATHS:
        value = getattr(entry, key) or getattr(agents, key)
        out[key] = value.replace("{agent}", agent) if value else None
    if not out["workspace"]:
        raise ConfigError(f"agent {agent!r} has no workspace: set workspace in its [[agents.list]] entry or the"
                          " agents.workspace template (\"/srv/agents/{agent}/workspace\")")
    return out


def agent_told(agents: AgentsSettings, agent: str) -> dict[str, Any]:
    """The settings ``agent`` tells a run or a reader (the layer of explicit settings)."""
    paths = agent_paths(agents, agent)
    told: dict[str, Any] = {"agent": agent, "workspace": paths["workspace"], "index_path": paths["index_path"],
                            "lancedb_path": paths["lancedb_path"]}
    if paths["qmd_state_dir"]:
        told["qmd"] = {"state_dir": paths["qmd_state_dir"]}
    return told


def check_isolated(by_agent: dict[str, Settings]) -> None:
    """ConfigError when two agents would share a workspace, index, qmd state or LanceDB folder."""
    from memory_core.storage.qmd import state_dir

    seen: dict[tuple[str, str], str] = {}
    for agent, s in by_agent.items():
        for what, path in (("workspace", s.workspace_dir), ("index", s.index_file), ("qmd state", state_dir(s)),
                           ("LanceDB folder", s.lancedb_dir)):
            other = seen.setdefault((what, str(path)), agent)
            if other != agent:
                raise ConfigError(f"agents {other!r} and {agent!r} share the {what} {path}: each agent needs its own"
                                  " (set it in their [[agents.list]] entries, or use {agent} in the agents template)")
