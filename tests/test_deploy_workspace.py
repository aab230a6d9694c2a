"""A deployment's run with no workspace (its parameter empty: `$MEMORY_CORE_WORKSPACE` was not set
when it was deployed, and neither the worker's environment nor a config file names one) indexed its
working directory, the checkout `prefect deploy` ran in: an empty index in `<checkout>/.memory-core`,
"0 files", Completed (audit, nineteenth session; docs/deployments.md said such runs fail at once).
It now fails with one message saying what to set, and writes nothing. Real server, real `serve`."""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT
from tests.prefect_server import read_flow_run, shared_server, stop_process
from tests.test_flow_cancel_owner import _delete, _serve

pytestmark = pytest.mark.prefect_server


def test_a_deployment_run_that_names_no_workspace_fails_and_writes_nothing(
        prefect_api: Any, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    from prefect.deployments import run_deployment

    checkout = tmp_path / "checkout"  # where the runs run: `prefect deploy` records its directory
    checkout.mkdir()
    (checkout / "MEMORY.md").write_text("# Not memory\n\na README-like file of the checkout\n")
    name = f"nows-{uuid.uuid4().hex[:8]}"
    env = shared_server(request.config).env(PYTHONPATH=str(ROOT))
    for var in ("MEMORY_CORE_WORKSPACE", "MEMORY_CORE_INDEX", "MEMORY_CORE_CONFIG"):
        env.pop(var, None)
    proc = _serve(tmp_path, env, f"{ROOT}/flows/reindex.py:reindex", name, {"provider": "none"}, cwd=checkout)
    log = tmp_path / f"serve-{name}.log"
    try:
        run_id = run_deployment(f"reindex/{name}", timeout=0).id
        deadline = time.monotonic() + 120
        while not (state := read_flow_run(run_id).state).is_final():
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.3)
    finally:
        stop_process(proc)
        _delete(f"reindex/{name}")
    assert state.is_failed(), (state.type, state.message, log.read_text()[-3000:])
    assert "no workspace: the deployment's workspace parameter is empty" in (state.message or ""), state.message
    assert not (checkout / ".memory-core").exists()  # the checkout was not indexed as memory
