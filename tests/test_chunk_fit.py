"""Chunks sized with the local model's own tokenizer: none is cut at the model's window, and
every chunk still starts and ends on the reference chunker's line boundaries."""

from __future__ import annotations

import pytest

from memory_core.config import load_settings
from memory_core.embeddings.local import local_model_available
from memory_core.embeddings.registry import create_provider
from memory_core.index.chunking import Chunk, chunk_markdown, fit_to_window
from tests.conftest import EXAMPLES

pytestmark = pytest.mark.skipif(not local_model_available(), reason="the local model is not installed")


@pytest.fixture(scope="module")
def provider():  # type: ignore[no-untyped-def]
    p, _ = create_provider(load_settings(None, {"provider": "local"}, env={}))
    yield p
    p.close()


def test_example_notes_fit_the_window(provider) -> None:  # type: ignore[no-untyped-def]
    window = provider.window_pieces
    before = after = total_before = 0
    for path in sorted((EXAMPLES / "workspace").rglob("*.md")):
        text = path.read_text(encoding="utf-8")
        ref = [c for c in chunk_markdown(text, 200, 40) if c.text.strip()]
        fitted = [c for c in fit_to_window(ref, provider, 200, 40) if c.text.strip()]
        total_before += len(ref)
        before += sum(n > window for n in provider.piece_counts([c.text for c in ref]))
        counts = provider.piece_counts([c.text for c in fitted])
        after += sum(n > window for n in counts)
        lines = text.split("\n")
        for c in fitted:  # line boundaries: a chunk is whole lines of the file
            assert c.text == "\n".join(lines[c.start_line - 1:c.end_line]), (path, c.start_line)
        # chunks that fit are the reference chunker's own (same ids, same cached vectors)
        kept = {(c.start_line, c.end_line, c.hash) for c in fitted}
        for c, n in zip(ref, provider.piece_counts([c.text for c in ref]), strict=True):
            assert (n <= window) == ((c.start_line, c.end_line, c.hash) in kept)
        # the file is still covered from its first to its last chunked line
        assert min(c.start_line for c in fitted) == min(c.start_line for c in ref)
        assert max(c.end_line for c in fitted) == max(c.end_line for c in ref)
    print(f"\nexample notes: {before} of {total_before} chunks over {window} pieces before, {after} after")
    assert before > 10 and after == 0


def test_one_long_line_is_segmented(provider) -> None:  # type: ignore[no-untyped-def]
    line = " ".join(f"tok{i}_{i * 7919 % 1000}" for i in range(600))  # far more pieces than the window
    ref = chunk_markdown("title\n" + line + "\nend", 200, 40)
    fitted = fit_to_window(ref, provider, 200, 40)
    assert all(n <= provider.window_pieces for n in provider.piece_counts([c.text for c in fitted]))
    assert "".join(c.text for c in fitted if c.start_line == c.end_line == 2).replace("\n", "")  # pieces of line 2


def test_providers_without_a_tokenizer_are_unchanged() -> None:
    chunks = [Chunk(1, 1, "x" * 5000, "h")]
    assert fit_to_window(chunks, object(), 200, 40) == chunks
