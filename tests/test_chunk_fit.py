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
        fitted = [c for c in fit_to_window(ref, provider, 200, 40, text) if c.text.strip()]
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
    text = "title\n" + line + "\nend"
    ref = chunk_markdown(text, 200, 40)
    fitted = fit_to_window(ref, provider, 200, 40, text)
    assert all(n <= provider.window_pieces for n in provider.piece_counts([c.text for c in fitted]))
    assert "".join(c.text for c in fitted if c.start_line == c.end_line == 2).replace("\n", "")  # pieces of line 2


def test_providers_without_a_tokenizer_are_unchanged() -> None:
    chunks = [Chunk(1, 1, "x" * 5000, "h")]
    assert fit_to_window(chunks, object(), 200, 40, "x" * 5000) == chunks


def _long_line_note() -> str:
    import random

    rnd = random.Random(7)
    para = " ".join(f"deploy build {rnd.getrandbits(40):010x} to cluster eu-west-{i % 3 + 1} via"
                    f" https://ci.example.com/jobs/{rnd.getrandbits(32)}/logs?attempt={i}" for i in range(60))
    return "# Incident 2026-10-30\n\n" + para + "\n\nOwner: Dana. Rollback window: fifteen minutes, flamingo protocol.\n"


def _outside(text: str, cited: str) -> list[str]:
    """The lines of a chunk's ``text`` not found in the text of the lines it cites."""
    return [x for x in text.split("\n") if x.strip() and x.strip() not in cited]


def test_a_part_after_a_line_longer_than_the_budget_is_cited_at_its_own_lines(provider) -> None:  # type: ignore[no-untyped-def]
    """Audit F (the thirty-ninth session): a line over the chunker's budget is several lines of a
    chunk's text, and the parts of a re-split chunk were cited at its first line plus their offset
    in the text: 13 of 46 parts of this note cited line 4 (empty) for the build ids of line 3."""
    text = _long_line_note()
    lines = text.split("\n")
    ref = chunk_markdown(text, 200, 40)
    fitted = [c for c in fit_to_window(ref, provider, 200, 40, text) if c.text.strip()]
    assert len(fitted) > len(ref)  # re-split: the case in question
    for c in fitted:
        assert not _outside(c.text, "\n".join(lines[c.start_line - 1:c.end_line])), (c.start_line, c.end_line)
    assert any(c.start_line == c.end_line == 3 for c in fitted)
    last = [c for c in fitted if "flamingo" in c.text]
    assert last and all(c.start_line <= 5 <= c.end_line for c in last)


def test_every_chunk_of_notes_and_transcripts_cites_the_lines_it_holds(provider, workspace, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """End to end with the local model: a note of a long line and the example transcripts (whose
    long assistant messages are cut like a long line): `get` of each chunk's citation holds its
    text. The shipped transcript's "good catch on #1" question was cited three lines below it."""
    import apsw

    from memory_core.index.pipeline import run_index
    from memory_core.query.search import Searcher

    (workspace / "memory" / "incident.md").write_text(_long_line_note(), encoding="utf-8")
    s = load_settings(None, {"workspace": str(workspace), "provider": "local", "sources": ["memory", "sessions"]},
                      env={})
    run_index(s, provider=provider)
    conn = apsw.Connection(str(s.index_file), flags=apsw.SQLITE_OPEN_READONLY)
    rows = list(conn.execute("SELECT path, source, start_line, end_line, text FROM chunks"))
    conn.close()
    bad = []
    with Searcher(s, provider=provider) as se:
        for path, source, start, end, text in rows:
            cited = se.read_file(path, start, end - start + 1).text
            flat = " ".join(cited.split()) if source == "sessions" else cited
            body = " ".join(text.split()) if source == "sessions" else text
            for line in (body.split("\n") if source != "sessions" else
                         [" ".join(x.split()) for x in text.split("\n")]):
                if line.strip() and line.strip() not in flat:
                    bad.append((path, start, end, line[:60]))
                    break
    assert {r[0] for r in rows} >= {"memory/incident.md", "sessions/2026-11-02-rate-limit-review.jsonl"}
    assert not bad, bad[:5]
