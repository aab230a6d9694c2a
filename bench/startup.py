"""Start-up of the ``memory-core`` command against the floor every memory-core process pays.

    python -m bench.startup                          # 11 rounds; prints a Markdown report
    python -m bench.startup --rounds 15 --code before=/tmp/before --code after=. --out bench/results/x.md

The floor is ``python -c "import numpy, apsw"`` (issue 38). Each command is a fresh process of the
venv's ``memory-core`` console script, run with ``PYTHONPATH`` set to one source tree (``--code
LABEL=DIR``, repeatable, default: this checkout), so the code before and after a change is measured
in the same run, under the same load. The commands:

* ``--version``: ``memory-core --version``;
* ``search (keyword-only)``: ``memory-core search -w WS "replication lag"`` on a copy of
  examples/workspace whose ``memory-core.toml`` says ``provider = "none"``, indexed once (with
  ``--engine local``) by the first ``--code`` before the timed rounds: a keyword-only index, so the
  search embeds nothing;
* ``import cli``: ``python -c "import memory_core.apps.cli"``;
* with ``--pieces``: the floor plus ``from pydantic import BaseModel``, plus ``import
  memory_core.config`` (the settings model), plus every module a search imports: what a search's
  time is made of.

Python's ``.pyc`` files are written by one untimed warm-up run of each command into this run's own
folder (``PYTHONPYCACHEPREFIX``), as an installed package has them (``PYTHONDONTWRITEBYTECODE`` is
dropped); ``--no-bytecode`` compiles every module at every start instead, floor included.

A round runs the floor and every (code, command) once, in an order rotated by one each round, so
none always runs first (warm caches) or last. Per round, each command's wall time is divided by
the floor's of that round (a paired ratio: load that varies between rounds cancels out); the report
gives each command's median seconds and the median and spread (min-max) of its paired ratios. The
same for CPU time (user + system of the process, from ``getrusage``), which other processes on a
shared machine disturb much less than wall time.
Targets (issue 38): ``--version`` at most 1.3x, the keyword-only search at most 1.6x.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FLOOR = "floor"
TARGETS = {"--version": 1.3, "search (keyword-only)": 1.6}
QUERY = "replication lag"
PIECES = {  # --pieces: the floor plus one part of a search's imports each
    "floor + pydantic": "from pydantic import BaseModel",
    "floor + settings model": "import memory_core.config",
    "floor + a search's imports": "import memory_core.apps.cli, memory_core.runtime.resolve, memory_core.api,"
                                  " memory_core.query.backends",
}


def _console_script() -> str:
    here = Path(sys.executable).parent / "memory-core"
    found = str(here) if here.exists() else shutil.which("memory-core")
    if not found:
        sys.exit("bench.startup: no memory-core console script beside this Python or on PATH")
    return found


def _workspace(tmp: Path) -> Path:
    ws = tmp / "ws"
    shutil.copytree(ROOT / "examples" / "workspace", ws, ignore=shutil.ignore_patterns(".memory-core"))
    (ws / "memory-core.toml").write_text('provider = "none"\n')
    return ws


def _env(label: str, code: Path, tmp: Path, bytecode: bool) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMORY_CORE_")}
    env.update(PYTHONPATH=str(code), PREFECT_HOME=str(tmp / "prefect-home"), MEMORY_CORE_ENGINE="local")
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    if bytecode:  # each tree's .pyc files, written by the warm-up run, in this run's own folder
        env["PYTHONPYCACHEPREFIX"] = str(tmp / "pycache" / label)
    else:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        env["PYTHONPYCACHEPREFIX"] = str(tmp / "no-pycache")  # an empty folder: every module compiled
    return env


def _time(cmd: list[str], env: dict[str, str], cwd: Path) -> tuple[float, float]:
    """(wall seconds, CPU seconds: user + system) of one run of ``cmd``."""
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run(cmd, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False)
    took = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        sys.exit(f"bench.startup: {' '.join(cmd)} exited {done.returncode}: {done.stderr.decode()[-2000:]}")
    return took, (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.startup", description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=11, help="rounds (each runs every command once; default 11)")
    ap.add_argument("--code", action="append", metavar="LABEL=DIR",
                    help="a source tree to measure (repeatable; default: this checkout, labelled 'this')")
    ap.add_argument("--no-bytecode", dest="bytecode", action="store_false",
                    help="compile every module at every start (PYTHONDONTWRITEBYTECODE=1), floor included; default:"
                         " .pyc files cached as an installed package has them")
    ap.add_argument("--pieces", action="store_true",
                    help="also time the floor plus pydantic, plus the settings model, plus all a search imports"
                         " (with the last --code): what the search's time is made of")
    ap.add_argument("--out", help="also write the report to this file")
    args = ap.parse_args(argv)
    codes: list[tuple[str, Path]] = []
    for item in args.code or [f"this={ROOT}"]:
        label, _, d = item.partition("=")
        if not d or not (Path(d) / "memory_core" / "apps" / "cli.py").exists():
            ap.error(f"--code {item!r}: expected LABEL=DIR with DIR/memory_core/apps/cli.py")
        codes.append((label, Path(d).resolve()))
    script = _console_script()

    with tempfile.TemporaryDirectory(prefix="bench-startup-") as t:
        tmp = Path(t)
        (tmp / "prefect-home").mkdir()
        ws = _workspace(tmp)
        first_env = _env(*codes[0], tmp, args.bytecode)
        build = subprocess.run([script, "index", "-w", str(ws), "--no-progress"], env=first_env, cwd=tmp,
                               capture_output=True, text=True, check=False)
        if build.returncode != 0:
            sys.exit(f"bench.startup: building the keyword-only index failed: {build.stderr[-2000:]}")
        commands: dict[str, list[str]] = {
            "--version": [script, "--version"],
            "search (keyword-only)": [script, "search", "-w", str(ws), QUERY],
            "import cli": [sys.executable, "-c", "import memory_core.apps.cli"],
        }
        runs: list[tuple[str, str, list[str], dict[str, str]]] = [(FLOOR, "", [sys.executable, "-c",
                                                                               "import numpy, apsw"], first_env)]
        for label, code in codes:
            env = _env(label, code, tmp, args.bytecode)
            runs += [(name, label, cmd, env) for name, cmd in commands.items()]
        if args.pieces:  # what the search's time is made of, with the last --code
            label, code = codes[-1]
            env = _env(label, code, tmp, args.bytecode)
            runs += [(name, label, [sys.executable, "-c", f"import numpy, apsw; {stmt}"], env)
                     for name, stmt in PIECES.items()]
        for _, _, cmd, env in runs:  # one untimed warm-up of each: the OS file cache, .pyc files
            _time(cmd, env, tmp)
        secs: dict[tuple[str, str], list[float]] = {(n, lab): [] for n, lab, _, _ in runs}
        cpu: dict[tuple[str, str], list[float]] = {(n, lab): [] for n, lab, _, _ in runs}
        ratios: dict[tuple[str, str], list[float]] = {(n, lab): [] for n, lab, _, _ in runs if n != FLOOR}
        cpu_ratios: dict[tuple[str, str], list[float]] = {key: [] for key in ratios}
        for r in range(args.rounds):
            k = r % len(runs)
            took = {(n, lab): _time(cmd, env, tmp) for n, lab, cmd, env in runs[k:] + runs[:k]}
            floor_wall, floor_cpu = took[(FLOOR, "")]
            for key, (wall, used) in took.items():
                secs[key].append(wall)
                cpu[key].append(used)
                if key in ratios:
                    ratios[key].append(wall / floor_wall)
                    cpu_ratios[key].append(used / floor_cpu)
        build_line = build.stdout.strip().splitlines()[-1] if build.stdout.strip() else ""

    lines = [f"# Start-up of memory-core against `python -c \"import numpy, apsw\"` "
             f"({dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC, {os.cpu_count()} cores)", "",
             f"`python -m bench.startup --rounds {args.rounds}" + ("" if args.bytecode else " --no-bytecode")
             + (" --pieces" if args.pieces else "") + "".join(f" --code {lab}={c}" for lab, c in codes) + "`: "
             f"{args.rounds} rounds, each running the floor and every command once in an order rotated by one per"
             " round; ratio = the command's wall time / the floor's in the same round (paired), then the median"
             " over rounds; CPU: the same with user + system CPU time. The search is keyword-only: examples/workspace with `provider = \"none\"`"
             f" ({build_line or 'indexed once before the rounds'}), query \"{QUERY}\".", "",
             "| command | code | wall s (median) | wall ratio to floor: median | min - max | CPU s (median) |"
             " CPU ratio: median | target (wall ratio) |",
             "|---|---|---:|---:|---|---:|---:|---|",
             f"| `python -c \"import numpy, apsw\"` (floor) | | {statistics.median(secs[(FLOOR, '')]):.3f} | 1.00x | |"
             f" {statistics.median(cpu[(FLOOR, '')]):.3f} | 1.00x | |"]
    for (name, label), rs in ratios.items():
        target = TARGETS.get(name)
        med = statistics.median(rs)
        verdict = f"<= {target}x: {'meets' if med <= target else 'misses'}" if target else ""
        lines.append(f"| {name} | {label} | {statistics.median(secs[(name, label)]):.3f} | {med:.2f}x |"
                     f" {min(rs):.2f} - {max(rs):.2f} | {statistics.median(cpu[(name, label)]):.3f} |"
                     f" {statistics.median(cpu_ratios[(name, label)]):.2f}x | {verdict} |")
    report = "\n".join(lines) + "\n"
    print(report)
    if args.out:
        Path(args.out).write_text(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
