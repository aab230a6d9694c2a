"""What note windows (``chunking.note_windows``, issue 37) cost: part vectors, index bytes,
indexing time and search time, against the same notes indexed without them, in one run.

    PYTHONPATH=. python bench/note_windows.py [--copies 8] [--rounds 7]

The example workspace's notes (examples/workspace), copied ``--copies`` times under memory/ (each
copy's lines suffixed with its number, so no two chunks share a text), indexed twice with the real
local model: note windows on (the default) and off. Each round times the example queries
(eval/examples-queries.jsonl) as hybrid searches on both indexes, alternating which goes first;
the report is the median per search and the ratios in the same run."""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import apsw

from memory_core.config import load_settings
from memory_core.index.pipeline import run_index
from memory_core.query.search import Searcher

ROOT = Path(__file__).resolve().parent.parent


def _workspace(dest: Path, copies: int) -> Path:
    src = ROOT / "examples" / "workspace"
    (dest / "memory").mkdir(parents=True)
    shutil.copy(src / "MEMORY.md", dest / "MEMORY.md")
    for k in range(copies):
        for f in sorted((src / "memory").glob("*.md")):
            lines = f.read_text(encoding="utf-8").split("\n")
            text = "\n".join(f"{ln} ({k})" if ln.strip() and k else ln for ln in lines)
            (dest / "memory" / f"{f.stem}-{k}.md").write_text(text, encoding="utf-8")
    return dest


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--copies", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=7)
    a = ap.parse_args()
    queries = [json.loads(ln)["text"] for ln in (ROOT / "eval" / "examples-queries.jsonl").read_text().splitlines()
               if ln.strip()]
    with tempfile.TemporaryDirectory() as tmp:
        out: dict[str, dict[str, float]] = {}
        settings = {}
        for which in ("on", "off"):
            ws = _workspace(Path(tmp) / which, a.copies)
            s = load_settings(None, {"workspace": str(ws), "provider": "local", "sources": ["memory"],
                                     "chunking": {"note_windows": which == "on"}})
            t0 = time.perf_counter()
            run_index(s)
            build = time.perf_counter() - t0
            conn = apsw.Connection(str(s.index_file), flags=apsw.SQLITE_OPEN_READONLY)
            chunks = int(conn.execute("SELECT count(*) FROM chunks").fetchone()[0])
            parts = int(conn.execute("SELECT count(*) FROM chunk_parts").fetchone()[0])
            conn.close()
            out[which] = {"build_s": build, "chunks": chunks, "parts": parts, "bytes": s.index_file.stat().st_size}
            settings[which] = s
        times: dict[str, list[float]] = {"on": [], "off": []}
        with Searcher(settings["on"]) as on, Searcher(settings["off"]) as off:
            on.search(queries[0])
            off.search(queries[0])
            for r in range(a.rounds):
                for which in (("on", "off") if r % 2 else ("off", "on")):
                    se = on if which == "on" else off
                    t0 = time.perf_counter()
                    for q in queries:
                        se.search(q, max_results=10)
                    times[which].append((time.perf_counter() - t0) / len(queries))
        med = {k: statistics.median(v) * 1000 for k, v in times.items()}
        o, f = out["on"], out["off"]
        print(f"{a.copies} copies of the example notes: {f['chunks']} chunks; {len(queries)} hybrid queries x"
              f" {a.rounds} rounds, 10 results a search, local model")
        print("| | note windows on | off | ratio |")
        print("|---|---:|---:|---:|")
        print(f"| part vectors | {o['parts']:,} | {f['parts']:,} | - |")
        print(f"| vectors (chunks + parts) | {o['chunks'] + o['parts']:,} | {f['chunks'] + f['parts']:,} |"
              f" {(o['chunks'] + o['parts']) / (f['chunks'] + f['parts']):.2f}x |")
        print(f"| index bytes | {o['bytes']:,} | {f['bytes']:,} | {o['bytes'] / f['bytes']:.2f}x |")
        print(f"| first build (s, embedding included) | {o['build_s']:.1f} | {f['build_s']:.1f} |"
              f" {o['build_s'] / f['build_s']:.2f}x |")
        print(f"| search (ms, median) | {med['on']:.1f} | {med['off']:.1f} | {med['on'] / med['off']:.2f}x |")


if __name__ == "__main__":
    main()
