"""Every CLI command and flag is documented in README.md and in ``--help`` (as sqlite-utils
checks its CLI reference): a flag added without a word in the README fails here."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from memory_core.apps.cli import build_parser

README = (Path(__file__).resolve().parent.parent / "README.md").read_text()
COMMON = {"--config", "--workspace", "--index", "--help"}  # "Every command takes ..." in the README
# "... and all but `eval` take `--agent ID`": one sentence too, rather than on every usage line
COMMON_BUT_EVAL = {"--agent"}


def _commands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def _usage_block(command: str) -> str:
    """The README's usage lines of ``command``: ``memory-core COMMAND ...`` and its continuation lines."""
    block = re.search(r"## Using it\n+```bash\n(.*?)```", README, re.S)
    assert block, "README.md has no usage block under '## Using it'"
    out, taken = [], False
    for line in block.group(1).splitlines():
        if line.startswith("memory-core "):
            taken = line.split()[1] == command
        if taken:
            out.append(line)
    return "\n".join(out)


def _flags(p: argparse.ArgumentParser) -> list[list[str]]:
    """Each optional argument's option strings, e.g. ``["--max-results", "-n"]``."""
    return [list(a.option_strings) for a in p._actions if a.option_strings]


def _mentions(text: str, option: str) -> bool:
    return re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", text) is not None


def test_every_command_is_in_the_readme_usage_block() -> None:
    assert _commands(), "no commands found"
    missing = [c for c in _commands() if not _usage_block(c)]
    assert missing == []


@pytest.mark.parametrize("command", sorted(_commands()))
def test_every_flag_is_in_the_readme_and_in_help(command: str) -> None:
    p = _commands()[command]
    flags = _flags(p)
    assert flags, command
    usage = _usage_block(command)
    helptext = p.format_help()
    # in the command's README usage lines (any of its spellings; the common flags: one sentence)
    common = COMMON | (COMMON_BUT_EVAL if command != "eval" else set())
    undocumented = [opts[0] for opts in flags
                    if not set(opts) & common and not any(_mentions(usage, o) for o in opts)]
    assert undocumented == [], f"memory-core {command}: not in README.md"
    # and every spelling in --help
    assert [o for opts in flags for o in opts if not _mentions(helptext, o)] == [], f"memory-core {command}: --help"


def test_the_common_flags_sentence() -> None:
    assert "Every command takes `--config FILE`, `-w WORKSPACE` and `--index FILE`" in README
    assert re.search(r"all but `eval`\s+take `--agent ID`", README)
