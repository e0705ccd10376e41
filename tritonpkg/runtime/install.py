"""Install the Triton server from the nvidia-pytriton wheel into the user cache.

The copy is staged in a sibling directory, the marker is written last, and the stage is renamed into
place: an interrupted or concurrent install can leave a stray `.stage-*` folder but never a directory
under the real name that looks complete and is not."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from pathlib import Path

from tritonpkg.errors import RuntimeSetupError
from tritonpkg.runtime.fsutil import file_lock, link_or_copy, remove_tree
from tritonpkg.runtime.layout import MARKER, install_root, libs_dir, server_tree
from tritonpkg.runtime.source import RuntimeSource

LOCK_NAME = ".install.lock"


def read_marker(root: Path) -> dict | None:
    """The marker's content, or None when `root` is not a complete install."""
    try:
        data = json.loads((root / MARKER).read_text())
    except (OSError, ValueError):
        return None
    if not (server_tree(root) / "bin" / "tritonserver").is_file():
        return None
    return data


def install_server(src: RuntimeSource, cache: Path) -> Path:
    """Return `<cache>/triton-<version>`, installing it first when it is missing or incomplete."""
    root = install_root(cache, src.server_version)
    if read_marker(root) is not None:
        return root
    cache.mkdir(parents=True, exist_ok=True)
    with file_lock(cache / LOCK_NAME):
        if read_marker(root) is not None:  # another process finished while we waited
            return root
        _sweep_leftovers(cache)
        remove_tree(root)  # a directory without a marker is a leftover, not a runtime
        stage = Path(tempfile.mkdtemp(prefix=f".stage-{root.name}-", dir=cache))
        os.chmod(stage, 0o755)  # noqa: S103  mkdtemp makes it private; the runtime is read by whoever runs it
        try:
            _populate(src, stage)
            os.rename(stage, root)
        except BaseException:
            shutil.rmtree(stage, ignore_errors=True)
            raise
    return root


def _populate(src: RuntimeSource, stage: Path) -> None:
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    try:
        shutil.copytree(src.tree, server_tree(stage), copy_function=link_or_copy, ignore=ignore)
        shutil.copytree(src.libs, libs_dir(stage), copy_function=link_or_copy, ignore=ignore)
    except OSError as exc:
        raise RuntimeSetupError(
            f"copying the Triton server into the cache failed: {exc}",
            file=stage.parent,
            expected="a writable cache directory with ~150 MB free (TRITONPKG_CACHE selects another)",
        ) from exc
    marker = {
        "server_version": src.server_version,
        "source": str(src.site),
        "nvidia_pytriton": src.dist_version,
        "installed_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    tmp = stage / f"{MARKER}.tmp"
    with open(tmp, "w") as fh:
        json.dump(marker, fh, indent=2)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, stage / MARKER)


def _sweep_leftovers(cache: Path) -> None:
    """Stages and trash from installs that died; safe because we hold the install lock."""
    for leftover in cache.glob(".stage-*"):
        shutil.rmtree(leftover, ignore_errors=True)
    for leftover in cache.glob(".*.trash-*"):
        shutil.rmtree(leftover, ignore_errors=True)
