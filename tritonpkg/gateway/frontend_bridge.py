"""What the OpenAI frontend needs to serve `embedding`-template models through the gateway: recognising
them from their Triton config and one gateway per model version. Failures are the gateway's own errors
(GatewayOverloaded, GatewayRequestError, GatewayUnavailable); the frontend turns them into HTTP statuses."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import numpy as np

from tritonpkg.gateway.client import EmbeddingGateway, GatewayUnavailable


class NoRepository(GatewayUnavailable):
    """The model is served through the gateway, but the frontend was started without its repository."""


_GATEWAYS: dict[tuple[int, str, str, str], EmbeddingGateway] = {}


def is_template_embedding(config: dict[str, Any]) -> bool:
    """A Python-backend model that takes packed ids (INPUT_IDS + LENGTHS) and gives EMBEDDINGS."""
    inputs = {i.get("name") for i in config.get("input", [])}
    outputs = {o.get("name") for o in config.get("output", [])}
    return config.get("backend") == "python" and {"INPUT_IDS", "LENGTHS"} <= inputs and "EMBEDDINGS" in outputs


def gateway_for(grpc_url: str, name: str, version_dir: Path | None) -> EmbeddingGateway:
    if version_dir is None:
        raise NoRepository(f"model '{name}' is served through the embedding gateway, which needs the model "
                           "repository: start the frontend with --model-repository", field="model")
    key = (id(asyncio.get_running_loop()), grpc_url, name, str(version_dir))  # gRPC aio clients are per loop
    if key not in _GATEWAYS:
        _GATEWAYS[key] = EmbeddingGateway.for_model([grpc_url], version_dir)
    return _GATEWAYS[key]


async def close_gateways() -> None:
    """Close the gateways made on the running loop (the frontend's shutdown): an open gRPC channel keeps
    Triton's stop waiting its whole exit timeout, and a frontend started again on a new loop would leak it."""
    loop = id(asyncio.get_running_loop())
    for key in [k for k in _GATEWAYS if k[0] == loop]:
        await _GATEWAYS.pop(key).close()


async def embed(grpc_url: str, name: str, version_dir: Path | None, texts: list[str],
                dimensions: int | None) -> tuple[list[np.ndarray], int]:
    """Texts -> (vectors in order, prompt tokens)."""
    result = await gateway_for(grpc_url, name, version_dir).embed(texts, dimensions=dimensions)
    return list(result.vectors), result.total_tokens
