"""/v1/embeddings: one function per model kind turns texts into vectors.

`embed_texts` is the one dispatch point: a new kind of embedding model (e.g. another template's
gateway) adds a branch here (and its kind in catalog.classify), the route stays as it is."""

from __future__ import annotations

import asyncio
import base64
from typing import Any

import numpy as np

from tritonpkg.frontend.catalog import ModelEntry
from tritonpkg.frontend.errors import APIError
from tritonpkg.frontend.protocol import EmbeddingRequest
from tritonpkg.frontend.triton import TritonBackend
from tritonpkg.gateway.frontend_bridge import embed as gateway_embed

MAX_INPUTS = 2048

async def embed_texts(entry: ModelEntry, texts: list[str], dimensions: int | None,
                      backend: TritonBackend) -> tuple[list[np.ndarray], int | None]:
    """Texts -> (one vector per text, prompt tokens or None when the model does not count them)."""
    if entry.kind == "embed" and entry.backend == "python":  # `embedding` template: the gateway (overload -> 429)
        return await gateway_embed(backend.url, entry.name, entry.source, texts, dimensions)
    if entry.kind == "embed":
        pooling = {"dimensions": dimensions} if dimensions is not None else {}
        results = await asyncio.gather(*(backend.embed(entry.name, text, pooling) for text in texts))
        counts = [n for _, n in results]
        return [v for v, _ in results], (sum(counts) if all(c is not None for c in counts) else None)  # type: ignore[arg-type]
    raise APIError(400, f"model '{entry.name}' is a {entry.kind} model, not an embedding model", param="model")


def embeddings_body(req: EmbeddingRequest, vectors: list[np.ndarray], prompt_tokens: int | None) -> dict[str, Any]:
    data = []
    for i, vector in enumerate(vectors):
        if req.encoding_format == "base64":
            value: Any = base64.b64encode(vector.astype("<f4").tobytes()).decode("ascii")
        else:
            value = vector.tolist()
        data.append({"object": "embedding", "index": i, "embedding": value})
    usage = None if prompt_tokens is None else {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens}
    return {"object": "list", "model": req.model, "data": data, "usage": usage}


def input_texts(req: EmbeddingRequest) -> list[str]:
    texts = [req.input] if isinstance(req.input, str) else list(req.input)
    if not texts:
        raise APIError(400, "'input' must not be an empty list", param="input")
    if len(texts) > MAX_INPUTS:
        raise APIError(400, f"'input' has {len(texts)} texts; at most {MAX_INPUTS} per request (OpenAI's limit)",
                       param="input")
    return texts
