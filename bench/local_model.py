"""The local model's speed against sentence-transformers' default settings, in the same run.

    python -m bench.local_model --texts 2000      # writes bench/results/local-model.md

Two worker processes load the model once each and then take turns on the same texts:

* baseline: ``SentenceTransformer(path).encode(texts, normalize_embeddings=True)``, every
  other setting at its default (batch 32, torch's default threads);
* ours: ``LocalProvider(settings).embed_documents(texts)`` with the default settings
  (``local.backend = auto``: the int8 ONNX model when onnxruntime is installed).

The texts are split into rounds; in every round both workers encode the same slice, in an
order that alternates, so load from other processes on a shared machine hits both alike. Each
worker is its own process so the two thread pools never compete and each peak RSS is its own.
The result is a ratio of chunks/s measured side by side, never an absolute timing. Cosines
compare our vectors with the baseline's on every timed text and on a set of edge cases (empty,
one character, CJK, over-window, real notes from examples/workspace).
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing as mp
import os
import platform
import random
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

EDGE_TEXTS = ["", " ", "x", "?", "...", "TODO", "金", "金银价格", "サーバー 確認", "서버 에러 확인 부탁",
              "postgres replication lag", "who owns the canary release?", "- [ ] buy garlic",
              "word " * 600, " ".join(["memory search embedding vector chunk"] * 80)]


def corpus_texts(n: int, seed: int = 7, chunk_tokens: int = 200) -> list[str]:
    """``n`` chunk texts of generated Markdown notes, chunked as the pipeline does (200 tokens,
    40 overlap: the local model's defaults), empty chunks dropped, shuffled."""
    from bench.corpus import generate
    from memory_core.index.chunking import chunk_markdown

    out: list[str] = []
    files = max(4, n // 4)
    with tempfile.TemporaryDirectory(prefix="bench-local-") as d:
        while len(out) < n:
            out.clear()
            for p in generate(Path(d), files, seed=seed):
                out += [c.text for c in chunk_markdown(p.read_text(), chunk_tokens, chunk_tokens // 5)
                        if c.text.strip()]
            files *= 2
    random.Random(seed).shuffle(out)
    return out[:n]


def workspace_texts() -> list[str]:
    from memory_core.index.chunking import chunk_markdown

    out = []
    for p in sorted((ROOT / "examples" / "workspace").rglob("*.md")):
        out += [c.text for c in chunk_markdown(p.read_text(), 200, 40) if c.text.strip()]
    return out


def _local(opts: dict) -> dict:
    return {k: v for k, v in opts.items() if k in ("backend", "cache_dir", "batch_size", "threads") and v is not None}


def _worker(kind: str, opts: dict, conn) -> None:  # type: ignore[no-untyped-def]
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    sys.path.insert(0, str(ROOT))
    t0 = time.perf_counter()
    info: dict = {}
    with contextlib.suppress(Exception):  # no progress bars (does not change what is measured)
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
    if kind == "prepare":  # build (or find) the cached ONNX model, so the timed worker starts warm
        from memory_core.config import load_settings
        from memory_core.embeddings.local import LocalProvider

        provider = LocalProvider(load_settings(None, {"provider": "local", "local": _local(opts)}, env={}))
        provider.embed_documents(["load the model"])
        conn.send({"source": provider.onnx_source, "backend": provider.backend, "s": time.perf_counter() - t0,
                   "rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss})
        return
    if kind == "baseline":
        from sentence_transformers import SentenceTransformer

        from memory_core.embeddings.local import packaged_model_path

        model = SentenceTransformer(str(opts.get("model_path") or packaged_model_path()))

        def encode(texts):  # type: ignore[no-untyped-def]
            return model.encode(texts, normalize_embeddings=True, show_progress_bar=False)

        info["backend"] = "sentence-transformers defaults (batch 32)"
    else:
        from memory_core.config import load_settings
        from memory_core.embeddings.local import LocalProvider

        provider = LocalProvider(load_settings(None, {"provider": "local", "local": _local(opts)}, env={}))
        provider.embed_documents(["load the model"])

        def encode(texts):  # type: ignore[no-untyped-def]
            return provider.embed_documents(texts)

        info["backend"] = provider.backend
        info["reason"] = provider.backend_reason
        info["source"] = provider.onnx_source
    encode(["warm up the model", "金银价格", "x" * 300])
    info["load_s"] = time.perf_counter() - t0
    info["rss_after_load"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    conn.send(info)
    while True:
        msg = conn.recv()
        if msg is None:
            break
        start = time.perf_counter()
        vecs = encode(msg)
        conn.send((time.perf_counter() - start, vecs, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss))


def _pieces(texts: list[str]) -> list[int]:
    from tokenizers import Tokenizer

    from memory_core.embeddings.local import packaged_model_path

    tok = Tokenizer.from_file(str(packaged_model_path() / "tokenizer.json"))
    tok.no_truncation()
    return [len(e.ids) for e in tok.encode_batch(texts)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--texts", type=int, default=2000, help="chunks to embed on each side (default 2000)")
    ap.add_argument("--rounds", type=int, default=10, help="turns the texts are split into (default 10)")
    ap.add_argument("--chunk-tokens", type=int, default=200,
                    help="chunk size of the generated notes (default 200, the local model's default)")
    ap.add_argument("--backend", choices=["auto", "onnx", "onnx-float32", "torch"], default=None,
                    help="local.backend for our provider (default: the setting's default, auto)")
    ap.add_argument("--cache-dir", default=None, help="local.cache_dir (default: the user's cache dir)")
    ap.add_argument("--batch-size", type=int, default=None, help="local.batch_size (default: the setting's)")
    ap.add_argument("--threads", type=int, default=None, help="local.threads (default: unset)")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "local-model.md"))
    args = ap.parse_args(argv)

    from memory_core.embeddings.local import local_model_available

    if not local_model_available():
        print("the local model is not installed: pip install -e '.[local]'", file=sys.stderr)
        return 2
    import numpy as np

    texts = corpus_texts(args.texts, chunk_tokens=args.chunk_tokens)
    edge = EDGE_TEXTS + workspace_texts()
    pieces = _pieces(texts)
    opts = {"backend": args.backend, "cache_dir": args.cache_dir, "batch_size": args.batch_size,
            "threads": args.threads}
    ctx = mp.get_context("spawn")
    workers = {}
    infos = {}
    load_before = os.getloadavg()
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_worker, args=("prepare", opts, child), daemon=True)
    proc.start()
    prep = parent.recv()
    proc.join(timeout=60)
    for kind in ("baseline", "ours"):  # one at a time: loading is not what is measured
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=_worker, args=(kind, opts, child), daemon=True)
        proc.start()
        workers[kind] = (proc, parent)
        infos[kind] = parent.recv()
    times: dict[str, list[float]] = {k: [] for k in workers}
    vecs: dict[str, list] = {k: [] for k in workers}
    rss: dict[str, int] = {}
    rounds = max(1, min(args.rounds, len(texts)))
    size = -(-len(texts) // rounds)
    for r in range(rounds):
        part = texts[r * size:(r + 1) * size]
        if not part:
            break
        for kind in (("baseline", "ours") if r % 2 == 0 else ("ours", "baseline")):
            proc, conn = workers[kind]
            conn.send(part)
            dt, v, peak = conn.recv()
            times[kind].append(dt)
            vecs[kind].append(np.asarray(v, dtype=np.float32))
            rss[kind] = peak
        print(f"round {r + 1}/{rounds}: baseline {len(part) / times['baseline'][-1]:.1f}/s, "
              f"ours {len(part) / times['ours'][-1]:.1f}/s", flush=True)
    edge_vecs = {}
    for kind, (proc, conn) in workers.items():
        conn.send(edge)
        _, edge_vecs[kind], rss[kind] = conn.recv()
        conn.send(None)
        proc.join(timeout=60)
    load_after = os.getloadavg()

    n = sum(len(v) for v in vecs["ours"])
    rate = {k: n / sum(times[k]) for k in times}
    ratio = sum(times["baseline"]) / sum(times["ours"])
    per_round = [b / o for b, o in zip(times["baseline"], times["ours"], strict=True)]
    cos = (np.concatenate(vecs["ours"]) * np.concatenate(vecs["baseline"])).sum(axis=1)
    ecos = (np.asarray(edge_vecs["ours"]) * np.asarray(edge_vecs["baseline"])).sum(axis=1)
    worst = [repr(edge[i][:40]) for i in np.argsort(ecos)[:3]]
    pieces_sorted = sorted(pieces)

    def mib(kb: int) -> str:
        return f"{kb / 1024:.0f} MiB"

    ours = infos["ours"]
    lines = [
        f"# local model: ours vs sentence-transformers defaults ({time.strftime('%Y-%m-%d %H:%M')}, "
        f"{os.cpu_count()} cores)",
        "",
        "Command: `python -m bench.local_model " + " ".join(argv if argv is not None else sys.argv[1:]) + "`",
        "",
        "| measure | result |",
        "|---|---|",
        f"| texts | {n} chunks of generated notes ({args.chunk_tokens}-token chunks), {statistics.mean(len(t) for t in texts):.0f} "
        f"chars and {statistics.mean(pieces):.0f} word pieces on average (p50 {pieces_sorted[len(pieces) // 2]}, "
        f"p90 {pieces_sorted[int(len(pieces) * 0.9)]}, {sum(p > 256 for p in pieces)} over the 256 window) |",
        f"| our backend | {ours['backend']} ({ours.get('reason', '')}) |",
        f"| baseline | {infos['baseline']['backend']} |",
        f"| chunks/s | ours {rate['ours']:.1f}, baseline {rate['baseline']:.1f} |",
        f"| **speed ratio** | **{ratio:.2f}x** the baseline (per round: median {statistics.median(per_round):.2f}, "
        f"min {min(per_round):.2f}, max {max(per_round):.2f}; {len(per_round)} rounds, order alternating) |",
        f"| cosine to the baseline, timed texts | min {cos.min():.4f}, mean {cos.mean():.4f} |",
        f"| cosine to the baseline, {len(edge)} edge texts | min {ecos.min():.4f}, mean {ecos.mean():.4f} "
        f"(lowest: {', '.join(worst)}) |",
        f"| peak RSS | ours {mib(rss['ours'])}, baseline {mib(rss['baseline'])} |",
        f"| load time (incl. first call) | ours {ours['load_s']:.1f} s ({ours.get('source') or 'n/a'}), "
        f"baseline {infos['baseline']['load_s']:.1f} s |",
        "| one-time ONNX build | " + (f"{prep['s']:.1f} s, peak RSS {mib(prep['rss'])} (separate process)"
                                      if prep.get("source") == "built" else
                                      f"none: {prep.get('source') or prep.get('backend')}") + " |",
        f"| load average before / after | {load_before[0]:.2f} / {load_after[0]:.2f} |",
        f"| platform | Python {platform.python_version()}, {platform.machine()}, {_versions()} |",
        "",
        "The ratio is chunks/s of both sides measured in the same run on the same texts; absolute "
        "rates depend on the machine and its load.",
        "",
    ]
    report = "\n".join(lines)
    print(report)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(report)
    print(f"wrote {out}")
    return 0


def _versions() -> str:
    from importlib import metadata

    parts = []
    for dist in ("torch", "sentence-transformers", "onnxruntime"):
        try:
            parts.append(f"{dist} {metadata.version(dist)}")
        except metadata.PackageNotFoundError:
            parts.append(f"{dist} not installed")
    return ", ".join(parts)


if __name__ == "__main__":
    raise SystemExit(main())
