"""What every router shares: the app state a route reads (set by create_app and its lifespan), the OpenAPI
documentation of the error bodies, and the two response shapes (plain JSON, server-sent events)."""

from __future__ import annotations

import json
from typing import Any

from fastapi import Request
from fastapi.responses import Response, StreamingResponse

from tritonpkg.frontend.catalog import Catalog
from tritonpkg.frontend.settings import FrontendSettings
from tritonpkg.frontend.triton import TritonBackend

ERROR_SCHEMA = {
    "type": "object",
    "properties": {"error": {"type": "object", "properties": {
        "message": {"type": "string"}, "type": {"type": "string"},
        "param": {"type": ["string", "null"]}, "code": {"type": ["string", "null"]}}}},
}
Responses = dict[int | str, dict[str, Any]]  # FastAPI's `responses=`: status -> OpenAPI response
ERRORS: Responses = {status: {"description": text, "content": {"application/json": {"schema": ERROR_SCHEMA}}}
          for status, text in ((400, "Invalid request (the field is named in error.param)"),
                               (404, "Unknown model"), (413, "The body is larger than --max-request-bytes"),
                               (503, "Triton or the model is not ready"))}
UNAUTHORIZED: Responses = {401: {"description": "Missing or incorrect API key (Authorization: Bearer <key>)",
                      "content": {"application/json": {"schema": ERROR_SCHEMA}}}}
SSE: Responses = {200: {"content": {"text/event-stream": {}},
                         "description": "JSON, or server-sent events with stream=true"}}


def json_response(body: dict[str, Any]) -> Response:
    """Bodies are plain JSON already: skip FastAPI's jsonable_encoder walk (about 1 ms a response here)."""
    return Response(json.dumps(body, separators=(",", ":")).encode(), media_type="application/json")


def sse(events) -> StreamingResponse:
    return StreamingResponse(events, media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


def backend_of(request: Request) -> TritonBackend:
    return request.app.state.backend


def catalog_of(request: Request) -> Catalog:
    return request.app.state.catalog


def settings_of(request: Request) -> FrontendSettings:
    return request.app.state.settings
