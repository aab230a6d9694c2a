"""Voyage AI embeddings through the official ``voyageai`` SDK.

Documents are embedded with ``input_type="document"``, queries with ``"query"`` (Voyage
prepends a different prompt for each). ``remote.dimensions`` becomes ``output_dimension``
(256, 512, 1024 or 2048 on the voyage-3.5 / voyage-4 families).

Request limits (docs.voyageai.com): 1,000 texts per request, and a total-token budget per
request that depends on the model: 1M for the lite models, 320K for voyage-4, voyage-3.5 and
voyage-2, 120K for the others (voyage-4-large, voyage-3-large, voyage-code-3, ...).

Chunk size: Voyage models read 32,000 tokens per text (16,000 for voyage-law-2 / code-2), far
above any chunk; the default stays at the reference's 400 tokens / 80 overlap, which is what
retrieval quality (not the window) asks for.

The SDK sends only the Authorization and Content-Type headers: ``remote.headers`` cannot be
sent, so they are ignored with a warning and are not part of the provider key.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from memory_core.config import Settings
from memory_core.embeddings.base import (
    EmbeddingProvider,
    check_vectors,
    first_row,
    order_by_index,
    provider_keys,
)
from memory_core.embeddings.batch_types import JobLimits, MiB
from memory_core.embeddings.retry import Retryable, parse_retry_after
from memory_core.errors import ProviderError

if TYPE_CHECKING:
    from memory_core.embeddings.base import Vectors
    from memory_core.embeddings.batch_types import BatchClient

log = logging.getLogger("memory_core.embeddings")

DEFAULT_MODEL = "voyage-4-large"
DEFAULT_BASE_URL = "https://api.voyageai.com/v1"
MAX_TEXTS_PER_REQUEST = 1000
DEFAULT_DIMS = 1024
MODEL_DIMS = {
    "voyage-4-large": 1024, "voyage-4": 1024, "voyage-4-lite": 1024, "voyage-3.5": 1024, "voyage-3.5-lite": 1024,
    "voyage-3-large": 1024, "voyage-code-3": 1024, "voyage-finance-2": 1024, "voyage-law-2": 1024,
    "voyage-multilingual-2": 1024, "voyage-context-3": 1024, "voyage-code-2": 1536,
}
_REQUEST_TOKENS = {
    "voyage-4-lite": 1_000_000, "voyage-3.5-lite": 1_000_000, "voyage-3-lite": 1_000_000,
    "voyage-4": 320_000, "voyage-3.5": 320_000, "voyage-3": 320_000, "voyage-2": 320_000,
}
_DEFAULT_REQUEST_TOKENS = 120_000
_INPUT_TOKENS = {"voyage-law-2": 16_000, "voyage-code-2": 16_000}


def request_token_limit(model: str) -> int:
    """Voyage's documented total tokens per request for ``model``."""
    return _REQUEST_TOKENS.get(model, _DEFAULT_REQUEST_TOKENS)


def classify_voyage_error(exc: Exception, provider: str = "voyage") -> Exception:
    """Map a voyageai exception to Retryable (transient) or ProviderError (final)."""
    from voyageai import error as ve

    if isinstance(exc, ve.VoyageError):
        status = exc.http_status
        msg = str(exc.user_message or exc)[:300]
        hint = parse_retry_after(exc.headers) if exc.headers else None
        if isinstance(exc, ve.RateLimitError | ve.ServiceUnavailableError | ve.ServerError | ve.Timeout
                      | ve.APIConnectionError | ve.TryAgain):
            return Retryable(f"{exc.__class__.__name__} (HTTP {status}): {msg}", hint)
        if isinstance(exc, ve.AuthenticationError) or status in (401, 403):
            return ProviderError(f"{provider}: authentication failed (HTTP {status}): {msg}")
        if status is not None and (status >= 500 or status in (408, 429)):
            return Retryable(f"HTTP {status}: {msg}", hint)
        if isinstance(exc, ve.APIError) and (status is None or status < 300):
            return Retryable(f"malformed response: {msg}")  # e.g. a truncated JSON body
        return ProviderError(f"{provider}: HTTP {status}: {msg}")
    if isinstance(exc, ValueError):
        return Retryable(f"malformed response: {exc}")
    import requests  # voyageai's transport

    if isinstance(exc, requests.RequestException):
        return Retryable(f"{exc.__class__.__name__}: {exc}")
    return ProviderError(f"{provider}: {exc.__class__.__name__}: {exc}")


class VoyageProvider(EmbeddingProvider):
    name = "voyage"
    key_env = ("VOYAGE_API_KEY",)
    max_inputs_per_request = MAX_TEXTS_PER_REQUEST
    max_tokens_per_request = _DEFAULT_REQUEST_TOKENS
    max_tokens_per_input = 32_000
    supports_batch = True
    batch_limits = JobLimits(max_requests=100_000, max_bytes=950 * MiB)  # 100k inputs, a 1 GB input file
    batch_discount = 0.33
    # USD per 1M tokens (docs.voyageai.com/docs/pricing, checked 2026-07; free-tier tokens not counted)
    sync_prices = {  # noqa: RUF012 - read-only class fact
        "voyage-4-large": 0.12, "voyage-4": 0.06, "voyage-4-lite": 0.02, "voyage-3.5": 0.06,
        "voyage-3.5-lite": 0.02, "voyage-3-large": 0.18, "voyage-code-3": 0.18, "voyage-context-3": 0.18,
        "voyage-finance-2": 0.12, "voyage-law-2": 0.12, "voyage-multilingual-2": 0.12,
    }

    def __init__(self, settings: Settings, *, model: str | None = None) -> None:
        from voyageai.client import Client

        remote = settings.remote
        key = self._require_key(remote)
        self.model = model or settings.model or DEFAULT_MODEL
        self.base_url = (remote.base_url or DEFAULT_BASE_URL).rstrip("/")
        if remote.headers:
            log.warning("voyage: the voyageai SDK cannot send custom headers; remote.headers are ignored")
        self.requested_dims = remote.dimensions
        self.dims = remote.dimensions or MODEL_DIMS.get(self.model)
        self.max_tokens_per_request = request_token_limit(self.model)
        self.max_tokens_per_input = _INPUT_TOKENS.get(self.model, 32_000)
        self._apply_remote(remote)
        self.api_key = key
        self.client = Client(api_key=key, max_retries=0, timeout=remote.timeout_s, base_url=self.base_url)
        self._key, self.legacy_provider_keys = provider_keys(
            "voyage", self.model, base_url=self.base_url, output_dimension=self.requested_dims)

    @property
    def provider_key(self) -> str:
        return self._key

    def _embed(self, texts: Sequence[str], input_type: str) -> Vectors:
        from voyageai.api_resources.embedding import Embedding

        # the SDK leaves Embedding.create unannotated: its answer is read field by field below
        create: Callable[..., Any] = Embedding.create

        def once() -> Vectors:
            try:
                # voyageai.Embedding.create, not Client.embed: the client drops each item's
                # ``index``, which must be checked (same parameters as the client passes)
                res = create(
                    input=list(texts), model=self.model, input_type=input_type, truncation=True,
                    output_dimension=self.requested_dims, api_key=self.api_key,
                    request_timeout=self.settings.timeout_s, base_url=self.base_url)
            except Exception as exc:  # classified below
                raise classify_voyage_error(exc) from None
            data = list(getattr(res, "data", None) or [])
            order = order_by_index([getattr(d, "index", None) for d in data], len(texts), provider="voyage")
            return check_vectors([data[j].embedding for j in order], len(texts), provider="voyage", dims=self.dims,
                                 texts=texts, told_apart=self.texts_told_apart)

        return self._request_vectors(once)

    def embed_documents(self, texts: Sequence[str]) -> Vectors:
        try:
            return self._embed(texts, "document")
        except ProviderError as exc:
            # An endpoint whose token budget is lower than documented: split and try again.
            if len(texts) > 1 and "max allowed tokens" in str(exc).lower():
                mid = len(texts) // 2
                return np.vstack([self.embed_documents(texts[:mid]), self.embed_documents(texts[mid:])])
            raise

    def embed_query(self, text: str) -> Vectors:
        return first_row(self._embed([text], "query"))

    def batch_client(self) -> BatchClient:
        """Voyage's Batch API copies OpenAI's; the ``voyageai`` SDK has none, the ``openai`` one drives it."""
        from memory_core.embeddings.batch_clients import VoyageBatchClient
        from memory_core.embeddings.openai_provider import capped_openai_client, classify_openai_error

        # capped as OpenAI's own client (an endless or decompressing output file is refused)
        client = capped_openai_client(self.api_key, self.base_url, self.settings.timeout_s)
        return VoyageBatchClient(self, client, classify=classify_openai_error)
