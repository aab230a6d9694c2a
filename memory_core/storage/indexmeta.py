"""What an index records about how it was built, and when a change forces a full rebuild.

The meta row of an index (``store.write_meta``) is a JSON object. This module writes its
build part (:func:`build_meta`), reads it back as a typed :class:`IndexRecord`, and decides
whether a run's settings differ from the live index's in a way that needs a full rebuild
(:func:`rebuild_reason`).

What is recorded (nothing secret; API keys and secret headers never are):

- ``workspace``: the workspace root, absolute;
- ``sources``, ``extra_paths`` (as given: absolute, or relative to the workspace),
  ``sessions_dir`` (absolute), ``redact``;
- ``chunk_tokens`` / ``chunk_overlap`` (effective) and the provider's ``provider``,
  ``model``, ``provider_key``, ``dims``;
- ``built_from``: the settings the run was told (``provider`` as configured, e.g. ``auto``;
  ``model``; ``chunking`` as configured, ``None`` meaning the provider's default; the
  non-secret ``remote`` fields ``base_url``, ``dimensions``, ``api_version``), which a later
  run that is not told otherwise keeps (:func:`memory_core.runtime.resolve.resolve_settings`);
- ``origins``: for each of those settings, where the run got it (``--sessions``, ``config
  file ...``, ``the index``, ``default``), so a full rebuild can say which change caused it.

Readers (search, get, status, export, the MCP server) take the workspace, sources, sessions
folder and extra paths from here: they need nothing but the index.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memory_core.config import NOT_TOLD, ORIGIN_INDEX, Settings, dotted
from memory_core.errors import IndexNewerError
from memory_core.secrets import MASK, url_without_password

if TYPE_CHECKING:
    from memory_core.embeddings.base import EmbeddingProvider, Vectors
from memory_core.storage.store import SCHEMA_VERSION, fts_tokenizer, probe_index

# A difference in any of these between the live index and a run means a full rebuild.
REBUILD_KEYS = ("schema_version", "provider", "model", "provider_key", "chunk_tokens", "chunk_overlap",
                "exchange_vectors", "sources", "extra_paths", "redact", "redaction", "fts_tokenizer", "exchange_parts",
                "note_windows", "window_lines")

REDACTION_VERSION = 2
"""Which secrets redaction masks (memory_core.sources.redact), recorded where it masks anything
(``redact`` not ``"off"``): absent, before the thirty-eighth session; 2, also OpenPGP and PuTTY
private keys, secrets in markup and Markdown tables, names going on past their keyword
(``SECRET_KEY_BASE``), ``=>`` and ``:=``, more services' tokens, and a transcript's secret whose
label is the message before it. An index of older rules may hold a secret they missed, so a run
rebuilds it in full, once (its chunks re-read and redacted; unchanged texts' vectors come from the
cache)."""

EXCHANGE_PARTS_VERSION = 2
"""What a transcript chunk's exchange vectors are made of (memory_core.sources.sessions.exchange_parts):
absent (indexes before it), its exchanges; 2, its exchanges, one of more than 4 messages as
overlapping windows of 4. Recorded only where it applies (sessions indexed, exchange vectors on),
so a notes-only index is not rebuilt for it."""

WINDOW_LINES_VERSION = 2
"""How a chunk re-split to the embedding model's window is cited
(:func:`memory_core.index.chunking.fit_to_window`), recorded where chunks are re-split (a provider
that counts its own pieces: the local model): absent, its first line plus the part's offset in its
text, too far down after a line longer than the chunker's budget (an unwrapped paragraph, a long
message of a transcript); 2, each part at the lines its text is from. An index of the older
reading is rebuilt once (its chunks cut again; unchanged texts' vectors come from the cache)."""

NOTE_WINDOWS_VERSION = 2
"""What a note chunk's extra vectors are (memory_core.index.chunking.note_windows): absent (indexes
before it, or turned off), none; 1, its lines in overlapping windows of 4; 2, its items (a line, or
a paragraph or list item wrapped over several lines: ``note_items``) in windows of 4. Recorded
only where notes are indexed with ``chunking.note_windows`` on."""

MESSAGE_DAYS_VERSION = 5
"""How a transcript's messages and their days are read (memory_core.sources.sessions.message_of,
``stamp``), recorded where transcripts are indexed: absent, before the fifteenth session; 2, a time
in 1970 or before or after 2200 dates nothing, and lowercase ``t``/``z``, epochs written as strings
and micro- or nanosecond epochs are read; 3 (the twentieth session), a record's ``created_at`` /
``createdAt`` and RFC 2822 dates ("Thu, 07 Mar 2024 10:00:00 GMT") are read too; 4 (the forty-first
session), Claude Code's and Codex CLI's session logs are read as messages (an older run indexed
nothing of them, silently); 5 (the forty-second session), Claude Code's slash-command names, local
commands' and ``!`` commands' output are not a message's text (a command's arguments are). A run that finds an older value re-reads, once, the transcripts whose
recorded days may be wrong (none, or one out of that range: memory_core.index.stages), which
include every transcript that held no message and every one holding such a command block, not
the whole index."""

# meta key -> the setting a user changes to change it (for "... changed (from --flag)")
_SETTING_OF = {"provider": "provider", "model": "model", "provider_key": "remote", "chunk_tokens": "chunking.tokens",
               "chunk_overlap": "chunking.overlap", "exchange_vectors": "chunking.exchange_vectors", "note_windows": "chunking.note_windows", "sources": "sources", "extra_paths": "extra_paths",
               "redact": "redact"}


def chunk_params(settings: Settings, provider: EmbeddingProvider) -> tuple[int, int]:
    """(tokens, overlap) of a run: the configured chunking, else the provider's default."""
    tokens = settings.chunking.tokens or provider.default_chunk_tokens
    overlap = settings.chunking.overlap if settings.chunking.overlap is not None else provider.default_chunk_overlap
    overlap = max(0, min(overlap, tokens - 1))
    return tokens, overlap


def note_windows_on(settings: Settings, provider: EmbeddingProvider) -> bool:
    """Whether a run embeds note chunks' line windows: ``chunking.note_windows``, else (unset) with
    a model that embeds on this machine (the local model: nothing billed, short chunks) only; a
    hosted provider's 400-token chunks would bill about 14 more inputs each."""
    on = settings.chunking.note_windows
    return bool(provider.on_machine and provider.has_vectors) if on is None else on


def built_from(settings: Settings, *, with_provider: bool = True) -> dict[str, object]:
    """The told settings a later run keeps unless told otherwise (see module docstring)."""
    out: dict[str, Any] = {
        "chunking": {"tokens": settings.chunking.tokens, "overlap": settings.chunking.overlap},
        # as configured (None: <workspace>/sessions), so a workspace that moves takes its sessions along
        "sessions_dir": str(settings.sessions.dir) if settings.sessions.dir is not None else None,
    }
    if settings.sessions.recursive:
        # the transcripts in the sessions folder's subfolders are indexed: no rebuild when it
        # changes (the next run finds them come or go), but readers and runs told nothing keep it,
        # as they keep the folder. Recorded only when on, so an index of the default is as before.
        out["sessions_recursive"] = True
    if with_provider:
        r = settings.remote
        out.update(provider=settings.provider, model=settings.model,
                   remote={"base_url": url_without_password(r.base_url), "dimensions": r.dimensions,
                           "api_version": r.api_version})
    return out


def build_meta(settings: Settings, provider: EmbeddingProvider, reason: str) -> dict[str, object]:
    """The meta of an index that ``settings`` build with ``provider`` (``reason``: why that provider)."""
    tokens, overlap = chunk_params(settings, provider)
    return {
        "schema_version": SCHEMA_VERSION,
        "provider": provider.name,
        "model": provider.model,
        "provider_key": provider.provider_key,
        "provider_reason": reason,
        "dims": provider.dims,
        "chunk_tokens": tokens,
        "chunk_overlap": overlap,
        "exchange_vectors": settings.chunking.exchange_vectors,
        "exchange_parts": EXCHANGE_PARTS_VERSION if settings.chunking.exchange_vectors and "sessions" in settings.sources
        else None,
        "note_windows": NOTE_WINDOWS_VERSION if note_windows_on(settings, provider) and "memory" in settings.sources
        else None,
        "message_days": MESSAGE_DAYS_VERSION if "sessions" in settings.sources else None,
        "window_lines": WINDOW_LINES_VERSION if callable(getattr(provider, "piece_counts", None)) else None,
        "sources": sorted(settings.sources),
        "extra_paths": sorted(settings.extra_paths),
        "redact": settings.redact,
        "redaction": REDACTION_VERSION if settings.redact != "off" else None,
        "fts_tokenizer": fts_tokenizer(),
        "workspace": str(settings.workspace_dir),
        "sessions_dir": str(settings.sessions_dir),
        # a run on the fallback provider does not make the fallback the index's provider: it keeps
        # the primary's as told (the settings the fallback was made from: when the primary could not
        # be created, ``settings`` themselves); dropping it made the next run told nothing resolve
        # provider "auto" and rebuild on whatever auto picked
        "built_from": built_from((settings._primary or settings) if reason.startswith("fallback") else settings),
        "origins": dict(settings.origins),
    }


def _show(value: Any) -> str:
    if isinstance(value, list):
        return "[" + ", ".join(str(v) for v in value) + "]"
    return str(value)


def newer_writer(meta: Mapping[str, Any] | None) -> str | None:
    """What in ``meta`` says a newer memory-core wrote the index (its schema, its redaction
    rules), or None. Such an index is not ours to read or rebuild unless told
    (:class:`memory_core.errors.IndexNewerError`)."""
    if not meta:
        return None
    for key, ours in (("schema_version", SCHEMA_VERSION), ("redaction", REDACTION_VERSION)):
        v = meta.get(key)
        if isinstance(v, int) and not isinstance(v, bool) and v > ours:
            return f"{'schema' if key == 'schema_version' else 'redaction rules'} {v}; this one knows up to {ours}"
    return None


def newer_error(path: object, why: str) -> IndexNewerError:
    return IndexNewerError(f"the index at {path} was written by a newer memory-core ({why}): upgrade memory-core,"
                           " or rebuild the index for this version with `memory-core index --full`")


def rebuild_reason(old: Mapping[str, Any] | None, new: Mapping[str, Any], *,
                   legacy_keys: Collection[str] = ()) -> str | None:
    """Why a run with meta ``new`` must rebuild the index whose meta is ``old`` in full, or None.

    Names the setting and, when the new meta knows it, where its new value came from, e.g.
    ``sources changed from [memory] to [memory, sessions] by --sessions``. ``legacy_keys``: the
    keys the rule before gave the run's provider configuration
    (:attr:`~memory_core.embeddings.base.EmbeddingProvider.legacy_provider_keys`); an index that
    records one is this configuration's (its meta takes the new key when the run publishes).
    """
    if old is None:
        return "no index yet"
    origins = new.get("origins") or {}
    for key in REBUILD_KEYS:
        if old.get(key) != new.get(key):
            if key == "provider_key" and old.get(key) in legacy_keys:
                continue
            setting = _SETTING_OF.get(key)
            origin = origins.get(setting or "", "")
            if key == "provider_key":
                msg = "provider settings changed (base URL, dimensions or headers)"
            elif key == "exchange_parts" and new.get(key) is not None:
                msg = ("transcript exchange vectors changed: exchanges of more than 4 messages are now embedded"
                       " as windows of 4")
            elif key == "window_lines" and new.get(key) is not None:
                msg = ("chunk citations corrected: a chunk re-split to the model's window is cited at the lines"
                       " its text is from")
            elif key == "redaction" and new.get(key) is not None:
                msg = "redaction rules changed: secrets the older rules missed are masked now"
            elif key == "note_windows":
                msg = ("note windows turned off" if new.get(key) is None else
                       "note windows turned on: a note chunk's lines are now also embedded in windows of 4"
                       if old.get(key) is None else
                       "note windows changed: a paragraph or list item wrapped over lines is now one item of a window")
            else:
                msg = f"{key} changed from {_show(old.get(key))} to {_show(new.get(key))}"
            return msg + (f" by {origin}" if origin and origin != ORIGIN_INDEX else "")
    if new.get("dims") and old.get("dims") and old["dims"] != new["dims"]:
        return "dims changed"
    return None


@dataclass(frozen=True)
class IndexRecord:
    """What the live index says it was built from and holds: its meta row, typed, the one way
    readers read it (``None`` fields: an index older than this, or a record that has no such
    entry). Also what an export or the memory store says their vectors were made with
    (provider, model, key, dims)."""

    workspace: str | None = None
    sessions_dir: str | None = None
    sources: list[str] = field(default_factory=list)
    extra_paths: list[str] = field(default_factory=list)
    redact: str | None = None
    provider: str | None = None  # the provider that made the vectors
    model: str | None = None
    provider_key: str | None = None
    chunk_tokens: int | None = None
    chunk_overlap: int | None = None
    built_from: dict[str, Any] = field(default_factory=dict)
    origins: dict[str, str] = field(default_factory=dict)
    dims: int | None = None  # None or 0: no vectors
    provider_reason: str | None = None  # why that provider ("configured", "fallback: ...")
    built_at: int | None = None  # ms since the epoch
    vector_store: str | None = None  # "blob+bits", "blob", "vec0" (schema 2); None: keyword-only
    counts: dict[str, int] = field(default_factory=dict)  # files, chunks, ... of the build
    chunks_over_window: int | None = None
    batch: dict[str, Any] | None = None  # the Batch API record of the run that built it (as status shows it)

    @property
    def has_vectors(self) -> bool:
        """Whether queries need embedding: a provider that makes vectors, and their dims."""
        from memory_core.embeddings.catalog import keyword_only

        return bool(self.dims) and not keyword_only(self.provider)

    @classmethod
    def from_meta(cls, meta: Mapping[str, Any] | None) -> IndexRecord | None:
        if not meta:
            return None

        def s(key: str) -> str | None:
            v = meta.get(key)
            return str(v) if isinstance(v, str) and v else None

        def ints(key: str) -> int | None:
            v = meta.get(key)
            return v if isinstance(v, int) and not isinstance(v, bool) else None

        def strs(key: str) -> list[str]:
            v = meta.get(key)
            return [str(x) for x in v] if isinstance(v, list) else []

        bf = meta.get("built_from")
        origins = meta.get("origins")
        counts = meta.get("counts")
        batch = meta.get("batch")
        return cls(workspace=s("workspace"), sessions_dir=s("sessions_dir"), sources=strs("sources"),
                   extra_paths=strs("extra_paths"), redact=s("redact"), provider=s("provider"), model=s("model"),
                   provider_key=s("provider_key"), chunk_tokens=ints("chunk_tokens"),
                   chunk_overlap=ints("chunk_overlap"), built_from=dict(bf) if isinstance(bf, dict) else {},
                   origins={str(k): str(v) for k, v in origins.items()} if isinstance(origins, dict) else {},
                   dims=ints("dims"), provider_reason=s("provider_reason"), built_at=ints("built_at"),
                   vector_store=s("vector_store"), chunks_over_window=ints("chunks_over_window"),
                   counts={str(k): v for k, v in counts.items() if isinstance(v, int)} if isinstance(counts, dict)
                   else {},
                   batch=dict(batch) if isinstance(batch, dict) and batch else None)

    def settings_layer(self) -> dict[str, object]:
        """The recorded settings as a layer for :func:`memory_core.runtime.resolve.resolve_settings`
        (only what this index knows; nested like a config file)."""
        out: dict[str, Any] = {}
        if self.workspace:
            out["workspace"] = self.workspace
        if self.sources:
            out["sources"] = list(self.sources)
        if self.workspace is not None:  # older indexes recorded extra paths without their workspace
            out["extra_paths"] = list(self.extra_paths)
        if self.built_from.get("sessions_dir"):
            out["sessions"] = {"dir": self.built_from["sessions_dir"]}
        if isinstance(self.built_from.get("sessions_recursive"), bool):
            out["sessions"] = {**out.get("sessions", {}), "recursive": self.built_from["sessions_recursive"]}
        if self.redact:
            out["redact"] = self.redact
        bf = self.built_from
        chunking = bf.get("chunking")
        if isinstance(chunking, dict):
            out["chunking"] = {k: chunking.get(k) for k in ("tokens", "overlap") if chunking.get(k) is not None}
        if isinstance(bf.get("provider"), str):
            out["provider"] = bf["provider"]
            if bf.get("model"):
                out["model"] = bf["model"]
            remote = bf.get("remote")
            if isinstance(remote, dict):
                out["remote"] = {k: remote[k] for k in ("base_url", "dimensions", "api_version")
                                 if remote.get(k) is not None}
        return {k: v for k, v in out.items() if v != {}}

    def reader_settings(self, settings: Settings) -> Settings:
        """``settings`` with the sources of this index: what a reader resolves paths against.

        An index older than these records (no workspace recorded), or one whose workspace is gone
        (moved along with its index), leaves ``settings`` as it is.
        """
        if self.workspace is None or not os.path.isdir(self.workspace):
            return settings
        recorded = Path(self.workspace)
        home = _copied_to(recorded, settings.index_file)

        def here(p: str) -> Path:  # a path of the recorded workspace, in the copy the index is in
            if home is None:
                return Path(p)
            try:
                return home / Path(p).relative_to(recorded)
            except ValueError:  # outside the workspace: the same path
                return Path(p)

        update: dict[str, Any] = {"workspace": home or recorded,
                                  "extra_paths": [str(here(p)) if os.path.isabs(p) else p for p in self.extra_paths]}
        if self.sources:
            update["sources"] = list(self.sources)
        if self.redact:
            update["redact"] = self.redact
        sessions: dict[str, Any] = {}
        if self.sessions_dir:
            sessions["dir"] = here(self.sessions_dir)
        if isinstance(self.built_from.get("sessions_recursive"), bool):  # the transcripts' paths it holds
            sessions["recursive"] = self.built_from["sessions_recursive"]
        if sessions:
            update["sessions"] = settings.sessions.model_copy(update=sessions)
        return settings.model_copy(update=update)

    def query_settings(self, settings: Settings) -> Settings:
        """``settings`` for embedding queries against this index: its provider and model, and the
        recorded non-secret remote settings (base URL, dimensions, API version) that ``settings``
        leaves unset, so a reader given only the index embeds queries as the index was built.

        An index the configured fallback built (its record says so, or its provider is the
        fallback's and not the primary's) is queried with the fallback's settings: a ``[fallback]``
        table's own ``remote`` (base URL, key, dimensions), not the primary's."""
        from memory_core.embeddings.registry import fallback_settings

        base = settings
        fs = fallback_settings(settings)
        if fs is not None and fs.provider == self.provider and (
                self.provider != settings.provider or (self.provider_reason or "").startswith("fallback")):
            base = fs
        remote = base.remote
        recorded = self.built_from.get("remote")
        if isinstance(recorded, dict) and base is settings:  # the primary's, as recorded
            fill = {k: recorded[k] for k in ("base_url", "dimensions", "api_version")
                    if recorded.get(k) is not None and getattr(remote, k) is None
                    and not (k == "base_url" and MASK in str(recorded[k]))}
            remote = remote.model_copy(update=fill)
        return base.model_copy(update={"provider": self.provider, "model": self.model, "fallback": None,
                                       "remote": remote})


def vector_record(record: IndexRecord | Mapping[str, Any] | None) -> IndexRecord | None:
    """``record`` (or the record of a meta row) when its index holds vectors (so queries need
    embedding), else None: no meta, a keyword-only index (provider ``none`` or unrecorded) or no dims."""
    if record is not None and not isinstance(record, IndexRecord):
        record = IndexRecord.from_meta(record)
    return record if record is not None and record.has_vectors else None


# A reader tries a query's embedding at most this many times (a run's retries are for runs: a
# refused connection retried for the whole deadline made every search of a provider that is down
# wait ~10 s).
READER_ATTEMPTS = 2
# After a failed query embedding, readers of this process (and the next CLI searches, through
# the file beside the index) answer keyword-only at once for this long, doubling per failure
# in a row up to OUTAGE_MAX_S; then one query tries the provider again.
OUTAGE_FIRST_S = 30.0
OUTAGE_MAX_S = 300.0
# A query embedding in flight for longer than this is a stall: other searches do not wait on it.
STALL_S = 2.0


def open_query_provider(record: IndexRecord, settings: Settings) -> tuple[EmbeddingProvider | None, str]:
    """The provider that embeds queries against the index ``record`` describes (its provider
    and model, the reader's keys), with the reader's short total deadline and
    :data:`READER_ATTEMPTS`: a reader never waits out a run's retries; and its outages
    remembered (:class:`ProviderOutages`). ``(None, note)`` when it cannot start (no key, no
    model package), and the reader answers keyword-only, saying why in ``note``."""
    try:
        from memory_core.embeddings.registry import create_provider

        qs = record.query_settings(settings)
        qs = qs.model_copy(update={"remote": qs.remote.model_copy(
            update={"max_attempts": min(qs.remote.max_attempts, READER_ATTEMPTS)})})
        provider, _ = create_provider(qs)
    except Exception as exc:
        return None, f"query embeddings unavailable ({exc}); keyword-only results"
    provider.deadline_s = settings.query.embed_timeout_s
    ProviderOutages.guard(provider, settings.index_file)
    return provider, ""


class ProviderOutages:
    """What this process (and the last CLI searches) learned about query providers that are
    down, by provider key: a reader answers keyword-only at once while one is remembered down
    (saying so, and when it tries again), and does not wait on a query embedding that another
    search has been waiting on for :data:`STALL_S`.

    Kept in memory for long-lived readers (the MCP server, watch, the API) and in a small file
    beside the index (``<index>.provider-outage.json``, best effort, never followed through a
    symlink) for one-shot readers (CLI searches), so only the first search of an outage waits."""

    _lock = threading.Lock()
    _down: dict[str, tuple[float, int, str]] = {}  # key -> (retry at, failures in a row, why); wall clock
    _inflight: dict[str, list[float]] = {}  # key -> start times of the embeddings in flight (monotonic)

    @classmethod
    def guard(cls, provider: EmbeddingProvider, index_file: Path) -> None:
        """Wrap ``provider.embed_query`` (this instance's) with the outage memory."""
        key = str(provider.provider_key)
        real = provider.embed_query
        marker = index_file.with_name(index_file.name + ".provider-outage.json")

        def embed_query(text: str) -> Vectors:
            from memory_core.errors import ProviderAnswerError, ProviderError

            now = time.time()
            with cls._lock:
                down = cls._down.get(key) or cls._read(marker, key)
                if down is not None:
                    cls._down[key] = down  # kept past its time: a failure in a row doubles the wait
                if down is not None and now < down[0]:
                    raise ProviderError(f"{provider.name} was down ({down[2]}); not tried again until"
                                        f" {max(1, round(down[0] - now))} s from now")
                oldest = min(cls._inflight.get(key, []), default=None)
                if oldest is not None and time.monotonic() - oldest > STALL_S:
                    raise ProviderError(f"{provider.name} has not answered another query for"
                                        f" {time.monotonic() - oldest:.0f} s")
                started = time.monotonic()
                cls._inflight.setdefault(key, []).append(started)
            try:
                out = real(text)
            except ProviderAnswerError:
                raise  # it answered: a fault of this answer, not an outage
            except ProviderError as exc:
                with cls._lock:
                    failures = (cls._down.get(key) or (0.0, 0, ""))[1] + 1
                    wait = min(OUTAGE_MAX_S, OUTAGE_FIRST_S * 2 ** (failures - 1))
                    why = str(exc)[:200]
                    cls._down[key] = (time.time() + wait, failures, why)
                    cls._write(marker, key, cls._down[key])
                raise
            else:
                with cls._lock:
                    if cls._down.pop(key, None) is not None:
                        cls._write(marker, key, None)
                return out
            finally:
                with cls._lock:
                    starts = cls._inflight.get(key, [])
                    with contextlib.suppress(ValueError):
                        starts.remove(started)

        setattr(provider, "embed_query", embed_query)  # noqa: B010 - this instance only

    @classmethod
    def forget(cls) -> None:
        """Forget every outage this process remembers (tests)."""
        with cls._lock:
            cls._down.clear()
            cls._inflight.clear()

    @staticmethod
    def _read(marker: Path, key: str) -> tuple[float, int, str] | None:
        try:
            fd = os.open(marker, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            return None
        try:
            with os.fdopen(fd, "rb") as fh:
                data = json.loads(fh.read(1 << 16) or b"null")
            got = data.get(key) if isinstance(data, dict) else None
            if isinstance(got, list) and len(got) == 3:
                return float(got[0]), int(got[1]), str(got[2])
        except (OSError, ValueError, TypeError):
            return None
        return None

    @staticmethod
    def _write(marker: Path, key: str, value: tuple[float, int, str] | None) -> None:
        """Record (or clear) ``key``'s outage in ``marker``: a new file renamed over it (a
        symlink there is replaced, never followed); any failure leaves the memory in process."""
        tmp = marker.with_name(f".{marker.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            with os.fdopen(fd, "w") as fh:
                json.dump({key: list(value)} if value is not None else {}, fh)
            os.replace(tmp, marker)
        except OSError:
            with contextlib.suppress(OSError):
                os.unlink(tmp)


class QueryProviderOwner:
    """The query provider of a reader of an index or an export (:class:`memory_core.query.search.Searcher`,
    :class:`memory_core.query.lancedb.LanceSearcher`): opened once, on the first query that needs
    it, from the record the index carries (:func:`open_query_provider`), and refused when it is
    not the configuration the vectors were made with. Why a reader answers keyword-only is in
    ``provider_note``."""

    settings: Settings
    _provider: EmbeddingProvider | None
    _provider_checked: bool
    provider_note: str

    def _provider_for(self, vectors_of: IndexRecord | None, what: str, again: str) -> EmbeddingProvider | None:
        """The provider for queries against the vectors ``vectors_of`` describes; None for a
        keyword-only ``what`` ("index", "export"), or when it cannot embed them (``again``: how
        its vectors are made anew, for the note)."""
        record = vector_record(vectors_of)  # None: keyword only, no provider needed
        if record is None:
            return None
        if self.provider_note.startswith("query embedding failed"):
            self.provider_note = ""  # the last query's failure: this query tries (or is told) anew
        if not self._provider_checked:
            self._provider_checked = True
            self._provider, note = open_query_provider(record, self.settings)
            if note:
                self.provider_note = note
                logging.getLogger("memory_core.query.search").warning("%s", note)
        p = self._provider
        if p is not None and not p.owns_key(record.provider_key):
            self.provider_note = (f"the {what} was built with a different {record.provider} configuration;"
                                  f" keyword-only results until it is {again}")
            return None
        return p


# -- a run told nothing keeps the index as it is built now ------------------------------------------


# the recorded settings a run told nothing takes from the live index (the workspace and the index
# path say which index it is: never taken), with the keys that make a new embedding provider
_AS_BUILT_KEYS = ("sources", "extra_paths", "sessions.dir", "sessions.recursive", "redact", "chunking.tokens",
                  "chunking.overlap", "provider", "model", "remote")
PROVIDER_KEYS = ("provider", "model", "remote")


def as_built(settings: Settings, record: IndexRecord | None) -> tuple[Settings, list[str]]:
    """``settings`` with every recorded setting it was not told (its origin is the index it was
    resolved against, or the default) taken from ``record``, the live index as it is now, and the
    keys that changed. A reader or a run resolves its settings once; another run may rebuild the
    index meanwhile (``index --sessions``, another provider) while a long-lived reader waits for
    its next trigger or a run waits for the writer lock, and the stale resolution then rebuilt the
    index back, undoing that run (its transcripts, its vectors, gone). Settings not made by
    ``resolve_settings`` (no origins), or an index that records nothing, are returned as they are."""
    origins = settings.origins
    if record is None or not origins:
        return settings, []
    layer = record.settings_layer()

    def now_of(key: str) -> object:  # a setting's value, read from the model (no dump: per search)
        value: Any = settings
        for part in key.split("."):
            value = getattr(value, part, None)
        return value

    changed: list[str] = []
    for key in _AS_BUILT_KEYS:
        if origins.get(key) not in NOT_TOLD:
            continue
        recorded = dotted(layer, key)
        if recorded is None:
            continue
        now = now_of(key)
        if key in ("sources", "extra_paths") and isinstance(recorded, list) and isinstance(now, list):
            differs = sorted(map(str, recorded)) != sorted(map(str, now))
        elif key == "sessions.dir":
            differs = str(Path(os.path.abspath(settings.workspace_dir / os.path.expanduser(str(recorded))))) \
                != str(settings.sessions_dir)
        elif key == "remote" and isinstance(recorded, Mapping):
            differs = any(now_of(f"remote.{k}") != v for k, v in recorded.items())
        else:
            differs = recorded != now
        if differs:
            changed.append(key)
    if not changed:
        return settings, []
    data = settings.model_dump(mode="python")
    for key in changed:
        recorded = dotted(layer, key)
        parts = key.split(".")
        target: dict[str, Any] = data
        for part in parts[:-1]:
            target = target.setdefault(part, {})
        if key == "remote" and isinstance(recorded, Mapping):
            target["remote"] = {**(target.get("remote") or {}), **dict(recorded)}
        else:
            target[parts[-1]] = recorded
    fresh = Settings.model_validate(data)
    fresh._origins = {**origins, **dict.fromkeys(changed, NOT_TOLD[0])}
    return fresh, changed


def as_built_now(settings: Settings) -> tuple[Settings, list[str]]:
    """:func:`as_built` against the live index at ``settings.index_file`` as it is now."""
    return as_built(settings, IndexRecord.from_meta(probe_index(settings.index_file)[0]))


def _copied_to(recorded: Path, index_file: Path) -> Path | None:
    """The workspace an index was copied into along with its workspace (``cp -a orig copy``), when
    a reader opens it there: the index sits at ``<home>/.memory-core/index.sqlite``, ``home`` is not
    the workspace it recorded, and that workspace keeps an index of its own at the same place.
    A reader then read the original's files under the copy's index (``get -w copy`` showed the
    original's text while ``status -w copy`` judged freshness against the copy's). None: read the
    recorded workspace (an index kept elsewhere with ``--index``, or its own)."""
    if index_file.name != "index.sqlite" or index_file.parent.name != ".memory-core":
        return None
    home = index_file.parent.parent
    theirs = recorded / ".memory-core" / "index.sqlite"
    try:
        if home.resolve() == recorded.resolve() or not theirs.exists() or os.path.samefile(theirs, index_file):
            return None
    except OSError:
        return None
    return home if home.is_dir() else None
