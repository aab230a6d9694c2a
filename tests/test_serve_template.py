"""deployments/serve.py serves the parameters `prefect deploy` would store: every ``{{ $VAR }}`` of
deployments/prefect.yaml filled from the environment, empty when the variable is unset (its
warning says so). It served ``config_file: "{{ $MEMORY_CORE_CONFIG }}"`` as written, and each
fleet run failed with ``config file not found: {{ $MEMORY_CORE_CONFIG }}`` (the UI showed the
template too).

No server: the RunnerDeployments serve.py builds (and would register) are inspected; the slow
test_deployments.py::test_serve_script_serves_the_same_deployments serves them for real.
"""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from tests.conftest import ROOT

SERVE = ROOT / "deployments" / "serve.py"


@pytest.fixture
def serve(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> ModuleType:
    monkeypatch.chdir(ROOT)  # prefect.yaml's entrypoints are relative to the repository root
    monkeypatch.setenv("MEMORY_CORE_WORKSPACE", str(tmp_path / "agent"))
    monkeypatch.delenv("MEMORY_CORE_CONFIG", raising=False)
    spec = importlib.util.spec_from_file_location("memory_core_serve_script", SERVE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _served(serve: ModuleType) -> dict[str, Any]:
    """name -> the RunnerDeployment serve.py would register."""
    return {d.name: d for d in (serve.to_deployment(s) for s in serve.load_specs())}


def _as_prefect_deploy_stores(value: Any) -> Any:
    """What `prefect deploy` stores for a value of prefect.yaml: its two templating passes
    (prefect/cli/deploy/_core.py: the environment, keeping what is not set; then the steps'
    outputs, which empties an unset ``{{ $VAR }}``)."""
    from prefect.utilities.templating import apply_values

    first = apply_values(value, dict(os.environ), remove_notset=False)
    return apply_values(first, {}, skip_prefixes=["ctx."])


def test_an_unset_variable_leaves_its_parameters_empty(serve: ModuleType, tmp_path: Path) -> None:
    served = _served(serve)
    raw = {d["name"]: d for d in yaml.safe_load(SERVE.with_name("prefect.yaml").read_text())["deployments"]}
    assert set(served) == set(raw)
    for name, dep in served.items():
        assert "{{ $" not in json.dumps(dep.parameters), (name, dep.parameters)
        # the same parameters as a deployment made by `prefect deploy --all` in this environment
        assert dep.parameters == _as_prefect_deploy_stores(raw[name].get("parameters") or {}), name
    fleet = served["fleet"].parameters
    assert fleet["config_file"] == "" and fleet["deployment"] == "reindex/agent"
    for name in ("incremental", "sessions", "backfill"):
        assert served[name].parameters["workspace"] == str(tmp_path / "agent")
    # the placeholders that are not the environment's are the automations', filled per event
    fallback = next(t for t in served["alerts"].triggers if t.parameters.get("kind") == "fallback")
    assert fallback.parameters["index"] == "{{ event.resource.id }}"
    assert fallback.parameters["detail"] == "{{ event.event }}: {{ event.payload.reason }}"
    # the warning names what is unset among the deployments served, and only that
    assert serve.unset_placeholders() == ["MEMORY_CORE_CONFIG"]
    assert serve.unset_placeholders(only=["incremental", "alerts"]) == []


def test_a_set_variable_is_the_parameter(serve: ModuleType, monkeypatch: pytest.MonkeyPatch,
                                         tmp_path: Path) -> None:
    cfg = tmp_path / "fleet {{ x }}.toml"  # a value is never read as a template itself
    monkeypatch.setenv("MEMORY_CORE_CONFIG", str(cfg))
    assert serve.to_deployment(serve.load_specs(only=["fleet"])[0]).parameters["config_file"] == str(cfg)
    assert serve.unset_placeholders() == []


def test_serve_warns_of_an_unset_variable_and_serves_it_empty(serve: ModuleType, monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """main(): the warning, then the deployments handed to `prefect.serve` (not started here)."""
    import prefect

    handed: list[Any] = []
    monkeypatch.setattr(serve, "check_conflicts", lambda deployments, replace: [])
    monkeypatch.setattr(prefect, "serve", lambda *deployments, limit: handed.extend(deployments))
    assert serve.main(["--only", "fleet"]) == 0
    err = capsys.readouterr().err
    assert "warning: MEMORY_CORE_CONFIG is not set: the parameters that name it are left empty" in err
    assert [d.parameters["config_file"] for d in handed] == [""]
