"""Ragged packing: the sequences of a batch laid end to end, no padding between them. Token-wise layers
(embeddings, linear, LayerNorm, GELU) run on the packed tokens; attention runs per length group, where
the only padding is inside a group of near-equal lengths."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch


@dataclass
class Packed:
    """One batch as packed tensors. `seg[t]` is the sequence of token t; padding tokens (only when the
    batch is padded to a graph bucket) carry seg == len(lengths), a segment of their own."""

    input_ids: torch.Tensor  # [T] int64
    positions: torch.Tensor  # [T] int64
    seg: torch.Tensor  # [T] int64
    lengths: list[int]
    token_types: torch.Tensor | None = None  # [T] int64 (BERT segment ids of sentence pairs); None = all 0

    @property
    def num_tokens(self) -> int:
        return int(self.input_ids.shape[0])

    @property
    def num_sequences(self) -> int:
        return len(self.lengths)

    def tensors(self) -> list[torch.Tensor]:
        return [t for t in (self.input_ids, self.positions, self.seg, self.token_types) if t is not None]

    def map(self, fn: Callable[[torch.Tensor], torch.Tensor]) -> Packed:
        """The same batch with `fn` applied to each of its tensors (moved, cloned)."""
        types = None if self.token_types is None else fn(self.token_types)
        return Packed(fn(self.input_ids), fn(self.positions), fn(self.seg), self.lengths, types)

    def to(self, device: torch.device | str) -> Packed:
        return self.map(lambda t: t.to(device, non_blocking=True))


def pack(sequences: Sequence[Sequence[int]], pad_to: int | None = None, pad_id: int = 0,
         type_starts: Sequence[int | None] | None = None) -> Packed:
    """Concatenate `sequences`; with `pad_to`, append padding tokens up to that many tokens in total.
    `type_starts[i]`: where sequence i's second segment (token type 1) begins, None if it has none; given
    at all, the batch carries token types (every batch of a model the same way, so graphs keep their inputs)."""
    lengths = [len(s) for s in sequences]
    total = sum(lengths)
    if pad_to is not None and pad_to < total:
        raise ValueError(f"pad_to={pad_to} is below the {total} tokens of the batch")
    width = pad_to if pad_to is not None else total
    ids = torch.full((width,), pad_id, dtype=torch.int64)
    positions = torch.zeros(width, dtype=torch.int64)
    seg = torch.full((width,), len(lengths), dtype=torch.int64)
    types = torch.zeros(width, dtype=torch.int64) if type_starts is not None else None
    start = 0
    for i, s in enumerate(sequences):
        n = lengths[i]
        ids[start:start + n] = torch.as_tensor(s, dtype=torch.int64)
        positions[start:start + n] = torch.arange(n)
        seg[start:start + n] = i
        second = type_starts[i] if type_starts is not None else None
        if types is not None and second is not None:
            types[start + second:start + n] = 1
        start += n
    return Packed(ids, positions, seg, lengths, types)


def length_groups(lengths: Sequence[int], max_waste: float = 0.125) -> list[list[int]]:
    """Sequence indices grouped so that padding each group to its longest member wastes at most
    `max_waste` of the group's padded tokens. Longest first; a sequence is never split."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    groups: list[list[int]] = []
    current: list[int] = []
    real = 0
    for i in order:
        if current:
            longest = lengths[current[0]]
            padded = longest * (len(current) + 1)
            if (padded - real - lengths[i]) / padded <= max_waste:
                current.append(i)
                real += lengths[i]
                continue
            groups.append(current)
        current, real = [i], lengths[i]
    if current:
        groups.append(current)
    return groups


@dataclass
class GroupIndex:
    """Gather/scatter indices of one length group: `gather[g, l]` is the packed token at row g, column l
    (0 where l is past the row's length), `valid` marks the real ones. A group of equal-length sequences
    lying next to each other in the packing is a plain view instead: `span` = (first token, rows, width)."""

    gather: torch.Tensor | None  # [G, L] int64
    valid: torch.Tensor | None  # [G, L] bool
    tokens: torch.Tensor | None  # [n] packed positions of the valid entries, row-major
    span: tuple[int, int, int] | None = None

    def gathered(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(gather, valid, tokens) of a group that is not a span."""
        if self.gather is None or self.valid is None or self.tokens is None:
            raise ValueError("a span group has no gather indices")
        return self.gather, self.valid, self.tokens


def group_indices(lengths: Sequence[int], max_waste: float = 0.125,
                  device: torch.device | str = "cpu") -> list[GroupIndex]:
    starts = [0]
    for n in lengths[:-1]:
        starts.append(starts[-1] + n)
    out = []
    for group in length_groups(lengths, max_waste):
        width = lengths[group[0]]
        ordered = sorted(group)
        if all(lengths[i] == width for i in group) and ordered == list(range(ordered[0], ordered[0] + len(group))):
            out.append(GroupIndex(None, None, None, span=(starts[ordered[0]], len(group), width)))
            continue
        col = torch.arange(width)
        start = torch.tensor([starts[i] for i in group]).unsqueeze(1)
        length = torch.tensor([lengths[i] for i in group]).unsqueeze(1)
        valid = col.unsqueeze(0) < length
        gather = torch.where(valid, start + col, torch.zeros((), dtype=torch.int64))
        out.append(GroupIndex(gather.to(device), valid.to(device), gather[valid].to(device)))
    return out
