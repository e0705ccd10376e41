"""Health routes: live (the process answers) and ready (Triton and every model it loaded are READY)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from tritonpkg.frontend.errors import APIError
from tritonpkg.frontend.routes.common import ERRORS, backend_of

router = APIRouter()


@router.get("/health/ready", responses=ERRORS)
async def ready(request: Request) -> JSONResponse:
    """200 only when Triton is ready and every model it has loaded or tried to load is READY."""
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


@router.get("/health/live")
async def live() -> dict[str, str]:
    return {"status": "live"}
