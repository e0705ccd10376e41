"""What a request asks of its vectors: normalized or raw, `dimensions` (Matryoshka truncation only where
the model declares it), and relevance scores of (query, document) pairs (bi-encoder cosine, or a
cross-encoder's logit). Pure numpy."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .errors import EmbeddingInputError


def check_dimensions(dimensions: int | None, full: int, allowed: Sequence[int]) -> int | None:
    """`dimensions` if the model can give it, else a clear error. A model that is not Matryoshka-trained
    (empty `allowed`) only gives its full size: truncating it would silently lose quality."""
    if dimensions is None or dimensions == full:
        return None
    if dimensions in allowed:
        return dimensions
    if not allowed:
        raise EmbeddingInputError(
            f"this model is not a Matryoshka model: it gives {full}-dimensional vectors only",
            field="dimensions", expected=f"{full} or no value")
    raise EmbeddingInputError(
        f"{dimensions} is not one of the model's Matryoshka sizes",
        field="dimensions", expected=f"one of {', '.join(map(str, sorted(set(allowed) | {full})))}")


def finish_vectors(pooled: np.ndarray, normalize: bool, dimensions: int | None) -> np.ndarray:
    """Truncate to `dimensions` first (Matryoshka), then L2-normalize if asked."""
    v = pooled[:, :dimensions] if dimensions else pooled
    v = np.ascontiguousarray(v, dtype=np.float32)
    if normalize:
        norms = np.linalg.norm(v, axis=1, keepdims=True)
        v = v / np.maximum(norms, 1e-12)
    return v


SCORE_ACTIVATIONS = ("sigmoid", "none")


def classifier_scores(logits: np.ndarray, activation: str) -> np.ndarray:
    """A cross-encoder's one logit per pair -> its score: sigmoid (as sentence-transformers' CrossEncoder
    gives for a one-label model) or the raw logit."""
    if activation not in SCORE_ACTIVATIONS:
        raise ValueError(f"activation {activation!r} is not one of {', '.join(SCORE_ACTIVATIONS)}")
    raw = np.asarray(logits, dtype=np.float32).reshape(len(logits), -1)[:, 0]
    return (1.0 / (1.0 + np.exp(-raw))).astype(np.float32) if activation == "sigmoid" else raw


def cosine_scores(vectors: np.ndarray) -> np.ndarray:
    """Row 0 is the query, rows 1.. the documents: their cosine similarity to the query, in order."""
    if vectors.shape[0] < 2:
        raise EmbeddingInputError("scoring needs a query and at least one document", field="documents",
                                  expected="1 or more documents")
    unit = finish_vectors(vectors, True, None)
    return (unit[1:] @ unit[0]).astype(np.float32)
