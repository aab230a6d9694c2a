"""The labelled sets' generators and the set runner's cache key (eval/), without a model.

* eval/chats.py: its labels, as committed, are what the generator writes; every label points at
  a transcript that holds the planted message, read back through memory-core's own session
  parser (so the evidence line numbers are the JSONL lines the indexer records); the edge
  questions' answers really sit in a later chunk than the question's message, at the chunking
  the index uses; the "date-next" answers are stamped on another UTC day than the day named.
* eval/run_sets.py: the indexer hash covers every module the indexer loads, so a cached index
  is never reused after a change to what it holds.
"""

from __future__ import annotations

import csv
import filecmp
import json
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from memory_core.index.chunking import chunk_markdown, remap_chunk_lines
from memory_core.sources.sessions import parse_session_file
from tests.conftest import ROOT

EVAL = ROOT / "eval"
sys.path.insert(0, str(EVAL))

import chats  # noqa: E402  (eval/chats.py)


@pytest.fixture(scope="module")
def chats_ws(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return chats.build_workspace(tmp_path_factory.mktemp("chats") / "ws")


def _tsv(path: Path) -> list[dict[str, str]]:
    with open(path, encoding="utf-8", newline="") as fh:
        return list(csv.DictReader(fh, delimiter="\t", quoting=csv.QUOTE_NONE))


def test_chats_labels_are_the_generators(tmp_path: Path) -> None:
    counts = chats.write_labels(tmp_path)
    for name in ("queries.jsonl", "qrels.tsv", "labels.tsv", "evidence.tsv", "negatives.tsv", "qrels-notes.tsv",
                 "evidence-notes.tsv"):
        assert filecmp.cmp(tmp_path / name, chats.HERE / name, shallow=False), f"eval/chats/{name} is stale"
    assert counts["questions"] == 189 and counts["labelled"] == 171 and counts["negative"] == 18
    cats = {k: v for k, v in counts.items() if k not in ("sessions", "questions", "labelled")}
    assert len(cats) == 12 and min(cats.values()) >= 8


def test_chats_evidence_lines_hold_the_planted_messages(chats_ws: Path) -> None:
    files = {p.name for p in (chats_ws / "sessions").iterdir()}
    assert len(files) == 46
    qrels = _tsv(chats.HERE / "qrels.tsv")
    assert {r["corpus-id"].removeprefix("sessions/") for r in qrels} <= files
    queries = [json.loads(line) for line in (chats.HERE / "queries.jsonl").read_text().splitlines()]
    negatives = {r["query-id"] for r in _tsv(chats.HERE / "negatives.tsv")}
    assert negatives == {q["_id"] for q in queries if q["category"] == "negative"}
    assert not negatives & {r["query-id"] for r in qrels}

    planted = {f"{s}: {t}" for evs in chats.EVENTS.values() for s, t, _ in evs}
    planted |= {f"{s}: {t}" for _, pair in chats.EDGES for s, t, _ in pair}
    evidence = _tsv(chats.HERE / "evidence.tsv")
    assert len(evidence) >= 171
    assert_evidence_is_planted(chats_ws, files, evidence, planted)


def assert_evidence_is_planted(ws: Path, files: set[str], evidence: list[dict[str, str]], planted: set[str]) -> None:
    """Each evidence row's JSONL line of ``ws/sessions`` holds a planted message (read by the real parser)."""
    docs = {name: parse_session_file(ws / "sessions" / name) for name in files}
    for r in evidence:
        doc = docs[r["corpus-id"].removeprefix("sessions/")]
        line = int(r["jsonl-line"])
        assert line in doc.line_map, r
        text = doc.content.split("\n")[doc.line_map.index(line)]
        assert text.split(": ", 1)[1] in planted, (r, text)  # "User: Ben: ..." -> "Ben: ..."


def test_chats_notes_variant_holds_the_same_evidence(tmp_path: Path) -> None:
    ws = chats.build_workspace(tmp_path / "notes", "notes")
    notes = {f"memory/{p.name}": p.read_text(encoding="utf-8").split("\n") for p in (ws / "memory").iterdir()}
    assert len(notes) == 21 and all(n.startswith("memory/2026-01-") for n in notes)
    planted = {f"{s}: {t}" for evs in chats.EVENTS.values() for s, t, _ in evs}
    planted |= {f"{s}: {t}" for _, pair in chats.EDGES for s, t, _ in pair}
    evidence = _tsv(chats.HERE / "evidence-notes.tsv")
    assert len(evidence) >= 171
    for r in evidence:
        assert notes[r["corpus-id"]][int(r["line"]) - 1] in planted, r
    # the same questions are labelled in both variants
    assert {r["query-id"] for r in _tsv(chats.HERE / "qrels-notes.tsv")} == {
        r["query-id"] for r in _tsv(chats.HERE / "qrels.tsv")}


def test_chats_edge_answers_sit_in_a_later_chunk(chats_ws: Path) -> None:
    by_key = chats.plan()["sessions"]
    for key, ((_, q_text, _), (_, a_text, _)) in chats.EDGES:
        doc = parse_session_file(chats_ws / "sessions" / by_key[key]["file"])
        lines = doc.content.split("\n")
        q = next(i for i, t in enumerate(lines) if t.endswith(q_text))
        a = next(i for i, t in enumerate(lines) if t.endswith(a_text))
        chunks = remap_chunk_lines(chunk_markdown(doc.content, chats.CHUNK_TOKENS, chats.CHUNK_OVERLAP), doc.line_map)
        q_line, a_line = doc.line_map[q], doc.line_map[a]
        assert any(c.start_line <= q_line <= c.end_line for c in chunks)
        assert not any(c.start_line <= q_line and a_line <= c.end_line for c in chunks), key


def test_chats_next_day_answers_are_stamped_after_the_day_named(chats_ws: Path) -> None:
    stamps: dict[tuple[str, int], str] = {}
    for p in (chats_ws / "sessions").iterdir():
        for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1):
            stamps[(f"sessions/{p.name}", n)] = json.loads(line)["timestamp"]
    cats = {json.loads(x)["_id"]: json.loads(x) for x in (chats.HERE / "queries.jsonl").read_text().splitlines()}
    kinds: dict[str, set[str]] = {}  # question -> how its answers are stamped
    for r in _tsv(chats.HERE / "evidence.tsv"):
        if cats[r["query-id"]]["category"] != "date-next":
            continue
        stamp = datetime.fromisoformat(stamps[(r["corpus-id"], int(r["jsonl-line"]))].replace("Z", "+00:00"))
        got = kinds.setdefault(r["query-id"], set())
        if stamp.utcoffset() and stamp.date() != stamp.astimezone(UTC).date():
            got.add("zone")  # Mo's thread: his local day is not the UTC day
        elif not stamp.utcoffset() and stamp.hour < 3:
            got.add("midnight")  # the evening's session went on after midnight
    assert len(kinds) == 10 and all(kinds.values()), kinds  # each has an answer stamped off the day named
    assert set().union(*kinds.values()) == {"zone", "midnight"}


def test_indexer_hash_covers_every_module_the_indexer_loads() -> None:
    """A cached index is reused while the hash of ``INDEX_SIDE`` is unchanged: every module the
    indexing pipeline imports must be in it (else an indexing change would reuse stale indexes),
    and loading the settings loads nothing of the query side."""
    code = ("import sys; import memory_core.config; before = set(sys.modules);"
            "import memory_core.index.pipeline, memory_core.index.indexer, memory_core.index.chunking;"
            "print('before', *sorted(m for m in before if m.startswith('memory_core.')));"
            "print('after', *sorted(m for m in set(sys.modules) - before if m.startswith('memory_core.')))")
    out = dict(line.split(" ", 1) for line in subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT).stdout.splitlines())
    import run_sets  # eval/run_sets.py

    packages = {p.name for p in (ROOT / "memory_core").iterdir() if p.is_dir()}

    def tops(mods: str) -> set[str]:
        return {t if t in packages else t + ".py" for t in (m.split(".")[1] for m in mods.split())}

    by_index = tops(out["after"]) - {"failpoints.py"}
    assert by_index and by_index <= set(run_sets.INDEX_SIDE), by_index - set(run_sets.INDEX_SIDE)
    assert tops(out["before"]) <= set(run_sets.INDEX_SIDE)


def test_paired_intervals_and_comparison(tmp_path: Path) -> None:
    import run_sets  # eval/run_sets.py

    assert run_sets.paired_ci([0.5] * 20) == (0.5, 0.5, 0.5)
    mean, lo, hi = run_sets.paired_ci([1.0] * 10 + [0.0] * 10)
    assert mean == 0.5 and 0.2 <= lo < 0.5 < hi <= 0.8
    assert run_sets.evidence_recall([("a", 1, 10), ("b", 5, 9)], [("a", 10), ("b", 4), ("c", 5)]) == 1 / 3

    per = {"hybrid": {"q1": {"recall@10": 1.0, "ndcg@10": 1.0}, "q2": {"recall@10": 0.0, "ndcg@10": 0.0}},
           "bm25": {"q1": {"recall@10": 1.0, "ndcg@10": 0.5}, "q2": {"recall@10": 1.0, "ndcg@10": 1.0}},
           "keyword": {"q1": {"recall@10": 0.0, "ndcg@10": 0.0}, "q2": {"recall@10": 0.0, "ndcg@10": 0.0}}}
    res = [{"set": "s", "per_query": per}]
    table = run_sets.delta_table(res, ("recall@10",))
    assert "| s | recall@10 | 0.500 | -0.500 (-1.000..+0.000) | - | +0.500 (+0.000..+1.000) | - |" in table
    before = tmp_path / "before.json"
    before.write_text(json.dumps({"sets": [{"set": "s", "per_query": {"hybrid": per["bm25"]}}]}))
    assert "| s | hybrid | -0.250 (-1.000..+0.500) | -0.500 (-1.000..+0.000) | - |" in run_sets.against_table(res, before)
