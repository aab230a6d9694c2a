"""Faults and hostile input: a failed run leaves the live index as it was, and nothing bad is cached."""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from memory_core.config import load_settings
from memory_core.errors import (
    ConfigError,
    IndexDamagedError,
    IndexLockedError,
    NotAnIndexError,
    ProviderError,
)
from memory_core.index.pipeline import run_index
from memory_core.query.search import Searcher
from memory_core.storage.cache import EmbeddingCache
from memory_core.storage.store import IndexLock, probe_index
from tests.conftest import ROOT, openai_settings
from tests.fakes.common import Fault


def _snapshot(path: Path) -> bytes:
    return path.read_bytes()


def _edit(ws: Path) -> None:
    p = ws / "memory" / "2026-11-24.md"
    p.write_text(p.read_text() + "\n## 22:00\nA brand new paragraph about the capybara rollout.\n")


def _cache_count(s) -> int:
    meta, _ = probe_index(s.index_file)
    with EmbeddingCache(s.cache_file, "openai", s.model, meta["provider_key"]) as c:
        return c.count()


# -- provider faults ----------------------------------------------------------------------------

def test_rate_limit_storm_is_retried_within_bounds(workspace, openai_fake):
    s = openai_settings(workspace, openai_fake)
    openai_fake.fail_next(4, 429, retry_after=0.01)
    summary = run_index(s)
    assert summary.swapped and openai_fake.embed_requests == 5


HTML = b"<!DOCTYPE html><html><body><h1>Sign in to continue</h1></body></html>"


@pytest.mark.parametrize("fault", ["500", "reset", "malformed", "timeout", "html", "drip"])
def test_persistent_transient_faults_fail_cleanly(workspace, openai_fake, fault):
    """html, drip: issue 22 #7 (a 200 HTML page raised AttributeError) and #6 (a body dripped a
    byte at a time never tripped timeout_s: every attempt now has a wall-clock limit)."""
    s = openai_settings(workspace, openai_fake, remote={"max_attempts": 3, "timeout_s": 0.5})
    run_index(s)
    live = _snapshot(s.index_file)
    cached = _cache_count(s)
    _edit(workspace)
    {"500": lambda: openai_fake.fail_next(None, 500), "reset": lambda: openai_fake.reset_next(None),
     "malformed": lambda: openai_fake.malformed_next(None),
     "timeout": lambda: openai_fake.hang_next(None, seconds=2),
     "html": lambda: openai_fake.inject(Fault("raw", body=HTML, headers={"Content-Type": "text/html"}), None),
     "drip": lambda: openai_fake.inject(Fault("drip", seconds=0.05), None)}[fault]()
    t0 = time.monotonic()
    with pytest.raises(ProviderError) as exc:
        run_index(s)
    assert time.monotonic() - t0 < 20
    assert "openai" in str(exc.value) and "gave up after 3 attempts" in str(exc.value)
    assert "sk-test" not in str(exc.value)
    assert _snapshot(s.index_file) == live
    assert _cache_count(s) == cached
    assert not [p for p in s.index_file.parent.iterdir() if ".tmp-" in p.name]
    openai_fake.clear_faults()
    assert run_index(s).swapped


@pytest.mark.parametrize("mode", ["fewer", "wrong_dims", "nan", "inf", "empty"])
def test_bad_vectors_are_never_indexed_or_cached(workspace, openai_fake, mode):
    s = openai_settings(workspace, openai_fake, remote={"max_attempts": 1})
    run_index(s)
    live = _snapshot(s.index_file)
    cached = _cache_count(s)
    _edit(workspace)
    openai_fake.bad_payload_next(mode, None)
    with pytest.raises(ProviderError):
        run_index(s)
    assert _snapshot(s.index_file) == live
    assert _cache_count(s) == cached


def test_auth_error_is_final_and_clear(workspace, openai_fake):
    s = openai_settings(workspace, openai_fake)
    openai_fake.fail_next(None, 401)
    with pytest.raises(ProviderError, match="authentication failed"):
        run_index(s)
    assert openai_fake.embed_requests == 1  # not retried
    assert not s.index_file.exists()


# -- disk and files ------------------------------------------------------------------------------

def test_write_error_while_building_leaves_live_index(workspace, tmp_path):
    s = load_settings(None, {"workspace": str(workspace), "provider": "none"})
    run_index(s)
    live = _snapshot(s.index_file)
    big = workspace / "memory" / "big.md"
    big.write_text("\n".join(f"line {i} with filler text about anything at all" for i in range(200_000)))
    limit = len(live) + 512 * 1024  # the temp copy fits, the new rows do not
    code = (
        "import resource, signal, sys\n"
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
        f"resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, {limit}))\n"
        "from memory_core.apps.cli import main\n"
        f"sys.exit(main(['index', '-w', {str(workspace)!r}, '--provider', 'none', '--engine', 'local']))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=300)
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr and proc.stderr.count("\n") == 1
    assert _snapshot(s.index_file) == live
    assert not [p for p in s.index_file.parent.iterdir() if ".tmp-" in p.name]


@pytest.mark.parametrize("damage", ["truncate", "garbage"])
def test_corrupted_live_index_is_detected_and_rebuilt(workspace, damage):
    s = load_settings(None, {"workspace": str(workspace), "provider": "none"})
    first = run_index(s)
    data = s.index_file.read_bytes()
    if damage == "truncate":
        s.index_file.write_bytes(data[: len(data) // 3])
    else:
        # the header (with memory-core's application_id) survives: still ours, so rebuilt
        s.index_file.write_bytes(data[:100] + b"\x13\x37" * 4046 + data[8192:])
    with Searcher(s) as searcher:
        assert searcher.status().state == "damaged"
    with pytest.raises(IndexDamagedError), Searcher(s) as searcher:
        searcher.search("postgres")
    again = run_index(s)
    assert again.full and again.swapped and again.chunks_total == first.chunks_total
    assert any("damaged" in w for w in again.warnings)
    with Searcher(s) as searcher:
        assert searcher.search("postgres replication", min_score=0)


def test_an_empty_file_at_the_index_path_is_refused_not_replaced(workspace, tmp_path):
    """issue 22 #1: a 0-byte file at --index (e.g. a lock file) was taken for a damaged index
    and replaced; memory-core never leaves an empty file there, so it is not ours."""
    other = tmp_path / "some.lock"
    other.write_bytes(b"")
    ino = other.stat().st_ino
    s = load_settings(None, {"workspace": str(workspace), "provider": "none", "index_path": str(other)})
    with pytest.raises(NotAnIndexError, match="empty file"):
        run_index(s)
    with pytest.raises(NotAnIndexError), Searcher(s) as searcher:
        searcher.search("postgres")
    assert other.stat().st_ino == ino and other.read_bytes() == b""


# -- concurrency ------------------------------------------------------------------------------------

def test_second_writer_waits_or_leaves(workspace):
    s = load_settings(None, {"workspace": str(workspace), "provider": "none", "lock": {"wait": False}})
    holder = IndexLock(s.index_file).acquire()
    try:
        with pytest.raises(IndexLockedError, match=f"pid {os.getpid()}"):
            run_index(s)
        waiting = load_settings(None, {"workspace": str(workspace), "provider": "none",
                                       "lock": {"wait": True, "timeout_s": 5}})
        t = threading.Timer(0.5, holder.release)
        t.start()
        t0 = time.monotonic()
        assert run_index(waiting).swapped
        assert time.monotonic() - t0 >= 0.4
    finally:
        holder.release()


def test_lock_of_a_killed_process_is_taken_over(workspace):
    s = load_settings(None, {"workspace": str(workspace), "provider": "none", "lock": {"wait": False}})
    s.index_file.parent.mkdir(parents=True, exist_ok=True)
    code = (f"from memory_core.storage.store import IndexLock; import time, pathlib; "
            f"IndexLock(pathlib.Path({str(s.index_file)!r})).acquire(); print('held', flush=True); time.sleep(60)")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                            env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert proc.stdout.readline().strip() == "held"
    with pytest.raises(IndexLockedError):
        run_index(s)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert run_index(s).swapped


@pytest.mark.parametrize("writer", ["auto", "copy"])
def test_queries_from_threads_during_swaps_never_fail(workspace, monkeypatch, writer):
    """auto: each one-file run updates the live file in place; copy: each renames a new file."""
    monkeypatch.setenv("MEMORY_CORE_WRITER", writer)
    s = load_settings(None, {"workspace": str(workspace), "provider": "none"})
    run_index(s)
    errors: list[BaseException] = []
    counts = [0] * 4
    stop = threading.Event()

    def reader(i: int) -> None:
        with Searcher(s) as searcher:
            while not stop.is_set() and counts[i] < 250:
                try:
                    searcher.search("postgres replication lag", min_score=0)
                    counts[i] += 1
                except BaseException as exc:  # noqa: BLE001 - any failure counts
                    errors.append(exc)
                    return

    threads = [threading.Thread(target=reader, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    target = workspace / "memory" / "2026-11-24.md"
    base = target.read_text()
    for n in range(20):
        target.write_text(base + f"\nswap number {n}\n")
        summary = run_index(s)
        assert summary.swapped and summary.published == ("in place" if writer == "auto" else "replaced")
    for t in threads:
        t.join(timeout=120)
    stop.set()
    assert not errors, errors[:3]
    assert sum(counts) == 1000


# -- hostile queries and paths ----------------------------------------------------------------------

HOSTILE = ["", "   ", "\x00", "a\x00b", "\x01\x02\x1f", '"', '"unbalanced', "*", "-", "NEAR(a b)", "a AND OR NOT b",
           "text:foo", "chunks_fts:bar", "(((", "^start", "{a b}", "a:b:c", "'; DROP TABLE chunks; --",
           "x" * 100_000, "中文 English 한국어 العربية", "\ud800", "🙂" * 1000]


def test_hostile_queries_return_results_or_nothing(workspace):
    s = load_settings(None, {"workspace": str(workspace), "provider": "none"})
    run_index(s)
    with Searcher(s) as searcher:
        for q in HOSTILE:
            assert isinstance(searcher.search(q), list), q
        assert searcher.status().chunks > 0  # nothing was dropped


# -- configuration ----------------------------------------------------------------------------------

@pytest.mark.parametrize("overrides,needle", [
    ({"chunking": {"tokens": 0}}, "chunking.tokens"),
    ({"chunking": {"tokens": 100, "overlap": 100}}, "overlap"),
    ({"chunking": {"tokens": -5}}, "chunking.tokens"),
    ({"unknown_key": 1}, "unknown_key: unknown setting"),
    ({"query": {"max_results": "many"}}, "query.max_results"),
    ({"provider": "mystery"}, "provider"),
    ({"query": {"vector_weight": 0, "text_weight": 0}}, "weight"),
    ({"remote": {"timeout_s": -1}}, "remote.timeout_s"),
])
def test_bad_settings_name_the_setting(overrides, needle):
    with pytest.raises(ConfigError) as exc:
        load_settings(None, overrides)
    assert needle in str(exc.value)
    assert "\n" not in str(exc.value)


def test_missing_api_key_is_a_config_error(workspace):
    s = load_settings(None, {"workspace": str(workspace), "provider": "openai"})
    with pytest.raises(ConfigError, match="OPENAI_API_KEY"):
        run_index(s)


def test_api_key_never_in_provider_key_meta_or_index(workspace, openai_fake):
    s = openai_settings(workspace, openai_fake, remote={"api_key": "sk-very-secret-key-9999", "headers": {
        "Authorization": "Bearer sk-very-secret-key-9999", "X-Team": "search"}})
    run_index(s)
    meta, _ = probe_index(s.index_file)
    for blob in (repr(meta), s.index_file.read_bytes().decode("latin-1"), repr(s), s.model_dump_json()):
        assert "sk-very-secret-key-9999" not in blob
    assert (os.stat(s.index_file).st_mode & 0o777) == 0o600
    assert (os.stat(str(s.index_file) + ".lock").st_mode & 0o777) == 0o600


def test_file_size_limit_is_honoured_by_the_test_helpers():
    assert resource.getrlimit(resource.RLIMIT_FSIZE)[0] == resource.RLIM_INFINITY


def _not_base64_body() -> bytes:
    import json

    return json.dumps({"object": "list", "model": "text-embedding-3-small",
                       "data": [{"object": "embedding", "index": 0, "embedding": "<b>not base64!</b>"}],
                       "usage": {"prompt_tokens": 1, "total_tokens": 1}}).encode()


@pytest.mark.parametrize("fault", ["html", "not_base64", "hang", "drip"])
def test_a_reader_answers_keyword_only_within_its_deadline_when_the_provider_misbehaves(workspace, openai_fake,
                                                                                      fault):
    """issue 22 #6, #7: a stalled endpoint blocked one search 377 s (readers used 60 s x 6
    attempts); a 200 HTML page or a non-base64 embedding crashed every search. A reader's query
    embedding has a total deadline (query.embed_timeout_s), then keyword-only with a note."""
    s = openai_settings(workspace, openai_fake, remote={"timeout_s": 60, "max_attempts": 6},
                        query={"embed_timeout_s": 2})
    run_index(s)
    {"html": lambda: openai_fake.inject(Fault("raw", body=HTML, headers={"Content-Type": "text/html"}), None),
     "not_base64": lambda: openai_fake.inject(Fault("raw", body=_not_base64_body()), None),
     "hang": lambda: openai_fake.hang_next(None, seconds=30),
     "drip": lambda: openai_fake.inject(Fault("drip", seconds=0.2), None)}[fault]()
    with Searcher(s) as searcher:
        t0 = time.monotonic()
        res = searcher.search_response("postgres replication", min_score=0).to_dict()
        took = time.monotonic() - t0
    assert res["results"] and "keyword-only" in res.get("note", ""), res.get("note")
    assert took < 6, took


def _gzip_bomb(mib: int) -> bytes:
    import zlib

    z = zlib.compressobj(9, zlib.DEFLATED, 31)
    zeros = b"0" * (1 << 20)
    return b"".join(z.compress(zeros) for _ in range(mib)) + z.flush()


@pytest.mark.parametrize("fault", ["gzip_bomb", "endless"])
def test_a_response_is_never_held_past_its_size_cap(workspace, openai_fake, fault):
    """issue 22 #8: a 1 MB gzip bomb made 4 GB, an endless chunked body 2 GB. A response is read
    up to 256 MiB (decoded), then refused: retried, then one clear provider error."""
    import resource

    s = openai_settings(workspace, openai_fake, remote={"max_attempts": 2, "timeout_s": 30})
    run_index(s)
    _edit(workspace)
    body = _gzip_bomb(400) if fault == "gzip_bomb" else b"[" * 65536
    headers = {"Content-Type": "application/json", "Content-Encoding": "gzip"} if fault == "gzip_bomb" else {}
    openai_fake.inject(Fault("raw" if fault == "gzip_bomb" else "endless", body=body, headers=headers), None)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(ProviderError, match="larger than 256 MiB"):
        run_index(s)
    grown_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert grown_mib < 700, grown_mib  # the body alone was 400 MiB (bomb) or endless
