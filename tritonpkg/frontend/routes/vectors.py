"""The vector routes: /v1/embeddings (OpenAI's) and /v1/rerank (vLLM's, Jina's and Cohere's)."""

from __future__ import annotations

from fastapi import APIRouter, Request

from tritonpkg.frontend.calls import naming_the_prompt, served, unless_client_leaves
from tritonpkg.frontend.checks import check_token_ids
from tritonpkg.frontend.embeddings import embed_texts, embeddings_body, input_texts
from tritonpkg.frontend.protocol import EmbeddingRequest, RerankRequest
from tritonpkg.frontend.responses import rerank_body
from tritonpkg.frontend.routes.common import backend_of, catalog_of, json_response

router = APIRouter()


@router.post("/v1/embeddings")
async def embeddings(body: EmbeddingRequest, request: Request):
    texts = input_texts(body)
    entry = await catalog_of(request).get(body.model)
    check_token_ids(entry, texts, "input")
    with naming_the_prompt("input"), served(entry, "dimensions" if body.dimensions is not None else None,
                                               "input"):
        vectors, tokens = await embed_texts(entry, texts, body.dimensions, backend_of(request))
    return json_response(embeddings_body(body, vectors, tokens))


@router.post("/v1/rerank")
async def rerank(body: RerankRequest, request: Request):
    """Documents ranked by a `scoring`-template model (bi-encoder cosine or a cross-encoder)."""
    entry = await catalog_of(request).get(body.model, ("score",))
    with served(entry, None, "documents"):
        scores, tokens = await unless_client_leaves(request, backend_of(request).score(entry.name, body.query,
                                                                                      body.documents))
    return json_response(rerank_body(body.model, body.documents, scores, tokens, body.top_n, body.return_documents))
