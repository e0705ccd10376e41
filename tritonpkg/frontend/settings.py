"""FrontendSettings: where Triton is, where the frontend listens, and where the model repository lies."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, SecretStr


class FrontendSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    triton_grpc_url: str = Field("127.0.0.1:8001", description="Triton's gRPC address, HOST:PORT.")
    host: str = "127.0.0.1"
    port: int = Field(9000, ge=0, le=65535, description="0 picks a free port when the server starts.")
    model_repository: Path | None = Field(
        None, description="The repository Triton serves: model.json there gives each model's kind, tokenizer "
                          "(chat template) and context length. Without it vLLM models are probed and chat is off.")
    request_timeout_s: float = Field(600.0, gt=0, description="Longest one request may take in Triton.")
    log_level: str = "warning"
    triton_admin_key: SecretStr | None = Field(
        None, description="The key of Triton's restricted admin APIs (tritonpkg.runtime.admin): the frontend lists "
                          "models through the repository index, one of them.")
