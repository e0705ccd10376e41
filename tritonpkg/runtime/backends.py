"""Build the directory passed as `--backend-directory`.

`python/` holds Triton's Python backend with the stub for the running interpreter. Every folder of
the project's `backends/` that has a `model.py` is linked in beside it under its own name: Triton
runs such a folder as a Python-based backend for models whose config says `backend: "<name>"`.
Links (not copies) mean an edit to `backends/<name>/model.py` reaches the next model load."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from tritonpkg import paths
from tritonpkg.errors import RuntimeSetupError
from tritonpkg.runtime.fsutil import place_file, place_symlink, remove_tree
from tritonpkg.runtime.layout import PYTHON_BACKEND_FILES, STUB_NAME
from tritonpkg.runtime.source import python_stub

RESERVED = {"python"}


def current_python() -> str:
    return f"{sys.version_info.major}.{sys.version_info.minor}"


def toolkit_backends(source: Path | None = None) -> dict[str, Path]:
    """name -> folder for each subfolder of the project's backends/ that holds a model.py."""
    base = source if source is not None else paths.backends_dir()
    if not base.is_dir():
        return {}
    found = {}
    for folder in sorted(base.iterdir()):
        if folder.name.startswith((".", "_")) or not (folder / "model.py").is_file():
            continue
        if folder.name in RESERVED:
            raise RuntimeSetupError(
                "a toolkit backend may not be called 'python': it would shadow Triton's Python backend",
                file=folder,
                expected="another folder name",
            )
        found[folder.name] = folder.resolve()
    return found


def build_backend_dir(
    backend_dir: Path, server_tree: Path, python_version: str | None = None, source: Path | None = None
) -> tuple[Path, tuple[str, ...]]:
    """Create or refresh `backend_dir`; return (the stub placed in python/, toolkit backend names)."""
    version = python_version or current_python()
    stub = python_stub(server_tree, version)
    py = backend_dir / "python"
    py.mkdir(parents=True, exist_ok=True)
    for name in PYTHON_BACKEND_FILES:
        place_file(server_tree / "backends" / "python" / name, py / name)
    place_file(stub, py / STUB_NAME)
    os.chmod(py / STUB_NAME, 0o755)  # noqa: S103  the stub is executed by whoever runs Triton

    wanted = toolkit_backends(source)
    for name, folder in wanted.items():
        place_symlink(folder, backend_dir / name)
    for entry in backend_dir.iterdir():  # backends deleted from the project disappear here too
        if entry.name not in wanted and entry.name not in RESERVED and not entry.name.startswith("."):
            remove_tree(entry)
    return py / STUB_NAME, tuple(wanted)
