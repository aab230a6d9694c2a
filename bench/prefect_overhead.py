"""What Prefect costs a reindex run that has nothing to do, against the in-process engine.

    python -m bench.prefect_overhead              # 5 no-op runs; writes bench/results/prefect-overhead.md
    python -m bench.prefect_overhead --runs 9 --files 10000 --profile /tmp/noop.prof

Starts a real ``prefect server start`` on 127.0.0.1 with a temporary home (tests/prefect_server.py),
copies examples/workspace (+ sessions) into a temporary folder, builds its index once with the
``reindex`` flow (provider ``none``: no model, no network), then alternates, ``--runs`` times, a
no-op ``reindex`` flow run and a no-op ``pipeline.run_index`` (the in-process engine, the baseline),
all in this one process so both are measured under the same load. Per no-op flow run:

* flow (API): the flow run's ``start_time`` -> ``end_time`` as the server recorded them (Running
  to Completed): what the issue's "within 2 s of the flow's start" is about;
* flow body: wall time of the flow function's body (``run_pipeline``), measured inside the flow;
* call: wall time of the whole ``reindex(...)`` call, including the client creating the flow run
  and proposing its states;
* in-process: ``pipeline.run_index`` on the same workspace, the same settings.

The overhead is flow (API) - in-process; the ratio is flow (API) / in-process. The task runs
and artifacts each no-op run left in the API are counted after the timed runs.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
TARGET_S = 2.0


def _workspace(tmp: Path, files: int) -> Path:
    ws = tmp / "ws"
    if files:
        from bench.corpus import generate

        generate(ws, files)
        return ws
    shutil.copytree(ROOT / "examples" / "workspace", ws, ignore=shutil.ignore_patterns(".memory-core"))
    shutil.copytree(ROOT / "examples" / "sessions", ws / "sessions")
    return ws


def _secs(a: Any, b: Any) -> float:
    return (b - a).total_seconds()


def _fmt(values: list[float]) -> str:
    return f"{statistics.median(values):.3f} / {max(values):.3f}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=5, help="no-op runs of each engine (default 5)")
    ap.add_argument("--files", type=int, default=0,
                    help="index a synthetic corpus of this many files instead of examples/workspace")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "prefect-overhead.md"))
    ap.add_argument("--label", default="", help="a note for the results file (e.g. before / after)")
    ap.add_argument("--profile", metavar="FILE", help="cProfile one extra no-op flow call into FILE (pstats), print the top")
    args = ap.parse_args(argv)

    from tests.prefect_server import PrefectServer

    srv = PrefectServer()
    # The client settings must be in the environment before prefect is imported.
    for k in list(os.environ):
        if k.startswith("PREFECT_"):
            del os.environ[k]
    os.environ.update({"PREFECT_HOME": str(srv.home), "PREFECT_API_URL": srv.api_url,
                       "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "PREFECT_LOGGING_LEVEL": "WARNING"})
    tmp = Path(tempfile.mkdtemp(prefix="memory-core-overhead-"))
    t0 = time.perf_counter()
    srv.start()
    server_start = time.perf_counter() - t0
    print(f"prefect server up in {server_start:.1f}s at {srv.api_url}", file=sys.stderr)
    try:
        return _bench(args, srv, tmp, server_start)
    finally:
        srv.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def _bench(args: argparse.Namespace, srv: Any, tmp: Path, server_start: float) -> int:
    t0 = time.perf_counter()
    import flows.reindex as reindex_mod
    from flows.reindex import ReindexParams, reindex
    from memory_core.index import pipeline
    from tests.prefect_server import drain_workers, read_flow_run, run_artifacts, task_run_names

    import_s = time.perf_counter() - t0

    body: list[float] = []
    real_run_pipeline = reindex_mod.run_pipeline

    def timed_run_pipeline(params: Any, flow_name: str) -> Any:
        t = time.perf_counter()
        try:
            return real_run_pipeline(params, flow_name)
        finally:
            body.append(time.perf_counter() - t)

    reindex_mod.run_pipeline = timed_run_pipeline  # the flow looks it up at call time

    ws = _workspace(tmp, args.files)
    params = ReindexParams(workspace=str(ws), provider="none")
    kwargs = params.flow_kwargs()

    t = time.perf_counter()
    state = reindex(**kwargs, return_state=True)
    build_call = time.perf_counter() - t
    first = state.result()
    assert state.is_completed() and first["swapped"], state
    build_fr = read_flow_run(state.state_details.flow_run_id)
    print(f"build: {first['files_new']} files, {first['chunks_total']} chunks in {build_call:.2f}s", file=sys.stderr)

    rows: list[dict[str, Any]] = []
    for i in range(args.runs):
        t = time.perf_counter()
        summary = pipeline.run_index(params.to_settings())
        inproc = time.perf_counter() - t
        assert not summary.swapped and summary.files_unchanged == first["files_new"], summary

        called = dt.datetime.now(dt.UTC)
        t = time.perf_counter()
        state = reindex(**kwargs, return_state=True)
        call = time.perf_counter() - t
        res = state.result()
        assert state.is_completed() and not res["swapped"], state
        fr = read_flow_run(state.state_details.flow_run_id)
        row = {"flow_run_id": fr.id, "inproc": inproc, "call": call, "body": body[-1],
               "api": _secs(fr.start_time, fr.end_time), "before_start": _secs(called, fr.start_time)}
        rows.append(row)
        print(f"no-op {i + 1}: flow (API) {row['api']:.3f}s, body {row['body']:.3f}s, call {call:.3f}s,"
              f" in-process {inproc:.3f}s", file=sys.stderr)

    # one full rebuild each way: what the flow's tasks cost when there is work (big task inputs)
    t = time.perf_counter()
    pipeline.run_index(params.to_settings(), full=True)
    full_inproc = time.perf_counter() - t
    t = time.perf_counter()
    state = reindex(**kwargs, full=True, return_state=True)
    full_call = time.perf_counter() - t
    assert state.is_completed() and state.result()["swapped"], state
    full_fr = read_flow_run(state.state_details.flow_run_id)
    full_api = _secs(full_fr.start_time, full_fr.end_time)

    drain_workers()
    time.sleep(2.0)  # the server records task runs from events, asynchronously
    for row in rows:
        row["task_runs"] = len(task_run_names(row["flow_run_id"]))
        row["artifacts"] = len(run_artifacts(row["flow_run_id"]))
    build_tasks = len(task_run_names(build_fr.id))
    build_artifacts = len(run_artifacts(build_fr.id))

    if args.profile:
        import cProfile
        import pstats

        prof = cProfile.Profile()
        prof.enable()
        reindex(**kwargs, return_state=True)
        prof.disable()
        prof.dump_stats(args.profile)
        pstats.Stats(prof, stream=sys.stderr).sort_stats("cumulative").print_stats(30)

    col = {k: [r[k] for r in rows] for k in ("api", "body", "call", "inproc", "before_start")}
    overhead = [r["api"] - r["inproc"] for r in rows]
    ratio = [r["api"] / r["inproc"] for r in rows]
    call_ratio = [r["call"] / r["inproc"] for r in rows]
    med_api = statistics.median(col["api"])
    verdict = "meets" if max(col["api"]) <= TARGET_S else "median meets" if med_api <= TARGET_S else "misses"

    now = time.strftime("%Y-%m-%d %H:%M")
    lines = [
        f"# Prefect overhead of a no-op reindex ({now}, {os.cpu_count()} cores){' - ' + args.label if args.label else ''}",
        "",
        f"`python -m bench.prefect_overhead --runs {args.runs}{f' --files {args.files}' if args.files else ''}`: a real Prefect server on 127.0.0.1, "
        f"{'a synthetic corpus' if args.files else 'examples/workspace'}"
        f" ({first['files_new']} files, {first['chunks_total']} chunks), provider `none`; {args.runs} no-op runs of each"
        " engine, alternated in one process. Seconds, median / max.",
        "",
        "| measure | seconds (median / max) | vs in-process (median / max) |",
        "|---|---|---|",
        f"| flow run, start -> end (API timestamps) | {_fmt(col['api'])} | {_fmt(ratio)} x |",
        f"| flow body (wall time inside the flow) | {_fmt(col['body'])} | |",
        f"| whole call (flow-run creation included) | {_fmt(col['call'])} | {_fmt(call_ratio)} x |",
        f"| call -> flow run start (client side) | {_fmt(col['before_start'])} | |",
        f"| in-process `pipeline.run_index` (baseline) | {_fmt(col['inproc'])} | 1 x |",
        f"| **flow overhead** = flow run - in-process | **{_fmt(overhead)}** | |",
        "",
        f"Target: a no-op run finishes within {TARGET_S:.0f} s of the flow's start: **{verdict}**"
        f" (median {med_api:.3f} s, max {max(col['api']):.3f} s).",
        "",
        f"- task runs per no-op run: {sorted(set(r['task_runs'] for r in rows))}; artifacts per no-op run:"
        f" {sorted(set(r['artifacts'] for r in rows))} (the building run: {build_tasks} task runs,"
        f" {build_artifacts} artifacts)",
        f"- full rebuild (work to do): flow run {full_api:.2f} s (whole call {full_call:.2f} s) vs in-process"
        f" {full_inproc:.2f} s = {full_api / full_inproc:.2f} x",
        f"- building run (whole call, first flow call in the process): {build_call:.2f} s",
        f"- importing flows.reindex: {import_s:.2f} s; server start: {server_start:.1f} s",
        "",
        "| run | flow run (API) | flow body | whole call | in-process | overhead | ratio |",
        "|---|---|---|---|---|---|---|",
    ]
    for i, r in enumerate(rows, 1):
        lines.append(f"| {i} | {r['api']:.3f} | {r['body']:.3f} | {r['call']:.3f} | {r['inproc']:.3f} |"
                     f" {r['api'] - r['inproc']:.3f} | {r['api'] / r['inproc']:.1f} x |")
    text = "\n".join(lines) + "\n"
    print(text)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
