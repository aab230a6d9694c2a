"""The ``memory-core`` command: a thin layer over the library and the reindex flow.

Exit codes: 0 success, 2 usage or configuration error, 1 run failure. Errors a user causes
print one line on stderr, never a traceback (``MEMORY_CORE_DEBUG=1`` shows tracebacks).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Sequence
from typing import Any

from memory_core.config import Settings, load_settings
from memory_core.errors import MemoryCoreError, RunError, UsageError

EXIT_OK, EXIT_FAIL, EXIT_USAGE = 0, 1, 2


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse exits 2 on usage errors, as we want
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", "-c", help="TOML config file (default: $MEMORY_CORE_CONFIG)")
    p.add_argument("--workspace", "-w", help="workspace folder (default: current directory)")
    p.add_argument("--index", dest="index_path", help="index file (default: <workspace>/.memory-core/index.sqlite)")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="memory-core", description="Index and search agent memory (Markdown notes and chat transcripts).")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True

    p = sub.add_parser("index", help="build or update the index (runs the reindex flow)")
    _common(p)
    p.add_argument("--provider", choices=["auto", "local", "openai", "gemini", "voyage", "none"])
    p.add_argument("--model")
    p.add_argument("--full", action="store_true", help="rebuild everything (vectors still come from the cache)")
    p.add_argument("--extra-path", action="append", dest="extra_paths", help="extra .md file or folder (repeatable)")
    p.add_argument("--sessions", action="store_true", help="also index chat transcripts (sources memory + sessions)")
    p.add_argument("--engine", choices=["auto", "prefect", "local"], default=os.environ.get("MEMORY_CORE_ENGINE", "auto"),
                   help="prefect: run the reindex flow; local: the same stages in-process; auto (default):"
                        " the flow when PREFECT_API_URL points at a server, else in-process (no 10-20 s"
                        " temporary Prefect server per run)")
    p.add_argument("--json", action="store_true", help="print the run summary as JSON")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")

    p = sub.add_parser("search", help="hybrid search with file and line citations")
    _common(p)
    p.add_argument("query")
    p.add_argument("--max-results", "-n", type=int)
    p.add_argument("--min-score", type=float)
    p.add_argument("--source", action="append", dest="sources", choices=["memory", "sessions"])
    p.add_argument("--mode", choices=["hybrid", "vector", "keyword"], help="default: query.mode in the config (hybrid)")
    p.add_argument("--json", action="store_true", help="the memory_search MCP tool's shape: {results, note?}")

    p = sub.add_parser("get", help="print lines of an indexed file")
    _common(p)
    p.add_argument("path", help="indexed path, e.g. memory/2026-11-02.md")
    p.add_argument("--from", dest="from_line", type=int, help="first line (1-based)")
    p.add_argument("--lines", type=int, help="number of lines")
    p.add_argument("--json", action="store_true")

    p = sub.add_parser("status", help="what the index holds and how search runs")
    _common(p)
    p.add_argument("--json", action="store_true")

    p = sub.add_parser("mcp", help="serve search to agents over the Model Context Protocol (stdio or HTTP)")
    _common(p)
    p.add_argument("--transport", choices=["stdio", "http"], default="stdio",
                   help="stdio (default; the client starts this command) or streamable HTTP on a loopback address")
    p.add_argument("--host", default="127.0.0.1", help="HTTP: loopback address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8765, help="HTTP: port (default 8765)")
    p.add_argument("--path", default="/mcp", help="HTTP: endpoint path (default /mcp)")

    p = sub.add_parser("watch", help="reindex whenever the sources change (debounced, one run at a time)")
    _common(p)
    p.add_argument("--provider", choices=["auto", "local", "openai", "gemini", "voyage", "none"])
    p.add_argument("--model")
    p.add_argument("--extra-path", action="append", dest="extra_paths", help="extra .md file or folder (repeatable)")
    p.add_argument("--sessions", action="store_true", help="also index chat transcripts (sources memory + sessions)")
    p.add_argument("--debounce", type=float, default=1.5, metavar="SECONDS",
                   help="start a run once the sources have been quiet this long (default 1.5)")
    p.add_argument("--deployment", default=os.environ.get("MEMORY_CORE_DEPLOYMENT"),
                   help="run this Prefect deployment of the reindex flow (needs PREFECT_API_URL; default"
                        " $MEMORY_CORE_DEPLOYMENT); otherwise runs are in-process")
    p.add_argument("--no-initial-run", action="store_true", help="do not reindex at start-up")
    p.add_argument("--json", action="store_true", help="print each run as one JSON line")

    p = sub.add_parser("export", help="write the index's chunks (text, lines, vectors) to Parquet or JSON Lines")
    _common(p)
    p.add_argument("output", metavar="PATH", help="output file ('-' = stdout, JSON Lines only)")
    p.add_argument("--format", "-f", choices=["parquet", "jsonl"],
                   help="default: jsonl for .jsonl/.ndjson names and '-', else parquet")
    p.add_argument("--no-vectors", action="store_true", help="leave out the vector column")
    p.add_argument("--json", action="store_true", help="print the export summary as JSON")
    from memory_core.evaluation import add_eval_parser

    add_eval_parser(sub)
    return parser


def _settings(args: argparse.Namespace, **extra: Any) -> Settings:
    overrides = {"workspace": args.workspace, "index_path": args.index_path, **extra}
    return load_settings(args.config, overrides)


def _setup_logging(verbose: bool = False) -> None:
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING, format="%(levelname)s %(message)s")


def cmd_index(args: argparse.Namespace) -> int:
    extra: dict[str, Any] = {"provider": args.provider, "model": args.model, "extra_paths": args.extra_paths}
    if args.sessions:
        extra["sources"] = ["memory", "sessions"]
    settings = _settings(args, **extra)
    if not settings.workspace_dir.is_dir():
        raise UsageError(f"workspace not found: {settings.workspace_dir}")
    engine = args.engine
    if engine == "auto":
        engine = "prefect" if os.environ.get("PREFECT_API_URL") else "local"
    summary = _index_prefect(settings, args) if engine == "prefect" else _index_local(settings, args)
    if args.json:
        print(json.dumps(summary, indent=2, sort_keys=True))
    else:
        from memory_core.pipeline import RunSummary

        for line in RunSummary(**summary).lines():
            print(line)
        for w in summary.get("warnings", []):
            print(f"warning: {w}", file=sys.stderr)
    return EXIT_OK


def _progress_bar(enabled: bool):  # type: ignore[no-untyped-def]
    if not enabled:
        return None, lambda: None
    from tqdm import tqdm

    bars: dict[str, Any] = {}

    def progress(stage: str, done: int, total: int) -> None:
        bar = bars.get(stage)
        if bar is None:
            bar = bars[stage] = tqdm(total=total, desc=stage, unit="chunk" if stage != "chunk" else "file",
                                     leave=False, file=sys.stderr)
        bar.total = total
        bar.n = done
        bar.refresh()

    def close() -> None:
        for b in bars.values():
            b.close()

    return progress, close


def _index_local(settings: Settings, args: argparse.Namespace) -> dict[str, Any]:
    from memory_core.pipeline import run_index

    progress, close = _progress_bar(not args.no_progress and sys.stderr.isatty())
    try:
        return run_index(settings, full=args.full, progress=progress).to_dict()
    finally:
        close()


def _index_prefect(settings: Settings, args: argparse.Namespace) -> dict[str, Any]:
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
    # with no PREFECT_API_URL Prefect starts a temporary server; give a busy machine time
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")  # no telemetry calls from a closed network
    from flows.reindex import ReindexParams, run_reindex

    params = ReindexParams(
        workspace=str(settings.workspace_dir), index_path=str(settings.index_file), config_file=args.config,
        provider=settings.provider, model=settings.model, full=args.full, extra_paths=settings.extra_paths,
        sources=list(settings.sources),
    )
    try:
        return run_reindex(params)
    except MemoryCoreError:
        raise
    except RuntimeError as exc:  # Prefect could not start or reach its API
        raise RunError(f"Prefect: {exc} (is PREFECT_API_URL right? `--engine local` runs without Prefect)") from exc


def _searcher(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    from memory_core.search import Searcher

    return Searcher(_settings(args))


def cmd_search(args: argparse.Namespace) -> int:
    with _searcher(args) as s:
        res = s.search_response(args.query, max_results=args.max_results, min_score=args.min_score,
                                sources=args.sources, mode=args.mode)
    if args.json:
        print(json.dumps(res, indent=2, ensure_ascii=False))
        return EXIT_OK
    if res.get("note"):
        print(f"note: {res['note']}", file=sys.stderr)
    if not res["results"]:
        print("no results")
    for r in res["results"]:
        print(f"{r['citation']}  score {r['score']:.3f}  {r['match']}" + (f"  {r['date']}" if r["date"] else "")
              + f"  [{r['source']}]")
        for line in r["snippet"].splitlines()[:12]:
            print(f"    {line}")
        print()
    return EXIT_OK


def cmd_get(args: argparse.Namespace) -> int:
    with _searcher(args) as s:
        res = s.read_file(args.path, from_line=args.from_line, lines=args.lines)
    if args.json:
        print(json.dumps(res, indent=2, ensure_ascii=False))
    else:
        print(res["text"])
    return EXIT_OK


def cmd_status(args: argparse.Namespace) -> int:
    with _searcher(args) as s:
        st = s.status()
    if args.json:
        print(json.dumps(st, indent=2, sort_keys=True, default=str))
    else:
        for k, v in st.items():
            print(f"{k}: {v}")
    return EXIT_OK if st.get("state") == "ok" else EXIT_FAIL


def cmd_mcp(args: argparse.Namespace) -> int:
    settings = _settings(args)
    try:
        from memory_core import mcp_server
    except ImportError as exc:
        raise UsageError(f"the MCP server needs the mcp package ({exc.name} is not installed): pip install 'mcp>=2.3'") from None
    if args.transport == "http":
        mcp_server.check_host(args.host)
    if not settings.index_file.exists():
        print(f"memory-core: warning: no index at {settings.index_file} yet; tools answer with an error until"
              " `memory-core index` (or `watch`) builds it", file=sys.stderr)
    if args.transport == "http":
        host = f"[{args.host}]" if ":" in args.host else args.host
        print(f"memory-core: MCP server on http://{host}:{args.port}{args.path}", file=sys.stderr)
    mcp_server.serve(settings, transport=args.transport, host=args.host, port=args.port, path=args.path)
    return EXIT_OK


def cmd_watch(args: argparse.Namespace) -> int:
    import signal

    extra: dict[str, Any] = {"provider": args.provider, "model": args.model, "extra_paths": args.extra_paths}
    if args.sessions:
        extra["sources"] = ["memory", "sessions"]
    settings = _settings(args, **extra)
    if not settings.workspace_dir.is_dir():
        raise UsageError(f"workspace not found: {settings.workspace_dir}")
    try:
        import watchfiles  # noqa: F401
    except ImportError:
        raise UsageError("watch needs the watchfiles package: pip install watchfiles") from None
    from memory_core.watch import RunRecord, Watcher, describe, make_runner, watch_roots

    if args.debounce < 0:
        raise UsageError("--debounce must be >= 0 seconds")
    runner = make_runner(settings, deployment=args.deployment, config_file=args.config)

    def report(rec: RunRecord) -> None:
        print(json.dumps(rec.to_dict(), sort_keys=True) if args.json else rec.line(), flush=True)
        if not args.json and rec.summary:
            for w in rec.summary.get("warnings", []):
                print(f"warning: {w}", file=sys.stderr)

    watcher = Watcher(settings, runner, debounce=args.debounce, initial_run=not args.no_initial_run, on_run=report)
    print(f"memory-core: watching {describe(watch_roots(settings))}; {runner.description};"
          f" debounce {args.debounce:g}s; Ctrl-C stops", file=sys.stderr, flush=True)

    def on_term(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, on_term)
    try:
        watcher.run_forever()
    except KeyboardInterrupt:
        print("memory-core: watch stopped", file=sys.stderr)
    finally:
        signal.signal(signal.SIGTERM, previous)
    return EXIT_OK


def cmd_export(args: argparse.Namespace) -> int:
    from memory_core.export import export_index

    fmt = args.format
    if fmt is None:
        fmt = "jsonl" if args.output == "-" or args.output.lower().endswith((".jsonl", ".ndjson")) else "parquet"
    settings = _settings(args)
    summary = export_index(settings.index_file, args.output, fmt, vectors=not args.no_vectors)
    out = sys.stderr if args.output == "-" else sys.stdout  # stdout may be the data itself
    if args.json:
        print(json.dumps(summary.to_dict(), indent=2, sort_keys=True), file=out)
    else:
        print(summary.line(), file=out)
    return EXIT_OK


def _cmd_eval(args: argparse.Namespace) -> int:
    from memory_core.evaluation import cmd_eval

    return cmd_eval(args)


COMMANDS = {
    "index": cmd_index, "search": cmd_search, "get": cmd_get, "status": cmd_status,
    "mcp": cmd_mcp, "watch": cmd_watch, "export": cmd_export, "eval": _cmd_eval,
}


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    _setup_logging()
    try:
        return COMMANDS[args.command](args)
    except MemoryCoreError as exc:
        if os.environ.get("MEMORY_CORE_DEBUG") == "1":
            raise
        print(f"memory-core: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except OSError as exc:  # disk full, read-only directory, vanished files: the live index is untouched
        if os.environ.get("MEMORY_CORE_DEBUG") == "1":
            raise
        where = f" ({exc.filename})" if getattr(exc, "filename", None) else ""
        print(f"memory-core: error: {exc.strerror or exc}{where}; the live index was left as it was",
              file=sys.stderr)
        return EXIT_FAIL
    except KeyboardInterrupt:
        print("memory-core: interrupted; the live index was left as it was", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
