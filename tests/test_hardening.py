"""Hardening (issue 17): each breakage an outside attack found, as a test.

The numbers in the section titles are the items of the issue.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import apsw
import pytest

from memory_core.apps.cli import main
from memory_core.config import load_settings
from memory_core.errors import NotAnIndexError, PathError, UnsafePathError
from memory_core.index.pipeline import run_index
from memory_core.query.search import Searcher
from memory_core.storage.store import APPLICATION_ID, IndexLock, connect, probe_index
from tests.conftest import ROOT


def _none(ws: Path, **kw) -> object:
    return load_settings(None, {"workspace": str(ws), "provider": "none", **kw})


def _cli(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "memory_core.apps.cli", *args], capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=str(ROOT), **(env or {})), timeout=timeout)


def _one_line(proc: subprocess.CompletedProcess[str], code: int) -> str:
    assert proc.returncode == code, proc.stderr
    assert "Traceback" not in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr
    return proc.stderr


# -- 1. a file that is not ours is never replaced ----------------------------------------------

def test_the_index_carries_memory_cores_application_id(workspace):
    s = _none(workspace)
    run_index(s)
    conn = connect(s.index_file, readonly=True)
    try:
        assert conn.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
    finally:
        conn.close()


def _foreign_sqlite(path: Path, app_id: int = 0) -> None:
    conn = apsw.Connection(str(path))
    conn.execute("CREATE TABLE notes(x); INSERT INTO notes VALUES ('precious')")
    if app_id:
        conn.execute(f"PRAGMA application_id={app_id}")
    conn.close()


@pytest.mark.parametrize("kind", ["markdown", "sqlite", "sqlite-app-id", "garbage-header"])
def test_a_file_that_is_not_an_index_is_refused_and_kept(workspace, tmp_path, kind):
    target = tmp_path / "target"
    if kind == "markdown":
        target.write_text("# MEMORY\nDo not lose this.\n")
    elif kind == "sqlite":
        _foreign_sqlite(target)
    elif kind == "sqlite-app-id":
        _foreign_sqlite(target, 0x1234)
    else:  # an index whose header was overwritten: nothing says it is ours any more
        run_index(_none(workspace, index_path=str(target)))
        data = target.read_bytes()
        target.write_bytes(b"\x13\x37" * 50 + data[100:])
        Path(str(target) + ".lock").unlink()
    before = target.read_bytes()
    proc = _cli("index", "-w", str(workspace), "--provider", "none", "--index", str(target))
    err = _one_line(proc, 2)
    assert "not a memory-core index" in err
    assert target.read_bytes() == before
    assert not Path(str(target) + ".lock").exists()
    assert not [p for p in tmp_path.iterdir() if ".tmp-" in p.name]
    with pytest.raises(NotAnIndexError):
        probe_index(target)


def test_a_device_node_is_refused(workspace):
    s = _none(workspace, index_path="/dev/null")
    with pytest.raises(UnsafePathError, match="not a regular file"):
        run_index(s)
    assert Path("/dev/null").is_char_device()


def test_an_index_written_before_the_mark_is_still_ours(workspace):
    s = _none(workspace)
    run_index(s)
    conn = connect(s.index_file)
    conn.execute("PRAGMA application_id=0")
    conn.close()
    assert probe_index(s.index_file)[1] is None
    assert run_index(s, full=True).swapped
    conn = connect(s.index_file, readonly=True)
    assert conn.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
    conn.close()


# -- 2. never through a symlink ------------------------------------------------------------------

def test_a_symlinked_lock_file_is_refused_and_its_target_kept(workspace, tmp_path):
    s = _none(workspace)
    run_index(s)
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    lock = Path(str(s.index_file) + ".lock")
    lock.unlink()
    lock.symlink_to(victim)
    proc = _cli("index", "-w", str(workspace), "--provider", "none", "--full")
    assert "symbolic link" in _one_line(proc, 2)
    assert victim.read_text() == "precious"


def test_a_symlinked_cache_is_refused_and_nothing_created_at_its_target(workspace, tmp_path, openai_fake):
    from tests.conftest import openai_settings

    s = openai_settings(workspace, openai_fake)
    target = tmp_path / "elsewhere.sqlite"
    s.cache_file.parent.mkdir(parents=True, exist_ok=True)
    s.cache_file.symlink_to(target)
    with pytest.raises(UnsafePathError, match="symbolic link"):
        run_index(s)
    assert not target.exists()
    assert not s.index_file.exists()


@pytest.mark.parametrize("name", ["index", "journal", "work"])
def test_symlinks_at_the_index_its_journal_or_work_folder_are_refused(workspace, tmp_path, name):
    s = _none(workspace)
    run_index(s)
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    live = s.index_file
    if name == "index":
        real = tmp_path / "real.sqlite"
        live.rename(real)
        live.symlink_to(real)
        before = real.read_bytes()
    elif name == "journal":
        Path(str(live) + "-journal").symlink_to(victim)
        before = live.read_bytes()
    else:
        (live.parent / ".memory-core-work").symlink_to(tmp_path)
        before = live.read_bytes()
    with pytest.raises(UnsafePathError, match="symbolic link"):
        run_index(s, full=True)
    assert victim.read_bytes() == b"precious"
    assert (tmp_path / "real.sqlite" if name == "index" else live).read_bytes() == before


def test_a_symlinked_export_temp_is_never_written_through(workspace, tmp_path, monkeypatch):
    from memory_core.export import files as ex

    s = _none(workspace)
    run_index(s)
    victim = tmp_path / "victim"
    victim.write_text("precious")
    planted = tmp_path / ".out.jsonl.tmp-planted"
    planted.symlink_to(victim)
    monkeypatch.setattr(ex, "_temp_beside", lambda p: planted)  # the temp name an attacker guessed
    with pytest.raises(UnsafePathError, match="symbolic link"):
        ex.export_index(s.index_file, tmp_path / "out.jsonl", "jsonl")
    assert victim.read_text() == "precious"


def test_index_lock_refuses_a_folder(tmp_path):
    with pytest.raises(PathError, match="is a folder"):
        IndexLock(tmp_path).acquire()


def test_searching_or_status_of_a_foreign_file_is_refused(tmp_path, capsys):
    target = tmp_path / "MEMORY.md"
    target.write_text("# notes\n")
    s = _none(tmp_path, index_path=str(target))
    with pytest.raises(NotAnIndexError), Searcher(s) as searcher:
        searcher.status()
    assert main(["status", "-w", str(tmp_path), "--index", str(target)]) == 2
    assert "not a memory-core index" in capsys.readouterr().err
    assert target.read_text() == "# notes\n"


# -- 3. response indexes exactly 0..n-1 ------------------------------------------------------------

def _cache_total(s) -> int:
    from memory_core.storage.cache import cache_entry_count

    return cache_entry_count(s.cache_file) or 0


@pytest.mark.parametrize("provider", ["openai", "voyage"])
@pytest.mark.parametrize("mode", ["dup_index", "gap_index"])
def test_response_indexes_must_be_exactly_0_to_n_minus_1(workspace, provider, mode):
    from memory_core.errors import ProviderError
    from tests.conftest import openai_settings
    from tests.fakes.openai_fake import OpenAIFake
    from tests.fakes.voyage_fake import VoyageFake
    from tests.test_providers_gemini_voyage import voyage_settings

    fake_cls, settings = {"openai": (OpenAIFake, openai_settings), "voyage": (VoyageFake, voyage_settings)}[provider]
    with fake_cls(dims=64 if provider == "openai" else 256) as srv:
        s = settings(workspace, srv, remote={"max_attempts": 1})
        srv.bad_payload_next(mode, None)
        with pytest.raises(ProviderError, match="not exactly 0"):
            run_index(s)
        assert _cache_total(s) == 0  # nothing from the bad response was cached
        assert not s.index_file.exists()
        srv.clear_faults()
        assert run_index(s).swapped


@pytest.mark.parametrize("mode", ["dup_index", "gap_index"])
def test_batch_lines_with_a_bad_index_are_refused_and_reembedded(workspace, mode):
    from tests.fakes.common import JobFault
    from tests.fakes.openai_fake import OpenAIFake
    from tests.test_batch import batch_settings

    with OpenAIFake(dims=16, batch_delay=0.05) as srv:
        srv.script_next_job(JobFault(bad_vector_lines=2, bad_vector=mode))
        s = batch_settings(workspace, "openai", srv, concurrency=1)
        summary = run_index(s)
        assert summary.swapped and summary.batch.lines_failed == 2 == summary.batch.chunks_via_sync
        assert len(srv.sync_billed_texts) == 2


# -- 4. zero-norm vectors ------------------------------------------------------------------------

def test_a_zero_vector_from_the_provider_is_refused_and_not_cached(workspace, openai_fake):
    from memory_core.errors import ProviderError
    from tests.conftest import openai_settings

    s = openai_settings(workspace, openai_fake, remote={"max_attempts": 1})
    openai_fake.bad_payload_next("zero", None)
    with pytest.raises(ProviderError, match="all-zero"):
        run_index(s)
    assert _cache_total(s) == 0


@pytest.mark.parametrize("store", ["bits", "blob"])
def test_a_stored_zero_vector_never_crashes_a_query_and_the_cache_drops_it(workspace, openai_fake, store,
                                                                           monkeypatch):
    from memory_core.storage.cache import EmbeddingCache
    from tests.conftest import openai_settings

    if store == "blob":
        monkeypatch.setenv("MEMORY_CORE_DISABLE_VEC", "1")
    s = openai_settings(workspace, openai_fake)
    run_index(s)
    meta, _ = probe_index(s.index_file)
    zero = bytes(4 * 64)
    # what an older version let in: a zero row in the live index and in the cache
    conn = connect(s.index_file)
    rid, h = conn.execute("SELECT rid, hash FROM chunks ORDER BY rid LIMIT 1").fetchone()
    conn.execute("UPDATE chunks SET embedding = ? WHERE rid = ?", (zero, rid))
    if store == "bits":  # its sign bits too (all zero), so the scan finds it first
        from memory_core.storage import vectors

        block, raw = conn.execute(f"SELECT block, codes FROM {vectors.BITS_TABLE} WHERE block <= ?"
                                  " ORDER BY block DESC LIMIT 1", (rid,)).fetchone()
        cb = vectors.code_bytes(64)
        pos = rid - block
        conn.execute(f"UPDATE {vectors.BITS_TABLE} SET codes = ? WHERE block = ?",
                     (raw[:pos * cb] + bytes(cb) + raw[(pos + 1) * cb:], block))
    conn.close()
    with EmbeddingCache(s.cache_file, "openai", s.model, meta["provider_key"]) as c:
        c.conn.execute("UPDATE cache_vectors SET embedding = ? WHERE hash = ?", (zero, bytes.fromhex(h)))
        assert h not in c.get_many([h]) and h not in c.has_many([h])
    with Searcher(s) as searcher:
        hits = searcher.search("postgres replication", min_score=0)
        assert hits and all(isinstance(x.score, float) for x in hits)
    # a rebuild from the cache re-embeds the zero row instead of indexing it again
    before = openai_fake.embedded_inputs
    assert run_index(s, full=True).swapped
    assert openai_fake.embedded_inputs == before + 1
    with Searcher(s) as searcher:
        assert searcher.search("postgres replication", min_score=0)


def test_the_cache_refuses_to_store_a_zero_or_nan_vector(tmp_path):
    import numpy as np

    from memory_core.storage.cache import EmbeddingCache

    with EmbeddingCache(tmp_path / "c.sqlite", "p", "m", "k") as c:
        for bad in (np.zeros((1, 4)), np.array([[np.nan, 1, 1, 1]])):
            with pytest.raises(ValueError, match="refusing"):
                c.put_array(["ab" * 32], bad)
        assert c.count() == 0


# -- 6. a damaged cache (and the batch ledger in it) is set aside -----------------------------

@pytest.mark.parametrize("damage", ["garbage", "truncated"])
def test_a_damaged_cache_is_set_aside_and_the_run_goes_on(workspace, openai_fake, damage, caplog):
    from tests.conftest import openai_settings

    s = openai_settings(workspace, openai_fake)
    run_index(s)
    data = s.cache_file.read_bytes()
    assert not Path(str(s.cache_file) + "-wal").exists()
    damaged = b"garbage!" * 1000 if damage == "garbage" else data[: len(data) // 3]
    s.cache_file.write_bytes(damaged)
    before = openai_fake.embedded_inputs
    caplog.clear()
    summary = run_index(s, full=True)
    assert summary.swapped
    warned = [r.getMessage() for r in caplog.records if "embedding cache" in r.getMessage()]
    assert len(warned) == 1 and "set aside" in warned[0]
    aside = [p for p in s.cache_file.parent.iterdir() if ".damaged-" in p.name]
    assert len(aside) == 1 and aside[0].read_bytes() == damaged  # kept, for whoever wants to look
    # the live index holds every vector (issue 25: it is their record), so nothing is embedded again
    assert summary.chunks_embedded == 0 and openai_fake.embedded_inputs == before
    assert run_index(s, full=True).swapped and openai_fake.embedded_inputs == before


def test_a_damaged_cache_with_batch_mode_is_set_aside_too(workspace):
    from tests.fakes.openai_fake import OpenAIFake
    from tests.test_batch import batch_settings

    with OpenAIFake(dims=16, batch_delay=0.05) as srv:
        s = batch_settings(workspace, "openai", srv, concurrency=1)
        s.cache_file.parent.mkdir(parents=True, exist_ok=True)
        s.cache_file.write_bytes(b"\x00garbage" * 512)
        summary = run_index(s)
        assert summary.swapped and summary.batch.chunks_via_batch == summary.chunks_total
        assert [p for p in s.cache_file.parent.iterdir() if ".damaged-" in p.name]


# -- 8, 9. secrets stay on the machine -----------------------------------------------------------

SECRETS = {
    "aws key id": "AKIAQWERTYUIOP123456",
    "aws secret": "Zx9/Kq2LmN8pQr4StUv6WxYz0AbCdEfGhIjKlMn1",
    "stripe": "sk_live_4eC39HqLyjWDarjtT1zdp7dcXYZ",
    "jwt": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
    "postgres": "Adm1nPassw0rdXYZ",
    "prose": "hunter2hunter2",
    "gitlab": "glpat-AbCdEfGhIjKlMnOpQrSt12",
    "pem body": "MIIEowIBAAKCAQEAwJ8qzhfKpLr3Ksd0Y",
}
SECRET_TEXT = (
    f"AWS access key {SECRETS['aws key id']} with aws secret {SECRETS['aws secret']}.\n"
    f"Stripe key {SECRETS['stripe']} and session token {SECRETS['jwt']}\n"
    f"db at postgres://admin:{SECRETS['postgres']}@db.internal:5432/app\n"
    f"the password is {SECRETS['prose']} for the staging box, and gitlab {SECRETS['gitlab']}\n"
)
PEM = ("-----BEGIN RSA PRIVATE KEY-----\n" + f"{SECRETS['pem body']}\n" * 4 + "-----END RSA PRIVATE KEY-----\n")


def _plant_secrets(ws: Path) -> None:
    import json

    (ws / "memory" / "ops-secrets.md").write_text(f"# Ops notes about the capybara cluster\n\n{SECRET_TEXT}\n{PEM}\nafter the key\n")
    msg = {"type": "message", "id": "s1", "timestamp": "2026-11-20T10:00:00Z",
           "message": {"role": "user", "content": SECRET_TEXT + PEM}}
    (ws / "sessions" / "2026-11-20-secrets.jsonl").write_text(json.dumps(msg) + "\n")


def _assert_no_secret(text: str, where: str) -> None:
    leaked = [k for k, v in SECRETS.items() if v in text]
    assert not leaked, f"{leaked} reached {where}"


def test_with_a_hosted_provider_and_the_defaults_no_secret_leaves_the_machine(workspace, openai_fake, tmp_path):
    from memory_core.export.files import export_index
    from tests.conftest import openai_settings

    _plant_secrets(workspace)
    s = openai_settings(workspace, openai_fake, sources=["memory", "sessions"])
    assert s.redact == "all"  # "auto" resolved: the provider is hosted
    summary = run_index(s)
    assert summary.swapped
    sent = "\n".join(openai_fake.input_texts)
    assert "capybara cluster" in sent  # the note was sent ...
    _assert_no_secret(sent, "the provider")  # ... without its secrets
    conn = connect(s.index_file, readonly=True)
    _assert_no_secret("\n".join(r[0] for r in conn.execute("SELECT text FROM chunks")), "the index")
    conn.close()
    # the FTS index keeps no text (contentless), only its terms: none is a piece of a secret
    conn = connect(s.index_file, readonly=True)
    conn.execute("CREATE VIRTUAL TABLE temp.v USING fts5vocab(main, 'chunks_fts', 'row')")
    terms = [t for (t,) in conn.execute("SELECT term FROM temp.v")]
    conn.close()
    assert "capybara" in terms
    leaked = [(k, t) for t in terms if len(t) >= 8 for k, v in SECRETS.items() if t in v.lower()]
    assert not leaked, f"{leaked} reached the FTS index"
    export_index(s.index_file, tmp_path / "out.jsonl", "jsonl")
    _assert_no_secret((tmp_path / "out.jsonl").read_text(), "export")
    with Searcher(s) as searcher:
        note = searcher.read_file("memory/ops-secrets.md")
        _assert_no_secret(note.text, "get (note)")
        assert "after the key" in note.text and note.lines == len(
            (workspace / "memory" / "ops-secrets.md").read_text().splitlines())  # line numbers kept
        _assert_no_secret(searcher.read_file("sessions/2026-11-20-secrets.jsonl").text, "get (transcript)")


def test_local_provider_defaults_keep_notes_exact_and_off_turns_redaction_off(workspace, openai_fake):
    from tests.conftest import openai_settings

    assert _none(workspace).redact == "sessions"
    assert load_settings(None, {"workspace": str(workspace), "provider": "local"}).redact == "sessions"
    assert load_settings(None, {"workspace": str(workspace), "provider": "local", "fallback": "openai"}).redact == "all"
    assert load_settings(None, {"workspace": str(workspace)}).redact == "all"  # "auto" provider may be hosted
    _plant_secrets(workspace)
    s = openai_settings(workspace, openai_fake, redact="off")
    run_index(s)
    assert SECRETS["stripe"] in "\n".join(openai_fake.input_texts)  # documented: "off" sends them as written


# -- 10. one line, never a traceback -------------------------------------------------------------

def test_disk_full_while_storing_vectors_is_one_line(workspace, tmp_path):
    """The cache's WAL hits the file size limit (as a full disk does) while responses come in."""
    from tests.fakes.openai_fake import OpenAIFake

    (workspace / "memory" / "big.md").write_text(
        "\n\n".join(f"## part {i}\n" + f"paragraph {i} about the capybara rollout and the queue. " * 30
                    for i in range(300)))
    limit = 256 * 1024
    code = (
        "import resource, signal, sys\n"
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
        f"resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, {limit}))\n"
        "from memory_core.apps.cli import main\n"
        f"sys.exit(main(['index', '-w', {str(workspace)!r}, '--provider', 'openai', '--engine', 'local']))\n"
    )
    with OpenAIFake(dims=None) as srv:
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                              env=dict(os.environ, PYTHONPATH=str(ROOT), OPENAI_API_KEY="sk-test-0123456789",
                                       OPENAI_BASE_URL=srv.base_url))
    err = _one_line(proc, 1)
    assert ("disk" in err or "embedding cache" in err) and "live index was left as it was" in err
    assert not (workspace / ".memory-core" / "index.sqlite").exists()


def test_sqlite_errors_that_escape_are_classified():
    from memory_core.errors import RunError, classify_error

    full = classify_error(apsw.FullError("database or disk is full"))
    assert isinstance(full, RunError) and "disk is full" in str(full)
    assert isinstance(classify_error(apsw.IOError("disk I/O error")), RunError)
    assert classify_error(ValueError("a bug")) is None  # a bug keeps its traceback


@pytest.mark.parametrize("target", ["/", "folder"])
@pytest.mark.parametrize("command", ["index", "search", "status", "export"])
def test_index_pointing_at_a_folder_is_a_usage_error(workspace, tmp_path, target, command):
    path = "/" if target == "/" else str(tmp_path)
    before = sorted(os.listdir(path))
    args = {"index": ["--provider", "none"], "search": ["anything"], "status": [],
            "export": [str(tmp_path / "out.jsonl")]}[command]
    assert "folder" in _one_line(_cli(command, "-w", str(workspace), "--index", path, *args), 2)
    assert sorted(os.listdir(path)) == before  # no lock, temp file or index created there


def test_a_config_file_that_is_not_utf8_is_a_usage_error(workspace, tmp_path):
    cfg = tmp_path / "memory-core.toml"
    cfg.write_bytes('provider = "none"\n# caf\xe9 in Latin-1\n'.encode("latin-1"))
    err = _one_line(_cli("status", "--config", str(cfg), "-w", str(workspace)), 2)
    assert "not UTF-8" in err and str(cfg) in err


@pytest.mark.parametrize("value", ["inf", "nan", "-inf"])
def test_infinite_or_nan_settings_are_refused(workspace, tmp_path, value):
    from memory_core.errors import ConfigError

    cfg = tmp_path / "memory-core.toml"
    cfg.write_text(f"[lock]\ntimeout_s = {value}\n")
    with pytest.raises(ConfigError, match="lock.timeout_s"):
        load_settings(cfg, {"workspace": str(workspace)})
    err = _one_line(_cli("index", "--config", str(cfg), "-w", str(workspace), "--provider", "none"), 2)
    assert "timeout_s" in err


def test_what_a_statement_returns_is_checked_once_and_named():
    """store.value_of / int_of / blob_of (typed reads of apsw's untyped rows): an aggregate's value,
    an integer, a vector's bytes; anything else is a named error, never a TypeError further on."""
    from memory_core.errors import IndexDamagedError
    from memory_core.storage.store import blob_of, int_of, value_of

    conn = apsw.Connection(":memory:")
    try:
        assert int_of(conn, "SELECT count(*) FROM (SELECT 1 UNION SELECT 2)") == 2
        assert value_of(conn, "SELECT max(x) FROM (SELECT 1 AS x WHERE ?)", (0,)) is None
        with pytest.raises(apsw.SQLError, match="not an integer"):
            int_of(conn, "SELECT 'x'")
        with pytest.raises(apsw.SQLError, match="no row"):
            value_of(conn, "SELECT 1 WHERE 0")
    finally:
        conn.close()
    assert blob_of(b"\0\0\0\0") == b"\0\0\0\0"
    with pytest.raises(IndexDamagedError, match="not a BLOB"):
        blob_of("0.5,0.5")


# -- 12. a total retry budget per run --------------------------------------------------------------

def test_a_retry_after_longer_than_the_budget_fails_at_once_and_says_so(workspace, openai_fake):
    from memory_core.errors import ProviderError
    from tests.conftest import openai_settings

    s = openai_settings(workspace, openai_fake)
    openai_fake.fail_next(None, 429, retry_after=3600)
    with pytest.raises(ProviderError) as exc:
        run_index(s)
    msg = str(exc.value)
    assert "asked to wait 3600 s" in msg and "retry budget is spent" in msg
    assert "waited 0.0 s for retries in this run" in msg and "remote.retry_budget_s = 600" in msg
    assert openai_fake.embed_requests <= 4  # one per concurrent request, none retried: nothing slept


def test_the_budget_is_shared_by_every_request_of_a_run(workspace, openai_fake, caplog):
    from memory_core.errors import ProviderError
    from tests.conftest import openai_settings

    s = openai_settings(workspace, openai_fake, remote={"retry_budget_s": 0.5, "max_attempts": 20,
                                                        "max_inputs_per_request": 4})
    openai_fake.fail_next(None, 429, retry_after=0.2)
    with pytest.raises(ProviderError) as exc:
        run_index(s, concurrency=1)
    msg = str(exc.value)
    assert "retry budget is spent" in msg
    waited = float(msg.split("waited ")[1].split(" s")[0])
    assert 0.4 <= waited <= 0.5  # two 0.2 s waits fit in 0.5 s, a third does not
    assert len([r for r in caplog.records if "; retry " in r.getMessage()]) == 2  # over all requests
    assert not s.index_file.exists()


def test_the_retry_budget_unit():
    from memory_core.embeddings.retry import Retryable, RetryBudget, call_with_retries

    slept: list[float] = []
    budget = RetryBudget(1.0)
    calls = iter([Retryable("busy"), Retryable("busy"), "ok"])

    def fn() -> str:
        r = next(calls)
        if isinstance(r, Exception):
            raise r
        return r

    assert call_with_retries(fn, provider="p", max_attempts=5, initial_s=0.6, max_s=0.6, sleep=slept.append,
                             budget=budget) == "ok"
    assert len(slept) == 2 and slept[1] < 0.6 and sum(slept) == pytest.approx(1.0)  # the second wait was shortened
    budget.reset()
    assert budget.waited_s == 0


# -- 5. names that are not UTF-8 ------------------------------------------------------------------

def test_files_named_in_latin1_are_skipped_with_a_warning_and_the_rest_is_indexed(workspace, openai_fake):
    from tests.conftest import openai_settings

    mem = os.fsencode(workspace / "memory")
    with open(mem + b"/caf\xe9.md", "w") as fh:
        fh.write("# cafe\nA note with a Latin-1 name.\n")
    os.makedirs(mem + b"/d\xe9p")
    with open(mem + b"/d\xe9p/inner.md", "w") as fh:
        fh.write("# inner\n")
    with open(os.fsencode(workspace / "sessions") + b"/s\xe9.jsonl", "w") as fh:
        fh.write("{}\n")
    s = openai_settings(workspace, openai_fake, sources=["memory", "sessions"])
    for full in (False, True):
        summary = run_index(s, full=full)
        assert summary.swapped or not full
        skipped = [w for w in summary.warnings if "not valid UTF-8" in w]
        assert len(skipped) == 3 and any("caf\\xe9.md" in w for w in skipped)
    with Searcher(s) as searcher:
        assert searcher.search("postgres replication", min_score=0)


def test_a_workspace_whose_name_is_not_utf8_is_indexed(tmp_path):
    ws = os.fsencode(tmp_path) + b"/w\xe9s"
    os.makedirs(ws + b"/memory")
    with open(ws + b"/MEMORY.md", "w") as fh:
        fh.write("# hello\nA workspace whose folder name is Latin-1 about capybaras.\n")
    s = _none(Path(os.fsdecode(ws)))
    assert run_index(s).swapped and run_index(s, full=True).swapped
    with Searcher(s) as searcher:
        assert searcher.search("capybaras", min_score=0)
        assert "capybaras" in searcher.read_file("MEMORY.md").text


# -- 7. get never leaves the sources and never hangs ------------------------------------------------

def _indexed_with_sub(ws: Path) -> object:
    sub = ws / "memory" / "sub"
    sub.mkdir(parents=True, exist_ok=True)
    (sub / "notes.md").write_text("# inside\nthe real note\n")
    s = _none(ws)
    run_index(s)
    return s


def test_get_does_not_follow_a_folder_replaced_by_a_symlink(workspace, tmp_path):
    s = _indexed_with_sub(workspace)
    outside = tmp_path / "outside"
    (outside / "sub").mkdir(parents=True)
    (outside / "sub" / "notes.md").write_text("# outside\nSECRET from outside the workspace\n")
    mem = workspace / "memory"
    mem.rename(workspace / "memory-moved")
    mem.symlink_to(outside)
    with Searcher(s) as searcher, pytest.raises(PathError, match="symlink"):
        searcher.read_file("memory/sub/notes.md")
    proc = _cli("get", "-w", str(workspace), "memory/sub/notes.md")
    err = _one_line(proc, 2)
    assert "SECRET" not in proc.stdout + err


def test_get_refuses_a_symlinked_file_and_a_symlinked_inner_folder(workspace, tmp_path):
    s = _indexed_with_sub(workspace)
    (tmp_path / "o").mkdir()
    (tmp_path / "o" / "notes.md").write_text("outside\n")
    sub = workspace / "memory" / "sub"
    (sub / "notes.md").unlink()
    (sub / "notes.md").symlink_to(tmp_path / "o" / "notes.md")
    with Searcher(s) as searcher, pytest.raises(PathError):
        searcher.read_file("memory/sub/notes.md")
    sub.rename(workspace / "memory" / "sub2")
    sub.symlink_to(tmp_path / "o")
    with Searcher(s) as searcher, pytest.raises(PathError):
        searcher.read_file("memory/sub/notes.md")


@pytest.mark.parametrize("source", ["memory", "sessions"])
def test_get_on_a_fifo_returns_an_error_at_once(workspace, tmp_path, source):
    (workspace / "memory" / "sub").mkdir()
    (workspace / "memory" / "sub" / "notes.md").write_text("# inside\nthe real note\n")
    cfg = tmp_path / "memory-core.toml"
    cfg.write_text('provider = "none"\nsources = ["memory", "sessions"]\n')
    run_index(load_settings(cfg, {"workspace": str(workspace)}))
    rel = "memory/sub/notes.md" if source == "memory" else "sessions/2026-10-21-ingest-502-debug.jsonl"
    (workspace / rel).unlink()
    os.mkfifo(workspace / rel)
    # in a child with a timeout: a blocking open would hang the test run, not fail it
    proc = _cli("get", "--config", str(cfg), "-w", str(workspace), rel, timeout=60)
    assert "regular file" in _one_line(proc, 2)


def test_get_still_reads_ordinary_files_and_extra_paths(workspace, tmp_path):
    extra = tmp_path / "extra"
    (extra / "deep").mkdir(parents=True)
    (extra / "deep" / "x.md").write_text("# extra\nfrom an extra path\n")
    s = load_settings(None, {"workspace": str(workspace), "provider": "none", "extra_paths": [str(extra)]})
    run_index(s)
    with Searcher(s) as searcher:
        assert "from an extra path" in searcher.read_file(str(extra / "deep" / "x.md")).text
        assert searcher.read_file("MEMORY.md").lines > 0


@pytest.mark.parametrize("source", ["memory", "sessions"])
def test_get_of_no_lines_closes_the_file_it_opened(workspace, tmp_path, source):
    """`get` of zero lines (``lines=0`` or less) opened the transcript and
    never closed it: session_text_for_range was handed a file descriptor typed as a path (mypy) and
    returned early for an empty range before opening it, so each such call leaked one descriptor
    until the process ran out of them (an MCP client calling ``memory_get`` in a loop)."""
    cfg = tmp_path / "memory-core.toml"
    cfg.write_text('provider = "none"\nsources = ["memory", "sessions"]\n')
    s = load_settings(cfg, {"workspace": str(workspace)})
    run_index(s)
    rel = "MEMORY.md" if source == "memory" else "sessions/2026-10-21-ingest-502-debug.jsonl"
    with Searcher(s) as searcher:
        assert searcher.read_file(rel, 1, 5).lines > 0  # the index opened, the file readable
        before = len(os.listdir("/proc/self/fd"))
        for _ in range(20):
            got = searcher.read_file(rel, 3, 0)
            assert (got.text, got.lines) == ("", 0)
            assert searcher.read_file(rel, 1, -3).lines == 0
        assert len(os.listdir("/proc/self/fd")) == before


# -- 11. MCP stdio: every request gets a reply --------------------------------------------------------

@pytest.mark.timeout(120)
def test_mcp_stdio_answers_a_query_holding_a_lone_surrogate(workspace):
    import json

    run_index(_none(workspace))
    lines = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
         "params": {"name": "memory_search", "arguments": {"query": "postgres \ud800 replication", "min_score": 0}}},
        {"jsonrpc": "2.0", "id": 3, "method": "tools/call",
         "params": {"name": "memory_get", "arguments": {"path": "memory/\udc80.md"}}},
    ]
    proc = subprocess.Popen([sys.executable, "-m", "memory_core.apps.cli", "mcp", "-w", str(workspace)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, PYTHONPATH=str(ROOT)))
    replies: dict[int, dict] = {}
    try:
        assert proc.stdin is not None and proc.stdout is not None
        for msg in lines:  # json.dumps writes the lone surrogates as \ud800 escapes, as a client would
            proc.stdin.write(json.dumps(msg) + "\n")
            proc.stdin.flush()
            if "id" in msg:
                reply = json.loads(proc.stdout.readline())  # a missing reply would block: the timeout below
                replies[reply["id"]] = reply
    finally:
        proc.stdin.close()  # type: ignore[union-attr]
        proc.wait(timeout=60)
    assert set(replies) == {1, 2, 3}
    assert not replies[2]["result"]["isError"] and json.loads(replies[2]["result"]["content"][0]["text"])["results"]
    assert replies[3]["result"]["isError"]  # not an indexed file: an error, but a reply


# -- docs/reliability.md: every claim names a test that exists ------------------------------------

def test_every_test_named_in_reliability_md_exists():
    import re

    doc = (ROOT / "docs" / "reliability.md").read_text(encoding="utf-8")
    named: list[tuple[str, str]] = []
    for line in doc.splitlines():
        current = None
        for m in re.finditer(r"`(test_\w+\.py)?(?:::(\w+))?`", line):
            file, func = m.group(1), m.group(2)
            current = file or current
            if current is None:
                continue
            assert (ROOT / "tests" / current).exists(), current
            if func:
                named.append((current, func))
    assert len(named) > 40
    for file, func in named:
        src = (ROOT / "tests" / file).read_text(encoding="utf-8")
        assert re.search(rf"^(async )?def {func}\(", src, re.M), f"{file}::{func} named in docs/reliability.md"


def test_readers_do_not_follow_a_sessions_folder_replaced_by_a_symlink(workspace, tmp_path):
    """issue 22 #2: indexing refuses a symlinked sessions folder, but `get`, `memory_get` and
    the dates of search results opened it as configured and read transcripts outside."""
    cfg = tmp_path / "memory-core.toml"
    cfg.write_text('provider = "none"\nsources = ["memory", "sessions"]\n')
    s = load_settings(cfg, {"workspace": str(workspace)})
    run_index(s)
    name = "2026-10-21-ingest-502-debug.jsonl"
    outside = tmp_path / "outside"
    outside.mkdir()
    text = (workspace / "sessions" / name).read_text()
    (outside / name).write_text(text.replace("2026-10-21T", "2001-02-03T").replace("rolled back", "SECRETOUTSIDE"))
    (workspace / "sessions").rename(workspace / "sessions-moved")
    (workspace / "sessions").symlink_to(outside)
    with Searcher(s) as searcher:
        with pytest.raises(PathError, match="symlink"):
            searcher.read_file(f"sessions/{name}#L1-L5")
        hits = [r for r in searcher.search("ingest-gateway 502 deploy", min_score=0, sources=["sessions"])]
        assert hits and not [r for r in hits if (r.date or "").startswith("2001")]
    proc = _cli("get", "-c", str(cfg), "-w", str(workspace), f"sessions/{name}")
    err = _one_line(proc, 2)
    assert "SECRETOUTSIDE" not in proc.stdout + err and "symlink" in err


def test_a_transcript_line_of_hundreds_of_megabytes_is_never_held_by_get_or_search(workspace, tmp_path):
    """issue 22 #8: a transcript with one 1 GB line made each search or get touching it use 3.2 GB.
    Readers read lines as indexing does: a line over the cap is drained, never held."""
    cfg = tmp_path / "memory-core.toml"
    cfg.write_text('provider = "none"\nsources = ["memory", "sessions"]\n')
    big = workspace / "sessions" / "big.jsonl"
    msg = ('{"type": "message", "timestamp": "2026-05-02T11:00:00Z", "message": {"role": "user",'
           ' "content": "the narwhal rollout checklist"}}\n')
    with open(big, "w") as fh:
        fh.write(msg)
        fh.write('{"type": "message", "timestamp": "2026-05-02T11:01:00Z", "x": "')
        chunk = "a" * (1 << 20)
        for _ in range(300):
            fh.write(chunk)
        fh.write('"}\n')
        fh.write(msg.replace("narwhal", "narwhal second"))
    run_index(load_settings(cfg, {"workspace": str(workspace)}))
    code = ("from memory_core.config import load_settings\n"
            "from memory_core.query.search import Searcher\n"
            f"s = load_settings({str(cfg)!r}, {{'workspace': {str(workspace)!r}}})\n"
            "with Searcher(s) as se:\n"
            "    hits = se.search('narwhal rollout checklist', min_score=0, sources=['sessions'])\n"
            "    mine = [h for h in hits if h.path == 'sessions/big.jsonl']\n"
            "    assert mine and all(h.date.startswith('2026-05-02') for h in mine), hits\n"
            "    text = se.read_file('sessions/big.jsonl#L1-L3').text\n"
            "    assert 'narwhal rollout' in text and 'narwhal second' in text, text[:200]\n"
            # VmHWM: this process's own peak (ru_maxrss carries the parent's across fork and exec)
            "print(next(int(x.split()[1]) for x in open('/proc/self/status') if x.startswith('VmHWM')) // 1024)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert int(proc.stdout.split()[-1]) < 250, proc.stdout  # MiB; the line alone is 300 MiB


def test_bare_cr_and_u2028_number_lines_as_the_chunker_does(workspace):
    """issue 22 #9: `get` split lines on a bare CR (text mode's universal newlines) while the
    chunker splits on "\\n" only, so citations after such a line read the wrong line."""
    note = workspace / "memory" / "projects" / "crlf.md"
    note.parent.mkdir(parents=True, exist_ok=True)
    note.write_bytes("# Old Mac note\rwith a bare CR\r\rmore\n"
                     "a line with \u2028 a line separator\n"
                     "\n"
                     "the ocelot rollout is on Thursday\n".encode())
    s = load_settings(None, {"workspace": str(workspace), "provider": "none", "chunking": {"tokens": 8,
                                                                                           "overlap": 0}})
    run_index(s)
    with Searcher(s) as searcher:
        hits = [h for h in searcher.search("ocelot rollout Thursday", min_score=0) if h.path.endswith("crlf.md")]
        assert hits
        got = searcher.read_file(hits[0].citation)
        assert "ocelot rollout" in got.text, (hits[0].citation, got)
        assert searcher.read_file("memory/projects/crlf.md#L4").text == "the ocelot rollout is on Thursday"
        assert searcher.read_file("memory/projects/crlf.md#L1").text.count("\r") == 3
