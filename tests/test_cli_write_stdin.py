"""``memory-core write -`` reads stdin only up to the write's limit (audit N5): an endless or huge
stdin (a runaway producer, ``/dev/zero``) was read whole into memory before the size check."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from pathlib import Path

from memory_core.notes.write import MAX_WRITE_CHARS
from tests.conftest import ROOT

TOTAL = 16 * 1024 * 1024  # far more than the limit, the pipe's buffer and any read-ahead together


def _write_stdin(ws: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "memory_core.apps.cli", "write", "-w", str(ws), "--no-index", "-"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=dict(os.environ, PYTHONPATH=str(ROOT)))


def test_write_from_stdin_stops_reading_past_the_limit(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    proc = _write_stdin(ws)
    assert proc.stdin is not None
    chunk, sent, broken = b"x" * 65536, 0, False
    try:
        while sent < TOTAL:  # blocks while the pipe is full: goes on only as the CLI reads
            sent += os.write(proc.stdin.fileno(), chunk)
    except BrokenPipeError:  # the CLI exited with the rest unread
        broken = True
    with contextlib.suppress(BrokenPipeError):
        proc.stdin.close()
    assert proc.stdout is not None and proc.stderr is not None
    out, err = proc.stdout.read(), proc.stderr.read()  # a line at most: neither pipe fills
    proc.wait(timeout=120)
    assert broken and sent < TOTAL, (sent, err)
    assert proc.returncode == 2, err
    assert out == b""
    assert err.decode().splitlines() == [
        f"memory-core: error: memory_write takes at most {MAX_WRITE_CHARS} characters at once, not"
        f" {MAX_WRITE_CHARS + 2} or more (stdin was read no further); nothing was written"]
    assert sorted(os.listdir(ws)) == []  # nothing written: no note, no memory/ folder

    # the most that is taken: the limit, and a trailing newline
    done = subprocess.run([sys.executable, "-m", "memory_core.apps.cli", "write", "-w", str(ws), "--no-index", "-",
                           "--path", "MEMORY.md"], input=b"y" * MAX_WRITE_CHARS + b"\n", capture_output=True,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=120)
    assert done.returncode == 0, done.stderr
    assert (ws / "MEMORY.md").read_text() == "y" * MAX_WRITE_CHARS + "\n"
