"""``status`` says when a re-embed of the index is pending (docs/reliability.md, the fortieth session's
G2 left this): a ``memory-core index --re-embed`` that failed or was killed records in the cache file
that the re-embed is under way, and the next run continues it; ``status`` (CLI text, ``--json``,
MCP ``memory_status``) now says so until a run publishes it, and reads the cache file only where
there is one (no cache file, -wal or -shm made by asking).

Real parts: the official OpenAI SDK against the fake server on 127.0.0.1, the CLI in a subprocess,
real SQLite indexes and caches.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

from memory_core.api import Memory
from memory_core.config import load_settings
from tests.test_same_vector_provider import DIMS, _cli, _FailsAfter, _index, _poisoned

PENDING = re.compile(r"re_embed_pending: a re-embed begun (\d{4}-\d\d-\d\d \d\d:\d\d UTC) has not finished: the next"
                     r" run continues it")


def _status(ws: Path, cfg: Path, *flags: str) -> str:
    r = _cli("status", "-w", ws, "--config", cfg, *flags)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_status_says_a_failed_re_embed_is_pending_until_a_run_finishes_it(tmp_path: Path) -> None:
    with _FailsAfter(dims=DIMS) as srv:
        ws, cfg = _poisoned(tmp_path, srv)
        assert "re_embed_pending:" not in _status(ws, cfg)
        assert json.loads(_status(ws, cfg, "--json"))["re_embed_pending"] is None
        srv.answers = 3  # the provider fails the re-embed halfway
        r = _index(ws, cfg, "--re-embed")
        assert r.returncode == 1 and "Input is not allowed" in r.stderr, r.stderr
        text = _status(ws, cfg)
        said = PENDING.search(text)
        assert said, text
        st = json.loads(_status(ws, cfg, "--json"))
        assert st["re_embed_pending"] == said[1]
        assert st["re_embed_pending_note"].startswith(f"a re-embed begun {said[1]} has not finished")
        with Memory(load_settings(cfg, {"workspace": str(ws)}), refresh=False) as memory:  # the typed field (MCP's memory_status too)
            assert memory.status().re_embed_pending == said[1]
        srv.answers = None
        again = _index(ws, cfg)  # a plain run continues it and publishes
        assert again.returncode == 0, again.stderr
        assert f"continuing the re-embed begun {said[1]}" in again.stdout + again.stderr
    assert "re_embed_pending" not in _status(ws, cfg)
    assert json.loads(_status(ws, cfg, "--json"))["re_embed_pending"] is None


def test_status_makes_no_cache_file_wal_or_shm(tmp_path: Path) -> None:
    """``status`` asks the cache file about a pending re-embed only through the check the run
    makes (memory_core.storage.cache.renewal_pending): where there is no cache file it makes none,
    and a cache file closed cleanly is left without a -wal or -shm."""
    with _FailsAfter(dims=DIMS) as srv:
        ws, cfg = _poisoned(tmp_path, srv)
        srv.answers = 3
        assert _index(ws, cfg, "--re-embed").returncode == 1
    cache = ws / ".memory-core" / "index.cache.sqlite"
    side = [Path(f"{cache}{x}") for x in ("-wal", "-shm")]
    assert cache.exists() and not any(p.exists() for p in side)
    assert PENDING.search(_status(ws, cfg))
    assert json.loads(_status(ws, cfg, "--json"))["re_embed_pending"]
    assert not any(p.exists() for p in side), [p for p in side if p.exists()]
    shutil.move(cache, tmp_path / "kept.sqlite")
    st = json.loads(_status(ws, cfg, "--json"))
    assert st["re_embed_pending"] is None and st["cache_entries"] is None
    assert "re_embed_pending:" not in _status(ws, cfg)
    assert not cache.exists() and not any(p.exists() for p in side)
    assert not list(cache.parent.glob("index.cache.sqlite*"))
