"""The orchestrator plugs in through the ``memory_core.engines`` entry points (memory_core/plugins.py finds it,
memory_core/runtime/engines.py asks it)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from memory_core import plugins
from memory_core.apps.cli import EXIT_USAGE, main
from memory_core.config import load_settings
from memory_core.errors import UsageError
from memory_core.runtime import engines

SERVER = {"PREFECT_API_URL": "http://127.0.0.1:4200/api"}


def _registry(monkeypatch: pytest.MonkeyPatch, table: dict[str, str]) -> None:
    """Stand in for the installed entry points (the engine cache is cleared before and after)."""
    plugins.engine.cache_clear()
    monkeypatch.setattr(plugins, "registered", lambda: dict(table))


@pytest.fixture(autouse=True)
def _fresh_engine_cache() -> Any:
    plugins.engine.cache_clear()
    yield
    plugins.engine.cache_clear()


def test_the_registry_finds_the_prefect_engine_through_its_entry_point() -> None:
    assert engines.registered()["prefect"] == "flows.engine:PrefectEngine"
    found = engines.engine("prefect")
    assert type(found).__name__ == "PrefectEngine" and isinstance(found, engines.Engine)
    assert engines.require_engine(needed_by="test") is found
    assert engines.prefect_api(SERVER) == engines.PrefectApi(SERVER["PREFECT_API_URL"], "$PREFECT_API_URL")
    assert engines.choose_engine("auto", SERVER).engine == "prefect"


@pytest.mark.parametrize("table", [{}, {"prefect": "no_such_module_xyz:Engine"}])
def test_a_missing_engine_is_one_clear_error(monkeypatch: pytest.MonkeyPatch, table: dict[str, str],
                                            workspace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _registry(monkeypatch, table)
    assert engines.engine("prefect") is None
    with pytest.raises(UsageError, match=r"--engine prefect needs the prefect engine, which is not installed"):
        engines.require_engine(needed_by="--engine prefect")
    # `index --engine prefect`: one line, the usage exit code, nothing indexed
    rc = main(["index", "-w", str(workspace), "--provider", "none", "--engine", "prefect", "--no-progress"])
    err = capsys.readouterr().err
    assert rc == EXIT_USAGE and "needs the prefect engine, which is not installed" in err, err
    assert not (workspace / ".memory-core" / "index.sqlite").exists()
    # `watch --deployment`
    from memory_core.apps.watch import make_runner
    from memory_core.index.indexer import Indexer

    settings = load_settings(None, {"workspace": str(workspace), "provider": "none"})
    with pytest.raises(UsageError, match="watch --deployment needs the prefect engine"):
        make_runner(settings, deployment="nightly", env=SERVER)
    assert isinstance(make_runner(settings, env=SERVER), Indexer)
    # auto runs in-process even with a server configured; `status` says why
    choice = engines.choose_engine("auto", SERVER)
    assert choice.engine == "local" and "runs in-process" in choice.reason
    assert "no Prefect engine is installed" in engines.choose_engine("prefect", SERVER).reason
    # events are skipped without a word
    monkeypatch.setenv("PREFECT_API_URL", SERVER["PREFECT_API_URL"])
    engines.emit_event_if_configured("memory-core.test", workspace / "i.sqlite", {})


def test_events_go_to_the_engine_only_when_an_api_is_configured(monkeypatch: pytest.MonkeyPatch) -> None:
    sent: list[tuple[str, str]] = []

    class Fake:
        def emit_event(self, event: str, resource_id: str, payload: dict[str, object]) -> None:
            sent.append((event, resource_id))
            raise RuntimeError("best effort")  # never reaches the caller

    monkeypatch.setattr(plugins, "engine", lambda name="prefect": Fake())
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    engines.emit_event_if_configured("e", "/x/i.sqlite", {})
    assert sent == []
    monkeypatch.setenv("PREFECT_API_URL", SERVER["PREFECT_API_URL"])
    engines.emit_event_if_configured("e", "/x/i.sqlite", {})
    assert sent == [("e", "memory-core.index./x/i.sqlite")]


@pytest.mark.prefect_server
def test_the_flow_runs_on_the_settings_the_cli_resolved(request: pytest.FixtureRequest, workspace: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Settings are resolved once per run: the engine hands the flow the caller's Settings, and the
    flow does not resolve them again from its parameters (which still record what it was told)."""
    from flows.reindex import ReindexParams
    from tests.prefect_server import drain_workers, shared_server

    def again(self: ReindexParams) -> Any:
        raise AssertionError("the flow resolved the settings again")

    monkeypatch.setattr(ReindexParams, "to_settings", again)
    settings = load_settings(None, {"workspace": str(workspace), "provider": "none"})
    with shared_server(request.config).settings():
        summary = engines.require_engine(needed_by="test").run_reindex(
            settings, config_file=None, told={"provider": "none"}, full=False)
        drain_workers()
    assert summary.swapped and summary.full
