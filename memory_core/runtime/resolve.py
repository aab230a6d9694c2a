"""Which settings a run uses: flags > environment > config file > the live index > defaults.

Above :mod:`memory_core.config` (the settings model) and :mod:`memory_core.storage.indexmeta` (what an
index records), so neither imports the other's user: every entry point calls
:func:`resolve_settings`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memory_core.config import (
    _ENV_KEYS,
    ENV_LABEL,
    ORIGIN_DEFAULT,
    ORIGIN_INDEX,
    Settings,
    _deep_merge,
    _drop_none,
    _env_layer,
    _validate,
    dotted,
    read_config_file,
    value_source,
)
from memory_core.errors import MemoryCoreError
from memory_core.storage.indexmeta import IndexRecord
from memory_core.storage.store import probe_index

# -- resolution: flags > environment > config file > the live index > defaults -------------------

WORKSPACE_CONFIG_NAME = "memory-core.toml"
"""A config file at ``<workspace>/memory-core.toml`` is used when none is given."""

# The settings an index records (memory_core.storage.indexmeta) and whose origin a run reports.
RECORDED = ("workspace", "index_path", "sources", "extra_paths", "sessions.dir", "sessions.recursive", "redact",
            "chunking.tokens", "chunking.overlap", "provider", "model", "remote")
ORIGIN_CWD = "the current directory"
"""The workspace's origin when nothing named one (no flag, variable, config file or index record)."""


@dataclass(frozen=True)
class SettingChange:
    """A setting whose value differs from what the live index recorded, and where the new one came from."""

    setting: str
    old: Any
    new: Any
    origin: str

    def line(self) -> str:
        """The change in words, with no secret in it: a base URL's password (and credential query
        values) masked, every registered secret scrubbed. It printed the configured
        ``remote.base_url`` whole, password and all, on stderr (and so into a flow's logs)."""
        from memory_core.secrets import scrub

        return scrub(f"{self.setting} changed from {_show(_masked(self.old))} to {_show(_masked(self.new))}"
                     f" (from {self.origin})")


@dataclass(frozen=True)
class ResolvedSettings:
    """The outcome of :func:`resolve_settings`."""

    settings: Settings
    config_file: Path | None  # the config file used, if any
    config_found: bool  # it was found in the workspace (not given)
    has_index: bool  # a live index was found and read
    changes: list[SettingChange]

    @property
    def origins(self) -> dict[str, str]:
        return self.settings.origins


def _show(value: Any) -> str:
    if isinstance(value, list):
        return "[" + ", ".join(str(v) for v in value) + "]"
    return str(value)


def _masked(value: object) -> object:
    """``value`` with every URL in it (a ``remote.base_url``, also inside a dict or a list) as an
    index records it: its password and credential query values ``***``."""
    from memory_core.secrets import url_without_password

    if isinstance(value, dict):
        return {k: _masked(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_masked(v) for v in value]
    if isinstance(value, str) and "://" in value:
        return url_without_password(value)
    return value


def _recorded_value(settings: Settings, key: str) -> object:
    """A recorded setting of ``settings``, in the form the index records it."""
    if key == "workspace":
        return str(settings.workspace_dir)
    if key == "sessions.dir":
        return str(settings.sessions_dir)
    if key in ("sources", "extra_paths"):
        return sorted(getattr(settings, key))
    if key == "remote":
        # the base URL as the index records it (memory_core.storage.indexmeta: masked): compared with
        # the raw URL, one with a password was a change on every run, printed with the password
        r = settings.remote
        return {k: v for k, v in (("base_url", _masked(r.base_url)), ("dimensions", r.dimensions),
                                  ("api_version", r.api_version)) if v is not None}
    value: Any = settings
    for part in key.split("."):
        value = getattr(value, part)
    return value


FLAG_NAMES = {"provider": "--provider", "model": "--model", "extra_paths": "--extra-path", "sources": "--sessions",
              "workspace": "--workspace", "index_path": "--index"}
"""The CLI's flag for each setting it tells (``told_by`` of its commands: messages say where a
value came from, ``provider (from --provider)``); here, not in an entry point, so every command
(``eval`` in its own module too) names them alike."""


_PATH_WHAT = {"workspace": "workspace", "index_path": "index file"}


def refuse_empty_paths(told: dict[str, Any], told_by: dict[str, str] | str = "{}") -> None:
    """UsageError when a workspace or an index is told empty (``-w ""``, a script's ``-w "$WS"``
    with the variable unset, ``open_memory("")``): ``os.path.abspath("")`` is the current folder,
    and ``write -w ""`` wrote a daily note and built an index wherever the script ran (an outside
    audit, A3). Told means given explicitly: a ``MEMORY_CORE_*`` variable set but empty is unset
    (the config layer), as a flow parameter left ``""`` by a deployment's template is."""
    from memory_core.errors import UsageError

    for key, what in _PATH_WHAT.items():
        value = told.get(key)
        if isinstance(value, str) and not value.strip():
            by = (told_by.get(key) or key) if isinstance(told_by, dict) else told_by.format(key)
            raise UsageError(f"{by} is empty: an empty path is not the current folder; give the {what}'s path,"
                             f" or leave {by} out")


def refuse_empty_config(config_file: object, by: str) -> None:
    """UsageError when the config file is told empty (``-c ""``, a script's ``-c "$CFG"`` with the
    variable unset, ``open_memory(config="")``): it was taken for "not told", so the run read
    ``$MEMORY_CORE_CONFIG`` or ``<workspace>/memory-core.toml`` instead, where ``-w ""`` and
    ``--index ""`` are refused (A3, the fortieth session). ``by``: the flag or argument, for the
    message. ``$MEMORY_CORE_CONFIG`` set but empty stays unset, as the other variables."""
    from memory_core.errors import UsageError

    if isinstance(config_file, str) and not config_file.strip():
        raise UsageError(f"{by} is empty: an empty path names no config file (not $MEMORY_CORE_CONFIG, nor"
                         f" <workspace>/memory-core.toml); give the config file's path, or leave {by} out")


def resolve_settings(
    told: dict[str, Any] | None = None,
    *,
    config_file: str | os.PathLike[str] | None = None,
    told_by: dict[str, str] | str = "{}",
    env: dict[str, str] | None = None,
    agent: str | None = None,
    check: bool = True,
) -> ResolvedSettings:
    """The settings of a run or a reader, in the documented order (module docstring).

    ``told``: the explicit settings (flags, flow parameters), nested like a config file;
    ``None`` values are "not told". ``told_by`` names where each came from for messages: a
    mapping from top-level key to label (``{"sources": "--sessions"}``) and/or a format string
    for the rest (``"flow parameter {}"``). ``config_file``: the config file given, if any.

    ``agent`` (else ``$MEMORY_CORE_AGENT``, else the config's ``agents.default`` when no
    workspace or index is told): the agent whose workspace, index, qmd state and LanceDB folder
    the config file's ``[agents]`` table gives (:mod:`memory_core.runtime.agents`); they rank as told
    settings, below the flags actually given.

    Raises :class:`ConfigError` for a bad config file or setting, or an agent that would see
    another agent's memories (``check``; :func:`memory_core.runtime.agents.check_agent_isolated`),
    :class:`UnknownAgentError` for an agent the config does not list.
    """
    from memory_core.runtime.agents import (
        UnknownAgentError,
        agent_told,
        agents_of,
        check_agent_isolated,
        check_unnamed_run,
        requested_agent,
    )

    env = dict(os.environ) if env is None else env
    refuse_empty_paths(told or {}, told_by)
    flags = _drop_none(dict(told or {}))
    env_layer = _env_layer(env)
    cfg_path = config_file or env.get("MEMORY_CORE_CONFIG") or None
    cfg: dict[str, Any] = read_config_file(cfg_path) if cfg_path else {}
    agent = requested_agent(agent, env)
    agents_table = None
    if agent is not None or cfg.get("agents"):
        agents = agents_of(cfg)
        # no agent named: the default agent, unless a workspace or an index is given (a flag or
        # $MEMORY_CORE_WORKSPACE / $MEMORY_CORE_INDEX, which a config file does not override)
        if agent is None and agents.default and not ({"workspace", "index_path"} & (set(flags) | set(env_layer))):
            agent = agents.default
        if agent is not None:
            agents_table = agents
            if not cfg_path:
                raise UnknownAgentError(f"unknown agent {agent!r}: no config file names agents (--config FILE or"
                                        " $MEMORY_CORE_CONFIG, with an [agents] table)")
            flags = _deep_merge(_drop_none(agent_told(agents, agent)), flags)
    found = False
    layers: list[tuple[str, dict[str, Any]]] = []

    def first(key: str, *named: tuple[str, dict[str, Any]]) -> tuple[Any, str | None]:
        for label, layer in named:
            v = dotted(layer, key)
            if v is not None:
                return v, label
        return None, None

    def flag_label(key: str) -> str:
        top = key.split(".", 1)[0]
        if isinstance(told_by, dict):
            return told_by.get(key) or told_by.get(top) or top
        return told_by.format(top)

    cfg_label = f"config file {cfg_path}" if cfg_path else ""
    env_label = "$MEMORY_CORE_*"
    # the workspace and the index come first: they say where the live index and a workspace config are
    ws, _ = first("workspace", ("f", flags), ("e", env_layer), ("c", cfg))
    idx, _ = first("index_path", ("f", flags), ("e", env_layer), ("c", cfg))

    def probe(path: Any) -> IndexRecord | None:
        meta, problem = probe_index(Path(os.path.abspath(os.path.expanduser(str(path)))))
        return None if problem else IndexRecord.from_meta(meta)

    live = probe(idx) if idx is not None else None
    if ws is None and live is not None and live.workspace:
        ws = live.workspace
    from_cwd = ws is None
    if ws is None:
        ws = str(Path.cwd())
    if not cfg_path:
        candidate = Path(os.path.abspath(os.path.expanduser(str(ws)))) / WORKSPACE_CONFIG_NAME
        if candidate.is_file():
            cfg_path, found = str(candidate), True
            cfg = read_config_file(candidate)
            cfg.pop("workspace", None)  # a workspace's own file cannot move the workspace
            cfg_label = f"config file {candidate}"
            if idx is None and cfg.get("index_path"):
                idx = cfg["index_path"]
    if idx is None:
        idx = Settings(workspace=Path(str(ws))).index_file
    if live is None:
        live = probe(idx)
    index_layer = live.settings_layer() if live is not None else {}

    layers = [(ORIGIN_INDEX, index_layer), (cfg_label, cfg), (env_label, env_layer), ("", flags)]
    data: dict[str, Any] = {}
    for _, layer in layers:
        data = _deep_merge(data, layer)
    # absolute now: a relative path given to a long-lived reader (open_memory("ws")) was resolved
    # against the current folder at each use, so after an os.chdir its runs indexed another
    # folder's notes into this index (the twenty-third session's second audit)
    data["workspace"] = os.path.abspath(os.path.expanduser(str(ws)))
    data["index_path"] = os.path.abspath(os.path.expanduser(str(idx)))

    def where(key: str) -> str:  # a bad setting's message names where its value came from
        src = value_source(key, [("\0flag", flags), (ENV_LABEL, env_layer), (cfg_label, cfg),
                                 (f"the index {idx}", index_layer)])
        return flag_label(key) if src == "\0flag" else src

    settings = _validate(data, where)

    origins: dict[str, str] = {}
    for key in RECORDED:
        label = ORIGIN_DEFAULT
        for name, layer in reversed(layers):
            if dotted(layer, key) is not None:
                label = flag_label(key) if layer is flags else (
                    f"${next(v for v, k in _ENV_KEYS.items() if k == key)}" if layer is env_layer else name)
                break
        origins[key] = ORIGIN_CWD if key == "workspace" and from_cwd else label
    settings._origins = origins
    if agent is not None and check and agents_table is not None:
        check_agent_isolated(agent, settings, agents_table, lambda other: resolve_settings(
            {}, config_file=config_file or env.get("MEMORY_CORE_CONFIG"), env=env, agent=other,
            check=False).settings)
    elif agent is None and check and cfg_path and cfg.get("agents"):
        # no agent named (a workspace or an index given instead): it must not write an agent's memory
        listed = str(cfg_path)

        def settings_of(other: str) -> Settings | None:
            try:
                return resolve_settings({}, config_file=listed, env=env, agent=other, check=False).settings
            except MemoryCoreError:  # that agent's own settings are broken: its own runs say so
                return None

        check_unnamed_run(settings, agents_of(cfg), settings_of)

    changes: list[SettingChange] = []
    if live is not None:
        recorded = dict(index_layer)
        if live.workspace:
            recorded["workspace"] = live.workspace
        if live.sessions_dir:
            sessions = recorded.get("sessions")
            recorded["sessions"] = {**(sessions if isinstance(sessions, dict) else {}), "dir": live.sessions_dir}
        for key in RECORDED:
            old = dotted(recorded, key)
            if key in ("index_path",) or old is None:
                continue
            if key in ("sources", "extra_paths") and isinstance(old, list):
                old = sorted(old)
            new = _recorded_value(settings, key)
            if old != new:
                changes.append(SettingChange(key, old, new, origins[key]))
    return ResolvedSettings(settings=settings, config_file=Path(cfg_path) if cfg_path else None, config_found=found,
                            has_index=live is not None, changes=changes)


def resolve_agents(config_file: str | os.PathLike[str] | None, agents: list[str] | None = None, *,
                   env: dict[str, str] | None = None) -> dict[str, Settings]:
    """The settings of each agent of the config file (``agents``: only these, in this order),
    checked to share no workspace, index, qmd state or LanceDB folder."""
    from memory_core.runtime.agents import UnknownAgentError, agents_of, check_isolated

    env = dict(os.environ) if env is None else env
    path = config_file or env.get("MEMORY_CORE_CONFIG") or None
    if not path:
        raise UnknownAgentError("no config file names agents (--config FILE or $MEMORY_CORE_CONFIG, with an"
                                " [agents] table)")
    table = agents_of(read_config_file(path))
    ids = list(dict.fromkeys(agents)) if agents else table.ids
    if not ids:
        raise UnknownAgentError(f"config file {path} lists no agents ([[agents.list]])")
    everyone = list(dict.fromkeys([*ids, *table.ids]))  # the served agents checked against every listed one
    by_agent = {a: resolve_settings({}, config_file=path, env=env, agent=a, check=False).settings for a in everyone}
    check_isolated(by_agent)
    return {a: by_agent[a] for a in ids}
