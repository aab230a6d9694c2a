"""Orchestrators the library can hand work to, plugged in through the ``memory_core.engines`` entry points.

memory_core never imports Prefect, ``flows`` or ``tasks``. What it needs from an orchestrator
is the :class:`Engine` protocol: which API it would talk to (``auto`` picks the engine from
that), run a reindex as a flow run, start a deployment run and wait for it, and emit an event.
An implementation is registered under the ``memory_core.engines`` entry-point group (name ->
``module:Class``); this package's own pyproject registers ``prefect = "flows.engine:PrefectEngine"``.

Finding the registered engine and sending its events is :mod:`memory_core.plugins` (at the ground
floor, so the query side can announce a fallback); this module adds what a program asks of it.

When no engine is installed: ``index --engine prefect`` and ``watch --deployment`` fail with one
:class:`~memory_core.errors.UsageError`, ``--engine auto`` runs in-process, events are skipped.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

from memory_core.errors import UsageError
from memory_core.plugins import ENTRY_POINT_GROUP, PREFECT, emit_event_if_configured, engine, registered

if TYPE_CHECKING:
    from memory_core.config import Settings
    from memory_core.index.runtypes import Progress, RunSummary

EngineName = Literal["prefect", "local"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PrefectApi:
    """The configured orchestrator API URL (None: none) and where it was found."""

    url: str | None
    source: str  # "$PREFECT_API_URL", "Prefect profile 'x'", or why there is none


@dataclass(frozen=True)
class DeploymentRun:
    """How a deployment run ended: its name and id, its state's name and message (``final``
    False: still not final when the wait ran out; ``cancelled``: e.g. by a concurrency limit)."""

    name: str
    id: str
    state: str
    final: bool
    completed: bool = False
    cancelled: bool = False
    message: str | None = None


@runtime_checkable
class Engine(Protocol):
    """What the library asks of an orchestrator (a ``memory_core.engines`` entry point's class,
    built with no arguments). Each method imports the orchestrator only when called."""

    def api(self, env: dict[str, str] | None = None) -> PrefectApi:
        """The configured API URL, or why there is none (cheap when there is none)."""
        ...

    def run_reindex(self, settings: Settings, *, config_file: str | None, told: dict[str, Any], full: bool,
                    progress: Callable[[Progress], None] | None = None,
                    on_start: Callable[[str], None] | None = None, re_embed: bool = False) -> RunSummary:
        """Run the reindex as a flow run in this process; ``told``: the settings given as flags;
        ``re_embed``: every chunk embedded again, no cached vector read (``index --re-embed``)."""
        ...

    def run_deployment(self, name: str, parameters: dict[str, Any], *, timeout_s: float,
                       tags: list[str]) -> DeploymentRun:
        """Start a run of deployment ``name`` and wait up to ``timeout_s`` for it to end."""
        ...

    def emit_event(self, event: str, resource_id: str, payload: dict[str, object]) -> None:
        """Emit an event (best effort: never raises)."""
        ...

    def missing_deployment(self, name: str) -> str | None:
        """None when deployment ``name`` (``flow/deployment``) exists on the server, else why not
        in one line (it does not exist: the ones of the same flow that do; the server cannot be
        reached)."""
        ...


def require_engine(name: str = PREFECT, *, needed_by: str) -> Engine:
    """The engine ``name``, else one clear :class:`UsageError` naming what needed it."""
    found = engine(name)
    if found is None:
        why = (f"the entry point {registered()[name]!r} cannot be loaded" if name in registered()
               else f"no {ENTRY_POINT_GROUP!r} entry point is named {name!r}")
        raise UsageError(f"{needed_by} needs the {name} engine, which is not installed ({why}); install"
                         f" memory-core with its flows package and {name}, or run without it (`--engine local`)")
    made: Engine = found  # an entry point's class (memory_core.plugins types it Any: the ground floor)
    return made


def prefect_api(env: dict[str, str] | None = None) -> PrefectApi:
    """The Prefect API URL from ``$PREFECT_API_URL``, else from the active Prefect profile,
    as the installed engine sees it."""
    env = dict(os.environ) if env is None else env
    found = engine(PREFECT)
    if found is None:
        if env.get("PREFECT_API_URL"):
            return PrefectApi(env["PREFECT_API_URL"], "$PREFECT_API_URL")
        return PrefectApi(None, "no Prefect engine is installed (memory_core.engines entry point 'prefect')")
    api: PrefectApi = found.api(env)
    return api


@dataclass(frozen=True)
class EngineChoice:
    """The engine an ``index`` run uses and why (``status`` prints it)."""

    engine: EngineName
    reason: str
    api_url: str | None = None

    def line(self) -> str:
        return f"{self.engine} ({self.reason})"


def choose_engine(requested: str = "auto", env: dict[str, str] | None = None, *,
                  requested_by: str = "--engine") -> EngineChoice:
    """``prefect`` runs the reindex flow (on the configured server, else a temporary one);
    ``local`` runs the same stages in-process; ``auto``: the flow when a server is configured
    and the Prefect engine is installed. ``requested_by`` names where ``requested`` came from."""
    if requested not in ("auto", "local", PREFECT):  # $MEMORY_CORE_ENGINE: argparse does not check a default
        raise UsageError(f"{requested_by} {requested!r}: choose auto, prefect or local")
    if requested == "local":
        return EngineChoice("local", f"{requested_by} local")
    api = prefect_api(env)
    if requested == PREFECT:
        if engine(PREFECT) is None:  # `index` stops on it (require_engine); `status` says so
            return EngineChoice("prefect", f"{requested_by} prefect; but no Prefect engine is installed")
        where = f"server {api.url} from {api.source}" if api.url else "a temporary Prefect server"
        return EngineChoice("prefect", f"{requested_by} prefect; {where}", api.url)
    if api.url and engine(PREFECT) is not None:
        return EngineChoice("prefect", f"auto: Prefect server {api.url} from {api.source}", api.url)
    return EngineChoice("local", f"auto: {api.source}; runs in-process")


__all__ = ["ENTRY_POINT_GROUP", "PREFECT", "DeploymentRun", "Engine", "EngineChoice", "EngineName", "PrefectApi",
           "choose_engine", "emit_event_if_configured", "engine", "prefect_api", "registered", "require_engine"]
