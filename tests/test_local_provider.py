"""The local provider with the real model (no mocks): its vectors are sentence-transformers'
within cosine 0.99 on both backends, the ONNX model is cached atomically and reused, and the
provider falls back to sentence-transformers when the fast backend is unavailable."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pytest

from memory_core.config import load_settings
from memory_core.embeddings.local import (
    LocalProvider,
    _write_atomic,
    count_over_window,
    local_model_available,
    packaged_model_path,
    threads_from_env,
)
from memory_core.errors import ConfigError

pytestmark = pytest.mark.skipif(not local_model_available(), reason="the local model is not installed")

TEXTS = [
    "# 2026-10-06\n\n## 08:55 standup\n- Priya: the replica lag alert fired twice overnight.\n"
    "- Marcus rolls the canary back if p99 latency stays above 400 ms.",
    "Decided to keep the chunk size at 200 tokens: the model reads 256 word pieces and longer "
    "chunks lost their tails. Follow up on the cache eviction policy next week.",
    "```bash\nkubectl rollout undo deployment/api -n prod\npsql -c 'VACUUM ANALYZE events;'\n```",
    "金银价格 服务器错误 サーバー 確認 서버 에러 확인 부탁",
    "",
    " ",
    "x",
    "?",
    "word " * 600,  # far over the 256-piece window: both sides embed its first 256 pieces
]
QUERIES = ["who owns the canary rollback?", "金银价格", "replica lag", "..."]


def _settings(**local):  # type: ignore[no-untyped-def]
    return load_settings(None, {"provider": "local", "local": local}, env={})


def _cos(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


@pytest.fixture(scope="module")
def st_model():  # type: ignore[no-untyped-def]
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(packaged_model_path()))


@pytest.fixture(scope="module")
def reference(st_model):  # type: ignore[no-untyped-def]
    return st_model.encode(TEXTS + QUERIES, normalize_embeddings=True)


@pytest.fixture(scope="module")
def onnx_cache(tmp_path_factory) -> Path:  # type: ignore[no-untyped-def]
    return tmp_path_factory.mktemp("local-cache")


@pytest.fixture(scope="module")
def onnx_provider(onnx_cache):  # type: ignore[no-untyped-def]
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    model_dir = packaged_model_path()
    before = {p: p.stat().st_mtime_ns for p in model_dir.rglob("*")}
    provider = LocalProvider(_settings(cache_dir=str(onnx_cache)))
    provider.embed_documents(["build the model"])
    # the model directory (read-only in a system install) is never written
    assert {p: p.stat().st_mtime_ns for p in model_dir.rglob("*")} == before
    if provider.backend != "onnx" and "drifted" in provider.backend_reason and not _cpu_has_vnni():
        # an x86 CPU without VNNI multiplies uint8 x int8 with int16-saturating pairs: the int8
        # model drifts (cosine 0.98 on an AVX2-only EPYC) and the float32 export takes its place;
        # only if that drifted too would torch be kept; on a VNNI CPU a drift still fails here
        pytest.skip(f"int8 ONNX rejected on this CPU (no VNNI): {provider.backend_reason}")
    return provider


def _cpu_has_vnni() -> bool:
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return True  # unknown CPU: do not excuse a drift
    return any(f in flags for f in ("avx512_vnni", "avx_vnni", "amx_int8")) or "flags" not in flags


def test_onnx_vectors_match_sentence_transformers(onnx_provider, reference) -> None:  # type: ignore[no-untyped-def]
    assert onnx_provider.backend == "onnx"
    assert onnx_provider.info().details["backend"] == "onnx"
    docs = onnx_provider.embed_documents(TEXTS)
    assert docs.dtype == np.float32 and docs.shape == (len(TEXTS), 384)
    np.testing.assert_allclose(np.linalg.norm(docs, axis=1), 1.0, atol=1e-5)
    cos = _cos(docs, reference[:len(TEXTS)])
    assert cos.min() >= 0.99, dict(zip(TEXTS, cos.round(4), strict=True))

    queries = np.stack([onnx_provider.embed_query(q) for q in QUERIES])
    assert queries.shape == (len(QUERIES), 384)
    assert _cos(queries, reference[len(TEXTS):]).min() >= 0.99
    # per-token quantisation: a text's vector does not depend on what it is batched with
    alone = np.stack([onnx_provider.embed_documents([t])[0] for t in TEXTS[:4]])
    assert _cos(alone, docs[:4]).min() > 0.9999
    assert onnx_provider.embed_documents([]).shape == (0, 384)


def test_onnx_model_cached_atomically_and_reused(onnx_provider, onnx_cache) -> None:  # type: ignore[no-untyped-def]
    assert onnx_provider.onnx_source == "built"
    # (where the int8 model drifts, its rejection is kept beside the float32 model: not a model file)
    files = sorted(p for p in (onnx_cache / "models").iterdir() if not p.name.endswith(".failed.json"))
    assert files == [onnx_provider.onnx_file]  # one finished file, no temporary left behind
    assert files[0].suffix == ".onnx" and files[0].stat().st_size > 1_000_000
    inode, stamp = files[0].stat().st_ino, files[0].stat().st_mtime_ns

    again = LocalProvider(_settings(cache_dir=str(onnx_cache)))
    vecs = again.embed_documents(TEXTS[:3])
    assert (again.backend, again.onnx_source, again.onnx_file) == ("onnx", "cache", files[0])
    assert files[0].stat().st_ino == inode  # read, not rewritten (a rewrite is a new file, renamed over)
    assert files[0].stat().st_mtime_ns >= stamp  # touched: its last use (prune_onnx_copies keeps the newest)
    np.testing.assert_allclose(vecs, onnx_provider.embed_documents(TEXTS[:3]), atol=1e-6)


def test_unusable_cache_file_is_rebuilt(onnx_provider, tmp_path) -> None:  # type: ignore[no-untyped-def]
    target = tmp_path / "models" / onnx_provider.onnx_file.name
    target.parent.mkdir()
    target.write_bytes(b"half a model")  # e.g. written by something that did not write atomically
    provider = LocalProvider(_settings(cache_dir=str(tmp_path)))
    vecs = provider.embed_documents(TEXTS[:2])
    assert (provider.backend, provider.onnx_source, provider.onnx_file) == ("onnx", "built", target)
    assert target.stat().st_size > 1_000_000
    assert [p.name for p in target.parent.iterdir() if not p.name.endswith(".failed.json")] == [target.name]
    np.testing.assert_allclose(vecs, onnx_provider.embed_documents(TEXTS[:2]), atol=1e-5)


def test_write_atomic_leaves_old_file_or_new_one(tmp_path) -> None:  # type: ignore[no-untyped-def]
    target = tmp_path / "cache" / "model.onnx"
    _write_atomic(target, b"first")
    assert target.read_bytes() == b"first"
    with pytest.raises(TypeError):
        _write_atomic(target, "not bytes")  # type: ignore[arg-type]  # fails mid-write
    assert target.read_bytes() == b"first"
    assert [p.name for p in target.parent.iterdir()] == ["model.onnx"]
    _write_atomic(target, b"second")
    assert target.read_bytes() == b"second"
    assert [p.name for p in target.parent.iterdir()] == ["model.onnx"]


def test_torch_backend_is_sentence_transformers(reference) -> None:  # type: ignore[no-untyped-def]
    provider = LocalProvider(_settings(backend="torch"))
    vecs = provider.embed_documents(TEXTS)
    assert provider.backend == "torch" and provider.onnx_file is None
    assert _cos(vecs, reference[:len(TEXTS)]).min() > 0.9999
    assert _cos(provider.embed_query(QUERIES[0])[None], reference[len(TEXTS)][None]).min() > 0.9999


def test_falls_back_to_sentence_transformers_without_onnxruntime(monkeypatch, tmp_path, reference) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # as if the package were not installed
    with pytest.raises(ConfigError, match="onnxruntime"):
        LocalProvider(_settings(backend="onnx", cache_dir=str(tmp_path))).embed_documents(["x"])
    provider = LocalProvider(_settings(cache_dir=str(tmp_path)))
    vecs = provider.embed_documents(TEXTS[:4])
    assert provider.backend == "torch"
    assert "onnxruntime is not installed" in provider.backend_reason
    assert _cos(vecs, reference[:4]).min() > 0.9999
    assert not any(tmp_path.iterdir())  # nothing built, nothing cached


def test_window_counts_without_loading_the_model() -> None:
    provider = LocalProvider(_settings(backend="torch"))
    assert provider.window_pieces == 256
    assert provider.piece_counts(["hello world"]) == [4]
    assert count_over_window(provider, ["word " * 600, "short text", ""]) == 1
    assert provider.backend is None  # nothing above needed the weights


def test_unwritable_cache_dir_keeps_the_model_in_memory(onnx_provider, tmp_path) -> None:  # type: ignore[no-untyped-def]
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("a file where the cache directory should be")
    provider = LocalProvider(_settings(cache_dir=str(blocker)))
    vecs = provider.embed_documents(TEXTS[:2])
    assert (provider.backend, provider.onnx_source, provider.onnx_file) == ("onnx", "memory", None)
    np.testing.assert_allclose(vecs, onnx_provider.embed_documents(TEXTS[:2]), atol=1e-5)


def test_an_int8_model_that_drifts_gives_way_to_the_float32_export(monkeypatch, tmp_path, reference) -> None:  # type: ignore[no-untyped-def]
    """Where the int8 model drifts (as on an x86 CPU without VNNI: forced here by asking more of it
    than any int8 model gives), the same export unquantised is built, checked and cached: the float
    model's vectors, and a later provider loads it from the cache without trying int8 again."""
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    import memory_core.embeddings.local as local

    monkeypatch.setattr(local, "MIN_COSINE", 1.01)  # the int8 model never reaches it; float32 has its own
    provider = LocalProvider(_settings(cache_dir=str(tmp_path)))
    vecs = np.vstack([provider.embed_documents(TEXTS), np.vstack([provider.embed_query(q) for q in QUERIES])])
    assert (provider.backend, provider.onnx_source) == ("onnx", "built"), provider.backend_reason
    assert "float32 ONNX model built" in provider.backend_reason and "int8 model drifted" in provider.backend_reason
    assert _cos(vecs, reference).min() > 0.99999  # the float model's vectors, not int8's ~0.998
    files = sorted(p.name for p in (tmp_path / "models").iterdir())
    assert len(files) == 2 and files[0].endswith(".failed.json") is not files[1].endswith(".failed.json")
    inode = provider.onnx_file.stat().st_ino

    def no_build(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise AssertionError("built again")

    monkeypatch.setattr(local, "build_onnx_model", no_build)
    again = LocalProvider(_settings(cache_dir=str(tmp_path)))
    np.testing.assert_allclose(again.embed_documents(TEXTS[:3]), vecs[:3], atol=1e-6)
    assert (again.backend, again.onnx_source, again.onnx_file) == ("onnx", "cache", provider.onnx_file)
    assert "int8 model is not used here" in again.backend_reason
    assert provider.onnx_file.stat().st_ino == inode  # read (and touched), not rewritten


def test_onnx_float32_backend_gives_sentence_transformers_vectors(tmp_path, reference) -> None:  # type: ignore[no-untyped-def]
    """``local.backend = "onnx-float32"``: the export unquantised, whatever the CPU; the float model's vectors."""
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    provider = LocalProvider(_settings(backend="onnx-float32", cache_dir=str(tmp_path)))
    vecs = np.vstack([provider.embed_documents(TEXTS), np.vstack([provider.embed_query(q) for q in QUERIES])])
    assert provider.backend == "onnx" and provider.backend_reason.startswith("float32 ONNX model built")
    assert _cos(vecs, reference).min() > 0.99999
    assert [p.suffix for p in (tmp_path / "models").iterdir()] == [".onnx"]  # int8 never built


def test_older_onnx_copies_of_a_model_are_pruned_when_a_new_one_is_built(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Every fresh virtual environment (its model path and files' mtimes are in the key) built a new
    58 MB copy and none was removed (20 copies in a day of test runs). A new build keeps the
    ONNX_COPIES_KEPT most recently used copies of that model and removes the rest; other models'
    copies and other files stay."""
    import os

    from memory_core.embeddings.local import ONNX_COPIES_KEPT, prune_onnx_copies

    models = tmp_path / "models"
    models.mkdir()
    old = []
    for i in range(5):
        p = models / f"all-MiniLM-L6-v2-{i:020x}.onnx"
        p.write_bytes(b"x")
        os.utime(p, (1_000_000 + i, 1_000_000 + i))
        old.append(p)
    others = [models / f"sentence-transformers_all-MiniLM-L6-v2-{0:020x}.onnx",
              models / f"all-MiniLM-L6-v2-{9:020x}.failed.json", models / "notes.txt"]
    for p in others:
        p.write_bytes(b"y")
    new = models / f"all-MiniLM-L6-v2-{'a' * 20}.onnx"
    new.write_bytes(b"z")
    removed = prune_onnx_copies(new, "all-MiniLM-L6-v2")
    kept = sorted(p.name for p in models.iterdir())
    assert sorted(removed) == sorted(old[:5 - (ONNX_COPIES_KEPT - 1)])
    assert kept == sorted([new.name, *(p.name for p in old[5 - (ONNX_COPIES_KEPT - 1):]), *(p.name for p in others)])


def test_threads_from_env_reads_only_a_positive_whole_number() -> None:
    assert threads_from_env({"OMP_NUM_THREADS": "1"}) == 1
    assert threads_from_env({"OMP_NUM_THREADS": " 3 "}) == 3
    for raw in ("", "0", "-1", "two", "1.5", "2,3", "\u00b2"):
        assert threads_from_env({"OMP_NUM_THREADS": raw}) is None, raw
    assert threads_from_env({}) is None


def test_the_model_runs_on_omp_num_threads_unless_local_threads_says(monkeypatch, onnx_cache) -> None:  # type: ignore[no-untyped-def]
    """Processes sharing a machine's cores (test workers, a watch beside a reindex) set
    OMP_NUM_THREADS as for torch and BLAS; onnxruntime does not read it, the provider does."""
    pytest.importorskip("onnxruntime")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    by_env = LocalProvider(_settings(cache_dir=str(onnx_cache)))
    by_env.embed_documents(TEXTS[:2])
    assert by_env.backend == "onnx" and by_env.threads == 1
    assert by_env._engine.session.get_session_options().intra_op_num_threads == 1
    told = LocalProvider(_settings(cache_dir=str(onnx_cache), threads=2))
    told.embed_documents(TEXTS[:2])
    assert told.threads == 2 and told._engine.session.get_session_options().intra_op_num_threads == 2
    monkeypatch.delenv("OMP_NUM_THREADS")
    assert LocalProvider(_settings(cache_dir=str(onnx_cache))).threads is None  # every core
