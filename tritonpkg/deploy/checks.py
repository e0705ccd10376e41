"""The probes a rollout step asks of a unit over HTTP: Triton's health and the canary (the spec's smoke request),
and an adapter's canary. Below both the executor and the drivers, which call them on the unit's address."""

from __future__ import annotations

import json
import time
from typing import Any

from tritonpkg.errors import TritonpkgError
from tritonpkg.proc import rest
from tritonpkg.smoke import SmokeError, send


class DeployError(TritonpkgError):
    """A rollout step failed (the rollout was rolled back)."""


def check_triton(http_url: str, model: str, version: int, smoke: dict[str, Any] | None, timeout: float = 30.0) -> str:
    """Server live and ready, the model version ready, then the canary (the spec's smoke request)."""
    deadline = time.monotonic() + timeout
    probes = ["/v2/health/live", "/v2/health/ready", f"/v2/models/{model}/versions/{version}/ready"]
    for probe in probes:
        while not rest.ok(http_url + probe, timeout=2.0):
            if time.monotonic() > deadline:
                raise DeployError(f"health check {probe} failed on {http_url}", field="health_check")
            time.sleep(0.1)
    if not smoke:
        return "live, ready, model ready (no smoke_request in the spec: no canary)"
    answer = send(http_url, model, smoke, timeout=timeout)
    return f"live, ready, model ready, canary answered {sorted(answer)}"


def check_adapter(http_url: str, model: str, smoke: dict[str, Any] | None, name: str, timeout: float = 120.0) -> str:
    """The smoke request (a one-token generation without one) with `lora_name` = `name`, asked until the unit's
    backend has read the list that names it (an unknown adapter meanwhile); a refused adapter fails at once."""
    request = dict(smoke or {"text_input": "hello", "sampling_parameters": {"max_tokens": 1}})
    params = request.get("sampling_parameters") or {}
    params = json.loads(params) if isinstance(params, str) else dict(params)
    request["sampling_parameters"] = {**params, "lora_name": name}
    deadline = time.monotonic() + timeout
    while True:
        try:
            answer = send(http_url, model, request, timeout=timeout)
            return f"{name} answered {sorted(answer)}"
        except SmokeError as exc:
            if "unknown LoRA adapter" not in str(exc) or time.monotonic() > deadline:
                raise DeployError(f"adapter {name}: {exc}", field="adapter_check") from None
        time.sleep(0.3)
