"""File-system steps the installer needs to be safe under concurrency and interruption."""

from __future__ import annotations

import contextlib
import fcntl
import filecmp
import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """An exclusive advisory lock, so two processes do not copy 150 MB into the same cache at once."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def link_or_copy(src: str, dst: str) -> str:
    """Hard-link when the cache shares a file system with site-packages (instant, no extra space);
    copy otherwise. Either way the cache survives a later `pip uninstall`."""
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)
    return dst


def tmp_sibling(path: Path, tag: str = "tmp") -> Path:
    return path.with_name(f".{path.name}.{tag}-{os.getpid()}-{uuid.uuid4().hex[:8]}")


def same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b) or filecmp.cmp(a, b, shallow=False)
    except OSError:
        return False


def place_file(src: Path, dst: Path) -> None:
    """Make `dst` a copy of `src`, replacing it atomically, and only when the content differs."""
    if dst.is_file() and not dst.is_symlink() and same_file(src, dst):
        return
    tmp = tmp_sibling(dst)
    link_or_copy(str(src), str(tmp))
    os.replace(tmp, dst)


def place_symlink(target: Path, dst: Path) -> None:
    """Point `dst` at `target`; a reader sees the old or the new link, never none."""
    if dst.is_symlink() and Path(os.readlink(dst)) == target:
        return
    if dst.exists() and not dst.is_symlink():
        remove_tree(dst)
    tmp = tmp_sibling(dst)
    os.symlink(target, tmp, target_is_directory=True)
    os.replace(tmp, dst)


def remove_tree(path: Path) -> None:
    """Rename first, then delete, so no reader ever sees a half-deleted directory under the real name."""
    if not path.exists() and not path.is_symlink():
        return
    if path.is_symlink() or path.is_file():
        path.unlink()
        return
    trash = tmp_sibling(path, "trash")
    os.rename(path, trash)
    shutil.rmtree(trash, ignore_errors=True)
