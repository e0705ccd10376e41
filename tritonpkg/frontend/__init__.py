"""The OpenAI-compatible frontend: FastAPI + uvicorn in front of Triton's gRPC (tritonclient aio).

    settings = FrontendSettings(triton_grpc_url="127.0.0.1:8001", port=9000, model_repository=repo)
    with FrontendServer(settings) as fe:
        fe.url  # http://127.0.0.1:9000  (/v1/models, /v1/completions, /v1/chat/completions, /v1/embeddings)
"""

from __future__ import annotations

from tritonpkg.frontend.server import FrontendServer
from tritonpkg.frontend.settings import FrontendSettings


def create_app(settings: FrontendSettings):
    """The FastAPI app (imported lazily: FastAPI is not needed by the rest of the toolkit)."""
    from tritonpkg.frontend.app import create_app as _create

    return _create(settings)


__all__ = ["FrontendServer", "FrontendSettings", "create_app"]
