"""Issue 39: ``prefect deploy --all`` fills an unset ``{{ $VAR }}`` with nothing, without a word.

The shipped prefect.yaml gives the deployments whose parameters come from the environment a
build step (deployments/check_env.py through Prefect's own ``run_shell_script``, which
``prefect deploy`` runs for each deployment before registering it): each unset variable is
warned of at deploy time, naming the deployments it empties; set, nothing is said. Run here
through Prefect's step runner (``run_steps``) on the file's own steps, as ``prefect deploy`` runs
them, from the repository root. The step runner opens a Prefect client to resolve block
references, so it is pointed at the session's shared server: with no API URL it would start an
ephemeral server of its own for each build, whose 20 s startup limit a loaded 2-core machine missed.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.prefect_server import PrefectServer

ROOT = Path(__file__).resolve().parents[1]
PREFECT_FILE = ROOT / "deployments" / "prefect.yaml"

RUN = """
import asyncio, sys, yaml
from prefect.deployments.steps.core import run_steps
doc = yaml.safe_load(open(sys.argv[1]))
for dep in doc["deployments"]:
    print("=== " + dep["name"], file=sys.stderr, flush=True)
    asyncio.run(run_steps(dep.get("build") or []))
    sys.stderr.flush()
"""


def _deployments() -> dict[str, dict[str, object]]:
    doc = yaml.safe_load(PREFECT_FILE.read_text())
    return {d["name"]: d for d in doc["deployments"]}


def _build_all(env: dict[str, str]) -> dict[str, list[str]]:
    """Each deployment's warnings when ``prefect deploy --all`` runs its build steps in ``env``."""
    res = subprocess.run([sys.executable, "-c", RUN, str(PREFECT_FILE)], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr  # warnings: a worker that sets the variable still works
    out: dict[str, list[str]] = {}
    name = ""
    for line in res.stderr.splitlines():
        if line.startswith("=== "):
            name = line[4:]
            out[name] = []
        elif "memory-core: warning" in line:
            out[name].append(line)
    return out


def _env(srv: PrefectServer, home: Path, **overrides: str) -> dict[str, str]:
    env = {k: v for k, v in srv.env().items() if not k.startswith("MEMORY_CORE_")}
    env.update(overrides, PREFECT_HOME=str(home))
    return env


def test_every_deployment_filled_from_the_environment_checks_it_at_deploy_time() -> None:
    deps = _deployments()
    for name, dep in deps.items():
        params = str(dep.get("parameters") or {})
        for var in ("MEMORY_CORE_WORKSPACE", "MEMORY_CORE_CONFIG"):
            if "$" + var in params:
                assert var in str(dep.get("build")), f"{name} fills a parameter from ${var} but never checks it"


@pytest.mark.prefect_server
def test_an_unset_variable_is_warned_of_at_deploy_time(prefect_api: PrefectServer, tmp_path: Path) -> None:
    got = _build_all(_env(prefect_api, tmp_path / "home"))
    assert set(got) == set(_deployments())
    for name, var, param in (("fleet", "MEMORY_CORE_CONFIG", "config_file"),
                             ("incremental", "MEMORY_CORE_WORKSPACE", "workspace"),
                             ("sessions", "MEMORY_CORE_WORKSPACE", "workspace"),
                             ("backfill", "MEMORY_CORE_WORKSPACE", "workspace")):
        assert len(got[name]) == 1, (name, got[name])
        assert f"${var} is not set" in got[name][0] and f"empty {param} parameter" in got[name][0], got[name]
    assert got["agent"] == [] and got["alerts"] == []  # nothing filled from the environment

    got = _build_all(_env(prefect_api, tmp_path / "home", MEMORY_CORE_CONFIG=str(tmp_path / "c.toml"),
                          MEMORY_CORE_WORKSPACE=str(tmp_path)))
    assert all(v == [] for v in got.values()), got
