"""Splitting a client batch by tokens (pure)."""

from __future__ import annotations

from collections.abc import Sequence


def plan_chunks(lengths: Sequence[int], token_budget: int) -> list[range]:
    """Consecutive slices of the inputs, each holding at most `token_budget` tokens (an input longer
    than the budget gets a slice of its own). Consecutive, so concatenating the chunks' results in
    plan order gives the inputs' order back."""
    if token_budget < 1:
        raise ValueError("token_budget must be at least 1")
    chunks: list[range] = []
    start, tokens = 0, 0
    for i, n in enumerate(lengths):
        if i > start and tokens + n > token_budget:
            chunks.append(range(start, i))
            start, tokens = i, 0
        tokens += n
    if start < len(lengths):
        chunks.append(range(start, len(lengths)))
    return chunks
