"""The tritonserver options an operator may choose when serve (or a local deploy unit) brings a model up:
named fields for the common ones and a checked pass-through for the rest.

The toolkit owns the options that its guarantees rest on — the ports and addresses (serve chooses and checks
them), the model repository and backend directory (the verified copy, the toolkit's backends), the admin-API
restriction (the run's key), the exit timeout and HTTP/gRPC/metrics on-off switches (the readiness gate and
the merged /metrics read them) — so the pass-through refuses them, naming the option and what to use instead."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

ModelControlMode = Literal["none", "poll", "explicit"]

# option name -> what to use instead (None: the toolkit sets it and offers no way to change it)
OWNED: dict[str, str | None] = {
    "model-repository": None, "model-store": None, "backend-directory": None,
    "http-port": "--http-port", "grpc-port": "--grpc-port", "metrics-port": "--metrics-port",
    "http-address": "--host", "grpc-address": "--host", "metrics-address": None,
    "allow-http": None, "allow-grpc": None, "allow-metrics": "--metrics/--no-metrics",
    "http-restricted-api": None, "grpc-restricted-protocol": None,
    "exit-timeout-secs": None, "model-control-mode": "--model-control-mode", "load-model": "--load-model",
    "log-verbose": "--log-verbose", "backend-config": "--backend-config",
    "exit-on-error": None, "strict-readiness": None,
}
_OPTION = re.compile(r"--([a-z][a-z0-9-]*)(=.*)?", re.DOTALL)
# Triton's --backend-config=<backend>,<setting>=<value>
_BACKEND_CONFIG = re.compile(r"([A-Za-z0-9_.-]+),([A-Za-z0-9_.-]+)=(\S.*)")
_MODEL_NAME = re.compile(r"[^\s/\\]+")


class TritonOptionError(ValueError):
    """An option the toolkit cannot pass on; `option` is the one named on the command line."""

    def __init__(self, option: str, message: str) -> None:
        super().__init__(message)
        self.option = option


def check_passthrough(arg: str) -> str:
    """One `--triton-arg` value: a `--name[=value]` tritonserver option the toolkit does not own."""
    match = _OPTION.fullmatch(arg)
    if match is None:
        raise TritonOptionError("--triton-arg", f"{arg!r} is not a tritonserver option: expected --name or "
                                                "--name=value (e.g. --triton-arg=--log-info=false)")
    name = match.group(1)
    if name in OWNED:
        instead = OWNED[name]
        hint = f"use {instead}" if instead else "tritonpkg sets it itself"
        raise TritonOptionError("--triton-arg", f"--{name} is set by tritonpkg and cannot be passed through "
                                                f"--triton-arg: {hint}")
    return arg


class TritonOptions(BaseModel):
    """What serve passes to tritonserver beyond the options it owns. The readiness gate follows the mode:
    none/poll wait for every model of the repository, explicit for the models named in load_models."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model_control_mode: ModelControlMode = "none"
    load_models: tuple[str, ...] = Field(default=(), description="models loaded at start in explicit mode")
    backend_config: tuple[str, ...] = Field(default=(), description="BACKEND,KEY=VALUE, Triton's --backend-config")
    log_verbose: int = Field(default=0, ge=0, le=10_000)
    metrics: bool = Field(default=True, description="Triton's own metrics (--allow-metrics)")
    extra_args: tuple[str, ...] = Field(default=(), description="checked pass-through tritonserver options")

    @field_validator("load_models")
    @classmethod
    def _names(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for name in value:
            if not _MODEL_NAME.fullmatch(name):
                raise ValueError(f"{name!r} is not a model name (a model folder of the repository)")
        return value

    @field_validator("backend_config")
    @classmethod
    def _backend_config(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for item in value:
            if not _BACKEND_CONFIG.fullmatch(item):
                raise ValueError(f"{item!r} is not BACKEND,KEY=VALUE (e.g. python,shm-default-byte-size=16777216)")
        return value

    @field_validator("extra_args")
    @classmethod
    def _extra(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for arg in value:
            check_passthrough(arg)
        return value

    @model_validator(mode="after")
    def _explicit_only(self) -> TritonOptions:
        if self.load_models and self.model_control_mode != "explicit":
            raise ValueError("load_models (--load-model) needs model_control_mode explicit "
                             "(--model-control-mode explicit)")
        return self

    def server_args(self) -> list[str]:
        """The tritonserver arguments these options add to the ones TritonServer always passes."""
        return [f"--backend-config={item}" for item in self.backend_config] + list(self.extra_args)
