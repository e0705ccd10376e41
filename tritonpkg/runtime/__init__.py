"""The real local Triton runtime: Triton 2.51 from the nvidia-pytriton wheel, installed into the user
cache, with a backend directory holding the Python backend and the toolkit's own backends.

    rt = ensure_runtime()
    with TritonServer(repo, runtime=rt) as srv:
        ...  # srv.http_url, srv.grpc_url, srv.load_model(name)

Bringing a model up the way production does (unpack, verify, weights, plugins, Triton, metrics, frontend)
is tritonpkg.serve's job; this package installs and runs Triton.
"""

from __future__ import annotations

from tritonpkg.runtime.ensure import ensure_runtime, find_runtime
from tritonpkg.runtime.environment import STUB_LOCALE_NOTE, server_environment
from tritonpkg.runtime.info import runtime_report
from tritonpkg.runtime.layout import Runtime
from tritonpkg.runtime.server import ServerStartError, TritonServer
from tritonpkg.runtime.source import RuntimeSource, locate_source

__all__ = [
    "STUB_LOCALE_NOTE",
    "Runtime",
    "RuntimeSource",
    "ServerStartError",
    "TritonServer",
    "ensure_runtime",
    "find_runtime",
    "locate_source",
    "runtime_report",
    "server_environment",
]
