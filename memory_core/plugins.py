"""What is installed: the embedding providers and orchestrators registered as entry points.

- Providers, under ``memory_core.providers`` (name -> ``module:Class``): the built-ins are declared
  there in pyproject.toml like any other, and :data:`_REGISTRY` lists them too, so a source checkout
  whose installed metadata predates one still finds them. A new provider is one module with an
  :class:`~memory_core.embeddings.base.EmbeddingProvider` subclass (every fact about it is a class
  attribute) plus one entry point: nothing else names it.
- Orchestrators, under ``memory_core.engines`` (``prefect = "flows.engine:PrefectEngine"``), and
  their events (Prefect Automations).

At the ground floor, beside the errors, importing nothing else of memory_core: the settings model
checks a provider's name and asks whether it runs on this machine (the redaction default) here, and
any layer can announce an event (the query side's qmd fallback) without importing the runtime. A
class is imported only when asked for (:func:`provider_class`, :func:`engine`). Providers built from
settings: :mod:`memory_core.embeddings.registry`; what a program asks of an engine:
:mod:`memory_core.runtime.engines`.
"""

from __future__ import annotations

import functools
import importlib
import logging
import os
from typing import TYPE_CHECKING, Any

ENTRY_POINT_GROUP = "memory_core.engines"  # the orchestrators' entry-point group: a public name
PROVIDERS_GROUP = "memory_core.providers"  # the providers' entry-point group: a public name
PREFECT = "prefect"  # the engine ``--engine prefect``, ``auto`` and ``watch --deployment`` ask for

if TYPE_CHECKING:
    from importlib.metadata import EntryPoints

log = logging.getLogger("memory_core.runtime.engines")


def entry_points(*, group: str) -> EntryPoints:
    """``importlib.metadata.entry_points(group=group)``. importlib.metadata (and the email, zipfile
    and csv modules it loads) is imported here, when a registry is first read, not by every
    process that imports this module: a keyword-only search or ``--version`` never reads one."""
    from importlib.metadata import entry_points as read

    return read(group=group)


# -- embedding providers ----------------------------------------------------------------------

# name -> (module, class): the built-ins, in ``auto``'s order. The provider modules import
# their SDKs lazily, so reading a class's facts (key_env, sync_prices) is cheap.
_REGISTRY: dict[str, tuple[str, str]] = {
    "local": ("memory_core.embeddings.local", "LocalProvider"),
    "openai": ("memory_core.embeddings.openai_provider", "OpenAIProvider"),
    "gemini": ("memory_core.embeddings.gemini_provider", "GeminiProvider"),
    "voyage": ("memory_core.embeddings.voyage_provider", "VoyageProvider"),
    "mistral": ("memory_core.embeddings.mistral_provider", "MistralProvider"),
}
_NONE = ("memory_core.embeddings.base", "NoProvider")  # "none": keyword-only mode
_RESERVED = frozenset({"auto", "none"})  # "none" is keyword-only mode (NoProvider), "auto" a choice


@functools.cache
def _provider_entry_points() -> tuple[tuple[str, tuple[str, str]], ...]:
    """Providers registered under :data:`PROVIDERS_GROUP`, by name (read once)."""
    found: dict[str, tuple[str, str]] = {}
    for ep in entry_points(group=PROVIDERS_GROUP):
        module, _, attr = ep.value.partition(":")
        if ep.name not in _RESERVED and attr:
            found.setdefault(ep.name, (module.strip(), attr.strip()))
    return tuple(sorted(found.items()))


def registered_providers() -> dict[str, tuple[str, str]]:
    """Every registered provider, name -> (module, class), in ``auto``'s order: the built-ins
    (as :data:`_REGISTRY` says: a test may point one elsewhere), then the others by name."""
    return {**_REGISTRY, **{n: t for n, t in _provider_entry_points() if n not in _REGISTRY}}


def provider_names() -> list[str]:
    return ["auto", *registered_providers(), "none"]


def is_provider_name(name: str) -> bool:
    """``name in provider_names()``; a built-in (or ``auto``/``none``) is known without reading the
    installed entry points."""
    return name in _RESERVED or name in _REGISTRY or name in provider_names()


# Any: a plugin class imported by name; plugins sits below the provider classes
def provider_class(name: str) -> Any:
    """The class registered as ``name`` (``NoProvider`` for ``"none"``; an
    :class:`~memory_core.embeddings.base.EmbeddingProvider` subclass), or None when unknown or not
    importable here."""
    if name == "auto":  # a choice, never a class (an entry point by a reserved name is skipped)
        return None
    # a built-in's entry is its registry row (registered_providers() starts with _REGISTRY)
    entry = _NONE if name == "none" else _REGISTRY.get(name) or registered_providers().get(name)
    if entry is None:
        return None
    try:
        return getattr(importlib.import_module(entry[0]), entry[1])
    except ModuleNotFoundError:
        return None


def provider_on_machine(name: str) -> bool:
    """Whether provider ``name`` embeds on this machine (no text leaves it, nothing is billed);
    False for ``auto`` (it may pick a hosted one) and for unknown names."""
    cls = provider_class(name)
    return bool(cls is not None and cls.on_machine)


# -- orchestrators ------------------------------------------------------------------------------

@functools.cache
def _entry_points() -> tuple[tuple[str, str], ...]:
    """Engines registered under :data:`ENTRY_POINT_GROUP`: (name, ``module:Class``), read once."""
    found: dict[str, str] = {}
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if ":" in ep.value:
            found.setdefault(ep.name, ep.value.strip())
    return tuple(sorted(found.items()))


def registered() -> dict[str, str]:
    """Every registered engine: name -> ``module:Class``."""
    return dict(_entry_points())


# Any: an orchestrator plugin imported by name (below runtime.engines' Engine)
@functools.cache
def engine(name: str = PREFECT) -> Any:
    """The engine registered as ``name``, or None when none is registered or it cannot be
    imported here (its orchestrator is not installed)."""
    target = registered().get(name)
    if target is None:
        return None
    module, _, attr = target.partition(":")
    try:
        cls = getattr(importlib.import_module(module.strip()), attr.strip())
    except (ImportError, AttributeError) as exc:
        log.debug("engine %s (%s) cannot be loaded: %s", name, target, exc)
        return None
    return cls()  # an :class:`memory_core.runtime.engines.Engine`


def emit_event_if_configured(event: str, index_path: str | os.PathLike[str], payload: dict[str, object]) -> None:
    """Emit an event about an index (resource ``memory-core.index.<path>``) when a Prefect API is
    configured in the environment and an engine is installed, for Automations; best effort,
    never raises."""
    if not os.environ.get("PREFECT_API_URL"):
        return
    found = engine(PREFECT)
    if found is None:
        return
    try:
        found.emit_event(event, f"memory-core.index.{os.fspath(index_path)}", payload)
    except Exception as err:  # an event is best-effort
        log.debug("%s not sent: %s", event, err)
