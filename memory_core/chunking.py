"""Markdown chunking, compatible with the reference's ``chunkMarkdown``.

Chunk boundaries, line numbers and hashes are part of the on-disk contract (chunk ids and
the embedding cache are keyed on them), so this follows the reference exactly:

* the content is split on ``"\\n"`` only (a ``"\\r"`` stays part of its line);
* ``max_chars = max(32, tokens * 4)``, ``overlap_chars = max(0, overlap * 4)``;
* a line longer than ``max_chars`` is cut into ``max_chars`` segments (never inside a
  surrogate pair: Python strings are code points, so a split can only fall between two
  characters; a lone surrogate from a bad decode is kept whole with its partner if any);
* when adding a segment would overflow, the current chunk is flushed and the trailing
  segments whose lengths reach ``overlap_chars`` are carried into the next chunk;
* ``start_line``/``end_line`` are 1-based and inclusive; ``hash`` is sha256 of the text.

Lengths are counted in code points where the reference counted UTF-16 units; the two only
differ for characters outside the BMP (emoji), where our chunks are slightly larger.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Chunk:
    start_line: int
    end_line: int
    text: str
    hash: str


def sha256_hex(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _segments(line: str, max_chars: int) -> list[str]:
    if line == "":
        return [""]
    if len(line) <= max_chars:
        return [line]
    out = []
    start = 0
    n = len(line)
    while start < n:
        end = min(n, start + max_chars)
        # Never separate a high surrogate from its low surrogate (only possible for text
        # decoded with surrogateescape/surrogatepass).
        if end < n and "\ud800" <= line[end - 1] <= "\udbff" and end - start > 1:
            end -= 1
        out.append(line[start:end])
        start = end
    return out


def chunk_markdown(content: str, tokens: int = 400, overlap: int = 80) -> list[Chunk]:
    """Split ``content`` into overlapping chunks exactly as the reference does.

    Empty content gives one empty chunk ``(1, 1, "")``; callers drop chunks whose
    ``text.strip()`` is empty.
    """
    overlap = max(0, min(overlap, tokens - 1))
    max_chars = max(32, tokens * 4)
    overlap_chars = max(0, overlap * 4)
    chunks: list[Chunk] = []
    current: list[tuple[str, int]] = []
    cur_chars = 0

    def flush() -> None:
        if not current:
            return
        text = "\n".join(seg for seg, _ in current)
        chunks.append(Chunk(current[0][1], current[-1][1], text, sha256_hex(text)))

    def carry() -> None:
        nonlocal current, cur_chars
        if overlap_chars <= 0 or not current:
            current = []
            cur_chars = 0
            return
        acc = 0
        kept: list[tuple[str, int]] = []
        for seg, line_no in reversed(current):
            acc += len(seg) + 1
            kept.insert(0, (seg, line_no))
            if acc >= overlap_chars:
                break
        current = kept
        cur_chars = sum(len(seg) + 1 for seg, _ in kept)

    for line_no, line in enumerate(content.split("\n"), 1):
        for seg in _segments(line, max_chars):
            size = len(seg) + 1
            if cur_chars + size > max_chars and current:
                flush()
                carry()
            current.append((seg, line_no))
            cur_chars += size
    flush()
    return chunks


def remap_chunk_lines(chunks: Sequence[Chunk], line_map: Sequence[int]) -> list[Chunk]:
    """Map content line numbers to source line numbers (session transcripts)."""
    if not line_map:
        return list(chunks)
    last = len(line_map)
    return [
        Chunk(line_map[min(c.start_line, last) - 1], line_map[min(c.end_line, last) - 1], c.text, c.hash)
        for c in chunks
    ]


def chunk_id(source: str, path: str, start_line: int, end_line: int, chunk_hash: str, model: str) -> str:
    """The reference's chunk id: sha256 of ``source:path:start:end:hash:model``."""
    return sha256_hex(f"{source}:{path}:{start_line}:{end_line}:{chunk_hash}:{model}")
