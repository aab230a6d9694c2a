"""An instant, deterministic embedding provider, so a benchmark measures the pipeline itself."""

from __future__ import annotations

import zlib
from collections.abc import Sequence

import numpy as np

from memory_core.embeddings.base import EmbeddingProvider, compute_provider_key

TABLE_ROWS = 4096


class InstantProvider(EmbeddingProvider):
    """One of 4,096 fixed unit vectors per text, picked by its crc32. Under a microsecond a text."""

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
        table = np.random.default_rng(7).standard_normal((TABLE_ROWS, dims)).astype(np.float32)
        self._table = table / np.linalg.norm(table, axis=1, keepdims=True)

    @property
    def provider_key(self) -> str:
        return self._key

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        self.calls += 1
        self.inputs += len(texts)
        # One of TABLE_ROWS fixed unit vectors, picked by the text's crc32: deterministic and
        # under a microsecond a text. (shake_128 per text, distinct vectors, cost ~6 us a text:
        # 0.24 s of CPU in a 41k-chunk build's run process, which is the provider's cost, not the
        # pipeline's that this benchmark measures.)
        idx = np.fromiter((zlib.crc32(t.encode("utf-8", "surrogatepass")) % TABLE_ROWS for t in texts),
                          dtype=np.int64, count=len(texts))
        return self._table[idx]

    def embed_query(self, text: str) -> np.ndarray:
        return self.embed_documents([text])[0]
