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
        seeds = [int.from_bytes(hashlib.blake2b(t.encode("utf-8", "surrogatepass"), digest_size=8).digest(), "little")
                 for t in texts]
        out = np.empty((len(texts), self.dims), dtype=np.float32)
        for i, s in enumerate(seeds):
            out[i] = np.random.default_rng(s).standard_normal(self.dims, dtype=np.float32)
        out /= np.linalg.norm(out, axis=1, keepdims=True)
        return out

    def embed_query(self, text: str) -> np.ndarray:
        return self.embed_documents([text])[0]
