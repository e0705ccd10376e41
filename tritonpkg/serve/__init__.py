"""Bringing a serving unit up, the one way `tritonpkg serve`, `tritonpkg demo` and the local deploy driver
all use: unpack and verify, weights on this machine, bundled plugins, a clean Prometheus multiprocess
directory, Triton behind closed ports until its models are ready, then the merged /metrics and the OpenAI API.

    with ServingStack(StartupOptions(source="pkg.tar.gz", openai=True)) as stack:
        stack.endpoints()  # http_url, grpc_url, metrics_url (merged), openai_url, models

tritonpkg.serve.plan decides the steps (pure), tritonpkg.serve.stack runs them; tritonpkg.runtime installs
and runs Triton itself."""

from __future__ import annotations

from tritonpkg.serve.plan import StartupOptions
from tritonpkg.serve.stack import ServingStack, StepEvent
from tritonpkg.serve.triton_options import TritonOptions

__all__ = ["ServingStack", "StartupOptions", "StepEvent", "TritonOptions"]
