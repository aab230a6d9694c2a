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
- **Reindex.** :func:`qmd_update` syncs the collections and runs ``qmd update``;
  :func:`qmd_embed` runs ``qmd embed`` (GGUF models downloaded from the Hugging Face hub on
  first use). Both are plain functions for the reindex flow's tasks.
- **Search.** :class:`QmdSearcher` runs ``qmd search|vsearch|query --json`` (``search_mode``)
  and maps each hit to memory-core's :class:`~memory_core.search.SearchResult`: qmd names
  files ``qmd://<collection>/<handelized path>`` (lower-cased, punctuation to dashes), so the
  paths are mapped back through a table written by :func:`qmd_update` from memory-core's own
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
  answer names the fallback (``fallback: {from: "qmd", to: "builtin", reason}``): ``provider_note`` (the note of a CLI/MCP answer) and ``status`` name the
  reason; the last outcome is kept in ``<state>/status.json`` so another process's
  ``status`` sees it too. The next search tries qmd again.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import math
import os
import re
import selectors
import shutil
import signal
import stat
import subprocess
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from memory_core.config import Settings
from memory_core.errors import MemoryCoreError
from memory_core.search import Searcher, SearchResult
from memory_core.store import make_private_dir, safe_open

log = logging.getLogger("memory_core.qmd")

ROOT_MASK = "{MEMORY,memory}.md"
MD_MASK = "**/*.md"
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\r")
_HEADER = re.compile(r"^@@ -(\d+),(\d+) @@[^\n]*\n?")
_NO_RESULTS = ("No results found",)


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


@dataclass(frozen=True)
class QmdHit:
    collection: str
    path: str  # qmd's (handelized) path inside the collection
    score: float
    snippet: str
    start_line: int
    end_line: int


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


def run_qmd(settings: Settings, args: list[str], *, timeout: float) -> tuple[str, str]:
    """Run ``qmd --index <name> ARGS``; (stdout, stderr) or QmdError (missing, failed, timeout).

    qmd runs in its own process group, so a timeout kills Bun and anything it started.
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
        out, err = _collect(proc, timeout)
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


def _collect(proc: subprocess.Popen[bytes], timeout: float) -> tuple[bytes, bytes]:
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

def _write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump(data, fh, ensure_ascii=False)
    os.replace(tmp, path)


def _read_json(path: Path) -> Any:
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return None


def load_status(settings: Settings) -> QmdStatus:
    data = _read_json(state_dir(settings) / "status.json") or {}
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
        run = QmdRun(name, False, t0, time.time() - t0, error=str(exc), kind="failed")
    _record(settings, key, run, **extra)
    return run


# -- reindex side ----------------------------------------------------------------------------------

def export_sessions(settings: Settings) -> dict[str, dict[str, Any]]:
    """Write each transcript's message text to ``<state>/sessions/<stem>.md``.

    Returns {exported file name: {"path": "sessions/<name>.jsonl", "line_map": [...]}}; stale
    exports are removed. Redacted unless ``redact = "off"`` (as the builtin index).
    """
    from memory_core.discovery import discover_files
    from memory_core.sessions import parse_session_file

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


def private_state(settings: Settings) -> Path:
    """The state folder, created 0700 (and made 0700 when an older version left it 0755): qmd's
    index and the exported transcripts in it hold the memory's text."""
    st = state_dir(settings)
    make_private_dir(st)
    with contextlib.suppress(OSError):
        os.chmod(st, 0o700)
    return st


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
    from memory_core.discovery import discover_files

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


def _which_file(settings: Settings, candidates: list[dict[str, Any]], hit: QmdHit) -> dict[str, Any] | None:
    """The one candidate file whose lines ``hit`` cites hold its snippet; None when not exactly one."""
    from memory_core.safeio import open_indexed

    want = [ln.strip() for ln in hit.snippet.split("\n") if ln.strip()]
    found = []
    for c in candidates:
        try:
            fd = open_indexed(settings, str(c["path"]))
        except MemoryCoreError:
            continue
        with os.fdopen(fd, "rb") as fh:
            lines = [fh.readline(1 << 20) for _ in range(hit.end_line)][hit.start_line - 1:]
        text = "\n".join(ln.decode("utf-8", "replace").strip() for ln in lines)
        if want and all(w in text for w in want[:3]):
            found.append(c)
    return found[0] if len(found) == 1 else None


def sync_collections(settings: Settings) -> list[QmdCollection]:
    """Make qmd's collections those of :func:`plan_collections` (add new, remove stale)."""
    st = state_dir(settings)
    manifest_file = st / "collections.json"
    have = {c["name"]: QmdCollection(**c) for c in (_read_json(manifest_file) or [])
            if isinstance(c, dict) and set(c) == {"name", "root", "mask", "source"}}
    want = plan_collections(settings)
    for c in want:
        if c.source == "sessions":
            Path(c.root).mkdir(parents=True, exist_ok=True)
    want_names = {c.name: c for c in want}
    for name, c in have.items():
        if want_names.get(name) != c:
            with contextlib.suppress(QmdError):  # already gone from qmd's config: fine
                run_qmd(settings, ["collection", "remove", name], timeout=settings.qmd.timeout_s)
            _write_json(manifest_file, [asdict(x) for x in have.values() if x.name != name])
    have = {k: v for k, v in have.items() if want_names.get(k) == v}
    for c in want:
        if c.name in have:
            continue
        try:
            run_qmd(settings, ["collection", "add", c.root, "--name", c.name, "--mask", c.mask],
                    timeout=settings.qmd.update_timeout_s)
        except QmdError as exc:
            if "already exists" not in str(exc):
                raise
            run_qmd(settings, ["collection", "remove", c.name], timeout=settings.qmd.timeout_s)
            run_qmd(settings, ["collection", "add", c.root, "--name", c.name, "--mask", c.mask],
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
            out, _ = run_qmd(settings, ["update"], timeout=settings.qmd.update_timeout_s)
        except QmdError as exc:
            if exc.kind != "failed":
                raise
            # qmd's SQLite file may be busy with a search of another process: once more, later
            time.sleep(1.0)
            out, _ = run_qmd(settings, ["update"], timeout=settings.qmd.update_timeout_s)
        _write_json(state_dir(settings) / "paths.json", _path_table(settings, collections, sessions))
        return clean(out)

    return _timed(settings, "last_update", "update", work)


def qmd_embed(settings: Settings) -> QmdRun:
    """Run ``qmd embed`` (needs qmd's embedding model: downloaded on first use); never raises QmdError."""

    def work() -> str:
        out, _ = run_qmd(settings, ["embed"], timeout=settings.qmd.embed_timeout_s)
        return clean(out)

    return _timed(settings, "last_embed", "embed", work)


# -- search side -------------------------------------------------------------------------------------

def parse_results(stdout: str, stderr: str = "") -> list[QmdHit]:
    """qmd's ``--json`` answer as hits; QmdError("unreadable") when it is not that.

    qmd prints ``No results found...`` (not ``[]``) when nothing matched."""
    text = stdout.strip()
    if not text or text.startswith(_NO_RESULTS):
        return []
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):  # RecursionError: nested deeper than the parser goes
        raise QmdError("unreadable", f"qmd printed something that is not JSON: {clean(text)[:120]!r}") from None
    if not isinstance(data, list):
        raise QmdError("unreadable", "qmd's JSON answer is not a list of results")
    hits: list[QmdHit] = []
    for row in data:
        if not isinstance(row, dict) or not isinstance(row.get("file"), str):
            raise QmdError("unreadable", f"a qmd result without a file: {str(row)[:120]}")
        uri = row["file"]
        if not uri.startswith("qmd://") or "/" not in uri[6:]:
            raise QmdError("unreadable", f"a qmd result with an unexpected file name: {uri[:120]}")
        collection, path = uri[6:].split("/", 1)
        raw_snippet = row.get("snippet")
        snippet = raw_snippet if isinstance(raw_snippet, str) else ""
        # a lone surrogate (JSON allows "\ud800") cannot be printed or sent as UTF-8
        snippet = snippet.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
        start, count = 1, 1
        m = _HEADER.match(snippet)
        if m:
            start, count = int(m.group(1)), max(1, int(m.group(2)))
            snippet = snippet[m.end():]
        lines = snippet.split("\n")
        while count > 1 and lines and lines[-1] == "":
            lines.pop()
            count -= 1
        try:
            score = float(row.get("score", 0.0))
        except (TypeError, ValueError, OverflowError):
            raise QmdError("unreadable", f"a qmd result with a bad score: {str(row.get('score'))[:40]!r}") from None
        if not (math.isfinite(score) and -1.0 <= score <= 1.0):  # NaN made the answer invalid JSON
            raise QmdError("unreadable", f"a qmd result with a score outside -1..1: {score!r}")
        hits.append(QmdHit(collection, path, score, "\n".join(lines), start, start + count - 1))
    return hits


class QmdSearcher(Searcher):
    """A :class:`Searcher` whose hybrid search asks qmd first and the builtin index when qmd cannot answer.

    ``mode="keyword"`` / ``"vector"`` (evaluation's single-side modes) stay builtin. ``get``
    and the builtin part of ``status`` are the builtin searcher's.
    """

    def __init__(self, settings: Settings, **kw: Any) -> None:
        super().__init__(settings, **kw)
        self.backend_note = ""
        self._paths: tuple[float, dict[str, dict[str, Any]]] | None = None

    @property
    def provider_note(self) -> str:
        notes = [n for n in (self.backend_note, self._builtin_note if self.backend_note else "") if n]
        return "; ".join(notes)

    @provider_note.setter
    def provider_note(self, value: str) -> None:
        self._builtin_note = value

    def _path_table(self) -> dict[str, dict[str, Any]]:
        p = state_dir(self.settings) / "paths.json"
        try:
            mtime = p.stat().st_mtime
        except OSError:
            raise QmdError("missing", "qmd has not indexed this workspace yet (run `memory-core index`)") from None
        if self._paths is None or self._paths[0] != mtime:
            data = _read_json(p)
            if not isinstance(data, dict):
                raise QmdError("unreadable", f"{p} is damaged; run `memory-core index`")
            self._paths = (mtime, data)
        return self._paths[1]

    def qmd_search(self, query: str, max_results: int, min_score: float | None,
                   sources: list[str] | None) -> list[SearchResult]:
        mode = self.settings.qmd.search_mode
        n = max_results * 4 if sources else max_results
        args = [mode, "--json", "-n", str(n)]
        if min_score is not None:
            args += ["--min-score", str(min_score)]
        out, err = run_qmd(self.settings, [*args, "--", query], timeout=self.settings.qmd.timeout_s)
        hits = parse_results(out, err)
        if not hits and "need embeddings" in err and "(100%)" in err:
            raise QmdError("failed", f"qmd {mode} has no vectors yet (run `qmd embed`)")
        table = self._path_table()
        results: list[SearchResult] = []
        seen: set[tuple[str, int, int]] = set()
        from memory_core.dates import chunk_date
        from memory_core.errors import PathError
        from memory_core.reading import indexed_transcript_dates
        from memory_core.redact import redact_lines

        redact_notes = self.index_meta().get("redact", self.settings.redact) == "all"
        match = {"search": "keyword", "vsearch": "vector"}.get(mode, "both")
        for h in hits:
            if min_score is not None and h.score < min_score:
                continue  # qmd's own --min-score is not applied by every mode
            info = table.get(h.collection, {}).get(h.path)
            if info is not None and "ambiguous" in info:
                info = _which_file(self.settings, info["ambiguous"], h)
            if info is None or (str(info["path"]), h.start_line, h.end_line) in seen:
                continue  # not a file memory-core indexes; or one reached through two collections
            seen.add((str(info["path"]), h.start_line, h.end_line))
            start, end = h.start_line, h.end_line
            if info.get("line_map"):  # an exported transcript: back to its JSONL lines
                lm = info["line_map"]
                start = lm[min(max(start, 1), len(lm)) - 1]
                end = lm[min(max(end, 1), len(lm)) - 1]
            source = str(info["source"])
            if sources and source not in sources:
                continue
            path = str(info["path"])
            stamps = None
            if source == "sessions":
                with contextlib.suppress(PathError):
                    stamps = indexed_transcript_dates(self.settings, path)
            # qmd indexes the raw notes: with redact = "all" (a hosted provider) the snippet is
            # masked as the builtin index's text is; transcripts were exported redacted already
            snippet = redact_lines(h.snippet) if (redact_notes and source != "sessions") else h.snippet
            score = max(0.0, h.score)
            results.append(SearchResult(path=path, start_line=start, end_line=end, score=score,
                                        snippet=snippet, source=source, citation=f"{path}#L{start}-L{end}",
                                        text_score=score if mode == "search" else 0.0,
                                        vector_score=score if mode == "vsearch" else 0.0, match=match,
                                        date=chunk_date(path, source, start, end, None, dates=stamps)))
        if hits and not results and not sources:
            raise QmdError("unreadable", "qmd answered with files memory-core does not index (run `memory-core index`)")
        return results[:max_results]

    def search(self, query: str, max_results: int | None = None, min_score: float | None = None,
               sources: list[str] | None = None, *, mode: str | None = None) -> list[SearchResult]:
        mode = self.settings.query.search_mode() if mode is None else mode
        if mode != "hybrid" or not (query or "").strip():  # qmd answers hybrid searches; the rest is builtin
            return super().search(query, max_results, min_score, sources, mode=mode)
        n = self.settings.query.max_results if max_results is None else max(1, int(max_results))
        t0 = time.time()
        name = f"{self.settings.qmd.search_mode}"
        try:
            results = self.qmd_search(query.replace("\x00", " "), n, min_score, sources)
        except QmdError as exc:
            self.backend_note = f"qmd {name} failed ({exc}); answered from the builtin index"
            log.warning("%s", self.backend_note)
            _record(self.settings, "last_search",
                    QmdRun(name, False, t0, time.time() - t0, error=str(exc), kind=exc.kind),
                    fallback_in_use=True, fallback_reason=str(exc))
            _emit_fallback_event(self.settings, exc)
            out = super().search(query, max_results, min_score, sources, mode=mode)
            self.last_search = {**self.last_search, "qmd_fallback": f"qmd {name} failed ({exc})"}
            return out
        if not results and self.settings.qmd.fallback_on_empty:
            # qmd's `search` ANDs every query word: a question in plain words mostly finds
            # nothing there while the builtin index (OR semantics, vectors) has clear matches
            builtin = super().search(query, max_results, min_score, sources, mode=mode)
            floor = self.settings.qmd.fallback_min_score
            strong = sum(1 for r in builtin if r.score >= floor)
            if strong:
                reason = (f"qmd {name} found nothing; the builtin index has {strong} strong match"
                          f"{'es' if strong != 1 else ''} (score >= {floor:g})")
                self.backend_note = f"{reason}; answered from the builtin index"
                _record(self.settings, "last_search", QmdRun(name, True, t0, time.time() - t0),
                        fallback_in_use=True, fallback_reason=reason)
                _emit_fallback_event(self.settings, QmdError("empty", reason))
                self.last_search = {**self.last_search, "qmd_fallback": reason}
                return builtin
        self.backend_note = ""
        _record(self.settings, "last_search", QmdRun(name, True, t0, time.time() - t0),
                fallback_in_use=False, fallback_reason="")
        self.last_search = {"backend": "qmd", "qmd_mode": name, "embedded": name != "search"}
        return results

    def status(self, *, measure: bool = False) -> dict[str, Any]:
        st = super().status(measure=measure)
        qs = load_status(self.settings)
        try:
            command: str | None = resolve_command(self.settings)
        except QmdError:
            command = None
        st["backend"] = "qmd"
        st["qmd"] = {
            "command": command, "search_mode": self.settings.qmd.search_mode,
            "index_name": self.settings.qmd.index_name, "state_dir": str(state_dir(self.settings)),
            "collections": [asdict(c) for c in plan_collections(self.settings)],
            "fallback_in_use": qs.fallback_in_use, "fallback_reason": qs.fallback_reason,
            "last_search": asdict(qs.last_search) if qs.last_search else None,
            "last_update": asdict(qs.last_update) if qs.last_update else None,
            "last_embed": asdict(qs.last_embed) if qs.last_embed else None,
        }
        if command is None:
            st["qmd"]["fallback_in_use"] = True
            st["qmd"]["fallback_reason"] = f"the qmd command {self.settings.qmd.command!r} was not found"
        return st


def _emit_fallback_event(settings: Settings, exc: QmdError) -> None:
    """A Prefect event for Automations, when a Prefect API is configured (never raises)."""
    from memory_core.engines import emit_event_if_configured

    emit_event_if_configured("memory-core.search.qmd-fallback", settings.index_file,
                             {"kind": exc.kind, "reason": str(exc)[:500]})
