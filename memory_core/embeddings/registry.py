"""The one place that decides which provider a run uses, and why.

Which providers exist (names, classes, their facts by name) is
:mod:`memory_core.embeddings.catalog`'s: the ``memory_core.providers`` entry points.

``auto`` (the default) picks the local model when it is installed, else the first hosted
provider whose API key is set (OpenAI, Gemini, Voyage, Mistral: the order of ``_REGISTRY``,
then other registered providers by name; each provider class names its key variables in
``key_env``), else keyword-only mode. The choice and the reason are logged and recorded in the
index meta, so ``status`` can show them.
"""

from __future__ import annotations

import importlib
import logging
import os
from collections.abc import Callable

from memory_core.config import FallbackSettings, Settings
from memory_core.embeddings.base import EmbeddingProvider, NoProvider
from memory_core.embeddings.catalog import (  # noqa: F401 - re-exported: the registry's names
    _REGISTRY,
    ENTRY_POINT_GROUP,
    provider_class,
    provider_names,
    provider_on_machine,
    registered,
)
from memory_core.errors import ConfigError

log = logging.getLogger("memory_core.embeddings")

def _auto_choice(settings: Settings) -> tuple[str, str]:
    from memory_core.embeddings.local import local_model_available

    if local_model_available():
        return "local", "auto: the local model is installed"
    for name in registered():
        cls = provider_class(name)
        for env in (getattr(cls, "key_env", ()) if cls is not None else ()):
            if os.environ.get(env):
                return name, f"auto: local model not installed; {env} is set"
    return "none", "auto: no local model and no API key; keyword-only search"


def _build(name: str, settings: Settings) -> EmbeddingProvider:
    if name == "none":
        return NoProvider()
    try:
        module_name, cls_name = registered()[name]
    except KeyError:
        raise ConfigError(f"provider: unknown provider {name!r}; choose one of {', '.join(provider_names())}") from None
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        raise ConfigError(f"provider {name} is not available in this installation ({exc.name} missing)") from None
    # a registered provider is an EmbeddingProvider subclass built from the settings
    make: Callable[[Settings], EmbeddingProvider] = getattr(module, cls_name)
    return make(settings)


def fallback_settings(settings: Settings, primary: str | None = None) -> Settings | None:
    """The settings a fallback provider is built from, or None when no fallback is configured.

    ``fallback = "gemini"`` keeps the primary's ``remote`` settings and uses the fallback's
    default model (the primary's model means nothing to another provider); a ``[fallback]``
    table brings its own ``model`` and ``remote``.
    """
    fb = settings.fallback
    if fb is None:
        return None
    primary = primary or settings.provider
    if isinstance(fb, str):
        update: dict[str, object] = {"provider": fb, "fallback": None}
        if fb != primary:
            update["model"] = None
        out = settings.model_copy(update=update)
    else:
        out = settings.model_copy(update={"provider": fb.provider, "model": fb.model,
                                          "remote": fb.remote or settings.remote, "fallback": None})
    out._primary = settings._primary or settings  # the index keeps the primary's provider as built
    return out


def _build_fallback(settings: Settings, primary: str) -> EmbeddingProvider | None:
    fs = fallback_settings(settings, primary)
    if fs is None:
        return None
    name = fs.provider
    if name == "auto":
        name, _ = _auto_choice(fs)
    if name == primary and not isinstance(settings.fallback, FallbackSettings):
        return None
    return _build(name, fs)


def create_provider(settings: Settings) -> tuple[EmbeddingProvider, str]:
    """The provider for ``settings`` and a one-line reason for the choice.

    If the primary cannot be created and ``settings.fallback`` is set, the fallback is used
    and the reason says so.
    """
    name = settings.provider
    reason = "configured"
    if name == "auto":
        name, reason = _auto_choice(settings)
        if name == "local":
            from memory_core.embeddings.local import MODEL_NAME, runs_model

            if not runs_model(settings, settings.model):
                raise ConfigError(
                    f"model {settings.model!r}: provider auto chose the local model ({reason[len('auto: '):]}),"
                    f" which runs {MODEL_NAME}; for {settings.model!r} name the provider that serves it"
                    " (provider = \"openai\", \"gemini\", \"voyage\" or \"mistral\"), or leave model unset")
    try:
        provider = _build(name, settings)
    except ConfigError as exc:
        if settings.fallback is not None:
            fb = _build_fallback(settings, name)
            if fb is not None:
                log.warning("provider %s unavailable (%s); using fallback %s", name, exc, fb.name)
                return fb, f"fallback: {name} unavailable ({exc})"
        raise
    log.info("embedding provider: %s (%s) - %s", provider.name, provider.model, reason)
    return provider, reason


def create_fallback_provider(settings: Settings, primary: EmbeddingProvider,
                             why: str) -> tuple[EmbeddingProvider, str] | None:
    """The fallback for a primary that kept failing during a run, with the reason to record.

    None when no fallback is configured, or when it would produce the same vectors as the
    primary (same provider key): switching would not help. Raises ConfigError when the
    fallback itself cannot be created.
    """
    fb = _build_fallback(settings, primary.name)
    if fb is None:
        return None
    if fb.name == primary.name and fb.provider_key == primary.provider_key:
        fb.close()
        return None
    reason = f"fallback: {primary.name} ({primary.model}) kept failing during the run: {why}"
    log.warning("provider %s kept failing (%s); switching to fallback %s (%s)", primary.name, why, fb.name, fb.model)
    return fb, reason
