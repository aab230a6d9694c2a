"""A stop (Ctrl-C, SIGTERM) that comes once an export has published says so (docs/reliability.md,
"A stop lost on the way", E1 and E2): the real CLI in a subprocess, which sends itself the signal
at the moment under test, and the export folder or file as the stop left it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from memory_core.apps.cli import main
from memory_core.config import load_settings
from memory_core.index.pipeline import run_index

# STOP_SIG: INT or TERM; STOP_AT: where the process sends it to itself
STOPPING_CLI = """
import os, signal, sys, time
signal.signal(signal.SIGINT, signal.default_int_handler)  # a background process may inherit SIGINT ignored
sig = getattr(signal, "SIG" + os.environ["STOP_SIG"])
at = os.environ["STOP_AT"]
fired = []

def stop():
    fired.append(1)
    os.kill(os.getpid(), sig)
    time.sleep(0.05)

_rename, _replace = os.rename, os.replace

def rename(src, dst, *a, **k):  # the swap's rename of the staged terms table into place
    if at == "swap" and not fired and str(dst).endswith("terms.lance") and ".export-" in str(src):
        stop()
    return _rename(src, dst, *a, **k)

def replace(src, dst, *a, **k):  # the file export's replace of its output, then the stop
    out = _replace(src, dst, *a, **k)
    if at == "replace" and not fired and ".tmp-" in str(src):
        stop()
    return out

os.rename, os.replace = rename, replace
import memory_core.export.lancedb as ldb
_swap = ldb._swap

def swap(*a, **k):
    if at == "before-swap":
        stop()
    out = _swap(*a, **k)
    if at == "after-swap":  # the export goes on to measure the folder
        stop()
    return out

ldb._swap = swap
from memory_core.apps.cli import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    """A keyword-only workspace (provider none) with its index built."""
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    (ws / "memory" / "plan.md").write_text("# Plan\n\nWe will migrate the billing service to Kubernetes next sprint.\n")
    (ws / "memory-core.toml").write_text('provider = "none"\n')
    run_index(load_settings(None, {"workspace": str(ws), "provider": "none"}))
    return ws


def new_note(ws: Path) -> None:
    """A note written after the first export, and indexed: the next export carries it."""
    (ws / "memory" / "zebra.md").write_text("# Zebra\n\nThe zebrafish tank pump is serviced quarterly.\n")
    run_index(load_settings(None, {"workspace": str(ws), "provider": "none"}))


def stopped(args: list[str], sig: str, at: str, tmp_path: Path) -> tuple[int, str]:
    """``memory-core ARGS``, which sends itself SIG``sig`` at ``at``: its exit status and last stderr line."""
    script = tmp_path / "stopping_cli.py"
    script.write_text(STOPPING_CLI)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1]), "STOP_SIG": sig, "STOP_AT": at}
    env.pop("MEMORY_CORE_DEBUG", None)
    proc = subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, env=env,
                          timeout=300, stdin=subprocess.DEVNULL)
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.strip().splitlines()
    return proc.returncode, lines[-1] if lines else ""


def export_ids(uri: str) -> list[str]:
    """The export ids of the folder's chunks and terms tables."""
    import lancedb

    from memory_core.storage.lancedb import EXPORT_ID

    db = lancedb.connect(uri)
    return [(db.open_table(n).schema.metadata or {})[EXPORT_ID.encode()].decode() for n in ("chunks", "terms")]


def chunk_paths(uri: str) -> set[str]:
    import lancedb

    return set(lancedb.connect(uri).open_table("chunks").to_arrow().column("path").to_pylist())


STOP_LINE = {"INT": (130, "memory-core: interrupted after "), "TERM": (1, "memory-core: stopped by SIGTERM after ")}


@pytest.mark.parametrize("at", ["swap", "after-swap"])
@pytest.mark.parametrize("sig", ["INT", "TERM"])
def test_e1_a_stop_once_the_lancedb_swap_published_says_the_new_export_is_live(ws: Path, tmp_path: Path, sig: str,
                                                                               at: str) -> None:
    uri = str(tmp_path / "lx")
    assert main(["export", "-w", str(ws), "--format", "lancedb", uri]) == 0
    first = export_ids(uri)
    new_note(ws)
    rc, last = stopped(["export", "-w", str(ws), uri, "--format", "lancedb"], sig, at, tmp_path)
    code, head = STOP_LINE[sig]
    # before: "interrupted; the live index was left as it was" (130) or
    # "error: stopped by SIGTERM; .../lx was left as it was" (1), the new export live all the same
    assert (rc, last) == (code, f"{head}publishing the export at {uri} (the new export is live)"), last
    ids = export_ids(uri)
    assert ids[0] == ids[1] != first[0]  # both tables of the new export
    assert chunk_paths(uri) == {"memory/plan.md", "memory/zebra.md"}
    # the previous export moved aside and the staging folder: both removed
    assert sorted(p.name for p in Path(uri).iterdir()) == [".export.lock", "chunks.lance", "terms.lance"]


@pytest.mark.parametrize("sig", ["INT", "TERM"])
def test_e1_a_stop_before_the_lancedb_swap_still_leaves_the_export_as_it_was(ws: Path, tmp_path: Path,
                                                                             sig: str) -> None:
    uri = str(tmp_path / "lx")
    assert main(["export", "-w", str(ws), "--format", "lancedb", uri]) == 0
    first = export_ids(uri)
    new_note(ws)
    rc, last = stopped(["export", "-w", str(ws), uri, "--format", "lancedb"], sig, "before-swap", tmp_path)
    want = {"INT": (130, "memory-core: interrupted; the live index was left as it was"),
            "TERM": (1, f"memory-core: error: stopped by SIGTERM; {uri} was left as it was")}
    assert (rc, last) == want[sig], last
    assert export_ids(uri) == first and chunk_paths(uri) == {"memory/plan.md"}
    assert sorted(p.name for p in Path(uri).iterdir()) == [".export.lock", "chunks.lance", "terms.lance"]


@pytest.mark.parametrize("name", ["out.parquet", "out.jsonl"])
@pytest.mark.parametrize("sig", ["INT", "TERM"])
def test_e2_a_stop_once_the_file_export_replaced_its_file_says_so(ws: Path, tmp_path: Path, sig: str,
                                                                  name: str) -> None:
    import pyarrow.parquet as pq

    folder = tmp_path / "exports"
    folder.mkdir()
    out = folder / name
    assert main(["export", "-w", str(ws), str(out)]) == 0
    new_note(ws)
    rc, last = stopped(["export", "-w", str(ws), str(out)], sig, "replace", tmp_path)
    code, head = STOP_LINE[sig]
    # before: "stopped by SIGTERM; .../out.parquet was left as it was" (1) or
    # "interrupted; the live index was left as it was" (130), the file replaced all the same
    assert (rc, last) == (code, f"{head}publishing the export at {out} (the new export is in place)"), last
    if name.endswith(".parquet"):
        paths = set(pq.read_table(out).column("path").to_pylist())
    else:
        import json

        paths = {json.loads(line)["path"] for line in out.read_text().splitlines()}
    assert paths == {"memory/plan.md", "memory/zebra.md"}
    assert [p.name for p in folder.iterdir()] == [name]  # no temp file left
