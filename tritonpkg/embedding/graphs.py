"""Lazy CUDA graphs per batch shape. A bucket is (sequence count, padded token count), the token count
rounded up to a multiple of 64 (small batches) or 256 (large ones). The first batch of a bucket runs
eagerly, the second captures a graph, later ones replay it; a shape seen once costs no capture.

`BucketCache` is the bookkeeping (pure, testable without CUDA); `GraphRunner` does the capturing and
replaying for a model whose forward takes static-shape packed inputs."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

import torch

from .packing import Packed

G = TypeVar("G")

SMALL_STEP = 64
LARGE_STEP = 256
LARGE_FROM = 1024


def bucket_tokens(n: int, small_step: int = SMALL_STEP, large_step: int = LARGE_STEP,
                  large_from: int = LARGE_FROM) -> int:
    """`n` tokens rounded up to the bucket's padded token count."""
    if n <= 0:
        raise ValueError("a batch has at least one token")
    step = small_step if n <= large_from else large_step
    return -(-n // step) * step


@dataclass
class BucketStats:
    eager: int = 0
    captures: int = 0
    replays: int = 0
    uncached: int = 0  # shapes beyond max_tokens or max_graphs: always eager


@dataclass
class BucketCache(Generic[G]):
    """Which action a batch shape gets: "eager" (first sighting, or not graphable), "capture" (second
    sighting) or "replay" (captured). At most `max_graphs` graphs are kept, least recently used evicted;
    an evicted bucket starts over as first sighting."""

    max_tokens: int = 2048
    max_graphs: int = 64
    stats: BucketStats = field(default_factory=BucketStats)
    _seen: set[tuple[int, int]] = field(default_factory=set)
    _graphs: OrderedDict[tuple[int, int], G] = field(default_factory=OrderedDict)

    def key(self, num_sequences: int, num_tokens: int) -> tuple[int, int]:
        return num_sequences, bucket_tokens(num_tokens)

    def action(self, key: tuple[int, int]) -> str:
        if key[1] > self.max_tokens:
            self.stats.uncached += 1
            return "eager"
        if key in self._graphs:
            self._graphs.move_to_end(key)
            self.stats.replays += 1
            return "replay"
        if key in self._seen:
            self.stats.captures += 1
            return "capture"
        self._seen.add(key)
        self.stats.eager += 1
        return "eager"

    def store(self, key: tuple[int, int], graph: G) -> list[tuple[int, int]]:
        """Keep a captured graph; returns the keys evicted to make room."""
        self._graphs[key] = graph
        self._seen.discard(key)
        evicted = []
        while len(self._graphs) > self.max_graphs:
            old, _ = self._graphs.popitem(last=False)
            evicted.append(old)
        return evicted

    def get(self, key: tuple[int, int]) -> G:
        return self._graphs[key]

    def __len__(self) -> int:
        return len(self._graphs)


class _Captured:
    """A captured graph and the static batch it reads and the output it writes."""

    def __init__(self, graph: torch.cuda.CUDAGraph, inputs: Packed, output: torch.Tensor) -> None:
        self.graph = graph
        self.inputs = inputs
        self.output = output


class GraphRunner:
    """Runs `forward(packed) -> [num_sequences, ...]` on static-shape batches (packed and padded to their
    bucket), through the bucket cache."""

    def __init__(self, forward: Callable[[Packed], torch.Tensor], cache: BucketCache[_Captured] | None = None,
                 pool: torch.cuda._POOL_HANDLE | None = None) -> None:
        self.forward = forward
        self.cache: BucketCache[_Captured] = cache or BucketCache()
        self.pool = pool if pool is not None else torch.cuda.graph_pool_handle()
        self.stream = torch.cuda.Stream()

    def run(self, packed: Packed) -> torch.Tensor:
        key = (packed.num_sequences, packed.num_tokens)
        action = self.cache.action(key)
        if action == "eager":
            return self.forward(packed)
        if action == "capture":
            captured = self._capture(packed)
            self.cache.store(key, captured)
        else:
            captured = self.cache.get(key)
            for dst, src in zip(captured.inputs.tensors(), packed.tensors(), strict=True):
                dst.copy_(src, non_blocking=True)
        captured.graph.replay()
        return captured.output

    def _capture(self, packed: Packed) -> _Captured:
        static = packed.map(torch.clone)
        self.stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.stream):
            self.forward(static)  # warm-up: lazy inits must not happen while capturing
        torch.cuda.current_stream().wait_stream(self.stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool):
            output = self.forward(static)
        return _Captured(graph, static, output)
