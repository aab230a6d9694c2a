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
workspace, an index, a qmd state folder or a LanceDB folder, by any name (symlinks resolved),
whose workspaces, indexed sessions folders or extra paths overlap (one inside another, a global
``[sessions] dir``), or one of whose LanceDB folder overlaps the other's LanceDB folder,
workspace or index folder, are a configuration error, checked wherever an agent's settings are
resolved (:func:`check_agent_isolated`), so no agent ever sees another's memories.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from memory_core.config import AGENT_PATHS, AgentsSettings, Settings
from memory_core.errors import ConfigError, UsageError


class UnknownAgentError(UsageError):
    """An agent id the config does not list."""


def agents_of(config: dict[str, Any]) -> AgentsSettings:
    """The ``[agents]`` table of a config file's data (ConfigError when it is invalid)."""
    from memory_core.config import _format_validation_error
    from memory_core.settings_model import ValidationError

    try:
        return AgentsSettings.model_validate(config.get("agents") or {})
    except ValidationError as exc:  # with the table's name in front
        raise ConfigError(_format_validation_error(exc).replace("invalid configuration: ",
                                                                "invalid configuration: agents.")) from None


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


def agent_told(agents: AgentsSettings, agent: str) -> dict[str, object]:
    """The settings ``agent`` tells a run or a reader (the layer of explicit settings)."""
    paths = agent_paths(agents, agent)
    # an agent's index is its own even when unset: the default place in its workspace, told here
    # so that $MEMORY_CORE_INDEX (set for another tool or workspace) cannot take its place
    index_path = paths["index_path"] or str(Settings(workspace=Path(str(paths["workspace"]))).index_file)
    told: dict[str, Any] = {"agent": agent, "workspace": paths["workspace"], "index_path": index_path,
                            "lancedb_path": paths["lancedb_path"]}
    if paths["qmd_state_dir"]:
        told["qmd"] = {"state_dir": paths["qmd_state_dir"]}
    return told


def _real(path: str | os.PathLike[str]) -> Path:
    """The path with every symlink of its existing part resolved: two names of one folder (an
    alias made with ``ln -s``) compare equal."""
    return Path(os.path.realpath(os.path.expanduser(os.fspath(path))))


def _overlap(a: Path, b: Path) -> bool:
    """Whether one of the two folders is the other or inside it."""
    return a == b or a in b.parents or b in a.parents


def _read_paths(s: Settings) -> list[tuple[str, Path]]:
    """What an agent's index reads: its workspace, its sessions folder (when it indexes
    transcripts) and its extra paths, real paths."""
    out = [("workspace", _real(s.workspace_dir))]
    if "sessions" in s.sources:
        out.append(("sessions folder", _real(s.sessions_dir)))
    for raw in s.extra_paths:
        p = os.path.expanduser(raw)
        out.append(("extra path", _real(p if os.path.isabs(p) else os.path.join(s.workspace_dir, p))))
    return out


def isolation_problem(a: str, sa: Settings, b: str, sb: Settings) -> str | None:
    """Why agents ``a`` and ``b`` would see each other's memories, or None.

    They must not share (by any name: symlinks are resolved) an index, a qmd state folder or a
    LanceDB folder; one's LanceDB folder must not lie inside or contain the other's LanceDB
    folder, workspace or index folder; one's qmd state folder (``backend = "qmd"``: its
    transcripts exported there) must not be, lie inside or contain anything the other indexes or
    writes; and what one indexes (workspace, sessions folder when it indexes
    transcripts, extra paths) must not be, contain or lie inside what the other indexes: a
    global ``[sessions] dir``, a workspace nested in another's, or an alias of another's
    workspace would hand one agent the other's notes or transcripts. Two agents may index the
    same extra path (shared documents: neither writes its memories there)."""
    for what, pa, pb in _written_by_both(sa, sb):
        if _real(pa) == _real(pb):
            alias = "" if str(pa) == str(pb) else f" (as {pa} and {pb})"
            return f"agents {a!r} and {b!r} share the {what} {_real(pa)}{alias}"
    problem = (_store_overlap(a, sa, b, sb) or _store_overlap(b, sb, a, sa)
               or _qmd_overlap(a, sa, b, sb) or _qmd_overlap(b, sb, a, sa))
    if problem:
        return problem
    for what_a, pa in _read_paths(sa):
        for what_b, pb in _read_paths(sb):
            if not _overlap(pa, pb) or what_a == what_b == "extra path":
                continue  # a folder of shared documents two agents both index is no one's memory
            if pa == pb and what_a == what_b:
                return f"agents {a!r} and {b!r} share the {what_a} {pa}"
            if pa == pb:
                return f"agent {a!r}'s {what_a} is agent {b!r}'s {what_b} ({pa})"
            inner, outer = ((a, what_a, pa), (b, what_b, pb)) if pb in pa.parents else ((b, what_b, pb), (a, what_a, pa))
            return f"agent {inner[0]!r}'s {inner[1]} {inner[2]} is inside agent {outer[0]!r}'s {outer[1]} {outer[2]}"
    return None


def _written_by_both(sa: Settings, sb: Settings) -> list[tuple[str, Path, Path]]:
    """What two settings each write that must not be one: (what, a's, b's) for the index, the qmd
    state folder and the LanceDB folder. The qmd state only where qmd runs: two builtin agents
    whose indexes share a folder were told they "share the qmd state", a folder neither uses (the
    twenty-third session's audit)."""
    from memory_core.storage.qmd import state_dir

    qmd = sa.backend == "qmd" or sb.backend == "qmd"
    return [("index", sa.index_file, sb.index_file),
            *([("qmd state", state_dir(sa), state_dir(sb))] if qmd else []),
            ("LanceDB folder", sa.lancedb_dir, sb.lancedb_dir)]


def _folder_overlap(a: str, kind: str, mine: Path, b: str, others: list[tuple[str, Path]]) -> str | None:
    """Why agent ``a``'s folder ``mine`` (a ``kind``) is, lies inside or contains one of agent
    ``b``'s ``others`` (real paths), or None."""
    for what, other in others:
        if mine == other:
            return f"agent {a!r}'s {kind} is agent {b!r}'s {what} ({mine})"
        if other in mine.parents:
            return f"agent {a!r}'s {kind} {mine} is inside agent {b!r}'s {what} {other}"
        if mine in other.parents:
            return f"agent {a!r}'s {kind} {mine} contains agent {b!r}'s {what} {other}"
    return None


def _store_overlap(a: str, sa: Settings, b: str, sb: Settings) -> str | None:
    """Why agent ``a``'s LanceDB folder overlaps agent ``b``'s LanceDB folder, workspace or index
    folder (is it, lies inside it or contains it), or None: ``a``'s store would write its table
    among ``b``'s files (and set it aside there when damaged)."""
    return _folder_overlap(a, "LanceDB folder", _real(sa.lancedb_dir), b, [
        ("LanceDB folder", _real(sb.lancedb_dir)), ("workspace", _real(sb.workspace_dir)),
        ("index folder", _real(sb.index_file.parent))])


def _qmd_overlap(a: str, sa: Settings, b: str, sb: Settings) -> str | None:
    """Why agent ``a``'s qmd state folder (with ``backend = "qmd"``: its transcripts exported
    there as Markdown, redacted but whole) overlaps what agent ``b`` indexes or writes (its
    workspace, sessions folder, extra paths, index folder, LanceDB folder), or None: ``b``
    would index ``a``'s conversations, or ``a`` would export among ``b``'s files."""
    from memory_core.storage.qmd import state_dir

    if sa.backend != "qmd":
        return None
    return _folder_overlap(a, "qmd state folder", _real(state_dir(sa)), b, [
        *_read_paths(sb), ("index folder", _real(sb.index_file.parent)), ("LanceDB folder", _real(sb.lancedb_dir))])


AGENT_ENV = "MEMORY_CORE_AGENT"


def requested_agent(given: str | None, env: Mapping[str, str] | None = None) -> str | None:
    """The agent a call names, decided here for every entry point: ``given`` (``--agent``, the
    API's ``agent=``), else ``$MEMORY_CORE_AGENT``; None: none named (then
    :func:`memory_core.runtime.resolve.resolve_settings` takes the config's ``agents.default``
    and ``memory-core mcp`` with a config listing agents serves them all).

    An agent given empty (``--agent ""``: a script's ``--agent "$AGENT"`` with the variable unset,
    ``open_memory(agent="")``) names no agent: :class:`UnknownAgentError`, as the MCP server
    answers, never the default agent's memory; so does ``$MEMORY_CORE_AGENT`` set but empty. Only
    ``None`` (and the variable unset) falls back."""
    env = os.environ if env is None else env
    if given is not None:
        if not given.strip():
            raise UnknownAgentError(f"unknown agent {given!r}: an empty agent id names no agent (give one of the"
                                    " config's [[agents.list]] ids, or no --agent for agents.default)")
        return given
    named = env.get(AGENT_ENV)
    if named is not None and not named.strip():  # `MEMORY_CORE_AGENT=$AGENT` with $AGENT unset: as `--agent ""`
        raise UnknownAgentError(f"unknown agent {named!r}: ${AGENT_ENV} is set but empty, and an empty agent id"
                                " names no agent (unset it for agents.default, or give one of the config's"
                                " [[agents.list]] ids)")
    return named or None


_FIX = ": each agent needs its own (set it in their [[agents.list]] entries, or use {agent} in the agents template)"


def check_isolated(by_agent: dict[str, Settings]) -> None:
    """ConfigError when two of these agents would see each other's memories
    (:func:`isolation_problem`)."""
    names = list(by_agent)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            problem = isolation_problem(a, by_agent[a], b, by_agent[b])
            if problem:
                raise ConfigError(problem + _FIX)


def check_unnamed_run(settings: Settings, agents: AgentsSettings,
                      settings_of: Callable[[str], Settings | None]) -> None:
    """ConfigError when a run that names no agent (a workspace or an index given instead, with a
    config file that lists agents) would write a listed agent's index, qmd state or LanceDB folder
    from a workspace that is not that agent's: ``MEMORY_CORE_INDEX=<ops index> index -c fleet.toml``
    from main's workspace rewrote ops's index with main's notes, and ops's searches then showed
    them (an outside audit, twenty-third session). The agent's own workspace with its own index
    is that agent, named or not, and gets that agent's whole check (:func:`check_agent_isolated`):
    ``-w <main ws> --index <main idx> --extra-path <ops ws>`` put ops's notes in main's index where
    ``--agent main --extra-path <ops ws>`` was refused (an outside audit, A1). ``settings_of(other)``:
    another agent's settings as the config gives them (None: they do not resolve, and nothing can
    be compared)."""
    ws = _real(settings.workspace_dir)
    listed = {other: settings_of(other) for other in agents.ids}
    for other, so in listed.items():
        if so is None or _real(so.workspace_dir) != ws:
            continue
        # this workspace is that agent's: writing its index, qmd state or LanceDB folder, the run is that agent
        if any(_real(mine) == _real(theirs) for _, mine, theirs in _written_by_both(settings, so)):
            check_agent_isolated(other, settings, agents, listed.__getitem__)
    for other, so in listed.items():
        if so is None or _real(so.workspace_dir) == ws:
            continue
        for what, mine, theirs in _written_by_both(settings, so):
            if _real(mine) == _real(theirs):
                raise ConfigError(
                    f"the {what} {_real(mine)} belongs to agent {other!r}, and this run's workspace"
                    f" {settings.workspace_dir} is not that agent's ({so.workspace_dir}): name the agent"
                    f" (--agent {other}) to index its own workspace, or give this workspace another {what}")


def check_agent_isolated(agent: str, settings: Settings, agents: AgentsSettings,
                         settings_of: Callable[[str], Settings | None]) -> None:
    """ConfigError when ``agent``, with the ``settings`` just resolved for it (flags included),
    would see another listed agent's memories. Called wherever the settings of one agent are
    resolved (:func:`memory_core.runtime.resolve.resolve_settings`: the CLI's ``--agent``, the
    MCP server's ``--agent``, the API, the flows, ``$MEMORY_CORE_AGENT``, ``agents.default``);
    ``settings_of(other)``: another agent's settings as the config gives them (None: they do not
    resolve, and nothing can be compared)."""
    for other in agents.ids:
        so = settings_of(other) if other != agent else None
        if so is None:
            continue
        problem = isolation_problem(agent, settings, other, so)
        if problem:
            raise ConfigError(problem + _FIX)
