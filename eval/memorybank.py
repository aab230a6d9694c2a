"""MemoryBank (Zhong et al. 2023, MIT) as memory-core workspaces, with our own relevance labels.

    python eval/memorybank.py --beir                       # eval/memorybank/{en,cn}/ from labels.tsv
    python eval/memorybank.py --out DIR [--variant sessions|notes] [--lang en,cn]

The source (``../shared/eval/memorybank``, kept unchanged; its LICENSE goes with any copy) has,
per language, 15 users with ten dated days (2023-04-27 .. 2023-05-06) of ``{query, response}``
turns, and 5-7 probing questions per user. Each user becomes one workspace:

* ``sessions`` variant: ``sessions/2026-MM-DD.jsonl`` per day, in the transcript format
  :mod:`memory_core.sources.sessions` indexes: a ``session`` header record, then one ``message`` record
  per turn side (user = the query, assistant = the response), timestamped on that day from
  19:00 UTC, three minutes apart; ``memory-core.toml`` has ``sources = ["memory", "sessions"]``.
* ``notes`` variant: ``memory/2026-MM-DD.md`` per day, the turns as ``**User:** ...`` /
  ``**Assistant:** ...`` paragraphs.

The year is shifted 2023 -> 2026 (month and day kept): with today 2026-11-26 a question naming
"May 4th" resolves (latest such day not after today) to 2026-05-04, the day it means. Days
without turns (one English user has an empty 2023-05-05) get no file.

Labels: ``eval/memorybank/labels.tsv`` (lang, user, question number, text, corpus id, relevance,
evidence), written by reading each user's history, never from our search; questions with no
answer are in ``negatives.tsv``. ``--beir`` turns them into ``eval/memorybank/<lang>/queries.jsonl``
(``_id`` = ``<user>-<n>``, user names with spaces -> ``_``), ``qrels.tsv`` (transcript ids
``sessions/2026-MM-DD.jsonl``) and ``qrels-notes.tsv`` (``memory/2026-MM-DD.md``). Negatives are
in ``queries.jsonl`` too (they have no qrels, so ``memory-core eval`` skips them; the runner
counts what search returns for them).
"""

from __future__ import annotations

import argparse
import csv
import json
import shutil
import sys
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
HERE = ROOT / "eval" / "memorybank"


def shared_eval() -> Path:
    """The shared data folder (cosqa, memorybank): ``$MEMORY_CORE_EVAL_DATA``, else the first
    ``shared/eval`` beside the checkout or beside its parent (a worktree in ``wt/<name>``)."""
    import os

    env = os.environ.get("MEMORY_CORE_EVAL_DATA")
    if env:
        return Path(env)
    for base in (ROOT.parent, ROOT.parent.parent):
        if (base / "shared" / "eval").is_dir():
            return base / "shared" / "eval"
    return ROOT.parent / "shared" / "eval"


DEFAULT_DATA = shared_eval() / "memorybank"
LANGS = ("en", "cn")
YEAR = 2026
TOML = 'sources = ["memory", "sessions"]\nprovider = "local"\n'


def user_id(name: str) -> str:
    """The id used in query ids and workspace folder names: the name, spaces as ``_``."""
    return "_".join(name.split())


def shift(day: str) -> str:
    """``2023-05-04`` -> ``2026-05-04``."""
    return f"{YEAR}{day[4:]}"


def load(lang: str, data: Path = DEFAULT_DATA) -> list[dict[str, Any]]:
    """The users of one language: ``{id, name, days: {2026-MM-DD: [turn]}, questions: [str]}``."""
    bank = json.loads((data / lang / f"memory_bank_{lang}.json").read_text(encoding="utf-8"))
    questions: dict[str, list[str]] = {}
    for line in (data / lang / f"probing_questions_{lang}.jsonl").read_text(encoding="utf-8").splitlines():
        if line.strip():
            questions.update({k.strip(): v for k, v in json.loads(line).items()})
    users = []
    for key, u in bank.items():
        name = key.strip()
        days = {shift(d): turns for d, turns in sorted(u["history"].items()) if turns}
        users.append({"id": user_id(name), "name": name, "days": days, "questions": questions[name]})
    return users


def transcript_lines(day: str, turns: list[dict[str, str]], session_id: str) -> list[str]:
    """JSONL records of one day: a session header, then user/assistant messages 3 minutes apart."""
    t = datetime.fromisoformat(f"{day}T19:00:00+00:00")

    def iso(x: datetime) -> str:
        return x.strftime("%Y-%m-%dT%H:%M:%S.000Z")

    recs: list[dict[str, Any]] = [{"type": "session", "version": 3, "id": session_id, "timestamp": iso(t),
                                   "cwd": "/home/user"}]
    n = 0
    for turn in turns:
        for role, text in (("user", turn["query"]), ("assistant", turn["response"])):
            t += timedelta(minutes=3 if role == "user" else 1)
            n += 1
            recs.append({"type": "message", "id": f"{session_id}-{n:03d}", "timestamp": iso(t),
                         "message": {"role": role, "content": [{"type": "text", "text": text}],
                                     "timestamp": int(t.timestamp() * 1000)}})
    return [json.dumps(r, ensure_ascii=False) for r in recs]


def daily_note(day: str, turns: list[dict[str, str]]) -> str:
    parts = [f"# {day}", ""]
    for turn in turns:
        parts += [f"**User:** {turn['query'].strip()}", "", f"**Assistant:** {turn['response'].strip()}", ""]
    return "\n".join(parts)


def build_workspace(user: dict[str, Any], dest: Path, variant: str = "sessions") -> Path:
    """Write one user's workspace into *dest* (replaced if it exists)."""
    if dest.exists():
        shutil.rmtree(dest)
    (dest / "memory").mkdir(parents=True)
    if variant == "sessions":
        (dest / "sessions").mkdir()
        for i, (day, turns) in enumerate(user["days"].items(), 1):
            sid = f"mb-{user['id']}-{i:02d}"
            (dest / "sessions" / f"{day}.jsonl").write_text("\n".join(transcript_lines(day, turns, sid)) + "\n",
                                                             encoding="utf-8")
        (dest / "memory-core.toml").write_text(TOML, encoding="utf-8")
    elif variant == "notes":
        for day, turns in user["days"].items():
            (dest / "memory" / f"{day}.md").write_text(daily_note(day, turns), encoding="utf-8")
        (dest / "memory-core.toml").write_text(TOML, encoding="utf-8")
    else:
        raise ValueError(f"unknown variant {variant!r}")
    return dest


def build(lang: str, variant: str, out: Path, data: Path = DEFAULT_DATA) -> list[tuple[str, Path]]:
    """All 15 workspaces of one language and variant under *out*; returns ``[(user id, path)]``."""
    out.mkdir(parents=True, exist_ok=True)
    license_src = data / "LICENSE"
    if license_src.exists():
        shutil.copyfile(license_src, out / "LICENSE")
    return [(u["id"], build_workspace(u, out / u["id"], variant)) for u in load(lang, data)]


def read_labels(path: Path = HERE / "labels.tsv") -> list[dict[str, str]]:
    with open(path, encoding="utf-8", newline="") as fh:
        return list(csv.DictReader(fh, delimiter="\t", quoting=csv.QUOTE_NONE))


def write_beir(data: Path = DEFAULT_DATA, out: Path = HERE) -> dict[str, dict[str, int]]:
    """queries.jsonl, qrels.tsv and qrels-notes.tsv per language; checks every label against the data."""
    labels = read_labels(out / "labels.tsv")
    negatives = read_labels(out / "negatives.tsv")
    counts: dict[str, dict[str, int]] = {}
    for lang in LANGS:
        users = {u["name"]: u for u in load(lang, data)}
        qdir = out / lang
        qdir.mkdir(parents=True, exist_ok=True)
        rows = [r for r in labels if r["lang"] == lang]
        neg = {(r["user"], int(r["question"])) for r in negatives if r["lang"] == lang}
        labelled = {(r["user"], int(r["question"])) for r in rows}
        queries = []
        for name, u in users.items():
            for n, text in enumerate(u["questions"], 1):
                key = (name, n)
                if key not in labelled and key not in neg:
                    raise SystemExit(f"{lang} {name} question {n} has neither labels nor a negatives row")
                queries.append({"_id": f"{u['id']}-{n}", "text": text, "user": u["id"],
                                **({"negative": True} if key in neg else {})})
        for r in rows:
            u = users[r["user"]]
            day = r["corpus-id"].removeprefix("sessions/").removesuffix(".jsonl")
            if day not in u["days"]:
                raise SystemExit(f"{lang} {r['user']} {r['question']}: {r['corpus-id']} is not a day with turns")
            if u["questions"][int(r["question"]) - 1] != r["text"]:
                raise SystemExit(f"{lang} {r['user']} {r['question']}: the question text differs from the data")
        with open(qdir / "queries.jsonl", "w", encoding="utf-8") as fh:
            fh.writelines(json.dumps(q, ensure_ascii=False) + "\n" for q in queries)
        for fname, to_id in (("qrels.tsv", lambda c: c),
                             ("qrels-notes.tsv", lambda c: "memory/" + c.removeprefix("sessions/")[:-6] + ".md")):
            with open(qdir / fname, "w", encoding="utf-8") as fh:
                fh.write("query-id\tcorpus-id\tscore\n")
                for r in rows:
                    fh.write(f"{users[r['user']]['id']}-{r['question']}\t{to_id(r['corpus-id'])}\t{r['relevance']}\n")
        counts[lang] = {"questions": len(queries), "labelled": len(labelled), "negatives": len(neg),
                        "judgments": len(rows)}
    return counts


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA, help="the MemoryBank folder (default: %(default)s)")
    ap.add_argument("--beir", action="store_true", help="write eval/memorybank/<lang>/ from labels.tsv")
    ap.add_argument("--out", type=Path, help="build the workspaces under OUT/<lang>-<variant>/<user>/")
    ap.add_argument("--variant", choices=["sessions", "notes"], default="sessions")
    ap.add_argument("--lang", default="en,cn")
    a = ap.parse_args(argv)
    if not a.beir and not a.out:
        ap.error("nothing to do: give --beir and/or --out")
    if a.beir:
        for lang, c in write_beir(a.data).items():
            print(f"{lang}: {c}")
    if a.out:
        for lang in a.lang.split(","):
            ws = build(lang, a.variant, a.out / f"{lang}-{a.variant}", a.data)
            print(f"{lang}-{a.variant}: {len(ws)} workspaces under {a.out / f'{lang}-{a.variant}'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
