"""Which embedding providers exist: names and classes, from the ``memory_core.providers`` entry points.

Providers are registered under the ``memory_core.providers`` entry-point group (name ->
``module:Class``); the built-ins are declared there in pyproject.toml like any other, and
:data:`_REGISTRY` lists them too, so a source checkout whose installed metadata predates one
still finds them. A new provider is one module with an :class:`EmbeddingProvider` subclass
(every fact about it is a class attribute) plus one entry point: nothing else names it.

The lookups are :mod:`memory_core.plugins`' (at the ground floor, where the settings model checks
provider names); this module types them for the embeddings side and adds :func:`keyword_only`.
:mod:`memory_core.embeddings.registry` builds providers from settings.
"""

from __future__ import annotations

from memory_core import plugins
from memory_core.embeddings.base import EmbeddingProvider, NoProvider
from memory_core.plugins import _REGISTRY, provider_names, provider_on_machine
from memory_core.plugins import PROVIDERS_GROUP as ENTRY_POINT_GROUP
from memory_core.plugins import registered_providers as registered

__all__ = ["ENTRY_POINT_GROUP", "_REGISTRY", "keyword_only", "provider_class", "provider_names", "provider_on_machine",
           "registered"]

def keyword_only(name: object) -> bool:
    """Whether an index meta's ``provider`` (None when unrecorded) means keyword-only: no vectors."""
    return name is None or name == NoProvider.name


def provider_class(name: str) -> type[EmbeddingProvider] | None:
    """The class registered as ``name`` (:class:`NoProvider` for ``"none"``), or None when
    unknown or not importable here."""
    cls: type[EmbeddingProvider] | None = plugins.provider_class(name)
    return cls
