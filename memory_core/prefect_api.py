"""Which Prefect server (if any) the entry points talk to, and which engine ``index`` runs on.

A server is configured by ``PREFECT_API_URL`` in the environment or in the active Prefect
profile (``prefect config set PREFECT_API_URL=...``, the setup step Prefect's docs give): both
count. The profile is read through ``prefect.settings``, imported here lazily, only when the
environment variable is unset and Prefect is installed: memory_core never imports Prefect at
import time.
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

EngineName = Literal["prefect", "local"]


@dataclass(frozen=True)
class PrefectApi:
    """The configured Prefect API URL (None: none) and where it was found."""

    url: str | None
    source: str  # "$PREFECT_API_URL", "Prefect profile 'x'", or why there is none


def prefect_api(env: dict[str, str] | None = None) -> PrefectApi:
    """The Prefect API URL from ``$PREFECT_API_URL``, else from the active Prefect profile."""
    env = dict(os.environ) if env is None else env
    if env.get("PREFECT_API_URL"):
        return PrefectApi(env["PREFECT_API_URL"], "$PREFECT_API_URL")
    if importlib.util.find_spec("prefect") is None:
        return PrefectApi(None, "Prefect is not installed")
    if not _may_name_api_url(env):
        # importing Prefect costs 1-3 s: skip it when no file it reads settings from names a URL
        return PrefectApi(None, "PREFECT_API_URL is set neither in the environment nor in a Prefect profile")
    try:
        from prefect.context import get_settings_context
        from prefect.settings import get_current_settings

        url = get_current_settings().api.url
        profile = get_settings_context().profile.name
    except Exception as exc:  # a broken profiles file must not break memory-core
        return PrefectApi(None, f"the Prefect profile cannot be read ({exc})")
    if url:
        return PrefectApi(str(url), f"Prefect profile '{profile}'")
    return PrefectApi(None, f"PREFECT_API_URL is set neither in the environment nor in the Prefect profile '{profile}'")


def _may_name_api_url(env: dict[str, str]) -> bool:
    """Whether a file Prefect reads its settings from mentions PREFECT_API_URL: the profiles file
    (``$PREFECT_PROFILES_PATH``, else ``$PREFECT_HOME/profiles.toml``, else
    ``~/.prefect/profiles.toml``) or ``.env`` / ``prefect.toml`` / ``pyproject.toml`` in the
    current folder. A cheap test before the authoritative answer from ``prefect.settings``."""
    home = Path(env.get("PREFECT_HOME") or "~/.prefect").expanduser()
    profiles = Path(env["PREFECT_PROFILES_PATH"]).expanduser() if env.get("PREFECT_PROFILES_PATH") \
        else home / "profiles.toml"
    # (file, any of these words means it may set the API URL)
    for path, words in ((profiles, ("PREFECT_API_URL",)), (Path(".env"), ("PREFECT_API_URL",)),
                        (Path("prefect.toml"), ("PREFECT_API_URL", "url")),
                        (Path("pyproject.toml"), ("PREFECT_API_URL", "tool.prefect"))):
        try:
            text = path.read_text(errors="replace")
        except OSError:
            continue
        if any(w in text for w in words):
            return True
    return False


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
    ``local`` runs the same stages in-process; ``auto``: the flow when a server is configured.
    ``requested_by`` names where ``requested`` came from, for the reason."""
    if requested == "local":
        return EngineChoice("local", f"{requested_by} local")
    api = prefect_api(env)
    if requested == "prefect":
        where = f"server {api.url} from {api.source}" if api.url else "a temporary Prefect server"
        return EngineChoice("prefect", f"{requested_by} prefect; {where}", api.url)
    if api.url:
        return EngineChoice("prefect", f"auto: Prefect server {api.url} from {api.source}", api.url)
    return EngineChoice("local", f"auto: {api.source}; runs in-process")


def emit_event_if_configured(event: str, index_path: str | os.PathLike[str], payload: dict[str, object]) -> None:
    """Emit a Prefect event about an index (resource ``memory-core.index.<path>``) when a Prefect
    API is configured, for Automations; best effort, never raises. The one place outside
    ``flows/`` where the library touches Prefect, imported only when used."""
    if not os.environ.get("PREFECT_API_URL"):
        return
    try:
        from prefect.events import emit_event

        emit_event(event=event, resource={"prefect.resource.id": f"memory-core.index.{os.fspath(index_path)}"},
                   payload=payload)
    except Exception as err:  # an event is best-effort
        import logging

        logging.getLogger("memory_core.prefect_api").debug("%s not sent: %s", event, err)

