"""Which embedding providers exist: names and classes, from the ``memory_core.providers`` entry points.

Providers are registered under the ``memory_core.providers`` entry-point group (name ->
``module:Class``); the built-ins are declared there in pyproject.toml like any other, and
:data:`_REGISTRY` lists them too, so a source checkout whose installed metadata predates one
still finds them. A new provider is one module with an :class:`EmbeddingProvider` subclass
(every fact about it is a class attribute) plus one entry point: nothing else names it.

This module imports no provider module and no settings (the settings model checks provider
names against it); :mod:`memory_core.embeddings.registry` builds providers from settings.
"""

from __future__ import annotations

import functools
import importlib
from importlib.metadata import entry_points

from memory_core.embeddings.base import EmbeddingProvider, NoProvider

ENTRY_POINT_GROUP = "memory_core.providers"

# name -> (module, class): the built-ins, in ``auto``'s order. The provider modules import
# their SDKs lazily, so reading a class's facts (key_env, sync_prices) is cheap.
_REGISTRY: dict[str, tuple[str, str]] = {
    "local": ("memory_core.embeddings.local", "LocalProvider"),
    "openai": ("memory_core.embeddings.openai_provider", "OpenAIProvider"),
    "gemini": ("memory_core.embeddings.gemini_provider", "GeminiProvider"),
    "voyage": ("memory_core.embeddings.voyage_provider", "VoyageProvider"),
    "mistral": ("memory_core.embeddings.mistral_provider", "MistralProvider"),
}
_RESERVED = frozenset({"auto", "none"})  # "none" is keyword-only mode (NoProvider), "auto" a choice


@functools.cache
def _entry_points() -> tuple[tuple[str, tuple[str, str]], ...]:
    """Providers registered under :data:`ENTRY_POINT_GROUP`, by name (read once)."""
    found: dict[str, tuple[str, str]] = {}
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        module, _, attr = ep.value.partition(":")
        if ep.name not in _RESERVED and attr:
            found.setdefault(ep.name, (module.strip(), attr.strip()))
    return tuple(sorted(found.items()))


def registered() -> dict[str, tuple[str, str]]:
    """Every registered provider, name -> (module, class), in ``auto``'s order: the built-ins
    (as :data:`_REGISTRY` says: a test may point one elsewhere), then the others by name."""
    return {**_REGISTRY, **{n: t for n, t in _entry_points() if n not in _REGISTRY}}


def provider_names() -> list[str]:
    return ["auto", *registered(), "none"]


def keyword_only(name: object) -> bool:
    """Whether an index meta's ``provider`` (None when unrecorded) means keyword-only: no vectors."""
    return name is None or name == NoProvider.name


def provider_class(name: str) -> type[EmbeddingProvider] | None:
    """The class registered as ``name`` (:class:`NoProvider` for ``"none"``), or None when
    unknown or not importable here."""
    if name == "none":
        return NoProvider
    entry = registered().get(name)
    if entry is None:
        return None
    try:
        cls: type[EmbeddingProvider] = getattr(importlib.import_module(entry[0]), entry[1])
    except ModuleNotFoundError:
        return None
    return cls


def provider_on_machine(name: str) -> bool:
    """Whether provider ``name`` embeds on this machine (no text leaves it, nothing is billed);
    False for ``auto`` (it may pick a hosted one) and for unknown names."""
    cls = provider_class(name)
    return bool(cls is not None and cls.on_machine)
