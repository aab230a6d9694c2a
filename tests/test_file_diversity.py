"""Issue 37, several sessions: a short answer shows each session's best chunk before a second
chunk of the same session (``query.file_diversity``, ``ranking.diversify_files``); scores, the
threshold and the order of files do not change, and one side alone keeps that side's order."""

from __future__ import annotations

from pathlib import Path

import pytest

from memory_core.config import load_settings
from memory_core.index.pipeline import run_index
from memory_core.query import ranking
from memory_core.query.search import Searcher


def _hit(path: str, score: float, i: int) -> ranking.Hit:
    return ranking.Hit(id=f"{path}:{i}", path=path, source="memory", start_line=i, end_line=i, text="t",
                       score=score, relevance=score)


def test_diversify_files_places_further_chunks_by_a_falling_key() -> None:
    hits = [_hit("a.md", 0.60, 1), _hit("a.md", 0.55, 2), _hit("a.md", 0.50, 3), _hit("b.md", 0.46, 1),
            _hit("c.md", 0.30, 1)]
    got = ranking.diversify_files(hits, 0.8)
    # a.md's 2nd chunk is placed at 0.44 (< b.md's 0.46), its 3rd at 0.32 (> c.md's 0.30)
    assert [(h.path, h.start_line) for h in got] == [("a.md", 1), ("b.md", 1), ("a.md", 2), ("a.md", 3), ("c.md", 1)]
    assert [h.score for h in got] == [0.60, 0.46, 0.55, 0.50, 0.30]  # scores unchanged
    # the order of files (by their best chunk) never changes
    assert list(dict.fromkeys(h.path for h in got)) == list(dict.fromkeys(h.path for h in hits))
    assert ranking.diversify_files(hits, 1.0) == hits  # 1: off
    assert ranking.diversify_files(hits, 0.9)[1].path == "a.md"  # 0.55 * 0.9 = 0.495 > 0.46


def kayak_notes(ws: Path) -> Path:
    """One long note about the kayak course (several chunks that all match), one short note that
    mentions it once among other things (one chunk, a weaker match)."""
    (ws / "memory").mkdir(parents=True)
    filler = " ".join(f"word{i} other{i} thing{i}" for i in range(80))
    parts = [f"## Part {n}\n\nThe kayak course at the lake, kayak course notes {n}. {filler}\n" for n in range(3)]
    (ws / "memory" / "kayak.md").write_text("# Kayak course\n\n" + "\n".join(parts))
    errands = " ".join(f"errand{i} shop{i}" for i in range(100))
    (ws / "memory" / "errands.md").write_text(f"# Errands\n\nBought bread, paid the kayak course deposit, {errands}.\n")
    return ws


@pytest.fixture(scope="module")
def kayak(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return kayak_notes(tmp_path_factory.mktemp("div") / "ws")


def test_a_short_answer_shows_the_other_files_best_chunk(kayak: Path) -> None:
    # file diversity alone (a file's relevance as a whole, query.file_support, off: test_file_support.py)
    s = load_settings(None, {"workspace": str(kayak), "provider": "local", "query": {"file_support": 0}})
    run_index(s)
    with Searcher(s) as searcher:
        off = s.model_copy(update={"query": s.query.model_copy(update={"file_diversity": 1.0})})
        searcher.settings = off
        plain = searcher.search("kayak course", max_results=3)
        assert len({h.citation for h in searcher.search("kayak course", max_results=20)
                    if h.path == "memory/kayak.md"}) >= 3  # the long note is several matching chunks
        assert [h.path for h in plain] == ["memory/kayak.md"] * 3, [(h.citation, h.score) for h in plain]
        searcher.settings = s
        got = searcher.search("kayak course", max_results=3)
        assert "memory/errands.md" in [h.path for h in got], [(h.citation, h.score) for h in got]
        assert "memory/errands.md" not in [h.path for h in plain]
        assert got[0].citation == plain[0].citation and got[0].score == plain[0].score
        # the same results, only placed differently
        every = {(h.citation, h.score) for h in searcher.search("kayak course", max_results=50)}
        searcher.settings = off
        assert every == {(h.citation, h.score) for h in searcher.search("kayak course", max_results=50)}
        searcher.settings = s
        # keyword-only mode keeps exactly BM25's order
        kw = searcher.search("kayak course", max_results=3, mode="keyword")
        assert [h.path for h in kw] == ["memory/kayak.md"] * 3
    # a keyword-only index answers a hybrid search exactly as keyword mode (no reordering)
    none = load_settings(None, {"workspace": str(kayak), "provider": "none",
                                "index_path": str(kayak / "kw.sqlite")})
    run_index(none)
    with Searcher(none) as searcher:
        assert ([h.citation for h in searcher.search("kayak course", max_results=3)]
                == [h.citation for h in searcher.search("kayak course", max_results=3, mode="keyword")])
