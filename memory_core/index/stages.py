"""The stage functions of one reindex run: discover, chunk, look up, summarise.

Pure steps with no orchestration: they take settings, a provider and a plan and return
:mod:`memory_core.index.runtypes` values. The orchestrator (:mod:`memory_core.index.pipeline`) decides
which run in which order; the streamed build (:mod:`memory_core.index.streaming`) calls
:func:`chunk_file` per file; the Prefect flow runs the same orchestrator, so it runs these too.
"""

from __future__ import annotations

import codecs
import contextlib
import hashlib
import logging
import os
import re
import shutil
import time
import uuid
from collections import ChainMap
from collections.abc import Collection
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import apsw
import pyarrow as pa
import pyarrow.parquet as pq

from memory_core.config import Settings
from memory_core.embeddings.base import EmbeddingProvider
from memory_core.embeddings.batch_types import BatchFigures
from memory_core.errors import RunError
from memory_core.failpoints import failpoint
from memory_core.index.chunking import (
    Chunk,
    chunk_markdown,
    end_at_last_line,
    fit_to_window,
    max_chunk_chars,
    overlap_chunk_chars,
    remap_chunk_lines,
    sha256_hex,
)
from memory_core.index.runtypes import (
    MISS_SCHEMA,
    BuildResult,
    ChunkResult,
    EmbedCounts,
    EmbedStats,
    Fallback,
    MissResult,
    Progress,
    RunPlan,
    RunSummary,
    is_stop,
)
from memory_core.sources.discovery import (
    FileEntry,
    HintedDiscovery,
    HintUnclear,
    checked_workspace,
    discover_changed,
    discover_files,
    hash_file,
    scan_against,
)
from memory_core.sources.freshness import SKIPPED_KEY, recorded_skips
from memory_core.sources.sessions import reader_zone
from memory_core.storage.cache import EmbeddingCache, LiveVectors
from memory_core.storage.indexmeta import (
    MESSAGE_DAYS_VERSION,
    IndexRecord,
    build_meta,
    chunk_params,
    newer_error,
    newer_writer,
    note_windows_on,
    rebuild_reason,
)
from memory_core.storage.store import (
    LiveFile,
    connect,
    has_table,
    make_private_dir,
    probe_index,
    read_live_files,
    read_live_rows,
    read_live_stats,
    refuse_symlink,
)

if TYPE_CHECKING:
    from memory_core.sources.sessions import SessionDoc

log = logging.getLogger(__name__)

ROW_GROUP = 4096
# Work files live for one run on local disk: uncompressed Parquet writes ~7x and reads ~10x
# faster than snappy for chunk texts, for ~3x the (temporary) bytes.
WORK_COMPRESSION = "none"
MAX_FILE_BYTES = 64 * 1024 * 1024
BINARY_SNIFF = 8192


# -- work files ---------------------------------------------------------------------------------

WORK_FOLDER = ".memory-core-work"


def work_root(index_path: Path) -> Path:
    """Where runs of this index keep their work files (Batch API mode, a run without the cache):
    ``.memory-core-work/<index file name>/`` beside the index. Each index its own: two indexes
    kept in one folder shared ``.memory-core-work``, and one's run removed the other's live work
    folder as stale (it holds only its own index's lock), failing that run after it had submitted
    Batch API jobs."""
    return index_path.parent / WORK_FOLDER / index_path.name


def ensure_workdir(plan: RunPlan) -> Path:
    """The run's private work folder (0700, never through a symlink; its files 0600), created
    on first use."""
    path = Path(plan.workdir)
    make_private_dir(path, ours=3)
    return path


def cleanup_workdir(plan: RunPlan) -> None:
    shutil.rmtree(plan.workdir, ignore_errors=True)
    for folder in list(Path(plan.workdir).parents)[:2]:  # the index's, then .memory-core-work
        with contextlib.suppress(OSError):
            folder.rmdir()  # only when empty


def remove_stale_workdirs(index_path: Path) -> int:
    """Work folders that runs of this index killed before their cleanup left behind. Called with
    the index's writer lock held, so no live run owns any of them; another index's runs, which
    that lock does not hold off, keep theirs (each index has its own :func:`work_root`)."""
    top = index_path.parent / WORK_FOLDER
    root = work_root(index_path)
    refuse_symlink(top, "work folder")  # never clean up (rmtree) through a link
    refuse_symlink(root, "work folder")
    n = 0
    with contextlib.suppress(FileNotFoundError, NotADirectoryError):
        for entry in os.scandir(root):
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path, ignore_errors=True)
                n += 1
        with contextlib.suppress(OSError):
            root.rmdir()
    # run folders of the layout before (``.memory-core-work/<run>``, shared by every index of the
    # folder) that a killed run left: removed once a day old, when no run of any version still has them
    with contextlib.suppress(FileNotFoundError, NotADirectoryError):
        for entry in os.scandir(top):
            if _RUN_ID.fullmatch(entry.name) and entry.is_dir(follow_symlinks=False) and \
                    time.time() - entry.stat(follow_symlinks=False).st_mtime > LEGACY_WORKDIR_AGE_S:
                shutil.rmtree(entry.path, ignore_errors=True)
                n += 1
    with contextlib.suppress(OSError):
        top.rmdir()  # only when empty (no other index's runs)
    return n


_RUN_ID = re.compile(r"\d{8}T\d{6}-[0-9a-f]{6}")  # what new_run_id() names a run's folder


def new_run_id() -> str:
    """A run's id (its work folder's name): its start to the second, then 6 random hex digits."""
    return time.strftime("%Y%m%dT%H%M%S") + "-" + uuid.uuid4().hex[:6]
LEGACY_WORKDIR_AGE_S = 86_400.0


# -- plan ----------------------------------------------------------------------------------------

def discover_stage(settings: Settings, provider: EmbeddingProvider, reason: str, full: bool = False,
                   only_paths: Collection[str] | None = None, *, workdir_root: Path | None = None) -> RunPlan:
    """Find the sources, hash what may have changed, and diff against the live index.

    ``only_paths`` (an incremental run given the paths that changed since the last complete run,
    e.g. by a watcher): every file of the live index is taken as recorded, except those paths,
    which are looked at by the rules of the scan (:func:`memory_core.sources.discovery.discover_changed`).
    The run scans everything as usual when it is a full rebuild, when there is no live index, or
    when a path cannot be judged alone (the plan's ``hint_fallback`` says why)."""
    index_path = settings.index_file
    hinting = only_paths is not None and not full
    if not hinting:
        checked_workspace(settings)
    meta = build_meta(settings, provider, reason)
    if "sessions" in settings.sources and (zone := reader_zone()) is not None:
        # the zone the transcripts' message days were read in besides UTC (absent: UTC only). A
        # run in another zone re-reads every transcript once for its days, no text or vector
        # changing (below): "this morning" in Tokyo is Tokyo's morning
        meta["days_zone"] = zone
    live_meta, problem = probe_index(index_path)
    full_reason = "requested" if full else ""
    if (newer := newer_writer(live_meta)) is not None:
        if not full:  # two versions sharing an index would rebuild it back and forth
            raise newer_error(index_path, newer)
        full_reason = f"requested, replacing an index of a newer memory-core ({newer})"
    if problem:
        full, full_reason = True, f"live index damaged: {problem}"
    elif not full:
        why = rebuild_reason(live_meta, meta, legacy_keys=provider.legacy_provider_keys)
        if why:
            full, full_reason = True, why
    hinted: HintedDiscovery | None = None
    hint_fallback = ""
    n_indexed = 0
    live: dict[str, LiveFile] = {}
    if hinting:
        assert only_paths is not None
        hinted, n_indexed, live, hint_fallback = _discover_hinted(settings, only_paths, full_reason if full else "",
                                                                   live_meta, index_path)
    # the files earlier runs looked at and skipped (memory_core.sources.freshness.SKIPPED_KEY): as
    # they were, they are not looked at again (counted unchanged, kept in the new meta: ``skips``)
    recorded_skip = recorded_skips(live_meta) if _comparable(settings, live_meta, problem) else {}
    skips: dict[str, list[Any]] = {}
    to_index: list[FileEntry] = []
    touched: dict[str, dict[str, Any]] = {}  # same bytes, new mtime: the files row to record (RunPlan.touched)
    counts = {"scanned": 0, "new": 0, "changed": 0, "unchanged": 0, "removed": 0, "sessions_carried": 0,
              "sessions_redated": 0}
    redate: frozenset[str] = frozenset()
    days_looked_at = False  # the transcripts an older reading of days may have dated wrongly were listed
    seen: set[str] = set()
    indexed: Collection[str]  # the indexed paths a file not seen now was removed from
    if hinted is not None:
        # not named: as recorded, without a look (a watcher saw no event for them); ``live``
        # holds the rows of the named paths that are indexed
        counts["unchanged"] = n_indexed - len(live)
        files, warnings, indexed = hinted.files, list(hinted.warnings), live
    elif full or live_meta is None:
        disc = discover_files(settings)
        # a full rebuild re-chunks every file, but counts what changed since the live index (when
        # it is readable and of these sources): its unchanged, changed, new and removed files
        live = _live_to_compare(settings, live_meta, problem, index_path)
        files, warnings, indexed = disc.files, list(disc.warnings), live
    else:
        # every file, compared with its recorded stat as it is found: only those that differ
        # (or are new) are listed, and only their files rows are read whole
        recorded = read_live_stats(index_path)
        if "sessions" in settings.sources and live_meta.get("days_zone") != meta.get("days_zone"):
            # days read in another zone (or in UTC only): every transcript, once (its days only)
            redate = frozenset(p for p, v in recorded.items() if v[0] == "sessions")
            days_looked_at = True
        elif "sessions" in settings.sources and live_meta.get("message_days") != MESSAGE_DAYS_VERSION:
            to_redate = _transcripts_to_redate(index_path)
            redate, days_looked_at = to_redate or frozenset(), to_redate is not None
        if redate:  # listed by the scan as if changed; taken as they are below
            recorded = {**recorded, **{p: (v[0], -1, v[2]) for p, v in recorded.items() if p in redate}}
        # a skipped file as it was is not listed either; an unreadable one always is (whether it
        # still is unreadable is looked at below)
        skip_stats = {p: (k.source, k.mtime_ms, k.size) for p, k in recorded_skip.items()
                      if k.kind != "unreadable" and p not in recorded}
        scan = scan_against(settings, ChainMap(recorded, skip_stats) if skip_stats else recorded)
        seen, indexed = scan.seen, recorded
        counts["unchanged"] = scan.unchanged
        files, warnings = scan.changed, scan.warnings
        known = [f.path for f in files if f.path in recorded]
        if len(known) * 8 > len(recorded):
            live = read_live_files(index_path)
        elif known:
            live = read_live_rows(index_path, known)[1]
    if problem:
        warnings.append(f"the live index is damaged ({problem}); rebuilding it from sources and cache")
    counts["scanned"] = counts["unchanged"] + len(files)
    listed: set[str] = set()
    for f in files:
        seen.add(f.path)
        listed.add(f.path)
        old = live.get(f.path)
        skip = recorded_skip.get(f.path) if old is None else None
        if skip is not None and skip.holds(f.source, f.mtime_ms, f.size, f.abs_path):
            counts["unchanged"] += 1  # looked at and skipped before, and so again: no run for it
            if full:
                to_index.append(f)
            else:
                skips[f.path] = list(skip)
            continue
        if old is not None and old.size == f.size and old.mtime_ms == f.mtime_ms and old.source == f.source:
            if f.path in redate:  # as it was: re-read for its messages' days, its vectors from the cache
                to_index.append(f.with_hash(old.hash))
                counts["changed"] += 1
                counts["sessions_redated"] += 1
                continue
            counts["unchanged"] += 1
            if full:  # counted as unchanged, chunked all the same
                to_index.append(f)
            continue
        if old is None and f.source != "sessions":
            # new (or skipped before, and changed since): nothing to compare, so it is hashed when
            # it is read for chunking (one read)
            to_index.append(f)
            counts["new" if skip is None else "changed"] += 1
            continue
        try:
            if old is not None and f.source == "sessions" and old.source == f.source:
                from memory_core.sources.sessions import read_hashes  # the delta check below reuses this read

                digest = read_hashes(f.abs_path, old.size)[0]
            else:
                digest = hash_file(f.abs_path)
        except OSError as exc:
            if old is not None and not full:
                warnings.append(f"cannot read {f.path} ({exc.strerror}); keeping its indexed rows")
                counts["unchanged"] += 1
                if not isinstance(exc, FileNotFoundError):
                    # recorded as it is now, so freshness does not call it changed (and start a
                    # run on every search) until it changes again or can be read
                    skips[f.path] = [f.source, f.mtime_ms, f.size, "unreadable"]
            else:
                warnings.append(f"cannot read {f.path} ({exc.strerror}); skipped")
                if old is None:
                    skips[f.path] = [f.source, f.mtime_ms, f.size, "unreadable"]
            continue
        if old is not None and old.hash == digest and old.source == f.source and f.path not in redate:
            # Same bytes, new mtime (touch, checkout): keep rows, refresh the files row.
            counts["unchanged"] += 1
            if full:
                to_index.append(f.with_hash(digest))
            else:
                touched[f.path] = old._replace(mtime_ms=f.mtime_ms)._asdict()
            continue
        if (old is not None and not full and f.source == "sessions" and f.path not in redate
                and _below_delta(settings, f, old)):
            counts["sessions_carried"] += 1
            continue
        to_index.append(f.with_hash(digest))
        counts["changed" if old is not None or skip is not None else "new"] += 1
        counts["sessions_redated"] += f.path in redate
    if not full:  # the skipped files not listed: as they were (a hinted run: not named, or named and gone)
        for p, k in recorded_skip.items():
            if p not in listed and (p not in hinted.gone if hinted is not None else p in seen):
                skips[p] = list(k)
    removed = sorted(p for p in indexed if p not in seen)  # (hinted: the named paths that are gone)
    counts["removed"] = len(removed)
    if (not full and live_meta is not None and meta.get("message_days") and not days_looked_at
            and (live_meta.get("message_days") != meta["message_days"]
                 or live_meta.get("days_zone") != meta.get("days_zone"))):
        # transcripts not looked at for their days (a run given the changed paths, or the listing
        # failed): the version as the live index records it, so the next run looks
        for key in ("message_days", "days_zone"):
            if live_meta.get(key) is None:  # unrecorded, as the live index has it
                meta.pop(key, None)
            else:
                meta[key] = live_meta[key]
    # an index recorded under the key the rule before gave this configuration (it hashed credentials:
    # memory_core.embeddings.base.legacy_provider_keys) is published anew even when nothing changed,
    # so it and the cache (which the run opens) take today's key while the credential they were made
    # with is still the configured one: rotated first, the old key would no longer be recognised
    legacy_key = (not full and live_meta is not None
                  and live_meta.get("provider_key") in provider.legacy_provider_keys)
    run_id = new_run_id()
    root = workdir_root or work_root(index_path)
    workdir = root / run_id  # created only when the run needs work files (ensure_workdir)
    failpoint("discover")
    return RunPlan(
        run_id=run_id, workdir=str(workdir), index_path=str(index_path), full=full, full_reason=full_reason,
        meta=meta, to_index=to_index, removed=removed, counts=counts, warnings=warnings,
        hinted_paths=hinted.checked if hinted is not None else None, hint_fallback=hint_fallback, skips=skips,
        new_meta=any(p not in recorded_skip or list(recorded_skip[p]) != k for p, k in skips.items())
        or days_looked_at or legacy_key or (not problem and _recursive_changed(settings, live_meta)),
        touched=touched,
    )


def _comparable(settings: Settings, live_meta: dict[str, Any] | None, problem: str | None) -> bool:
    """Whether the live index's paths name this run's files: it is readable and records this
    workspace and sessions folder."""
    if live_meta is None or problem:
        return False
    return all(live_meta.get(key) == str(value)
               for key, value in (("workspace", settings.workspace_dir), ("sessions_dir", settings.sessions_dir)))


def _live_to_compare(settings: Settings, live_meta: dict[str, Any] | None, problem: str | None,
                     index_path: Path) -> dict[str, LiveFile]:
    """The live index's ``files`` rows a full rebuild counts its files against; none when there
    is no readable live index, or when it records another workspace or sessions folder (its
    paths name other files)."""
    if not _comparable(settings, live_meta, problem):
        return {}
    try:
        return read_live_files(index_path)
    except apsw.Error:
        return {}


def _recursive_changed(settings: Settings, live_meta: dict[str, Any] | None) -> bool:
    """Whether this run reads the sessions folder recursively and the live index was not built so,
    or the other way round (an index that does not record it was not)."""
    if live_meta is None or "sessions" not in settings.sources:
        return False
    built = live_meta.get("built_from")
    return settings.sessions.recursive != (isinstance(built, dict) and built.get("sessions_recursive") is True)


def _discover_hinted(settings: Settings, only_paths: Collection[str], full_reason: str,
                     live_meta: dict[str, Any] | None, index_path: Path,
                     ) -> tuple[HintedDiscovery | None, int, dict[str, LiveFile], str]:
    """The changed paths' discovery, how many files are indexed and the ``files`` rows of the
    changed ones; or (None, 0, {}, why the run scans everything instead)."""
    if full_reason:
        return None, 0, {}, f"a full rebuild: {full_reason}" if full_reason != "no index yet" else full_reason
    if live_meta is None:
        return None, 0, {}, "no index yet"
    for key, value in (("workspace", settings.workspace_dir), ("sessions_dir", settings.sessions_dir)):
        if live_meta.get(key) != str(value):
            return None, 0, {}, f"the live index records another {key.replace('_', ' ')}"
    if _recursive_changed(settings, live_meta):
        # the transcripts in the sessions folder's subfolders come or go: the named paths do not say which
        return None, 0, {}, f"[sessions] recursive turned {'on' if settings.sessions.recursive else 'off'}"
    try:
        hinted = discover_changed(settings, only_paths)
    except HintUnclear as exc:
        return None, 0, {}, str(exc)
    n_indexed, rows, held = read_live_rows(index_path, [*(f.path for f in hinted.files), *sorted(hinted.gone)],
                                           sorted(hinted.gone))
    if held is not None:  # a path that is gone and held indexed files was a folder (moved away, removed)
        return None, 0, {}, f"a folder holding {held} is gone"
    return hinted, n_indexed, rows, ""


def _transcripts_to_redate(index_path: Path) -> frozenset[str] | None:
    """The indexed transcripts whose recorded days an older reading of timestamps may have got
    wrong (:data:`memory_core.storage.indexmeta.MESSAGE_DAYS_VERSION`): none of their chunks has a
    day in 1971-2200 (lowercase ``t``/``z``, epochs as strings, micro- or nanosecond epochs dated
    nothing), or one has a day outside it (a placeholder time dated 1970, ``9999-12-31`` the year
    9999); or a chunk holds a Claude Code command block read as text before version 5
    (``<command-name>``, ``<local-command-stdout>``, ``<bash-stdout>``). Transcripts with no
    timestamps at all are among them, and are read once more for nothing. One statement over ``chunk_days``; none on an index without it (older schemas rebuild);
    None when they cannot be listed (the version is then not recorded: the next run looks again)."""
    conn = connect(index_path, readonly=True, immutable=True)
    try:
        if not has_table(conn, "chunk_days"):
            return frozenset()
        rows = conn.execute(
            "SELECT f.path FROM files f WHERE f.source = 'sessions' AND ("
            " NOT EXISTS (SELECT 1 FROM chunks c JOIN chunk_days d ON d.rid = c.rid"
            "             WHERE c.path = f.path AND d.day >= '1971-01-01' AND d.day < '2201-01-01')"
            " OR EXISTS (SELECT 1 FROM chunks c JOIN chunk_days d ON d.rid = c.rid"
            "            WHERE c.path = f.path AND (d.day < '1971-01-01' OR d.day >= '2201-01-01'))"
            " OR EXISTS (SELECT 1 FROM chunks c WHERE c.path = f.path AND (instr(c.text, '<command-') > 0"
            "            OR instr(c.text, '<local-command-') > 0 OR instr(c.text, '<bash-') > 0)))")
        return frozenset(r[0] for r in rows)
    except apsw.Error as exc:  # a days refresh never fails a run: the days stay as recorded
        log.warning("cannot list the transcripts to re-read for their days (%s)", exc)
        return None
    finally:
        conn.close()


def _below_delta(settings: Settings, f: FileEntry, old: LiveFile) -> bool:
    """A transcript that grew by less than both delta thresholds keeps its indexed rows
    (:func:`memory_core.sources.sessions.below_delta`, the rule freshness uses too)."""
    from memory_core.sources.sessions import below_delta

    return below_delta(f.abs_path, f.size, old.size, old.lines, indexed_hash=old.hash,
                       delta_bytes=settings.sessions.delta_bytes,
                       delta_messages=settings.sessions.delta_messages)


# -- chunk -----------------------------------------------------------------------------------

def _read_bytes(abs_path: str, size_hint: int) -> tuple[bytes, os.stat_result]:
    """The file's bytes and its ``fstat`` taken just before they were read, through the os
    module: ``open().read()`` costs ~15 µs a file in objects and extra system calls (isatty, a
    growing buffer); a first read sized by the discovered size and one more to see the end cost
    ~7 µs (20k files: 0.30 s -> 0.15 s). A file that grew since discovery is read to its end all
    the same. The stat is of the same open file, before the read: a write during the read moves
    its mtime past the one recorded, so the next run looks at the file again."""
    fd = os.open(abs_path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    try:
        st = os.fstat(fd)
        parts = []
        want = size_hint + 1
        while chunk := os.read(fd, want):
            parts.append(chunk)
            want = 1 << 20
        return (parts[0] if len(parts) == 1 else b"".join(parts)), st
    finally:
        os.close(fd)


def _read_markdown(f: FileEntry, warnings: list[str],
                   skipped: dict[str, list[Any]] | None = None) -> tuple[str, str, os.stat_result] | None:
    """(text, sha256 of the bytes, the file's stat as they were read), or None with a warning
    when the file cannot be indexed; then ``skipped`` gets its record (``[source, mtime ms, size,
    kind]``: :data:`memory_core.sources.freshness.SKIPPED_KEY`) unless it is gone."""
    skip = skipped if skipped is not None else {}
    if f.size > MAX_FILE_BYTES:
        warnings.append(f"{f.path} is {f.size // (1024 * 1024)} MiB, over the {MAX_FILE_BYTES // (1024 * 1024)} MiB limit; skipped")
        skip[f.path] = [f.source, f.mtime_ms, f.size, "too-large"]
        return None
    try:
        data, st = _read_bytes(f.abs_path, f.size)
    except FileNotFoundError:
        warnings.append(f"{f.path} disappeared during the run; skipped")
        return None
    except OSError as exc:
        warnings.append(f"cannot read {f.path} ({exc.strerror}); skipped")
        skip[f.path] = [f.source, f.mtime_ms, f.size, "unreadable"]
        return None
    if b"\x00" in data[:BINARY_SNIFF]:
        warnings.append(f"{f.path} looks binary (NUL bytes); skipped")
        skip[f.path] = [f.source, st.st_mtime_ns // 1_000_000, st.st_size, "binary"]
        return None
    digest = hashlib.sha256(data).hexdigest()
    # a UTF-8 byte-order mark (Notepad's, some exporters') is no text: kept, it led the first
    # chunk's text and snippet and hid a heading on the first line from the chunker's items
    # (``get`` leaves it out of line 1 too: safeio.read_lines)
    body = data[3:] if data.startswith(codecs.BOM_UTF8) else data
    try:
        return body.decode("utf-8"), digest, st
    except UnicodeDecodeError:
        warnings.append(f"{f.path} is not valid UTF-8; undecodable bytes were replaced")
        return body.decode("utf-8", errors="replace"), digest, st


@dataclass
class FileChunks:
    """One file's chunks (deduplicated, non-blank) and its ``files`` row fields."""

    chunks: list[Chunk]
    file_row: dict[str, Any]  # FileRow's fields: runtypes.ChunkResult.files holds them as a dict
    over_window: int = 0
    days: list[list[tuple[str, int, str]]] | None = None  # a transcript's: each chunk's chunk_stamps


def chunk_file(f: FileEntry, settings: Settings, provider: EmbeddingProvider, tokens: int, overlap: int,
               warnings: list[str], skipped: dict[str, list[Any]] | None = None) -> FileChunks | None:
    """Read and chunk one source file; None (with a warning) when it cannot be indexed, and then
    ``skipped`` (when given) records it as it was (what the run's meta keeps: a file skipped
    again and again does not make the index look dirty)."""
    from memory_core.sources.redact import redact_lines, should_redact
    from memory_core.sources.sessions import chunk_stamps, parse_session_file

    lines: int | None = None
    doc: SessionDoc | None = None
    digest = f.hash
    size, mtime_ms = f.size, f.mtime_ms
    if f.source == "sessions":
        try:
            doc = parse_session_file(f.abs_path, redact_secrets=should_redact("sessions", settings.redact))
        except OSError as exc:
            warnings.append(f"cannot read {f.path} ({exc.strerror}); skipped")
            if skipped is not None and not isinstance(exc, FileNotFoundError):
                skipped[f.path] = [f.source, f.mtime_ms, f.size, "unreadable"]
            return None
        if doc.skipped:
            where = ", ".join(map(str, doc.bad_lines)) + (", ..." if doc.skipped > len(doc.bad_lines) else "")
            warnings.append(f"{f.path}: {doc.skipped} malformed lines (not JSON) skipped"
                            + (f" (line {where})" if doc.bad_lines else ""))
        if doc.unread_form():  # indexed empty, where the file holds a conversation in another form
            kinds = ", ".join(doc.other_types) or "no type"
            warnings.append(f"{f.path}: none of its {doc.other_records} records is a message in a form memory-core"
                            f" reads (their types: {kinds}), so nothing of it is indexed; transcripts are read in"
                            " OpenClaw's form, as flat chat messages ({\"role\": ..., \"content\": ...}), and as"
                            " Claude Code's and Codex CLI's session logs (README, \"What gets indexed\")")
        if doc.file_stat is not None:  # the hash, size and mtime of the bytes parsed (as for notes)
            digest = doc.file_sha256
            size, mtime_ms = doc.file_stat[0], doc.file_stat[1] // 1_000_000
        chunks = remap_chunk_lines(fit_to_window(chunk_markdown(doc.content, tokens, overlap), provider, tokens,
                                                 overlap, doc.content), doc.line_map) if doc.content else []
        lines = doc.lines
    else:
        got = _read_markdown(f, warnings, skipped)
        if got is None:
            return None
        # the hash, size and mtime of the bytes chunked, never discovery's: a note edited between
        # discovery and this read (an editor's truncate-then-write) is recorded as what was read,
        # so the next run sees the difference instead of calling it unchanged for ever
        text, digest, st = got
        size, mtime_ms = st.st_size, st.st_mtime_ns // 1_000_000
        if should_redact("memory", settings.redact):
            text = redact_lines(text)  # line count kept; PEM blocks across lines too
        chunks = end_at_last_line(fit_to_window(chunk_markdown(text, tokens, overlap), provider, tokens, overlap, text),
                                  text)
    # Identical segments of one long line share lines and hash, hence the reference's
    # chunk id: keep one (they would be the same search result anyway).
    seen_keys: set[tuple[int, int, str]] = set()
    kept: list[Chunk] = []
    for c in chunks:
        key = (c.start_line, c.end_line, c.hash)
        if c.text.strip() and key not in seen_keys:
            seen_keys.add(key)
            kept.append(c)
    row = {"path": f.path, "source": f.source, "hash": digest or "", "mtime_ms": mtime_ms, "size": size,
           "chunks": len(kept), "lines": lines}
    over = provider.count_over_window([c.text for c in kept]) if kept and _may_exceed_window(provider, tokens, overlap) \
        else 0
    days = [chunk_stamps(doc, c.start_line, c.end_line) for c in kept] if doc is not None else None
    return FileChunks(kept, row, over, days)


def chunk_parts(source: str, settings: Settings, text: str, provider: EmbeddingProvider) -> list[tuple[str, str]]:
    """(hash, text) of the extra vectors a chunk gets: a transcript chunk's exchanges when
    ``chunking.exchange_vectors`` is on (:func:`memory_core.sources.sessions.exchange_parts`), a
    note chunk's windows of lines when :func:`~memory_core.storage.indexmeta.note_windows_on`
    (:func:`memory_core.index.chunking.note_windows`), else none."""
    if source == "sessions":
        if not settings.chunking.exchange_vectors:
            return []
        from memory_core.sources.sessions import exchange_parts

        return [(sha256_hex(t), t) for t in exchange_parts(text)]
    if not note_windows_on(settings, provider):
        return []
    from memory_core.index.chunking import note_windows

    return [(sha256_hex(t), t) for t in note_windows(text)]


def _may_exceed_window(provider: EmbeddingProvider, tokens: int, overlap: int) -> bool:
    """False when no chunk of these settings can be over the provider's window: a chunk holds
    at most ``(tokens + overlap) * 4`` characters plus a newline, and the token estimate never
    exceeds characters + 1. True for providers that count with their own tokenizer."""
    if provider.own_tokenizer:
        return True
    limit = provider.max_tokens_per_input
    return not limit or (max_chunk_chars(tokens) + overlap_chunk_chars(overlap) + 2) > limit


def merge_over_window(plan: RunPlan, live_meta: dict[str, Any] | None, new: dict[str, int]) -> dict[str, int]:
    """Chunks over the model's window per indexed path: the live index's for carried files,
    this run's for the files it indexed (only paths with a non-zero count are kept)."""
    out: dict[str, int] = {}
    if not plan.full and live_meta:
        gone = set(plan.removed) | {f.path for f in plan.to_index}
        out = {p: n for p, n in (live_meta.get("over_window_by_path") or {}).items() if p not in gone}
    out.update({p: n for p, n in new.items() if n})
    return dict(sorted(out.items()))

# -- cache lookup (Batch API mode) ---------------------------------------------------------------

def collect_misses(plan: RunPlan, settings: Settings, provider: EmbeddingProvider,
                   cache: EmbeddingCache) -> MissResult:
    """Chunk every file to (re)index and write the unique chunk texts with no cached vector to
    ``misses.parquet`` (0600) in the run's work folder: what Batch API jobs are planned from.
    The streamed build that follows chunks the files again (cheap next to a batch job's wait).
    Transcript exchange vectors are flagged and counted apart from the chunks, as the streamed
    build counts them (an exchange whose text is also a chunk's counts as that chunk)."""
    tokens, overlap = chunk_params(settings, provider)
    # the dimension the build will keep (streaming._Stream: the provider's, else an incremental
    # run's live index's): a cached vector of another length is a miss there, so one here too
    dims = provider.dims
    if dims is None and not plan.full:
        dims = (IndexRecord.from_meta(probe_index(Path(plan.index_path))[0]) or IndexRecord()).dims
    # a full run whose provider states no dimension (an unknown model, no remote.dimensions) and a
    # cache that may hold vectors of an earlier size: its first text is embedded alone, now, as the
    # streamed build's learn_dims does, so the jobs are planned for what the build will keep
    learn = dims is None and not cache.is_empty()
    out = str(ensure_workdir(plan) / "misses.parquet")
    fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    os.close(fd)
    seen: dict[str, bool] = {}  # hash -> first met as an exchange (not a chunk's own text)
    late: set[str] = set()  # first met as an exchange, then as a chunk's own: a chunk after all
    hits = misses = ex_hits = ex_misses = 0
    warnings: list[str] = []
    todo: list[tuple[str, str, bool]] = []

    def flush(writer: pq.ParquetWriter, force: bool = False) -> None:
        nonlocal hits, misses, ex_hits, ex_misses
        nonlocal dims, learn
        if not todo or (len(todo) < ROW_GROUP and not force):
            return
        if learn:
            learn = False
            h0, t0, _ = todo[0]
            if cache.answers is not None:
                cache.answers.expect([h0], [t0])
            store_vectors(cache, [h0], provider.embed_documents([t0]))
            dims = provider.dims
        cached = cache.has_many([h for h, _, _ in todo], dims)
        keep = [(h, t, ex) for h, t, ex in todo if h not in cached]
        n_ex = sum(1 for _, _, ex in todo if ex)
        kept_ex = sum(1 for _, _, ex in keep if ex)
        hits += len(cached) - (n_ex - kept_ex)
        ex_hits += n_ex - kept_ex
        misses += len(keep)
        ex_misses += kept_ex
        if keep:
            writer.write_table(pa.table({
                "hash": [h for h, _, _ in keep], "text": [t for _, t, _ in keep],
                "tokens": [provider.estimate_tokens(t) for _, t, _ in keep], "exchange": [ex for _, _, ex in keep],
            }, schema=MISS_SCHEMA))
        todo.clear()

    with pq.ParquetWriter(out, MISS_SCHEMA, compression=WORK_COMPRESSION) as writer:
        for f in plan.to_index:
            fc = chunk_file(f, settings, provider, tokens, overlap, warnings)
            for c in (fc.chunks if fc else []):
                if seen.get(c.hash):
                    late.add(c.hash)
                for i, (h, t) in enumerate([(c.hash, c.text), *chunk_parts(f.source, settings, c.text, provider)]):
                    if h not in seen:
                        seen[h] = i > 0
                        todo.append((h, t, i > 0))
            flush(writer)
        flush(writer, force=True)
    part_chunks: list[str] = []
    if late:  # rare: an exchange's text that another chunk has as its own (the cache is unchanged since)
        late_hits = cache.has_many(sorted(late), dims)
        part_chunks = sorted(late - set(late_hits))
        hits, ex_hits = hits + len(late_hits), ex_hits - len(late_hits)
        ex_misses -= len(part_chunks)
    return MissResult(path=out, misses=misses, hits=hits, exchanges=ex_misses, exchange_hits=ex_hits,
                      part_chunks=part_chunks)


def store_vectors(cache: EmbeddingCache, hashes: list[str], vectors: Any) -> None:
    """Commit one response's vectors to the cache at once (the moment they are received), once the
    run's check of it passed (``cache.answers``: a request of one or two texts is compared with
    vectors received for other texts, memory_core.index.answer_check)."""
    if cache.answers is not None:
        cache.answers.check(hashes, vectors)
    cache.put_array(hashes, vectors)
    failpoint("embed")


def open_cache(settings: Settings, provider: EmbeddingProvider, plan: RunPlan) -> EmbeddingCache | None:
    """The embedding cache of this run; with ``cache.enabled = false`` it lives (and dies) in the workdir."""
    if not provider.has_vectors:
        return None
    path = settings.cache_file if settings.cache.enabled else ensure_workdir(plan) / "run-cache.sqlite"
    # a cache of the version before keyed this configuration's rows by the key of the rule before,
    # credentials and all: they are renamed to today's key as it opens (nothing embedded again)
    cache = EmbeddingCache(path, provider.name, provider.model, provider.provider_key,
                           legacy_keys=provider.legacy_provider_keys)
    cache.throwaway = not settings.cache.enabled
    cache.renew = plan.re_embed  # --re-embed: lookups see this run's own vectors only
    if not provider.on_machine:  # a gateway may answer one vector for every text: small requests checked
        from memory_core.index.answer_check import SmallRequestCheck

        cache.answers = SmallRequestCheck(provider, cache.live, Path(plan.index_path))
    try:
        if settings.cache.enabled:
            cache.register_index(Path(plan.index_path))
        if cache.renew:
            since = cache.begin_renewal(Path(plan.index_path)) if settings.cache.enabled else None
            # what a stopped re-embed of this index received is its own, in a cache only it uses: in
            # a shared one, another index's run may have stored older vectors of the model since
            cache.renew_since = since if since is not None and cache.sole_index(Path(plan.index_path)) else None
            return cache
        # the live index's vectors first (memory_core.storage.cache: it is their record), then those of the
        # other indexes that use this cache
        own = os.path.abspath(plan.index_path)
        for other in [own, *(p for p in cache.indexes() if p != own)]:
            live = LiveVectors.open(Path(other), provider.name, provider.model, provider.provider_key, provider.dims,
                                    legacy_keys=provider.legacy_provider_keys)
            if live is not None:
                cache.live.append(live)
    except BaseException:
        cache.close()
        raise
    return cache


def trim_cache(settings: Settings, cache: EmbeddingCache, index_path: Path) -> int:
    """After a publish: delete the cache entries the new live index holds (memory_core.storage.cache).
    Only a cache this index alone uses, and only when the live index can be read by hash. After
    ``--re-embed`` a cache this index alone uses first drops every other vector of the model
    (cache.drop_old); a cache other indexes use too keeps theirs (they were paid for, and may be
    sound: dropping them made the next run of another index pay for all of them again, the
    thirty-ninth session's audit G), and the run says so."""
    if settings.cache.enabled and cache.renew:
        cache.end_renewal(index_path)  # published: a later plain run no longer continues it
        if cache.sole_index(index_path):
            cache.drop_old()
        else:
            log.warning("re-embed: the embedding cache %s is shared with other indexes: their cached vectors"
                        " of %s / %s were kept (re-embed those indexes too if the same provider answered"
                        " them)", settings.cache_file, cache.provider, cache.model)
    if not settings.cache.enabled or not cache.sole_index(index_path):
        return 0
    live = LiveVectors.open(index_path, cache.provider, cache.model, cache.provider_key)
    if live is None:
        return 0
    try:
        failpoint("before-trim")
        return cache.trim(live)
    except RunError as exc:  # the index is published; a failed trim only leaves duplicates
        if is_stop(exc):  # a SIGTERM here stops the run (it says it published), not a trim failure
            raise
        log.warning("the embedding cache was not trimmed of the vectors the index holds (%s); the next run"
                    " trims them", exc)
        return 0
    finally:
        live.close()


# -- embed stats ---------------------------------------------------------------------------------

def embed_stats(settings: Settings, provider: EmbeddingProvider, stream: EmbedCounts,
                batch: tuple[EmbedCounts, BatchFigures] | None, *, tokens_earlier: int = 0) -> EmbedStats:
    """One run's embedding figures: the streamed build's sync requests plus, in Batch API mode,
    the batch jobs' (``memory_core.index.batch_runner.BatchRun``: their counts and job figures).
    ``tokens_earlier``: tokens of earlier runs' jobs a run not in Batch API mode collected
    (``batch_runner.LookOnce``), billed at the batch price when they completed, whoever collects
    them (as a batch run counts the jobs it re-attaches to)."""
    from memory_core.embeddings.cost import estimate_cost

    out = EmbedStats(requests=stream.requests, embedded=stream.embedded, tokens_sync=stream.tokens,
                     tokens_batch=tokens_earlier)
    if batch is not None:
        counts, figures = batch
        b = replace(figures, chunks_via_sync=stream.embedded, exchanges_via_sync=stream.exchanges)
        if b.disabled:
            b.mode = "batch, then sync (batch mode off)"
        elif stream.embedded:
            b.mode = "batch + sync for failed lines"
        # (``requests`` are sync requests, as the run's report names them; the jobs are in ``batch``:
        # a run of 6 sync requests and 2 jobs said 8: the thirty-ninth session's audit E)
        out.embedded += counts.embedded
        out.tokens_batch += counts.tokens
        out.batch = b
    elif settings.batch.enabled and not provider.supports_batch:
        out.batch = BatchFigures.sync_only(f"sync ({provider.name} has no Batch API)")
    if not provider.on_machine:  # a hosted provider: what this run cost
        out.cost = estimate_cost(settings, provider.name, provider.model, tokens_sync=out.tokens_sync,
                                 tokens_batch=out.tokens_batch,
                                 tokens_unusable=out.batch.tokens_unusable if out.batch is not None else 0)
    return out


def cost_so_far(settings: Settings, provider: EmbeddingProvider, tokens: int) -> float | None:
    """Estimated US dollars for ``tokens`` sent by sync requests (None: local or unpriced)."""
    if provider.on_machine:
        return None
    from memory_core.embeddings.cost import sync_price

    price = sync_price(settings, provider.name, provider.model)
    return None if price is None else tokens * price / 1_000_000


# -- build ---------------------------------------------------------------------------------------

def finish_meta(meta: dict[str, Any], plan: RunPlan, live_meta: dict[str, Any] | None, over_window: dict[str, int],
                counts: dict[str, int], vec: bool, with_vectors: bool, now: int,
                skipped: dict[str, list[Any]] | None = None) -> None:
    """The meta row of a finished build: vector store, counts, chunks over the model's window,
    the files skipped (those discovery kept as they were, and those this run skipped)."""
    skips = {**plan.skips, **(skipped or {})}
    if skips:
        meta[SKIPPED_KEY] = dict(sorted(skips.items()))
    # "blob+bits": float32 in chunks.embedding and sign bits in chunks_bits (memory_core.storage.vectors)
    meta["vector_store"] = ("blob+bits" if vec else "blob") if with_vectors else None
    meta["built_at"] = now
    meta["counts"] = counts
    by_path = merge_over_window(plan, live_meta, over_window) if with_vectors else {}
    meta["over_window_by_path"] = by_path
    meta["chunks_over_window"] = sum(by_path.values())


# -- summary -------------------------------------------------------------------------------------

def summarize(plan: RunPlan, provider: EmbeddingProvider, reason: str, *, chunks: ChunkResult | None,
              from_cache: int, embed: EmbedStats | None, built: BuildResult | None,
              timings: dict[str, float], embedded_on: str = "", progress: Progress | None = None,
              error: str = "") -> RunSummary:
    """The run's summary; with ``error`` (a cancelled or failed run), a partial one from
    ``progress``: what was chunked and embedded (and cached) before the run ended."""
    c = plan.counts
    live = None if built else IndexRecord.from_meta(probe_index(Path(plan.index_path))[0])
    total = built.counts["chunks"] if built else (live.counts.get("chunks", 0) if live else 0)
    over = built.chunks_over_window if built else ((live.chunks_over_window or 0) if live else 0)
    if embed is None:
        embed = EmbedStats()
        if error and progress is not None:
            embed = EmbedStats(requests=progress.requests, embedded=progress.embedded, tokens_sync=progress.tokens)
    warnings = plan.warnings + (chunks.warnings if chunks else []) + embed.warnings()
    skipped = len(plan.to_index) - (len(chunks.files) if chunks else len(plan.to_index))
    indexed = chunks.chunks if chunks else (progress.chunks if (error and progress) else 0)
    return RunSummary(
        index_path=plan.index_path, provider=provider.name, model=provider.model, provider_reason=reason,
        full=plan.full, full_reason=plan.full_reason, swapped=built is not None,
        published=(("in place" if built.in_place else "replaced") if built else ""),
        files_scanned=c["scanned"], files_new=c["new"], files_changed=c["changed"], files_unchanged=c["unchanged"],
        files_removed=c["removed"], files_skipped=max(0, skipped) if not error else 0,
        sessions_carried=c["sessions_carried"], sessions_redated=c["sessions_redated"],
        files_touched=0 if plan.full else len(plan.touched),
        chunks_total=total, chunks_indexed=indexed,
        chunks_embedded=embed.embedded, chunks_from_cache=from_cache,
        chunks_over_window=over,
        embed_requests=embed.requests, tokens_sent=embed.tokens, tokens_sync=embed.tokens_sync,
        tokens_batch=embed.tokens_batch, batch=embed.batch, cost=embed.cost,
        fallback=embed.fallback, stage_seconds={k: round(v, 3) for k, v in timings.items()},
        warnings=warnings, embedded_on=embedded_on, error=error,
        hinted=plan.hinted_paths is not None, hinted_paths=plan.hinted_paths or 0, hint_fallback=plan.hint_fallback,
        re_embedded=plan.re_embed,
    )


class Timer:
    def __init__(self) -> None:
        self.times: dict[str, float] = {}

    def stage(self, name: str) -> _TimerCtx:
        return _TimerCtx(self, name)


class _TimerCtx:
    def __init__(self, timer: Timer, name: str) -> None:
        self.timer, self.name = timer, name

    def __enter__(self) -> None:
        self.t0 = time.perf_counter()

    def __exit__(self, *exc: object) -> None:
        self.timer.times[self.name] = self.timer.times.get(self.name, 0.0) + time.perf_counter() - self.t0


def preflight(settings: Settings) -> None:
    """Refuse a run whose workspace is missing before anything is created on disk."""
    from memory_core.errors import PathError

    ws = settings.workspace_dir
    if not ws.is_dir():
        raise PathError(f"workspace not found: {ws}")
    if settings.index_file.exists() or os.path.lexists(settings.index_file):
        return  # an index that exists is kept up to date, even when every note is gone
    # a first run in a folder with nothing to index (a typo, the wrong folder): say so, and
    # create nothing there (it printed "0 scanned" and made .memory-core/)
    # each root of the shape it must have (a symlink counts: the run says why it is not followed):
    # a folder named MEMORY.md beside a file named memory is nothing to index either (it made an
    # empty index and said nothing: the thirty-eighth session's audit)
    roots: list[tuple[Path, str]] = []  # (path, "file" / "folder" / "any")
    if "memory" in settings.sources:
        roots += [(ws / "MEMORY.md", "file"), (ws / "memory.md", "file"), (ws / "memory", "folder")]
        roots += [(Path(os.path.expanduser(p)) if os.path.isabs(os.path.expanduser(p)) else ws / p, "any")
                  for p in settings.extra_paths]
    if "sessions" in settings.sources:
        roots.append((settings.sessions_dir, "folder"))

    def there(path: Path, shape: str) -> bool:
        if os.path.islink(path) or shape == "any":
            return os.path.lexists(path)
        return os.path.isdir(path) if shape == "folder" else os.path.isfile(path)

    if not any(there(r, shape) for r, shape in roots):
        wanted = "MEMORY.md or a memory/ folder" if "memory" in settings.sources else ""
        if "sessions" in settings.sources:
            wanted += (" or " if wanted else "") + f"transcripts in {settings.sessions_dir}"
        raise PathError(f"nothing to index in {ws}: no {wanted}; is this the workspace? (give it with"
                        " --workspace, or create memory/ there)")


def fallback_for_run(settings: Settings, primary: EmbeddingProvider,
                     exc: Exception) -> tuple[EmbeddingProvider, str, Fallback] | None:
    """The fallback provider for a primary that failed during a run: (provider, reason, info)
    where ``info`` goes into the run summary; None if there is none.

    The caller must rebuild the index in full with it (``discover_stage(..., full=True)`` then
    set ``plan.full_reason = info.full_reason()``): vectors are never mixed.
    """
    from memory_core.embeddings.registry import create_fallback_provider

    why = str(exc)
    switched = create_fallback_provider(settings, primary, why)
    if switched is None:
        return None
    fb, reason = switched
    info = Fallback(primary=f"{primary.name}/{primary.model}", to=f"{fb.name}/{fb.model}", reason=why)
    return fb, reason, info
