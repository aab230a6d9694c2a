"""The typed answers of a reader (:class:`memory_core.query.search.Searcher` and the API's
:class:`memory_core.api.Memory`): :class:`SearchAnswer` (``memory_search``), :class:`FileText`
(``get``), :class:`MemoryStatus` (``status``).
Each turns into JSON only at an edge (CLI ``--json``, the MCP tools) with ``to_dict()``.

Kept apart from the modules that compute them and importing nothing at run time, so the API
module can name them without loading the query side.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from memory_core.storage.indexmeta import IndexRecord
    from memory_core.storage.qmd import QmdCollection, QmdRun
    from memory_core.storage.run_owners import StoppedRun
    from memory_core.storage.vectors import ScanPlan

__all__ = ["FileText", "MemoryStatus", "QmdReport", "SearchAnswer", "SearchRun", "scan_report"]


@dataclass(frozen=True, slots=True)
class SearchRun:
    """What a reader's last search did, for its answer's metadata and note
    (:func:`memory_core.query.answers.response_meta`, :func:`memory_core.query.search.search_answer`).

    ``backend``: ``builtin`` or ``qmd``; ``embedded``: whether the query was embedded (None: no
    search ran, as for an empty query or a search of another source alone); ``words_absent``: few
    or none of the question's words are in memory (:attr:`memory_core.query.retrieval.Candidates.words_absent`);
    ``qmd_mode``: qmd's ``search``, ``vsearch`` or ``query``; ``qmd_fallback``: why the builtin index
    answered for qmd (empty: it did not)."""

    backend: Literal["builtin", "qmd"] = "builtin"
    embedded: bool | None = None
    words_absent: bool = False
    qmd_mode: str | None = None
    qmd_fallback: str = ""


@dataclass(frozen=True, slots=True)
class SearchAnswer:
    """One search's answer, as ``memory_search`` and ``search --json`` give it (:meth:`to_dict`).

    ``results``: best first, each in the tool's shape (``path``, ``startLine``, ``endLine``,
    ``score``, ``snippet``, ``source``, ``citation``, ``match``, ``date``, ...); ``provider`` and
    ``model``: what embedded the query (``none``: a keyword-only index); ``backend``:
    ``builtin`` or ``qmd``; ``fallback``: ``None`` or ``{from, to, reason}``; ``citations``: the
    citations mode applied; ``note``: what the caller should know (empty: nothing); ``stale``:
    the index answered from is older than its sources (``stale_reason`` says what changed,
    ``refreshing`` whether a reindex is running; None: not checked, as for a LanceDB export, and
    left out of the JSON)."""

    results: list[dict[str, Any]]
    provider: str
    model: str | None
    backend: str
    mode: str
    fallback: dict[str, Any] | None
    citations: str
    note: str = ""
    stale: bool | None = None
    stale_reason: str = ""
    refreshing: bool = False

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SearchAnswer:
        return cls(results=list(data["results"]), provider=data.get("provider", "none"), model=data.get("model"),
                   backend=data.get("backend", "builtin"), mode=data.get("mode", "hybrid"),
                   fallback=data.get("fallback"),
                   citations=data.get("citations", "auto"), note=data.get("note", ""),
                   stale=None if data.get("stale") is None else bool(data["stale"]),
                   stale_reason=data.get("stale_reason", ""),
                   refreshing=bool(data.get("refreshing", False)))

    def to_dict(self) -> dict[str, object]:  # JSON edge: search --json, memory_search
        """The JSON answer: ``note`` only when there is one; ``stale`` when checked,
        ``stale_reason`` and ``refreshing`` only when stale."""
        out: dict[str, Any] = {"results": self.results, "provider": self.provider, "model": self.model,
                               "backend": self.backend, "mode": self.mode, "fallback": self.fallback,
                               "citations": self.citations}
        if self.note:
            out["note"] = self.note
        if self.stale is not None:
            out["stale"] = self.stale
        if self.stale:
            out["stale_reason"], out["refreshing"] = self.stale_reason, self.refreshing
        return out


@dataclass(frozen=True, slots=True)
class FileText:
    """Lines of an indexed file, as ``memory_get`` returns them.

    ``start_line`` is the first line returned (1-based), ``lines`` how many were returned (0 past
    the end, or for a daily note that does not exist yet). Transcript lines come back as readable,
    redacted ``User: ...`` / ``Assistant: ...`` text for the cited JSONL lines.
    """

    path: str
    source: str
    start_line: int
    lines: int
    text: str
    note: str | None = None  # why nothing was returned (past the end, lines that hold no message), or that the file changed since indexed

    @property
    def end_line(self) -> int:
        """The last line returned (``start_line - 1`` when none was)."""
        return self.start_line + self.lines - 1

    def to_dict(self) -> dict[str, object]:  # JSON edge: memory_get, get --json
        """``memory_get``'s JSON: ``{path, text, source, from, lines}`` (and ``note`` when there is one)."""
        out: dict[str, Any] = {"path": self.path, "text": self.text, "source": self.source, "from": self.start_line,
                               "lines": self.lines}
        if self.note:
            out["note"] = self.note
        return out


STOPPED_RUNS_NOTE = ("their processes stopped without removing their owner files (killed, or the machine went down):"
                     " Prefect may show them Running (a served run's runner may have marked one Crashed already)"
                     " until the next Prefect run of this index (`memory-core index --engine prefect`, or a"
                     " deployment's run) marks them Crashed; the live index is whole either way")


def re_embed_note(began: str) -> str:
    """The line ``status`` says of a pending re-embed (``MemoryStatus.re_embed_pending``)."""
    return (f"a re-embed begun {began} has not finished: the next run continues it (`memory-core index`: every"
            " chunk embedded again, what it received not paid for twice)")


BELOW_DELTA_NOTE = ("transcripts that grew by less than [sessions] delta_bytes / delta_messages: a run a trigger"
                    " starts (on search, on session start, watch) keeps their indexed rows, so their new messages"
                    " are not searchable yet; `memory-core index` indexes them now")


@dataclass(frozen=True, slots=True)
class MemoryStatus:
    """What ``memory-core status`` and ``memory_status`` report.

    ``state``: ``ok``, ``missing`` or ``damaged`` (then ``problem`` says why). Unless ok, only
    ``index_path`` and ``exists`` besides. Ok: what the index recorded (``provider``, ``model``,
    ``provider_reason``, ``dims``, chunking, ``sources``, ``built_at`` in ms since the epoch), what
    it holds (``files``, ``chunks``, ``chunks_by_source``), how vector search runs
    (``vector_search``, ``vector_scan``), its bytes (``index_bytes``, ``vector_bytes``, ``sizes``
    by purpose: :data:`SIZE_LINES`), its embedding cache, ``note`` (why search is keyword-only),
    ``stopped_flow_runs`` (in any state: the index's flow runs killed and still Running in Prefect),
    ``dirty`` / ``dirty_reason`` (its sources changed since it was built), ``re_embed_pending``
    (when a re-embed of it began that failed or was killed: the next run continues it), the Batch API jobs of
    the run that built it (``batch``) and ``built_from``: what it recorded (the settings readers
    use and writers keep unless told otherwise). ``backend`` / ``qmd``: the qmd backend's report."""

    state: str
    index_path: str
    exists: bool = True
    problem: str = ""
    provider: str | None = None
    model: str | None = None
    provider_reason: str | None = None
    dims: int | None = None
    chunk_tokens: int | None = None
    chunk_overlap: int | None = None
    sources: list[str] | None = None
    built_at: int | None = None
    files: int | None = None
    chunks: int | None = None
    chunks_by_source: dict[str, int] = field(default_factory=dict)
    vector_search: str = ""
    index_bytes: int = 0
    vector_bytes: dict[str, int] = field(default_factory=dict)
    cache_entries: int | None = None  # None: no cache file
    cache_path: str = ""
    sizes: dict[str, int] = field(default_factory=dict)
    vector_scan: ScanPlan | None = None  # an index with sign bits: its quick scan's plan
    chunks_over_window: int | None = None
    note: str = ""
    dirty: bool | None = None
    dirty_reason: str = ""
    # transcripts grown below the session delta (not dirty): their new messages wait for a run
    below_delta: list[str] = field(default_factory=list)
    extra_paths: list[str] = field(default_factory=list)
    cache_max_entries: int | None = None
    batch: dict[str, Any] | None = None  # the run's Batch API record, as the index keeps it (JSON)
    built_from: IndexRecord | None = None
    backend: str | None = None  # "qmd" when qmd answers searches
    qmd: QmdReport | None = None
    # flow runs of this index whose process stopped without reporting (killed): Prefect shows them
    # Running until the next Prefect run of the index marks them Crashed (memory_core/storage/run_owners.py)
    stopped_flow_runs: list[StoppedRun] = field(default_factory=list)
    # a re-embed of this index (its recorded model) that failed or was killed before it published:
    # when it began ("YYYY-MM-DD HH:MM UTC"); the next run continues it
    re_embed_pending: str | None = None

    @property
    def details(self) -> dict[str, object]:
        """The whole report as JSON, without ``built_from`` (JSON for API callers: every figure by name)."""
        return self.to_dict(built_from=False)

    def to_dict(self, *, built_from: bool = True) -> dict[str, object]:  # JSON edge: status --json, memory_status
        """The JSON of ``status --json`` (and ``memory_status``, which adds its ``sync``), in the
        order the human ``status`` prints it."""
        out: dict[str, Any] = {"index_path": self.index_path, "exists": self.exists, "state": self.state}
        if self.state in ("damaged", "newer"):
            out["problem"] = self.problem
        if self.state == "ok":
            out.update(provider=self.provider, model=self.model, provider_reason=self.provider_reason, dims=self.dims,
                       chunk_tokens=self.chunk_tokens, chunk_overlap=self.chunk_overlap, sources=self.sources,
                       built_at=self.built_at, files=self.files, chunks=self.chunks,
                       chunks_by_source=dict(self.chunks_by_source), fts=True, vector_search=self.vector_search,
                       index_bytes=self.index_bytes, vector_bytes=dict(self.vector_bytes),
                       cache_entries=self.cache_entries, cache_path=self.cache_path, sizes=dict(self.sizes))
            if self.vector_scan is not None:
                out["vector_scan"] = scan_report(self.vector_scan)
            if self.chunks_over_window is not None:
                out["chunks_over_window"] = self.chunks_over_window
            if self.note:
                out["note"] = self.note
            out.update(dirty=self.dirty, dirty_reason=self.dirty_reason)
            if self.below_delta:
                out.update(below_delta=list(self.below_delta), below_delta_note=BELOW_DELTA_NOTE)
            out.update(extra_paths=list(self.extra_paths), cache_max_entries=self.cache_max_entries)
            if self.batch:
                out["batch"] = self.batch
            out["re_embed_pending"] = self.re_embed_pending
            if self.re_embed_pending:
                out["re_embed_pending_note"] = re_embed_note(self.re_embed_pending)
        if self.stopped_flow_runs:
            out["stopped_flow_runs"] = [asdict(r) for r in self.stopped_flow_runs]
            out["stopped_flow_runs_note"] = STOPPED_RUNS_NOTE
        if self.backend is not None:
            out["backend"] = self.backend
        if self.qmd is not None:
            out["qmd"] = self.qmd.to_dict()
        r = self.built_from
        if built_from and r is not None:  # what the index was built from
            out["built_from"] = {
                "workspace": r.workspace, "sources": r.sources, "sessions_dir": r.sessions_dir,
                "extra_paths": r.extra_paths, "redact": r.redact,
                "chunking": {"tokens": r.chunk_tokens, "overlap": r.chunk_overlap},
                "provider": r.provider, "model": r.model, "provider_key": r.provider_key,
            }
        return out


def scan_report(plan: ScanPlan) -> dict[str, object]:  # JSON edge: status's and eval's vector_scan
    """A quick scan's plan as status shows it: ``measured`` (False: an index built before the
    check), a one-line ``summary`` and, measured, the plan's figures."""
    out: dict[str, Any] = {"measured": plan.measured, "summary": plan.describe()}
    if plan.measured:
        out.update(plan.to_meta())
    return out


@dataclass(frozen=True, slots=True)
class QmdReport:
    """The qmd backend in ``status``: its command (None: not found), mode, collections, whether
    searches fall back to the builtin index (and why) and its last runs."""

    command: str | None
    search_mode: str
    index_name: str
    state_dir: str
    collections: list[QmdCollection]
    fallback_in_use: bool
    fallback_reason: str
    last_search: QmdRun | None
    last_update: QmdRun | None
    last_embed: QmdRun | None

    def to_dict(self) -> dict[str, object]:  # JSON edge: status's "qmd"
        return {"command": self.command, "search_mode": self.search_mode, "index_name": self.index_name,
                "state_dir": self.state_dir, "collections": [asdict(c) for c in self.collections],
                "fallback_in_use": self.fallback_in_use, "fallback_reason": self.fallback_reason,
                "last_search": asdict(self.last_search) if self.last_search else None,
                "last_update": asdict(self.last_update) if self.last_update else None,
                "last_embed": asdict(self.last_embed) if self.last_embed else None}
