"""The FastAPI app: OpenAI routes over one shared Triton gRPC client.

Requests are validated by the strict models in protocol.py, checked by checks.py, turned into a Plan by
mapping.py, sent through calls.py / triton.py and shaped by responses.py / streaming.py; the routes are
routers by endpoint family (routes/). Every failure leaves as an OpenAI error body with a 4xx/5xx status,
never as a traceback."""

from __future__ import annotations

import gc
import logging
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.security import HTTPBearer
from starlette.exceptions import HTTPException as StarletteHTTPException

from tritonpkg.frontend.catalog import Catalog
from tritonpkg.frontend.errors import APIError, field_path
from tritonpkg.frontend.guard import RequestGuard
from tritonpkg.frontend.routes import generate, health, models, vectors
from tritonpkg.frontend.routes.common import ERRORS, SSE, UNAUTHORIZED
from tritonpkg.frontend.settings import FrontendSettings
from tritonpkg.frontend.triton import TritonBackend
from tritonpkg.gateway.frontend_bridge import close_gateways

log = logging.getLogger("tritonpkg.frontend")


def _validation_error(_request: Request, exc: RequestValidationError) -> JSONResponse:
    """pydantic's 422 -> OpenAI's 400 naming the first bad field."""
    first = exc.errors()[0] if exc.errors() else {}
    loc = tuple(first.get("loc", ()))
    if first.get("type") == "json_invalid":  # loc is ('body', <character offset>), not a field
        reason = (first.get("ctx") or {}).get("error") or first.get("msg")
        at = f" at character {loc[-1]}" if loc and isinstance(loc[-1], int) else ""
        return JSONResponse(APIError(400, f"the body is not valid JSON: {reason}{at}").body(), status_code=400)
    param = field_path(loc) or None
    if first.get("type") == "extra_forbidden":
        message = f"unknown field '{param}': the frontend does not know it, so it cannot be honoured"
    elif param:
        message = f"'{param}': {first.get('msg', 'invalid value')}"
    else:
        message = "the body must be a JSON object sent as Content-Type: application/json"
    return JSONResponse(APIError(400, message, param=param).body(), status_code=400)


def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
    """Starlette's and FastAPI's own refusals (unknown route, wrong method, a body the parser gave up on)
    in the OpenAI shape instead of {"detail": ...}."""
    status = exc.status_code
    if status == 400 and isinstance(exc.__cause__, RecursionError):
        message = "the body is nested too deeply to parse"
    elif status == 404:
        message = f"no route {request.method} {request.url.path}"
    elif status == 405:
        message = f"{request.method} is not allowed on {request.url.path}"
    else:
        message = str(exc.detail)
    return JSONResponse(APIError(status, message).body(), status_code=status, headers=exc.headers)


def _api_error(_request: Request, exc: APIError) -> JSONResponse:
    return JSONResponse(exc.body(), status_code=exc.status)


def _unexpected(_request: Request, exc: Exception) -> JSONResponse:
    log.error("unexpected frontend error", exc_info=exc)
    return JSONResponse(APIError(500, f"internal error: {type(exc).__name__}: {exc}").body(), status_code=500)


@asynccontextmanager
async def _lifespan(app: FastAPI):
    """Connects to Triton and discovers the models it serves (a Triton not reachable yet does not stop it:
    requests rediscover, 503 until Triton answers); the tokenizer pool; the long-lived objects frozen."""
    settings: FrontendSettings = app.state.settings
    key = settings.triton_admin_key
    backend = TritonBackend(settings.triton_grpc_url, settings.request_timeout_s,
                            key.get_secret_value() if key is not None else None)
    catalog = Catalog(backend, settings.model_repository)
    try:
        await catalog.refresh()
    except APIError as exc:  # Triton may come (back) later: requests rediscover, 503 until then
        log.warning("no models discovered yet: %s", exc.message)
    app.state.backend, app.state.catalog = backend, catalog
    # Prompts are tokenized here, never on the event loop: an 8 MB prompt takes seconds to encode.
    app.state.tokenize = ThreadPoolExecutor(settings.tokenizer_threads, thread_name_prefix="tokenize")
    # What start-up leaves is long-lived (FastAPI's models, grpc, the tokenizers); with transformers'
    # tokenizer it was ~450k objects, and one full collection stalled the event loop 230-275 ms. Frozen,
    # the collector never walks them again (vLLM's server does the same).
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        app.state.tokenize.shutdown(wait=False, cancel_futures=True)
        await close_gateways()
        await backend.close()


def create_app(settings: FrontendSettings) -> FastAPI:
    """The app: error handlers, the request guard, and the routers; Triton is reached at start-up
    (_lifespan). Separate mode (Triton restarts on its own) is served: requests get 503 until it answers."""
    app = FastAPI(title="tritonpkg OpenAI-compatible frontend", version="1", lifespan=_lifespan,
                  description="OpenAI's completions, chat, embeddings and models routes, and the rerank route of "
                              "vLLM, Jina and Cohere, over Triton gRPC. Strict: a field the backend cannot honour "
                              "is a 400 naming it.")
    app.state.settings = settings
    app.add_exception_handler(RequestValidationError, _validation_error)  # type: ignore[arg-type]
    app.add_exception_handler(StarletteHTTPException, _http_error)  # type: ignore[arg-type]
    app.add_exception_handler(APIError, _api_error)  # type: ignore[arg-type]
    app.add_exception_handler(Exception, _unexpected)
    key = settings.api_key.get_secret_value() if settings.api_key is not None else None
    app.add_middleware(RequestGuard, api_key=key, max_body=settings.max_request_bytes,
                       max_headers=settings.max_header_count)
    # The guard checks the key; the dependency only documents the bearer scheme in /openapi.json.
    v1 = [Depends(HTTPBearer(auto_error=False, description="the server's API key"))] if key else []
    errors = {**ERRORS, **UNAUTHORIZED} if key else ERRORS
    app.include_router(models.router, responses=errors, dependencies=v1)
    app.include_router(health.router)
    app.include_router(generate.router, responses={**SSE, **errors}, dependencies=v1)
    app.include_router(vectors.router, responses=errors, dependencies=v1)
    return app
