"""Ranking quality through real indexes (issue 26): keyword-only mode is FTS5's BM25 order, the
hybrid beats both of its sides on a labelled fixture, a query naming a day and a topic puts that
day's own note first, and results lifted by their date say so.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from memory_core.config import Settings, load_settings
from memory_core.index.pipeline import run_index
from memory_core.query.search import Searcher
from memory_core.storage.store import connect_reader
from memory_core.storage.textsearch import build_match_query

NOTES = {
    # found by its rare id only: the vector side has no idea what LRK-4471 is
    "memory/projects/payments.md": "# Payments\n\nTicket LRK-4471: the refund webhook retries forever when the "
                                   "acquirer answers 409. Fix: treat 409 as final and alert on-call.\n",
    # found by meaning only: the question shares no word with it
    "memory/recipes/apple-pie.md": "# Grandma's apple pie\n\nBake at 180 C for 45 minutes; let it cool for an hour "
                                   "before slicing, or the filling runs.\n",
    # distractors that share the questions' words without answering them
    "memory/notes/oven-shopping.md": "# Shopping list\n\nNew oven: which temperature range, which brand? Compare "
                                     "prices for the kitchen renovation. Dessert plates too.\n",
    "memory/notes/tickets.md": "# Ticket triage\n\nEvery ticket gets an owner within a day. Retry budgets for "
                               "webhooks are set per integration.\n",
    "memory/notes/garden.md": "# Garden\n\nPlanted tulips; the lavender needs a trim in spring.\n",
    # ids that look alike to an embedding model: only the exact token tells them apart
    "memory/notes/lrk-4417.md": "# LRK-4417\n\nTicket LRK-4417 about LRK-4714 and LRK-4741: flaky login test.\n",
    "memory/notes/lrk-4474.md": "# LRK-4474\n\nTicket LRK-4474, see also LRK-4447: slow dashboard query.\n",
    "memory/notes/dessert-shop.md": "# The dessert shop\n\nThe dessert shop on Main Street opens at 9, the recipe "
                                    "of their cheesecake is secret, and the temperature inside is always too warm.\n",
}
# (query, the one relevant file)
LABELLED = [
    ("LRK-4471", "memory/projects/payments.md"),
    ("refund webhook loops on HTTP 409", "memory/projects/payments.md"),
    ("how long does the fruit tart stay in the oven", "memory/recipes/apple-pie.md"),
    ("baking time for grandma's dessert", "memory/recipes/apple-pie.md"),
]


def _workspace(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return root


@pytest.fixture(scope="module")
def keyword_ws(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    ws = _workspace(tmp_path_factory.mktemp("kw") / "ws", NOTES)
    # more notes that mention webhooks and tickets a different number of times, so BM25 has an order to keep
    for i in range(1, 9):
        (ws / "memory" / "notes" / f"webhook-{i}.md").write_text(
            "# Webhooks\n\n" + " ".join(["webhook retries"] * i) + " and a ticket. " + "filler words here. " * (9 - i))
    s = load_settings(None, {"workspace": str(ws), "provider": "none"})
    run_index(s)
    return s


def test_keyword_only_order_is_fts5_bm25_order(keyword_ws: Settings) -> None:
    query = "webhook retries ticket"
    with Searcher(keyword_ws) as s:
        got = [h.citation for h in s.search(query, max_results=50, min_score=0.0, mode="keyword")]
        scores = [h.score for h in s.search(query, max_results=50, min_score=0.0, mode="keyword")]
    conn = connect_reader(keyword_ws.index_file)
    try:
        rows = conn.execute(
            "SELECT c.path, c.start_line, c.end_line, bm25(chunks_fts) AS r FROM chunks_fts"
            " JOIN chunks c ON c.rid = chunks_fts.rowid WHERE chunks_fts MATCH ? ORDER BY r",
            (build_match_query(query),)).fetchall()
    finally:
        conn.close()
    expected = [f"{p}#L{a}-L{b}" for p, a, b, _ in rows]
    assert len(expected) >= 8 and len({r for *_, r in rows}) >= 8  # BM25 tells them apart
    assert got == expected
    assert all(x > y for x, y in zip(scores, scores[1:], strict=False))  # distinct scores, no clamp ties


@pytest.fixture(scope="module")
def local_ws(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    pytest.importorskip("sentence_transformers")
    ws = _workspace(tmp_path_factory.mktemp("local") / "ws", {
        **NOTES,
        "memory/2026-11-04.md": "# 2026-11-04\n\n- Standup: release train slipped a day.\n- Checked the hives: the "
                                "bees were calm, added a feeder.\n- Dentist moved to Friday.\n",
        "memory/2026-11-05.md": "# 2026-11-05\n\n- Bees: all about the bees today. Bee colony inspection, bee feeder "
                                "refill, queen bee spotted, the bees swarmed near the hive entrance.\n",
        "memory/2026-11-03.md": "# 2026-11-03\n\n- Wrote the quarterly planning doc. Lunch with Priya.\n",
    })
    s = load_settings(None, {"workspace": str(ws), "provider": "local"})
    run_index(s)
    return s


def _mrr(searcher: Searcher, mode: str) -> float:
    total = 0.0
    for query, relevant in LABELLED:
        paths = list(dict.fromkeys(h.path for h in searcher.search(query, max_results=10, min_score=0.0, mode=mode)))
        total += 1.0 / (paths.index(relevant) + 1) if relevant in paths else 0.0
    return total / len(LABELLED)


def test_hybrid_beats_both_of_its_sides(local_ws: Settings) -> None:
    with Searcher(local_ws) as s:
        hybrid, keyword, vector = _mrr(s, "hybrid"), _mrr(s, "keyword"), _mrr(s, "vector")
        # each side alone misses the other side's questions; the fusion answers all of them first
        assert hybrid == 1.0, (hybrid, keyword, vector)
        assert keyword < 1.0 and vector < 1.0, (keyword, vector)
        # and at the default threshold the answers are still there
        for query, relevant in LABELLED:
            assert s.search(query)[0].path == relevant, query


def test_a_named_day_and_a_topic_put_that_days_note_first(local_ws: Settings) -> None:
    with Searcher(local_ws) as s:
        hits = s.search("bees on 4 November 2026", min_score=0.0)
        assert hits[0].path == "memory/2026-11-04.md", [(h.path, h.score) for h in hits]
        # the next day's note on the topic is still found, after the day's own
        assert "memory/2026-11-05.md" in [h.path for h in hits]
        assert hits[0].match in ("both", "keyword", "vector")  # it matched its topic too
        # a day's note that does not match the words is found for its day, and says so
        day = s.search("planning doc on 3 November 2026")
        assert day and day[0].path == "memory/2026-11-03.md"
        lifted = [h for h in s.search("bees on 3 November 2026") if h.path == "memory/2026-11-03.md"]
        assert lifted and lifted[0].match == "date", lifted
