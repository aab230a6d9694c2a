"""Screen a query-side idea on a chats set's aggregating questions: ask about a person's topic
without the person's name, among the messages that name them.

    PYTHONPATH=. python eval/screen_name_topic.py [--set chats-dense] [--category multi]

The local model reads a name as most of a short message: "What are Kate's hobbies?" meets
"Kate: idk tbh" at cosine 0.62 and the evidence "Kate: pottery tonight: glazing ..." at 0.38, so
the messages that are most *about Kate* outrank the ones about her hobbies. For each labelled
question of ``--category`` that names a speaker of the set, every message of the set's transcripts
is embedded alone (its role label as indexed, ``Assistant: Kate: ...``), and the rank of each
evidence message is printed among all messages:

- ``full``: by the cosine of the question as asked (what the vector side does, one message at a time);
- ``named``: by the same cosine, among the messages that name the person (the restriction alone);
- ``topic``: by the cosine of the question with the name replaced by a pronoun (``What are their
  hobbies?``), among the messages that name the person.

Message level only: the index embeds a transcript chunk and its exchanges or windows of 4
messages, not single messages (docs/search.md, "Checked in the sixteenth session"). Uses
run_sets' cached index workspace (built first if missing).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import run_sets  # noqa: E402  (eval/run_sets.py)
import where_missed  # noqa: E402  (eval/where_missed.py)

_SPEAKER = re.compile(r"^([A-Z][a-z]+):")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--set", default="chats-dense", help="a set with evidence: chats, chats-dense")
    ap.add_argument("--category", default="multi")
    ap.add_argument("--cache", type=Path, default=run_sets.DEFAULT_CACHE)
    a = ap.parse_args(argv)

    s, provider, settings = where_missed.evidence_index(a.set, a.cache)
    msgs: list[tuple[str, int, str, str]] = []  # (path, JSONL line, role, text)
    for f in sorted(settings.sessions_dir.glob("*.jsonl")):
        rel = f"sessions/{f.name}"
        for n, line in enumerate(f.read_text(encoding="utf-8").splitlines(), 1):
            rec = json.loads(line)
            if rec.get("type") != "message":
                continue
            m = rec["message"]
            text = " ".join(c.get("text", "") for c in m["content"] if c.get("type") == "text")
            msgs.append((rel, n, m["role"], text))
    speakers = {m.group(1) for *_, t in msgs if (m := _SPEAKER.match(t))}
    vecs = np.asarray(provider.embed_documents([f"{r.capitalize()}: {t}" for _, _, r, t in msgs]), dtype=np.float32)

    def ranks(scores: np.ndarray, keep: np.ndarray, idxs: list[int]) -> list[int]:
        order = np.argsort(-np.where(keep, scores, -np.inf), kind="stable")
        pos = {int(j): r for r, j in enumerate(order)}
        return sorted(pos[i] + 1 for i in idxs)

    def embed(text: str) -> np.ndarray:
        return np.asarray(provider.embed_query(text), dtype=np.float32).reshape(-1)

    everyone = np.ones(len(msgs), dtype=bool)
    for qid in sorted(s.evidence):
        if s.category.get(qid) != a.category:
            continue
        q = s.queries[qid]
        names = [w for w in dict.fromkeys(re.findall(r"[A-Z][a-z]+", q)) if w in speakers]
        idxs = [i for i, (p, n, _, _) in enumerate(msgs) if (p, n) in {(c, ln) for c, ln in s.evidence[qid]}]
        full = vecs @ embed(q)
        line = f"{qid} {q!r}: full {ranks(full, everyone, idxs)}"
        if names:
            named = np.array([any(nm in t for nm in names) for *_, t in msgs])
            topic = re.sub(r"\b(" + "|".join(names) + r")('s)?\b",
                           lambda m: "their" if m.group(2) else "they", q)
            line += (f" | named {ranks(full, named, idxs)} | topic {ranks(vecs @ embed(topic), named, idxs)}"
                     f" of {int(named.sum())} ({topic!r})")
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
