"""Helpers of the benchmarks that time the same searches with a rule on and switched off in one
process (bench/known_words.py, bench/name_forms.py): the eval generators loaded as modules, the
time per search of a list of questions, and the table of medians and their ratio."""

from __future__ import annotations

import importlib.util
import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

EVAL = Path(__file__).resolve().parents[1] / "eval"


def eval_module(name: str) -> Any:
    """eval/<name>.py (a labelled set's generator: convo, chats) loaded as a module."""
    spec = importlib.util.spec_from_file_location(f"{name}_eval", EVAL / f"{name}.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def ms_per_search(searcher: Any, questions: Sequence[str]) -> float:
    """Each of ``questions`` searched once: the mean wall time per search, in milliseconds."""
    t0 = time.perf_counter()
    for q in questions:
        searcher.search(q)
    return (time.perf_counter() - t0) / len(questions) * 1000


def print_ratios(header: tuple[str, str, str], rows: Sequence[tuple[str, Sequence[float], Sequence[float]]]) -> None:
    """A Markdown table: each row's label, the medians of its two series and their ratio."""
    print(f"| {header[0]} | {header[1]} | {header[2]} | ratio |")
    print("|---|---|---|---|")
    for label, on, off in rows:
        a, b = statistics.median(on), statistics.median(off)
        print(f"| {label} | {a:.2f} | {b:.2f} | {a / b:.3f} |")
