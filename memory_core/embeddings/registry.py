"""The one place that decides which provider a run uses, and why.

``auto`` (the default) picks the local model when it is installed, else the first hosted
provider whose API key is set (OpenAI, Gemini, Voyage), else keyword-only mode. The choice
and the reason are logged and recorded in the index meta, so ``status`` can show them.
"""

from __future__ import annotations

import importlib
import logging
import os

from memory_core.config import Settings
from memory_core.embeddings.base import EmbeddingProvider, NoProvider
from memory_core.errors import ConfigError

log = logging.getLogger("memory_core.embeddings")

# name -> (module, class); hosted providers' env vars for auto selection
_REGISTRY: dict[str, tuple[str, str]] = {
    "local": ("memory_core.embeddings.local", "LocalProvider"),
    "openai": ("memory_core.embeddings.openai_provider", "OpenAIProvider"),
    "gemini": ("memory_core.embeddings.gemini_provider", "GeminiProvider"),
    "voyage": ("memory_core.embeddings.voyage_provider", "VoyageProvider"),
}
_KEY_ENV = {
    "openai": ("OPENAI_API_KEY",),
    "gemini": ("GEMINI_API_KEY", "GOOGLE_API_KEY"),
    "voyage": ("VOYAGE_API_KEY",),
}


def provider_names() -> list[str]:
    return ["auto", *_REGISTRY, "none"]


def _auto_choice(settings: Settings) -> tuple[str, str]:
    from memory_core.embeddings.local import local_model_available

    if local_model_available():
        return "local", "auto: the local model is installed"
    for name, envs in _KEY_ENV.items():
        for env in envs:
            if os.environ.get(env):
                return name, f"auto: local model not installed; {env} is set"
    return "none", "auto: no local model and no API key; keyword-only search"


def _build(name: str, settings: Settings) -> EmbeddingProvider:
    if name == "none":
        return NoProvider()
    try:
        module_name, cls_name = _REGISTRY[name]
    except KeyError:
        raise ConfigError(f"provider: unknown provider {name!r}; choose one of {', '.join(provider_names())}") from None
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        raise ConfigError(f"provider {name} is not available in this installation ({exc.name} missing)") from None
    return getattr(module, cls_name)(settings)


def create_provider(settings: Settings) -> tuple[EmbeddingProvider, str]:
    """The provider for ``settings`` and a one-line reason for the choice.

    If the primary cannot be created and ``settings.fallback`` is set, the fallback is used
    and the reason says so.
    """
    name = settings.provider
    reason = "configured"
    if name == "auto":
        name, reason = _auto_choice(settings)
    try:
        provider = _build(name, settings)
    except ConfigError as exc:
        if settings.fallback and settings.fallback != name:
            log.warning("provider %s unavailable (%s); using fallback %s", name, exc, settings.fallback)
            fb = settings.fallback
            if fb == "auto":
                fb, _ = _auto_choice(settings)
            return _build(fb, settings), f"fallback: {name} unavailable ({exc})"
        raise
    log.info("embedding provider: %s (%s) - %s", provider.name, provider.model, reason)
    return provider, reason
