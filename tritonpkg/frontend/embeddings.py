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
from tritonpkg.gateway.admission import GatewayOverloaded
from tritonpkg.gateway.client import GatewayRequestError, GatewayUnavailable
from tritonpkg.gateway.frontend_bridge import NoRepository
from tritonpkg.gateway.frontend_bridge import embed as bridge_embed

MAX_INPUTS = 2048

async def gateway_embed(grpc_url: str, name: str, version_dir: Any, texts: list[str],
                        dimensions: int | None) -> tuple[list[np.ndarray], int]:
    """The embedding gateway's errors as HTTP statuses: overload 429, a bad request 400, no repository or
    Triton unreachable 503."""
    try:
        return await bridge_embed(grpc_url, name, version_dir, texts, dimensions)
    except GatewayOverloaded as exc:
        raise APIError(429, exc.message, param="input", type="rate_limit_error", code="overloaded") from None
    except GatewayRequestError as exc:
        param = "dimensions" if exc.field == "dimensions" or "dimensions:" in exc.message else "input"
        raise APIError(400, exc.render(), param=param) from None
    except NoRepository as exc:
        raise APIError(503, exc.message, param="model") from None
    except GatewayUnavailable as exc:
        raise APIError(503, exc.render(), type="service_unavailable") from None


async def embed_texts(entry: ModelEntry, texts: list[str | list[int]], dimensions: int | None,
                      backend: TritonBackend) -> tuple[list[np.ndarray], int | None]:
    """Texts or token ids -> (one vector per input, prompt tokens or None when the model does not count them)."""
    if entry.kind == "embed" and entry.backend == "python":  # `embedding` template: the gateway (overload -> 429)
        if not all(isinstance(t, str) for t in texts):
            raise APIError(400, f"model '{entry.name}' embeds texts only (its gateway tokenizes them itself)",
                           param="input")
        return await gateway_embed(backend.url, entry.name, entry.source, texts, dimensions)  # type: ignore[arg-type]
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


def input_texts(req: EmbeddingRequest) -> list[str | list[int]]:
    """OpenAI's four input shapes -> one text or token-id list per vector."""
    raw: Any = req.input
    if isinstance(raw, list) and raw and all(isinstance(t, int) for t in raw):
        raw = [raw]
    texts: list[str | list[int]] = [raw] if isinstance(raw, str) else list(raw)
    if not texts:
        raise APIError(400, "'input' must not be an empty list", param="input")
    for i, item in enumerate(texts):
        if isinstance(item, list) and (not item or any(isinstance(t, bool) or not 0 <= t < 2**31 for t in item)):
            raise APIError(400, f"'input.{i}' must be a non-empty list of token ids (0 to 2**31-1)",
                           param=f"input.{i}")
    if len(texts) > MAX_INPUTS:
        raise APIError(400, f"'input' has {len(texts)} texts; at most {MAX_INPUTS} per request (OpenAI's limit)",
                       param="input")
    return texts
