"""Building model repositories: config.pbtxt from Triton's protobuf schema, model.json, rendered
templates, the lock file, an atomic write and a reproducible archive.

The names below load on first use (PEP 562): `tritonpkg.repository.atomic`, which materialize and
serve need, must not pull in tritonclient and numpy (a third of a second on every CLI start)."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS = {
    "BuiltModel": "build", "build_models": "build", "engine_args": "build",
    "LOCK_NAME": "lock", "verify_lock": ("lock", "verify"),
    "PackageResult": "package", "package_spec": "package",
}

__all__ = sorted(_EXPORTS)  # noqa: PLE0605  the lazy names are listed once, in _EXPORTS

if TYPE_CHECKING:
    from tritonpkg.repository.build import BuiltModel as BuiltModel
    from tritonpkg.repository.build import build_models as build_models
    from tritonpkg.repository.build import engine_args as engine_args
    from tritonpkg.repository.lock import LOCK_NAME as LOCK_NAME
    from tritonpkg.repository.lock import verify as verify_lock  # noqa: F401  exported under this name
    from tritonpkg.repository.package import PackageResult as PackageResult
    from tritonpkg.repository.package import package_spec as package_spec


def __getattr__(name: str) -> Any:
    target = _EXPORTS.get(name)
    if target is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module, attr = target if isinstance(target, tuple) else (target, name)
    value = getattr(importlib.import_module(f"{__name__}.{module}"), attr)
    globals()[name] = value
    return value
