"""The ``memory-core`` command: a thin layer over the library and the reindex flow.

Exit codes: 0 success, 2 usage or configuration error, 1 run failure. Errors a user causes
print one line on stderr, never a traceback (``MEMORY_CORE_DEBUG=1`` shows tracebacks).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import re
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, NoReturn, overload

from memory_core.errors import (
    MemoryCoreError,
    RunCancelled,
    RunError,
    UsageError,
    classify_error,
    note_folders,
)
from memory_core.secrets import scrub

if TYPE_CHECKING:
    from memory_core.api import Memory
    from memory_core.config import Settings
    from memory_core.index.runtypes import RunSummary
    from memory_core.notes.memory_store import MemoryStore
    from memory_core.runtime.resolve import ResolvedSettings

# A command imports what it uses when it runs (the settings model, the index, the providers), and
# building the parser imports none of them: `memory-core --version` loads no pydantic, no settings
# model, no query side and no importlib.metadata but for the version itself (tests/test_startup.py;
# bench/startup.py measures it).

EXIT_OK, EXIT_FAIL, EXIT_USAGE = 0, 1, 2
EXIT_BROKEN_PIPE = 128 + 13  # what a shell reports for a writer ended by SIGPIPE (`... | head`)


class _Parser(argparse.ArgumentParser):
    """``fill``: a command's parser whose flags are added by ``fill(parser)`` only when the command
    is parsed, its help or usage is shown or its actions are looked at: a command builds its own
    flags, not every command's (~140 flags, ~6 ms of each start; ``eval``'s need the settings model)."""

    def __init__(self, *args: Any, fill: Callable[[argparse.ArgumentParser], None] | None = None,
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._fill = fill

    @property
    def _actions(self) -> list[argparse.Action]:
        if self.__dict__.get("_fill") is not None:
            self._filled()
        found: list[argparse.Action] = self.__dict__["_all_actions"]
        return found

    @_actions.setter
    def _actions(self, value: list[argparse.Action]) -> None:
        self.__dict__["_all_actions"] = value

    def _filled(self) -> None:
        fill, self._fill = self._fill, None
        if fill is not None:
            fill(self)

    def parse_known_args(self, args: Sequence[str] | None = None,  # type: ignore[override]
                         namespace: argparse.Namespace | None = None) -> tuple[argparse.Namespace, list[str]]:
        self._filled()
        return super().parse_known_args(args, namespace)

    def format_usage(self) -> str:
        self._filled()
        return super().format_usage()

    def format_help(self) -> str:
        self._filled()
        return super().format_help()

    def error(self, message: str) -> NoReturn:  # argparse exits 2 on usage errors, as we want
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


class _Providers(Sequence[str]):
    """The ``--provider`` choices: memory_core.plugins.provider_names() (one list: the registry's,
    which the settings model checks against), read when a flag is checked or help is shown, so
    other commands do not read the installed entry points."""

    def _names(self) -> list[str]:
        from memory_core.plugins import provider_names

        return provider_names()

    def __contains__(self, name: object) -> bool:
        from memory_core.plugins import is_provider_name

        return isinstance(name, str) and is_provider_name(name)

    def __iter__(self) -> Iterator[str]:
        return iter(self._names())

    def __len__(self) -> int:
        return len(self._names())

    @overload
    def __getitem__(self, i: int) -> str: ...

    @overload
    def __getitem__(self, i: slice) -> Sequence[str]: ...

    def __getitem__(self, i: int | slice) -> str | Sequence[str]:
        return self._names()[i]


PROVIDERS = _Providers()


def _provider_flag(p: argparse.ArgumentParser, help: str) -> None:
    # the choices are set on the flag made: add_argument would list them at once (checking the metavar)
    p.add_argument("--provider", help=help).choices = PROVIDERS


class _Version(argparse.Action):
    """``--version``: the installed version, looked up (importlib.metadata) only when asked."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS,
                         help="show program's version number and exit", **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        print(f"{parser.prog} {_version()}")  # on stdout, as argparse's "version" action
        parser.exit()


SETTINGS_ORDER = ("settings come from, first found: a flag, a MEMORY_CORE_* variable, the config file (--config,"
                  " else $MEMORY_CORE_CONFIG, else <workspace>/memory-core.toml), what the live index recorded,"
                  " the defaults")


def _version() -> str:
    from importlib import metadata

    try:
        return metadata.version("memory-core")
    except metadata.PackageNotFoundError:  # pragma: no cover - running from a source tree
        return "unknown"


def _positive(value: str) -> int:
    try:
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid integer: {value!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, not {n}")
    return n


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", "-c", help="TOML config file (default: $MEMORY_CORE_CONFIG, else"
                                          " <workspace>/memory-core.toml when it exists)")
    p.add_argument("--workspace", "-w", help="workspace folder (default: $MEMORY_CORE_WORKSPACE, the config file's,"
                                             " the one the index was built from, else the current directory)")
    p.add_argument("--index", dest="index_path", help="index file (default: <workspace>/.memory-core/index.sqlite)")
    p.add_argument("--agent", default=None,
                   help="the agent whose workspace, index, qmd state and LanceDB folder the config file's [agents]"
                        " table gives (default: $MEMORY_CORE_AGENT, else agents.default; -w/--index given win)")


def _refuse_empty_path_flags(args: argparse.Namespace) -> None:
    """``-w ""`` / ``--index ""`` / ``-c ""`` (a script's ``-w "$WS"`` with the variable unset): one
    line, exit 2, before any command (``mcp`` took an empty workspace or index for "not given" and
    served the whole fleet; the others for the current folder; an empty ``-c`` read
    ``$MEMORY_CORE_CONFIG`` or the workspace's config file instead). The variables set but empty
    are unset, as before."""
    from memory_core.runtime.resolve import FLAG_NAMES, refuse_empty_config, refuse_empty_paths

    refuse_empty_paths({"workspace": getattr(args, "workspace", None),
                        "index_path": getattr(args, "index_path", None)}, FLAG_NAMES)
    refuse_empty_config(getattr(args, "config", None), "--config")


def _writer_flags(p: argparse.ArgumentParser) -> None:
    """The settings a writer (index, watch) may be told; unset ones keep what the index recorded."""
    _provider_flag(p, "embedding provider (default: the config file's, else the index's, else auto)")
    p.add_argument("--model", help="embedding model (default: the config file's, else the index's, else the"
                                   " provider's default)")
    p.add_argument("--extra-path", action="append", dest="extra_paths",
                   help="extra .md file or folder (repeatable; default: the config file's, else the index's)")
    p.add_argument("--sessions", action="store_true",
                   help="also index chat transcripts (sources memory + sessions; default: the config file's"
                        " sources, else the index's, else memory only)")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="memory-core", description="Index and search agent memory (Markdown notes and chat"
                     " transcripts). Readers (search, get, status, export, mcp) need only the index: the workspace,"
                     " sources and extra paths come from what it recorded. Writers (index, watch): " + SETTINGS_ORDER
                     + ".")
    parser.add_argument("--version", action=_Version)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser,
                                help="`memory-core COMMAND -h` describes its flags")
    sub.required = True

    sub.add_parser("index", help="build or update the index (runs the reindex flow)", fill=_index_flags)
    sub.add_parser("search", help="hybrid search with file and line citations", fill=_search_flags)
    sub.add_parser("get", help="print lines of an indexed file", fill=_get_flags)
    sub.add_parser("status", help="what the index holds, what it was built from, and how search and runs go",
                   fill=_status_flags)
    sub.add_parser("mcp", help="serve memory to agents over the Model Context Protocol (stdio or HTTP); with a"
                               " config that lists agents and no --agent/-w/--index, one server serves them all",
                   fill=_mcp_flags)
    sub.add_parser("watch", help="reindex whenever the sources change (debounced, one run at a time)",
                   fill=_watch_flags)
    sub.add_parser("export", help="write the index's chunks (text, lines, vectors) to Parquet or JSON Lines",
                   fill=_export_flags)
    sub.add_parser("write", help="append a note to today's daily note (or MEMORY.md) and index it at once",
                   fill=_write_flags)
    sub.add_parser("flush", help="is a memory flush due before this session is compacted? (and the prompts)",
                   fill=_flush_flags)
    sub.add_parser("memory", help="structured memories in the LanceDB store: store, recall, list, forget",
                   fill=_memory_flags)
    sub.add_parser("eval", help=EVAL_HELP, fill=_eval_flags)
    return parser


def _index_flags(p: argparse.ArgumentParser) -> None:
    _common(p)
    _writer_flags(p)
    p.add_argument("--full", action="store_true",
                   help="rebuild everything (vectors still come from the cache and the index: --re-embed embeds"
                        " them again)")
    p.add_argument("--re-embed", action="store_true",
                   help="rebuild everything and embed every chunk again through the provider (sync requests),"
                        " reading no vector from the embedding cache or the index; the fresh vectors replace the"
                        " cached ones (bad vectors a provider once answered). Implies --full")
    p.add_argument("--engine", choices=["auto", "prefect", "local"], default=None,
                   help="prefect: run the reindex flow; local: the same stages in-process; auto (default,"
                        " or $MEMORY_CORE_ENGINE): the flow when PREFECT_API_URL (environment or active Prefect"
                        " profile) names a server, else in-process (no 10-20 s temporary Prefect server per run)")
    p.add_argument("--json", action="store_true",
                   help="print the run summary as JSON (one object, with `error` when the run failed or could not run)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def _search_flags(p: argparse.ArgumentParser) -> None:
    _common(p)
    p.add_argument("query", help="what to look for (words, a phrase, a question)")
    p.add_argument("--max-results", "-n", type=_positive,
                   help="results to show, 1 or more; above 50 is clamped to 50 (default: query.max_results, 6)")
    p.add_argument("--min-score", type=float, help="the answer's threshold, 0-1: nothing is shown unless the best result reaches it;"
                        " the rest are listed down to query.result_floor (default: query.min_score)")
    p.add_argument("--source", action="append", dest="sources", choices=["memory", "sessions", "store"],
                   help="search only this source (repeatable; default: all the index holds; 'store': the LanceDB"
                        " memory store of `memory-core memory`, merged by score)")
    p.add_argument("--mode", choices=["hybrid", "vector", "keyword"],
                   help="hybrid (keyword + vector), vector or keyword only (default: query.mode, hybrid)")
    p.add_argument("--chat", choices=["direct", "group", "channel"], dest="chat_type",
                   help="where the answer goes; with query.citations = auto (the default) a group or channel chat"
                        " gets no citations")
    p.add_argument("--json", action="store_true", help="print the memory_search MCP tool's answer: {results, provider,"
                                                       " model, backend, mode, fallback, citations, note?}")
    p.add_argument("--lancedb", metavar="URI", help="search this LanceDB export (`export --format lancedb`) instead of"
                                                   " the index, with the same ranking")


def _get_flags(p: argparse.ArgumentParser) -> None:
    _common(p)
    p.add_argument("path", help="indexed path or citation as search prints it, e.g. memory/2026-11-02.md,"
                                " sessions/a.jsonl or memory/2026-11-02.md#L10-L20")
    p.add_argument("--from", dest="from_line", type=_positive, help="first line, 1-based (default 1)")
    p.add_argument("--lines", type=_positive, help="number of lines, 1 or more (default: up to 2000)")
    p.add_argument("--json", action="store_true", help="print the lines and where they come from as JSON")


def _status_flags(p: argparse.ArgumentParser) -> None:
    _common(p)
    p.add_argument("--sizes", action="store_true", help="split the index's bytes into text, FTS5 and B-tree"
                   " indexes too (reads the whole file)")
    p.add_argument("--json", action="store_true", help="print the status as JSON")


def _mcp_flags(p: argparse.ArgumentParser) -> None:
    _common(p)
    p.add_argument("--transport", choices=["stdio", "http"], default="stdio",
                   help="stdio (default; the client starts this command) or streamable HTTP on a loopback address")
    p.add_argument("--host", default="127.0.0.1", help="HTTP: loopback address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8765, help="HTTP: port (default 8765)")
    p.add_argument("--path", default="/mcp", help="HTTP: endpoint path (default /mcp)")


def _watch_flags(p: argparse.ArgumentParser) -> None:
    _common(p)
    _writer_flags(p)
    p.add_argument("--debounce", type=float, default=None, metavar="SECONDS",
                   help="start a run once the sources have been quiet this long, 0-3600 (default: [sync]"
                        " watch_debounce_ms, 1500 ms unless set)")
    p.add_argument("--deployment", default=os.environ.get("MEMORY_CORE_DEPLOYMENT"),
                   help="run this Prefect deployment of the reindex flow (needs PREFECT_API_URL, in the"
                        " environment or the active Prefect profile; default $MEMORY_CORE_DEPLOYMENT); it gets only"
                        " the workspace, the index and the flags given here; otherwise runs are in-process")
    p.add_argument("--no-initial-run", action="store_true", help="do not reindex at start-up")
    p.add_argument("--json", action="store_true", help="print each run as one JSON line")


def _export_flags(p: argparse.ArgumentParser) -> None:
    _common(p)
    p.add_argument("output", metavar="PATH", help="output file ('-' = stdout, JSON Lines only); lancedb: a folder or"
                                                  " an object-storage URI (s3://...)")
    p.add_argument("--format", "-f", choices=["parquet", "jsonl", "lancedb"],
                   help="default: from the name: .parquet/.pq -> parquet, .jsonl/.ndjson and '-' -> jsonl; lancedb:"
                        " a LanceDB table that `search --lancedb PATH` queries (docs/lancedb-index.md)")
    p.add_argument("--no-vectors", action="store_true", help="leave out the vector column")
    p.add_argument("--force", action="store_true",
                   help="replace an existing PATH that is not an earlier export (never the index, its lock or"
                        " the cache)")
    p.add_argument("--json", action="store_true", help="print the export summary as JSON")


def _write_flags(p: argparse.ArgumentParser) -> None:
    _common(p)
    p.add_argument("text", help="the note (Markdown); '-' reads it from stdin")
    p.add_argument("--path", help="MEMORY.md or memory/<name>.md in the workspace (default: today's"
                                  " memory/YYYY-MM-DD.md); any other path is refused")
    p.add_argument("--no-index", action="store_true", help="only write; the next reindex indexes it")
    p.add_argument("--json", action="store_true", help="print where it was written (path, lines, citation) as JSON")


def _flush_flags(p: argparse.ArgumentParser) -> None:
    _common(p)
    p.add_argument("session", help="the session's id (the key of the flush ledger)")
    how = p.add_mutually_exclusive_group(required=True)
    how.add_argument("--transcript", help="the session's JSONL transcript: tokens since the last compaction (chars/4)"
                                          " and the compaction cycle (its compaction records)")
    how.add_argument("--tokens", type=int, help="the session's token count, as the runtime estimates it")
    p.add_argument("--cycle", type=int, help="the compaction cycle (default: the transcript's compaction records,"
                                             " else 0)")
    p.add_argument("--record", action="store_true", help="when due, record the flush for this cycle in the ledger"
                                                         " (the next check of the cycle says it is done)")
    p.add_argument("--json", action="store_true", help="print the check, with both prompts, as JSON")


EVAL_HELP = "measure search quality on labelled queries (BEIR format)"  # add_eval_parser's (tests/test_startup.py)


def _eval_flags(parser: argparse.ArgumentParser) -> None:
    """``eval``'s description and flags: memory_core.apps.evaluation.add_eval_parser's, added to the
    parser `memory-core eval` already has (its ``--fusion`` choices come from the settings model)."""
    from memory_core.apps.evaluation import add_eval_parser

    class _Into:  # the subparsers add_eval_parser adds to: hands it this parser back
        @staticmethod
        def add_parser(name: str, *, help: str | None = None, **kwargs: Any) -> argparse.ArgumentParser:
            for key, value in kwargs.items():  # description
                setattr(parser, key, value)
            return parser

    add_eval_parser(_Into())


def _memory_flags(mp: argparse.ArgumentParser) -> None:
    """`memory-core memory store|recall|list|forget`: the LanceDB memory store (memory_core.notes.memory_store)."""
    from memory_core.notes import CATEGORIES, DEFAULT_IMPORTANCE

    msub = mp.add_subparsers(dest="memory_command", metavar="ACTION", parser_class=_Parser, required=True,
                             help="`memory-core memory ACTION -h` describes its flags")

    def common(p: argparse.ArgumentParser) -> None:
        _common(p)
        p.add_argument("--store", dest="store_path", help="LanceDB folder (default: the agent's lancedb_path, else lancedb/ beside"
                                                         " the index)")
        p.add_argument("--json", action="store_true", help="print the MCP tool's answer as JSON")

    p = msub.add_parser("store", help="save a memory (a near-identical one is updated instead)")
    common(p)
    p.add_argument("text", help="what to remember")
    p.add_argument("--importance", type=float,
                   help=f"0-1 (default {DEFAULT_IMPORTANCE}; an updated memory keeps its own)")
    p.add_argument("--category", help=f"one of {', '.join(CATEGORIES)} (default other; an updated memory keeps"
                                      " its own)")
    _provider_flag(p, "embedding provider (default: as for search)")
    p.add_argument("--model", help="embedding model (default: as for search)")
    p = msub.add_parser("recall", help="memories matching a query (vector + full text), best first")
    common(p)
    p.add_argument("query", help="what to recall (words, a question)")
    p.add_argument("--category", action="append", dest="categories", help="only this category (repeatable)")
    p.add_argument("--max-results", "-n", type=_positive, help="default: query.max_results")
    p.add_argument("--min-score", type=float, help="0-1 (default: query.min_score)")
    p.add_argument("--mode", choices=["hybrid", "vector", "keyword"], help="default: query.mode (hybrid)")
    _provider_flag(p, "embedding provider (default: as for search)")
    p.add_argument("--model", help="embedding model (default: as for search)")
    p = msub.add_parser("list", help="memories, newest first")
    common(p)
    p.add_argument("--category", help="only this category")
    p.add_argument("--limit", type=_positive, help="at most this many")
    p = msub.add_parser("forget", help="delete one memory by id")
    common(p)
    p.add_argument("id", help="the memory's id (as list, store and recall print it)")




def _resolve(args: argparse.Namespace, **told: Any) -> ResolvedSettings:
    """The one settings order (memory_core.runtime.resolve.resolve_settings), told the flags given."""
    from memory_core.runtime.resolve import FLAG_NAMES, resolve_settings

    resolved = resolve_settings({"workspace": args.workspace, "index_path": args.index_path, **told},
                                config_file=args.config, told_by=FLAG_NAMES, agent=getattr(args, "agent", None))
    s = resolved.settings
    note_folders(s.index_file.parent, s.cache_file.parent)  # a SQLite I/O error is read against their room
    return resolved


def _settings(args: argparse.Namespace, **told: Any) -> Settings:
    return _resolve(args, **told).settings


def _writer_told(args: argparse.Namespace) -> dict[str, object]:
    """What the flags of a writer tell (None: not told)."""
    return {"provider": args.provider, "model": args.model, "extra_paths": args.extra_paths,
            "sources": ["memory", "sessions"] if args.sessions else None}


def _report_changes(resolved: ResolvedSettings) -> None:
    for ch in resolved.changes:
        print(f"memory-core: {ch.line()}", file=sys.stderr)


def _setup_logging(verbose: bool = False) -> None:
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING, format="%(levelname)s %(message)s")


class _NotRunWarnings(logging.Filter):
    """Drops the log records that repeat a run's warnings: `index` prints them after its summary."""

    def filter(self, record: logging.LogRecord) -> bool:
        from memory_core.index.pipeline import RUN_WARNING

        return not getattr(record, RUN_WARNING, False)


def cmd_index(args: argparse.Namespace) -> int:
    """``memory-core index``. A stop ends it as a stopped run from its start, as it does in the run
    itself (SIGTERM: exit 1, Ctrl-C: 130; one line; with ``--json`` one object naming the stop in
    ``stopped``): in the start-up (settings, provider, Prefect) and the wait for another run's
    writer lock a SIGTERM killed the process with no word (exit 143), and a Ctrl-C printed no JSON."""
    import signal

    _keep_stops_off_the_exit()
    # a stop waits while the run's modules load (~0.2 s), then is the command's, as every other one
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        from memory_core.index.pipeline import check_index_folder, command_stops
        from memory_core.index.runtypes import is_stop
        from memory_core.runtime.engines import choose_engine
    except BaseException:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        raise
    settings: Settings | None = None
    running = False  # the run was started: its failures, not only its stops, are said in the JSON
    summary: RunSummary | None = None  # the run ended: what it did is said (a stop meanwhile goes with it)
    try:
        with command_stops():  # (a stop leaves it as RunCancelled or KeyboardInterrupt, whatever wrapped it on the way)
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)  # a stop that waited is delivered here
            check_index_folder(args.index_path)  # a typed path's folder must exist, as export's output's

            resolved = _resolve(args, **_writer_told(args))
            settings = resolved.settings
            if not settings.workspace_dir.is_dir():
                raise UsageError(f"workspace not found: {settings.workspace_dir}")
            _report_changes(resolved)
            # (argparse checks a flag's value; the variable's is checked here, with its name)
            engine = choose_engine(args.engine or os.environ.get("MEMORY_CORE_ENGINE") or "auto",
                                   requested_by="--engine" if args.engine else "$MEMORY_CORE_ENGINE")
            quiet = _NotRunWarnings()
            for h in logging.getLogger().handlers:  # each warning once: in the list printed below
                h.addFilter(quiet)
            running = True
            summary = _index_prefect(settings, args) if engine.engine == "prefect" else _index_local(settings, args)
            return _say_summary(summary, args)
    except BaseException as exc:  # stopped or failed: with --json, what it did all the same (published or not)
        if summary is None and args.json and (running or is_stop(exc)):
            _say_json_of_failure(exc, settings, args)
        raise
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)


def _say_json_of_failure(exc: BaseException, settings: Settings | None, args: argparse.Namespace) -> None:
    """``index --json`` of a run that failed or was stopped: one object, the run's summary (with
    ``error``) when it has one, else what a script needs to know (``index_path``, ``swapped``,
    ``error``, ``stopped``). ``stopped`` names what stopped it (as after a publish), "" for a failure."""
    from memory_core.index.pipeline import stop_word
    from memory_core.index.run_stops import stops_held
    from memory_core.index.runtypes import is_stop

    stopped = stop_word(exc) if is_stop(exc) else ""
    # in the words of the error line (a Ctrl-C's KeyboardInterrupt has none of its own)
    said = str(exc) if isinstance(exc, MemoryCoreError) or not stopped else f"{stopped}; the live index was left as it was"
    partial = getattr(exc, "run_summary", None)
    if partial is not None:
        if not partial.stopped:
            partial.stopped = stopped
        out = partial.to_dict()
        if not partial.swapped and not partial.error:
            out["error"] = said
    elif isinstance(exc, MemoryCoreError) or stopped:
        # no run to sum up (another run held the index, the provider could not be made, a stop before
        # the run had begun): the same one object a script parses, saying so
        index = str(settings.index_file) if settings is not None else \
            os.path.abspath(os.path.expanduser(args.index_path)) if args.index_path else ""
        out = {"index_path": index, "swapped": False, "error": scrub(said), "stopped": stopped}
    else:
        return
    with stops_held(redeliver=False):  # a second stop while the first is said is the same stop
        print(json.dumps(out, indent=2, sort_keys=True))


def _say_summary(summary: RunSummary, args: argparse.Namespace) -> int:
    """Print the summary of a run that ended. A stop (Ctrl-C, SIGTERM) while it is printed waits
    until the output is whole (the JSON was cut off, or never printed), then ends the command as a
    run stopped after its publish: the summary, with what stopped it, goes with the stop (exit 130,
    or 1 for SIGTERM, and its line)."""
    from memory_core.index.pipeline import stop_word
    from memory_core.index.run_stops import stops_held
    from memory_core.index.runtypes import is_stop

    try:
        with stops_held():
            if args.json:
                print(json.dumps(summary.to_dict(), indent=2, sort_keys=True))
            else:
                for line in summary.lines():
                    print(line)
                for w in summary.warnings:
                    print(f"warning: {w}", file=sys.stderr)
        return EXIT_OK
    except BaseException as exc:
        if is_stop(exc) and summary.swapped:  # the run is done and published: its summary goes with the stop
            summary.stopped = stop_word(exc)
            exc.run_summary = summary  # type: ignore[attr-defined]
        raise


_EXIT_KEPT: list[bool] = []


def _keep_stops_off_the_exit() -> None:
    """Once the command has said its piece, a SIGINT or SIGTERM cannot cut the interpreter's exit
    short: in its last step, the teardown of the modules (~0.5 s after a run), Python has put back
    the signals' default action, and a Ctrl-C there ended a published run's ``index --json``
    with exit -2 and no line (its output was whole). Registered when the command starts, the
    callback runs after the ones its run registers (atexit runs them last first): Prefect's and
    the executors' clean-up are not held; the teardown ignores the stop and exits with the
    command's code."""
    if _EXIT_KEPT:
        return
    import atexit

    _EXIT_KEPT.append(True)
    atexit.register(_ignore_stops_from_now)


def _ignore_stops_from_now() -> None:
    import signal

    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(ValueError, OSError):  # (ValueError: not the main thread)
            signal.signal(sig, signal.SIG_IGN)


def _progress_bar(enabled: bool) -> tuple[Any, Callable[[], None]]:
    """One bar for the whole run, in chunks, with chunks/s and an ETA, moved by every file
    chunked and every embedding request that returns."""
    if not enabled:
        return None, lambda: None
    from tqdm import tqdm

    from memory_core.index.runtypes import Progress

    bar: Any = None

    def progress(p: Progress) -> None:
        nonlocal bar
        if bar is None:
            bar = tqdm(total=p.total_estimate, desc=p.phase, unit="chunk", leave=False, file=sys.stderr,
                       dynamic_ncols=True)
        bar.set_description(p.phase, refresh=False)
        bar.total = max(p.total_estimate, p.ready)
        if p.cost_usd is not None:
            bar.set_postfix_str(f"${p.cost_usd:.4f}", refresh=False)
        bar.update(p.ready - bar.n)

    def close() -> None:
        if bar is not None:
            bar.close()

    return progress, close


def _index_local(settings: Settings, args: argparse.Namespace) -> RunSummary:
    from memory_core.api import Memory
    from memory_core.index.pipeline import stop_word
    from memory_core.index.runtypes import is_stop

    progress, close = _progress_bar(not args.no_progress and sys.stderr.isatty())
    done: RunSummary | None = None
    try:
        with Memory(settings, refresh=False) as memory:  # the front door's in-process run
            done = memory.index(full=args.full, progress=progress, re_embed=args.re_embed)
        return done
    except BaseException as exc:
        # a stop as the provider closes, after the run returned (a SIGTERM there killed the
        # process): a run that published says so, with its summary, as one stopped after its publish
        if done is not None and done.swapped and is_stop(exc) and getattr(exc, "run_summary", None) is None:
            done.stopped = stop_word(exc)
            exc.run_summary = done  # type: ignore[attr-defined]
        raise
    finally:
        close()


def _index_prefect(settings: Settings, args: argparse.Namespace) -> RunSummary:
    from memory_core.index.indexer import asked_for
    from memory_core.runtime.engines import require_engine

    engine = require_engine(needed_by="--engine prefect")
    progress, close = _progress_bar(not args.no_progress and sys.stderr.isatty())
    try:
        # the flow runs on these settings (resolved once); its parameters record the flags given
        # a run asked for: every transcript that grew is indexed (as --engine local's Memory.index)
        return engine.run_reindex(asked_for(settings), config_file=args.config, told=_writer_told(args), full=args.full,
                                  re_embed=args.re_embed, progress=progress,
                                  on_start=lambda url: print(f"flow run: {url}", file=sys.stderr, flush=True))
    except MemoryCoreError:
        raise
    except RuntimeError as exc:  # Prefect could not start or reach its API
        raise RunError(f"Prefect: {exc} (is PREFECT_API_URL right? `--engine local` runs without Prefect)") from exc
    finally:
        close()


# what a terminal acts on instead of showing: C0 controls but tab and newline (ESC starts the
# sequences that set the clipboard, retitle the window or erase a line; CR overwrites it), DEL, C1
_TERMINAL_CONTROLS = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]|\r(?!\n)")  # CRLF is a line end


def _shown(text: str) -> str:
    """``text`` with what a terminal would act on shown as ``\\xNN``: memory text is written by
    agents and others, and a search, a recall or a list printed an OSC 52 clipboard write, a window
    title or an erase-line raw to the person reading (the fortieth session's audit H5)."""
    return _TERMINAL_CONTROLS.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def cmd_search(args: argparse.Namespace) -> int:
    if args.min_score is not None and not 0 <= args.min_score <= 1:
        raise UsageError(f"--min-score must be between 0 and 1, not {args.min_score:g}")
    with contextlib.ExitStack() as stack:
        store = None
        if args.lancedb:  # an export of the index in LanceDB (past one machine), ranked as the index is
            from memory_core.query.lancedb import LanceSearcher

            s = stack.enter_context(LanceSearcher(_settings(args), args.lancedb))
            if args.sources and "store" in args.sources:
                store = stack.enter_context(_memory_store(s.settings))
            res = s.search_response(args.query, max_results=args.max_results, min_score=args.min_score,
                                    sources=args.sources, mode=args.mode, chat_type=args.chat_type, extra=store)
        else:  # the front door: a one-shot Memory (no reindex, no watch; it says when the index is stale);
            # with "store" among the sources it merges the agent's LanceDB memory store by score
            memory = stack.enter_context(_memory(args))
            res = memory.answer(args.query, max_results=args.max_results, min_score=args.min_score,
                                sources=args.sources, mode=args.mode, chat_type=args.chat_type)
    if args.json:
        print(json.dumps(res.to_dict(), indent=2, ensure_ascii=False))
        return EXIT_OK
    if res.note:
        print(f"note: {res.note}", file=sys.stderr)
    if not res.results:
        print("no results")
    for r in res.results:
        # a group or channel chat gets no citations (query.citations = auto): say so where one stands
        cite = r["citation"] or f"(no citation: a {args.chat_type or 'group'} chat)"
        print(_shown(f"{cite}  score {r['score']:.3f}  {r['match']}" + (f"  {r['date']}" if r["date"] else "")
                     + f"  [{r['source']}]"))
        for line in r["snippet"].split("\n")[:12]:
            print(f"    {_shown(line.removesuffix(chr(13)))}")
        print()
    return EXIT_OK


def _memory(args: argparse.Namespace, *, refresh: bool = False) -> Memory:
    """The :class:`memory_core.api.Memory` of the command's settings (resolved as every entry
    point resolves them); a command is a one-shot reader: no sync triggers."""
    from memory_core.api import Memory

    settings = _settings(args)
    if not settings.workspace_dir.is_dir() and not settings.index_file.exists():
        # neither the workspace nor its index: a mistyped -w, not an index to build
        raise UsageError(f"workspace not found: {settings.workspace_dir}")
    return Memory(settings, refresh=refresh)


def _memory_store(settings: Settings) -> MemoryStore:
    from memory_core.notes.memory_store import MemoryStore

    return MemoryStore(settings)


def cmd_get(args: argparse.Namespace) -> int:
    with _memory(args) as memory:  # the path may be a citation as search prints it: path#L10-L20
        got = memory.read(args.path, from_line=args.from_line, lines=args.lines)
    if got.lines == 0 and got.start_line > 1:
        raise UsageError(got.note or f"line {got.start_line} is past the end of {got.path}")
    if args.json:
        print(json.dumps(got.to_dict(), indent=2, ensure_ascii=False))
    else:
        # the file's text as it is for a pipe or a file (scripts read it); a person's terminal sees
        # what it would act on escaped (_shown)
        print(_shown(got.text) if sys.stdout.isatty() else got.text)
        if got.note:  # the text is the file's; the note (it changed since indexed) goes beside it
            print(f"memory-core: note: {got.note}", file=sys.stderr)
    return EXIT_OK


def cmd_status(args: argparse.Namespace) -> int:
    from memory_core.runtime.engines import choose_engine

    with _memory(args) as memory:
        status = memory.status(measure=args.sizes)
    st = status.to_dict()  # with what the index was built from: what readers use, and writers keep
    # which engine `memory-core index` would use (--engine not given) and why
    requested = os.environ.get("MEMORY_CORE_ENGINE") or "auto"
    try:
        st["index_engine"] = choose_engine(requested, requested_by="$MEMORY_CORE_ENGINE").line()
    except UsageError as exc:  # a bad variable is what status is asked to show
        st["index_engine"] = str(exc)
    if args.json:
        print(json.dumps(st, indent=2, sort_keys=True, default=str))
    else:
        if status.built_at is not None:  # milliseconds since the epoch (kept so in --json)
            st["built_at"] = _local_time(status.built_at / 1000)
        for k, v in st.items():
            if isinstance(v, dict) and k == "built_from":
                print(f"{k}:")
                for k2, v2 in v.items():
                    print(f"  {k2}: {v2}")
            elif k == "stopped_flow_runs" and isinstance(v, list):  # one line a run
                print(f"{k}: {len(v)}")
                for r in v:
                    print(f"  {r.get('run') or '?'} ({r.get('flow') or 'flow'} run {r.get('flow_run_id')}; host"
                          f" {r.get('host')}, pid {r.get('pid')}, started {r.get('started')})")
            elif k == "re_embed_pending":  # said only when there is one, as one line
                if v:
                    print(f"{k}: {st.get('re_embed_pending_note') or v}")
            elif k == "re_embed_pending_note":
                pass
            elif isinstance(v, dict) and k == "sizes":  # one line per purpose: bytes, then what they are for
                from memory_core.query.search import SIZE_LINES

                print(f"{k}:")
                for k2, v2 in v.items():
                    print(f"  {k2}: {v2 / 2**20:,.1f} MiB - {SIZE_LINES.get(k2, '')}")
            else:
                print(f"{k}: {v}")
    return EXIT_OK if status.state == "ok" else EXIT_FAIL


def _local_time(seconds: float) -> str:
    """``2026-11-26 15:01:55 +0100`` (local time)."""
    import datetime as _dt

    try:
        return _dt.datetime.fromtimestamp(seconds).astimezone().strftime("%Y-%m-%d %H:%M:%S %z")
    except (OverflowError, OSError, ValueError):
        return str(seconds)


def _fleet(args: argparse.Namespace) -> dict[str, Settings] | None:
    """Every agent of the config file, when `mcp` is told no agent, workspace or index (by a
    flag or by ``$MEMORY_CORE_WORKSPACE`` / ``$MEMORY_CORE_INDEX``, as every other command reads
    them) and the config lists agents: one server then serves them all."""
    from memory_core.config import _env_layer
    from memory_core.runtime.agents import requested_agent

    if requested_agent(args.agent) or args.workspace or args.index_path or _env_layer(os.environ).keys() & {
            "workspace", "index_path"}:
        return None
    path = args.config or os.environ.get("MEMORY_CORE_CONFIG")
    if not path:
        return None
    from memory_core.config import read_config_file
    from memory_core.runtime.agents import agents_of
    from memory_core.runtime.resolve import resolve_agents

    if not agents_of(read_config_file(path)).ids:
        return None
    return resolve_agents(path)


def cmd_mcp(args: argparse.Namespace) -> int:
    fleet = _fleet(args)
    settings = next(iter(fleet.values())) if fleet else _settings(args)
    try:
        from memory_core.apps import mcp_server  # the MCP entry point: the CLI hands over
    except ImportError as exc:
        raise UsageError(f"the MCP server needs the mcp package ({exc.name} is not installed): pip install 'mcp>=2.3'") from None
    if args.transport == "http":
        mcp_server.check_host(args.host)
    for s in (list(fleet.values()) if fleet else [settings]):
        if not s.index_file.exists():
            print(f"memory-core: warning: no index at {s.index_file} yet"
                  + (f" (agent {s.agent})" if s.agent else "") + "; tools answer with an error until"
                  " `memory-core index` (or `watch`) builds it", file=sys.stderr)
    if fleet:
        print(f"memory-core: serving agents {', '.join(fleet)} (each call names its agent)", file=sys.stderr)
    if args.transport == "http":
        host = f"[{args.host}]" if ":" in args.host else args.host
        print(f"memory-core: MCP server on http://{host}:{args.port}{args.path}", file=sys.stderr)
    mcp_server.serve(settings, transport=args.transport, host=args.host, port=args.port, path=args.path,
                     agents=fleet)
    return EXIT_OK


def cmd_watch(args: argparse.Namespace) -> int:
    from memory_core.index.pipeline import check_index_folder

    check_index_folder(args.index_path)
    resolved = _resolve(args, **_writer_told(args))
    settings = resolved.settings
    if not settings.workspace_dir.is_dir():
        raise UsageError(f"workspace not found: {settings.workspace_dir}")
    _report_changes(resolved)
    from memory_core.apps.watch import run_watch  # the watch entry point: the CLI hands over

    told = {k: v for k, v in _writer_told(args).items() if v is not None}
    debounce = settings.sync.watch_debounce_ms / 1000 if args.debounce is None else args.debounce
    # the config file this watcher resolved (-c, else $MEMORY_CORE_CONFIG, else the workspace's), absolute:
    # with only -c passed on, a watcher configured by the variable sent none, and the worker resolved the
    # run against its own environment (`unknown agent 'ops': no config file names agents`)
    config_file = str(resolved.config_file.resolve()) if resolved.config_file else None
    run_watch(settings, debounce=debounce, initial_run=not args.no_initial_run, deployment=args.deployment,
              config_file=config_file, told=told, as_json=args.json)
    return EXIT_OK


def cmd_export(args: argparse.Namespace) -> int:
    from memory_core.export.files import export_index

    fmt = args.format
    if fmt is None:
        name = args.output.lower()
        if args.output == "-" or name.endswith((".jsonl", ".ndjson")):
            fmt = "jsonl"
        elif name.endswith((".parquet", ".pq")):
            fmt = "parquet"
        else:
            raise UsageError(f"cannot tell the format of {args.output!r} from its name: use .parquet, .pq, .jsonl"
                             " or .ndjson, or --format")
    settings = _settings(args)
    if fmt == "lancedb":
        from memory_core.export.lancedb import export_lancedb

        # another export of the folder under way: wait for it, or fail naming it, as the index's lock
        summary = export_lancedb(settings.index_file, args.output, force=args.force, vectors=not args.no_vectors,
                                 wait=settings.lock.wait, timeout_s=settings.lock.timeout_s)
    else:
        summary = export_index(settings.index_file, args.output, fmt, vectors=not args.no_vectors,
                               force=args.force, protect=(settings.cache_file,))
    out = sys.stderr if args.output == "-" else sys.stdout  # stdout may be the data itself
    try:
        if args.json:
            print(json.dumps(summary.to_dict(), indent=2, sort_keys=True), file=out)
        else:
            print(summary.line(), file=out)
    except KeyboardInterrupt as exc:  # the export is in place: not "left as it was"
        exc.command_done = f"exporting to {args.output} (the export is in place)"  # type: ignore[attr-defined]
        raise
    return EXIT_OK


def _read_stdin_text(limit: int) -> str:
    """At most ``limit`` + 1 characters of stdin (the note's trailing newline may be the one
    more); UsageError, stdin left unread, if more is waiting: an endless or huge stdin was held
    in memory whole before the write refused it."""
    text = sys.stdin.read(limit + 1)
    if len(text) > limit and sys.stdin.read(1):
        raise UsageError(f"memory_write takes at most {limit} characters at once, not {limit + 2} or more"
                         " (stdin was read no further); nothing was written")
    return text


def cmd_write(args: argparse.Namespace) -> int:
    from memory_core.notes.write import MAX_WRITE_CHARS, write_memory

    text = _read_stdin_text(MAX_WRITE_CHARS) if args.text == "-" else args.text
    settings = _settings(args)
    if not settings.workspace_dir.is_dir():
        raise UsageError(f"workspace not found: {settings.workspace_dir}")
    res = None
    said = False
    try:
        res = write_memory(settings, text, args.path, index=not args.no_index)
        _say_written(res, args.json)
        said = True
    except BaseException as exc:
        # stopped once the note was written (in the reindex, or as its result was being said): what
        # was written, then the stop's line and exit
        written = getattr(exc, "write_result", None) or res
        if written is None or said:
            raise
        with contextlib.suppress(Exception):
            _say_written(written, args.json)
        raise
    return EXIT_OK


def _say_written(res: Any, as_json: bool) -> None:
    if as_json:
        print(json.dumps(res.to_dict(), indent=2, ensure_ascii=False), flush=True)
    else:
        print(f"wrote {res.citation}" + (" (secrets masked)" if res.redacted else "")
              + ("; indexed" if res.indexed else ""), flush=True)
        if res.note:
            print(f"note: {res.note}", file=sys.stderr, flush=True)


def cmd_flush(args: argparse.Namespace) -> int:
    from memory_core.notes.flush import check_flush, take_back

    settings = _settings(args)
    res = check_flush(settings, args.session, tokens=args.tokens, transcript=args.transcript,
                      cycle=args.cycle, record=args.record)
    try:
        if args.json:
            print(json.dumps(res.to_dict(), indent=2, ensure_ascii=False), flush=True)
        else:
            print(f"{'due' if res.due else 'not due'}: {res.reason}" + (" (recorded)" if res.recorded else ""))
            if res.due:
                print(f"system prompt: {res.system_prompt}")
                print(f"prompt: {res.prompt}", flush=True)
    except BaseException:
        take_back(settings, res)  # a record whose answer did not reach the caller would lose the flush
        raise
    return EXIT_OK


def cmd_memory(args: argparse.Namespace) -> int:
    from memory_core.notes.memory_store import MemoryStore

    # --store is the agent's LanceDB folder for this call: resolved with the agent's settings, so
    # the agents' isolation check sees it (another agent's store is refused, as the API refuses it)
    told = {"provider": getattr(args, "provider", None), "model": getattr(args, "model", None),
            "lancedb_path": os.path.abspath(os.path.expanduser(args.store_path)) if args.store_path else None}
    settings = _settings(args, **told)
    if getattr(args, "min_score", None) is not None and not 0 <= args.min_score <= 1:
        raise UsageError(f"--min-score must be between 0 and 1, not {args.min_score:g}")
    with MemoryStore(settings, path=args.store_path) as store:
        act = args.memory_command
        if act == "store":
            data = store.store(args.text, args.importance, args.category).to_dict()
            line = f"{data['action']} {data['id']}" + (" (secrets redacted)" if data["redacted"] else "")
            lines = [line + (f"; it replaced: {data['previousText']}" if data["action"] == "updated" else "")]
        elif act == "recall":
            rec = store.recall(args.query, max_results=args.max_results, min_score=args.min_score,
                               categories=args.categories, mode=args.mode)
            data = {"results": [h.to_agent() for h in rec.hits], **({"note": rec.note} if rec.note else {})}
            lines = [f"{h.memory.id}  score {h.score:.3f}  {h.match}  [{h.memory.category}"
                     f" {h.memory.importance:.2f}]  {h.memory.text}" for h in rec.hits] or ["no results"]
            if rec.note:
                print(f"note: {rec.note}", file=sys.stderr)
        elif act == "list":
            mems = store.list(args.category, args.limit)
            data = {"memories": [m.to_dict() for m in mems], "count": len(mems)}
            lines = [f"{m.id}  [{m.category} {m.importance:.2f}]  {m.text}" for m in mems] or ["no memories"]
        else:
            data = {"action": "deleted", "id": args.id, "memory": store.forget(args.id).to_dict()}
            lines = [f"deleted {args.id}"]
    print(json.dumps(data, indent=2, ensure_ascii=False) if args.json else "\n".join(map(_shown, lines)))
    return EXIT_OK


def _cmd_eval(args: argparse.Namespace) -> int:
    from memory_core.apps.evaluation import cmd_eval

    return cmd_eval(args)


COMMANDS = {
    "index": cmd_index, "search": cmd_search, "get": cmd_get, "status": cmd_status,
    "mcp": cmd_mcp, "watch": cmd_watch, "export": cmd_export, "eval": _cmd_eval, "write": cmd_write,
    "flush": cmd_flush, "memory": cmd_memory,
}


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    _setup_logging()
    try:
        return _run(args)
    except BaseException as exc:
        if not _is_broken_pipe(exc):
            raise
        # `memory-core search ... | head -1`: the reader left; nothing went wrong here. Quiet, and
        # stdout pointed at /dev/null so the interpreter's last flush does not complain either.
        with contextlib.suppress(OSError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        return EXIT_BROKEN_PIPE


def _is_broken_pipe(exc: BaseException) -> bool:
    """A BrokenPipeError, or a group of nothing else (a client gone from the MCP server)."""
    if isinstance(exc, BrokenPipeError):
        return True
    if isinstance(exc, BaseExceptionGroup):
        return all(_is_broken_pipe(e) for e in exc.exceptions)
    return False


# Commands whose stops (SIGTERM as well as Ctrl-C) the CLI turns into one line itself
# (``run_stops.command_stops``): ``index`` enters it itself, ``watch`` and ``export`` have their own
# handlers; ``search``, ``get`` and ``status`` change nothing a stop could leave half-done.
_STOPPED_HERE = frozenset({"write", "flush", "memory", "eval", "mcp"})


# Commands that only read the index: an error of theirs does not say the index was left as it was;
# those that change nothing at all are only "interrupted" by a Ctrl-C (export: its file was left as it was).
_READS_ONLY = frozenset({"search", "get", "status", "export"})
_CHANGES_NOTHING = _READS_ONLY - {"export"}


def _run(args: argparse.Namespace) -> int:
    try:
        _refuse_empty_path_flags(args)
        if args.command in _STOPPED_HERE:
            from memory_core.index.run_stops import command_stops

            with command_stops():  # before: a SIGTERM killed these with no line (exit 143), done or not
                return COMMANDS[args.command](args)
        return COMMANDS[args.command](args)
    except MemoryCoreError as exc:
        if os.environ.get("MEMORY_CORE_DEBUG") == "1":
            raise
        if (done := _done(exc)) is not None:  # stopped after it changed something: what it had done
            why = exc.why if isinstance(exc, RunCancelled) else str(exc)  # (not its "left as it was")
            print(f"memory-core: {scrub(why)} after {done}", file=sys.stderr)
        elif _published(exc):  # stopped (SIGTERM) after the new index went live: not an error of the index
            print(f"memory-core: {scrub(str(exc))}", file=sys.stderr)
        else:
            print(f"memory-core: error: {scrub(str(exc))}{_partial(exc)}", file=sys.stderr)
        return exc.exit_code
    except OSError as exc:  # disk full, read-only directory, vanished files: the live index is untouched
        if os.environ.get("MEMORY_CORE_DEBUG") == "1" or isinstance(exc, BrokenPipeError):
            raise
        where = f" ({exc.filename})" if getattr(exc, "filename", None) else ""
        kept = "" if args.command in _READS_ONLY else "; the live index was left as it was"
        print(f"memory-core: error: {exc.strerror or exc}{where}{kept}", file=sys.stderr)
        return EXIT_FAIL
    except KeyboardInterrupt as exc:
        published = _published(exc)
        if (done := _done(exc)) is not None:
            print(f"memory-core: interrupted after {done}", file=sys.stderr)
        elif published is not None:  # Ctrl-C after the new index went live: it says so (exit 130 all the same)
            print(f"memory-core: {published.stop_note()}", file=sys.stderr)
        elif args.command in _CHANGES_NOTHING:
            print("memory-core: interrupted", file=sys.stderr)
        else:
            print(f"memory-core: interrupted; the live index was left as it was{_partial(exc)}", file=sys.stderr)
        return 130
    except Exception as exc:  # a library error (SQLite disk full, ...): one line, see errors.classify_error
        mapped = classify_error(exc, changes=args.command not in _READS_ONLY)
        if mapped is None or os.environ.get("MEMORY_CORE_DEBUG") == "1" or _is_broken_pipe(exc):
            raise
        print(f"memory-core: error: {scrub(str(mapped))}{_partial(exc)}", file=sys.stderr)
        return mapped.exit_code


def _done(exc: BaseException) -> str | None:
    """What a command stopped after a change had done (``command_done``: "stored memory 3f2a..."),
    said instead of "left as it was"."""
    done = getattr(exc, "command_done", None)
    return done if isinstance(done, str) and done else None


def _published(exc: BaseException) -> RunSummary | None:
    """The summary of a run stopped after it published its index (``run_summary.swapped``)."""
    partial = getattr(exc, "run_summary", None)
    return partial if partial is not None and partial.swapped else None


def _partial(exc: BaseException) -> str:
    """What a run that did not finish had embedded (``run_summary`` from the orchestrator), as
    the end of its one error line."""
    partial = getattr(exc, "run_summary", None)
    return "" if partial is None else partial.unfinished_note()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
