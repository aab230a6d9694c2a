"""Kept for callers of the old name: :mod:`memory_core.engines` answers (imports no Prefect)."""

from __future__ import annotations

from memory_core.engines import (
    EngineChoice,
    EngineName,
    PrefectApi,
    choose_engine,
    emit_event_if_configured,
    prefect_api,
)

__all__ = ["EngineChoice", "EngineName", "PrefectApi", "choose_engine", "emit_event_if_configured", "prefect_api"]
