"""Whether an index is dirty: its sources changed since it was built.

Read-only and cheap (discovery's size + mtime, no hashing), so ``status``, the MCP server's
``memory_status`` and the sync triggers (:mod:`memory_core.runtime.sync`) can ask it any time. Below
both the query module and the indexing code: it imports neither.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, NamedTuple

from memory_core.config import Settings

MAX_LISTED = 20
SKIPPED_KEY = "skipped_files"
"""The meta entry of the files a run looked at and could not index (``path -> [source, mtime ms,
size, kind]``; kind ``binary``, ``too-large`` or ``unreadable``): neither new nor changed while
they stay as they were, so an unchanged workspace is not dirty because of them."""


class Skip(NamedTuple):
    """A source file a run skipped (with a warning), as it was then."""

    source: str
    mtime_ms: int
    size: int
    kind: str

    def holds(self, source: str, mtime_ms: int, size: int, abs_path: str) -> bool:
        """Whether the file is still what was skipped: same source, size and mtime, and, for one
        that could not be read, still unreadable (``chmod`` changes neither size nor mtime)."""
        if (source, mtime_ms, size) != (self.source, self.mtime_ms, self.size):
            return False
        return self.kind != "unreadable" or not os.access(abs_path, os.R_OK)


def recorded_skips(meta: Mapping[str, Any] | None) -> dict[str, Skip]:
    """The skipped files an index's meta records (none for an index written before they were)."""
    raw = (meta or {}).get(SKIPPED_KEY)
    out: dict[str, Skip] = {}
    if not isinstance(raw, dict):
        return out
    for path, rec in raw.items():
        if (isinstance(path, str) and isinstance(rec, list) and len(rec) == 4 and isinstance(rec[0], str)
                and isinstance(rec[1], int) and isinstance(rec[2], int) and isinstance(rec[3], str)):
            out[path] = Skip(rec[0], rec[1], rec[2], rec[3])
    return out


@dataclass(frozen=True)
class DirtyState:
    dirty: bool
    new: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    reason: str = ""
    # transcripts that grew below the session delta: not dirty (a trigger's run keeps their rows),
    # but their new messages are not searchable until they grow past it or a run is asked for
    below_delta: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def dirty_state(settings: Settings) -> DirtyState:
    """Whether the sources differ from what the index at ``settings.index_file`` holds."""
    import apsw

    from memory_core.errors import PathError
    from memory_core.sources.discovery import discover_files
    from memory_core.sources.sessions import below_delta, reader_zone
    from memory_core.storage.indexmeta import IndexRecord, as_built
    from memory_core.storage.store import connect_reader, probe_index

    meta, problem = probe_index(settings.index_file)
    if meta is None or problem:
        return DirtyState(True, reason="no index yet" if meta is None and not problem else f"index damaged: {problem}")
    # what a run told nothing would index: the index as it is built now, not as it was when a
    # long-lived reader read its settings (another run may have added transcripts since)
    settings = as_built(settings, IndexRecord.from_meta(meta))[0]
    try:
        files = discover_files(settings).files
    except PathError as exc:
        return DirtyState(False, reason=str(exc))
    try:  # the reader connection search uses: safe beside a run committing in place
        conn = connect_reader(settings.index_file)
        try:
            live = {r[0]: (r[1], int(r[2]), int(r[3]), r[4] if isinstance(r[4], int) else None, str(r[5]))
                    for r in conn.execute("SELECT path, source, size, mtime, lines, hash FROM files")}
        finally:
            conn.close()
    except apsw.Error as exc:
        return DirtyState(False, reason=f"index busy or unreadable: {exc}")
    skips = recorded_skips(meta)
    new: list[str] = []
    changed: list[str] = []
    grown: list[str] = []  # transcripts grown below the session delta
    seen: set[str] = set()
    for f in files:
        seen.add(f.path)
        old = live.get(f.path)
        if old is None:
            skip = skips.get(f.path)
            if skip is None:
                new.append(f.path)
            elif not skip.holds(f.source, f.mtime_ms, f.size, f.abs_path):  # a run would look at it again
                changed.append(f.path)
            continue
        source, size, mtime_ms, lines, digest = old
        skip = skips.get(f.path)
        if skip is not None and skip.holds(f.source, f.mtime_ms, f.size, f.abs_path):
            continue  # changed since it was indexed, and unreadable as the last run found it: its rows kept
        if source != f.source:
            changed.append(f.path)
        elif f.source == "sessions":  # the indexer's own rule: what a run would reindex
            # (a same-size edit changes the mtime only: its indexed bytes are compared then)
            if f.size != size or f.mtime_ms != mtime_ms:
                if below_delta(f.abs_path, f.size, size, lines, indexed_hash=digest,
                               delta_bytes=settings.sessions.delta_bytes,
                               delta_messages=settings.sessions.delta_messages):
                    grown.append(f.path)
                else:
                    changed.append(f.path)
        elif size != f.size or mtime_ms != f.mtime_ms:
            changed.append(f.path)
    removed = sorted(p for p in live if p not in seen)
    dirty = bool(new or changed or removed)
    reason = ", ".join(f"{len(v)} {k}" for k, v in (("new", new), ("changed", changed), ("removed", removed)) if v)
    # the transcripts' days were read in another time zone than this process's: "this morning"
    # and "yesterday" would be another zone's until a run re-reads them (no text or vector changes)
    read_in, here = meta.get("days_zone") or None, reader_zone()
    if "sessions" in settings.sources and read_in != here and any(v[0] == "sessions" for v in live.values()):
        dirty = True
        zone_change = f"transcripts' days read in {read_in or 'UTC'}, this process is in {here or 'UTC'}"
        reason = f"{reason}, {zone_change}" if reason else zone_change
    return DirtyState(dirty, new[:MAX_LISTED], changed[:MAX_LISTED], removed[:MAX_LISTED], reason, grown[:MAX_LISTED])


