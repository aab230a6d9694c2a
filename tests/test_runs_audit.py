"""Runs that stop, or meet a provider that changed: an audit of our own (docs/reliability.md,
"Runs that stop", R1-R4). Each test fails on the code before its fix.

R1: a stop that lands after the new index was published; R2: a provider whose vectors change
dimension; R3: signals meant for the whole run and the index writer process; R4: the partial
summary's ``from cache``."""

from __future__ import annotations

from pathlib import Path

import pytest

from memory_core.errors import ProviderError
from memory_core.index.pipeline import run_index
from tests.conftest import openai_settings
from tests.fakes.openai_fake import OpenAIFake


def _notes(ws: Path, n: int, prefix: str = "n") -> None:
    (ws / "memory").mkdir(parents=True, exist_ok=True)
    for i in range(n):
        (ws / "memory" / f"{prefix}{i:02d}.md").write_text(f"# note {prefix} {i}\n\nwords of note {prefix} {i}.\n")


# -- R4: the partial summary's "from cache" --------------------------------------------------------

def test_r4_a_failed_run_says_what_it_found_in_the_cache(tmp_path: Path) -> None:
    """A run that failed after finding vectors in the cache: its partial summary (the flow's
    summary artifact, the API's ``exc.run_summary``) said 0 from cache."""
    ws = tmp_path / "ws"
    _notes(ws, 20, "old")
    with OpenAIFake(dims=64) as srv:
        s = openai_settings(ws, srv, remote={"max_attempts": 1, "max_inputs_per_request": 4})
        first = run_index(s)
        assert first.chunks_total == 20
        _notes(ws, 8, "zz-new")
        srv.fail_next(1, status=400, message="bad request")
        with pytest.raises(ProviderError) as failed:
            run_index(s, full=True)
    part = failed.value.run_summary  # type: ignore[attr-defined]
    assert part.error and not part.swapped
    assert part.chunks_from_cache == 20 and part.headline()["from cache"] == 20
