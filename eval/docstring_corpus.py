"""Generate a larger labelled retrieval set from the docstrings of installed Python code.

    python eval/docstring_corpus.py --out /tmp/docs-eval [--docs 3000] [--queries 600] [--seed 11]

Writes ``<out>/workspace/memory/<package>/<qualified.name>.md`` (one Markdown file per documented
function or class: ``# qualified.name`` then the docstring *without its summary paragraph*), and
``<out>/queries-dev.jsonl``, ``queries-test.jsonl``, ``qrels-dev.tsv``, ``qrels-test.tsv``
(BEIR format). A query is a docstring's summary paragraph ("Compute the qr factorization of a
matrix."); its one relevant document is the file holding the rest of that docstring (corpus id =
the indexed path without ``.md``). This is the "title -> body" task of several BEIR sets, on
real English technical prose written by many authors, so it is neither written for memory-core
nor tuned to its ranking: the selection rules below look only at the text, never at any
retrieval result, and were fixed before the first evaluation run.

Selection (all deterministic for a seed and the installed package versions):

* sources: the standard library and numpy, scipy, sklearn, networkx, sympy, torch, dask, prefect,
  pydantic, sqlalchemy, jinja2, rich, httpx when installed; read with ``ast`` (nothing imported);
  public names only; no tests, no vendored code;
* summary (the query): 6-40 words, not an alias / deprecation / "see X" / "same as" stub,
  unique in the whole candidate pool (an ambiguous query has no single right answer);
* body (the document): at least 400 characters, does not repeat the summary, cut at a line
  boundary after 2,400 characters (about one abstract: BEIR's SciFact documents average ~1,500);
* near-duplicates (bodies sharing > 50% of their word 5-shingles, e.g. a method and the function it
  wraps, or templated distribution classes) are all dropped, so no unjudged twin of the answer
  sits in the corpus;
* ``--docs`` documents are sampled from the survivors; ``--queries`` of them become queries,
  split in half into a dev set (for tuning) and a test set (for reporting). The other documents
  are distractors.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import importlib.util
import json
import random
import re
import sys
import sysconfig
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

PACKAGES = ("numpy", "scipy", "sklearn", "networkx", "sympy", "torch", "dask", "prefect", "pydantic",
            "sqlalchemy", "jinja2", "rich", "httpx")
STDLIB_SKIP = {"test", "tests", "idlelib", "tkinter", "turtledemo", "lib2to3", "ensurepip", "site-packages",
               "dist-packages", "pydoc_data", "__pycache__", "venv", "config-3.11-x86_64-linux-gnu"}
PATH_SKIP_RE = re.compile(r"(^|/)(tests?|testing|_vendor|vendor|externals|_externals|benchmarks?|conftest)(/|\.py$|$)")
STUB_RE = re.compile(
    r"^(alias|deprecated|see |same as|equivalent to|return self|implement|helper|wrapper|internal|private|"
    r"this (function|method|class) is deprecated|a? ?shortcut|shorthand|todo|xxx|docstring|"
    r"\.\. |dummy|placeholder|backward|compat)", re.IGNORECASE)
MIN_WORDS, MAX_WORDS = 6, 40
MIN_BODY, MAX_BODY = 400, 2400
SHINGLE = 5
NEAR_DUP = 0.5


@dataclass
class Doc:
    package: str
    name: str  # qualified name, e.g. numpy.linalg.qr
    summary: str
    body: str


def _module_name(root: Path, file: Path, package: str | None) -> str:
    rel = file.relative_to(root).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    parts = [p for p in parts if not p.startswith("_")]  # numpy._core.fromnumeric -> numpy.fromnumeric
    return ".".join(([package] if package else []) + parts) or (package or "")


def _source_files() -> Iterator[tuple[str, Path, Path, str | None]]:
    """(package label, root, file, root package name)."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    for f in sorted(stdlib.rglob("*.py")):
        rel = f.relative_to(stdlib)
        if rel.parts[0] in STDLIB_SKIP or any(p in STDLIB_SKIP for p in rel.parts):
            continue
        if PATH_SKIP_RE.search(rel.as_posix()):
            continue
        yield "stdlib", stdlib, f, None
    for pkg in PACKAGES:
        spec = importlib.util.find_spec(pkg)
        if spec is None or not spec.submodule_search_locations:
            continue
        root = Path(next(iter(spec.submodule_search_locations)))
        for f in sorted(root.rglob("*.py")):
            rel = f.relative_to(root).as_posix()
            if PATH_SKIP_RE.search(rel):
                continue
            yield pkg, root, f, pkg


def _split(doc: str) -> tuple[str, str]:
    paras = re.split(r"\n\s*\n", doc.strip(), maxsplit=1)
    summary = " ".join(paras[0].split())
    body = paras[1].strip() if len(paras) > 1 else ""
    return summary, body


def _cut(body: str) -> str:
    if len(body) <= MAX_BODY:
        return body
    cut = body.rfind("\n", 0, MAX_BODY)
    return body[: cut if cut > MAX_BODY // 2 else MAX_BODY].rstrip()


def extract() -> list[Doc]:
    docs: list[Doc] = []
    for label, root, file, pkg in _source_files():
        try:
            tree = ast.parse(file.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError, ValueError, OSError):
            continue
        module = _module_name(root, file, pkg)

        def visit(node: ast.AST, prefix: str, module: str = module, label: str = label) -> None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                    if child.name.startswith("_"):
                        continue
                    qual = f"{prefix}.{child.name}"
                    raw = ast.get_docstring(child)
                    if raw:
                        summary, body = _split(raw)
                        docs.append(Doc(label, qual, summary, body))
                    if isinstance(child, ast.ClassDef):
                        visit(child, qual)

        visit(tree, module)
    return docs


def _eligible(d: Doc) -> bool:
    words = d.summary.split()
    if not (MIN_WORDS <= len(words) <= MAX_WORDS):
        return False
    if STUB_RE.match(d.summary) or not re.match(r"[A-Za-z]", d.summary):
        return False
    if len(d.body) < MIN_BODY:
        return False
    probe = " ".join(d.summary.lower().split())[:40]
    return probe not in " ".join(d.body.lower().split())


def _shingles(text: str) -> set[int]:
    words = re.findall(r"\w+", text.lower())
    out = set()
    for i in range(max(1, len(words) - SHINGLE + 1)):
        h = int.from_bytes(hashlib.blake2b(" ".join(words[i:i + SHINGLE]).encode(), digest_size=8).digest(), "little")
        out.add(h)
    return out


def _drop_near_duplicates(docs: list[Doc]) -> list[Doc]:
    sh = [_shingles(d.body) for d in docs]
    index: dict[int, list[int]] = defaultdict(list)
    for i, s in enumerate(sh):
        for h in s:
            if h % 4 == 0:  # a sample of shingles finds the candidate pairs
                index[h].append(i)
    bad: set[int] = set()
    seen_pairs: set[tuple[int, int]] = set()
    for ids in index.values():
        if len(ids) > 200:  # boilerplate shared by hundreds of docs: not a near-duplicate signal
            continue
        for a_pos, a in enumerate(ids):
            for b in ids[a_pos + 1:]:
                if (a, b) in seen_pairs:
                    continue
                seen_pairs.add((a, b))
                inter = len(sh[a] & sh[b])
                if inter / (len(sh[a]) + len(sh[b]) - inter) > NEAR_DUP:
                    bad.update((a, b))
    return [d for i, d in enumerate(docs) if i not in bad]


def select(n_docs: int, n_queries: int, seed: int) -> tuple[list[Doc], list[Doc]]:
    docs = [d for d in extract() if _eligible(d)]
    for d in docs:
        d.body = _cut(d.body)
    by_summary: dict[str, int] = defaultdict(int)
    by_name: dict[str, int] = defaultdict(int)
    for d in docs:
        by_summary[d.summary.lower()] += 1
        by_name[d.name] += 1
    docs = [d for d in docs if by_summary[d.summary.lower()] == 1 and by_name[d.name] == 1]
    docs.sort(key=lambda d: d.name)
    rng = random.Random(seed)
    rng.shuffle(docs)
    docs = _drop_near_duplicates(docs[: int(n_docs * 1.6)])[:n_docs]
    queries = docs[:n_queries]
    return docs, queries


def _file_name(d: Doc) -> str:
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", d.name)
    return f"memory/{d.package}/{safe}.md"


def write(out: Path, docs: list[Doc], queries: list[Doc]) -> None:
    ws = out / "workspace"
    for d in docs:
        p = ws / _file_name(d)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(f"# {d.name}\n\n{d.body}\n", encoding="utf-8")
    half = len(queries) // 2
    for split, qs in (("dev", queries[:half]), ("test", queries[half:])):
        with open(out / f"queries-{split}.jsonl", "w", encoding="utf-8") as fq, \
                open(out / f"qrels-{split}.tsv", "w", encoding="utf-8") as fr:
            fr.write("query-id\tcorpus-id\tscore\n")
            for i, d in enumerate(qs):
                qid = f"{split}-{i:04d}"
                fq.write(json.dumps({"_id": qid, "text": d.summary}, ensure_ascii=False) + "\n")
                fr.write(f"{qid}\t{_file_name(d)[:-3]}\t1\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--docs", type=int, default=3000)
    ap.add_argument("--queries", type=int, default=600)
    ap.add_argument("--seed", type=int, default=11)
    a = ap.parse_args(argv)
    docs, queries = select(a.docs, a.queries, a.seed)
    a.out.mkdir(parents=True, exist_ok=True)
    write(a.out, docs, queries)
    by_pkg: dict[str, int] = defaultdict(int)
    for d in docs:
        by_pkg[d.package] += 1
    print(f"{len(docs)} documents, {len(queries)} queries (dev {len(queries) // 2}, test"
          f" {len(queries) - len(queries) // 2}) -> {a.out}")
    print("documents per package: " + ", ".join(f"{k} {v}" for k, v in sorted(by_pkg.items())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
