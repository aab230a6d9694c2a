"""Issue 38, typed seams: a reader's answers are typed objects, turned into JSON only at the
edges (CLI ``--json``, the MCP tools)."""

from __future__ import annotations

from pathlib import Path

from memory_core.config import load_settings
from memory_core.index.pipeline import run_index
from memory_core.query.results import FileText, MemoryStatus, SearchRun
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


def test_what_a_search_did_is_typed(workspace: Path) -> None:
    """``last_search`` (what the answer's metadata and weak-answer note read) was a dict of loose
    keys shared by three backends; it is a :class:`SearchRun`."""
    s = load_settings(None, {"workspace": str(workspace), "provider": "none"})
    run_index(s)
    with Searcher(s) as searcher:
        assert searcher.last_search == SearchRun()  # nothing searched yet: embedded unknown
        searcher.search("anything at all")
        assert searcher.last_search == SearchRun(backend="builtin", embedded=False, words_absent=False)
        answer = searcher.search_response("")  # an empty query runs no search
    assert answer.backend == "builtin" and answer.fallback is None and answer.results == []


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


# -- functions that return dict[str, Any] / Any: at most these, each at an edge, each for a reason --

# (path, qualified name) -> why it returns Any / dict[str, Any]
UNTYPED_ALLOWED: dict[tuple[str, str], str] = {
    ("memory_core/__init__.py", "__getattr__"): "the package's lazy exports (PEP 562): any of its public names",
    ("memory_core/plugins.py", "provider_class"): "a plugin's class, imported by name; plugins sits below the"
                                                  " provider classes it loads",
    ("memory_core/plugins.py", "engine"): "an orchestrator plugin imported by name (flows.engine); below runtime.engines",
    ("memory_core/embeddings/http.py", "_classes.CappedTransport.handle_request"): "httpx or httpx2, chosen at run"
                                                                                   " time: their classes are Any",
    ("memory_core/embeddings/http.py", "capped_transport"): "a transport of the httpx family chosen at run time",
    ("memory_core/embeddings/http.py", "capped_client"): "a client of the httpx family chosen at run time",
    ("memory_core/embeddings/local.py", "_export_float._Hidden.forward"): "torch's tensors (no stubs)",
    ("memory_core/embeddings/local.py", "LocalProvider._load"): "an ONNX engine or a SentenceTransformer (untyped)",
    ("memory_core/storage/lancedb.py", "_lancedb"): "the optional lancedb module, imported on first use (no stubs)",
    ("memory_core/storage/lancedb.py", "_fts_config"): "lancedb's FTS index config (no stubs)",
    ("memory_core/notes/memory_store.py", "MemoryStore._connect"): "a lancedb connection (no stubs)",
    ("memory_core/index/writer_proc.py", "Channel.recv"): "an unpickled message from the writer process",
    ("memory_core/index/writer_proc.py", "ProcessIndexWriter._call"): "the writer process's answer to any of its calls",
    ("memory_core/index/runtypes.py", "JobOps.result"): "a Batch API step's result: each step returns its own type",
    ("memory_core/index/batch_runner.py", "LocalOps.result"): "JobOps.result in a thread pool",
    ("memory_core/query/retrieval.py", "_Index.tokenizer"): "the FTS5 tokenizer object of apsw (untyped)",
}
MAX_UNTYPED = 16

# returning dict[str, object] (JSON whose values a caller must check before use) is for the edges
# only: what a command prints or a tool answers, what a provider is sent, the meta row written,
# the settings layers read from files and the environment, the settings as JSON (model_dump)
JSON_EDGE_NAMES = {"model_dump", "to_dict", "to_agent", "to_meta", "details", "headline", "status", "index_meta", "request_line",
                   "_create_extra", "input_schema", "scan_report", "batch_state", "build_meta", "built_from",
                   "settings_layer", "agent_told", "_writer_told", "_search_schema_values", "_deep_merge",
                   "_drop_none", "_env_layer", "read_config_file", "resolve_redact_mode", "run_eval"}
MCP_TOOL_MODULES = ("memory_core/apps/mcp_server.py", "memory_core/apps/mcp_store_tools.py")


def returns(*annotations: str) -> dict[tuple[str, str], str]:
    """(path, qualified name) -> annotation of every memory_core function returning one of ``annotations``."""
    import ast

    root = Path(__file__).resolve().parent.parent
    found: dict[tuple[str, str], str] = {}
    for path in sorted((root / "memory_core").rglob("*.py")):
        rel = path.relative_to(root).as_posix()

        def walk(node: ast.AST, stack: list[str], rel: str = rel) -> None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                    name = ".".join([*stack, child.name])
                    got = ast.unparse(child.returns).replace('"', "") if child.returns is not None else ""
                    if got in annotations:
                        found[(rel, name)] = got
                    walk(child, [*stack, child.name])
                elif isinstance(child, ast.ClassDef):
                    walk(child, [*stack, child.name])
                else:
                    walk(child, stack)

        walk(ast.parse(path.read_text(encoding="utf-8")), [])
    return found


def test_at_most_20_functions_return_any_each_for_a_reason() -> None:
    untyped = returns("Any", "dict[str, Any]")
    assert len(untyped) <= MAX_UNTYPED, sorted(untyped)
    assert set(untyped) <= set(UNTYPED_ALLOWED), sorted(set(untyped) - set(UNTYPED_ALLOWED))
    assert all(len(why) > 10 for why in UNTYPED_ALLOWED.values())
    assert len(UNTYPED_ALLOWED) <= MAX_UNTYPED


def test_json_dicts_are_returned_only_at_the_edges() -> None:
    json_out = returns("dict[str, object]")
    off_edge = sorted(k for k in json_out
                      if k[1].rpartition(".")[2] not in JSON_EDGE_NAMES and k[0] not in MCP_TOOL_MODULES)
    assert off_edge == []
