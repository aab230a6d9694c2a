"""Requests of one or two texts checked for the one vector a broken gateway answers.

A provider (a gateway, a caching proxy) that answers one vector whatever it is asked is refused
when a request holds three or more texts the model tells apart
(:func:`memory_core.embeddings.base.check_not_one_vector`). A request of one or two texts gave that
check nothing to compare, so an incremental run embedding one or two changed chunks through such a
gateway stored them (docs/reliability.md, left by the thirty-ninth session). Here such a request's
answer is compared, before the cache stores it, with a few vectors already received for other
texts of the same provider, model and key: those of the chunks the index got last (each index the
run reads vectors from, or, for ``--re-embed``, which reads none, the run's own), and the answers
to this run's earlier small requests. A vector one with another text's
(:data:`memory_core.embeddings.base.SAME_VECTOR_COSINE`) is refused as that check refuses, unless
the model cannot tell the two texts apart (:meth:`EmbeddingProvider.texts_told_apart`: the same
window of a small model, audit G). The cache file's own entries are not compared: it keeps no
text, so such a pair could not be told apart from an edit past a small model's window.

Only for providers that embed elsewhere (``on_machine`` False): a model in this process has no
gateway in front of it.

What it cannot see: the first small request a gateway answers with a vector no earlier text has
(it is stored; the next one is refused), and a request of several texts the model cannot tell
apart; the Batch API's output is checked job by job (memory_core.index.batch_jobs).
"""

from __future__ import annotations

import logging
import os
import threading
from collections import deque
from collections.abc import Sequence
from pathlib import Path

import apsw
import numpy as np

from memory_core.embeddings.base import SAME_VECTOR_MIN_TEXTS, EmbeddingProvider, check_not_a_known_vector
from memory_core.storage.cache import LiveVectors

log = logging.getLogger(__name__)

# How many of an index's last chunks a small request's answer is compared with (a few rows read once
# a run, at its first small request), and how many of the run's own small answers are kept for it.
RECENT_CHUNKS = 16
RECENT_ANSWERS = 16


class SmallRequestCheck:
    """The check of one run (:class:`memory_core.storage.cache.AnswerCheck`): the stream tells it
    each request of one or two texts before sending it (:meth:`expect`, the stream's thread, which
    also reads the indexes' last chunks the first time), and the thread that stores the answer asks
    :meth:`check` first."""

    def __init__(self, provider: EmbeddingProvider, live: list[LiveVectors], index_path: Path) -> None:
        self.provider = provider
        self.live = live  # the cache's live indexes (filled after this is made; empty for --re-embed)
        self.index_path = Path(index_path)
        self._lock = threading.Lock()
        self._texts: dict[str, str] = {}  # hash -> text of the small requests sent, until answered
        self._known: list[tuple[str, str, bytes]] | None = None
        self._answers: deque[tuple[str, str, bytes]] = deque(maxlen=RECENT_ANSWERS)

    def expect(self, hashes: Sequence[str], texts: Sequence[str]) -> None:
        if not hashes or len(hashes) >= SAME_VECTOR_MIN_TEXTS or len(hashes) != len(texts):
            return
        if self._known is None:
            self._known = self._recent()
        with self._lock:
            self._texts.update(zip(hashes, texts, strict=True))

    def check(self, hashes: Sequence[str], vectors: np.ndarray) -> None:
        with self._lock:
            texts = [self._texts.get(h) for h in hashes]
            if not hashes or any(t is None for t in texts):
                return  # not a small request this run told us of
            for h in hashes:
                del self._texts[h]
            known = [*(self._known or ()), *self._answers]
        told = [t for t in texts if t is not None]
        arr = np.ascontiguousarray(vectors, dtype="<f4")
        check_not_a_known_vector(arr, hashes, told, known, provider=self.provider.name,
                                 told_apart=self.provider.texts_told_apart)
        with self._lock:
            self._answers.extend((h, t, arr[i].tobytes()) for i, (h, t) in enumerate(zip(hashes, told, strict=True)))

    def _recent(self) -> list[tuple[str, str, bytes]]:
        """The last chunks of each index the run reads vectors from; for a run that reads none
        (``--re-embed``), of its own index (what a still broken gateway would answer again)."""
        out: list[tuple[str, str, bytes]] = []
        try:
            for live in self.live:
                out.extend(live.recent(RECENT_CHUNKS))
            if self.live:
                return out
            own = LiveVectors.open(Path(os.path.abspath(self.index_path)), self.provider.name, self.provider.model,
                                   self.provider.provider_key, self.provider.dims)
            if own is not None:
                try:
                    out.extend(own.recent(RECENT_CHUNKS))
                finally:
                    own.close()
        except apsw.Error as exc:  # a live index that cannot be read: what was read is compared
            log.debug("small requests compared with fewer known vectors (%s)", exc)
        return out
