"""The embedding engine core: a token-budget FCFS batcher, ragged packing, a packed BERT encoder, lazy
CUDA-graph buckets and event-backed result handles.

It imports only the standard library, numpy and torch, and its modules import each other relatively,
so the packager can copy this folder beside a template's model.py (Triton's Python stub has no
tritonpkg on its path in NVIDIA's images) and a GPU machine with only torch can run it. Names load on
first use: the gateway needs the tokenization rules without paying for torch."""

from __future__ import annotations

import importlib
from typing import Any

_WHERE = {
    "Ticket": "batcher", "TokenBudgetBatcher": "batcher", "Work": "batcher",
    "EmbeddingEngine": "engine", "EmbeddingInputError": "errors",
    "Checkpoint": "checkpoint", "read_checkpoint": "checkpoint",
    "BucketCache": "graphs", "bucket_tokens": "graphs", "ResultHandle": "handles",
    "classifier_scores": "options", "cosine_scores": "options", "finish_vectors": "options",
    "Packed": "packing", "length_groups": "packing", "pack": "packing",
    "encode_pairs": "tokenize", "encode_texts": "tokenize",
}
__all__ = sorted(_WHERE)  # noqa: PLE0605  the lazy names are listed once, in _WHERE


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_WHERE[name]}", __name__), name)
