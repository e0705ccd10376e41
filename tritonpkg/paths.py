"""Where the toolkit's non-Python assets live (templates/, backends/), and the user cache.

An installed tritonpkg carries the assets inside the package (setup.py places them at tritonpkg/templates and
tritonpkg/backends); a checkout, and an editable install of it, has them beside the package. The environment
variables TRITONPKG_TEMPLATES and TRITONPKG_BACKENDS override both."""

from __future__ import annotations

import os
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
PROJECT_ROOT = PACKAGE_DIR.parent
"""The checkout's root, when tritonpkg runs from one (the benchmarks read its examples)."""


def _asset(name: str) -> Path:
    installed = PACKAGE_DIR / name
    return installed if installed.is_dir() else PROJECT_ROOT / name


def templates_dir() -> Path:
    return Path(os.environ.get("TRITONPKG_TEMPLATES", _asset("templates")))


def backends_dir() -> Path:
    return Path(os.environ.get("TRITONPKG_BACKENDS", _asset("backends")))


def cache_dir() -> Path:
    """User cache for the installed runtime (XDG_CACHE_HOME honoured; TRITONPKG_CACHE overrides)."""
    if "TRITONPKG_CACHE" in os.environ:
        return Path(os.environ["TRITONPKG_CACHE"])
    base = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    return base / "tritonpkg"
