"""What one ``memory_search`` answer hands an agent: citations mode and the injection budget.

- ``query.citations`` (the seeds' citations mode): ``on`` ends every snippet with
  ``Source: <path>#L<start>-L<end>``; ``auto`` (default) leaves the snippet as it is and the
  ``citation`` field carries the reference (an MCP call says nothing of a direct or a group
  chat, which is what the seeds' ``auto`` looks at); ``off`` empties ``citation`` and adds no
  source line (``path`` and the lines stay: ``memory_get`` needs them).
- ``query.max_injected_chars``: at most that many snippet characters in one answer (the seeds
  use 4,000 for qmd, the default when ``backend = "qmd"``; unlimited for the builtin backend
  unless set). Results are kept best-first while they fit; the one that crosses the budget is
  cut (with ``…``), the rest dropped, and the answer's note says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from memory_core.config import Settings

QMD_DEFAULT_BUDGET = 4000
ELLIPSIS = "…"


@dataclass(frozen=True)
class Shaped:
    results: list[dict[str, Any]]
    note: str = ""


def injection_budget(settings: Settings) -> int | None:
    if settings.query.max_injected_chars is not None:
        return settings.query.max_injected_chars
    return QMD_DEFAULT_BUDGET if settings.backend == "qmd" else None


def shape_results(results: list[dict[str, Any]], settings: Settings) -> Shaped:
    """Apply the citations mode, then the budget (which counts the snippets as sent)."""
    mode = settings.query.citations
    out: list[dict[str, Any]] = []
    for r in results:
        r = dict(r)
        if mode == "on":
            r["snippet"] = f"{r['snippet'].rstrip()}\nSource: {r['citation']}"
        elif mode == "off":
            r["citation"] = ""
        out.append(r)
    budget = injection_budget(settings)
    if budget is None:
        return Shaped(out)
    kept: list[dict[str, Any]] = []
    used = 0
    cut = 0
    for r in out:
        left = budget - used
        n = len(r["snippet"])
        if n <= left:
            kept.append(r)
            used += n
            continue
        if left > len(ELLIPSIS):
            r["snippet"] = r["snippet"][: left - len(ELLIPSIS)] + ELLIPSIS
            kept.append(r)
            used += len(r["snippet"])
            cut = 1
        break
    dropped = len(out) - len(kept)
    if not cut and not dropped:
        return Shaped(kept)
    parts = []
    if cut:
        parts.append("the last snippet was cut")
    if dropped:
        parts.append(f"{dropped} more result{'s' if dropped != 1 else ''} dropped")
    return Shaped(kept, f"answer cut to the injection budget of {budget} snippet characters: {' and '.join(parts)}"
                        " (memory_get reads more)")
