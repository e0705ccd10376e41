"""What the OpenAI frontend needs to serve `embedding`-template models through the gateway: recognising
them from their Triton config, one gateway per model version, and gateway errors as HTTP statuses
(overload -> 429, a bad request -> 400, Triton unreachable -> 503)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import numpy as np

from tritonpkg.gateway.admission import GatewayOverloaded
from tritonpkg.gateway.client import EmbeddingGateway, GatewayRequestError, GatewayUnavailable

_GATEWAYS: dict[tuple[int, str, str, str], EmbeddingGateway] = {}


def is_template_embedding(config: dict[str, Any]) -> bool:
    """A Python-backend model that takes packed ids (INPUT_IDS + LENGTHS) and gives EMBEDDINGS."""
    inputs = {i.get("name") for i in config.get("input", [])}
    outputs = {o.get("name") for o in config.get("output", [])}
    return config.get("backend") == "python" and {"INPUT_IDS", "LENGTHS"} <= inputs and "EMBEDDINGS" in outputs


def gateway_for(grpc_url: str, name: str, version_dir: Path | None) -> EmbeddingGateway:
    from tritonpkg.frontend.errors import APIError

    if version_dir is None:
        raise APIError(503, f"model '{name}' is served through the embedding gateway, which needs the model "
                            "repository: start the frontend with --model-repository", param="model")
    key = (id(asyncio.get_running_loop()), grpc_url, name, str(version_dir))  # gRPC aio clients are per loop
    if key not in _GATEWAYS:
        _GATEWAYS[key] = EmbeddingGateway.for_model([grpc_url], version_dir)
    return _GATEWAYS[key]


async def embed(grpc_url: str, name: str, version_dir: Path | None, texts: list[str],
                dimensions: int | None) -> tuple[list[np.ndarray], int]:
    """Texts -> (vectors in order, prompt tokens), raising the frontend's APIError with the right status."""
    from tritonpkg.frontend.errors import APIError

    gateway = gateway_for(grpc_url, name, version_dir)
    try:
        result = await gateway.embed(texts, dimensions=dimensions)
    except GatewayOverloaded as exc:
        raise APIError(429, exc.message, param="input", type="rate_limit_error", code="overloaded") from None
    except GatewayRequestError as exc:
        param = "dimensions" if exc.field == "dimensions" or "dimensions:" in exc.message else "input"
        raise APIError(400, exc.render(), param=param) from None
    except GatewayUnavailable as exc:
        raise APIError(503, exc.render(), type="service_unavailable") from None
    return list(result.vectors), result.total_tokens
