"""The LanceDB memory store (issue 23 part 1): library, CLI and MCP (the SDK's own client over stdio).

Real lancedb in tmp folders; vectors from the OpenAI fake server (64-d, a hash of the text, so only
an identical text is a near duplicate) or, for paraphrase-level duplicates, the real local model.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, StdioServerParameters, stdio_client

from memory_core.apps.cli import main
from memory_core.config import load_settings
from memory_core.errors import UsageError
from memory_core.notes import memory_store as lancedb_store
from memory_core.notes.memory_store import MemoryStore, store_dir
from memory_core.query import ranking
from tests.conftest import ROOT, openai_settings

SECRET = "sk-proj-abcdefghijklmnopqrstuvwxyz012345"
DAY_MS = 86_400_000


def _toml(base_url: str, extra: str = "") -> str:
    return (f'provider = "openai"\nmodel = "text-embedding-3-small"\n{extra}[remote]\nbase_url = "{base_url}"\n'
            'api_key = "sk-test-key-0123456789"\ndimensions = 64\nbackoff_initial_s = 0.01\n'
            "backoff_max_s = 0.05\nmax_attempts = 2\ntimeout_s = 30\n")


@pytest.fixture
def store(workspace: Path, openai_fake: Any):
    s = MemoryStore(openai_settings(workspace, openai_fake))
    yield s
    s.close()


def test_store_recall_list_forget_and_duplicates(store: MemoryStore, openai_fake: Any):
    assert not store.path.exists()
    assert store.recall("anything").hits == [] and store.list() == [] and store.count() == 0
    assert not store.path.exists(), "a read never creates the store"

    a = store.store("The staging database is stg-db-4417", 0.6, "fact")
    assert a.action == "created" and store.path == store_dir(store.settings)
    assert store.path == store.settings.index_file.parent / "lancedb" and (store.path / "memories.lance").is_dir()
    b = store.store("We decided to deploy only on Tuesdays", 0.8, "decision")
    store.store("The user prefers dark mode in every editor", 0.9, "preference")
    assert store.count() == 3 and len({a.memory.id, b.memory.id}) == 2

    # the same memory again: the stored one is updated (createdAt kept), nothing added
    again = store.store("We decided to deploy only on Tuesdays", 0.3, "fact")
    assert again.action == "updated" and again.memory.id == b.memory.id and again.similarity > 0.99
    assert again.previous_text == "We decided to deploy only on Tuesdays"
    assert store.count() == 3
    got = store.get(b.memory.id)
    assert got is not None and got.importance == 0.3 and got.category == "fact"
    assert got.created_at == b.memory.created_at and got.updated_at >= b.memory.updated_at
    assert again.to_dict()["action"] == "updated" and a.to_dict()["action"] == "created"

    # recall: a verbatim identifier, found by both sides, scored on the file index's scale
    rec = store.recall("stg-db-4417", min_score=0)
    top = rec.hits[0]
    assert top.memory.id == a.memory.id and top.match == "both" and top.score > 0.5
    agent = top.to_agent()
    assert agent["citation"] == f"store:{a.memory.id}" and agent["source"] == "store"
    assert {"path", "startLine", "endLine", "score", "snippet", "citation", "id", "category", "importance"} <= set(agent)
    # the file results' keys, each spelled once (a daily user's audit: the store's had start_line too)
    from memory_core.query.rank import AGENT_RESULT_KEYS
    assert set(AGENT_RESULT_KEYS) <= set(agent) and not {"start_line", "end_line"} & set(agent)
    # the reported score is ranking.fuse_calibrated's relevance for the hit's raw scores
    bm25 = top.text_score / (1 - top.text_score)
    assert bm25 > 0 and -1 <= top.vector_score <= 1
    # category filter: nothing outside it comes back
    assert all(h.memory.category == "preference" for h in store.recall("stg-db-4417", min_score=0,
                                                                       categories=["preference"]).hits)
    assert store.recall("stg-db-4417", min_score=0, categories=["preference"]).hits[0].memory.id != a.memory.id
    # min_score applies to the calibrated relevance: an unrelated query finds nothing at the default
    assert store.recall("zzqx wvbn okonomiyaki").hits == []

    # list: newest stored first; by category
    assert [m.id for m in store.list()][0] == b.memory.id  # updated last
    assert [m.category for m in store.list("decision")] == []
    assert len(store.list(limit=2)) == 2

    # forget: an unknown id is an error and deletes nothing; a known one goes
    with pytest.raises(UsageError, match="no memory with id"):
        store.forget("0" * 32)
    with pytest.raises(UsageError, match="not a memory id"):
        store.forget("x' OR '1'='1")
    assert store.count() == 3
    assert store.forget(a.memory.id).text == "The staging database is stg-db-4417"
    assert store.count() == 2 and store.get(a.memory.id) is None
    assert all(h.memory.id != a.memory.id for h in store.recall("stg-db-4417", min_score=0).hits)


def test_bad_input_is_a_clear_error_and_writes_nothing(store: MemoryStore):
    store.store("one good memory", 0.5, "fact")
    for kwargs, needle in [
        ({"text": "x", "category": "opinion"}, "category must be one of"),
        ({"text": "x", "importance": 1.5}, "importance must be"),
        ({"text": "x", "importance": -0.1}, "importance must be"),
        ({"text": "x", "importance": float("nan")}, "importance must be"),
        ({"text": "   "}, "needs some text"),
        ({"text": "x" * (lancedb_store.MAX_MEMORY_CHARS + 1)}, "at most"),
    ]:
        with pytest.raises(UsageError, match=needle):
            store.store(**kwargs)
    with pytest.raises(UsageError, match="category must be one of"):
        store.recall("x", categories=["opinion"])
    with pytest.raises(UsageError, match="category must be one of"):
        store.list("opinion")
    assert store.count() == 1


def test_secrets_are_redacted_before_they_are_embedded_or_stored(store: MemoryStore, openai_fake: Any):
    r = store.store(f"The deploy key is api_key = {SECRET} for the CI", 0.5, "fact")
    assert r.redacted and SECRET not in r.memory.text and "api_key = " in r.memory.text
    assert all(SECRET not in t for t in openai_fake.input_texts), "the secret never left the machine"
    raw = b"".join(p.read_bytes() for p in store.path.rglob("*") if p.is_file())
    assert SECRET.encode() not in raw and b"for the CI" in raw


def test_importance_and_recency_order_equally_relevant_memories(store: MemoryStore, monkeypatch):
    # keyword mode: the same words give the same BM25, so the same relevance
    lo = store.store("alpha beta gamma delta", 0.1, "fact")
    hi = store.store("delta gamma beta alpha", 0.9, "fact")
    rec = store.recall("alpha gamma", mode="keyword", min_score=0).hits
    assert [h.memory.id for h in rec] == [hi.memory.id, lo.memory.id]
    assert rec[0].score == pytest.approx(rec[1].score), "importance orders; the score stays the relevance"
    # recency: a year-old memory of equal relevance and importance comes after a new one
    now = lancedb_store._now_ms()
    monkeypatch.setattr(lancedb_store, "_now_ms", lambda: now - 365 * DAY_MS)
    old = store.store("epsilon zeta eta", 0.5, "fact")
    monkeypatch.setattr(lancedb_store, "_now_ms", lambda: now)
    new = store.store("eta zeta epsilon", 0.5, "fact")
    rec = store.recall("zeta epsilon", mode="keyword", min_score=0).hits
    assert [h.memory.id for h in rec] == [new.memory.id, old.memory.id]
    # a much more relevant old memory still beats a weak new one (recency only breaks near-ties)
    assert store.recall("epsilon zeta eta", mode="vector", min_score=0).hits[0].memory.id == old.memory.id


def test_no_provider_and_another_provider(workspace: Path, openai_fake: Any):
    none = load_settings(None, {"workspace": str(workspace), "provider": "none"})
    with MemoryStore(none) as s, pytest.raises(UsageError, match="needs an embedding provider"):
        s.store("remember me", 0.5, "fact")
    assert not store_dir(none).exists(), "nothing was written"

    with MemoryStore(openai_settings(workspace, openai_fake)) as s:
        s.store("The quokka census is in March", 0.5, "fact")
    # keyword-only recall without a provider, and says so
    with MemoryStore(none) as s:
        rec = s.recall("quokka census", min_score=0)
        assert [h.memory.text for h in rec.hits] == ["The quokka census is in March"]
        assert rec.hits[0].match == "keyword" and "keyword-only" in rec.note
    # another provider configuration (other dimensions) refuses to mix vectors, recalls by words
    other = openai_settings(workspace, openai_fake, remote={"dimensions": 32})
    with MemoryStore(other) as s:
        with pytest.raises(UsageError, match="was embedded with openai"):
            s.store("another memory", 0.5, "fact")
        rec = s.recall("quokka census", min_score=0)
        assert rec.hits and "keyword-only" in rec.note
        assert s.count() == 1


def test_memory_search_merges_the_store_with_the_file_index_by_score(workspace: Path, openai_fake: Any):
    from memory_core.index.pipeline import run_index
    from memory_core.query.backends import open_searcher

    settings = openai_settings(workspace, openai_fake)
    run_index(settings)
    with MemoryStore(settings) as st, open_searcher(settings) as searcher:
        m = st.store("pgbackrest restore needs the stanza name prod-main", 0.9, "fact")
        res = searcher.search_response("pgbackrest restore", max_results=6, min_score=0,
                                       sources=["memory", "store"], extra=st).to_dict()
        sources = [r["source"] for r in res["results"]]
        assert "store" in sources and "memory" in sources
        scores = [r["score"] for r in res["results"]]
        assert scores == sorted(scores, reverse=True)
        mine = next(r for r in res["results"] if r["source"] == "store")
        assert mine["id"] == m.memory.id and mine["citation"] == f"store:{m.memory.id}"
        # the same score as recall gives it: one scale for both
        assert mine["score"] == pytest.approx(st.recall("pgbackrest restore", min_score=0).hits[0].score)
        # the file side alone gives the file index's own scores
        files = searcher.search("pgbackrest restore", max_results=6, min_score=0, sources=["memory"])
        assert [r for r in res["results"] if r["source"] == "memory"][0]["score"] == pytest.approx(files[0].score)
        alone = searcher.search_response("pgbackrest restore", min_score=0, sources=["store"], extra=st).to_dict()
        assert [r["source"] for r in alone["results"]] == ["store"]
        # the store's results carry the metadata the file index's do (memory_core/query/answers.py)
        for answer in (res, alone):
            assert answer["provider"] == "openai" and answer["model"] == "text-embedding-3-small"
            assert answer["backend"] == "builtin" and answer["fallback"] is None
            assert answer["mode"] == "hybrid" and answer["citations"] == settings.query.citations
        # keyword-only through the store: said in the metadata as for the file index
        kw = searcher.search_response("pgbackrest restore", min_score=0, sources=["store"], extra=st, mode="keyword").to_dict()
        assert kw["mode"] == "keyword" and kw["results"] and kw["results"][0]["match"] == "keyword"
        # without the store named, it is not searched
        plain = searcher.search_response("pgbackrest restore", min_score=0, extra=st).to_dict()
        assert plain["results"] and all(r["source"] != "store" for r in plain["results"])


def test_near_identical_paraphrase_updates_with_the_local_model(tmp_path: Path):
    from memory_core.embeddings.local import local_model_available

    if not local_model_available():
        pytest.skip("the local model is not installed")
    settings = load_settings(None, {"workspace": str(tmp_path), "provider": "local"})
    with MemoryStore(settings) as s:
        a = s.store("The user prefers dark mode in every editor", 0.7, "preference")
        b = s.store("the user prefers dark mode in every editor.", 0.9, "preference")
        c = s.store("The user prefers light mode in the terminal only", 0.5, "preference")
        assert a.action == "created" and b.action == "updated" and b.memory.id == a.memory.id
        assert c.action == "created" and s.count() == 2
        rec = s.recall("which editor theme does the user like?")
        assert rec.hits and rec.hits[0].memory.id == a.memory.id
        assert s.record().model == "all-MiniLM-L6-v2" or "MiniLM" in s.record().model
        assert rec.hits[0].score == pytest.approx(ranking.fuse_calibrated(
            [ranking.Hit(id="x", path="store:x", source="store", start_line=1, end_line=1, text="",
                         vector_score=rec.hits[0].vector_score,
                         bm25=rec.hits[0].text_score / (1 - rec.hits[0].text_score) if rec.hits[0].text_score else 0,
                         in_vector=True)],
            ranking.Calibration.for_model(s.record().model, None), _idf(s, "which editor theme does the user like?"),
            vector_weight=0.5, text_weight=0.5, corpus_coverage=_coverage(s, "which editor theme does the user like?"),
        )[0].score, abs=1e-5)


def _idf_parts(s: MemoryStore, query: str) -> tuple[float, float]:
    t = s._open()
    n = t.count_rows()
    total = present = 0.0
    for term in lancedb_store._query_terms(t, query):  # the query's words as the index splits them
        df = len(s._fts(t, term, n, None, ["id"]))
        import math

        idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
        total += idf
        present += idf if df else 0.0
    return total, present


def _idf(s: MemoryStore, query: str) -> float:
    return _idf_parts(s, query)[0]


def _coverage(s: MemoryStore, query: str) -> float:
    total, present = _idf_parts(s, query)
    return present / total if total else 1.0


# -- CLI --------------------------------------------------------------------------------------

def test_cli_store_recall_list_forget_and_errors(workspace: Path, openai_fake: Any, capsys):
    (workspace / "memory-core.toml").write_text(_toml(openai_fake.base_url))
    w = ["-w", str(workspace)]
    assert main(["memory", "store", *w, "Alice is the DBA", "--category", "entity", "--importance", "0.8",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["action"] == "created" and out["memory"]["category"] == "entity"
    mid = out["id"]
    assert main(["memory", "store", *w, "Alice is the DBA"]) == 0
    assert capsys.readouterr().out.startswith(f"updated {mid}")
    assert main(["memory", "recall", *w, "Alice DBA", "--min-score", "0", "--json"]) == 0
    res = json.loads(capsys.readouterr().out)["results"]
    assert res[0]["id"] == mid and res[0]["source"] == "store"
    assert main(["search", *w, "Alice DBA", "--source", "store", "--min-score", "0", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["results"][0]["citation"] == f"store:{mid}"
    assert main(["memory", "list", *w]) == 0
    assert mid in capsys.readouterr().out

    for argv, needle in [
        (["memory", "store", *w, "x", "--category", "opinion"], "category must be one of"),
        (["memory", "store", *w, "x", "--importance", "2"], "importance must be"),
        (["memory", "forget", *w, "0" * 32], "no memory with id"),
        (["memory", "store", *w, "x", "--provider", "none"], "needs an embedding provider"),
        (["memory", "recall", *w, "x", "--category", "opinion"], "category must be one of"),
    ]:
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert needle in err and "Traceback" not in err, err
    assert main(["memory", "list", *w, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["count"] == 1, "no error lost or added anything"
    assert main(["memory", "forget", *w, mid]) == 0
    assert main(["memory", "list", *w, "--json"]) == 0
    assert json.loads(capsys.readouterr().out.split("\n", 1)[1])["count"] == 0


def test_lancedb_is_imported_lazily():
    code = ("import sys, memory_core.apps.cli as c, memory_core.apps.mcp_server; c.build_parser();"
            " print('lancedb' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == "False"


# -- MCP, through the SDK's own client --------------------------------------------------------

def _text(result: Any) -> str:
    return "\n".join(c.text for c in result.content if getattr(c, "type", None) == "text")


def _run(fn: Any) -> None:
    async def guarded() -> None:
        with anyio.fail_after(90):
            await fn()

    anyio.run(guarded)


def _client(ws: Path, errlog: Any, *extra: str) -> Any:
    params = StdioServerParameters(command=sys.executable, cwd=str(ROOT),
                                   args=["-m", "memory_core.apps.cli", "mcp", "-w", str(ws), *extra])
    return stdio_client(params, errlog=errlog)


def test_mcp_store_recall_search_get_list_forget(workspace: Path, openai_fake: Any, tmp_path: Path):
    from memory_core.index.pipeline import run_index

    (workspace / "memory-core.toml").write_text(_toml(openai_fake.base_url))
    run_index(load_settings(workspace / "memory-core.toml", {"workspace": str(workspace)}))
    errlog = open(tmp_path / "server.err", "w")  # noqa: SIM115 - closed below

    async def session() -> None:
        async with Client(_client(workspace, errlog)) as client:
            tools = {t.name: t for t in (await client.list_tools()).tools}
            assert {"memory_store", "memory_recall", "memory_list", "memory_forget", "memory_search"} <= set(tools)
            assert tools["memory_store"].input_schema["properties"]["category"]["enum"] == list(
                lancedb_store.CATEGORIES)
            assert tools["memory_forget"].annotations.destructive_hint
            assert "store" in tools["memory_search"].input_schema["properties"]["sources"]["items"]["enum"]

            r = await client.call_tool("memory_store", {"text": "pgbackrest restore needs stanza prod-main",
                                                        "importance": 0.9, "category": "fact"})
            assert not r.is_error, _text(r)
            assert r.structured_content["action"] == "created"
            mid = r.structured_content["id"]
            r = await client.call_tool("memory_store", {"text": "pgbackrest restore needs stanza prod-main"})
            assert r.structured_content["action"] == "updated" and r.structured_content["id"] == mid
            r = await client.call_tool("memory_store", {"text": f"token: {SECRET}", "category": "other"})
            assert r.structured_content["redacted"] and SECRET not in _text(r)
            other = r.structured_content["id"]

            for name, args, needle in [
                ("memory_store", {"text": "x", "category": "opinion"}, "category"),
                ("memory_store", {"text": "x", "importance": 1.5}, "importance"),
                ("memory_store", {"text": ""}, "text"),
                ("memory_forget", {"memoryId": "0" * 32}, "no memory with id"),
                ("memory_forget", {}, "memoryId"),
                ("memory_recall", {"query": "x", "category": "opinion"}, "category"),
            ]:
                r = await client.call_tool(name, args)
                assert r.is_error and needle in _text(r), (name, _text(r))

            r = await client.call_tool("memory_list", {})
            assert r.structured_content["count"] == 2, "no error lost or added a memory"

            r = await client.call_tool("memory_recall", {"query": "pgbackrest stanza", "category": ["fact"]})
            hits = r.structured_content["results"]
            assert hits and hits[0]["id"] == mid and all(h["category"] == "fact" for h in hits)

            r = await client.call_tool("memory_search", {"query": "pgbackrest restore", "min_score": 0,
                                                         "sources": ["memory", "store"]})
            assert not r.is_error, _text(r)
            assert r.structured_content["provider"] == "openai" and r.structured_content["fallback"] is None
            res = r.structured_content["results"]
            assert {"memory", "store"} <= {h["source"] for h in res}
            assert [h["score"] for h in res] == sorted((h["score"] for h in res), reverse=True)
            r = await client.call_tool("memory_search", {"query": "pgbackrest restore", "min_score": 0})
            assert all(h["source"] != "store" for h in r.structured_content["results"]), "the store is opt-in"

            r = await client.call_tool("memory_get", {"path": f"store:{mid}"})
            assert r.structured_content["text"] == "pgbackrest restore needs stanza prod-main"

            r = await client.call_tool("memory_forget", {"query": "pgbackrest stanza"})
            assert r.structured_content["action"] == "candidates"
            assert mid in [c["id"] for c in r.structured_content["candidates"]]
            r = await client.call_tool("memory_forget", {"memoryId": other})
            assert not r.is_error and r.structured_content["action"] == "deleted"
            r = await client.call_tool("memory_list", {})
            assert [m["id"] for m in r.structured_content["memories"]] == [mid]

    try:
        _run(session)
    finally:
        errlog.close()
    assert "Traceback" not in (tmp_path / "server.err").read_text()


def test_mcp_store_without_a_provider_is_a_tool_error(workspace: Path, tmp_path: Path):
    (workspace / "memory-core.toml").write_text('provider = "none"\n')
    errlog = open(tmp_path / "server.err", "w")  # noqa: SIM115 - closed below

    async def session() -> None:
        async with Client(_client(workspace, errlog)) as client:
            r = await client.call_tool("memory_store", {"text": "remember this", "category": "fact"})
            assert r.is_error and "needs an embedding provider" in _text(r)
            r = await client.call_tool("memory_list", {})
            assert not r.is_error and r.structured_content["count"] == 0

    try:
        _run(session)
    finally:
        errlog.close()
    assert not store_dir(load_settings(None, {"workspace": str(workspace)})).exists()


def test_each_agent_has_its_own_store_through_one_mcp_server(tmp_path: Path, openai_fake: Any,
                                                            capsys: pytest.CaptureFixture[str]):
    """Issue 23 parts 1 and 3 together: the store is the agent's (``lancedb_path`` from the
    ``[agents]`` table), one MCP server routes the store tools to the named agent, and neither
    agent ever recalls, lists, searches, reads or forgets the other's memories."""
    ws = {a: tmp_path / a for a in ("alpha", "beta")}
    for a, w in ws.items():
        w.mkdir()
        (w / "MEMORY.md").write_text(f"# {a}\n\nThe {a} team meets on Mondays.\n")
    cfg = tmp_path / "fleet.toml"
    cfg.write_text(_toml(openai_fake.base_url) + f'''[agents]
default = "alpha"
workspace = "{tmp_path}/{{agent}}"
[[agents.list]]
id = "alpha"
[[agents.list]]
id = "beta"
lancedb_path = "{tmp_path}/lance/beta"
''')
    for a in ws:
        assert main(["index", "-c", str(cfg), "--agent", a, "--engine", "local", "--no-progress"]) == 0
    capsys.readouterr()
    notes = {"alpha": "The walrus vault code is 4417", "beta": "The narwhal vault code is 9930"}
    errlog = open(tmp_path / "server.err", "w")  # noqa: SIM115 - closed below

    async def session() -> None:
        params = StdioServerParameters(command=sys.executable, cwd=str(ROOT),
                                       args=["-m", "memory_core.apps.cli", "mcp", "-c", str(cfg)])
        async with Client(stdio_client(params, errlog=errlog)) as client:
            tools = {t.name: t for t in (await client.list_tools()).tools}
            assert tools["memory_store"].input_schema["properties"]["agent"]["enum"] == ["alpha", "beta"]
            ids = {}
            for a, text in notes.items():
                r = await client.call_tool("memory_store", {"agent": a, "text": text, "category": "fact"})
                assert not r.is_error, _text(r)
                assert r.structured_content["action"] == "created" and r.structured_content["agent"] == a
                ids[a] = r.structured_content["id"]
            for a, other in (("alpha", "beta"), ("beta", "alpha")):
                mine, theirs = notes[a].split()[1], notes[other].split()[1]  # walrus / narwhal
                r = await client.call_tool("memory_list", {"agent": a})
                assert [m["text"] for m in r.structured_content["memories"]] == [notes[a]]
                r = await client.call_tool("memory_recall", {"agent": a, "query": f"{theirs} vault code",
                                                             "minScore": 0})
                assert [h["id"] for h in r.structured_content["results"]] == [ids[a]]
                r = await client.call_tool("memory_search", {"agent": a, "query": f"{theirs} {mine} vault code",
                                                             "minScore": 0, "sources": ["memory", "store"]})
                assert not r.is_error, _text(r)
                res = r.structured_content
                assert res["agent"] == a and res["provider"] == "openai" and res["backend"] == "builtin"
                assert [h["citation"] for h in res["results"] if h["source"] == "store"] == [f"store:{ids[a]}"]
                assert all(theirs not in h["snippet"] for h in res["results"])
                r = await client.call_tool("memory_get", {"agent": a, "path": f"store:{ids[other]}"})
                assert r.is_error and "no memory with id" in _text(r)
                r = await client.call_tool("memory_forget", {"agent": a, "memoryId": ids[other]})
                assert r.is_error and "no memory with id" in _text(r)
            # the default agent's store, when the call names none
            r = await client.call_tool("memory_recall", {"query": "vault code", "minScore": 0})
            assert [h["id"] for h in r.structured_content["results"]] == [ids["alpha"]]

    try:
        _run(session)
    finally:
        errlog.close()
    assert "Traceback" not in (tmp_path / "server.err").read_text()
    # each store in its agent's LanceDB folder: beta's from lancedb_path, alpha's beside its index
    assert (tmp_path / "lance" / "beta" / "memories.lance").is_dir()
    assert (ws["alpha"] / ".memory-core" / "lancedb" / "memories.lance").is_dir()
    # and the CLI finds the same stores by --agent
    for a in ws:
        assert main(["search", "-c", str(cfg), "--agent", a, "vault code", "--source", "store", "--min-score", "0",
                     "--json"]) == 0
        out = json.loads(capsys.readouterr().out)
        assert [h["snippet"] for h in out["results"]] == [notes[a]] and out["provider"] == "openai"
