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
import re
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass, replace
from itertools import accumulate

# the chunk defaults are the providers' facts (embeddings.base); imported here, where they are applied
from memory_core.embeddings.base import CHARS_PER_TOKEN, DEFAULT_CHUNK_OVERLAP, DEFAULT_CHUNK_TOKENS
from memory_core.sources.sessions import message_windows


def max_chunk_chars(tokens: int) -> int:
    """The most characters a chunk of ``tokens`` holds: ``max(32, tokens * 4)``."""
    return max(32, tokens * CHARS_PER_TOKEN)


def overlap_chunk_chars(overlap: int) -> int:
    """Characters carried into the next chunk: ``max(0, overlap * 4)``."""
    return max(0, overlap * CHARS_PER_TOKEN)


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


def chunk_markdown(content: str, tokens: int = DEFAULT_CHUNK_TOKENS, overlap: int = DEFAULT_CHUNK_OVERLAP) -> list[Chunk]:
    """Split ``content`` into overlapping chunks exactly as the reference does.

    Empty content gives one empty chunk ``(1, 1, "")``; callers drop chunks whose
    ``text.strip()`` is empty.

    When no line is longer than ``max_chars`` (nearly always), every line is one segment and
    the chunk boundaries are found by binary search over the running sizes: Python work per
    chunk instead of per line (3-4x faster on notes of short lines). Otherwise the line loop
    of :func:`chunk_markdown_loop` runs. Both give the same chunks (tests/test_chunking.py
    compares them on generated text).
    """
    overlap = max(0, min(overlap, tokens - 1))
    max_chars = max_chunk_chars(tokens)
    overlap_chars = overlap_chunk_chars(overlap)
    lines = content.split("\n")
    if max(map(len, lines)) > max_chars:
        return chunk_markdown_loop(content, tokens, overlap)
    # P[i]: size of lines[0:i], a line counting its length + 1 (the reference's newline)
    sizes = list(accumulate(map((1).__add__, map(len, lines)), initial=0))
    n = len(lines)
    join = "\n".join
    chunks: list[Chunk] = []
    k, e = 0, 1  # the current chunk holds lines[k:e]; the first line is always taken
    while True:
        # the first line j >= e whose addition overflows: sizes[j + 1] - sizes[k] > max_chars
        j = bisect_right(sizes, sizes[k] + max_chars, e + 1) - 1
        if j >= n:
            break
        text = join(lines[k:j])
        chunks.append(Chunk(k + 1, j, text, sha256_hex(text)))
        if overlap_chars > 0:
            # carry the trailing lines whose sizes reach overlap_chars (all of them if none do)
            i = bisect_right(sizes, sizes[j] - overlap_chars, k, j) - 1
            k = i if i >= k else k
        else:
            k = j
        e = j + 1  # line j is added after the flush whatever its size
    text = join(lines[k:])
    chunks.append(Chunk(k + 1, n, text, sha256_hex(text)))
    return chunks


def chunk_markdown_loop(content: str, tokens: int = DEFAULT_CHUNK_TOKENS,
                        overlap: int = DEFAULT_CHUNK_OVERLAP) -> list[Chunk]:
    """:func:`chunk_markdown` as the reference wrote it: one pass over lines and segments."""
    overlap = max(0, min(overlap, tokens - 1))
    max_chars = max_chunk_chars(tokens)
    overlap_chars = overlap_chunk_chars(overlap)
    chunks: list[Chunk] = []
    # The current chunk as parallel lists (segments and their 1-based line numbers): this
    # loop runs once per line of the corpus, so it avoids per-segment tuples and calls.
    segs: list[str] = []
    nums: list[int] = []
    cur_chars = 0
    join = "\n".join
    for line_no, line in enumerate(content.split("\n"), 1):
        for seg in ((line,) if len(line) <= max_chars else _segments(line, max_chars)):
            size = len(seg) + 1
            if cur_chars + size > max_chars and segs:
                text = join(segs)
                chunks.append(Chunk(nums[0], nums[-1], text, sha256_hex(text)))
                # carry the trailing segments whose lengths reach overlap_chars
                if overlap_chars <= 0:
                    segs, nums, cur_chars = [], [], 0
                else:
                    acc = 0
                    i = len(segs)
                    while i > 0:
                        i -= 1
                        acc += len(segs[i]) + 1
                        if acc >= overlap_chars:
                            break
                    if i:
                        del segs[:i], nums[:i]
                    cur_chars = acc
            segs.append(seg)
            nums.append(line_no)
            cur_chars += size
    if segs:
        text = join(segs)
        chunks.append(Chunk(nums[0], nums[-1], text, sha256_hex(text)))
    return chunks


def end_at_last_line(chunks: Sequence[Chunk], content: str) -> list[Chunk]:
    """``chunks`` of ``content`` with the empty "line" after its final newline out of their line
    ranges: a file of one line and a newline is cited ``#L1-L1``, as an editor and ``wc -l`` count
    it, not ``#L1-L2`` (the reference's split on ``\n`` counts one line more than the file has,
    and every note's last chunk said so). Text and hash are unchanged (the chunk still holds the
    newline), only the end line: a chunk of that empty line alone has no text and is dropped by
    the caller anyway."""
    if not content.endswith("\n"):
        return list(chunks)
    n = content.count("\n") + 1  # the split's line count: its last "line" is the empty one
    return [replace(c, end_line=n - 1) if c.end_line == n and c.start_line < n else c for c in chunks]


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


def _text_line_numbers(c: Chunk, lines: Sequence[str], max_chars: int) -> list[int] | None:
    """The line of ``lines`` (1-based) each line of ``c.text`` comes from: a chunk of
    :func:`chunk_markdown` holds a line whole, or segments of a line longer than ``max_chars``
    (each a line of its text), so its text's lines need not be one a line of the file. None when
    the text is not such a run of segments (not a chunk of ``lines``)."""
    text_lines = c.text.split("\n")
    if len(text_lines) == c.end_line - c.start_line + 1:  # every line contributes one: whole or one segment
        return list(range(c.start_line, c.end_line + 1))
    if not 1 <= c.start_line <= c.end_line <= len(lines):
        return None
    segs = [(no, seg) for no in range(c.start_line, c.end_line + 1)
            for seg in _segments(lines[no - 1], max_chars)]
    n = len(text_lines)
    for i in range(len(segs) - n + 1):  # the run starts in the first line's segments
        if segs[i][0] != c.start_line:
            break
        if segs[i + n - 1][0] == c.end_line and all(segs[i + k][1] == text_lines[k] for k in range(n)):
            return [segs[i + k][0] for k in range(n)]
    return None


def fit_to_window(chunks: Sequence[Chunk], provider: object, tokens: int, overlap: int, content: str) -> list[Chunk]:
    """Re-split, at line boundaries, the chunks longer than the embedding model's input window.

    Only for a provider with its own tokenizer (``piece_counts(texts)`` and ``window_pieces``:
    the local model); others get ``chunks`` back unchanged. Chunks that fit keep the
    reference chunker's boundaries (and so their ids and cached vectors). A chunk over the
    window is chunked again by :func:`chunk_markdown` with a character budget scaled by
    ``window / pieces`` (shrunk further until every part fits, overlap scaled alike), so its
    parts still start and end on line boundaries (a single line longer than the window is cut
    into segments, as the reference cuts any over-long line). Line numbers are those of
    ``content``, the text ``chunks`` were cut from: a part's lines are looked up line by line
    (:func:`_text_line_numbers`), as a line over the chunker's ``max_chars`` is several lines of a
    chunk's text (an unwrapped paragraph, a pasted log, a long message of a transcript). They were
    once the chunk's first line plus the part's offset in its text, which cited every part after
    such a line too far down (the thirty-ninth session's audit F: a build id on line 1 cited as
    line 4, a transcript's question as the reply three lines below it).
    """
    count = getattr(provider, "piece_counts", None)
    window = getattr(provider, "window_pieces", None)
    if not callable(count) or not isinstance(window, int) or window <= 8 or not chunks:
        return list(chunks)
    pieces = count([c.text for c in chunks])
    lines = content.split("\n")
    max_chars = max_chunk_chars(tokens)
    out: list[Chunk] = []
    for c, n in zip(chunks, pieces, strict=True):
        if n <= window:
            out.append(c)
            continue
        budget = tokens
        parts = [c]
        for _ in range(8):
            budget = max(8, int(budget * window / n * 0.95))
            parts = chunk_markdown(c.text, budget, overlap * budget // max(1, tokens))
            n = max(count([p.text for p in parts]), default=0)
            if n <= window or budget == 8:
                break
        nums = _text_line_numbers(c, lines, max_chars)
        if nums is None:  # not a chunk of ``content`` (a caller's error): each line of its text taken for one of the file
            nums = list(range(c.start_line, c.start_line + c.text.count("\n") + 1))
        out.extend(Chunk(nums[p.start_line - 1], nums[min(p.end_line, len(nums)) - 1], p.text, p.hash)
                   for p in parts)
    return out


def _code_lines(lines: Sequence[str]) -> int:
    """How many of a note's non-empty ``lines`` are code: a fence (```, ~~~) and what it holds,
    Markdown's indented code (4 spaces or a tab) and a doctest's prompts (``>>>``, ``...``)."""
    fence = False
    code = 0
    for line in lines:
        marker = line.lstrip().startswith(("```", "~~~"))
        if marker or fence or line.startswith(("    ", "\t", ">>> ", "... ")) or line.strip() in (">>>", "..."):
            code += 1
        if marker:
            fence = not fence
    return code


# a line that starts an item of its own: a list item, heading, quote, table row, a speaker's line
# ("Kate: ...") or a timed one ("08:52 ...", "[08:52] ...")
_ITEM_START = re.compile(r"(?:[-*+>|#]|\d{1,3}[.)](?:\s|$)|\[|\d{1,2}:\d{2}\b|[^\W\d][\w .'-]{0,30}:(?:\s|$))")
_SENTENCE_END = re.compile(r"[.!?:;]['\")\]]*\s*$")
_UNDERLINE = re.compile(r"=+|-+")  # under a line: that line is a heading (Markdown's setext form)
WRAPPED_LINE_CHARS = 60
"""A line at least this long (stripped) that the next line continues is a wrapped one: the next
line is the same item (paragraph, list item) unless it starts an item of its own."""


def note_items(text: str) -> list[str]:
    """A note chunk's non-empty lines grouped into the items they write: a line continues the item
    above it (no blank line between) unless it starts one of its own (:data:`_ITEM_START`), when it
    hangs under it (indented deeper than the item's first line: a wrapped list item, a parameter's
    description) or the line above was wrapped (:data:`WRAPPED_LINE_CHARS` or more, or cut mid-
    sentence before a lower-case word). So a paragraph hard-wrapped at 72 columns is one item and
    a daily note's bullets or a chat's lines are one item each; a heading underlined with ``===``
    or ``---`` is one item with its underline, a doctest (``>>>`` and what follows it up to a blank
    line) one item; a fenced block's lines stay one item each (a chunk that is mostly code has no
    windows at all)."""
    items: list[list[str]] = []
    blank = True
    fence = False
    for line in text.split("\n"):
        body = line.strip()
        if not body:
            blank = True
            continue
        marker = body.startswith(("```", "~~~"))
        code, fence = fence or marker, fence != marker  # a fence's lines are items of their own
        if items and not blank and not code and (
                _UNDERLINE.fullmatch(body) or items[-1][0].lstrip().startswith(">>>")):
            items[-1].append(line)  # a heading's underline (setext); a doctest's further lines and output
            continue
        if items and not blank and not code and not _ITEM_START.match(body):
            first, prev = items[-1][0], items[-1][-1].rstrip()
            hangs = len(line) - len(line.lstrip()) > len(first) - len(first.lstrip())
            wrapped = len(prev.strip()) >= WRAPPED_LINE_CHARS or (
                not _SENTENCE_END.search(prev) and body[:1].islower())
            if hangs or wrapped:
                items[-1].append(line)
                blank = False
                continue
        items.append([line])
        blank = False
    return ["\n".join(item) for item in items]


def note_windows(text: str) -> list[str]:
    """The parts of a note's chunk embedded beside it (``chunking.note_windows``;
    :mod:`memory_core.storage.vectors`): its items (:func:`note_items`: a line, or a paragraph or
    list item wrapped over several) in overlapping windows of 4, 2 apart
    (:func:`memory_core.sources.sessions.message_windows`); ``[]`` for 4 items or fewer (the chunk's
    own vector is that window) and for a chunk that is mostly code (half its lines or more in a
    fence or indented), whose lines are not read one thought at a time.

    A daily note is a list of unrelated lines ("- 08:52 Dana wants the open list", "- oat milk
    x2", a chat written down line by line): one vector for twenty of them matches none well. A
    paragraph wrapped over lines is one thought: windows of its lines cut it mid-sentence, and
    they cost prose notes (docs/search.md, "Note windows")."""
    lines = [line for line in text.split("\n") if line.strip()]
    if _code_lines(lines) * 2 >= len(lines):
        return []
    return message_windows(note_items(text))
