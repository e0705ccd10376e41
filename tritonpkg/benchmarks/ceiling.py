"""The compute ceiling of this machine for an encoder: the FLOPs of one embedding, counted by torch's
FlopCounterMode on the model itself, against the best matrix-multiply rate torch reaches here.

No server embeds faster than every multiply of the model running at that rate with softmax, layer norms,
tokenization and transport free. A goal stated as a ratio between two servers at the same precision is
therefore reachable only while the baseline runs below 1 / ratio of the ceiling."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

SQUARE = 2048  # a square GEMM: the rate the BLAS reaches when shape does not hold it back


@dataclass(frozen=True)
class Ceiling:
    tokens: int  # per embedding
    gflop_per_embedding: float
    gemm_gflops: float  # best measured rate of torch.mm in `dtype`, all of torch's threads
    threads: int
    dtype: str

    @property
    def embeddings_per_s(self) -> float:
        return self.gemm_gflops / self.gflop_per_embedding

    def share(self, embeddings_per_s: float) -> float:
        """The fraction of the ceiling a measured throughput reaches."""
        return embeddings_per_s / self.embeddings_per_s

    def describe(self) -> str:
        return (f"{self.dtype} ceiling here: {self.gflop_per_embedding:.1f} GFLOP per {self.tokens}-token embedding "
                f"(torch FlopCounterMode) at the best torch.mm rate measured, {self.gemm_gflops:.0f} GFLOP/s on "
                f"{self.threads} threads = {self.embeddings_per_s:.1f} embeddings/s")


def load(weights: Path):
    """The checkpoint as transformers runs it, for counting FLOPs and reading its layer shapes."""
    from transformers import AutoModel

    # eager attention: its matmuls are counted; torch's CPU flash-attention kernel has no FLOP formula
    return AutoModel.from_pretrained(str(weights), attn_implementation="eager").eval()


def embedding_gflop(model, tokens: int) -> float:
    """GFLOP of one forward pass over one sequence of `tokens` tokens (multiplies and adds counted apart)."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    ids = torch.full((1, tokens), 5, dtype=torch.long)
    with torch.inference_mode(), FlopCounterMode(display=False) as counter:
        model(input_ids=ids, attention_mask=torch.ones_like(ids))
    return counter.get_total_flops() / 1e9


def gemm_gflops(shapes: list[tuple[int, int, int]], dtype: str = "float32", repeats: int = 5) -> float:
    """The best rate torch.mm reaches over `shapes` (m, k, n): the fastest of `repeats` timed calls each."""
    import torch

    kind = getattr(torch, dtype)
    best = 0.0
    with torch.inference_mode():
        for m, k, n in shapes:
            a, b = torch.randn(m, k, dtype=kind), torch.randn(k, n, dtype=kind)
            out = torch.empty(m, n, dtype=kind)
            torch.mm(a, b, out=out)
            fastest = float("inf")
            for _ in range(repeats):
                start = time.perf_counter()
                torch.mm(a, b, out=out)
                fastest = min(fastest, time.perf_counter() - start)
            best = max(best, 2.0 * m * k * n / fastest / 1e9)
    return best


def model_shapes(model, rows: int) -> list[tuple[int, int, int]]:
    """The model's own linear layers as GEMMs over `rows` tokens, and one square GEMM."""
    import torch

    linears = {(m.in_features, m.out_features) for m in model.modules() if isinstance(m, torch.nn.Linear)}
    return [(rows, k, n) for k, n in sorted(linears)] + [(SQUARE, SQUARE, SQUARE)]
