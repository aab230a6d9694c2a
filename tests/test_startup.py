"""What the CLI imports before it knows the command (issue 38: a command imports only what it uses).

A test of imports, not of timings: bench/startup.py measures the time (bench/results/startup-*.md).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

# What neither `import memory_core.apps.cli` nor `memory-core --version` may load: the settings model
# (pydantic), the query side, the index, the providers, the eval command, numpy and apsw.
HEAVY = ("pydantic", "pydantic_core", "memory_core.config", "memory_core.query", "memory_core.index",
         "memory_core.storage", "memory_core.embeddings", "memory_core.runtime.resolve", "memory_core.api",
         "memory_core.apps.evaluation", "numpy", "apsw", "prefect", "torch", "sentence_transformers", "openai")


def _loaded_after(code: str, also: tuple[str, ...] = ()) -> tuple[list[str], str]:
    """The HEAVY (and ``also``) modules, or their submodules, in sys.modules after ``code`` runs in
    a fresh interpreter of this checkout, and what ``code`` printed."""
    probe = (f"import sys\ntry:\n    {code}\nexcept SystemExit:\n    pass\n"
             f"heavy = {HEAVY + also!r}\n"
             "print('\\nLOADED', *sorted(m for m in sys.modules if any(m == h or m.startswith(h + '.') for h in heavy)))\n")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=ROOT).stdout
    printed, _, loaded = out.rpartition("\nLOADED")
    return loaded.split(), printed


def test_importing_the_cli_loads_no_settings_model_and_no_query_side() -> None:
    # nor the installed packages' metadata: the --provider choices are read when a flag is checked
    loaded, _ = _loaded_after("import memory_core.apps.cli", also=("importlib.metadata",))
    assert loaded == []


def test_version_loads_no_settings_model_and_no_query_side() -> None:
    loaded, printed = _loaded_after("from memory_core.apps.cli import main; main(['--version'])")
    assert loaded == []
    assert printed.strip().startswith("memory-core ")  # and it still prints the version, on stdout


def test_usage_errors_load_no_settings_model() -> None:
    """A mistyped command or flag is answered from the parser alone."""
    loaded, _ = _loaded_after("from memory_core.apps.cli import main; main(['serach', 'x'])")
    assert loaded == []
    loaded, _ = _loaded_after("from memory_core.apps.cli import main; main(['search'])")
    assert loaded == []


def test_a_keyword_only_search_loads_no_model_no_indexer_and_no_redaction(workspace: Path) -> None:
    """`memory-core search` of a keyword-only index (provider none): no embedding SDK, model or
    orchestrator, not the indexing side (the freshness check needs only the file scan), not the
    redaction rules (nothing is redacted on a search of notes), no thread pool."""
    (workspace / "memory-core.toml").write_text('provider = "none"\n')
    from memory_core.apps import cli

    assert cli.main(["index", "-w", str(workspace), "--engine", "local", "--no-progress"]) == 0
    code = f"from memory_core.apps.cli import main; main(['search', '-w', {str(workspace)!r}, 'replication lag'])"
    loaded, printed = _loaded_after(code.replace("'", '"'))
    assert "memory/2026-09-04.md#L" in printed  # it found the day of the replication lag
    searched = ("memory_core.config", "memory_core.query", "memory_core.storage", "memory_core.api", "numpy", "apsw",
                "memory_core.embeddings", "memory_core.runtime.resolve")
    assert [m for m in loaded if not m.startswith(searched)] == []  # of HEAVY, only what a search uses
    loaded, _ = _loaded_after(code, also=("memory_core.index", "memory_core.sources.redact", "concurrent.futures",
                                          "onnxruntime", "lancedb", "mcp", "watchfiles", "httpx"))
    assert [m for m in loaded if m.startswith(("memory_core.index", "memory_core.sources.redact", "concurrent",
                                                "onnxruntime", "lancedb", "mcp", "watchfiles", "httpx"))] == []


def test_a_keyword_only_search_resolves_its_settings_without_pydantic(workspace: Path) -> None:
    """The settings model is memory_core.settings_model's, not pydantic's (pydantic alone was ~1.2x the
    floor); nor does a keyword-only search load what only the vector side (statistics), the writer
    lock (socket) or another command's flags use, or compile the day patterns of a query that names
    no day."""
    (workspace / "memory-core.toml").write_text('provider = "none"\n')
    from memory_core.apps import cli

    assert cli.main(["index", "-w", str(workspace), "--engine", "local", "--no-progress"]) == 0
    code = (f"from memory_core.apps.cli import main; main(['search', '-w', {str(workspace)!r}, 'replication lag']);"
            " from memory_core.query import dates, ranking;"
            " print('COMPILED', dates._ISO._compiled is not None, ranking._cjk_char_re.cache_info().currsize)")
    loaded, printed = _loaded_after(code, also=("annotated_types", "typing_inspection", "statistics", "socket"))
    assert "memory/2026-09-04.md#L" in printed
    assert "memory_core.config" in loaded
    assert [m for m in loaded if m.startswith(("pydantic", "annotated_types", "typing_inspection"))] == []
    assert [m for m in loaded if m in ("statistics", "socket")] == []
    assert printed.strip().endswith("COMPILED False 0")


def test_a_command_builds_only_its_own_flags() -> None:
    """`memory-core search ...` adds the search flags, not the other commands' (~140 flags in all);
    a command's flags are there as soon as anything looks at them."""
    from memory_core.apps import cli

    parser = cli.build_parser()
    args = parser.parse_args(["search", "-w", "/tmp", "x", "-n", "3"])
    assert (args.command, args.query, args.max_results) == ("search", "x", 3)
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    pending = sorted(name for name, p in sub.choices.items() if p.__dict__.get("_fill") is not None)
    assert pending == ["eval", "export", "flush", "get", "index", "mcp", "memory", "status", "watch", "write"]
    assert any("--provider" in a.option_strings for a in sub.choices["index"]._actions)  # filled when looked at
    assert sub.choices["index"].__dict__.get("_fill") is None


def test_eval_gets_its_flags_when_it_is_parsed() -> None:
    """`eval`'s flags (from memory_core.apps.evaluation.add_eval_parser, whose --fusion choices are
    the settings model's) are added when `eval` is parsed or its help shown: the same flags."""
    from typing import get_args

    from memory_core.apps import cli
    from memory_core.apps.evaluation import add_eval_parser
    from memory_core.config import QuerySettings

    args = cli.build_parser().parse_args(["eval", "--queries", "q.jsonl", "--qrels", "r.tsv", "--fusion", "rrf"])
    assert (args.command, args.queries, args.qrels, args.fusion, args.max_results) == ("eval", "q.jsonl", "r.tsv",
                                                                                      "rrf", 100)

    # the help the command list shows is add_eval_parser's, and the flags are all there
    seen: dict[str, Any] = {}

    class Recorder:
        def add_parser(self, name: str, **kwargs: Any) -> argparse.ArgumentParser:
            seen.update(kwargs, name=name)
            return argparse.ArgumentParser(prog="x")

    own = add_eval_parser(Recorder())
    assert seen["name"] == "eval" and seen["help"] == cli.EVAL_HELP
    late = _subparser(cli.build_parser(), "eval")
    assert late.format_help().count("--") >= own.format_help().count("--") - 1  # the same flags (-h once)
    fusion = next(a for a in late._actions if "--fusion" in a.option_strings)
    assert list(fusion.choices or ()) == list(get_args(QuerySettings.model_fields["fusion"].annotation))
    assert late.description == seen["description"]


def test_provider_choices_are_the_registry_s() -> None:
    from memory_core.apps import cli
    from memory_core.plugins import provider_names

    index = _subparser(cli.build_parser(), "index")
    flag = next(a for a in index._actions if "--provider" in a.option_strings)
    assert list(flag.choices or ()) == provider_names()
    assert "none" in (flag.choices or ()) and "nonesuch" not in (flag.choices or ())
    assert "{" + ",".join(provider_names()) + "}" in index.format_help()


def _subparser(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    found: argparse.ArgumentParser = sub.choices[name]
    return found


def test_the_bench_reports_ratios_to_the_floor(tmp_path: Path) -> None:
    """bench/startup.py runs (one round) and writes the table it reports."""
    out = tmp_path / "startup.md"
    subprocess.run([sys.executable, "-m", "bench.startup", "--rounds", "1", "--out", str(out)], cwd=ROOT,
                   check=True, capture_output=True, text=True)
    text = out.read_text()
    assert "| --version | this |" in text and "| search (keyword-only) | this |" in text
    assert "(floor) | | " in text


def test_built_in_providers_are_known_without_reading_the_entry_points(monkeypatch: Any) -> None:
    """Settings naming a built-in provider (or auto / none) are checked, and their redaction mode
    decided, without reading the installed packages' entry points (every one's metadata file);
    an unknown name still reads them, to list the choices."""
    import pytest

    from memory_core import plugins
    from memory_core.config import load_settings
    from memory_core.errors import ConfigError

    def unread(*, group: str) -> Any:
        raise AssertionError(f"read the entry points of {group}")

    monkeypatch.setattr(plugins, "entry_points", unread)
    plugins._provider_entry_points.cache_clear()
    try:
        for name in ("auto", "none", "local", "openai"):
            s = load_settings(overrides={"provider": name}, env={})
            assert s.provider == name and s.redact == ("sessions" if name in ("none", "local") else "all")
        assert plugins.provider_class("auto") is None and plugins.provider_class("none") is not None
        with pytest.raises(ConfigError, match="read the entry points of memory_core.providers"):
            load_settings(overrides={"provider": "nonesuch"}, env={})
        monkeypatch.setattr(plugins, "entry_points", lambda *, group: [])
        with pytest.raises(ConfigError, match="provider: Input should be 'auto', 'local'"):
            load_settings(overrides={"provider": "nonesuch"}, env={})
    finally:
        plugins._provider_entry_points.cache_clear()
