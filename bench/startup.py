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
* ``import cli``: ``python -c "import memory_core.apps.cli"``.

A round runs the floor and every (code, command) once, in an order rotated by one each round, so
none always runs first (warm caches) or last. Per round, each command's wall time is divided by
the floor's of that round (a paired ratio: load that varies between rounds cancels out); the report
gives each command's median seconds and the median and spread (min-max) of its paired ratios.
Targets (issue 38): ``--version`` at most 1.3x, the keyword-only search at most 1.6x.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
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


def _time(cmd: list[str], env: dict[str, str], cwd: Path) -> float:
    t0 = time.perf_counter()
    done = subprocess.run(cmd, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False)
    took = time.perf_counter() - t0
    if done.returncode != 0:
        sys.exit(f"bench.startup: {' '.join(cmd)} exited {done.returncode}: {done.stderr.decode()[-2000:]}")
    return took


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.startup", description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=11, help="rounds (each runs every command once; default 11)")
    ap.add_argument("--code", action="append", metavar="LABEL=DIR",
                    help="a source tree to measure (repeatable; default: this checkout, labelled 'this')")
    ap.add_argument("--no-bytecode", dest="bytecode", action="store_false",
                    help="compile every module at every start (PYTHONDONTWRITEBYTECODE=1), floor included; default:"
                         " .pyc files cached as an installed package has them")
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
        for _, _, cmd, env in runs:  # one untimed warm-up of each: the OS file cache, .pyc files
            _time(cmd, env, tmp)
        secs: dict[tuple[str, str], list[float]] = {(n, lab): [] for n, lab, _, _ in runs}
        ratios: dict[tuple[str, str], list[float]] = {(n, lab): [] for n, lab, _, _ in runs if n != FLOOR}
        for r in range(args.rounds):
            k = r % len(runs)
            took = {(n, lab): _time(cmd, env, tmp) for n, lab, cmd, env in runs[k:] + runs[:k]}
            for key, s in took.items():
                secs[key].append(s)
                if key in ratios:
                    ratios[key].append(s / took[(FLOOR, "")])
        build_line = build.stdout.strip().splitlines()[-1] if build.stdout.strip() else ""

    lines = [f"# Start-up of memory-core against `python -c \"import numpy, apsw\"` "
             f"({dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC, {os.cpu_count()} cores)", "",
             f"`python -m bench.startup --rounds {args.rounds}"
             + "".join(f" --code {lab}={c}" for lab, c in codes) + "`: "
             f"{args.rounds} rounds, each running the floor and every command once in an order rotated by one per"
             " round; ratio = the command's wall time / the floor's in the same round (paired), then the median"
             " over rounds. The search is keyword-only: examples/workspace with `provider = \"none\"`"
             f" ({build_line or 'indexed once before the rounds'}), query \"{QUERY}\".", "",
             "| command | code | median s | ratio to floor: median | min - max | target |",
             "|---|---|---:|---:|---|---|",
             f"| `python -c \"import numpy, apsw\"` (floor) | | {statistics.median(secs[(FLOOR, '')]):.3f} | 1.00x | | |"]
    for (name, label), rs in ratios.items():
        target = TARGETS.get(name)
        med = statistics.median(rs)
        verdict = f"<= {target}x: {'meets' if med <= target else 'misses'}" if target else ""
        lines.append(f"| {name} | {label} | {statistics.median(secs[(name, label)]):.3f} | {med:.2f}x |"
                     f" {min(rs):.2f} - {max(rs):.2f} | {verdict} |")
    report = "\n".join(lines) + "\n"
    print(report)
    if args.out:
        Path(args.out).write_text(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
