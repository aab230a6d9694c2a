"""The embedding cache's per-run journal (memory_core/storage/cache.py, memory_core/storage/cache_journal.py):
responses are appended to a journal file, folded into the SQLite cache once, in key order.
Real SQLite files, real journal files, real SIGKILLed child processes."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from memory_core.errors import RunError
from memory_core.index.chunking import sha256_hex
from memory_core.index.pipeline import run_index
from memory_core.storage import cache_journal as J
from memory_core.storage.cache import EmbeddingCache, cache_bytes, cache_entry_count
from memory_core.storage.store import connect, probe_index
from tests.conftest import ROOT, openai_settings
from tests.test_cache_one_copy import _index_hashes

MODEL = "text-embedding-3-small"
DIMS = 8
PER = 5  # vectors per response


def _h(i: int) -> str:
    return hashlib.sha256(f"chunk {i}".encode()).hexdigest()


def _vec(i: int) -> np.ndarray:
    return np.arange(1, DIMS + 1, dtype="<f4") * (i + 1)


def _response(r: int) -> tuple[list[str], np.ndarray]:
    ids = range(r * PER, (r + 1) * PER)
    return [_h(i) for i in ids], np.stack([_vec(i) for i in ids])


def _in_file(path: Path) -> set[str]:
    """Hashes in the SQLite file itself (not in any journal)."""
    conn = connect(path, readonly=True)
    try:
        return {h.hex() for (h,) in conn.execute("SELECT hash FROM cache_vectors")}
    finally:
        conn.close()


def _child(path: Path, responses: int, then: str, delete: int | None = None) -> subprocess.Popen[str]:
    """A process that stores ``responses`` responses in the cache at ``path`` (deleting chunk
    ``delete`` after them), prints "stored", then SIGKILLs itself (``then == "kill"``) or waits
    for a line on stdin and closes the cache (``"wait"``)."""
    code = textwrap.dedent(f"""
        import os, signal, sys
        sys.path.insert(0, {str(ROOT)!r})
        from memory_core.storage.cache import EmbeddingCache
        from tests.test_cache_journal import _h, _response
        c = EmbeddingCache({str(path)!r}, "openai", "m", "k")
        for r in range({responses}):
            c.put_array(*_response(r))
        if {delete!r} is not None:
            c.delete_many([_h({delete!r})])
        print("stored", flush=True)
        if {then!r} == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        sys.stdin.readline()
        c.close()
    """)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True, env=env)


def _killed_after(path: Path, responses: int, delete: int | None = None) -> Path:
    """Run a child that stores ``responses`` responses and is SIGKILLed: its orphan journal."""
    proc = _child(path, responses, "kill", delete)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL and out.strip() == "stored"
    journals = J.journal_paths(path)
    assert len(journals) == 1
    return journals[0]


def _all(n_responses: int) -> dict[str, bytes]:
    return {h: v.tobytes() for r in range(n_responses) for h, v in zip(*_response(r), strict=True)}


# -- one instance ---------------------------------------------------------------------------------

def test_get_many_sees_what_the_same_instance_put_and_close_folds_it(tmp_path):
    path = tmp_path / "c.sqlite"
    with EmbeddingCache(path, "openai", "m", "k") as cache:
        assert cache.is_empty()
        for r in range(3):
            cache.put_array(*_response(r))
        cache.put_many([(_h(99), _vec(99).tobytes())], DIMS)
        want = {**_all(3), _h(99): _vec(99).tobytes()}
        assert cache.get_many([*want, _h(1000)]) == want  # streaming.resolve() refetches the run's own vectors
        assert cache.has_many([*want, _h(1000)]) == set(want)
        assert cache.hashes() == set(want) and cache.count() == len(want) and not cache.is_empty()
        assert _in_file(path) == set()  # nothing was written to SQLite per response
        assert len(J.journal_paths(path)) == 1
        assert cache_entry_count(path) == len(want)
        assert cache_bytes(path) >= path.stat().st_size + J.journal_paths(path)[0].stat().st_size  # status sizes
        # an upsert of a hash already in the journal: the newest vector wins, counted once
        cache.put_array([_h(0)], _vec(7)[None, :])
        assert cache.get_many([_h(0)]) == {_h(0): _vec(7).tobytes()} and cache.count() == len(want)
    assert J.journal_paths(path) == []
    want[_h(0)] = _vec(7).tobytes()
    assert _in_file(path) == set(want)
    with EmbeddingCache(path, "openai", "m", "k") as cache:
        assert cache.get_many(list(want)) == want


def test_the_map_merges_its_tail_into_the_sorted_arrays_and_keeps_finding_everything(tmp_path, monkeypatch):
    monkeypatch.setattr(J, "TAIL_MAX", 7)  # many merges with a few vectors
    path = tmp_path / "c.sqlite"
    with EmbeddingCache(path, "openai", "m", "k") as cache:
        for r in range(12):
            cache.put_array(*_response(r))
            if r == 6:
                cache.put_array(*_response(2))  # again, once in the sorted arrays
        assert len(cache.journal.keys) >= 50 and cache.get_many(list(_all(12))) == _all(12)
        cache.delete_many([_h(3), _h(58)])
        assert cache.count() == 58 and not cache.has_many([_h(3), _h(58)])
        cache.put_array([_h(3)], _vec(3)[None, :])  # back after its delete
        assert cache.get_many([_h(3)]) == {_h(3): _vec(3).tobytes()}
    assert _in_file(path) == set(_all(12)) - {_h(58)}


def test_delete_many_forgets_journal_entries_in_a_replay_too(tmp_path):
    path = tmp_path / "c.sqlite"
    _killed_after(path, 2, delete=3)  # a drop record after the puts
    with EmbeddingCache(path, "openai", "m", "k") as cache:
        assert _h(3) not in cache.hashes() and cache.count() == 2 * PER - 1
    assert _in_file(path) == set(_all(2)) - {_h(3)}


class _Held:
    """What trim() asks of the just-published index: which hashes it holds."""

    def __init__(self, hashes: set[str]) -> None:
        self.hashes = hashes

    def has_many(self, hashes):  # type: ignore[no-untyped-def]
        return {h for h in hashes if h in self.hashes}


def test_trim_drops_what_the_index_holds_and_folds_the_rest_in_key_order(tmp_path):
    path = tmp_path / "c.sqlite"
    with EmbeddingCache(path, "openai", "m", "k") as cache:
        cache.put_array(*_response(9))  # an older entry in the file, held by the index: deleted
        cache.fold()
        for r in range(4):
            cache.put_array(*_response(r))
        held = set(_response(0)[0]) | set(_response(9)[0])
        assert cache.trim(_Held(held)) == 2 * PER  # type: ignore[arg-type]
        assert J.journal_paths(path) == []
        assert cache.get_many(list(_all(4))) == {h: v for h, v in _all(4).items() if h not in held}
    conn = connect(path, readonly=True)
    try:
        keys = [h for (h,) in conn.execute("SELECT hash FROM cache_vectors ORDER BY rid")]
    finally:
        conn.close()
    assert keys == sorted(keys) and len(keys) == 3 * PER  # appended in key order: one pass over the key index


def test_evict_folds_the_journal_then_counts_the_file(tmp_path):
    path = tmp_path / "c.sqlite"
    with EmbeddingCache(path, "openai", "m", "k") as cache:
        for r in range(3):
            cache.put_array(*_response(r))
        assert cache.evict(10) == 5
        assert J.journal_paths(path) == [] and len(_in_file(path)) == 10 and cache.count() == 10


# -- crashes ---------------------------------------------------------------------------------------

def test_a_killed_writer_loses_no_response(tmp_path):
    path = tmp_path / "c.sqlite"
    journal = _killed_after(path, 4)
    assert _in_file(path) == set()  # everything was in the journal
    assert cache_entry_count(path) == 4 * PER  # status counts it before anyone folds it
    with EmbeddingCache(path, "openai", "m", "k") as cache:  # folds the orphan as it opens
        assert not journal.exists() and _in_file(path) == set(_all(4))
        assert cache.get_many(list(_all(4))) == _all(4)


def test_a_torn_last_record_ends_the_replay_the_records_before_it_count(tmp_path):
    path = tmp_path / "c.sqlite"
    journal = _killed_after(path, 4)
    size = journal.stat().st_size
    os.truncate(journal, size - 3)  # the kill came inside the last write
    with EmbeddingCache(path, "openai", "m", "k") as cache:
        assert cache.hashes() == set(_all(3))
    assert not journal.exists() and _in_file(path) == set(_all(3))


def test_a_record_with_a_bad_checksum_ends_the_replay(tmp_path):
    path = tmp_path / "c.sqlite"
    journal = _killed_after(path, 4)
    record = J.RECORD_HEAD + PER * (32 + DIMS * 4)
    start = journal.stat().st_size - 4 * record
    with open(journal, "r+b") as fh:  # one byte of the third response's vectors
        fh.seek(start + 2 * record + J.RECORD_HEAD + PER * 32 + 5)
        b = fh.read(1)
        fh.seek(-1, os.SEEK_CUR)
        fh.write(bytes([b[0] ^ 0xFF]))
    with EmbeddingCache(path, "openai", "m", "k") as cache:
        assert cache.hashes() == set(_all(2))  # the fourth, intact, comes after the damage: not trusted
        assert cache.get_many(list(_all(2))) == _all(2)
    assert not journal.exists()


def test_a_journal_whose_owner_is_alive_is_left_alone(tmp_path):
    path = tmp_path / "c.sqlite"
    proc = _child(path, 3, "wait")
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "stored"
        (journal,) = J.journal_paths(path)
        size = journal.stat().st_size
        with EmbeddingCache(path, "openai", "m", "k") as other:
            assert other.recover() == 0  # its lock is held: not an orphan
            assert other.get_many(list(_all(3))) == {}  # not seen until its owner folds it (a cost)
            assert journal.exists() and journal.stat().st_size == size
            other.put_array(*_response(5))  # its own journal, beside the other
            assert len(J.journal_paths(path)) == 2
        assert journal.exists() and _in_file(path) == set(_response(5)[0])
        proc.communicate("\n", timeout=60)
        assert proc.returncode == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    assert J.journal_paths(path) == [] and _in_file(path) == set(_all(3)) | set(_response(5)[0])


def test_two_instances_in_one_process_keep_their_own_journals(tmp_path):
    """The batch runner opens one cache per thread: flock is per open file, so a second
    instance neither folds nor deletes the first one's journal."""
    path = tmp_path / "c.sqlite"
    a = EmbeddingCache(path, "openai", "m", "k")
    a.put_array(*_response(0))
    b = EmbeddingCache(path, "openai", "m", "k")
    try:
        assert b.recover() == 0 and len(J.journal_paths(path)) == 1
        assert a.get_many(list(_all(1))) == _all(1)
    finally:
        b.close()
        a.close()
    assert J.journal_paths(path) == [] and _in_file(path) == set(_all(1))


# -- runs ------------------------------------------------------------------------------------------

def test_a_successful_run_leaves_no_journal_and_no_vector_the_index_holds(workspace, openai_fake):
    s = openai_settings(workspace, openai_fake, remote={"max_inputs_per_request": 4})
    assert run_index(s).chunks_embedded > 0
    assert J.journal_paths(s.cache_file) == []
    held = _index_hashes(s.index_file)
    assert held and not (_in_file(s.cache_file) & held)
    assert run_index(s, full=True).chunks_embedded == 0


def test_with_the_cache_disabled_the_run_cache_and_its_journal_go_with_the_run(workspace, openai_fake, monkeypatch):
    """``cache.enabled = false``: the run's own cache (in its work folder) is dropped, journal and
    all, without folding the journal into a file about to be deleted; nothing is left beside the
    index, and the next run still takes the live index's vectors (it is their record)."""
    s = openai_settings(workspace, openai_fake, cache={"enabled": False}, remote={"max_inputs_per_request": 4})
    folded: list[int] = []
    real_fold = EmbeddingCache.fold
    monkeypatch.setattr(EmbeddingCache, "fold", lambda self: folded.append(1) or real_fold(self))
    first = run_index(s)
    assert first.chunks_embedded > 0 and not folded
    assert not s.cache_file.exists()
    assert not [p for p in s.index_file.parent.rglob("*") if "-journal-" in p.name or "run-cache" in p.name]
    (workspace / "memory" / "new-note.md").write_text("# New\nThe pelican rota changed on Tuesday.\n")
    n = len(openai_fake.input_texts)
    second = run_index(s)
    assert second.chunks_embedded == len(openai_fake.input_texts) - n == 1


def test_a_failed_run_keeps_its_vectors_folded_at_close(workspace, openai_fake, monkeypatch):
    import memory_core.index.writer as W

    real = W.publish_temp

    def fail_before_the_publish(tmp, live):  # type: ignore[no-untyped-def]
        # (a failure after the build's publish is a warning of a published run: R1 in docs/reliability.md)
        raise RunError("the disk went away before the publish")

    monkeypatch.setattr(W, "publish_temp", fail_before_the_publish)
    s = openai_settings(workspace, openai_fake, remote={"max_inputs_per_request": 4})
    with pytest.raises(RunError):
        run_index(s)
    assert not s.index_file.exists()
    sent = {sha256_hex(t) for t in openai_fake.input_texts}
    assert sent and J.journal_paths(s.cache_file) == []
    assert sent <= _in_file(s.cache_file)  # folded into the SQLite file when the run closed its cache
    monkeypatch.setattr(W, "publish_temp", real)
    n = len(openai_fake.input_texts)
    assert run_index(s).chunks_embedded == 0 and len(openai_fake.input_texts) == n


def test_a_run_killed_after_some_responses_embeds_none_of_them_again(workspace, openai_fake, tmp_path):
    s = openai_settings(workspace, openai_fake, remote={"max_inputs_per_request": 4})
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'workspace = "{workspace}"\nprovider = "openai"\nmodel = "{MODEL}"\n'
                   f'[remote]\nbase_url = "{openai_fake.base_url}"\ndimensions = 64\nmax_inputs_per_request = 4\n')
    env = dict(os.environ, PYTHONPATH=str(ROOT), OPENAI_API_KEY="sk-test-key-0123456789",
               MEMORY_CORE_FAILPOINT="embed")  # SIGKILL once the first response is stored
    proc = subprocess.run([sys.executable, "-m", "memory_core.apps.cli", "index", "--config", str(cfg), "--engine",
                           "local", "--no-progress"], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    (journal,) = J.journal_paths(s.cache_file)  # the killed run's responses: in its journal only
    assert not s.index_file.exists() and _in_file(s.cache_file) == set()
    fd = os.open(journal, os.O_RDONLY)
    try:  # what it had stored when it was killed (requests in flight then are not in it)
        raw = J.scan(fd).digests.tobytes()
    finally:
        os.close(fd)
    received = {raw[i:i + 32].hex() for i in range(0, len(raw), 32)}
    assert received and received <= {sha256_hex(t) for t in openai_fake.input_texts}
    n = len(openai_fake.input_texts)
    summary = run_index(s)
    again = {sha256_hex(t) for t in openai_fake.input_texts[n:]}
    assert summary.chunks_embedded > 0 and not (again & received)  # the orphan was folded before the lookups
    assert summary.chunks_from_cache >= len(received & _index_hashes(s.index_file)) > 0
    assert J.journal_paths(s.cache_file) == [] and not (_in_file(s.cache_file) & _index_hashes(s.index_file))
    meta, _ = probe_index(s.index_file)
    assert meta is not None


def test_a_second_cache_in_one_process_keeps_the_firsts_locks(tmp_path: Path) -> None:
    """POSIX locks belong to the process: a second instance's own open-and-close of the cache file
    dropped the first one's, so another process's connection, closing, took itself for the last one,
    checkpointed and deleted the WAL under the live connection, whose later commits went to a deleted
    file and were lost to every other process (found by the fifteenth session's Batch audit with the
    stdlib's sqlite3 reading the ledger during a run)."""
    path = tmp_path / "cache.sqlite"
    first = EmbeddingCache(path, "openai", "m", "k")
    vec = np.ones(4, dtype=np.float32).tobytes()
    first.put_many([(sha256_hex(f"a{i}"), vec) for i in range(50)], dims=4)
    first.fold()
    second = EmbeddingCache(path, "openai", "m", "k")  # a ledger's, another run's in one server
    assert _counted_elsewhere(path) == "50"
    first.put_many([(sha256_hex(f"b{i}"), vec) for i in range(50)], dims=4)
    first.fold()  # committed by the live connection after the other process closed
    seen = _counted_elsewhere(path, readonly=True)
    assert seen == "100", seen  # before: 50, the other 50 in a deleted WAL
    second.close()
    first.close()
    again = EmbeddingCache(path, "openai", "m", "k")
    try:
        assert again.count() == 100
    finally:
        again.close()


def _counted_elsewhere(path: Path, *, readonly: bool = False) -> str:
    """The cache's vector count as another process reads it (the stdlib's sqlite3, opened and
    closed: what dropped a live connection's locks), read-only or not."""
    uri = "f'file:{sys.argv[1]}?mode=ro', uri=True" if readonly else "sys.argv[1]"
    code = (f"import sqlite3, sys; c = sqlite3.connect({uri});"
            " print(c.execute('SELECT count(*) FROM cache_vectors').fetchone()[0]); c.close()")
    return subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True,
                          check=True).stdout.strip()


def test_the_re_embed_check_keeps_a_live_caches_locks(tmp_path: Path) -> None:
    """Every run first asks the cache file whether a re-embed of its index is under way
    (``renewal_pending``). It read the file's header through a plain descriptor and closed it: in a
    process with a live cache connection on that file (a server, a fleet run sharing the cache),
    that dropped the connection's locks, as the second instance above once did."""
    from memory_core.storage.cache import renewal_pending

    path = tmp_path / "cache.sqlite"
    first = EmbeddingCache(path, "openai", "m", "k")
    vec = np.ones(4, dtype=np.float32).tobytes()
    first.put_many([(sha256_hex(f"a{i}"), vec) for i in range(50)], dims=4)
    first.fold()
    assert renewal_pending(path, "openai", "m", "k", tmp_path / "index.sqlite") is None
    assert _counted_elsewhere(path) == "50"
    first.put_many([(sha256_hex(f"b{i}"), vec) for i in range(50)], dims=4)
    first.fold()  # committed by the live connection after the other process closed
    seen = _counted_elsewhere(path, readonly=True)
    assert seen == "100", seen
    first.close()
