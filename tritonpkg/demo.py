"""The newcomer's path in one call: package a spec, validate the repository, serve it the way `tritonpkg
serve` does (tritonpkg.serve: verify, weights, plugins, Triton behind closed ports, merged /metrics), send
the spec's smoke request, stop. Each step reports through `on_step`, so the CLI can show progress without
this module knowing about terminals."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tritonpkg.errors import TritonpkgError


class DemoError(TritonpkgError):
    """A demo step failed; the message says which and why."""


@dataclass
class DemoResult:
    repository: Path
    models: list[str]
    model: str
    request: dict[str, Any]
    answer: dict[str, Any]
    warnings: list[str] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)
    endpoints: dict[str, str] = field(default_factory=dict)
    serve_steps: list[str] = field(default_factory=list)  # the start-up steps serve ran, in order


def run(spec_path: str | Path, repository: str | Path, on_step: Callable[[str], None] = lambda _: None,
        startup_timeout: float | None = 300.0) -> DemoResult:
    from tritonpkg import smoke
    from tritonpkg.repository import package_spec
    from tritonpkg.runtime import ensure_runtime
    from tritonpkg.serve import ServingStack, StartupOptions
    from tritonpkg.spec import load_spec
    from tritonpkg.validate import validate_repository
    from tritonpkg.validate.sampling import smoke_request_problem

    seconds: dict[str, float] = {}
    t0 = time.monotonic()

    def lap(name: str) -> None:
        nonlocal t0
        seconds[name] = round(time.monotonic() - t0, 2)
        t0 = time.monotonic()

    on_step("package")
    spec = load_spec(spec_path)
    request = spec.deployment.smoke_request
    if not request:
        raise DemoError("the spec has no smoke request to send", file=spec.source, field="deployment.smoke_request",
                        expected="input name -> value, e.g. {text_input: hello}")
    result = package_spec(spec, repository)
    lap("package")

    on_step("validate")
    report = validate_repository(result.repository, target_release="local")  # what is about to run
    errors = [p for p in report.problems if p.severity == "error"]
    refused = smoke_request_problem(request, "local")
    if refused:
        raise DemoError(f"the smoke request's sampling_parameters would be refused: {refused}", file=spec.source,
                        field="deployment.smoke_request.sampling_parameters",
                        expected="SamplingParams fields of the local runtime's vLLM")
    if errors:
        raise DemoError("validate found problems:\n" + "\n".join(f"  {p.file}: {p.field or ''} {p.message}"
                                                                 for p in errors), file=result.repository)
    lap("validate")

    on_step("runtime")
    runtime = ensure_runtime()
    lap("runtime")

    on_step("serve")
    options = StartupOptions(source=result.repository, http_port=0, grpc_port=0, metrics_port=0, openai=False,
                             startup_timeout=startup_timeout)
    with ServingStack(options, runtime=runtime) as stack:
        lap("serve")
        on_step("request")
        served = stack.endpoints()
        answer = smoke.send(served["http_url"], spec.name, request)
        lap("request")
        endpoints = {"http": served["http_url"], "grpc": served["grpc_url"], "metrics": served["metrics_url"]}
        serve_steps = [step["step"] for step in served["steps"]]
        on_step("stop")
    lap("stop")
    return DemoResult(
        repository=result.repository,
        models=result.models,
        model=spec.name,
        request=request,
        answer=answer,
        warnings=[f"{p.file}: {p.message}" for p in report.problems if p.severity == "warning"],
        seconds=seconds,
        endpoints=endpoints,
        serve_steps=serve_steps,
    )
