"""Measure search on every labelled set, side by side, through the ranking code on PYTHONPATH.

    PYTHONPATH=. python eval/run_sets.py [--sets cosqa,convo,...] [--quick] [--cache DIR]
                                         [--rebuild] [--json OUT] [--by-category] [--deltas]
                                         [--against BEFORE.json] [--index-only]

Sets (a workspace per user where the data has users, pooled per query):

* ``cosqa``: ../shared/eval/cosqa, one ``memory/<_id>.md`` per document (6,000; the first build
  takes several minutes on 2 cores), its queries.jsonl and qrels/test.tsv. ``--quick``: 150 queries.
* ``examples``: examples/workspace with eval/examples-queries.jsonl and eval/examples-qrels.tsv.
* ``memorybank-en``, ``memorybank-cn``: MemoryBank users as dated transcripts (eval/memorybank.py),
  15 workspaces each; ``memorybank-en-notes``: the English users as daily notes.
* ``convo``: the synthetic multi-session set of eval/convo.py; ``convo-long``: the same questions
  over long sessions (6 topics each, about 5-8 chunks a session).
* ``chats``: 21 days of real-chat-like messaging (eval/chats.py), with message-level evidence;
  ``chats-notes``: the same conversations as daily Markdown notes. ``chats-dense`` (and
  ``chats-dense-notes``): the same people and questions in about 4x the messages (5,204: look-alike
  filler, more typos and threads), with more ``multi`` and ``paraphrase`` questions and an
  ``edge-next`` category (eval/chats-dense/). ``chats-daily``, ``chats-dense-daily`` (by name): the
  same sessions as one transcript a day (``chats.daily_transcripts``), labels moved with them.

Each set's workspaces and indexes (default local model) live in the cache (default
``~/.cache/memory-core-eval``), one folder per version of the data and of the indexer
(``<set>/<data hash>-<indexer hash>/<workspace>``, built under a lock, so runners of several
working trees share the cache safely). An index is reused only when its stamp matches: the set's data
files and generator script, and the indexer's code (the ``memory_core`` packages and modules in
``INDEX_SIDE``: storage/, embeddings/, sources/, index/, config.py, settings_model.py, errors.py, secrets.py, read from the package
on PYTHONPATH). ``--rebuild`` forces it.

Per set, each query is retrieved once (``Searcher.retrieve``, 200 candidates per side; the keyword
rows once more, as a keyword-only search retrieves) and ranked
(``Searcher.rank``, 100 results) under: hybrid / keyword / vector at the configured ``min_score``
and at 0, and hybrid with temporal decay (30-day half-life). Two plain baselines rank the same
index's chunks apart from the ranking code (``memory_core.apps.evaluation.PlainBaselines``, no
threshold, ``min_score`` shown as ``-``): ``bm25`` (FTS5 bm25() of the OR of the query's terms)
and ``convex`` (0.5/0.5 fusion of that BM25 and the exact cosine, each min-max normalised per
query over the union of both sides' 200 best chunks). Metrics per query (files ranked by
their best chunk, as ``memory-core eval``): nDCG@10, Recall@1/3/10, MRR@10, then the mean over
labelled queries; ``shown`` is the mean number of results a default search returns (at most
``query.max_results``); for queries labelled with nothing (negative probes), ``neg shown`` and
``neg empty`` (share answered with nothing).
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import math
import os
import shutil
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
# the sets' transcripts are stamped in UTC and their questions asked of UTC days: the figures are
# the same on any machine (a transcript message counts for its day in the process's zone)
os.environ["TZ"] = "UTC"
time.tzset()
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import chats  # noqa: E402  (eval/chats.py)
import convo  # noqa: E402  (eval/convo.py)
import memorybank  # noqa: E402  (eval/memorybank.py)

SHARED = memorybank.shared_eval()

ALL_SETS = ("cosqa", "examples", "memorybank-en", "memorybank-cn", "memorybank-en-notes", "convo", "convo-long",
            "chats", "chats-notes", "chats-dense", "chats-dense-notes")
MORE_SETS = ("docstrings", "chats-daily", "chats-dense-daily", "heldout-assist", "heldout-chat")  # by name only (--sets): docstrings is slow to build
# What decides an index's bytes: the packages and modules that discover, read, chunk, embed and
# write (the new layout, memory_core/<side>/). Everything else only answers queries, starts programs
# or writes elsewhere (query/, apps/, notes/, runtime/, export/, api.py, failpoints.py, the
# package's lazy __init__): changing it never changes what an index holds (query/ and index/ never
# import each other, tests/test_layers.py keeps it so), so ranking changes reuse the cached indexes.
INDEX_SIDE = ("storage", "embeddings", "sources", "index", "config.py", "settings_model.py", "errors.py", "plugins.py",
              "secrets.py")
MAX_RESULTS = 100
LAYOUT_VERSION = 2  # bump when the cosqa/examples workspace writers below change
QUICK_COSQA = 150
# (label, mode, min_score override (None: configured), temporal decay)
CONFIGS: list[tuple[str, str, float | None, bool]] = [
    ("hybrid", "hybrid", None, False),
    ("keyword", "keyword", None, False),
    ("vector", "vector", None, False),
    ("hybrid", "hybrid", 0.0, False),
    ("keyword", "keyword", 0.0, False),
    ("vector", "vector", 0.0, False),
    ("hybrid+decay30", "hybrid", None, True),
]
METRICS = ("ndcg@10", "recall@1", "recall@3", "recall@10", "mrr@10")


# ---------------------------------------------------------------------------------------------
# Sets
# ---------------------------------------------------------------------------------------------
@dataclass
class EvalSet:
    name: str
    groups: dict[str, Callable[[Path], Any]]  # workspace name -> writes the workspace into a folder
    inputs: list[Path]  # files whose content decides the workspaces (data and the generator script)
    queries: dict[str, str]
    qrels: dict[str, dict[str, int]]
    group_of: dict[str, str] = field(default_factory=dict)  # query id -> workspace name
    note: str = ""
    # query id -> [(corpus id, line)]: the lines (JSONL lines of a transcript) that answer it
    evidence: dict[str, list[tuple[str, int]]] = field(default_factory=dict)
    category: dict[str, str] = field(default_factory=dict)  # query id -> category


def _read_queries(path: Path) -> tuple[dict[str, str], dict[str, dict[str, Any]]]:
    texts, recs = {}, {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            r = json.loads(line)
            texts[str(r["_id"])] = r["text"]
            recs[str(r["_id"])] = r
    return texts, recs


def _read_qrels(path: Path) -> dict[str, dict[str, int]]:
    from memory_core.apps.evaluation import load_qrels

    return load_qrels(path)


def _cosqa(quick: bool) -> EvalSet:
    src = SHARED / "cosqa"
    queries, _ = _read_queries(src / "queries.jsonl")
    qrels = _read_qrels(src / "qrels" / "test.tsv")
    if quick:
        keep = sorted(q for q in qrels if q in queries)[:QUICK_COSQA]
        qrels = {q: qrels[q] for q in keep}

    def write(dest: Path) -> None:
        (dest / "memory").mkdir(parents=True)
        with open(src / "corpus.jsonl", encoding="utf-8") as fh:
            for line in fh:
                if line.strip():
                    d = json.loads(line)
                    (dest / "memory" / f"{d['_id']}.md").write_text(d["text"], encoding="utf-8")

    return EvalSet("cosqa", {"cosqa": write}, [src / "corpus.jsonl"], queries, qrels,
                   note=f"{len(qrels)} of 500 queries" if quick else "")


DOCSTRINGS_ARGS = ("--docs", "3000", "--queries", "600", "--seed", "11")


def _docstrings(cache: Path) -> EvalSet:
    """The docstring corpus's 300 test queries (eval/docstring_corpus.py, generated once into the
    cache from the installed packages' code): one Markdown file per document, technical prose, a
    query's one answer the rest of a docstring; the nearest set here to the issue's scientific one
    (one file a document, BM25 about level with the model). Not in the default run: the first
    index takes several minutes."""
    import subprocess

    src = cache / "docstrings-src" / "-".join(DOCSTRINGS_ARGS[1::2])
    if not (src / "qrels-test.tsv").exists():
        shutil.rmtree(src, ignore_errors=True)
        subprocess.run([sys.executable, str(HERE / "docstring_corpus.py"), "--out", str(src), *DOCSTRINGS_ARGS],
                       check=True)
    queries, _ = _read_queries(src / "queries-test.jsonl")
    qrels = _read_qrels(src / "qrels-test.tsv")

    def write(dest: Path) -> None:
        shutil.copytree(src / "workspace", dest)

    files = sorted(p for p in (src / "workspace").rglob("*.md"))
    return EvalSet("docstrings", {"docstrings": write}, [HERE / "docstring_corpus.py", *files], queries, qrels,
                   note="test half")


def _examples() -> EvalSet:
    src = ROOT / "examples" / "workspace"

    def write(dest: Path) -> None:
        shutil.copytree(src, dest, ignore=shutil.ignore_patterns(".memory-core"))

    files = sorted(p for p in src.rglob("*") if p.is_file() and ".memory-core" not in p.parts)
    queries, _ = _read_queries(HERE / "examples-queries.jsonl")
    return EvalSet("examples", {"examples": write}, files, queries, _read_qrels(HERE / "examples-qrels.tsv"))


def _memorybank(lang: str, variant: str) -> EvalSet:
    data = memorybank.DEFAULT_DATA
    users = {u["id"]: u for u in memorybank.load(lang, data)}
    queries, recs = _read_queries(memorybank.HERE / lang / "queries.jsonl")
    qrels = _read_qrels(memorybank.HERE / lang / ("qrels.tsv" if variant == "sessions" else "qrels-notes.tsv"))

    def writer(uid: str) -> Callable[[Path], Any]:
        return lambda dest: memorybank.build_workspace(users[uid], dest, variant)

    name = f"memorybank-{lang}" + ("-notes" if variant == "notes" else "")
    return EvalSet(name, {uid: writer(uid) for uid in users},
                   [data / lang / f"memory_bank_{lang}.json", HERE / "memorybank.py"], queries, qrels,
                   group_of={q: r["user"] for q, r in recs.items()}, note="15 workspaces, pooled")


def _convo() -> EvalSet:
    queries, recs = _read_queries(convo.HERE / "queries.jsonl")
    return EvalSet("convo", {"convo": convo.build_workspace}, [HERE / "convo.py"], queries,
                   _read_qrels(convo.HERE / "qrels.tsv"),
                   category={q: str(r.get("category", "")) for q, r in recs.items()})


def _convo_long() -> EvalSet:
    queries, qrels = convo.labels("long")
    _, recs = _read_queries(convo.HERE / "queries.jsonl")
    return EvalSet("convo-long", {"convo-long": lambda dest: convo.build_workspace(dest, "long")},
                   [HERE / "convo.py"], queries, qrels, note="the same questions, sessions of 5-8 chunks",
                   category={q: str(r.get("category", "")) for q, r in recs.items()})


def _chats(variant: str = "sessions", dense: bool = False) -> EvalSet:
    notes = variant == "notes"
    here = chats.DENSE_HERE if dense else chats.HERE
    queries, recs = _read_queries(here / "queries.jsonl")
    evidence: dict[str, list[tuple[str, int]]] = {}
    ev_file = here / ("evidence-notes.tsv" if notes else "evidence.tsv")
    for line in ev_file.read_text(encoding="utf-8").splitlines()[1:]:
        qid, cid, n = line.split("\t")
        evidence.setdefault(qid, []).append((cid, int(n)))
    qrels = _read_qrels(here / ("qrels-notes.tsv" if notes else "qrels.tsv"))
    if variant == "daily":  # the sessions' labels moved to the day's transcript that holds them
        where = chats.daily_transcripts(dense)[1]
        evidence = {q: [(where[c][0], where[c][1] + n) for c, n in ev] for q, ev in evidence.items()}
        daily: dict[str, dict[str, int]] = {}
        for q, rels in qrels.items():
            for c, r in rels.items():
                daily.setdefault(q, {})[where[c][0]] = max(daily.get(q, {}).get(where[c][0], 0), r)
        qrels = daily
    name = "chats" + ("-dense" if dense else "") + {"notes": "-notes", "daily": "-daily"}.get(variant, "")
    return EvalSet(name, {name: lambda dest: chats.build_workspace(dest, variant, dense)}, [HERE / "chats.py"],
                   queries, qrels, evidence=evidence,
                   category={q: str(r.get("category", "")) for q, r in recs.items()},
                   note={"notes": "the chats as daily notes", "daily": "one transcript a day"}.get(variant, ""))


def _heldout(sub: str) -> EvalSet:
    """eval/heldout.py's sets, written apart from the ranking work (see its doc): labels committed
    in eval/heldout/<sub>/, the workspace generated (seeded); the negatives join the queries."""
    import heldout

    here = HERE / "heldout" / sub
    queries, _ = _read_queries(here / "queries.jsonl")
    negatives, _ = _read_queries(here / "negatives.jsonl")
    evidence: dict[str, list[tuple[str, int]]] = {}
    for line in (here / "evidence.tsv").read_text(encoding="utf-8").splitlines()[1:]:
        qid, cid, n, grade = line.split("\t")
        if int(grade) >= 2:
            evidence.setdefault(qid, []).append((cid, int(n)))
    category = {}
    for line in (here / "categories.tsv").read_text(encoding="utf-8").splitlines()[1:]:
        qid, cat, _text = line.split("\t", 2)
        category[qid] = cat
    return EvalSet(f"heldout-{sub}", {f"heldout-{sub}": lambda dest: heldout.write_workspace(sub, dest)},
                   [HERE / "heldout.py"], {**queries, **negatives}, _read_qrels(here / "qrels.tsv"),
                   evidence=evidence, category=category, note="written apart from the ranking work")


DEFAULT_CACHE = Path.home() / ".cache" / "memory-core-eval"


def make_set(name: str, quick: bool, cache: Path = DEFAULT_CACHE) -> EvalSet:
    if name == "chats":
        return _chats()
    if name == "chats-notes":
        return _chats("notes")
    if name in ("chats-dense", "chats-dense-notes"):
        return _chats("notes" if name.endswith("-notes") else "sessions", dense=True)
    if name in ("chats-daily", "chats-dense-daily"):
        return _chats("daily", dense=name.startswith("chats-dense"))
    if name in ("heldout-assist", "heldout-chat"):
        return _heldout(name.split("-", 1)[1])
    if name == "cosqa":
        return _cosqa(quick)
    if name == "examples":
        return _examples()
    if name == "docstrings":
        return _docstrings(cache)
    if name == "convo":
        return _convo()
    if name == "convo-long":
        return _convo_long()
    if name.startswith("memorybank-"):
        parts = name.split("-")
        return _memorybank(parts[1], "notes" if parts[-1] == "notes" else "sessions")
    raise SystemExit(f"unknown set {name!r} (sets: {', '.join(ALL_SETS + MORE_SETS)})")


# ---------------------------------------------------------------------------------------------
# Indexes, cached by fingerprint
# ---------------------------------------------------------------------------------------------
def _sha(h: Any, path: Path) -> None:
    h.update(path.as_posix().encode())
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)


def indexer_version() -> str:
    """Hash of the indexing code (``INDEX_SIDE``) of the ``memory_core`` on PYTHONPATH."""
    spec = importlib.util.find_spec("memory_core")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("memory_core is not importable: set PYTHONPATH to the working tree")
    pkg = Path(next(iter(spec.submodule_search_locations)))
    h = hashlib.sha256()
    for p in sorted(pkg.rglob("*.py")):
        if p.relative_to(pkg).parts[0] not in INDEX_SIDE:  # a top-level module, or a package
            continue
        h.update(p.relative_to(pkg).as_posix().encode())
        h.update(p.read_bytes())
    return h.hexdigest()[:16]


def fingerprint(s: EvalSet, group: str, code: str) -> dict[str, Any]:
    h = hashlib.sha256()
    for p in s.inputs:
        _sha(h, p)
    return {"set": s.name, "workspace": group, "layout": LAYOUT_VERSION, "data": h.hexdigest()[:16], "indexer": code}


def _settings(ws: Path) -> Any:
    """The workspace's settings as the CLI reads them (its memory-core.toml), local model."""
    from memory_core.config import load_settings

    toml = ws / "memory-core.toml"
    return load_settings(toml if toml.exists() else None, {"workspace": str(ws), "provider": "local"})


def ensure_index(s: EvalSet, group: str, cache: Path, code: str, provider: Any, rebuild: bool,
                 log: Callable[[str], None]) -> Any:
    """The settings of the set's workspace ``group``, its index built first unless the cache has it.

    Each version of the data and of the indexer has its own folder, ``<cache>/<set>/<data>-<indexer>/``,
    so runners of several working trees (one changing the ranking, one the chunking) share what
    they can and never rebuild each other's indexes; a lock file per workspace makes a second
    runner wait for the build instead of writing into the same folder (old folders can be deleted)."""
    import fcntl

    from memory_core.index.pipeline import run_index

    want = fingerprint(s, group, code)
    base = cache / s.name / f"{want['data']}-{code}"
    ws = base / group
    stamp_file = base / f"{group}.stamp.json"
    base.mkdir(parents=True, exist_ok=True)
    with open(base / f"{group}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (not rebuild and stamp_file.exists() and (ws / ".memory-core" / "index.sqlite").exists()
                and json.loads(stamp_file.read_text()) == want):
            return _settings(ws)
        stamp_file.unlink(missing_ok=True)
        if ws.exists():
            shutil.rmtree(ws)
        s.groups[group](ws)
        settings = _settings(ws)
        t0 = time.perf_counter()
        summary = run_index(settings, full=True, provider=provider)
        log(f"  indexed {s.name}/{group} in {time.perf_counter() - t0:.0f} s ({summary.provider}/{summary.model})")
        stamp_file.write_text(json.dumps(want, indent=1))
    return settings


# ---------------------------------------------------------------------------------------------
# Ranking and metrics
# ---------------------------------------------------------------------------------------------
def query_metrics(ranked: list[str], rels: dict[str, int], chunks: list[tuple[str, int, int]] | None = None,
                  evidence: list[tuple[str, int]] | None = None) -> dict[str, float]:
    from memory_core.apps.evaluation import mrr_at_k, ndcg_at_k, recall_at_k

    out = {"ndcg@10": ndcg_at_k(ranked, rels, 10), "recall@1": recall_at_k(ranked, rels, 1),
           "recall@3": recall_at_k(ranked, rels, 3), "recall@10": recall_at_k(ranked, rels, 10),
           "mrr@10": mrr_at_k(ranked, rels, 10)}
    if evidence and chunks is not None:
        out["ev@10"] = evidence_recall(chunks[:10], evidence)
    return out


def evidence_recall(chunks: list[tuple[str, int, int]], evidence: list[tuple[str, int]]) -> float:
    """Share of the evidence lines (path, line) inside one of ``chunks`` (path, start, end)."""
    hit = sum(1 for path, line in evidence if any(p == path and s <= line <= e for p, s, e in chunks))
    return hit / len(evidence)


def run_set(s: EvalSet, cache: Path, code: str, provider: Any, rebuild: bool,
            log: Callable[[str], None]) -> dict[str, Any]:
    from memory_core.apps.evaluation import (
        BASELINES,
        PlainBaselines,
        file_ranking,
        keyword_only_candidates,
        resolve_corpus_ids,
    )
    from memory_core.query.search import Searcher

    labelled = {q for q, r in s.qrels.items() if any(v > 0 for v in r.values()) and q in s.queries}
    negatives = [q for q in s.queries if q not in s.qrels]  # in the queries file, labelled with nothing
    if s.name == "cosqa":
        negatives = []  # cosqa's queries file holds other splits' queries, not negatives
    per: dict[str, dict[str, dict[str, float]]] = {c[0] + ("" if c[2] is None else "@0"): {} for c in CONFIGS}
    per.update({b: {} for b in BASELINES})
    shown: dict[str, list[int]] = {k: [] for k in per}
    neg_shown: dict[str, list[int]] = {k: [] for k in per}
    unresolved: list[str] = []
    t0 = time.perf_counter()
    min_score = None
    for group in s.groups:
        todo = [q for q in [*sorted(labelled), *negatives] if s.group_of.get(q, group) == group]
        if not todo:
            continue
        settings = ensure_index(s, group, cache, code, provider, rebuild, log)
        q = settings.query
        min_score = "auto" if q.by_support() else q.threshold()  # auto: the threshold of unsupported queries
        decay = settings.model_copy(update={"query": q.model_copy(update={
            "temporal_decay": q.temporal_decay.model_copy(update={"enabled": True, "half_life_days": 30.0})})})
        with Searcher(settings, provider=provider) as searcher, PlainBaselines(settings, provider) as plain:
            paths = searcher.indexed_paths()
            ids = [c for qid in todo if qid in labelled for c in s.qrels[qid]]
            mapping, missing = resolve_corpus_ids(ids, paths)
            unresolved += missing
            n_cand = searcher.candidate_count(MAX_RESULTS)
            for qid in todo:
                cands = searcher.retrieve(s.queries[qid], n_cand)
                kw_cands = keyword_only_candidates(searcher, s.queries[qid], n_cand, cands)
                rels: dict[str, int] = {}
                for c, r in s.qrels.get(qid, {}).items():
                    key = mapping.get(c, "\x00unresolved:" + c)
                    rels[key] = max(rels.get(key, 0), r)
                ev = [(mapping.get(c, "\x00unresolved:" + c), n) for c, n in s.evidence.get(qid, [])]
                for label, mode, ms, dec in CONFIGS:
                    key = label + ("" if ms is None else "@0")
                    searcher.settings = decay if dec else settings
                    res = searcher.rank(kw_cands if mode == "keyword" else cands, max_results=MAX_RESULTS,
                                        min_score=ms, mode=mode)
                    n_shown = min(len(res), q.max_results)
                    if qid in labelled:
                        per[key][qid] = query_metrics(file_ranking(r.path for r in res), rels,
                                                      [(r.path, r.start_line, r.end_line) for r in res], ev)
                        shown[key].append(n_shown)
                    else:
                        neg_shown[key].append(n_shown)
                searcher.settings = settings
                for b, rids in plain.rank_rows(s.queries[qid], n_cand, MAX_RESULTS).items():
                    if rids is None:
                        continue
                    paths_ = [plain.paths[r] for r in rids]
                    # a plain ranking has no threshold: a default search would show its first max_results
                    if qid in labelled:
                        per[b][qid] = query_metrics(file_ranking(paths_), rels,
                                                    [(plain.paths[r], *plain.lines[r]) for r in rids], ev)
                        shown[b].append(min(len(paths_), q.max_results))
                    else:
                        neg_shown[b].append(min(len(paths_), q.max_results))
    rows = []
    row_keys: list[tuple[str, str, float | str | None, bool]] = [
        (label + ("" if ms is None else "@0"), label, min_score if ms is None else ms, dec)
        for label, _mode, ms, dec in CONFIGS]
    row_keys += [(b, b, None, False) for b in BASELINES if per[b]]
    for key, label, ms_shown, dec in row_keys:
        vals = per[key]
        row: dict[str, Any] = {"mode": label, "min_score": ms_shown, "decay": dec, "queries": len(vals)}
        for m in METRICS:
            row[m] = statistics.fmean(v[m] for v in vals.values()) if vals else math.nan
        evs = [v["ev@10"] for v in vals.values() if "ev@10" in v]
        if evs:
            row["ev@10"] = statistics.fmean(evs)
        row["shown"] = statistics.fmean(shown[key]) if shown[key] else math.nan
        if neg_shown[key]:
            row["neg_queries"] = len(neg_shown[key])
            row["neg_shown"] = statistics.fmean(neg_shown[key])
            row["neg_empty"] = sum(1 for n in neg_shown[key] if n == 0) / len(neg_shown[key])
        rows.append(row)
    return {"set": s.name, "note": s.note, "category": s.category, "queries": len(labelled), "negatives": len(negatives),
            "workspaces": len(s.groups), "unresolved": sorted(set(unresolved)), "rows": rows,
            "per_query": per, "seconds": round(time.perf_counter() - t0, 1)}


# ---------------------------------------------------------------------------------------------
# Output
# ---------------------------------------------------------------------------------------------
def table(results: list[dict[str, Any]]) -> str:
    head = ("| set | mode | min_score | nDCG@10 | R@1 | R@3 | R@10 | MRR@10 | ev R@10 | shown | neg shown | neg empty |\n"
            "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    out = [head]
    for res in results:
        name = f"{res['set']} ({res['queries']}q" + (f", {res['negatives']} neg" if res["negatives"] else "") + ")"
        for i, r in enumerate(res["rows"]):
            neg = (f"{r['neg_shown']:.2f} | {r['neg_empty']:.0%}" if "neg_shown" in r else "- | -")
            ms = "-" if r["min_score"] is None else r["min_score"] if isinstance(r["min_score"], str) \
                else f"{r['min_score']:g}"
            ev = f"{r['ev@10']:.3f}" if "ev@10" in r else "-"
            out.append(f"| {name if i == 0 else ''} | {r['mode']} | {ms} | {r['ndcg@10']:.3f} |"
                       f" {r['recall@1']:.3f} | {r['recall@3']:.3f} | {r['recall@10']:.3f} | {r['mrr@10']:.3f} |"
                       f" {ev} | {r['shown']:.2f} | {neg} |")
    return "\n".join(out)


def paired_ci(diffs: list[float], n_boot: int = 2000, seed: int = 37) -> tuple[float, float, float]:
    """(mean, 2.5 %, 97.5 %) of a paired difference over queries: the mean and a percentile
    bootstrap interval (queries resampled with replacement, seeded)."""
    import random

    if not diffs:
        return math.nan, math.nan, math.nan
    rng = random.Random(seed)
    n = len(diffs)
    means = sorted(sum(diffs[rng.randrange(n)] for _ in range(n)) / n for _ in range(n_boot))
    return statistics.fmean(diffs), means[int(0.025 * n_boot)], means[int(0.975 * n_boot) - 1]


def _diff(a: dict[str, dict[str, float]], b: dict[str, dict[str, float]], metric: str) -> list[float]:
    return [a[q][metric] - b[q][metric] for q in a if q in b and metric in a[q] and metric in b[q]]


def delta_table(results: list[dict[str, Any]], metrics: tuple[str, ...] = ("ndcg@10", "recall@10")) -> str:
    """The default (``hybrid``) minus each reference, per set: plain BM25, plain convex fusion,
    the better side (keyword or vector at the same ``min_score``, whichever is better on the
    set) and the default's own ``min_score`` 0 row; mean paired difference and 95 % bootstrap
    interval over the set's labelled queries. Issue 37: none of these may be negative."""
    out = ["| set | metric | hybrid | - bm25 | - convex | - better side | - hybrid@0 |", "|---|---|---:|---:|---:|---:|---:|"]
    for res in results:
        per = res["per_query"]
        for m in metrics:
            h = per.get("hybrid", {})
            if not h:
                continue
            cells = []
            for ref in ("bm25", "convex", "side", "hybrid@0"):
                if ref == "side":
                    sides = [k for k in ("keyword", "vector") if per.get(k)]
                    ref = max(sides, key=lambda k: statistics.fmean(v[m] for v in per[k].values())) if sides else ""
                if not per.get(ref):
                    cells.append("-")
                    continue
                mean, lo, hi = paired_ci(_diff(h, per[ref], m))
                mark = "**" if hi < 0 else ""
                cells.append(f"{mark}{mean:+.3f}{mark} ({lo:+.3f}..{hi:+.3f})")
            hm = statistics.fmean(v[m] for v in h.values())
            out.append(f"| {res['set']} | {m} | {hm:.3f} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def against_table(results: list[dict[str, Any]], before: Path, rows: tuple[str, ...] = ("hybrid", "hybrid@0"),
                  metrics: tuple[str, ...] = ("ndcg@10", "recall@10", "ev@10")) -> str:
    """This run minus an earlier one (``--json`` output, or eval/results/*.per-query.json), paired by
    query id, per set and row: mean and 95 % bootstrap interval."""
    data = json.loads(before.read_text(encoding="utf-8"))
    old = ({r["set"]: r["per_query"] for r in data["sets"]} if isinstance(data["sets"], list)
           else {k: v["per_query"] for k, v in data["sets"].items()})
    out = [f"this run minus {before.name}, paired by query (mean, 95 % interval)", "",
           "| set | row | " + " | ".join(metrics) + " |", "|---|---|" + "---:|" * len(metrics)]
    for res in results:
        if res["set"] not in old:
            continue
        for row in rows:
            new_q, old_q = res["per_query"].get(row, {}), old[res["set"]].get(row, {})
            cells = []
            for m in metrics:
                d = _diff(new_q, old_q, m)
                if not d:
                    cells.append("-")
                    continue
                mean, lo, hi = paired_ci(d)
                cells.append(f"{mean:+.3f} ({lo:+.3f}..{hi:+.3f})")
            out.append(f"| {res['set']} | {row} | " + " | ".join(cells) + " |")
    return "\n".join(out)


CATEGORY_COLUMNS = ("hybrid", "hybrid@0", "keyword", "keyword@0", "vector", "vector@0", "bm25", "convex")


def category_table(results: list[dict[str, Any]], metric: str = "recall@10") -> str:
    """Per set with categories: ``metric`` per category (rows) and ranking (columns)."""
    out = []
    for res in results:
        cats: dict[str, str] = res.get("category") or {}
        per = res["per_query"]
        if not cats or not any(metric in v for v in per.get("hybrid", {}).values()):
            continue
        cols = [c for c in CATEGORY_COLUMNS if per.get(c)]
        out.append(f"\n{res['set']}: {metric} by category ({', '.join(cols)})\n")
        out.append("| category | n | " + " | ".join(cols) + " |")
        out.append("|---|---:|" + "---:|" * len(cols))
        groups: dict[str, list[str]] = {}
        for qid in per["hybrid"]:
            groups.setdefault(cats.get(qid, "?"), []).append(qid)
        for cat in [*sorted(groups), "all"]:
            qids = list(per["hybrid"]) if cat == "all" else groups[cat]
            vals = []
            for c in cols:
                xs = [per[c][q][metric] for q in qids if q in per[c] and metric in per[c][q]]
                vals.append(f"{statistics.fmean(xs):.3f}" if xs else "-")
            out.append(f"| {cat} | {len(qids)} | " + " | ".join(vals) + " |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    global MAX_RESULTS
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sets", default=",".join(ALL_SETS), help="comma-separated (default: all but "
                    + ", ".join(MORE_SETS) + "): " + ", ".join(ALL_SETS + MORE_SETS))
    ap.add_argument("--quick", action="store_true", help=f"cosqa with {QUICK_COSQA} queries")
    ap.add_argument("--cache", type=Path, default=DEFAULT_CACHE,
                    help="workspaces and indexes (default: %(default)s)")
    ap.add_argument("--rebuild", action="store_true", help="rebuild the indexes even when their stamp matches")
    ap.add_argument("--json", type=Path, help="also write the results (with per-query metrics) to this file")
    ap.add_argument("--by-category", action="store_true",
                    help="also print R@10 (and, where labelled, evidence R@10) per category of the sets that have them")
    ap.add_argument("--deltas", action="store_true",
                    help="also print the default minus bm25 / convex / its better side / itself at min_score 0,"
                         " with 95%% bootstrap intervals")
    ap.add_argument("--against", type=Path, metavar="JSON",
                    help="also compare with an earlier run (--json output or eval/results/*.per-query.json)")
    ap.add_argument("--index-only", action="store_true",
                    help="only build (or check) the sets' indexes in the cache, measure nothing")
    ap.add_argument("--results", type=int, default=MAX_RESULTS, metavar="N",
                    help="results ranked per query (default %(default)s), and so candidates per side"
                         " (N x query.candidate_multiplier, at most 200): 10 measures as a search asking for"
                         " 10 results does (40 candidates a side)")
    a = ap.parse_args(argv)
    MAX_RESULTS = max(10, a.results)

    from memory_core.config import load_settings
    from memory_core.embeddings.registry import create_provider

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    names = [n.strip() for n in a.sets.split(",") if n.strip()]
    sets = [make_set(n, a.quick, a.cache) for n in names]
    code = indexer_version()
    a.cache.mkdir(parents=True, exist_ok=True)
    provider, reason = create_provider(load_settings(None, {"workspace": str(a.cache), "provider": "local"}))
    log(f"indexer code {code}; provider {provider.name}/{provider.model}; cache {a.cache}")
    results = []
    for s in sets:
        log(f"{s.name}: {len(s.groups)} workspace(s)")
        if a.index_only:
            for group in s.groups:
                ensure_index(s, group, a.cache, code, provider, a.rebuild, log)
            continue
        res = run_set(s, a.cache, code, provider, a.rebuild, log)
        if res["unresolved"]:
            log(f"  warning: {len(res['unresolved'])} judged ids are not indexed files: {res['unresolved'][:5]}")
        log(f"  {res['queries']} labelled queries, {res['negatives']} negatives, {res['seconds']} s")
        results.append(res)
    if a.index_only:
        return 0
    print(f"memory-core eval sets, {date.today().isoformat()}, indexer {code}, {provider.name}/{provider.model};"
          f" {MAX_RESULTS} results ranked per query, 'shown' counts at most query.max_results")
    print(table(results))
    if a.deltas:
        print("\nthe default minus each reference, paired by query (mean, 95 % interval; bold: the interval is below 0)\n")
        print(delta_table(results))
    if a.by_category:
        print(category_table(results, "recall@10"))
        print(category_table(results, "ev@10"))
    if a.against:
        print()
        print(against_table(results, a.against))
    if a.json:
        a.json.write_text(json.dumps({"date": date.today().isoformat(), "indexer": code, "provider": provider.name,
                                      "model": provider.model, "sets": results}, indent=1, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
