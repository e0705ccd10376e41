"""Where an installed runtime keeps its parts, and the `Runtime` value that names them.

The install mirrors the wheel's own layout (`pytriton/tritonserver/...` beside `nvidia_pytriton.libs/`)
because the binaries carry RPATHs relative to themselves; keeping that shape means they resolve their
libraries in the cache exactly as they do in site-packages."""

from __future__ import annotations

import hashlib
import sys
from dataclasses import dataclass, field
from pathlib import Path

from tritonpkg import paths

MARKER = ".tritonpkg-runtime.json"
"""Written last into a staged install; a directory without it is never treated as a runtime."""

PIP_HINT = "pip install -e '.[runtime]'"
PYTHON_BACKEND_FILES = ("libtriton_python.so", "triton_python_backend_utils.py")
STUB_NAME = "triton_python_backend_stub"


def install_root(cache: Path, version: str) -> Path:
    return cache / f"triton-{version}"


def server_tree(root: Path) -> Path:
    """The `tritonserver` folder (bin/, backends/, caches/, python_backend_stubs/) inside an install or wheel."""
    return root / "pytriton" / "tritonserver"


def libs_dir(root: Path) -> Path:
    return root / "nvidia_pytriton.libs"


def backend_root(cache: Path) -> Path:
    """One backend directory per (interpreter, project checkout): the stub and the linked toolkit
    backends belong to them, so two venvs or two clones sharing a cache never swap each other's."""
    key = f"{sys.prefix}\0{paths.backends_dir().resolve()}"
    tag = f"py{sys.version_info.major}.{sys.version_info.minor}-{hashlib.sha256(key.encode()).hexdigest()[:12]}"
    return cache / "backends" / tag


@dataclass(frozen=True)
class Runtime:
    """An installed Triton runtime plus the backend directory built for the running interpreter."""

    version: str
    server_bin: Path
    backend_dir: Path
    lib_dirs: list[Path]
    root: Path
    python_version: str
    python_stub: Path
    toolkit_backends: tuple[str, ...] = field(default=())

    @property
    def cache_dir(self) -> Path:
        """The directory that holds `<root>/` and `backends/`, e.g. for server-side caches."""
        return self.root.parent

    def to_dict(self) -> dict:
        return {
            "version": self.version,
            "root": str(self.root),
            "server_bin": str(self.server_bin),
            "backend_dir": str(self.backend_dir),
            "lib_dirs": [str(p) for p in self.lib_dirs],
            "python_version": self.python_version,
            "python_stub": str(self.python_stub),
            "toolkit_backends": list(self.toolkit_backends),
        }
