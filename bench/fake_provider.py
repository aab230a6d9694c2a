"""An instant, deterministic embedding provider, so a benchmark measures the pipeline itself."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np

from memory_core.embeddings.base import EmbeddingProvider, compute_provider_key


class InstantProvider(EmbeddingProvider):
    """Unit vectors derived from the text's hash. Costs microseconds per text."""

    name = "fake"
    max_inputs_per_request = 2048
    max_tokens_per_request = 300_000
    default_chunk_tokens = 400
    default_chunk_overlap = 80

    def __init__(self, dims: int = 384, model: str = "instant") -> None:
        self.dims = dims
        self.model = model
        self.calls = 0
        self.inputs = 0
        self._key = compute_provider_key("fake", model, dimensions=dims)

    @property
    def provider_key(self) -> str:
        return self._key

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        self.calls += 1
        self.inputs += len(texts)
        # shake_128 of the text, one byte per dimension: deterministic, distinct per text, and a
        # few microseconds each (a real provider's cost is not what this benchmark measures)
        raw = b"".join(hashlib.shake_128(t.encode("utf-8", "surrogatepass")).digest(self.dims) for t in texts)
        out = np.frombuffer(raw, dtype=np.int8).reshape(len(texts), self.dims).astype(np.float32) + 0.5
        out /= np.linalg.norm(out, axis=1, keepdims=True)
        return out

    def embed_query(self, text: str) -> np.ndarray:
        return self.embed_documents([text])[0]
