"""A synthetic corpus of realistic Markdown memory files, deterministic for a seed."""

from __future__ import annotations

import random
from datetime import date, timedelta
from pathlib import Path

WORDS = ["postgres", "replication", "lag", "replica", "primary", "standby", "query", "index", "vacuum", "deploy", "rollback", "canary", "release", "kubernetes", "pod", "node", "cluster", "ingress", "gateway", "latency", "p99", "timeout", "retry", "backoff", "rate", "limit", "token", "bucket", "meeting", "priya", "marcus", "dana", "minji", "standup", "retro", "planning", "roadmap", "quarter", "budget", "hiring", "interview", "lisbon", "trip", "hotel", "flight", "museum", "dinner", "recipe", "garlic", "onion", "tomato", "rice", "beans", "coffee", "bakery", "dentist", "appointment", "insurance", "invoice", "tax", "receipt", "bank", "transfer", "rent", "landlord", "plumber", "book", "chapter", "author", "novel", "essay", "notes", "idea", "draft", "review", "feedback", "decision", "tradeoff", "risk", "migration", "schema", "column", "backfill", "batch", "job", "queue", "worker", "cron", "schedule", "alert", "pager", "incident", "postmortem", "root", "cause", "mitigation", "action", "item", "owner", "deadline", "follow", "up", "summary", "context", "memory", "search", "embedding", "vector", "chunk", "model", "provider", "cache", "hash", "sqlite", "fts", "bm25", "hybrid", "ranking"]
CJK = ["金银价格", "服务器错误", "サーバー", "確認", "서버 에러", "확인 부탁"]


def _sentence(rng: random.Random, n: int | None = None) -> str:
    n = n or rng.randint(6, 18)
    words = [rng.choice(WORDS) for _ in range(n)]
    if rng.random() < 0.03:
        words.insert(rng.randrange(len(words)), rng.choice(CJK))
    s = " ".join(words)
    return s[0].upper() + s[1:] + "."


def make_file(rng: random.Random, title: str, target_chars: int) -> str:
    out = [f"# {title}", ""]
    size = 0
    while size < target_chars:
        kind = rng.random()
        if kind < 0.2:
            block = f"## {rng.randint(7, 22):02d}:{rng.randint(0, 59):02d} {_sentence(rng, 4)[:-1]}"
        elif kind < 0.55:
            block = "\n".join(f"- {_sentence(rng)}" for _ in range(rng.randint(2, 6)))
        elif kind < 0.62:
            block = "```bash\n" + "\n".join(
                f"{rng.choice(['psql', 'kubectl', 'git', 'curl'])} {rng.choice(WORDS)} --{rng.choice(WORDS)}"
                for _ in range(rng.randint(1, 4))) + "\n```"
        else:
            block = " ".join(_sentence(rng) for _ in range(rng.randint(2, 6)))
        out.append(block)
        out.append("")
        size += len(block) + 1
    return "\n".join(out)


def generate(root: Path, n_files: int, *, seed: int = 7, mean_chars: int = 4000) -> list[Path]:
    """Write ``n_files`` Markdown files under ``root`` (MEMORY.md, daily logs, topic files)."""
    rng = random.Random(seed)
    mem = root / "memory"
    mem.mkdir(parents=True, exist_ok=True)
    paths = [root / "MEMORY.md"]
    paths[0].write_text(make_file(rng, "Long-term memory", mean_chars))
    day = date(2020, 1, 1)
    topics = ["projects", "people", "howto", "reading"]
    for i in range(1, n_files):
        if i % 3:
            p = mem / f"{(day + timedelta(days=i)).isoformat()}.md"
            title = p.stem
        else:
            sub = mem / topics[i % len(topics)] / f"group-{i // 500:03d}"
            sub.mkdir(parents=True, exist_ok=True)
            p = sub / f"topic-{i:06d}.md"
            title = f"Topic {i}"
        chars = max(200, int(rng.lognormvariate(0, 0.6) * mean_chars * 0.85))
        p.write_text(make_file(rng, title, chars))
        paths.append(p)
    return paths
