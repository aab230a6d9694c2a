"""Ranking quality on the synthetic conversational set (eval/convo.py: 40 transcripts, planted
facts, 69 labelled questions and 11 with no answer), indexed with the real local model.

The figures are eval/README.md's; the bounds below sit a little under them, so a change that costs
ranking or recall on conversational memory fails here before it reaches a user.
"""

from __future__ import annotations

import importlib.util
import statistics
from pathlib import Path

import pytest

from memory_core.apps.evaluation import file_ranking, query_metrics
from memory_core.config import Settings, load_settings
from memory_core.index.pipeline import run_index
from memory_core.query.search import Searcher

pytest.importorskip("sentence_transformers")

EVAL = Path(__file__).resolve().parents[1] / "eval"


def _convo():  # eval/ is not a package
    spec = importlib.util.spec_from_file_location("convo_eval", EVAL / "convo.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, float]]:
    convo = _convo()
    ws = convo.build_workspace(tmp_path_factory.mktemp("convo") / "ws")
    s: Settings = load_settings(ws / "memory-core.toml", {"workspace": str(ws)})
    run_index(s)
    queries, qrels = convo.labels()
    out: dict[str, dict[str, list[float]]] = {}
    with Searcher(s) as searcher:
        n = searcher.candidate_count(10)
        for qid, text in queries.items():
            cands = searcher.retrieve(text, n)
            for mode in ("hybrid", "keyword", "vector"):
                for ms in (None, 0.0):
                    key = mode + ("@0" if ms == 0.0 else "")
                    res = searcher.rank(cands, max_results=10, min_score=ms, mode=mode)
                    row = out.setdefault(key, {"ndcg@10": [], "recall@10": [], "neg_shown": [], "neg_empty": []})
                    if qid in qrels:
                        m = query_metrics(file_ranking(r.path for r in res), qrels[qid])
                        row["ndcg@10"].append(m["ndcg@10"])
                        row["recall@10"].append(m["recall@10"])
                    else:
                        row["neg_shown"].append(len(res))
                        row["neg_empty"].append(float(not res))
    return {k: {m: statistics.fmean(v) for m, v in row.items()} for k, row in out.items()}


def test_the_hybrid_beats_both_of_its_sides(measured: dict[str, dict[str, float]]) -> None:
    for suffix in ("", "@0"):
        h, k, v = (measured[m + suffix]["ndcg@10"] for m in ("hybrid", "keyword", "vector"))
        assert h >= max(k, v), (suffix, h, k, v)
    assert measured["hybrid"]["ndcg@10"] >= 0.88  # 0.912 measured; 0.714 before exchange vectors
    assert measured["hybrid"]["recall@10"] >= 0.90  # 0.935


def test_the_default_threshold_keeps_most_of_what_min_score_0_finds(measured: dict[str, dict[str, float]]) -> None:
    loss = measured["hybrid@0"]["recall@10"] - measured["hybrid"]["recall@10"]
    # min_score unset empties only the answers to queries memory does not support (docs/search.md,
    # "The threshold by support"); since the twenty-fifth session a question that shares no word
    # with memory is supported when the model knows its words ("A question in other words than
    # memory's"), so none of the labelled answers is emptied (0.014 lost before, for "Who has my
    # power tool at the moment?"; 0.029 with the plain 0.15 threshold on the answer, 0.051 on each
    # result)
    assert loss < 0.01, loss
    # questions with no answer: the one whose missing word is only pieces to the model ("When does
    # my passport expire?": "expire") still gets nothing at the default (1 of 11 measured; 3 before
    # the twenty-fifth session, when every question sharing no word with memory kept the
    # threshold; 8 with the plain threshold, which cost the answers above), none at 0
    assert measured["hybrid"]["neg_empty"] >= 1 / 11 and measured["hybrid@0"]["neg_empty"] == 0
