"""One validated settings model for every part of memory-core, and the one order it is resolved in.

Every entry point (the CLI, ``watch``, the reindex/backfill flows and their deployments, the
MCP server) calls :func:`memory_core.runtime.resolve.resolve_settings` (resolve.py), which takes each
setting from the first of:

1. an explicit flag or flow parameter (``--sessions``, ``--provider``, ``sources=...``);
2. a ``MEMORY_CORE_*`` environment variable (``MEMORY_CORE_WORKSPACE``, ``MEMORY_CORE_INDEX``,
   ``MEMORY_CORE_PROVIDER``, ``MEMORY_CORE_MODEL``);
3. the config file: the one given (``--config``, the ``config_file`` parameter), else
   ``$MEMORY_CORE_CONFIG``, else ``<workspace>/memory-core.toml`` when it exists;
4. what the live index recorded when it was built (workspace, sources, extra paths, sessions
   folder, redaction, chunking, provider, model and the non-secret remote settings; see
   :mod:`memory_core.storage.indexmeta`), so a run that is not told otherwise keeps what the index has;
5. the defaults below (the reference system's defaults unless a note says otherwise).

Unknown keys are errors: a typo in a config file must not be silently ignored.
:func:`load_settings` is the same without steps 3's workspace file and 4 (for tools and tests
that build settings from scratch).

API keys are ``SecretStr``: they never appear in ``repr``, logs or the provider key.
"""

from __future__ import annotations

import json
import os
import stat
import tomllib
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Final, Literal
from urllib.parse import urlsplit

from memory_core.errors import ConfigError
from memory_core.plugins import is_provider_name, provider_names, provider_on_machine
from memory_core.settings_model import (
    Check,
    Field,
    InvalidValue,
    PrivateAttr,
    SecretStr,
    SettingsModel,
    ValidationError,
    field_validator,
    model_validator,
)


def _registered_provider(name: str) -> str:
    """``auto``, ``none`` or a provider registered in memory_core.embeddings.registry."""
    if not is_provider_name(name):
        names = provider_names()
        expected = ", ".join(repr(n) for n in names[:-1]) + f" or {names[-1]!r}"
        raise InvalidValue("literal_error", f"Input should be {expected}")
    return name


ProviderName = Annotated[str, Check(_registered_provider)]
SourceName = Literal["memory", "sessions"]
_MEMORY_ONLY: list[SourceName] = ["memory"]


ORIGIN_INDEX: Final = "the index"
ORIGIN_DEFAULT: Final = "default"
NOT_TOLD: Final = (ORIGIN_INDEX, ORIGIN_DEFAULT)
"""Origins (:attr:`Settings.origins`) of a recorded setting no flag, variable or config file gave:
what the live index recorded, or the default (:func:`memory_core.runtime.resolve.resolve_settings`)."""


class _Model(SettingsModel):
    """Unknown keys are errors, assignments are validated, no number is inf or NaN (settings_model.py)."""


SECRET_HEADER_NAMES = frozenset({"authorization", "x-goog-api-key", "api-key", "x-api-key", "proxy-authorization",
                                 "cookie"})


def _mask_headers(headers: dict[str, str]) -> dict[str, str]:
    return {k: ("**********" if k.lower() in SECRET_HEADER_NAMES else v) for k, v in headers.items()}


class RemoteSettings(_Model):
    """Connection settings for a hosted embedding provider.

    ``api_key`` and secret-bearing ``headers`` (Authorization, x-goog-api-key, ...) are masked in
    ``repr`` and in every dump; :meth:`Settings.private_json` is the one way to get them out, for
    a worker process that must call the provider.
    """

    api_key: SecretStr | None = None
    base_url: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    dimensions: int | None = Field(default=None, gt=0, le=8192)
    api_version: str | None = None
    timeout_s: float = Field(default=60.0, gt=0)
    max_attempts: int = Field(default=6, ge=1, le=20)
    backoff_initial_s: float = Field(default=0.5, ge=0)
    backoff_max_s: float = Field(default=30.0, ge=0)
    # total seconds one run may wait between retries (all requests); see embeddings/retry.py
    retry_budget_s: float = Field(default=600.0, ge=0)
    # Lower the documented request limits for compatible endpoints that accept less.
    max_inputs_per_request: int | None = Field(default=None, ge=1)
    max_tokens_per_request: int | None = Field(default=None, ge=1)

    @field_validator("base_url")
    @classmethod
    def _base_url_valid(cls, v: str | None) -> str | None:
        """An http(s) URL with a host: ``api.openai.com/v1`` (no scheme) was retried six times as a
        network fault and never named (the thirty-eighth session's audit)."""
        if v is None:
            return v
        from memory_core.secrets import url_without_password

        try:
            parts = urlsplit(v.strip())
            ok = parts.scheme.lower() in ("http", "https") and bool(parts.hostname)
        except ValueError:
            ok = False
        if not ok:
            raise ValueError(f"must be an http:// or https:// URL with a host, not {url_without_password(v)!r}")
        return v

    def _dump_field(self, name: str, value: object, context: Mapping[str, object]) -> object:
        if name == "headers" and isinstance(value, dict):
            return dict(value) if context.get("reveal_secrets") else _mask_headers(value)
        return value

    def __repr_args__(self) -> Iterator[tuple[str | None, object]]:
        for k, v in super().__repr_args__():
            yield (k, _mask_headers(v) if k == "headers" and isinstance(v, dict) else v)


class LocalSettings(_Model):
    """The local model (all-MiniLM-L6-v2).

    ``backend``: ``auto`` runs the model through onnxruntime (an int8 ONNX export built once
    from the packaged weights and cached under ``cache_dir``) when onnxruntime is installed and
    the device is the CPU, else through sentence-transformers (torch); ``onnx`` requires the
    ONNX path; ``onnx-float32`` requires it too, unquantised (sentence-transformers' vectors,
    slower than int8); ``torch`` always uses sentence-transformers. ``cache_dir`` defaults to
    ``$MEMORY_CORE_CACHE_DIR``, else ``$XDG_CACHE_HOME/memory-core``, else
    ``~/.cache/memory-core``. ``batch_size`` is the most texts per model call (16: smaller
    batches of length-sorted texts are faster on a CPU than 32 or 64). ``threads`` is the
    model's threads; unset: ``$OMP_NUM_THREADS`` when it is set, else every core.
    """

    model_path: str | None = None
    batch_size: int = Field(default=16, ge=1, le=4096)
    device: str = "cpu"
    threads: int | None = Field(default=None, ge=1)
    backend: Literal["auto", "onnx", "onnx-float32", "torch"] = "auto"
    cache_dir: str | None = None


class ChunkingSettings(_Model):
    """Chunk size in (approximate) tokens; ``None`` means the provider's documented default."""

    tokens: int | None = Field(default=None, ge=8, le=8192)
    overlap: int | None = Field(default=None, ge=0)
    # transcript chunks also get one vector per exchange (a user message and its replies; one of
    # more than 4 messages: per overlapping window of 4); a chunk's vector relevance is its best
    # one (memory_core.sources.sessions.exchange_parts, memory_core.storage.vectors, docs/search.md)
    exchange_vectors: bool = True
    # a note's chunk also gets one vector per overlapping window of 4 of its lines (not for a
    # chunk of 4 lines or fewer, nor one that is mostly code; memory_core.index.chunking.note_windows).
    # None: on with a model on this machine (the local model: 200-token chunks, nothing billed), off with a hosted
    # provider (its 400-token chunks hold ~30 lines: ~14 more inputs billed a chunk)
    note_windows: bool | None = None

    @model_validator(mode="after")
    def _overlap_below_tokens(self) -> ChunkingSettings:
        if self.tokens is not None and self.overlap is not None and self.overlap >= self.tokens:
            raise ValueError(f"chunking.overlap ({self.overlap}) must be smaller than chunking.tokens ({self.tokens})")
        return self


# The search defaults: decided here, once; :mod:`memory_core.query.ranking` documents the fusion they
# feed and docs/search.md how they were measured.
DEFAULT_VECTOR_WEIGHT = 0.5
DEFAULT_TEXT_WEIGHT = 0.5
DEFAULT_MIN_SCORE = 0.15  # the answer's threshold: its best result must reach it
# ... when query.min_score is unset, only for a query memory does not support: fewer than this IDF
# share of its words occurs in the index, or (with vectors) no chunk is nearer than the model's
# unrelated level (memory_core.query.ranking.query_supported)
SUPPORT_MIN_COVERAGE = 0.1
# below the answer's best result, the least a result listed with it scores (query.result_floor;
# see memory_core.query.ranking.answer_threshold)
DEFAULT_RESULT_FLOOR = 0.0
DEFAULT_DECAY_FLOOR = 0.7  # weight of a very old memory against a new one of the same relevance
DEFAULT_FILE_DIVERSITY = 0.8  # query.file_diversity: each further chunk of a file placed as if x0.8 per one before it
DEFAULT_FILE_SUPPORT = 0.5  # query.file_support: hybrid results placed by score + 0.5 x their file's relevance as a whole
SNIPPET_MAX_CHARS = 700  # the most characters of a result's snippet (search, MCP, the reference's 700)


class MMRSettings(_Model):
    enabled: bool = False
    lambda_: float = Field(default=0.7, ge=0, le=1, alias="lambda")


class DecaySettings(_Model):
    enabled: bool = False
    half_life_days: float = Field(default=30.0, gt=0)
    floor: float = Field(default=DEFAULT_DECAY_FLOOR, ge=0, le=1)  # weight of a very old memory


class QuerySettings(_Model):
    """Search defaults (the constants above; what they mean, and how they were measured, is
    documented in :mod:`memory_core.query.ranking`)."""

    max_results: int = Field(default=6, ge=1, le=200)
    # the answer's best result must reach it. Unset (the default): DEFAULT_MIN_SCORE, for a query
    # memory does not support only (its words are not in memory, or its meaning is at the model's
    # unrelated level); a supported query keeps its weak results, scores shown. A number: a plain
    # threshold on every query (as before 2026-11-28, when 0.15 was the default)
    min_score: float | None = Field(default=None, ge=0, le=1)
    # the least the answer's other results score (at most min_score; min_score: a per-result threshold)
    result_floor: float = Field(default=DEFAULT_RESULT_FLOOR, ge=0, le=1)
    hybrid: bool = True  # false: vector side only, as in the reference (same as mode = "vector")
    mode: Literal["hybrid", "vector", "keyword"] | None = None  # default: "hybrid", or "vector" if hybrid = false
    vector_calibration: tuple[float, float] | None = None  # (cosine of unrelated text, of a clear match)
    vector_weight: float = Field(default=DEFAULT_VECTOR_WEIGHT, ge=0)
    text_weight: float = Field(default=DEFAULT_TEXT_WEIGHT, ge=0)
    candidate_multiplier: float = Field(default=4, ge=1, le=20)
    # the longest a search waits for its query's embedding, retries included; then keyword-only
    embed_timeout_s: float = Field(default=8.0, gt=0, le=600)
    fusion: Literal["calibrated", "minmax", "rrf"] = "calibrated"
    # a day the query names (memory_core/query/dates.py): how a numeric day whose two numbers are both
    # 12 or less reads ("01/02": 1 February with "dmy", January 2 with "mdy"; "17/01" and "1/17" read
    # either way, a dotted "01.02" is always day first; the question's own proven days, then the
    # memory's timeline, can overrule it: query/dates.query_date_range), and how many hours past its end a
    # transcript's message still counts as that day's, less and less (a conversation past midnight)
    date_order: Literal["dmy", "mdy"] = "dmy"
    day_tolerance_hours: float = Field(default=6.0, ge=0, le=48)
    # what a memory_search answer hands an agent (memory_core/query/answers.py)
    citations: Literal["on", "off", "auto"] = "auto"
    # a result whose best-matching message (transcript) or line (note) is its chunk's last (first)
    # also shows the one after (before) it, read from the index: at most one each side, each at most
    # EDGE_MAX_CHARS (memory_core/query/edges.py), the snippet still within SNIPPET_MAX_CHARS; the
    # citation's lines grow only when it is shown; scores do not change. A transcript question no one
    # has answered by the chunk's end reaches its answer past it, through holds ("hang on"): at most
    # EDGE_THROUGH_MAX messages. 0 turns it off.
    edge_lines: int = Field(default=1, ge=0, le=1)
    # hybrid results: each further chunk of a file (a session, a note) is placed as if it scored
    # this much less per chunk of that file before it (ranking.diversify_files), so a question
    # whose evidence spans sessions sees each session's best chunk; shown scores, the threshold and
    # the order of files do not change; not when the query names a day (its own chunks come
    # first). 1 turns it off.
    file_diversity: float = Field(default=DEFAULT_FILE_DIVERSITY, gt=0, le=1)
    # hybrid results: each is placed by its score + this x its file's relevance as a whole (the
    # calibrated relevance of the mean cosine of the file's best 3 chunks among all its chunks,
    # ranking.file_support), so a session or note that is about the question lifts its chunks
    # above a file that only brushes it; shown scores and the threshold do not change; not when
    # the query names a day or an identifier, or the model cannot read it. 0 turns it off.
    file_support: float = Field(default=DEFAULT_FILE_SUPPORT, ge=0, le=2)
    max_injected_chars: int | None = Field(default=None, ge=1)
    mmr: MMRSettings = Field(default_factory=MMRSettings)
    temporal_decay: DecaySettings = Field(default_factory=DecaySettings)

    @model_validator(mode="after")
    def _weights(self) -> QuerySettings:
        if self.vector_weight + self.text_weight <= 0:
            raise ValueError("query.vector_weight + query.text_weight must be > 0")
        if self.vector_calibration is not None and not self.vector_calibration[0] < self.vector_calibration[1]:
            raise ValueError("query.vector_calibration must be [low, high] cosines with low < high")
        return self

    def threshold(self, min_score: float | None = None) -> float:
        """The ``min_score`` a search uses: the caller's, else this setting, else the default. The
        one place the default is applied (the builtin ranking, the qmd backend, the memory store,
        eval). With neither given, the builtin ranking applies it to unsupported queries only
        (:meth:`by_support`)."""
        if min_score is not None:
            return float(min_score)
        return DEFAULT_MIN_SCORE if self.min_score is None else self.min_score

    def by_support(self, min_score: float | None = None) -> bool:
        """True when neither the caller nor the settings give ``min_score``: the threshold then
        empties only the answer to a query memory does not support (ranking.query_supported)."""
        return min_score is None and self.min_score is None

    def search_mode(self) -> str:
        """``mode`` if set, else ``"hybrid"`` (``"vector"`` when ``hybrid = false``, as the reference)."""
        return self.mode or ("hybrid" if self.hybrid else "vector")

    def normalised_weights(self) -> tuple[float, float]:
        """(vector, text) clamped to [0, 1] and scaled to sum 1, as the reference."""
        v = min(1.0, max(0.0, self.vector_weight))
        t = min(1.0, max(0.0, self.text_weight))
        total = v + t
        return (v / total, t / total) if total > 0 else (0.5, 0.5)


class CacheSettings(_Model):
    enabled: bool = True
    path: Path | None = None
    max_entries: int | None = Field(default=None, ge=1)


class BatchSettings(_Model):
    """Provider Batch APIs (OpenAI, Gemini, Voyage) for embedding cache misses.

    ``wait``: poll until every job is collected (default); off, a run submits its jobs, collects
    the ones already done and leaves the rest recorded in the job ledger for a later run.
    ``concurrency``: jobs in flight at once. ``poll_interval_s`` / ``timeout_minutes``: how often
    a job is polled and how long one job is waited for (a timeout is waited out once more, then
    counts 2 toward ``failure_limit``). At ``failure_limit`` failed jobs, batch mode is off for
    the rest of the run and the remaining chunks go through sync calls.
    ``max_requests_per_job`` / ``max_tokens_per_job`` / ``max_bytes_per_job`` lower the
    provider's documented job limits (e.g. for an organisation's enqueued-token quota).
    ``prices`` (USD per 1M tokens at the sync price, keys ``"provider/model"`` or
    ``"provider/*"``) and ``batch_discount`` (provider -> fraction off the sync price) extend or
    override the built-in price table used for the run's cost estimate.
    """

    enabled: bool = False
    wait: bool = True
    concurrency: int = Field(default=2, ge=1, le=64)
    poll_interval_s: float = Field(default=2.0, gt=0)
    timeout_minutes: float = Field(default=60.0, gt=0)
    failure_limit: int = Field(default=2, ge=1)
    max_requests_per_job: int | None = Field(default=None, ge=1)
    max_tokens_per_job: int | None = Field(default=None, ge=1)
    max_bytes_per_job: int | None = Field(default=None, ge=1024)
    cancel_unneeded: bool = True
    delete_files: bool = True
    prices: dict[str, float] = Field(default_factory=dict)
    batch_discount: dict[str, float] = Field(default_factory=dict)

    @field_validator("prices")
    @classmethod
    def _prices_valid(cls, v: dict[str, float]) -> dict[str, float]:
        for key, price in v.items():
            if "/" not in key or price < 0:
                raise ValueError(f"prices: {key!r} must be 'provider/model' with a price >= 0 (USD per 1M tokens)")
        return v

    @field_validator("batch_discount")
    @classmethod
    def _discount_valid(cls, v: dict[str, float]) -> dict[str, float]:
        for key, frac in v.items():
            if not 0 <= frac < 1:
                raise ValueError(f"batch_discount.{key} must be a fraction in [0, 1)")
        return v


class FallbackSettings(_Model):
    """A fallback provider with its own model and connection settings.

    ``remote`` unset: the primary's ``remote`` settings are used (fine for ``local``/``none``,
    rarely right for another hosted provider, whose base URL and key differ).
    """

    provider: ProviderName
    model: str | None = None
    remote: RemoteSettings | None = None


class SessionsSettings(_Model):
    dir: Path | None = None
    # every ``*.jsonl`` below ``dir`` (Codex CLI's ``YYYY/MM/DD/rollout-*.jsonl``), indexed as
    # ``sessions/<relative path>``; off: only those directly in it (OpenClaw's shape)
    recursive: bool = False
    delta_bytes: int = Field(default=100_000, ge=0)
    delta_messages: int = Field(default=50, ge=0)


class LockSettings(_Model):
    wait: bool = True
    timeout_s: float = Field(default=600.0, ge=0)


class QmdSettings(_Model):
    """``backend = "qmd"``: the external ``qmd`` CLI (memory_core/storage/qmd.py, index/qmd.py, query/qmd.py; docs in the README).

    ``command``: the qmd executable (PATH lookup, or a path; scripts/install-qmd.sh prints it).
    ``search_mode``: ``search`` (BM25, offline), ``vsearch`` (vectors) or ``query`` (expansion
    + reranking), as the seeds' ``searchMode``. ``fallback_on_empty``: when qmd finds nothing
    and the builtin index has a match scoring at least ``fallback_min_score``, answer from the
    builtin index (a documented fallback reason). ``state_dir``: qmd's config and index for this
    memory-core index (default ``<index dir>/qmd``); ``index_name`` is qmd's ``--index``.
    """

    command: str = "qmd"
    search_mode: Literal["search", "vsearch", "query"] = "search"
    index_name: str = Field(default="memory-core", pattern=r"^[A-Za-z0-9_-]+$")
    state_dir: Path | None = None
    timeout_s: float = Field(default=30.0, gt=0)
    # qmd found nothing but the builtin index has a match scoring at least fallback_min_score:
    # answer from the builtin index (and say so); qmd's `search` ANDs every query word
    fallback_on_empty: bool = True
    fallback_min_score: float = Field(default=0.5, ge=0, le=1)
    update_timeout_s: float = Field(default=600.0, gt=0)
    embed_timeout_s: float = Field(default=3600.0, gt=0)


class SyncSettings(_Model):
    """When the index refreshes itself (memory_core/runtime/sync.py), as the seeds' ``sync`` settings.

    Read by the long-lived readers: the MCP server, :func:`memory_core.open_memory`'s ``Memory``
    and ``memory-core watch`` (which always watches). ``on_search``: a search on a dirty index
    starts a reindex and waits for it at most ``search_wait_ms`` (then answers from the current
    index, saying it is stale); ``on_session_start``: an MCP client's ``initialize`` (a
    ``Memory``'s first call) starts one in the background; ``watch`` with ``watch_debounce_ms``:
    file changes do; ``interval_minutes`` > 0: a reindex at that interval. The first three are
    on by default, as the seeds' (``onSessionStart``, ``onSearch``, ``watch``): a reader answers
    from a fresh index unless told otherwise. They refresh an index that exists; the first one
    is built by ``memory-core index`` (or ``watch``).
    """

    on_search: bool = True
    on_session_start: bool = True
    watch: bool = True
    watch_debounce_ms: int = Field(default=1500, ge=0, le=3_600_000)  # at most an hour: a wait past it is no watch
    search_wait_ms: int = Field(default=1000, ge=0)
    interval_minutes: float = Field(default=0.0, ge=0)


DEFAULT_FLUSH_SYSTEM_PROMPT = "Session nearing compaction. Store durable memories now."
DEFAULT_FLUSH_PROMPT = ("Write any lasting notes to memory/YYYY-MM-DD.md; reply with NO_REPLY if nothing to"
                        " store.")


class MemoryFlushSettings(_Model):
    """The seeds' ``agents.defaults.compaction.memoryFlush``: one silent turn before compaction.

    ``prompt`` and ``system_prompt`` are what the runtime sends (``YYYY-MM-DD`` becomes today's
    date); ``soft_threshold_tokens``: the flush is due this many tokens before the reserve."""

    enabled: bool = True
    soft_threshold_tokens: int = Field(default=4000, ge=0)
    system_prompt: str = Field(default=DEFAULT_FLUSH_SYSTEM_PROMPT, min_length=1)
    prompt: str = Field(default=DEFAULT_FLUSH_PROMPT, min_length=1)


class CompactionSettings(_Model):
    """When a session is compacted, and the memory flush before it (memory_core/notes/flush.py).

    A flush is due when a session's token estimate passes ``context_window -
    reserve_tokens_floor - memory_flush.soft_threshold_tokens``, once per compaction cycle.
    ``workspace_access``: ``rw``, or ``ro`` / ``none`` (a sandboxed session): then no flush is
    due and ``memory_write`` refuses to write."""

    context_window: int = Field(default=200_000, ge=1)
    reserve_tokens_floor: int = Field(default=20_000, ge=0)
    workspace_access: Literal["rw", "ro", "none"] = "rw"
    memory_flush: MemoryFlushSettings = Field(default_factory=MemoryFlushSettings)


AGENT_ID_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,63}$"
AGENT_PATHS = ("workspace", "index_path", "qmd_state_dir", "lancedb_path")


class AgentEntry(_Model):
    """One agent of ``[[agents.list]]``: its id, and paths that override the templates."""

    id: Annotated[str, Field(pattern=AGENT_ID_PATTERN)]
    workspace: str | None = None
    index_path: str | None = None
    qmd_state_dir: str | None = None
    lancedb_path: str | None = None


class AgentsSettings(_Model):
    """Many agents from one config (memory_core/runtime/agents.py; docs/agents.md).

    ``list``: the agents (an id not in it is unknown). ``workspace``, ``index_path``,
    ``qmd_state_dir``, ``lancedb_path``: path templates where ``{agent}`` is the agent's id,
    used for each path an agent's entry does not set (``index_path`` unset: the workspace's
    default index; ``qmd_state_dir`` / ``lancedb_path`` unset: ``<index dir>/qmd`` /
    ``<index dir>/lancedb``). ``default``: the agent used when none is named.
    """

    default: str | None = None
    workspace: str | None = None
    index_path: str | None = None
    qmd_state_dir: str | None = None
    lancedb_path: str | None = None
    agents: list[AgentEntry] = Field(default_factory=list, alias="list")

    @model_validator(mode="after")
    def _ids(self) -> AgentsSettings:
        ids = [a.id for a in self.agents]
        dup = sorted({i for i in ids if ids.count(i) > 1})
        if dup:
            raise ValueError(f"agents.list: agent {', '.join(dup)} is listed twice")
        if self.default is not None and self.default not in ids:
            raise ValueError(f"agents.default: {self.default!r} is not in agents.list")
        return self

    @property
    def ids(self) -> list[str]:
        return [a.id for a in self.agents]


#: Allowed values of the ``redact`` setting ("auto" is resolved when settings load).
REDACT_MODES: Final = ("auto", "sessions", "all", "off")


def should_redact(source: str, mode: str) -> bool:
    """Whether text of *source* (``"memory"`` or ``"sessions"``) must be redacted: the one place
    this is decided (the indexer, the write tool, the memory store, and a query before a hosted
    provider embeds it; :mod:`memory_core.sources.redact` holds the rules themselves, loaded only
    when something is redacted).

    ``mode`` is the ``redact`` setting: ``"sessions"`` (transcripts only), ``"all"``
    (every source) or ``"off"``; ``"auto"`` (the default) is resolved by
    :func:`resolve_redact_mode` when settings load.  Unknown modes raise ``ValueError``
    rather than silently disabling redaction.
    """
    if mode == "off":
        return False
    if mode in ("all", "auto"):  # "auto" is resolved at load time; unresolved, the safe side
        return True
    if mode == "sessions":
        return source == "sessions"
    raise ValueError(f"unknown redact_mode {mode!r}; expected one of {', '.join(REDACT_MODES)}")


def resolve_redact_mode(data: dict[str, object]) -> dict[str, object]:
    """Settings data with ``redact = "auto"`` (the default) made concrete.

    The rule: secrets are redacted whenever text leaves the machine. A hosted provider (or
    ``auto``, which may pick one, or a hosted fallback) receives every chunk: then Markdown
    notes are redacted too (``"all"``); with ``local``/``none`` only transcripts are
    (``"sessions"``). The index meta records the concrete mode, so a change rebuilds.
    """
    if data.get("redact", "auto") != "auto":
        return data
    fallback = data.get("fallback")
    if isinstance(fallback, dict):
        fallback = fallback.get("provider")
    names = {str(data.get("provider", "auto")), *([str(fallback)] if fallback else [])}
    # providers that embed on this machine (the class fact ``on_machine``): with them nothing leaves it
    return {**data, "redact": "sessions" if all(provider_on_machine(n) for n in names) else "all"}


class Settings(_Model):
    """Everything a run or a query needs. Paths are resolved by :meth:`resolved`."""

    workspace: Path = Field(default_factory=lambda: Path.cwd())
    index_path: Path | None = None
    extra_paths: list[str] = Field(default_factory=list)
    sources: list[SourceName] = Field(default_factory=lambda: _MEMORY_ONLY.copy())
    provider: ProviderName = "auto"
    model: str | None = None
    # Used when the primary cannot be created or keeps failing during a run (then the index is
    # rebuilt in full with the fallback: vectors of two providers are never mixed). A provider
    # name (its default model, the same ``remote`` settings) or a [fallback] table.
    fallback: ProviderName | FallbackSettings | None = None
    # "auto" (the default) becomes "all" when text can leave the machine (a hosted or "auto"
    # provider or fallback), else "sessions": see resolve_redact_mode above
    redact: Literal["auto", "sessions", "all", "off"] = "auto"
    remote: RemoteSettings = Field(default_factory=RemoteSettings)
    local: LocalSettings = Field(default_factory=LocalSettings)
    chunking: ChunkingSettings = Field(default_factory=ChunkingSettings)
    query: QuerySettings = Field(default_factory=QuerySettings)
    cache: CacheSettings = Field(default_factory=CacheSettings)
    batch: BatchSettings = Field(default_factory=BatchSettings)
    sessions: SessionsSettings = Field(default_factory=SessionsSettings)
    lock: LockSettings = Field(default_factory=LockSettings)
    backend: Literal["builtin", "qmd"] = "builtin"
    qmd: QmdSettings = Field(default_factory=QmdSettings)
    sync: SyncSettings = Field(default_factory=SyncSettings)
    compaction: CompactionSettings = Field(default_factory=CompactionSettings)
    agents: AgentsSettings = Field(default_factory=AgentsSettings)
    agent: str | None = Field(default=None, pattern=AGENT_ID_PATTERN)  # the agent these settings are for
    # the LanceDB memory store's folder (issue 23 part 1); default <index dir>/lancedb
    lancedb_path: Path | None = None
    # setting (dotted) -> where its value came from; set by resolve_settings, empty otherwise
    _origins: dict[str, str] = PrivateAttr(default_factory=dict)
    # a fallback provider's settings: the primary's, whose provider the index keeps as built
    # (memory_core.embeddings.registry.fallback_settings, memory_core.storage.indexmeta.build_meta)
    _primary: Settings | None = PrivateAttr(default_factory=lambda: None)

    @property
    def origins(self) -> dict[str, str]:
        """Where each recorded setting came from (``--sessions``, ``config file ...``, ``the index``,
        ``default``), as resolved by :func:`memory_core.runtime.resolve.resolve_settings`; empty for
        settings built otherwise."""
        return self._origins

    def told(self, key: str) -> bool:
        """Whether a flag, a variable or a config file gave recorded setting ``key`` (its origin is
        not :data:`NOT_TOLD`); True for settings built otherwise (no origins: their caller said it)."""
        return self._origins.get(key) not in NOT_TOLD

    @model_validator(mode="before")
    @classmethod
    def _resolve_redact(cls, data: object) -> object:
        return resolve_redact_mode(data) if isinstance(data, dict) else data

    @field_validator("sources")
    @classmethod
    def _sources_nonempty(cls, v: list[str]) -> list[str]:
        if not v:
            raise ValueError("at least one source is required")
        return list(dict.fromkeys(v))

    def private_json(self) -> str:
        """Settings as JSON *with* secrets, for a worker process that calls the provider.

        Never log or persist the result; everything else sees masked secrets."""
        data = self.model_dump(mode="json", by_alias=True, context={"reveal_secrets": True})
        remote = data["remote"]
        if self.remote.api_key is not None and isinstance(remote, dict):
            remote["api_key"] = self.remote.api_key.get_secret_value()
        return json.dumps(data, sort_keys=True)

    # -- derived paths -------------------------------------------------------------
    @property
    def workspace_dir(self) -> Path:
        return Path(os.path.abspath(os.path.expanduser(self.workspace)))

    @property
    def index_file(self) -> Path:
        if self.index_path is not None:
            return Path(os.path.abspath(os.path.expanduser(self.index_path)))
        return self.workspace_dir / ".memory-core" / "index.sqlite"

    @property
    def cache_file(self) -> Path:
        if self.cache.path is not None:
            return Path(os.path.abspath(os.path.expanduser(self.cache.path)))
        idx = self.index_file
        return idx.with_name(idx.stem + ".cache.sqlite")

    @property
    def lancedb_dir(self) -> Path:
        """The folder of the agent's LanceDB memory store (``lancedb_path``, else ``<index dir>/lancedb``).
        A relative ``lancedb_path`` (an API argument, a variable) is relative to the current folder,
        as ``index_path`` and the CLI's ``--store`` are (a config file's are made absolute against
        the file when it is read): one folder through every door."""
        if self.lancedb_path is not None:
            return Path(os.path.abspath(os.path.expanduser(self.lancedb_path)))
        return self.index_file.parent / "lancedb"

    @property
    def flush_ledger_file(self) -> Path:
        """The ledger of memory flushes per session and compaction cycle (memory_core/notes/flush.py)."""
        idx = self.index_file
        return idx.with_name(idx.stem + ".flush-ledger.json")

    @property
    def sessions_dir(self) -> Path:
        """The transcripts' folder: ``[sessions] dir`` (relative to the workspace), else
        ``<workspace>/sessions``; absolute and normalised (``..`` taken out, symlinks kept), so a
        watcher's event paths and discovery's compare equal to it (``../agent/sessions`` was never
        watched)."""
        if self.sessions.dir is not None:
            p = Path(os.path.expanduser(self.sessions.dir))
            return Path(os.path.abspath(p if p.is_absolute() else self.workspace_dir / p))
        return Path(os.path.abspath(self.workspace_dir / "sessions"))


_ENV_KEYS = {
    "MEMORY_CORE_WORKSPACE": "workspace",
    "MEMORY_CORE_INDEX": "index_path",
    "MEMORY_CORE_PROVIDER": "provider",
    "MEMORY_CORE_MODEL": "model",
}


def _deep_merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, object]:
    out = dict(base)
    for k, v in extra.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _deep_merge(out[k], v)
        else:
            out[k] = v
    return out


def _format_validation_error(err: ValidationError, where: Callable[[str], str] | None = None) -> str:
    """One line naming each bad setting and, when ``where`` knows it, where its value came from
    (``provider (from $MEMORY_CORE_PROVIDER): Input should be ...``): the same words from a variable
    and from a config file sent a user looking in the wrong place."""
    parts = []
    for e in err.errors():
        loc = ".".join(str(x) for x in e.loc) or "settings"
        src = where(loc) if where is not None and e.loc else ""
        said = e.msg
        if e.type == "extra_forbidden":
            near = _nearest_setting(e.loc)
            said = "unknown setting" + (f" (did you mean {near}?)" if near else "")
        parts.append(f"{loc}{f' (from {src})' if src else ''}: {said}")
    return "invalid configuration: " + "; ".join(parts)


def _nearest_setting(loc: tuple[int | str, ...]) -> str | None:
    """The setting an unknown key most likely meant (``query.max_result`` -> ``query.max_results``):
    the nearest name among its table's (difflib, ratio 0.75), written as the key was; None when the
    table is not a settings model (an agent's entry, a list) or nothing is near."""
    import difflib

    def table(t: object) -> type[SettingsModel] | None:  # a settings table, or one of a union's
        return next((a for a in (t, *getattr(t, "__args__", ())) if isinstance(a, type) and issubclass(a, SettingsModel)),
                    None)

    model: type[SettingsModel] | None = Settings
    for part in loc[:-1]:
        field = model.model_fields.get(str(part)) if model is not None else None
        model = table(field.annotation) if field is not None else None
    if model is None:
        return None
    names = [n for n, f in model.model_fields.items() if not n.startswith("_")]
    names += [f.alias for f in model.model_fields.values() if f.alias]
    # (not the key itself: a field's name beside its alias, `lambda_` with `lambda`, is refused as unknown)
    got = difflib.get_close_matches(str(loc[-1]), [n for n in names if n != str(loc[-1])], n=1, cutoff=0.75)
    return ".".join([*(str(p) for p in loc[:-1]), got[0]]) if got else None


def load_settings(
    config_file: str | os.PathLike[str] | None = None,
    overrides: dict[str, Any] | None = None,
    *,
    env: Mapping[str, str] | None = None,
) -> Settings:
    """Build :class:`Settings` from a TOML file, ``MEMORY_CORE_*`` variables and overrides.

    Raises :class:`ConfigError` with one line naming each bad setting.
    """
    env = os.environ if env is None else env
    path = config_file or env.get("MEMORY_CORE_CONFIG")
    cfg = read_config_file(path) if path else {}
    env_layer = _env_layer(env)
    told = _drop_none(overrides) if overrides else {}
    data = _deep_merge(_deep_merge(cfg, env_layer), told)
    layers = [("", told), (ENV_LABEL, env_layer), (f"config file {path}", cfg)]
    return _validate(data, lambda key: value_source(key, layers))


ENV_LABEL: Final = "$MEMORY_CORE_*"
"""The label of the ``MEMORY_CORE_*`` layer for :func:`value_source` (which names the variable)."""


def dotted(data: Mapping[str, Any], key: str) -> object:
    """``data["a"]["b"]`` for ``key`` ``"a.b"``; None where a part is missing."""
    cur: Any = data
    for part in key.split("."):
        if not isinstance(cur, Mapping) or part not in cur:
            return None
        cur = cur[part]
    return cur


def value_source(key: str, layers: Sequence[tuple[str, Mapping[str, Any]]]) -> str:
    """Where the value of setting ``key`` (dotted: ``query.min_score``) came from: the label of the
    first of ``layers`` (the one that wins first) that holds it, else the first that holds its
    table (``query.mmr.bogus`` in a config's ``[query.mmr]``); a ``MEMORY_CORE_*`` variable is named
    as itself. "" when none does or that layer has no label."""
    keys = [key]
    while "." in keys[-1]:
        keys.append(keys[-1].rpartition(".")[0])
    for k in keys:
        for label, layer in layers:
            if dotted(layer, k) is not None:
                if label == ENV_LABEL:
                    var = next((v for v, kk in _ENV_KEYS.items() if kk == k), None)
                    return f"${var}" if var else label
                return label
    return ""


def _drop_none(d: dict[str, Any]) -> dict[str, object]:
    return {k: (_drop_none(v) if isinstance(v, dict) else v) for k, v in d.items() if v is not None}


def _env_layer(env: Mapping[str, str]) -> dict[str, object]:
    return {key: env[var] for var, key in _ENV_KEYS.items() if env.get(var)}


def _validate(data: dict[str, Any], where: Callable[[str], str] | None = None) -> Settings:
    """``data`` as :class:`Settings`, or :class:`ConfigError` naming each bad setting (and, with
    ``where``: a setting's dotted name -> where its value came from, that too)."""
    try:
        return Settings.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_format_validation_error(exc, where)) from None


MAX_CONFIG_BYTES = 1024 * 1024


def read_config_file(path: str | os.PathLike[str]) -> dict[str, object]:
    """The settings of a TOML config file; relative ``workspace``, ``index_path``, ``lancedb_path``,
    ``[cache] path`` and the agents' paths are relative to it (``extra_paths``, ``[sessions] dir``
    and ``[qmd] state_dir`` are relative to the workspace)."""
    p = Path(path).expanduser()
    try:
        # O_NONBLOCK and a regular file only: a FIFO (or a device) given as the config would
        # block the open, and every command, for ever
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                what = "a folder" if stat.S_ISDIR(st.st_mode) else "not a regular file"
                raise ConfigError(f"config file {p} is {what}")
            if st.st_size > MAX_CONFIG_BYTES:
                raise ConfigError(f"config file {p} is {st.st_size} bytes, over the {MAX_CONFIG_BYTES >> 20} MiB"
                                  " a config file may be")
            os.set_blocking(fd, True)
            with os.fdopen(os.dup(fd), "rb") as fh:
                data = tomllib.loads(fh.read(MAX_CONFIG_BYTES + 1).decode("utf-8"))
        finally:
            os.close(fd)
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {p}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {p} is not valid TOML: {exc}") from None
    except RecursionError:
        raise ConfigError(f"config file {p} is nested too deeply to be a config file") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"config file {p} is not UTF-8 text (byte {exc.object[exc.start]:#04x} at offset"
                          f" {exc.start})") from None
    except OSError as exc:
        raise ConfigError(f"cannot read config file {p}: {exc.strerror}") from None
    base = p.parent.resolve()

    def absolute(table: Any, keys: tuple[str, ...]) -> None:
        if isinstance(table, dict):
            for key in keys:
                if isinstance(table.get(key), str) and not Path(table[key]).expanduser().is_absolute():
                    table[key] = str(base / table[key])

    absolute(data, ("workspace", "index_path", "lancedb_path"))
    absolute(data.get("cache"), ("path",))  # not the folder a process happens to start in
    agents = data.get("agents")
    if isinstance(agents, dict):  # the agents' paths and templates are relative to the file too
        absolute(agents, AGENT_PATHS)
        for entry in agents.get("list") or []:
            absolute(entry, AGENT_PATHS)
    return data
