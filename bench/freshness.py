"""What freshness by default costs: an idle MCP server that watches, and the latency on_search adds.

    python -m bench.freshness                  # 60 s idle, 300 searches; writes bench/results/freshness.md
    python -m bench.freshness --idle-s 20 --searches 100 --files 2000

Copies examples/workspace into a temporary folder (``--files N`` adds N generated notes under
memory/), builds its index (provider ``none``: no model, no network, so the figures are the sync
machinery's alone) and measures, on this machine, under whatever else it runs:

* **idle cost**: two ``memory-core mcp`` servers over the same workspace, started side by side
  (paired, so both see the same load), each sent ``initialize`` and then left idle for
  ``--idle-s`` seconds: one with the default settings (``[sync]`` on_session_start, on_search
  and watch on), one with all three off. CPU seconds of each process over the idle window
  (``/proc/PID/stat`` utime + stime), as a share of one core, and their ratio.
* **search latency**: the ``memory_search`` tool's implementation (``MemoryTools.search``) on a
  clean index, default settings (the watch on: a clean check stands until a watch event or a
  run forgets it, 60 s at most) and all triggers off (a dirty check at most once a second, to
  say when stale), against
  the bare answer (``Searcher.search_response``: no freshness at all), interleaved query by
  query; median and p90 per search, and the ratios. Also one dirty check alone (what a search
  after a quiet second pays) and its ratio to a bare search.
* **time to fresh**: a note written by hand with the default server triggers running, until the
  index is clean again (the watch: debounce 1.5 s + the run), median of ``--trials``.

Nothing here is asserted; tests/test_mcp.py checks the behaviour (a note found within 12 s).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
QUERIES = ["postgres replica lag", "Lisbon hotel booking", "backup restore drill", "who owns the on-call rota",
           "budget for the offsite", "pgbackrest", "meeting notes September", "deploy freeze"]
OFF = {"on_search": False, "on_session_start": False, "watch": False}


def _workspace(tmp: Path, files: int) -> Path:
    ws = tmp / "ws"
    shutil.copytree(ROOT / "examples" / "workspace", ws, ignore=shutil.ignore_patterns(".memory-core"))
    gen = ws / "memory" / "generated"
    if files:
        gen.mkdir(parents=True)
    for i in range(files):
        (gen / f"note-{i:05d}.md").write_text(f"# Note {i}\n\nItem {i}: the review of ticket DS-{i} is done.\n")
    return ws


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def _start_server(ws: Path, config: Path | None, err: Path) -> subprocess.Popen[bytes]:
    args = [sys.executable, "-m", "memory_core.apps.cli", "mcp", "-w", str(ws)]
    if config is not None:
        args += ["--config", str(config)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    p = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err.open("w"), env=env,
                         cwd=str(ROOT))
    assert p.stdin is not None and p.stdout is not None
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                       "clientInfo": {"name": "bench", "version": "0"}}}
    p.stdin.write((json.dumps(init) + "\n").encode())
    p.stdin.write((json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}) + "\n").encode())
    p.stdin.flush()
    p.stdout.readline()  # the initialize result: the server is up, its session started
    return p


def idle_cost(ws: Path, tmp: Path, idle_s: float) -> dict[str, Any]:
    off_cfg = tmp / "off.toml"
    off_cfg.write_text("[sync]\n" + "".join(f"{k} = false\n" for k in OFF))
    on = _start_server(ws, None, tmp / "on.err")
    off = _start_server(ws, off_cfg, tmp / "off.err")
    try:
        time.sleep(3.0)  # start-up done (imports, the watch in place)
        c0 = {"on": _cpu_s(on.pid), "off": _cpu_s(off.pid)}
        t0 = time.monotonic()
        time.sleep(idle_s)
        wall = time.monotonic() - t0
        c1 = {"on": _cpu_s(on.pid), "off": _cpu_s(off.pid)}
    finally:
        for p in (on, off):
            p.stdin.close()  # type: ignore[union-attr]
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
    cpu = {k: c1[k] - c0[k] for k in c0}
    return {"idle_s": wall, "cpu_s_on": cpu["on"], "cpu_s_off": cpu["off"],
            "core_pct_on": 100 * cpu["on"] / wall, "core_pct_off": 100 * cpu["off"] / wall,
            "ratio": cpu["on"] / cpu["off"] if cpu["off"] > 0 else float("inf")}


def search_latency(ws: Path, searches: int) -> dict[str, Any]:
    from memory_core.apps.mcp_server import MemoryTools
    from memory_core.config import load_settings
    from memory_core.sources.freshness import dirty_state

    base = {"workspace": str(ws), "provider": "none"}
    on = MemoryTools(load_settings(None, base))
    off = MemoryTools(load_settings(None, {**base, "sync": OFF}))
    bare = off.searcher  # the answer alone, no freshness at all: what a server did before

    def run_on(q: str) -> Any:
        return on.search({"query": q})

    def run_off(q: str) -> Any:
        return off.search({"query": q})

    def run_bare(q: str) -> Any:
        return bare.search_response(q)

    variants = {"on": run_on, "off": run_off, "bare": run_bare}
    on.sync.start()
    on.sync.on_session_start()
    try:
        for fn in variants.values():  # warm: connections open, statements cached
            for q in QUERIES:
                fn(q)
        lat: dict[str, list[float]] = {k: [] for k in variants}
        order = list(variants)
        for i in range(searches):
            q = QUERIES[i % len(QUERIES)]
            for name in order[i % 3:] + order[:i % 3]:  # rotated: no variant always first
                t0 = time.perf_counter()
                variants[name](q)
                lat[name].append(time.perf_counter() - t0)
        checks = []
        for _ in range(max(20, searches // 10)):
            t0 = time.perf_counter()
            dirty_state(on.settings)
            checks.append(time.perf_counter() - t0)
    finally:
        on.close()
        off.close()
    med = {k: statistics.median(v) for k, v in lat.items()}
    p90 = {k: statistics.quantiles(v, n=10)[-1] for k, v in lat.items()}
    check = statistics.median(checks)
    out: dict[str, Any] = {"searches": searches, "dirty_check_ms": 1000 * check,
                           "ratio_search_with_check": (med["bare"] + check) / med["bare"]}
    for k in variants:
        out[f"median_ms_{k}"], out[f"p90_ms_{k}"] = 1000 * med[k], 1000 * p90[k]
        out[f"ratio_median_{k}"], out[f"ratio_p90_{k}"] = med[k] / med["bare"], p90[k] / p90["bare"]
    return out


def time_to_fresh(ws: Path, trials: int) -> dict[str, Any]:
    from memory_core.apps.mcp_server import MemoryTools
    from memory_core.config import load_settings

    tools = MemoryTools(load_settings(None, {"workspace": str(ws), "provider": "none"}))
    tools.sync.start()
    got = []
    try:
        assert tools.sync._watcher is not None and tools.sync._watcher.wait_ready(10)
        for i in range(trials):
            note = ws / "memory" / f"bench-fresh-{i}.md"
            t0 = time.monotonic()
            note.write_text(f"# Fresh {i}\n\nThe walrus census number {i} is due.\n")
            while tools.status({})["dirty"] is not False:
                time.sleep(0.05)
            got.append(time.monotonic() - t0)
    finally:
        tools.close()
    return {"trials": trials, "median_s": statistics.median(got), "max_s": max(got)}


def sparse_searches(ws: Path, searches: int, gap_s: float) -> dict[str, Any]:
    """Searches ``gap_s`` apart (an agent's pace: each after a quiet second), sync on (watch on)
    against off (each pays a dirty check) and the bare answer."""
    from memory_core.apps.mcp_server import MemoryTools
    from memory_core.config import load_settings

    base = {"workspace": str(ws), "provider": "none"}
    on = MemoryTools(load_settings(None, base))
    off = MemoryTools(load_settings(None, {**base, "sync": OFF}))
    on.sync.start()
    try:
        assert on.sync._watcher is not None and on.sync._watcher.wait_ready(10)
        for t in (on, off):
            t.search({"query": QUERIES[0]})
        lat: dict[str, list[float]] = {"on": [], "off": [], "bare": []}
        for i in range(searches):
            time.sleep(gap_s)
            q = QUERIES[i % len(QUERIES)]
            for name in ("on", "off", "bare"):
                t0 = time.perf_counter()
                if name == "bare":
                    off.searcher.search_response(q)
                else:
                    (on if name == "on" else off).search({"query": q})
                lat[name].append(time.perf_counter() - t0)
    finally:
        on.close()
        off.close()
    med = {k: statistics.median(v) for k, v in lat.items()}
    return {"searches": searches, "gap_s": gap_s, **{f"median_ms_{k}": 1000 * v for k, v in med.items()},
            "ratio_on": med["on"] / med["bare"], "ratio_off": med["off"] / med["bare"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--idle-s", type=float, default=60.0)
    ap.add_argument("--searches", type=int, default=300)
    ap.add_argument("--files", type=int, default=0, help="generated notes added to the example workspace")
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--sparse", type=int, default=20, help="searches 1.1 s apart (each after a quiet second)")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "freshness.md"))
    a = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    from memory_core.config import load_settings
    from memory_core.index.pipeline import run_index

    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        ws = _workspace(tmp, a.files)
        run_index(load_settings(None, {"workspace": str(ws), "provider": "none"}))
        files = sum(1 for _ in ws.rglob("*.md"))
        idle = idle_cost(ws, tmp, a.idle_s)
        lat = search_latency(ws, a.searches)
        fresh = time_to_fresh(ws, a.trials)
        sparse = sparse_searches(ws, a.sparse, 1.1)
    idle_ratio = f"{idle['ratio']:.1f}x" if idle["cpu_s_off"] else "n/a (off: under one 10 ms clock tick)"
    lines = [
        f"# Freshness by default: what it costs ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})",
        "",
        f"`python -m bench.freshness --idle-s {a.idle_s:g} --searches {a.searches} --files {a.files}`: examples/workspace"
        f" ({files} notes), provider none, {os.cpu_count()} cores shared with other work.",
        "",
        "| | sync on (default) | sync off | ratio |",
        "|---|---|---|---|",
        f"| idle MCP server, CPU over {idle['idle_s']:.0f} s | {idle['cpu_s_on']:.2f} s ({idle['core_pct_on']:.2f} % of"
        f" a core) | {idle['cpu_s_off']:.2f} s ({idle['core_pct_off']:.2f} %) | {idle_ratio} |",
        "",
        "memory_search on a clean index, against the bare answer (no freshness at all: what a server with the"
        f" triggers off did before), {lat['searches']} searches each, interleaved:",
        "",
        "| | median | ratio | p90 | ratio |",
        "|---|---|---|---|---|",
        *[f"| {label} | {lat[f'median_ms_{k}']:.2f} ms | {lat[f'ratio_median_{k}']:.2f}x | {lat[f'p90_ms_{k}']:.2f} ms |"
          f" {lat[f'ratio_p90_{k}']:.2f}x |"
          for k, label in (("bare", "bare answer"), ("on", "sync on (default; watch on)"),
                           ("off", "sync off (still says when stale)"))],
        f"| a search that pays one dirty check | {lat['median_ms_bare'] + lat['dirty_check_ms']:.2f} ms |"
        f" {lat['ratio_search_with_check']:.2f}x | | |",
        "",
        f"Searches 1.1 s apart (each after a quiet second; {sparse['searches']} each), median: bare"
        f" {sparse['median_ms_bare']:.2f} ms, sync on {sparse['median_ms_on']:.2f} ms ({sparse['ratio_on']:.2f}x: the"
        f" watch vouches for the last check), sync off {sparse['median_ms_off']:.2f} ms ({sparse['ratio_off']:.2f}x:"
        " one dirty check each).",
        "",
        f"One dirty check (stat of every source + the index's file table): {lat['dirty_check_ms']:.2f} ms.",
        f"A note written by hand is in the index (watch: debounce 1.5 s, then the run) after"
        f" {fresh['median_s']:.1f} s (median of {fresh['trials']}; max {fresh['max_s']:.1f} s).",
        "",
    ]
    text = "\n".join(lines)
    print(text)
    Path(a.out).write_text(text)
    print(json.dumps({"idle": idle, "latency": lat, "fresh": fresh, "sparse": sparse}, indent=2), file=sys.stderr)


if __name__ == "__main__":
    main()
