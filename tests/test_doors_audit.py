"""The doors of a run (CLI flags, the API, flow parameters, the watcher's deployment runs) after an
outside audit: an unnamed run that is an agent gets that agent's isolation check (A1), an empty
workspace or index is refused, not taken for the current folder (A3), the flows refuse an empty
agent as the CLI does (A6), `watch --deployment` hands on the config it resolved (A8), and a base
URL's password is never printed as a "change" (I-H2)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

NO_ENV = ("MEMORY_CORE_CONFIG", "MEMORY_CORE_WORKSPACE", "MEMORY_CORE_INDEX", "MEMORY_CORE_AGENT",
          "MEMORY_CORE_PROVIDER", "MEMORY_CORE_MODEL")


def _cli(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    e = {k: v for k, v in os.environ.items() if k not in NO_ENV}
    e.update({"PYTHONPATH": str(ROOT), **(env or {})})
    return subprocess.run([sys.executable, "-m", "memory_core.apps.cli", *args], capture_output=True, text=True,
                          env=e, timeout=300, cwd=cwd or ROOT)


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in NO_ENV:
        monkeypatch.delenv(var, raising=False)


# -- I-H2: a base URL's password ---------------------------------------------------------------

PASSWORD = "ProxyPassw0rd-secret"


def _password_workspace(tmp_path: Path, base_url: str) -> Path:
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    (ws / "MEMORY.md").write_text("# Notes\n\nPostgres replication lag on pg-replica-1.\n")
    (ws / "memory" / "a.md").write_text("otters sleep holding hands\n")
    url = base_url.replace("http://", f"http://proxyuser:{PASSWORD}@")
    (ws / "memory-core.toml").write_text(f'provider = "openai"\n[remote]\napi_key = "sk-test-key-0123456789"\n'
                                         f'base_url = "{url}"\ndimensions = 16\n')
    return ws


def test_ih2_a_base_url_password_is_no_change_and_never_printed(tmp_path: Path) -> None:
    """The index records the URL masked; each later `index` compared that with the configured URL,
    found a "change" and printed it, password in clear, on stderr."""
    from tests.fakes.openai_fake import OpenAIFake

    with OpenAIFake(dims=16) as srv:
        ws = _password_workspace(tmp_path, srv.base_url)
        first = _cli("index", "-w", str(ws), "--engine", "local")
        assert first.returncode == 0, first.stderr
        second = _cli("index", "-w", str(ws), "--engine", "local")
    assert second.returncode == 0, second.stderr
    assert PASSWORD not in first.stdout + first.stderr + second.stdout + second.stderr
    assert "remote changed" not in second.stderr, second.stderr


def test_ih2_a_change_line_masks_the_base_url_password(tmp_path: Path, clean_env: None) -> None:
    """A real change of the base URL is still said, with its password masked."""
    from memory_core.index.pipeline import run_index
    from memory_core.runtime.resolve import resolve_settings
    from tests.conftest import openai_settings
    from tests.fakes.openai_fake import OpenAIFake

    with OpenAIFake(dims=16) as srv:
        ws = _password_workspace(tmp_path, srv.base_url)
        (ws / "memory-core.toml").unlink()
        run_index(openai_settings(ws, srv, remote={"dimensions": 16}))  # recorded without a password
        moved = srv.base_url.replace("http://", f"http://proxyuser:{PASSWORD}@")
        resolved = resolve_settings({"workspace": str(ws), "provider": "openai", "remote": {
            "api_key": "sk-test-key-0123456789", "base_url": moved, "dimensions": 16}})
    lines = [ch.line() for ch in resolved.changes]
    remote = [line for line in lines if line.startswith("remote changed")]
    assert remote and "proxyuser:***@" in remote[0], lines
    assert not any(PASSWORD in line for line in lines), lines
