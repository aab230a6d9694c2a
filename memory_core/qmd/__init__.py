"""The QMD backend: search through the external ``qmd`` CLI, falling back to the builtin index.

``backend = "qmd"`` hands search to qmd (npm ``@tobilu/qmd``, run by Bun; installed by
``scripts/install-qmd.sh``). memory-core drives the real CLI:

- **Collections.** The workspace's memory sources become qmd collections: ``mc-root``
  (``MEMORY.md`` / ``memory.md``), ``mc-memory`` (``memory/**/*.md``), ``mc-extra-N`` (each
  extra path) and, when transcripts are a source, ``mc-sessions``: each transcript's message
  text (redacted as the builtin index redacts it) exported to ``<state>/sessions/*.md``,
  since qmd reads Markdown only. qmd's config and index live in ``state_dir`` (default
  ``<index dir>/qmd``: ``QMD_CONFIG_DIR`` and ``XDG_CACHE_HOME`` point there), so a user's
  own qmd collections are never touched; qmd's models stay in ``~/.cache/qmd/models``.
- **Reindex** (:mod:`memory_core.qmd.indexing`). :func:`qmd_update` syncs the collections
  and runs ``qmd update``; :func:`qmd_embed` runs ``qmd embed`` (GGUF models downloaded from
  the Hugging Face hub on first use). Both are plain functions the orchestrator runs as stages.
- **Search** (:mod:`memory_core.qmd.search`). :class:`QmdSearcher` runs
  ``qmd search|vsearch|query --json`` (``search_mode``) and maps each hit to memory-core's
  :class:`~memory_core.query.search.SearchResult`: qmd names files
  ``qmd://<collection>/<handelized path>`` (lower-cased, punctuation to dashes), so the paths
  are mapped back through a table written by :func:`qmd_update` from memory-core's own
  discovery, and lines come from the ``@@ -start,count @@`` header of qmd's snippet; a
  transcript's lines are mapped back to its JSONL lines. Citations are ``path#Lstart-Lend``
  as the builtin ones; ``get`` reads through the builtin path rules.
- **Fallback.** The builtin index is kept beside it. When qmd is missing, exits non-zero,
  times out, or prints something that is not its JSON (or names files memory-core does not
  index, or ``vsearch`` finds no vectors at all), the search answers from the builtin index
  and says so. So it does when qmd answers with nothing while the builtin index has strong
  matches (``qmd.fallback_on_empty``, a best score of at least ``qmd.fallback_min_score``):
  qmd's ``search`` ANDs every query word, so a question in plain words mostly finds nothing
  there (282 of 300 public queries); ``search_mode = "query"`` is qmd's hybrid mode. Each
  answer names the fallback (``fallback: {from: "qmd", to: "builtin", reason}``):
  ``provider_note`` (the note of a CLI/MCP answer) and ``status`` name the reason; the last
  outcome is kept in ``<state>/status.json`` so another process's ``status`` sees it too. The
  next search tries qmd again.

The package is split by responsibility: :mod:`memory_core.qmd.common` runs the CLI and keeps
its state (the state folder, the collections plan, qmd's file names, ``status.json``);
:mod:`memory_core.qmd.indexing` is the reindex side (imported by :mod:`memory_core.index.pipeline`)
and :mod:`memory_core.qmd.search` the search side (imported by :mod:`memory_core.query.backends`).
Neither half imports the other. The names below are re-exported lazily: importing one half
(``memory_core.qmd.indexing``) never loads the other (``memory_core.qmd.search`` loads the
builtin searcher).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from memory_core.qmd.common import (
        EXIT_GRACE_S,
        MAX_OUTPUT_BYTES,
        MD_MASK,
        ROOT_MASK,
        QmdCollection,
        QmdError,
        QmdRun,
        QmdStatus,
        clean,
        handelize,
        load_status,
        plan_collections,
        private_state,
        resolve_command,
        run_qmd,
        state_dir,
    )
    from memory_core.qmd.indexing import export_sessions, qmd_embed, qmd_update, sync_collections
    from memory_core.qmd.search import QmdHit, QmdSearcher, parse_results

_HOMES = {
    "common": ("EXIT_GRACE_S", "MAX_OUTPUT_BYTES", "MD_MASK", "ROOT_MASK", "QmdCollection", "QmdError", "QmdRun",
               "QmdStatus", "clean", "handelize", "load_status", "plan_collections", "private_state",
               "resolve_command", "run_qmd", "state_dir"),
    "indexing": ("export_sessions", "qmd_embed", "qmd_update", "sync_collections"),
    "search": ("QmdHit", "QmdSearcher", "parse_results"),
}
_HOME = {name: module for module, names in _HOMES.items() for name in names}
__all__ = [  # the names of _HOMES (ruff and mypy read a literal list)
    "EXIT_GRACE_S", "MAX_OUTPUT_BYTES", "MD_MASK", "ROOT_MASK", "QmdCollection", "QmdError", "QmdHit", "QmdRun",
    "QmdSearcher", "QmdStatus", "clean", "export_sessions", "handelize", "load_status", "parse_results",
    "plan_collections", "private_state", "qmd_embed", "qmd_update", "resolve_command", "run_qmd", "state_dir",
    "sync_collections",
]


def __getattr__(name: str) -> Any:
    """``memory_core.qmd.X``: the X of the submodule that defines it, imported on first use."""
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{home}"), name)


def __dir__() -> list[str]:
    return sorted({*globals(), *_HOME})
