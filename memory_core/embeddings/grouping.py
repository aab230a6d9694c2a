"""Request groups: as few requests as the provider's documented limits allow.

The reference flushed a group at 8,000 UTF-8 bytes whatever the provider, which costs about
40x more OpenAI requests than its limits require. Here a group is filled greedily up to the
provider's inputs-per-request and (estimated) tokens-per-request limits, with a safety margin
for the estimate; a provider that still answers "too many tokens" gets the group split in two.
"""

from __future__ import annotations

from collections.abc import Sequence

TOKEN_MARGIN = 0.95  # the estimate is already conservative; a refused group is split in two


def plan_groups(token_counts: Sequence[int], *, max_inputs: int, max_tokens: int,
                margin: float = TOKEN_MARGIN) -> list[range]:
    """Split items (in order) into contiguous ranges that respect both limits."""
    budget = max(1, int(max_tokens * margin))
    groups: list[range] = []
    start = 0
    tokens = 0
    for i, t in enumerate(token_counts):
        count = i - start
        if count and (count >= max_inputs or tokens + t > budget):
            groups.append(range(start, i))
            start, tokens = i, 0
        tokens += t
    if start < len(token_counts):
        groups.append(range(start, len(token_counts)))
    return groups
