"""Health routes: live (the process answers), ready (Triton and every model it loaded are READY, and a followed
adapter list has been applied once) and adapters (what a followed list's follower has applied)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from tritonpkg.frontend.errors import APIError
from tritonpkg.frontend.routes.common import ERRORS, backend_of

router = APIRouter()


def _adapter_status(request: Request) -> dict[str, Any] | None:
    from tritonpkg.version_files import read_adapter_list_status

    repository = request.app.state.settings.model_repository
    return read_adapter_list_status(repository) if repository is not None else None


@router.get("/health/ready", responses=ERRORS)
async def ready(request: Request) -> JSONResponse:
    """200 only when Triton is ready and every model it has loaded or tried to load is READY (and, where serve
    follows an adapter list, once its first list is served: a restarted pod never answers with stale adapters)."""
    followed = _adapter_status(request)
    if followed is not None and not followed.get("ready"):
        return JSONResponse({"status": "not ready", "reason": "the adapter list is not applied yet",
                             "adapters": followed}, status_code=503)
    be = backend_of(request)
    try:
        server = await be.server_ready()
        models = await be.models()
    except APIError as exc:
        return JSONResponse({"status": "not ready", "reason": exc.message}, status_code=503)
    not_ready = {m["name"]: m.get("state") for m in models if m.get("state") and m.get("state") != "READY"}
    if not server or not_ready or not models:
        # the models are named whether or not Triton as a whole is ready (a dead engine makes it both)
        parts = (["Triton is not ready"] if not server else []) + (
            [f"models not ready: {not_ready}"] if not_ready else [] if models else ["no models"])
        return JSONResponse({"status": "not ready", "reason": "; ".join(parts), "models": not_ready},
                            status_code=503)
    return JSONResponse({"status": "ready", "models": sorted(m["name"] for m in models)})


@router.get("/health/adapters")
async def adapters(request: Request) -> JSONResponse:
    """The followed adapter list's state (`serve --adapter-list`): the sha256 of the list last read and of the
    one applied, the adapters the backend serves and refused, and why the last one failed; 404 where none is
    followed. A deploy driver waits here for every pod to serve the list it wrote."""
    followed = _adapter_status(request)
    if followed is None:
        return JSONResponse({"error": {"message": "this server follows no adapter list", "type": "not_found"}},
                            status_code=404)
    return JSONResponse(followed)


@router.get("/health/live")
async def live() -> dict[str, str]:
    return {"status": "live"}
