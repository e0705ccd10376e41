"""Put first on the Python path of a process (bench/response_ceiling.py does it for the Triton stub through a
.pth file, as the stub's isolated interpreter ignores PYTHONPATH) with TRITONPKG_BENCH_INSTANT_ENGINE=1 in its
environment: vLLM's AsyncLLM then runs with the
instant token source of instant_core.py in place of its EngineCore. Nothing of vLLM is imported here (the stub
fixes its locale before it imports vLLM): an import hook patches `vllm.v1.engine.core_client` and
`vllm.v1.engine.async_llm` when the backend first imports them."""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
from typing import Any

ENV = "TRITONPKG_BENCH_INSTANT_ENGINE"
TARGETS = ("vllm.v1.engine.core_client", "vllm.v1.engine.async_llm")


def _patch(module: Any) -> None:
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from instant_core import InstantCore

    if module.__name__ == "vllm.v1.engine.core_client":
        def make_async_mp_client(*args: Any, **kwargs: Any) -> InstantCore:
            return InstantCore(*args, **kwargs)

        module.EngineCoreClient.make_async_mp_client = staticmethod(make_async_mp_client)
    else:
        start_handler = module.AsyncLLM._run_output_handler

        def run_output_handler(self: Any) -> None:
            if isinstance(self.engine_core, InstantCore):  # it pulls: it reads which outputs were taken
                self.engine_core.output_processor = self.output_processor
            start_handler(self)

        module.AsyncLLM._run_output_handler = run_output_handler


class _Loader(importlib.abc.Loader):
    def __init__(self, inner: importlib.abc.Loader) -> None:
        self.inner = inner

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> Any:
        return self.inner.create_module(spec)

    def exec_module(self, module: Any) -> None:
        self.inner.exec_module(module)
        _patch(module)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if name not in TARGETS:
            return None
        for finder in sys.meta_path:
            if finder is self:
                continue
            spec = finder.find_spec(name, path, target) if hasattr(finder, "find_spec") else None
            if spec is not None and spec.loader is not None:
                spec.loader = _Loader(spec.loader)
                return spec
        return None


if os.environ.get(ENV) == "1":
    sys.meta_path.insert(0, _Finder())
    print(f"[instant engine] pid {os.getpid()}: vLLM's EngineCore will be the instant token source", file=sys.stderr)
