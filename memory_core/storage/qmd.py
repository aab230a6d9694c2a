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
- **Reindex** (:mod:`memory_core.index.qmd`). :func:`qmd_update` syncs the collections
  and runs ``qmd update``; :func:`qmd_embed` runs ``qmd embed`` (GGUF models downloaded from
  the Hugging Face hub on first use). Both are plain functions the orchestrator runs as stages.
- **Search** (:mod:`memory_core.query.qmd`). :class:`QmdSearcher` runs
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

What both halves of the QMD backend share: running the ``qmd`` CLI, and its state.

- the state folder (:func:`state_dir`, :func:`private_state`) that holds qmd's config and
  index for this workspace, and the collections planned from memory-core's sources
  (:func:`plan_collections`; qmd's own file names: :func:`handelize`);
- running qmd (:func:`run_qmd`: its own process group, a timeout, output read up to
  ``MAX_OUTPUT_BYTES``; :func:`resolve_command`; :class:`QmdError`);
- the outcome of each run for ``status`` (``<state>/status.json``: :func:`load_status`,
  ``_record``, ``_timed``).

:mod:`memory_core.index.qmd` (the reindex side) and :mod:`memory_core.query.qmd` (the
search side) build on it; neither imports the other.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import selectors
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from memory_core.config import Settings
from memory_core.errors import MemoryCoreError, RunCancelled
from memory_core.storage.store import make_private_dir

log = logging.getLogger("memory_core.qmd")

ROOT_MASK = "{MEMORY,memory}.md"
MD_MASK = "**/*.md"
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\r")


class QmdError(MemoryCoreError):
    """qmd could not answer: ``kind`` is missing, failed, timeout or unreadable."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


@dataclass(frozen=True)
class QmdCollection:
    name: str
    root: str
    mask: str
    source: str  # memory | sessions


@dataclass
class QmdRun:
    """The outcome of one qmd command memory-core ran."""

    command: str
    ok: bool
    at: float
    seconds: float
    error: str = ""
    kind: str = ""
    output_tail: str = ""


@dataclass
class QmdStatus:
    """What ``status`` reports about the qmd backend (persisted in ``<state>/status.json``)."""

    last_search: QmdRun | None = None
    last_update: QmdRun | None = None
    last_embed: QmdRun | None = None
    fallback_in_use: bool = False
    fallback_reason: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


# -- paths -------------------------------------------------------------------------------------

def state_dir(settings: Settings) -> Path:
    if settings.qmd.state_dir is not None:
        p = Path(os.path.expanduser(settings.qmd.state_dir))
        return p if p.is_absolute() else settings.workspace_dir / p
    return settings.index_file.parent / "qmd"


def handelize(path: str) -> str:
    """qmd's path normalisation (store.ts ``handelize``): how qmd names a file in its results."""
    result = []
    segments = path.replace("___", "/").lower().split("/")
    for i, seg in enumerate(segments):
        if i == len(segments) - 1:
            m = re.search(r"(\.[a-z0-9]+)$", seg, re.IGNORECASE)
            ext = m.group(1) if m else ""
            name = seg[: -len(ext)] if ext else seg
            cleaned = re.sub(r"(?:[^\w$]|_)+", "-", name).strip("-") + ext
        else:
            cleaned = re.sub(r"(?:[^\w$]|_)+", "-", seg).strip("-")
        if cleaned:
            result.append(cleaned)
    return "/".join(result)


def plan_collections(settings: Settings) -> list[QmdCollection]:
    """The qmd collections for ``settings``' sources (only those whose root exists)."""
    ws = settings.workspace_dir
    out: list[QmdCollection] = []
    if "memory" in settings.sources:
        out.append(QmdCollection("mc-root", str(ws), ROOT_MASK, "memory"))
        if (ws / "memory").is_dir():
            out.append(QmdCollection("mc-memory", str(ws / "memory"), MD_MASK, "memory"))
        for i, raw in enumerate(settings.extra_paths, 1):
            p = Path(os.path.expanduser(raw))
            p = Path(os.path.abspath(p if p.is_absolute() else ws / p))
            if p.is_dir() and not p.is_symlink():
                out.append(QmdCollection(f"mc-extra-{i}", str(p), MD_MASK, "memory"))
            elif p.is_file() and p.suffix.lower() == ".md":
                out.append(QmdCollection(f"mc-extra-{i}", str(p.parent), p.name, "memory"))
    if "sessions" in settings.sources:
        out.append(QmdCollection("mc-sessions", str(state_dir(settings) / "sessions"), MD_MASK, "sessions"))
    return out


# -- running qmd ----------------------------------------------------------------------------------

def resolve_command(settings: Settings) -> str:
    cmd = settings.qmd.command
    found = shutil.which(os.path.expanduser(cmd))
    if found is None:
        raise QmdError("missing", f"the qmd command {cmd!r} was not found (install it with scripts/install-qmd.sh"
                                  " and set qmd.command to the path it prints)")
    return found


def _env(settings: Settings, command: str) -> dict[str, str]:
    st = state_dir(settings)
    env = dict(os.environ)
    # qmd's wrapper looks for bun on PATH: the folder the installer put both in comes first.
    env["PATH"] = os.pathsep.join([os.path.dirname(command), env.get("PATH", "")])
    env["QMD_CONFIG_DIR"] = str(st / "config")
    env["XDG_CACHE_HOME"] = str(st / "cache")
    env["NO_COLOR"] = "1"
    env.pop("INDEX_PATH", None)
    return env


def clean(text: str) -> str:
    """qmd's output without terminal control sequences (progress bars, colours)."""
    return _ANSI.sub("", text)


def run_qmd(settings: Settings, args: list[str], *, timeout: float,
            stop: Callable[[], None] | None = None) -> tuple[str, str]:
    """Run ``qmd --index <name> ARGS``; (stdout, stderr) or QmdError (missing, failed, timeout).

    qmd runs in its own process group, so a timeout kills Bun and anything it started, and so
    does a stop: ``stop`` (a run's ``run_stops.check``) is called as qmd is waited on, at least
    every 0.1 s, and what it raises ends the wait.
    """
    command = resolve_command(settings)
    st = private_state(settings)
    make_private_dir(st / "config")
    make_private_dir(st / "cache")
    argv = [command, "--index", settings.qmd.index_name, *args]
    try:  # umask 077: qmd's index (the notes' text) and config are private, as memory-core's own files
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                env=_env(settings, command), cwd=str(st), start_new_session=True, umask=0o077)
    except OSError as exc:
        raise QmdError("missing", f"cannot run {command}: {exc.strerror or exc}") from None
    try:
        out, err = _collect(proc, timeout, stop)
    except QmdError as exc:
        exc.args = (f"qmd {args[0]} {exc}",)
        raise
    finally:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)  # anything it left behind in its group
        for f in (proc.stdout, proc.stderr):
            with contextlib.suppress(OSError):
                f.close()  # type: ignore[union-attr]
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5)
    sout = out.decode("utf-8", errors="replace")
    serr = clean(err.decode("utf-8", errors="replace"))
    if proc.returncode != 0:
        text = serr.strip() or clean(sout).strip()
        # Bun prints the error, then a stack trace: name the error, not the trace's last frame
        said = next((ln.strip() for ln in text.splitlines() if "error" in ln.lower()), "")
        tail = (f"{said[:200]} ... " if said and said not in text[-300:] else "") + text[-300:]
        raise QmdError("failed", f"qmd {args[0]} exited with {proc.returncode}: {tail}")
    return sout, serr


MAX_OUTPUT_BYTES = 32 * 1024 * 1024  # qmd's answer (at most a few hundred hits) or its progress log
EXIT_GRACE_S = 1.0  # after qmd exits, how long a pipe a detached child still holds is read


def _collect(proc: subprocess.Popen[bytes], timeout: float,
             stop: Callable[[], None] | None = None) -> tuple[bytes, bytes]:
    """qmd's (stdout, stderr): read until both pipes end, ``EXIT_GRACE_S`` after qmd exited
    (a child it left behind, in its own session, may hold the pipes open for ever), or the
    timeout; QmdError("timeout") / QmdError("unreadable") past ``timeout`` or ``MAX_OUTPUT_BYTES``."""
    bufs = {proc.stdout.fileno(): bytearray(), proc.stderr.fileno(): bytearray()}  # type: ignore[union-attr]
    sel = selectors.DefaultSelector()
    for fd in bufs:
        os.set_blocking(fd, False)
        sel.register(fd, selectors.EVENT_READ)
    t_end = time.monotonic() + timeout
    exited: float | None = None
    try:
        while sel.get_map():
            now = time.monotonic()
            if exited is None and proc.poll() is not None:
                exited = now
            if exited is not None and now - exited > EXIT_GRACE_S:
                break
            if now >= t_end:
                raise QmdError("timeout", f"did not finish within {timeout:g}s")
            if stop is not None:
                stop()
            for key, _ in sel.select(timeout=min(0.1, t_end - now)):
                try:
                    data = os.read(key.fd, 1 << 16)
                except BlockingIOError:
                    continue
                if not data:
                    sel.unregister(key.fd)
                    continue
                buf = bufs[key.fd]
                buf += data
                if len(buf) > MAX_OUTPUT_BYTES:
                    raise QmdError("unreadable", f"printed more than {MAX_OUTPUT_BYTES >> 20} MiB")
    finally:
        sel.close()
    if proc.poll() is None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=max(0.0, min(EXIT_GRACE_S, t_end - time.monotonic())))
        if proc.returncode is None:
            raise QmdError("timeout", f"did not finish within {timeout:g}s")
    return bytes(bufs[proc.stdout.fileno()]), bytes(bufs[proc.stderr.fileno()])  # type: ignore[union-attr]


# -- state files -------------------------------------------------------------------------------------

def private_state(settings: Settings) -> Path:
    """The state folder, created 0700 (and made 0700 when an older version left it 0755): qmd's
    index and the exported transcripts in it hold the memory's text."""
    st = state_dir(settings)
    make_private_dir(st)
    with contextlib.suppress(OSError):
        os.chmod(st, 0o700)
    return st


def _write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump(data, fh, ensure_ascii=False)
    os.replace(tmp, path)


def _read_json(path: Path) -> object:
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return None


def load_status(settings: Settings) -> QmdStatus:
    data = _read_json(state_dir(settings) / "status.json")
    if not isinstance(data, dict):
        data = {}
    st = QmdStatus()
    for key in ("last_search", "last_update", "last_embed"):
        if isinstance(data.get(key), dict):
            with contextlib.suppress(TypeError):
                setattr(st, key, QmdRun(**data[key]))
    st.fallback_in_use = bool(data.get("fallback_in_use"))
    st.fallback_reason = str(data.get("fallback_reason") or "")
    return st


def _record(settings: Settings, key: str, run: QmdRun, **extra: Any) -> None:
    st = load_status(settings)
    setattr(st, key, run)
    for k, v in extra.items():
        setattr(st, k, v)
    data = asdict(st)
    data.pop("extra", None)
    with contextlib.suppress(OSError):
        _write_json(state_dir(settings) / "status.json", data)


def _timed(settings: Settings, key: str, name: str, fn: Any, **extra: Any) -> QmdRun:
    t0 = time.time()
    try:
        tail = fn()
        run = QmdRun(name, True, t0, time.time() - t0, output_tail=str(tail or "")[-500:])
    except QmdError as exc:
        run = QmdRun(name, False, t0, time.time() - t0, error=str(exc), kind=exc.kind)
    except (MemoryCoreError, OSError) as exc:  # workspace gone, state folder not writable, ...
        if isinstance(exc, RunCancelled):  # a stop (SIGTERM, the owner's cancel), not qmd's failure
            raise
        run = QmdRun(name, False, t0, time.time() - t0, error=str(exc), kind="failed")
    _record(settings, key, run, **extra)
    return run
