"""The real local Triton runtime: Triton 2.51 from the nvidia-pytriton wheel, installed into the user
cache, with a backend directory holding the Python backend and the toolkit's own backends.

    rt = ensure_runtime()
    with TritonServer(repo, runtime=rt) as srv:
        ...  # srv.http_url, srv.grpc_url, srv.load_model(name)

`tritonpkg serve` runs the whole start-up procedure (tritonpkg.runtime.startup) through ServingStack:

    with ServingStack(StartupOptions(source="pkg.tar.gz", openai=True)) as stack:
        stack.endpoints()  # http_url, grpc_url, metrics_url (merged), openai_url, models
"""

from __future__ import annotations

from tritonpkg.runtime.docker import docker_command
from tritonpkg.runtime.ensure import ensure_runtime, find_runtime
from tritonpkg.runtime.info import runtime_report
from tritonpkg.runtime.environment import STUB_LOCALE_NOTE, libpython, server_environment
from tritonpkg.runtime.layout import Runtime
from tritonpkg.runtime.ports import free_port, free_ports
from tritonpkg.runtime.server import ServerStartError, TritonServer
from tritonpkg.runtime.source import RuntimeSource, locate_source
from tritonpkg.runtime.stack import ServingStack
from tritonpkg.runtime.startup import StartupOptions

__all__ = [
    "Runtime",
    "RuntimeSource",
    "STUB_LOCALE_NOTE",
    "ServerStartError",
    "ServingStack",
    "StartupOptions",
    "TritonServer",
    "docker_command",
    "ensure_runtime",
    "find_runtime",
    "free_port",
    "free_ports",
    "libpython",
    "locate_source",
    "runtime_report",
    "server_environment",
]
