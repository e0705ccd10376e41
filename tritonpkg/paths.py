"""Where the toolkit's non-Python assets live (templates/, backends/), and the user cache."""

from __future__ import annotations

import os
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent


def templates_dir() -> Path:
    return Path(os.environ.get("TRITONPKG_TEMPLATES", PROJECT_ROOT / "templates"))


def backends_dir() -> Path:
    return Path(os.environ.get("TRITONPKG_BACKENDS", PROJECT_ROOT / "backends"))


def cache_dir() -> Path:
    """User cache for the installed runtime (XDG_CACHE_HOME honoured; TRITONPKG_CACHE overrides)."""
    if "TRITONPKG_CACHE" in os.environ:
        return Path(os.environ["TRITONPKG_CACHE"])
    base = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    return base / "tritonpkg"
