"""Credentials in ``remote.base_url`` that reached an index or an error (the fortieth session's audit I).

* L1: ``http://user:password@proxy/v1``: the SDK sends ``Authorization: Basic base64(user:password)``;
  a proxy echoing the request's headers in its error showed that base64 form, which decodes to the
  password (only the password itself was a registered secret).
* L2: a token given as the URL's user name (``https://<token>@host``) and Azure Functions'
  ``?code=<key>`` were recorded whole in the index's meta.
"""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from memory_core import secrets
from memory_core.apps.cli import main
from tests.fakes.openai_fake import OpenAIFake

KEY = "sk-proj-AUDITKEY0123456789abcdefXYZ"


def _ws(tmp_path: Path, base_url: str) -> Path:
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    (ws / "MEMORY.md").write_text("# Notes\n\nPostgres replication lag on pg-replica-1.\n")
    (ws / "memory-core.toml").write_text(
        f'provider = "openai"\n[remote]\napi_key = "{KEY}"\nbase_url = "{base_url}"\ndimensions = 16\n'
        "backoff_initial_s = 0.01\nmax_attempts = 1\n")
    return ws


def _every_byte(folder: Path) -> bytes:
    return b"".join(p.read_bytes() for p in folder.rglob("*") if p.is_file())


@pytest.fixture(autouse=True)
def _forget() -> None:
    secrets.forget()


def test_the_basic_credential_a_proxy_echoes_is_masked(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                       caplog: pytest.LogCaptureFixture) -> None:
    password = "ProxyPassw0rd-secret"
    with OpenAIFake(dims=16) as srv:
        ws = _ws(tmp_path, srv.base_url.replace("http://", f"http://proxyuser:{password}@"))
        assert main(["index", "-w", str(ws), "--engine", "local", "--no-progress"]) == 0
        seen = srv.requests_of("embed")[-1].headers.get("authorization")
        basic = base64.b64encode(f"proxyuser:{password}".encode()).decode()
        assert seen == f"Basic {basic}"  # what the SDK sent: the credential the proxy may echo
        (ws / "memory" / "new.md").write_text("a new note\n")
        srv.fail_next(1, status=403, message=f"proxy denied request with headers {{'authorization': '{seen}'}}")
        capsys.readouterr()
        assert main(["index", "-w", str(ws), "--engine", "local", "--no-progress"]) == 1
    said = "".join(capsys.readouterr()) + caplog.text
    assert "proxy denied request" in said
    assert basic not in said and password not in said, said


def test_a_token_as_the_base_urls_user_name_is_not_recorded(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    token = "tok_USERNAMETOKEN12345"
    with OpenAIFake(dims=16) as srv:
        ws = _ws(tmp_path, srv.base_url.replace("http://", f"http://{token}@"))
        assert main(["index", "-w", str(ws), "--engine", "local", "--no-progress"]) == 0
        assert main(["status", "-w", str(ws), "--json"]) == 0
        assert main(["index", "-w", str(ws), "--engine", "local", "--no-progress"]) == 0  # a second run
    out = "".join(capsys.readouterr())
    assert token not in out, out
    assert token.encode() not in _every_byte(ws / ".memory-core")


def test_what_a_base_url_may_show() -> None:
    assert secrets.url_without_password("http://tok_USERNAMETOKEN12345@h/v1") == "http://***@h/v1"
    assert secrets.url_without_password("http://proxyuser:pw-0123456789@h/v1") == "http://proxyuser:***@h/v1"
    assert secrets.url_without_password("https://fn.example/api?code=AZFUNCKEY0123456789&v=2") == \
        "https://fn.example/api?code=***&v=2"
    assert secrets.url_without_password("https://h/v1?encode=json") == "https://h/v1?encode=json"
    assert secrets.url_without_password("http://h:8080/v1") == "http://h:8080/v1"
