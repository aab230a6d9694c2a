"""Gemini (Developer API) embeddings through the official ``google-genai`` SDK.

Documents are embedded with ``task_type=RETRIEVAL_DOCUMENT``, queries with ``RETRIEVAL_QUERY``.
Gemini returns unit vectors only at the model's native size (3072 for gemini-embedding-001), so
every vector is L2-normalised here. One ``batchEmbedContents`` call carries at most 100 texts.

Chunk size: the model reads at most 2,048 tokens per text. The default chunk of 400 estimated
tokens is at most 1,600 characters, which stays inside that window even for CJK text where a
character can be a token, so chunks are never silently truncated by the model.

The API version defaults to ``v1beta`` (the Batch API lives there; ``remote.api_version``
overrides it); the base URL defaults to ``https://generativelanguage.googleapis.com``. Both go
into the provider key with the model and ``outputDimensionality``.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from memory_core.config import Settings
from memory_core.embeddings.base import EmbeddingProvider, check_vectors, first_row, provider_keys
from memory_core.embeddings.batch_types import JobLimits, MiB
from memory_core.embeddings.retry import Retryable, parse_retry_after
from memory_core.errors import ConfigError, ProviderError

if TYPE_CHECKING:
    from memory_core.embeddings.base import Vectors
    from memory_core.embeddings.batch_types import BatchClient

DEFAULT_MODEL = "gemini-embedding-001"
DEFAULT_BASE_URL = "https://generativelanguage.googleapis.com"
DEFAULT_API_VERSION = "v1beta"
MODEL_DIMS = {"gemini-embedding-001": 3072, "gemini-embedding-exp-03-07": 3072, "text-embedding-004": 768}
MAX_TEXTS_PER_REQUEST = 100
MAX_INPUT_TOKENS = 2048
TASK_DOCUMENT = "RETRIEVAL_DOCUMENT"
TASK_QUERY = "RETRIEVAL_QUERY"

_RETRY_DELAY = re.compile(r"^\s*([0-9.]+)s\s*$")


def _retry_info_seconds(details: Any) -> float | None:
    """Seconds from a google.rpc.RetryInfo in an error body (``"retryDelay": "3s"``)."""
    err = details.get("error", details) if isinstance(details, dict) else None
    items = err.get("details") if isinstance(err, dict) else None
    for item in items if isinstance(items, list) else []:
        if isinstance(item, dict) and str(item.get("@type", "")).endswith("RetryInfo"):
            m = _RETRY_DELAY.match(str(item.get("retryDelay", "")))
            if m:
                return float(m.group(1))
    return None


def classify_gemini_error(exc: Exception, provider: str = "gemini") -> Exception:
    """Map a google-genai / httpx exception to Retryable (transient) or ProviderError (final)."""
    import httpx
    from google.genai import errors

    if isinstance(exc, errors.APIError):
        code = int(exc.code or 0)
        msg = str(exc.message or exc)[:300]
        status = exc.status or ""
        if code in (408, 429) or code >= 500:
            hint = parse_retry_after(getattr(exc.response, "headers", None)) or _retry_info_seconds(exc.details)
            return Retryable(f"HTTP {code} {status}: {msg}", hint)
        if code in (401, 403) or (code == 400 and "api key" in msg.lower()):
            return ProviderError(f"{provider}: authentication failed (HTTP {code}): {msg}")
        return ProviderError(f"{provider}: HTTP {code} {status}: {msg}")
    if isinstance(exc, httpx.TimeoutException | httpx.TransportError):
        return Retryable(f"{exc.__class__.__name__}: {exc}")
    if isinstance(exc, ValueError):  # a truncated or malformed JSON reply
        return Retryable(f"malformed response: {exc}")
    return ProviderError(f"{provider}: {exc.__class__.__name__}: {exc}")


class GeminiProvider(EmbeddingProvider):
    name = "gemini"
    key_env = ("GEMINI_API_KEY", "GOOGLE_API_KEY")
    max_inputs_per_request = MAX_TEXTS_PER_REQUEST
    max_tokens_per_request = MAX_TEXTS_PER_REQUEST * MAX_INPUT_TOKENS
    max_tokens_per_input = MAX_INPUT_TOKENS
    supports_batch = True
    batch_limits = JobLimits(max_requests=50_000, max_bytes=1900 * MiB)  # a 2 GB input file, no request cap:
    # 50k keeps a job (the unit that fails, expires or gets retried) the size of OpenAI's
    batch_discount = 0.5
    # the Batch API's vectors come back as the model gives them: only 3072-d ones are unit length
    batch_vectors_unit_length = False
    sync_prices = {"gemini-embedding-001": 0.15}  # noqa: RUF012 - USD per 1M tokens (ai.google.dev pricing, 2026-07)

    def __init__(self, settings: Settings, *, model: str | None = None) -> None:
        from google import genai
        from google.genai import types

        remote = settings.remote
        key = self._require_key(remote)
        self.model = (model or settings.model or DEFAULT_MODEL).removeprefix("models/")
        self.base_url = (remote.base_url or DEFAULT_BASE_URL).rstrip("/")
        self.api_version = remote.api_version or DEFAULT_API_VERSION
        self.headers = dict(remote.headers)
        self.requested_dims = remote.dimensions
        native = MODEL_DIMS.get(self.model)
        if self.requested_dims and native and self.requested_dims > native:
            raise ConfigError(f"remote.dimensions {self.requested_dims} is above {self.model}'s {native}")
        self.dims = self.requested_dims or native
        self._apply_remote(remote)
        from memory_core.embeddings.http import capped_client

        self.client = genai.Client(
            api_key=key,
            http_options=types.HttpOptions(
                base_url=self.base_url, api_version=self.api_version, headers=self.headers or None,
                timeout=int(remote.timeout_s * 1000),
                httpx_client=capped_client(timeout=remote.timeout_s),  # responses capped (issue 22)
            ),
        )
        self._key, self.legacy_provider_keys = provider_keys(
            "gemini", self.model, base_url=self.base_url, headers=self.headers,
            outputDimensionality=self.requested_dims, apiVersion=self.api_version, taskType=TASK_DOCUMENT,
        )

    @property
    def provider_key(self) -> str:
        return self._key

    def _embed(self, texts: Sequence[str], task_type: str) -> Vectors:
        from google.genai import types

        config = types.EmbedContentConfig(task_type=task_type, output_dimensionality=self.requested_dims)

        def once() -> Vectors:
            try:
                contents: Any = list(texts)  # the SDK's union type does not list list[str]
                resp = self.client.models.embed_content(model=self.model, contents=contents, config=config)
            except Exception as exc:  # classified below
                raise classify_gemini_error(exc) from None
            vectors = [list(e.values or []) for e in (resp.embeddings or [])]
            return check_vectors(vectors, len(texts), provider="gemini", dims=self.dims, normalise=True, texts=texts,
                                 told_apart=self.texts_told_apart)

        return self._request_vectors(once)

    def embed_documents(self, texts: Sequence[str]) -> Vectors:
        if len(texts) > self.max_inputs_per_request:  # never more than 100 texts in one call
            step = self.max_inputs_per_request
            return np.vstack([self._embed(texts[i:i + step], TASK_DOCUMENT) for i in range(0, len(texts), step)])
        return self._embed(texts, TASK_DOCUMENT)

    def embed_query(self, text: str) -> Vectors:
        return first_row(self._embed([text], TASK_QUERY))

    def batch_client(self) -> BatchClient:
        from memory_core.embeddings.batch_clients import GeminiBatchClient

        return GeminiBatchClient(self, self.client, task_type=TASK_DOCUMENT, classify=classify_gemini_error)

    def close(self) -> None:
        with contextlib.suppress(Exception):  # best effort
            self.client.close()
