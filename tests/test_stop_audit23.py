"""A SIGTERM that an ``except Exception`` on the run's way swallowed (the twenty-third session's
audit, F5): `memory-core index` stopped while the local model's tokenizer loaded ended with exit 1,
a traceback and ``'_OnnxEngine' object has no attribute 'tokenizer'`` (its fallback took the
RunCancelled for a missing tokenizer.json). Each test fails on the code before its fix."""

from __future__ import annotations

import signal
from typing import Any

import pytest

from memory_core.config import load_settings
from memory_core.embeddings.local import LocalProvider
from memory_core.errors import RunCancelled
from memory_core.index.pipeline import _sigterm_cancels, command_stops


def test_a_sigterm_an_except_exception_swallowed_still_ends_the_command_as_a_stop() -> None:
    if signal.getsignal(signal.SIGTERM) not in (signal.SIG_DFL, None):
        pytest.skip("SIGTERM is handled by the test runner")
    with pytest.raises(RunCancelled, match="stopped by SIGTERM"), command_stops(), _sigterm_cancels():
        try:
            signal.raise_signal(signal.SIGTERM)
        except Exception:  # a fallback on the way that took the stop for its own error
            raise AttributeError("'_OnnxEngine' object has no attribute 'tokenizer'") from None
    assert signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None)  # put back


def test_the_local_models_piece_count_lets_a_stop_through(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    provider = LocalProvider(load_settings(None, {"workspace": str(tmp_path), "provider": "local"}))

    def stopped() -> Any:
        raise RunCancelled("stopped by SIGTERM")

    def load() -> Any:
        raise AssertionError("the fallback loaded the model for a stop")

    monkeypatch.setattr(provider, "_tokenizer", stopped)
    monkeypatch.setattr(provider, "_load", load)
    with pytest.raises(RunCancelled):
        provider.piece_counts(["a note"])
