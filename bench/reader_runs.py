"""What the reader benches (bench.after_change, bench.common_phrases) share: a corpus and index in
a folder of their own or a given one, each reader's phase in a fresh process, the chunk count."""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def in_folder(a: argparse.Namespace, prefix: str, run: Callable[[argparse.Namespace, str], None]) -> None:
    """``run(a, folder)`` in ``a.tmp``, or in a temp folder of its own, removed after (~16 GB at 1M x 1536)."""
    tmp = a.tmp or tempfile.mkdtemp(prefix=prefix)
    try:
        run(a, tmp)
    finally:
        if not a.tmp:
            shutil.rmtree(tmp, ignore_errors=True)


def ensure_index(tmp: str, chunks: int, dims: int) -> None:
    """The scale bench's corpus of about ``chunks`` chunks and its index in ``tmp``, unless made already."""
    from bench.corpus import generate
    from bench.scale import CHUNKS_PER_FILE, phase_build

    if not Path(tmp, "index.sqlite").exists():
        generate(Path(tmp, "ws"), max(1, round(chunks / CHUNKS_PER_FILE)))
        phase_build(tmp + "/ws", tmp + "/index.sqlite", dims, True)


def phase(module: str, args: dict[str, Any]) -> dict[str, Any]:
    """``python -m <module> --phase <args as JSON>`` in a fresh process: its last line, as JSON."""
    p = subprocess.run([sys.executable, "-m", module, "--phase", json.dumps(args)], cwd=ROOT,
                       capture_output=True, text=True, check=False)
    if p.returncode:
        raise SystemExit(p.stderr[-3000:])
    out: dict[str, Any] = json.loads(p.stdout.strip().splitlines()[-1])
    return out


def chunk_count(tmp: str) -> int:
    from memory_core.storage.store import connect_reader, int_of

    conn = connect_reader(Path(tmp, "index.sqlite"))
    try:
        return int_of(conn, "SELECT count(*) FROM chunks")
    finally:
        conn.close()


def arguments(doc: str | None, queries: int) -> argparse.ArgumentParser:
    """The options both reader benches take (each adds its own)."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--chunks", type=int, default=200000)
    ap.add_argument("--dims", type=int, default=1536)
    ap.add_argument("--queries", type=int, default=queries)
    ap.add_argument("--tmp", help="where the corpus and index are (made if missing)")
    ap.add_argument("--label", default="run")
    ap.add_argument("--phase", help=argparse.SUPPRESS)
    return ap
