"""Issue 25, sizes: one float32 copy of a vector where one suffices. The live index is the record
of the vectors it holds; the cache keeps what it does not hold (memory_core/storage/cache.py). Real
SQLite files, the fake OpenAI server over HTTP."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from memory_core.index.chunking import sha256_hex
from memory_core.index.pipeline import run_index
from memory_core.query.search import Searcher
from memory_core.storage.cache import EmbeddingCache
from memory_core.storage.store import connect, probe_index
from tests.conftest import ROOT, openai_settings

MODEL = "text-embedding-3-small"


def _index_hashes(index: Path) -> set[str]:
    conn = connect(index, readonly=True)
    try:
        return {h for (h,) in conn.execute("SELECT hash FROM chunks")}
    finally:
        conn.close()


def _cached(s) -> set[str]:  # type: ignore[no-untyped-def]
    meta, _ = probe_index(s.index_file)
    with EmbeddingCache(s.cache_file, "openai", MODEL, meta["provider_key"]) as cache:
        return cache.hashes()


def _sent(srv, since: int) -> set[str]:  # type: ignore[no-untyped-def]
    return {sha256_hex(t) for t in srv.input_texts[since:]}


def test_after_a_publish_the_cache_holds_no_vector_the_index_holds(workspace, openai_fake):
    s = openai_settings(workspace, openai_fake)
    cold = run_index(s)
    assert cold.chunks_embedded > 0
    held = _index_hashes(s.index_file)
    assert held and not (_cached(s) & held)  # fails without the trim: the cache held all of them
    # no-change run, then a --full rebuild: every vector comes from the live index, none is sent
    n = len(openai_fake.input_texts)
    assert run_index(s).chunks_embedded == 0
    full = run_index(s, full=True)
    assert full.full and full.swapped and full.chunks_embedded == 0
    assert full.chunks_from_cache == len(held)
    assert len(openai_fake.input_texts) == n
    assert not (_cached(s) & _index_hashes(s.index_file))
    # the cache file gave its pages back: no ~all-free file left behind
    assert s.cache_file.stat().st_size < 1024 * 1024


def test_delete_then_restore_and_edit_then_revert_embed_nothing(workspace, openai_fake):
    s = openai_settings(workspace, openai_fake)
    run_index(s)
    note = sorted((workspace / "memory").glob("*.md"))[0]
    rel = "memory/" + note.name
    conn = connect(s.index_file, readonly=True)
    leaving = {h for (h,) in conn.execute("SELECT hash FROM chunks WHERE path = ?", (rel,))}
    conn.close()
    data = note.read_bytes()
    note.unlink()
    n = len(openai_fake.input_texts)
    run_index(s)
    # the deleted file's vectors moved to the cache (and only they: the index holds the rest)
    assert _cached(s) == leaving - _index_hashes(s.index_file)
    note.write_bytes(data)
    back = run_index(s)
    assert back.chunks_embedded == 0 and len(openai_fake.input_texts) == n
    assert not (_cached(s) & _index_hashes(s.index_file))
    # edit, then revert: only the edited chunk is embedded, the revert embeds nothing
    note.write_bytes(data + b"\n\n## 23:59\n- a line about the blue teapot and its lid.\n")
    edit = run_index(s)
    assert edit.chunks_embedded >= 1
    n = len(openai_fake.input_texts)
    note.write_bytes(data)
    assert run_index(s).chunks_embedded == 0 and len(openai_fake.input_texts) == n
    assert not (_cached(s) & _index_hashes(s.index_file))


def test_switching_model_and_back_embeds_nothing(workspace, openai_fake):
    """A rebuild with other vectors (here other dimensions: another provider_key) first moves the
    old index's vectors into the cache, under the old model: switching back embeds nothing."""
    s64 = openai_settings(workspace, openai_fake)
    s32 = openai_settings(workspace, openai_fake, remote={"dimensions": 32})
    run_index(s64)
    assert run_index(s32).chunks_embedded > 0
    n = len(openai_fake.input_texts)
    back = run_index(s64)
    assert back.full and back.chunks_embedded == 0 and len(openai_fake.input_texts) == n


def test_a_cache_shared_by_two_indexes_is_not_trimmed_and_both_find_vectors(workspace, openai_fake, tmp_path):
    cache = str(tmp_path / "shared.cache.sqlite")
    a = openai_settings(workspace, openai_fake, index_path=str(tmp_path / "a" / "index.sqlite"), cache={"path": cache})
    b = openai_settings(workspace, openai_fake, index_path=str(tmp_path / "b" / "index.sqlite"), cache={"path": cache})
    run_index(a)  # the only index using the cache: trimmed
    assert not (_cached(a) & _index_hashes(a.index_file))
    n = len(openai_fake.input_texts)
    # index b's first run finds the vectors in index a (recorded in the cache), embeds nothing
    assert run_index(b).chunks_embedded == 0 and len(openai_fake.input_texts) == n
    # two indexes use the cache now: nothing is trimmed (a vector trimmed for a must stay for b)
    note = sorted((workspace / "memory").glob("*.md"))[0]
    note.write_bytes(note.read_bytes() + b"\n\n## 23:59\n- shared cache line about a green kettle.\n")
    run_index(a)
    new = _index_hashes(a.index_file) - _index_hashes(b.index_file)
    assert new and new <= _cached(a)
    assert run_index(b).chunks_embedded == 0


def test_a_crash_between_publish_and_trim_leaves_a_state_that_embeds_nothing(workspace, openai_fake, tmp_path):
    s = openai_settings(workspace, openai_fake)
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'workspace = "{workspace}"\nprovider = "openai"\nmodel = "{MODEL}"\n'
                   f'[remote]\nbase_url = "{openai_fake.base_url}"\ndimensions = 64\n')
    env = dict(os.environ, PYTHONPATH=str(ROOT), OPENAI_API_KEY="sk-test-key-0123456789",
               MEMORY_CORE_FAILPOINT="before-trim")
    proc = subprocess.run([sys.executable, "-m", "memory_core.apps.cli", "index", "--config", str(cfg), "--engine",
                           "local", "--no-progress"], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    held = _index_hashes(s.index_file)
    assert held and held <= _cached(s)  # published, not trimmed: a duplicate, nothing lost
    n = len(openai_fake.input_texts)
    assert run_index(s).chunks_embedded == 0
    full = run_index(s, full=True)
    assert full.chunks_embedded == 0 and len(openai_fake.input_texts) == n
    assert not (_cached(s) & _index_hashes(s.index_file))  # the next publish trimmed the duplicates


def test_status_says_what_the_bytes_are_for(workspace, openai_fake, capsys):
    from memory_core.apps.cli import main

    s = openai_settings(workspace, openai_fake)
    run_index(s)
    with Searcher(s) as searcher:
        quick = searcher.status().sizes
        measured = searcher.status(measure=True).sizes
    n = len(_index_hashes(s.index_file))
    assert quick["vectors_float32"] == measured["vectors_float32"] == n * 64 * 4
    assert quick["sign_bits"] > 0 and quick["rest"] > 0 and "rest" not in measured
    assert measured["text"] > 0 and measured["fts"] > 0
    index_bytes = s.index_file.stat().st_size
    parts = ("vectors_float32", "exchange_parts_float32", "sign_bits", "text", "fts", "keys", "free")
    assert sum(measured[k] for k in parts) == index_bytes
    assert measured["cache"] == s.cache_file.stat().st_size + (
        os.path.getsize(str(s.cache_file) + "-wal") if os.path.exists(str(s.cache_file) + "-wal") else 0)
    cfg = ["--workspace", str(workspace), "--index", str(s.index_file)]
    main(["status", *cfg, "--sizes"])
    out = capsys.readouterr().out
    for key in ("vectors_float32", "exchange_parts_float32", "sign_bits", "text", "fts", "cache"):
        assert f"  {key}: " in out and " MiB - " in out
    main(["status", *cfg, "--json"])
    assert json.loads(capsys.readouterr().out)["sizes"]["vectors_float32"] == n * 256


def test_batch_mode_finds_the_index_vectors_when_it_collects_misses(workspace):
    """Batch API mode plans its jobs from the misses: a --full rebuild and an edit find the
    vectors the live index holds (the trimmed cache does not), so no job is sent for them."""
    from tests.fakes.openai_fake import OpenAIFake
    from tests.test_batch import batch_settings

    with OpenAIFake(dims=16, batch_delay=0.05) as srv:
        s = batch_settings(workspace, "openai", srv, concurrency=1)
        first = run_index(s)
        assert first.batch is not None and first.batch.jobs_submitted >= 1
        meta, _ = probe_index(s.index_file)
        with EmbeddingCache(s.cache_file, "openai", MODEL, meta["provider_key"]) as cache:
            assert not (cache.hashes() & _index_hashes(s.index_file))
        full = run_index(s, full=True)
        assert full.chunks_embedded == 0 and not (full.batch and full.batch.jobs_submitted)
        note = sorted((workspace / "memory").glob("*.md"))[0]
        note.write_bytes(note.read_bytes() + b"\n\n## 23:59\n- batch line about a purple umbrella.\n")
        edit = run_index(s)
        assert edit.chunks_embedded == 1  # only the new chunk: the file's other chunks came from the index


def test_an_index_that_cannot_be_read_is_no_longer_asked(workspace, openai_fake, caplog):
    """Another index's writer committing (busy) or a damaged file: the lookup goes on in the
    cache (a miss is embedded) instead of failing the run."""
    from memory_core.storage.cache import LiveVectors

    s = openai_settings(workspace, openai_fake)
    run_index(s)
    meta, _ = probe_index(s.index_file)
    h = sorted(_index_hashes(s.index_file))[0]
    with EmbeddingCache(s.cache_file, "openai", MODEL, meta["provider_key"]) as cache:
        live = LiveVectors.open(s.index_file, "openai", MODEL, meta["provider_key"])
        assert live is not None
        cache.live.append(live)
        assert h in cache.get_many([h]) and cache.has_many([h]) == {h}
        live.conn.close()  # every read of it now raises an apsw error
        assert cache.get_many([h]) == {} and cache.live == []
        assert any("cannot read vectors from the index" in r.getMessage() for r in caplog.records)
