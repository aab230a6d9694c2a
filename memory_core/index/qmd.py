"""The reindex side of the QMD backend: bring qmd's collections up to date beside the builtin index.

:func:`qmd_update` exports the transcripts (:func:`export_sessions`: their redacted message
text as Markdown, since qmd reads Markdown only), makes qmd's collections those memory-core's
sources plan (:func:`sync_collections`), runs ``qmd update`` and writes the table that maps
qmd's file names back to memory-core's paths (``<state>/paths.json``, read by
:class:`~memory_core.query.qmd.QmdSearcher`). :func:`qmd_embed` runs ``qmd embed``. Both are
plain functions the orchestrator runs as stages (:func:`memory_core.index.pipeline.run_index`); both
record their outcome for ``status`` and never raise QmdError.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import stat
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from memory_core.config import Settings
from memory_core.index import run_stops
from memory_core.storage.qmd import (
    MD_MASK,
    ROOT_MASK,
    QmdCollection,
    QmdError,
    QmdRun,
    _read_json,
    _timed,
    _write_json,
    clean,
    handelize,
    plan_collections,
    private_state,
    run_qmd,
    state_dir,
)
from memory_core.storage.store import make_private_dir, safe_open

log = logging.getLogger("memory_core.qmd")


def export_sessions(settings: Settings) -> dict[str, dict[str, Any]]:
    """Write each transcript's message text to ``<state>/sessions/<stem>.md``.

    Returns {exported file name: {"path": "sessions/<name>.jsonl", "line_map": [...]}}; stale
    exports are removed. Redacted unless ``redact = "off"`` (as the builtin index).
    """
    from memory_core.sources.discovery import discover_files
    from memory_core.sources.sessions import parse_session_file

    out_dir = state_dir(settings) / "sessions"
    private_state(settings)
    make_private_dir(out_dir)
    table: dict[str, dict[str, Any]] = {}
    for f in discover_files(settings).files:
        if f.source != "sessions":
            continue
        try:
            doc = parse_session_file(f.abs_path, redact_secrets=settings.redact != "off")
        except OSError as exc:
            log.warning("qmd: cannot read transcript %s: %s", f.path, exc)
            continue
        stem = Path(f.path).stem
        name = f"{stem}.md"
        if handelize(name) in {handelize(n) for n in table}:  # two names qmd would confuse
            name = f"{stem}-{hashlib.sha256(f.path.encode()).hexdigest()[:8]}.md"
        target = out_dir / name
        text = doc.content + ("\n" if doc.content else "")
        if _read_own(target) != text:
            _write_private(target, text)
        table[name] = {"path": f.path, "line_map": list(doc.line_map)}
    for old in out_dir.glob("*.md"):
        if old.name not in table:
            with contextlib.suppress(OSError):
                old.unlink()
    return table


def _read_own(path: Path) -> str | None:
    """The text of an exported transcript; None when there is none, or something else (a
    symlink, a FIFO) is in its place: it is then replaced, never followed."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        with os.fdopen(os.dup(fd), "rb") as fh:
            return fh.read().decode("utf-8", errors="replace")
    finally:
        os.close(fd)


def _write_private(target: Path, text: str) -> None:
    """Write ``target`` (0600) through a new temp file beside it, never through a symlink: the
    temp name is random and created with O_EXCL | O_NOFOLLOW, so a link planted there is
    never written through; the rename replaces whatever entry ``target`` is (not a link's target)."""
    tmp = target.with_name(f".{target.name}.{os.getpid()}-{os.urandom(4).hex()}.tmp")
    fd = safe_open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, what="qmd transcript export")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _path_table(settings: Settings, collections: list[QmdCollection],
                sessions: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """{collection: {handelized path: {"path": indexed path, "source", "line_map"?}}}."""
    from memory_core.sources.discovery import discover_files

    files = [f for f in discover_files(settings).files if f.source == "memory"]
    table: dict[str, dict[str, Any]] = {c.name: {} for c in collections}
    for c in collections:
        if c.source == "sessions":
            for name, info in sessions.items():
                table[c.name][handelize(name)] = {"source": "sessions", **info}
            continue
        root = c.root.rstrip(os.sep) + os.sep
        for f in files:
            if not f.abs_path.startswith(root):
                continue
            rel = f.abs_path[len(root):].replace(os.sep, "/")
            if c.mask == ROOT_MASK and rel not in ("MEMORY.md", "memory.md"):
                continue
            if c.mask not in (MD_MASK, ROOT_MASK) and rel != c.mask:
                continue
            entry = {"path": f.path, "source": "memory"}
            have = table[c.name].get(handelize(rel))
            if have is None:
                table[c.name][handelize(rel)] = entry
            else:  # a_b.md, a-b.md, "A B.md", a..b.md: one name to qmd; told apart by the text
                table[c.name][handelize(rel)] = {"ambiguous": [*have.get("ambiguous", [have]), entry]}
    return table



def _run_qmd(settings: Settings, args: list[str], *, timeout: float) -> tuple[str, str]:
    """A run's qmd command: a stop that came in the run and was lost on the way (raised in a
    finalizer) ends it, and qmd with it (``run_stops.check``); before, qmd ran to its end (up to
    ``qmd.update_timeout_s``) and the run ended as if no stop had come."""
    return run_qmd(settings, args, timeout=timeout, stop=run_stops.check)


def sync_collections(settings: Settings) -> list[QmdCollection]:
    """Make qmd's collections those of :func:`plan_collections` (add new, remove stale)."""
    st = state_dir(settings)
    manifest_file = st / "collections.json"
    listed = _read_json(manifest_file)
    have = {c["name"]: QmdCollection(**c) for c in (listed if isinstance(listed, list) else [])
            if isinstance(c, dict) and set(c) == {"name", "root", "mask", "source"}}
    want = plan_collections(settings)
    for c in want:
        if c.source == "sessions":
            Path(c.root).mkdir(parents=True, exist_ok=True)
    want_names = {c.name: c for c in want}
    for name, c in have.items():
        if want_names.get(name) != c:
            with contextlib.suppress(QmdError):  # already gone from qmd's config: fine
                _run_qmd(settings, ["collection", "remove", name], timeout=settings.qmd.timeout_s)
            _write_json(manifest_file, [asdict(x) for x in have.values() if x.name != name])
    have = {k: v for k, v in have.items() if want_names.get(k) == v}
    for c in want:
        if c.name in have:
            continue
        try:
            _run_qmd(settings, ["collection", "add", c.root, "--name", c.name, "--mask", c.mask],
                    timeout=settings.qmd.update_timeout_s)
        except QmdError as exc:
            if "already exists" not in str(exc):
                raise
            _run_qmd(settings, ["collection", "remove", c.name], timeout=settings.qmd.timeout_s)
            _run_qmd(settings, ["collection", "add", c.root, "--name", c.name, "--mask", c.mask],
                    timeout=settings.qmd.update_timeout_s)
        have[c.name] = c
        _write_json(manifest_file, [asdict(x) for x in have.values()])
    return want


def qmd_update(settings: Settings) -> QmdRun:
    """Sync the collections (exporting transcripts) and run ``qmd update``; never raises QmdError.

    The outcome is recorded for ``status`` and returned (``ok`` false with the reason when qmd
    is missing, failed or timed out)."""

    def work() -> str:
        sessions = export_sessions(settings) if "sessions" in settings.sources else {}
        collections = sync_collections(settings)
        try:
            out, _ = _run_qmd(settings, ["update"], timeout=settings.qmd.update_timeout_s)
        except QmdError as exc:
            if exc.kind != "failed":
                raise
            # qmd's SQLite file may be busy with a search of another process: once more, later
            time.sleep(1.0)
            out, _ = _run_qmd(settings, ["update"], timeout=settings.qmd.update_timeout_s)
        _write_json(state_dir(settings) / "paths.json", _path_table(settings, collections, sessions))
        return clean(out)

    return _timed(settings, "last_update", "update", work)


def qmd_embed(settings: Settings) -> QmdRun:
    """Run ``qmd embed`` (needs qmd's embedding model: downloaded on first use); never raises QmdError."""

    def work() -> str:
        out, _ = _run_qmd(settings, ["embed"], timeout=settings.qmd.embed_timeout_s)
        return clean(out)

    return _timed(settings, "last_embed", "embed", work)
