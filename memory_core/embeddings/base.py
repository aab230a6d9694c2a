"""The provider protocol and what every provider shares: vector checks and the provider key."""

from __future__ import annotations

import hashlib
import json
import math
import unicodedata
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeAlias, TypedDict, cast

import numpy as np

from memory_core import secrets
from memory_core.errors import ProviderAnswerError, ProviderError

if TYPE_CHECKING:
    import numpy.typing as npt

    from memory_core.embeddings.batch_types import BatchClient, JobLimits

    # What providers answer: float32 rows, (n, d) for documents and (d,) for one query (numpy's
    # stubs do not type the shape). Types only: numpy.typing is not imported at run time.
    Vectors: TypeAlias = npt.NDArray[np.float32]

# The one place chunk sizes are decided: a chunk is ``tokens`` approximate tokens of
# ``CHARS_PER_TOKEN`` characters each (the reference's rule; :mod:`memory_core.index.chunking` applies it), ``overlap`` of them carried into
# the next chunk. The defaults are the reference's; a provider may state its own
# (``EmbeddingProvider.default_chunk_tokens``); ``[chunking]`` in the config wins over both
# (:func:`memory_core.storage.indexmeta.chunk_params`).
CHARS_PER_TOKEN = 4
DEFAULT_CHUNK_TOKENS = 400
DEFAULT_CHUNK_OVERLAP = 80

SECRET_HEADERS = frozenset({"authorization", "x-goog-api-key", "api-key", "x-api-key", "proxy-authorization", "cookie"})


class RetryOptions(TypedDict):
    """A provider's time limits, as keywords of :func:`~memory_core.embeddings.retry.call_with_retries`."""

    attempt_timeout_s: float | None
    deadline_s: float | None


@dataclass(frozen=True)
class ProviderInfo:
    """What status and meta say about a provider (never a secret)."""

    name: str
    model: str
    provider_key: str
    dims: int | None
    reason: str = ""
    details: dict[str, Any] = field(default_factory=dict)


def _secret_header(name: str) -> bool:
    """A header whose value is a credential (``Authorization``, ``Helicone-Auth``,
    ``X-Portkey-Api-Key``, a cookie): its value is never shown (:mod:`memory_core.secrets`)."""
    n = name.lower()
    return n in SECRET_HEADERS or any(w in n for w in ("key", "token", "auth", "secret", "pass", "cookie", "signature"))


def _key_of(provider: str, model: str, base_url: str | None, headers: list[tuple[str, str]],
            extra: dict[str, Any]) -> str:
    payload = {"provider": provider, "baseUrl": base_url or "", "model": model, "headers": sorted(headers)}
    payload.update({k: v for k, v in extra.items() if v is not None})
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


def compute_provider_key(provider: str, model: str, *, base_url: str | None = None,
                         headers: dict[str, str] | None = None, **extra: Any) -> str:
    """sha256 over everything that changes vectors: the provider, the model, ``extra`` (dimensions,
    API version, task type; None left out), the base URL and the headers, less every credential.

    Left out: every header :func:`_secret_header` calls a credential (``Authorization``,
    ``Helicone-Auth``, ``X-Portkey-Api-Key``, a cookie), and the base URL's user part and
    credential query values (:func:`memory_core.secrets.url_without_credentials`). Credentials do
    not change vectors: a rotated one is the same configuration, and the index, the cache and the
    memory store keep their vectors (hashed, rotating one re-embedded the whole index: the fortieth
    session's audit I-M4). The base URL's host and path, and every other header, still count: another
    gateway may serve other vectors. A configuration with no such credential gets the key it
    always had; the key the rule before gave one with such a credential is
    :func:`legacy_provider_keys`'."""
    safe_headers = [(k.lower(), v) for k, v in (headers or {}).items() if not _secret_header(k)]
    return _key_of(provider, model, secrets.url_without_credentials(base_url), safe_headers, extra)


def legacy_provider_keys(provider: str, model: str, *, base_url: str | None = None,
                         headers: dict[str, str] | None = None, **extra: Any) -> tuple[str, ...]:
    """The key the rule before :func:`compute_provider_key`'s gave the same configuration (it hashed
    a secret header outside :data:`SECRET_HEADERS` and the base URL whole, credentials and all),
    when it differs from today's; else none. An index, a cache or a memory store that records it
    was made by this configuration: it is read as this one's and takes the new key at its next
    write, so the upgrade embeds nothing again."""
    old_headers = [(k.lower(), v) for k, v in (headers or {}).items() if k.lower() not in SECRET_HEADERS]
    old = _key_of(provider, model, base_url, old_headers, extra)
    return () if old == compute_provider_key(provider, model, base_url=base_url, headers=headers, **extra) else (old,)


def provider_keys(provider: str, model: str, *, base_url: str | None = None,
                  headers: dict[str, str] | None = None, **extra: Any) -> tuple[str, tuple[str, ...]]:
    """(:func:`compute_provider_key`, :func:`legacy_provider_keys`) of one configuration: what a
    provider sets as its ``provider_key`` and ``legacy_provider_keys``."""
    return (compute_provider_key(provider, model, base_url=base_url, headers=headers, **extra),
            legacy_provider_keys(provider, model, base_url=base_url, headers=headers, **extra))


def estimate_tokens(text: str) -> int:
    """A conservative token estimate: ~4 ASCII characters a token (the chunker's
    ``CHARS_PER_TOKEN``), one token per other character."""
    n_ascii = len(text.encode("ascii", "ignore"))
    return math.ceil(n_ascii / CHARS_PER_TOKEN) + (len(text) - n_ascii) + 1


def order_by_index(indexes: Sequence[object], n_expected: int, *, provider: str) -> list[int]:
    """Positions of a response's items in input order: item ``order[i]`` answers input ``i``.

    Refuses (ProviderError, nothing cached) any list of ``index`` values that is not exactly
    0..n-1: a duplicate or a gap would put vectors under the wrong chunks, in the cache, for good.
    """
    if len(indexes) != n_expected:
        raise ProviderError(f"{provider} returned {len(indexes)} vectors for {n_expected} inputs")
    order = [-1] * n_expected
    for pos, i in enumerate(indexes):
        if type(i) is not int or not 0 <= i < n_expected or order[i] != -1:
            raise ProviderError(f"{provider} returned response indexes that are not exactly 0..{n_expected - 1}"
                                f" (item {pos} has index {i!r})")
        order[i] = pos
    return order


# A response whose vectors are all one, for at least this many texts the model tells apart, is
# refused (:func:`check_not_one_vector`). Two texts may get one vector legitimately (the same
# text; for the local model, texts that differ only in case, accents, pieces it does not know or
# past its window); three or more different texts, every one of them, never do.
SAME_VECTOR_MIN_TEXTS = 3
# The window every embedding model reads at least (all-MiniLM's 256 pieces; the BERT-sized models an
# OpenAI-compatible server may serve under any name): a hosted model's texts that differ within its
# first 256 // 4 = 64 characters are surely different texts to it.
SURE_WINDOW_TOKENS = 256


def loose_text_key(text: str, max_tokens: int | None = None) -> str:
    """What of ``text`` a hosted model surely reads: its first ``max_tokens // 4`` characters (a
    token covers at least one byte, a character at most four: a model that cuts a text at its
    window still reads them), NFKC-normalised, case-folded, whitespace runs as one space. Texts
    with different keys are different texts to any model; the reverse need not hold (the key is
    for counting texts a model surely tells apart, never for telling them the same)."""
    if max_tokens:
        text = text[:max(1, max_tokens // 4)]
    return " ".join(unicodedata.normalize("NFKC", text).casefold().split())


def check_not_one_vector(arr: Vectors, texts: Sequence[str], *, provider: str,
                         told_apart: Callable[[Sequence[str]], int] | None = None) -> None:
    """Refuse (ProviderError, nothing cached) one vector for every text of a request of at least
    :data:`SAME_VECTOR_MIN_TEXTS` texts the model tells apart: a misconfigured gateway or caching
    proxy answering one vector whatever it is asked. Such vectors passed every other check, went
    into the index and the cache, and made every search rank every chunk alike. ``told_apart``:
    how many of ``texts`` the model tells apart (default: by :func:`loose_text_key`); asked only
    when the vectors are all bit-identical, so it costs nothing on a sound answer."""
    n = int(arr.shape[0])
    if n < SAME_VECTOR_MIN_TEXTS or len(texts) != n:
        return
    bits = arr.view(np.uint32)
    if not (bits == bits[0]).all():
        return
    distinct = told_apart(texts) if told_apart is not None else len({loose_text_key(t) for t in texts})
    if distinct >= SAME_VECTOR_MIN_TEXTS:
        raise ProviderError(same_vector_message(provider, distinct))


def same_vector_message(provider: str, n: int, *, earlier: bool = False) -> str:
    """The one line that refuses one vector for ``n`` different texts; ``earlier``: one of them
    is a text whose vector was received before this answer (:func:`check_not_a_known_vector`)."""
    if not earlier:
        return (f"{provider} returned the same vector for {n} different texts (a gateway or cache answering one"
                " vector for every input?); refused, nothing was cached")
    return (f"{provider} returned the same vector for {n} different texts, one of them embedded before (a gateway or"
            " cache answering one vector for every input?); refused, nothing was cached; vectors it answered"
            " before may be in the index: once it answers rightly, `memory-core index --re-embed` replaces them")


# Two vectors at least this close (cosine) are one vector: what a gateway answering one vector gives
# is bit for bit the same, and 1e-6 leaves room for float32 rounding only. Texts a hosted model
# tells apart are far below it even when nearly alike: a word changed in a 1,500-character chunk
# measured 0.993-0.9991 (all-MiniLM-L6-v2), where 0.9999 could be reached by a long chunk whose
# first line gained a full stop, and would have failed that note's every run.
SAME_VECTOR_COSINE = 0.999999


def check_not_a_known_vector(arr: Vectors, hashes: Sequence[str], texts: Sequence[str],
                             known: Sequence[tuple[str, str, bytes]], *, provider: str,
                             told_apart: Callable[[Sequence[str]], int]) -> None:
    """Refuse (ProviderError, nothing cached) an answer to a request of fewer than
    :data:`SAME_VECTOR_MIN_TEXTS` texts (which :func:`check_not_one_vector` cannot judge) that
    gives a text the vector (cosine above :data:`SAME_VECTOR_COSINE`) of another text the model
    tells apart: the request's other text, or one of ``known`` (``(hash, text, float32 bytes)``:
    vectors received before, for texts of the same provider, model and key). Without it, an
    incremental run embedding one or two changed chunks through a gateway answering one vector
    stored them. ``told_apart`` (the provider's :meth:`EmbeddingProvider.texts_told_apart`) is
    asked only of a pair whose vectors are one, so texts alike in the window a small model reads
    (audit G) are never refused; ``hashes`` name the texts (a known vector of the same text is
    its own)."""
    n = int(arr.shape[0])
    if not n or n >= SAME_VECTOR_MIN_TEXTS or len(hashes) != n or len(texts) != n or arr.ndim != 2:
        return
    size = int(arr.shape[1]) * 4
    rows = [(h, t, np.frombuffer(emb, dtype="<f4")) for h, t, emb in known if len(emb) == size]
    ref_h = [*hashes, *(h for h, _, _ in rows)]
    ref_t = [*texts, *(t for _, t, _ in rows)]
    ref = np.vstack([arr.astype(np.float64), *(v.astype(np.float64)[None, :] for _, _, v in rows)])
    with np.errstate(over="ignore", under="ignore", invalid="ignore", divide="ignore"):
        unit = ref / np.linalg.norm(ref, axis=1, keepdims=True)
        sims = unit[:n] @ unit.T
    for i in range(n):
        same = [j for j in np.flatnonzero(sims[i] > SAME_VECTOR_COSINE).tolist()
                if j != i and ref_h[j] != hashes[i] and told_apart([texts[i], ref_t[j]]) > 1]
        if same:
            group = [texts[i], *(ref_t[j] for j in same)]
            raise ProviderError(same_vector_message(provider, max(2, told_apart(group)),
                                                    earlier=any(j >= n for j in same)))


def check_vectors(vectors: Sequence[Sequence[float] | npt.NDArray[Any]] | npt.NDArray[Any], n_expected: int, *,
                  provider: str, dims: int | None = None, normalise: bool = False,
                  texts: Sequence[str] | None = None,
                  told_apart: Callable[[Sequence[str]], int] | None = None) -> Vectors:
    """Validate a provider's vectors and return them as a float32 (n, d) array.

    Refuses (ProviderError, nothing cached) fewer or more vectors than inputs, empty vectors,
    vectors of differing or unexpected dimension, NaN/infinite values and all-zero vectors (a
    zero vector has no direction: cosine similarity with it is undefined), and, given the
    request's ``texts``, one vector for every one of three or more different texts
    (:func:`check_not_one_vector`, with ``told_apart``).
    """
    if len(vectors) != n_expected:
        raise ProviderError(f"{provider} returned {len(vectors)} vectors for {n_expected} inputs")
    if n_expected == 0:
        return np.zeros((0, dims or 0), dtype=np.float32)
    lengths = {len(v) for v in vectors}
    if 0 in lengths:
        raise ProviderError(f"{provider} returned an empty vector")
    if len(lengths) != 1:
        raise ProviderError(f"{provider} returned vectors of different dimensions: {sorted(lengths)}")
    arr = np.asarray(vectors, dtype=np.float32)
    if dims is not None and arr.shape[1] != dims:
        raise ProviderError(f"{provider} returned {arr.shape[1]}-d vectors, expected {dims}")
    if not np.isfinite(arr).all():
        raise ProviderAnswerError(f"{provider} returned NaN or infinite values")
    with np.errstate(over="ignore", under="ignore"):
        norms = np.linalg.norm(arr, axis=1, keepdims=True)
    if not np.isfinite(norms).all():
        raise ProviderAnswerError(f"{provider} returned a vector too long to measure in float32")
    if not (norms > 0).all():
        tiny = bool((arr[~(norms[:, 0] > 0)] != 0).any())
        raise ProviderAnswerError(f"{provider} returned " + ("a vector too short to measure in float32" if tiny
                                                             else "an all-zero vector"))
    if normalise:
        arr = unit_rows(arr)
    arr = np.ascontiguousarray(arr, dtype=np.float32)
    if texts is not None:
        check_not_one_vector(arr, texts, provider=provider, told_apart=told_apart)
    return arr


def unit_rows(arr: Vectors) -> Vectors:
    """Each row of a float32 (n, d) array scaled to unit length, the same arithmetic whichever
    way a vector arrived (a sync response of many, a Batch API output line of one), so that the
    same text gets the same stored bytes both ways. Rows must be non-zero (check_vectors)."""
    # float32 / float32 is float32; numpy's stubs type the norm Any and the quotient floating[Any]
    return cast("Vectors", arr / np.linalg.norm(arr, axis=1, keepdims=True))


def first_row(arr: Vectors) -> Vectors:
    """The one vector of a (1, d) answer, as ``arr[0]`` (the same view; numpy types an integer
    index Any, a row by ``[0, :]`` as the array's dtype)."""
    return arr[0, :]


class EmbeddingProvider(ABC):
    """A source of embeddings. Implementations are thread-safe for ``embed_documents``.

    Limits drive request grouping: ``max_inputs_per_request``, ``max_tokens_per_request``
    (summed estimate) and ``max_tokens_per_input``. ``default_chunk_tokens`` follows the
    model's input window so chunks are not silently truncated by the model.

    Every fact the engine needs about a provider is a class attribute or a method here (the
    engine asks the provider, never its name): whether it makes vectors (``has_vectors``),
    whether text stays on this machine (``on_machine``: free, and only transcripts are
    redacted by ``redact = "auto"``), how many requests one process may run at once
    (``max_parallel_requests``), its prices (``sync_prices``, ``batch_discount``), its Batch
    API (``supports_batch``, :meth:`batch_client`, ``batch_vectors_unit_length``), its chunk
    defaults and its input window (``max_tokens_per_input``, or its own tokenizer:
    ``own_tokenizer`` and :meth:`count_over_window`). A new provider is one module with one
    such class, registered under the ``memory_core.providers`` entry-point group
    (:mod:`memory_core.embeddings.registry`).
    """

    name: str = "base"
    model: str = ""
    dims: int | None = None
    _dims_learned: bool = False  # ``dims`` came from an answer, not from the settings or the model's facts
    max_inputs_per_request: int = 256
    max_tokens_per_request: int = 1_000_000
    max_tokens_per_input: int = 8192
    default_chunk_tokens: int = DEFAULT_CHUNK_TOKENS
    default_chunk_overlap: int = DEFAULT_CHUNK_OVERLAP
    has_vectors: bool = True  # False: keyword-only (no cache, no embedding requests)
    on_machine: bool = False  # embeds on this machine: costs nothing, no text leaves it
    # requests one process runs at once (None: the run's embedding concurrency); 1 for a model
    # in this process, whose own threads use every core
    max_parallel_requests: int | None = None
    supports_batch: bool = False
    batch_discount: float = 0.0  # the Batch API's price is the sync price times (1 - this)
    batch_limits: JobLimits | None = None  # what one Batch API job may hold (documented, with a margin on bytes)
    batch_vectors_unit_length: bool = True  # False: the Batch API's vectors are normalised on receipt
    own_tokenizer: bool = False  # counts its input window with its own tokenizer (count_over_window)
    key_env: tuple[str, ...] = ()  # API key variables, in the order ``auto`` reads them
    # the longest one embedding call may take, retries included (None: bounded by the retries);
    # readers set it (``query.embed_timeout_s``), so a stalled provider costs a search seconds
    deadline_s: float | None = None
    # USD per 1M tokens through sync calls, by model ("*": every model); ``[batch] prices`` in
    # the config overrides it (memory_core/embeddings/cost.py)
    sync_prices: dict[str, float] = {}  # noqa: RUF012 - read-only class fact

    # the keys the rule before :func:`compute_provider_key`'s gave this configuration, where they
    # differ from ``provider_key`` (:func:`legacy_provider_keys`): vectors recorded under one are
    # this configuration's (:meth:`owns_key`)
    legacy_provider_keys: tuple[str, ...] = ()

    @property
    @abstractmethod
    def provider_key(self) -> str: ...

    def owns_key(self, recorded: str | None) -> bool:
        """Whether vectors recorded under the provider key ``recorded`` (an index's, a cache's, the
        memory store's) are this configuration's: its key, or a key the rule before gave it
        (:attr:`legacy_provider_keys`; the place that recorded it takes the new key at its next
        write, a reader only accepts it)."""
        return recorded is not None and (recorded == self.provider_key or recorded in self.legacy_provider_keys)

    @abstractmethod
    def embed_documents(self, texts: Sequence[str]) -> Vectors:
        """Vectors for texts to be indexed: float32 (n, d), validated."""

    @abstractmethod
    def embed_query(self, text: str) -> Vectors:
        """The vector of a search query: float32 (d,)."""

    def estimate_tokens(self, text: str) -> int:
        return estimate_tokens(text)

    def texts_told_apart(self, texts: Sequence[str]) -> int:
        """How many of ``texts`` the model surely tells apart (:func:`check_not_one_vector` asks
        it when a response gave them all one vector): by :func:`loose_text_key` within
        :data:`SURE_WINDOW_TOKENS` (or the model's window, when smaller), so texts that differ
        only in case, Unicode form, spacing or past that count as one. Not the model's own window:
        an OpenAI-compatible endpoint may serve a model of 256 or 512 tokens under any name and cut
        longer inputs without a word, so templated notes alike in their first 1,000 characters were
        refused as one vector for different texts (the thirty-ninth session's audit G)."""
        return len({loose_text_key(t, min(self.max_tokens_per_input or SURE_WINDOW_TOKENS, SURE_WINDOW_TOKENS))
                    for t in texts})

    def knows_words(self, words: Sequence[str]) -> bool | None:
        """Whether the model's vocabulary holds each of ``words`` whole, one piece each (it has
        learned a vector for the word itself, not put one together from the pieces of a name, a
        typo, a foreign or made-up word). None: the vocabulary is not known here (a hosted model).
        A search asks it of the words of a query that no note or message contains
        (:func:`memory_core.query.ranking.query_supported`)."""
        return None

    def count_over_window(self, texts: Sequence[str]) -> int:
        """How many of ``texts`` are longer than the model's input window: the conservative
        token estimate against ``max_tokens_per_input`` (a provider with ``own_tokenizer``
        counts exactly). Keyword-only mode has no window: 0."""
        if not self.has_vectors or not texts:
            return 0
        limit = self.max_tokens_per_input
        if not limit:
            return 0
        return sum(1 for t in texts if self.estimate_tokens(t) > limit)

    def batch_client(self) -> BatchClient:
        """The client of this provider's Batch API (only when ``supports_batch``)."""
        raise ProviderError(f"provider {self.name} has no Batch API")

    # -- what every hosted provider does the same way ---------------------------------------
    @classmethod
    def find_api_key(cls, remote: Any) -> str | None:
        """``remote.api_key``, else the first of ``key_env`` that is set (None: no key)."""
        import os

        if remote.api_key:
            return str(remote.api_key.get_secret_value())
        return next((os.environ[v] for v in cls.key_env if os.environ.get(v)), None)

    def _require_key(self, remote: Any) -> str:
        key = self.find_api_key(remote)
        if not key:
            from memory_core.errors import ConfigError

            names = list(self.key_env)
            where = ", ".join(["remote.api_key", *names[:-1]]) + f" or {names[-1]}" if names else "remote.api_key"
            raise ConfigError(f"provider {self.name} needs an API key: set {where}")
        secrets.remember(key)  # never shown, should the provider echo it in an error
        return key

    def _apply_remote(self, remote: Any) -> None:
        """The ``[remote]`` settings every hosted provider honours: retries and their per-run
        budget, and request limits the config may narrow (never widen)."""
        from memory_core.embeddings.retry import RetryBudget

        self.settings = remote
        secrets.remember(*(v for k, v in remote.headers.items() if _secret_header(k)),
                         *secrets.url_credentials(remote.base_url), *secrets.url_query_secrets(remote.base_url))
        self.retry_budget = RetryBudget(remote.retry_budget_s)
        if remote.max_inputs_per_request:
            self.max_inputs_per_request = min(self.max_inputs_per_request, remote.max_inputs_per_request)
        if remote.max_tokens_per_request:
            self.max_tokens_per_request = min(self.max_tokens_per_request, remote.max_tokens_per_request)

    def retry_options(self) -> RetryOptions:
        """The time limits of :func:`~memory_core.embeddings.retry.call_with_retries` for this
        provider: ``remote.timeout_s`` for one whole attempt (last byte included), ``deadline_s``."""
        timeout_s: float | None = getattr(getattr(self, "settings", None), "timeout_s", None)
        return {"attempt_timeout_s": timeout_s, "deadline_s": self.deadline_s}

    def _request_vectors(self, once: Callable[[], Vectors]) -> Vectors:
        """``once()`` (one SDK request, its errors classified as Retryable or ProviderError) under
        the ``[remote]`` retry settings and the run's retry budget; the first answer sets ``dims``."""
        from memory_core.embeddings.retry import call_with_retries

        remote = self.settings
        arr = call_with_retries(once, provider=self.name, max_attempts=remote.max_attempts,
                                initial_s=remote.backoff_initial_s, max_s=remote.backoff_max_s,
                                budget=self.retry_budget, **self.retry_options())
        if self.dims is None:
            self.dims = int(arr.shape[1])
            self._dims_learned = True
        return arr

    def start_run(self) -> None:
        """A new run begins with this (reused) provider: its retry budget starts full again, and
        a dimension learnt from an earlier answer (none configured, the model unknown) is learnt
        again: an endpoint that changed its answers' size is then named as such by the run, and a
        full rebuild takes the new size, in a long-lived process as in the CLI's one-run process
        (they failed with `returned 32-d vectors, expected 64` until the process restarted)."""
        budget = getattr(self, "retry_budget", None)
        if budget is not None:
            budget.reset()
        if self._dims_learned:
            self.dims = None
            self._dims_learned = False

    def info(self, reason: str = "") -> ProviderInfo:
        return ProviderInfo(self.name, self.model, self.provider_key, self.dims, reason)

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release clients, threads or worker processes."""


class NoProvider(EmbeddingProvider):
    """Keyword-only mode: chunks and FTS are indexed, no vectors."""

    name = "none"
    model = "none"
    dims = None
    has_vectors = False
    on_machine = True
    sync_prices = {"*": 0.0}  # noqa: RUF012 - read-only class fact

    @property
    def provider_key(self) -> str:
        return compute_provider_key("none", "none")

    def embed_documents(self, texts: Sequence[str]) -> Vectors:  # pragma: no cover - never called
        raise ProviderError("keyword-only mode has no embedding provider")

    def embed_query(self, text: str) -> Vectors:  # pragma: no cover - never called
        raise ProviderError("keyword-only mode has no embedding provider")
