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


class DistinctProvider(InstantProvider):
    """Distinct, clustered, deterministic unit vectors: a recall test needs them.

    The instant fake hands out 4,096 vectors, so at scale most chunks share theirs and "the top
    10" is a tie. Here a text's blake2b digest picks a cluster centre (one of 4,096) and three
    more rows of fixed tables with weights in [0.25, 1.0)::

        v = A[h0] + w1 B[h1] + w2 C[h2] + w3 D[h3]   (normalised)

    so chunks of one cluster have cosines spread over ~0.35-0.9 with the query's, the rest near
    0: a ranking with a real order inside each cluster, about 6 us a text.
    """

    name = "fake-distinct"

    def __init__(self, dims: int = 384, model: str = "distinct") -> None:
        super().__init__(dims, model)
        self._key = compute_provider_key("fake-distinct", model, dimensions=dims)
        rng = np.random.default_rng(11)
        t = rng.standard_normal((4, TABLE_ROWS, dims)).astype(np.float32)
        self._tables = t / np.linalg.norm(t, axis=2, keepdims=True)

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        import hashlib

        self.calls += 1
        self.inputs += len(texts)
        d = np.frombuffer(b"".join(hashlib.blake2b(t.encode("utf-8", "surrogatepass"), digest_size=16).digest()
                                   for t in texts), dtype="<u2").reshape(len(texts), 8).astype(np.int64)
        return mix_vectors(self._tables, d)


def mix_vectors(tables: np.ndarray, d: np.ndarray) -> np.ndarray:
    """Unit vectors from rows of 16-bit hash words (see :class:`DistinctProvider`)."""
    rows = d[:, :4] % tables.shape[1]
    w = 0.25 + 0.75 * (d[:, 4:7] / 65536.0)
    v = tables[0][rows[:, 0]].copy()
    for j in range(3):
        v += w[:, j:j + 1].astype(np.float32) * tables[j + 1][rows[:, j + 1]]
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    return v
