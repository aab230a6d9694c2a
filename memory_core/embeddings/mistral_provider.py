"""Mistral embeddings (``mistral-embed``, 1,024-d) through the official ``mistralai`` SDK.

Why the SDK and not Mistral's OpenAI-compatible ``/v1/embeddings`` through the ``openai`` SDK:
Mistral's own docs, and the integrations its users reach for (LangChain's ``MistralAIEmbeddings``,
Chroma, Milvus, semantic-router), all go through ``mistralai`` with ``MISTRAL_API_KEY``; the
endpoint is the same, so the SDK costs nothing in reach.

base64: the API's request schema lists ``encoding_format = "float" | "base64"``, but the SDK's
response model types ``data[].embedding`` as ``list[float]``, so a base64 answer would fail the
SDK's own response validation. Vectors are therefore requested as floats (the default); a
1,024-d float vector is ~12 KB of JSON, small beside the request limits below.

Request limits (Mistral's API answers HTTP 400 past them; the figures are those its errors
name): 512 inputs a request ("Too many inputs in request, split into more batches."),
16,384 tokens a request summed over the inputs ("Too many tokens in batch. Max is 16384 got
N") and 8,192 tokens an input. Mistral's tokenizer counts more tokens than memory-core's
~4-characters estimate on code and non-English text, so requests are planned at 12,000
estimated tokens, and a request the server still finds too large is split in two and sent
again. Price: 0.10 USD per 1M tokens for mistral-embed, 0.15 for codestral-embed (checked
2026-11 on mistral.ai/pricing); no batch discount is used (Mistral's batch API is not driven).

Secrets: the SDK's debug logger (switched on by ``MISTRAL_DEBUG``) prints every request's
headers and body, so the texts being embedded; the client is always given a no-op logger.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
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
from memory_core.embeddings.retry import Retryable, parse_retry_after
from memory_core.errors import ProviderError

if TYPE_CHECKING:
    from memory_core.embeddings.base import Vectors

DEFAULT_MODEL = "mistral-embed"
DEFAULT_SERVER_URL = "https://api.mistral.ai"
MODEL_DIMS = {"mistral-embed": 1024, "codestral-embed": 1536}
MAX_INPUTS_PER_REQUEST = 512
API_TOKENS_PER_REQUEST = 16_384
PLANNED_TOKENS_PER_REQUEST = 12_000
TOKENS_PER_INPUT = 8192


def _message(exc: Any) -> str:
    """The ``message`` of Mistral's error body (``{"object":"error","message":...}``), else the text."""
    import json

    body = getattr(exc, "body", None)
    if isinstance(body, str) and body:
        try:
            data = json.loads(body)
        except ValueError:
            return body[:300]
        if isinstance(data, dict):
            msg = data.get("message") or data.get("detail")
            if msg:
                return str(msg)[:300]
        return body[:300]
    return str(exc)[:300]


def classify_mistral_error(exc: Exception, provider: str = "mistral") -> Exception:
    """Map a ``mistralai`` (or its httpx2 transport) exception to Retryable or ProviderError."""
    import httpx2
    from mistralai.client import errors

    if isinstance(exc, errors.ResponseValidationError):
        return Retryable(f"malformed response: {str(exc)[:200]}")
    if isinstance(exc, errors.NoResponseError):
        return Retryable("no response")
    if isinstance(exc, errors.MistralError):
        status = exc.status_code
        msg = _message(exc)
        if status in (408, 409, 429) or status >= 500:
            return Retryable(f"HTTP {status}: {msg}", parse_retry_after(exc.headers))
        if status in (401, 403):
            return ProviderError(f"{provider}: authentication failed (HTTP {status}): {msg}")
        return ProviderError(f"{provider}: HTTP {status}: {msg}")
    if isinstance(exc, httpx2.TransportError):
        return Retryable(f"{exc.__class__.__name__}: {exc}")
    if isinstance(exc, ValueError):
        return Retryable(f"malformed response: {exc}")
    return ProviderError(f"{provider}: {exc.__class__.__name__}: {exc}")


def _too_large(exc: ProviderError) -> bool:
    text = str(exc).lower()
    return "too many tokens" in text or "too many inputs" in text


class MistralProvider(EmbeddingProvider):
    name = "mistral"
    key_env = ("MISTRAL_API_KEY",)
    sync_prices = {"mistral-embed": 0.10, "codestral-embed": 0.15}  # noqa: RUF012 - read-only class fact
    max_inputs_per_request = MAX_INPUTS_PER_REQUEST
    max_tokens_per_request = PLANNED_TOKENS_PER_REQUEST
    max_tokens_per_input = TOKENS_PER_INPUT
    supports_batch = False

    def __init__(self, settings: Settings, *, model: str | None = None) -> None:
        from mistralai.client import Mistral
        from mistralai.client.utils.logger import NoOpLogger

        remote = settings.remote
        key = self._require_key(remote)
        self.model = model or settings.model or DEFAULT_MODEL
        # The SDK appends /v1/embeddings itself; accept a base URL given with /v1 as well.
        base = (remote.base_url or os.environ.get("MISTRAL_BASE_URL") or DEFAULT_SERVER_URL).rstrip("/")
        self.base_url = base.removesuffix("/v1")
        self.headers = dict(remote.headers)
        self.requested_dims = remote.dimensions
        self.dims = remote.dimensions or MODEL_DIMS.get(self.model)
        self._apply_remote(remote)
        # The SDK's debug logger (MISTRAL_DEBUG) prints request headers and bodies (the texts): never used.
        from memory_core.embeddings.http import capped_client

        self.client = Mistral(api_key=key, server_url=self.base_url, timeout_ms=int(remote.timeout_s * 1000),
                              debug_logger=NoOpLogger(),
                              client=capped_client(timeout=remote.timeout_s, follow_redirects=True))  # responses capped
        self._key, self.legacy_provider_keys = provider_keys(
            "mistral", self.model, base_url=self.base_url, headers=self.headers, output_dimension=self.requested_dims)

    @property
    def provider_key(self) -> str:
        return self._key

    def _create(self, texts: Sequence[str]) -> Vectors:
        kwargs: dict[str, Any] = {"model": self.model, "inputs": list(texts)}
        if self.requested_dims:
            kwargs["output_dimension"] = self.requested_dims
        if self.headers:
            kwargs["http_headers"] = self.headers

        def once() -> Vectors:
            try:
                resp = self.client.embeddings.create(**kwargs)
            except Exception as exc:  # classified below
                raise classify_mistral_error(exc) from None
            data = list(resp.data or [])
            if len(texts) > 1 or any(d.index is not None for d in data):
                # Mistral numbers every item: a duplicate, a gap or a missing index is refused (never
                # cached), as OpenAI's and Voyage's are; only one input needs no number
                data = [data[j] for j in order_by_index([d.index for d in data], len(texts), provider="mistral")]
            vectors = [d.embedding or [] for d in data]
            return check_vectors(vectors, len(texts), provider="mistral", dims=self.dims, normalise=True, texts=texts,
                                 told_apart=self.texts_told_apart)

        return self._request_vectors(once)

    def embed_documents(self, texts: Sequence[str]) -> Vectors:
        try:
            return self._create(texts)
        except ProviderError as exc:
            # Mistral's tokenizer counted more than the estimate: split the request and try again.
            if len(texts) > 1 and _too_large(exc):
                mid = len(texts) // 2
                return np.vstack([self.embed_documents(texts[:mid]), self.embed_documents(texts[mid:])])
            raise

    def embed_query(self, text: str) -> Vectors:
        return first_row(self._create([text]))

    def close(self) -> None:
        closer = getattr(self.client, "__exit__", None)
        if closer is not None:
            closer(None, None, None)
