"""Issue 38, typed seams: a reader's answers are typed objects, turned into JSON only at the
edges (CLI ``--json``, the MCP tools)."""

from __future__ import annotations

from pathlib import Path

from memory_core.config import load_settings
from memory_core.index.pipeline import run_index
from memory_core.query.results import FileText, MemoryStatus
from memory_core.query.search import Searcher
from memory_core.storage.indexmeta import IndexRecord


def test_a_searchers_status_and_read_are_typed(workspace: Path) -> None:
    s = load_settings(None, {"workspace": str(workspace), "provider": "none"})
    with Searcher(s) as searcher:
        missing = searcher.status()
        assert isinstance(missing, MemoryStatus) and missing.state == "missing" and not missing.exists
        assert missing.to_dict() == {"index_path": str(s.index_file), "exists": False, "state": "missing"}
    summary = run_index(s)
    with Searcher(s) as searcher:
        st = searcher.status()
        got = searcher.read_file("MEMORY.md#L1-L2")
    assert isinstance(st, MemoryStatus) and st.state == "ok" and st.files == summary.files_new
    assert isinstance(st.built_from, IndexRecord) and st.built_from.workspace == str(workspace)
    assert st.vector_search == "off (keyword-only index)" and st.to_dict()["built_from"]["provider"] == "none"
    assert isinstance(got, FileText) and (got.path, got.start_line, got.lines) == ("MEMORY.md", 1, 2)
    assert got.to_dict() == {"path": "MEMORY.md", "text": got.text, "source": "memory", "from": 1, "lines": 2}


def test_the_index_record_types_every_meta_entry_readers_use(workspace: Path, openai_fake: object) -> None:
    from tests.conftest import openai_settings

    s = openai_settings(workspace, openai_fake)
    summary = run_index(s)
    with Searcher(s) as searcher:
        meta = searcher.index_meta()
        record = searcher.index_record()
    assert record is not None and record == IndexRecord.from_meta(meta)
    assert (record.provider, record.model, record.dims) == ("openai", "text-embedding-3-small", 64)
    assert record.has_vectors and record.vector_store == "blob+bits"
    assert record.provider_reason == meta["provider_reason"] and record.built_at == meta["built_at"]
    assert record.counts["chunks"] == summary.chunks_total == meta["counts"]["chunks"]
    assert record.chunks_over_window == meta["chunks_over_window"]
    keyword = IndexRecord.from_meta({**meta, "provider": "none", "dims": None})
    assert keyword is not None and not keyword.has_vectors
