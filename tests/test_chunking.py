import hashlib

from hypothesis import given, settings
from hypothesis import strategies as st

from memory_core.index.chunking import (
    Chunk,
    chunk_id,
    chunk_markdown,
    chunk_markdown_loop,
    remap_chunk_lines,
    sha256_hex,
)


def spans(chunks: list[Chunk]) -> list[tuple[int, int, str]]:
    return [(c.start_line, c.end_line, c.text) for c in chunks]


def test_reference_examples():
    assert spans(chunk_markdown("", 400, 80)) == [(1, 1, "")]
    assert spans(chunk_markdown("a\nb\nc", 400, 80)) == [(1, 3, "a\nb\nc")]
    six = "\n".join(f"line{i}" for i in range(1, 7))
    assert spans(chunk_markdown(six, 2, 1)) == [
        (1, 5, "line1\nline2\nline3\nline4\nline5"),
        (5, 6, "line5\nline6"),
    ]
    five = "\n".join(ch * 10 for ch in "abcde")
    got = chunk_markdown(five, 8, 2)
    assert [(c.start_line, c.end_line) for c in got] == [(1, 2), (2, 3), (3, 4), (4, 5)]
    assert all(len(c.text.split("\n")) == 2 for c in got)


def test_hash_and_id_match_reference():
    assert sha256_hex("hello") == "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"
    c = chunk_markdown("hello", 400, 80)[0]
    assert c.hash == sha256_hex("hello")
    expected = hashlib.sha256(f"memory:MEMORY.md:1:1:{c.hash}:m".encode()).hexdigest()
    assert chunk_id("memory", "MEMORY.md", 1, 1, c.hash, "m") == expected


def test_session_remap_reference():
    content = "User: Hello\nAssistant: Hi\nUser: Question\nAssistant: Answer\nUser: Thanks"
    chunks = remap_chunk_lines(chunk_markdown(content, 400, 80), [4, 6, 7, 10, 13])
    assert chunks[0].start_line == 4 and chunks[-1].end_line == 13


def test_long_line_is_split_and_lines_point_at_the_file():
    text = "intro\n" + "x" * 5000 + "\nlast line"
    chunks = chunk_markdown(text, 100, 0)  # 400 chars
    assert all(len(c.text) <= 400 for c in chunks)
    assert chunks[0].start_line == 1
    assert chunks[-1].end_line == 3
    # every long-line segment is attributed to line 2
    middle = [c for c in chunks if "x" * 300 in c.text]
    assert middle and all(c.start_line <= 2 <= c.end_line for c in middle)
    # no characters lost and none duplicated (overlap 0)
    assert sum(c.text.count("x") for c in chunks) == 5000


def test_carriage_returns_are_kept_and_lines_are_exact():
    text = "a\r\nb\r\nc"
    (c,) = chunk_markdown(text, 400, 80)
    assert c.text == text and (c.start_line, c.end_line) == (1, 3)


def test_surrogate_pair_never_split():
    # a lone high surrogate (as from surrogateescape decoding) right at a cut point
    line = "a" * 31 + "\ud83d\ude00" + "b" * 40
    chunks = chunk_markdown(line, 8, 0)  # max 32 chars
    assert len(chunks) == 3 and "".join(c.text for c in chunks) == line  # cut, nothing lost or repeated
    assert chunks[0].text == "a" * 31  # the cut moved back one character to keep the pair whole
    assert chunks[1].text.startswith("\ud83d\ude00")
    for c in chunks:
        assert not c.text.endswith("\ud83d")
        assert not c.text.startswith("\ude00")


def test_overlap_is_clamped():
    text = "\n".join("word " * 20 for _ in range(50))
    chunks = chunk_markdown(text, 50, 500)  # overlap >= tokens is clamped to tokens-1
    assert len(chunks) > 1
    starts = [c.start_line for c in chunks]
    assert starts == sorted(starts)


_LINE = st.text(alphabet=st.sampled_from(["a", "b", " ", "é", "中", "\r", "#", "-"]), max_size=90)


@settings(max_examples=400, deadline=None)
@given(lines=st.lists(_LINE, max_size=60), tokens=st.integers(1, 40), overlap=st.integers(0, 60))
def test_fast_chunking_equals_the_line_loop(lines, tokens, overlap):
    """The binary-search chunker (short lines) and the reference line loop give the same chunks."""
    content = "\n".join(lines)
    assert chunk_markdown(content, tokens, overlap) == chunk_markdown_loop(content, tokens, overlap)


def test_a_notes_last_chunk_ends_at_its_last_line_not_after_the_final_newline() -> None:
    """The reference's split on ``\\n`` counts an empty "line" after a file's final newline, so a
    one-line note was cited ``#L1-L2`` (while ``memory-core write`` said ``#L1-L1``) and every
    note's last chunk one line past its end; ``end_at_last_line`` ends it at the last line, text
    and hash as they were."""
    from memory_core.index.chunking import end_at_last_line

    one = "Decided: Lisbon trip budget is 2,400 EUR.\n"
    (c,) = chunk_markdown(one)
    assert (c.start_line, c.end_line) == (1, 2)  # as the reference counts
    (d,) = end_at_last_line([c], one)
    assert (d.start_line, d.end_line, d.text, d.hash) == (1, 1, c.text, c.hash)

    long = "".join(f"line {i} of a note that goes on for a while to fill the chunks\n" for i in range(1, 41))
    chunks = chunk_markdown(long, tokens=100, overlap=20)
    ended = end_at_last_line(chunks, long)
    assert len(chunks) > 2 and [c.end_line for c in ended[:-1]] == [c.end_line for c in chunks[:-1]]
    assert ended[-1].end_line == 40 == long.count("\n") and chunks[-1].end_line == 41
    assert [(c.text, c.hash, c.start_line) for c in ended] == [(c.text, c.hash, c.start_line) for c in chunks]

    no_newline = long.rstrip("\n")  # nothing after the last line: as it was
    assert end_at_last_line(chunk_markdown(no_newline, 100, 20), no_newline) == chunk_markdown(no_newline, 100, 20)
    blank_last = "a\nb\n\n"  # a blank line 3, then the newline: ends at the blank line
    assert end_at_last_line(chunk_markdown(blank_last), blank_last)[-1].end_line == 3
