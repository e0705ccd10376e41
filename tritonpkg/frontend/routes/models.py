"""OpenAI's models routes: the served models' cards (vLLM's shape)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from tritonpkg.frontend.catalog import ModelEntry
from tritonpkg.frontend.routes.common import catalog_of

router = APIRouter()


@router.get("/v1/models")
async def list_models(request: Request) -> dict[str, Any]:
    cat = catalog_of(request)
    await cat.refresh()
    return {"object": "list", "data": [model_card(m) for m in cat.models.values()]}


@router.get("/v1/models/{model_id:path}")
async def get_model(model_id: str, request: Request) -> dict[str, Any]:
    """One model's card (OpenAI's retrieve-model route); 404 naming the served ones otherwise."""
    return model_card(await catalog_of(request).get(model_id))


def model_card(m: ModelEntry) -> dict[str, Any]:
    """vLLM's model card: `root` the served name (vLLM puts its weights path there; this server does not show
    paths), `parent` the base model of a LoRA adapter (null otherwise), `max_model_len` the context (null when
    unknown)."""
    return {"id": m.name, "object": "model", "created": m.created, "owned_by": "tritonpkg", "root": m.name,
            "parent": m.parent, "max_model_len": m.max_model_len, "kind": m.kind, "version": m.version}
