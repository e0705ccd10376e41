"""Refuse before downloading when the destination cannot hold the bytes still to fetch."""

from __future__ import annotations

import shutil
from pathlib import Path

from tritonpkg.storage.errors import StorageError

MARGIN = 64 << 20


def human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return f"{n:.1f} TiB"


def check(directory: Path, needed: int, free: int | None = None) -> None:
    """`needed` bytes plus a small margin must be free on the file system holding `directory`."""
    probe = directory
    while not probe.exists():
        probe = probe.parent
    if free is None:
        free = shutil.disk_usage(probe).free
    if needed + MARGIN > free:
        raise StorageError(f"not enough free space: {human(needed)} still to download, {human(free)} free",
                           file=probe, expected=f"at least {human(needed + MARGIN)} free on that file system "
                           "(free space, or pick another --to)")
