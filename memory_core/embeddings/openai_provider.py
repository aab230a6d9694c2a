"""OpenAI (and any OpenAI-compatible endpoint) through the official ``openai`` SDK."""

from __future__ import annotations

import base64
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
from memory_core.embeddings.batch_types import JobLimits, MiB
from memory_core.embeddings.retry import Retryable, parse_retry_after
from memory_core.errors import ProviderError

if TYPE_CHECKING:
    import openai

    from memory_core.embeddings.base import Vectors
    from memory_core.embeddings.batch_types import BatchClient

DEFAULT_MODEL = "text-embedding-3-small"
MODEL_DIMS = {"text-embedding-3-small": 1536, "text-embedding-3-large": 3072, "text-embedding-ada-002": 1536}


def decode_embedding(value: str | list[float]) -> Vectors | list[float]:
    """An embedding as returned by the API: base64 little-endian float32, or a list of floats."""
    if isinstance(value, str):  # binascii.Error / ValueError: a malformed response (retried)
        return np.frombuffer(base64.b64decode(value, validate=True), dtype="<f4")
    return value


def capped_openai_client(api_key: str, base_url: str, timeout_s: float,
                         headers: dict[str, str] | None = None) -> openai.OpenAI:
    """An ``openai`` SDK client whose every response is capped (:func:`http.capped_transport`: a
    gzip bomb or an endless body is refused, not held; a Batch output file up to
    ``MAX_DOWNLOAD_BYTES``), with no retries of its own (ours retry). OpenAI's provider and Voyage's
    Batch API (which the ``openai`` SDK drives) both use it."""
    import openai

    from memory_core.embeddings.http import capped_transport

    return openai.OpenAI(api_key=api_key, base_url=base_url, default_headers=headers or None, timeout=timeout_s,
                         max_retries=0, http_client=openai.DefaultHttpxClient(transport=capped_transport(),
                                                                               timeout=timeout_s))


def classify_openai_error(exc: Exception, provider: str = "openai") -> Exception:
    """Map an SDK exception to Retryable (transient) or ProviderError (final)."""
    import openai

    if isinstance(exc, openai.APITimeoutError | openai.APIConnectionError):
        cause = exc.__cause__ or exc.__context__  # what the SDK's "Connection error." stands for
        why = f" ({str(cause)[:200]})" if cause is not None and str(cause) else ""
        return Retryable(f"{exc.__class__.__name__}: {exc}{why}")
    if isinstance(exc, openai.APIStatusError):
        status = exc.status_code
        msg = _error_message(exc)
        if status == 429 or status == 408 or status == 409 or status >= 500:
            return Retryable(f"HTTP {status}: {msg}", parse_retry_after(exc.response.headers))
        if status in (401, 403):
            return ProviderError(f"{provider}: authentication failed (HTTP {status}): {msg}")
        return ProviderError(f"{provider}: HTTP {status}: {msg}")
    if isinstance(exc, ValueError):  # malformed JSON and similar
        return Retryable(f"malformed response: {exc}")
    return ProviderError(f"{provider}: {exc.__class__.__name__}: {exc}")


def _error_message(exc: Any) -> str:
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        err = body.get("error", body)
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])[:300]
    return str(getattr(exc, "message", exc))[:300]


class OpenAIProvider(EmbeddingProvider):
    name = "openai"
    key_env = ("OPENAI_API_KEY",)
    max_inputs_per_request = 2048
    max_tokens_per_request = 300_000
    max_tokens_per_input = 8192
    supports_batch = True
    batch_limits = JobLimits(max_requests=50_000, max_bytes=190 * MiB)  # 50k requests, a 200 MB input file
    batch_discount = 0.5
    # USD per 1M tokens (platform.openai.com/docs/pricing, checked 2026-07)
    sync_prices = {"text-embedding-3-small": 0.02, "text-embedding-3-large": 0.13,  # noqa: RUF012
                   "text-embedding-ada-002": 0.10}

    def __init__(self, settings: Settings, *, model: str | None = None) -> None:

        remote = settings.remote
        key = self._require_key(remote)
        self.model = model or settings.model or DEFAULT_MODEL
        self.base_url = remote.base_url or os.environ.get("OPENAI_BASE_URL") or "https://api.openai.com/v1"
        self.headers = dict(remote.headers)
        self.requested_dims = remote.dimensions
        self.dims = remote.dimensions or MODEL_DIMS.get(self.model)
        self._apply_remote(remote)
        self.client = capped_openai_client(key, self.base_url, remote.timeout_s, self.headers)
        self._key, self.legacy_provider_keys = provider_keys(
            "openai", self.model, base_url=self.base_url, headers=self.headers, dimensions=self.requested_dims
        )

    @property
    def provider_key(self) -> str:
        return self._key

    def _create(self, texts: Sequence[str]) -> Vectors:
        kwargs: dict[str, Any] = {"model": self.model, "input": list(texts), "encoding_format": "base64"}
        if self.requested_dims:
            kwargs["dimensions"] = self.requested_dims

        def once() -> Vectors:
            try:
                resp = self.client.embeddings.create(**kwargs)
            except Exception as exc:  # classified below
                raise classify_openai_error(exc) from None
            data = resp.data or []
            order = order_by_index([d.index for d in data], len(texts), provider="openai")
            vectors = [decode_embedding(data[j].embedding) for j in order]
            return check_vectors(vectors, len(texts), provider="openai", dims=self.dims, texts=texts,
                                 told_apart=self.texts_told_apart)

        return self._request_vectors(once)

    def embed_documents(self, texts: Sequence[str]) -> Vectors:
        try:
            return self._create(texts)
        except ProviderError as exc:
            # An endpoint whose token limit is lower than documented: split and try again.
            if len(texts) > 1 and ("maximum" in str(exc).lower() and "token" in str(exc).lower()):
                mid = len(texts) // 2
                return np.vstack([self.embed_documents(texts[:mid]), self.embed_documents(texts[mid:])])
            raise

    def embed_query(self, text: str) -> Vectors:
        return first_row(self._create([text]))

    def batch_client(self) -> BatchClient:
        from memory_core.embeddings.batch_clients import OpenAIBatchClient

        return OpenAIBatchClient(self, self.client, classify=classify_openai_error)

    def close(self) -> None:
        self.client.close()
