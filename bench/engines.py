"""The Prefect engine against the in-process engine: one full rebuild each, same corpus, same run.

    python -m bench.engines                                  # small: ~3k chunks, 1 pair (< 2 min)
    python -m bench.engines --chunks-target 41000 --pairs 3  # issue 16's 41k-chunk size
    python -m bench.engines --chunks-target 100000 --pairs 2
    python -m bench.engines --files 2000 --provider fake --label after

Generates a synthetic corpus (bench/corpus.py, ~4.1 chunks a file at the default chunk size),
starts ONE real ``prefect server`` on 127.0.0.1 with a fresh PREFECT_HOME (tests/prefect_server.py)
for the whole run, builds the index once with each engine (untimed warm-up: page cache, Prefect's
flow registration), then alternates, ``--pairs`` times, a full rebuild with the Prefect engine and
one with the in-process engine, each as its own child process of the real CLI::

    python -m memory_core.apps.cli index -w WS --full --provider none --engine prefect|local --no-progress --json

(``PREFECT_API_URL`` points at the server for ``prefect``; no ``PREFECT_*`` for ``local``).

Per run: wall time from spawn to exit; memory, from three places:

* ``CLI proc``: the CLI process's own peak RSS (VmHWM from /proc, read every ``--sample`` s
  while it runs; the high-water mark only grows, so only growth in the last interval escapes);
* ``writer``: the largest own peak RSS among its descendants (the index writer child of the
  streamed build), the same way;
* ``total``: the peak of the summed current RSS of the CLI process and all its descendants,
  sampled: what the build needs at once;
* ``max (wait4)``: ``ru_maxrss`` from ``os.wait4`` on the CLI child: the kernel's exact maximum over
  the child and its waited-for descendants (a max, not a sum), as a cross-check.

The Prefect server's own memory and CPU are not counted (shared infrastructure, as in production).

``--provider fake``: the instant fake (bench/fake_provider.py) in place of a model. The CLI cannot
select it, so the child is this module (``python -m bench.engines --cli-fake index ...``), which maps
the CLI's ``local`` provider to the fake and then runs ``memory_core.apps.cli.main``; the embedding
cache beside the index is deleted before every run, so every run embeds every chunk.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CHUNKS_PER_FILE = 4.1  # bench/corpus.py at the default chunk size: 41,215 chunks from 10,000 files, 99,236 from 24,272
DEFAULT_FILES = 800
TARGET = 1.2
RUN_TIMEOUT = 1800.0
ENGINES = ("prefect", "local")


# -- the child for --provider fake --------------------------------------------------------------

def __getattr__(name: str) -> Any:  # the registry imports the provider class by name, lazily
    if name == "CliFakeProvider":
        from bench.fake_provider import InstantProvider

        class CliFakeProvider(InstantProvider):
            def __init__(self, settings: Any) -> None:
                super().__init__(384)

        globals()[name] = CliFakeProvider
        return CliFakeProvider
    raise AttributeError(name)


def cli_fake(argv: list[str]) -> int:
    """Run the memory-core CLI with ``--provider local`` meaning the instant fake provider."""
    from memory_core.embeddings import registry

    registry._REGISTRY["local"] = ("bench.engines", "CliFakeProvider")
    from memory_core.apps.cli import main

    return main(argv)


# -- measuring one child ---------------------------------------------------------------------

@dataclass
class Run:
    engine: str
    wall_s: float
    cpu_s: float  # user + system of the child and its waited-for descendants
    cli_hwm_kib: int
    writer_hwm_kib: int
    total_peak_kib: int
    wait4_maxrss_kib: int
    samples: int
    summary: dict[str, Any] = field(repr=False)


def _descendants(pid: int) -> list[int]:
    """Every live descendant of ``pid``, from the parent pids in /proc/*/stat (this kernel has no
    /proc/<pid>/task/<tid>/children)."""
    kids: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as fh:
                    s = fh.read()
                ppid = int(s[s.rfind(")") + 2:].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            kids.setdefault(ppid, []).append(int(d))
    out: list[int] = []
    todo = list(kids.get(pid, []))
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(kids.get(p, []))
    return out


def _mem_kib(pid: int) -> tuple[int, int]:
    """(VmRSS, VmHWM) of ``pid`` in KiB; (0, 0) when it is gone."""
    rss = hwm = 0
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    rss = int(line.split()[1])
                elif line.startswith("VmHWM:"):
                    hwm = int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return 0, 0
    return rss, hwm


def run_child(engine: str, cmd: list[str], env: dict[str, str], log: Path, sample_s: float) -> Run:
    os.sync()  # write back what earlier runs left dirty before this one starts
    with open(log, "ab") as err, tempfile.TemporaryFile() as out:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=out, stderr=err, start_new_session=True)
        pid = proc.pid
        cli_hwm = writer_hwm = total_peak = samples = 0
        status = rusage = None
        try:
            while True:
                got, status, rusage = os.wait4(pid, os.WNOHANG)
                if got == pid:
                    break
                rss, hwm = _mem_kib(pid)
                cli_hwm = max(cli_hwm, hwm)
                total = rss
                for kid in _descendants(pid):
                    krss, khwm = _mem_kib(kid)
                    writer_hwm = max(writer_hwm, khwm)
                    total += krss
                total_peak = max(total_peak, total)
                samples += 1
                if time.perf_counter() - t0 > RUN_TIMEOUT:
                    os.killpg(pid, 9)
                time.sleep(sample_s)
        finally:
            if status is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pid, 9)
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        text = out.read().decode("utf-8", "replace")
    if proc.returncode != 0:
        raise SystemExit(f"{engine} run exited {proc.returncode}; stderr in {log}:\n{log.read_text()[-3000:]}")
    summary = json.loads(text)
    if not summary.get("swapped"):
        raise SystemExit(f"{engine} run did not publish a new index: {text[:2000]}")
    return Run(engine, wall, rusage.ru_utime + rusage.ru_stime, cli_hwm, writer_hwm, total_peak,
               rusage.ru_maxrss, samples, summary)


# -- the report --------------------------------------------------------------------------------

def _mib(kib: float) -> float:
    return kib / 1024


def _med(xs: list[float]) -> float:
    return statistics.median(xs)


def _cell(xs: list[float], fmt: str) -> str:
    return f"{format(_med(xs), fmt)} ({format(min(xs), fmt)}-{format(max(xs), fmt)})"


MEASURES: list[tuple[str, str, str, Any]] = [
    # key, label, format, value from a Run
    ("wall", "wall time, s", ".2f", lambda r: r.wall_s),
    ("total", "peak RSS total (CLI + descendants, sampled), MiB", ".0f", lambda r: _mib(r.total_peak_kib)),
    ("cli", "peak RSS of the CLI process (VmHWM), MiB", ".0f", lambda r: _mib(r.cli_hwm_kib)),
    ("writer", "peak RSS of the largest descendant (writer), MiB", ".0f", lambda r: _mib(r.writer_hwm_kib)),
    ("wait4", "ru_maxrss from wait4 (max over child + descendants), MiB", ".0f", lambda r: _mib(r.wait4_maxrss_kib)),
    ("cpu", "CPU time (user + sys, child + descendants), s", ".2f", lambda r: r.cpu_s),
]


def report(args: argparse.Namespace, runs: list[Run], files: int, chunks: int, cmd_line: dict[str, str],
           server_s: float, corpus_s: float, warm: dict[str, float]) -> str:
    by = {e: [r for r in runs if r.engine == e] for e in ENGINES}
    pairs = list(zip(by["prefect"], by["local"], strict=True))
    now = time.strftime("%Y-%m-%d %H:%M", time.gmtime())
    load = os.getloadavg()
    l0 = args.load_start
    argv = shlex.join(args.argv)
    lines = [
        f"# Prefect engine vs in-process engine, full rebuild ({now} UTC, {os.cpu_count()} cores)"
        + (f" - {args.label}" if args.label else ""),
        "",
        f"`python -m bench.engines {argv}`".replace(" `", "`"),
        "",
        f"{files} files, **{chunks} chunks** (from the runs' summary JSON), provider `{args.provider}`;"
        f" one real Prefect server for the run; {'after one untimed warm-up build per engine,' if warm else 'no warm-up,'}"
        f" {len(pairs)} pair(s) of full rebuilds alternated (prefect first). Median (min-max).",
        "",
        "| measure | `--engine prefect` | `--engine local` | ratio prefect/local (median of pairs; range) |",
        "|---|---|---|---|",
    ]
    ratios: dict[str, list[float]] = {}
    for key, label, fmt, get in MEASURES:
        p = [get(r) for r in by["prefect"]]
        q = [get(r) for r in by["local"]]
        rs = [get(a) / get(b) for a, b in pairs if get(a) and get(b)]  # none: no writer child
        ratios[key] = rs
        rcell = f"{_med(rs):.2f}x ({min(rs):.2f}-{max(rs):.2f})" if rs else "-"
        if key in ("wall", "total"):
            rcell = f"**{rcell}**"
        lines.append(f"| {label} | {_cell(p, fmt)} | {_cell(q, fmt)} | {rcell} |")
    verdict = []
    for key, what in (("wall", "wall time"), ("total", "peak RSS (total)")):
        m = _med(ratios[key]) if ratios[key] else float("nan")
        verdict.append(f"{what} {m:.2f}x: {'meets' if m <= TARGET else 'misses'}")
    lines += [
        "",
        f"Target (issue 16): at most {TARGET}x the in-process wall time and peak RSS. " + "; ".join(verdict) + ".",
    ]
    cores = os.cpu_count() or 1
    if max(l0, load[0]) > cores + 1:  # the benchmark itself keeps ~1-2 runnable
        lines += ["", f"**Busy machine** (1-min load {l0:.1f} -> {load[0]:.1f} on {cores} cores, this run's own included): wall times are"
                  " inflated, the in-process engine's more (its writer child runs beside it, so it loses the second"
                  " core); the CPU-time ratio is the steadier figure. Rerun when the load is below the core count."]
    lines += [
        "",
        "Per run (in the order run):",
        "",
        "| # | engine | wall s | total MiB | CLI MiB | writer MiB | wait4 MiB | CPU s | chunks | samples |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for i, r in enumerate(runs, 1):
        lines.append(f"| {i} | {r.engine} | {r.wall_s:.2f} | {_mib(r.total_peak_kib):.0f} | {_mib(r.cli_hwm_kib):.0f} |"
                     f" {_mib(r.writer_hwm_kib):.0f} | {_mib(r.wait4_maxrss_kib):.0f} | {r.cpu_s:.2f} |"
                     f" {r.summary.get('chunks_total')} | {r.samples} |")
    lines += [
        "",
        "Child commands (WS = the generated corpus):",
        "",
        *(f"- `{e}`: `{c}`" for e, c in cmd_line.items()),
        "",
        f"- memory: the CLI process's own VmHWM and its descendants' (the index writer child of the streamed"
        f" build) read from /proc every {args.sample} s; total = sampled peak of the summed VmRSS of the"
        " process tree; wait4 = the kernel's ru_maxrss of the child (max over it and its waited-for"
        " descendants, not a sum). The Prefect server's memory is not counted.",
        "- untimed warm-up builds: " + (", ".join(f"{e} {s:.1f} s" for e, s in warm.items()) or "none")
        + f"; corpus generated in {corpus_s:.1f} s; Prefect server up in {server_s:.1f} s;"
        f" 1-min load average {l0:.2f} at the first timed run, {load[0]:.2f} at the end (a shared machine:"
        " compare the ratios within one run).",
    ]
    return "\n".join(lines) + "\n"


# -- the run -----------------------------------------------------------------------------------

def _size_label(chunks: int) -> str:
    return f"{round(chunks / 1000)}k" if chunks >= 1000 else str(chunks)


def main(argv: list[str] | None = None) -> int:
    raw = sys.argv[1:] if argv is None else argv
    if raw[:1] == ["--cli-fake"]:
        return cli_fake(raw[1:])
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    size = ap.add_mutually_exclusive_group()
    size.add_argument("--files", type=int, help=f"corpus files (default {DEFAULT_FILES}, ~{CHUNKS_PER_FILE} chunks each)")
    size.add_argument("--chunks-target", type=int, help="pick --files for about this many chunks")
    ap.add_argument("--pairs", type=int, default=1, help="timed prefect/local pairs (default 1)")
    ap.add_argument("--provider", choices=["none", "fake"], default="none")
    ap.add_argument("--sample", type=float, default=0.1, help="seconds between /proc memory samples")
    ap.add_argument("--no-warmup", action="store_true", help="no untimed build per engine first")
    ap.add_argument("--out", help="results file (default bench/results/engines-<chunks>[-fake].md)")
    ap.add_argument("--label", default="", help="a note for the results file (e.g. baseline / after)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary folder (corpus, index, logs)")
    args = ap.parse_args(raw)
    args.argv = raw
    if args.pairs < 1:
        ap.error("--pairs must be at least 1")
    files = args.files or (math.ceil(args.chunks_target / CHUNKS_PER_FILE) if args.chunks_target else DEFAULT_FILES)
    if files < 1:
        ap.error("--files must be at least 1")

    from tests.prefect_server import PrefectServer

    tmp = Path(tempfile.mkdtemp(prefix="memory-core-engines-"))
    srv = PrefectServer()  # its own fresh PREFECT_HOME under a temp dir
    try:
        t0 = time.perf_counter()
        from bench.corpus import generate

        ws = tmp / "ws"
        generate(ws, files)
        corpus_s = time.perf_counter() - t0
        print(f"corpus: {files} files in {corpus_s:.1f}s at {ws}", file=sys.stderr)
        t0 = time.perf_counter()
        srv.start()
        server_s = time.perf_counter() - t0
        print(f"prefect server up in {server_s:.1f}s at {srv.api_url}", file=sys.stderr)
        return _bench(args, srv, tmp, ws, files, server_s, corpus_s)
    finally:
        srv.stop()
        if args.keep:
            print(f"kept {tmp}", file=sys.stderr)
        else:
            shutil.rmtree(tmp, ignore_errors=True)


def _bench(args: argparse.Namespace, srv: Any, tmp: Path, ws: Path, files: int, server_s: float,
           corpus_s: float) -> int:
    py = sys.executable
    base_env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    base_env["PYTHONPATH"] = str(ROOT) + (os.pathsep + os.environ["PYTHONPATH"] if os.environ.get("PYTHONPATH") else "")
    base_env["PYTHONUNBUFFERED"] = "1"
    envs = {"local": base_env,
            "prefect": dict(srv.env(PREFECT_LOGGING_LEVEL="WARNING"), PYTHONPATH=base_env["PYTHONPATH"])}
    if args.provider == "fake":
        head = [py, "-m", "bench.engines", "--cli-fake"]
        prov = "local"  # mapped to the fake by --cli-fake
    else:
        head = [py, "-m", "memory_core.apps.cli"]
        prov = "none"
    cmds = {e: [*head, "index", "-w", str(ws), "--full", "--provider", prov, "--engine", e, "--no-progress", "--json"]
            for e in ENGINES}
    shown = {e: "python " + " ".join(c[1:]).replace(str(ws), "WS") for e, c in cmds.items()}
    index_dir = ws / ".memory-core"

    def fresh_cache() -> None:
        if args.provider == "fake":  # every run embeds every chunk
            for p in index_dir.glob("*.cache.sqlite*") if index_dir.is_dir() else []:
                p.unlink()

    def one(engine: str, tag: str) -> Run:
        fresh_cache()
        r = run_child(engine, cmds[engine], envs[engine], tmp / f"{engine}.log", args.sample)
        print(f"{tag} {engine}: {r.wall_s:.2f}s, total {_mib(r.total_peak_kib):.0f} MiB (CLI {_mib(r.cli_hwm_kib):.0f},"
              f" writer {_mib(r.writer_hwm_kib):.0f}, wait4 {_mib(r.wait4_maxrss_kib):.0f}),"
              f" {r.summary.get('chunks_total')} chunks, {r.summary.get('chunks_embedded')} embedded", file=sys.stderr)
        return r

    warm: dict[str, float] = {}
    if not args.no_warmup:
        for e in ENGINES:
            warm[e] = one(e, "warm-up").wall_s
    runs: list[Run] = []
    args.load_start = os.getloadavg()[0]
    for i in range(args.pairs):
        for e in ENGINES:
            runs.append(one(e, f"pair {i + 1}"))
    counts = {r.summary.get("chunks_total") for r in runs}
    if len(counts) != 1:
        print(f"warning: the engines indexed different chunk counts: {sorted(counts)}", file=sys.stderr)
    chunks = int(max(c or 0 for c in counts))
    text = report(args, runs, files, chunks, shown, server_s, corpus_s, warm)
    print(text)
    out = Path(args.out) if args.out else ROOT / "bench" / "results" / f"engines-{_size_label(chunks)}{'-fake' if args.provider == 'fake' else ''}.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    print(f"wrote {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
