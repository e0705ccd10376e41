"""FrontendSettings: where Triton is, where the frontend listens, where the model repository lies, the
API key and the bounds every request must stay within."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator

MAX_REQUEST_BYTES = 16 * 1024 * 1024


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
    api_key: SecretStr | None = Field(
        None, description="Bearer token every /v1 route requires (compared in constant time); None: open.")
    max_request_bytes: int = Field(MAX_REQUEST_BYTES, ge=1024, description="Largest request body; larger is a 413.")
    max_header_count: int = Field(256, ge=8, description="Most headers one request may carry (vLLM's h11 default).")
    max_header_bytes: int = Field(
        16 * 1024, ge=4096, description="h11's bound on the request line + headers (its own default; vLLM raises "
                                        "it to 4 MiB, which no OpenAI client needs).")
    max_sequences: int = Field(256, ge=1, description="Most sequences (prompts x n) one request may ask for.")
    tokenizer_threads: int = Field(2, ge=1, le=64, description="Threads that tokenize prompts off the event loop.")

    @field_validator("api_key")
    @classmethod
    def _usable_key(cls, key: SecretStr | None) -> SecretStr | None:
        """An empty key must not mean "no key": it is refused like any other unusable one."""
        if key is not None:
            from tritonpkg.frontend.auth import check_key

            check_key(key.get_secret_value(), "api_key")
        return key
