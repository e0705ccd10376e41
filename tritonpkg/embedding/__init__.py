"""The embedding engine core: a token-budget FCFS batcher, ragged packing, a packed BERT encoder, lazy
CUDA-graph buckets and event-backed result handles.

It imports only the standard library, numpy and torch, and its modules import each other relatively,
so the packager can copy this folder beside a template's model.py (Triton's Python stub has no
tritonpkg on its path in NVIDIA's images) and a GPU machine with only torch can run it."""

from .batcher import Ticket, TokenBudgetBatcher, Work
from .engine import EmbeddingEngine
from .errors import EmbeddingInputError
from .graphs import BucketCache, bucket_tokens
from .handles import ResultHandle
from .options import cosine_scores, finish_vectors
from .packing import Packed, length_groups, pack
from .tokenize import encode_texts

__all__ = [
    "BucketCache", "EmbeddingEngine", "EmbeddingInputError", "Packed", "ResultHandle", "Ticket",
    "TokenBudgetBatcher", "Work", "bucket_tokens", "cosine_scores", "encode_texts", "finish_vectors",
    "length_groups", "pack",
]
