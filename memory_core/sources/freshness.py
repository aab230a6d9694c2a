"""Whether an index is dirty: its sources changed since it was built.

Read-only and cheap (discovery's size + mtime, no hashing), so ``status``, the MCP server's
``memory_status`` and the sync triggers (:mod:`memory_core.runtime.sync`) can ask it any time. Below
both the query module and the indexing code: it imports neither.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from memory_core.config import Settings

MAX_LISTED = 20


@dataclass(frozen=True)
class DirtyState:
    dirty: bool
    new: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    reason: str = ""

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def dirty_state(settings: Settings) -> DirtyState:
    """Whether the sources differ from what the index at ``settings.index_file`` holds."""
    import apsw

    from memory_core.errors import PathError
    from memory_core.sources.discovery import discover_files
    from memory_core.sources.sessions import below_delta
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
            live = {r[0]: (r[1], int(r[2]), int(r[3]), r[4] if isinstance(r[4], int) else None)
                    for r in conn.execute("SELECT path, source, size, mtime, lines FROM files")}
        finally:
            conn.close()
    except apsw.Error as exc:
        return DirtyState(False, reason=f"index busy or unreadable: {exc}")
    new: list[str] = []
    changed: list[str] = []
    seen: set[str] = set()
    for f in files:
        seen.add(f.path)
        old = live.get(f.path)
        if old is None:
            new.append(f.path)
            continue
        source, size, mtime_ms, lines = old
        if source != f.source:
            changed.append(f.path)
        elif f.source == "sessions":  # the indexer's own rule: what a run would reindex
            if f.size != size and not below_delta(f.abs_path, f.size, size, lines,
                                                  delta_bytes=settings.sessions.delta_bytes,
                                                  delta_messages=settings.sessions.delta_messages):
                changed.append(f.path)
        elif size != f.size or mtime_ms != f.mtime_ms:
            changed.append(f.path)
    removed = sorted(p for p in live if p not in seen)
    dirty = bool(new or changed or removed)
    reason = ", ".join(f"{len(v)} {k}" for k, v in (("new", new), ("changed", changed), ("removed", removed)) if v)
    return DirtyState(dirty, new[:MAX_LISTED], changed[:MAX_LISTED], removed[:MAX_LISTED], reason)


