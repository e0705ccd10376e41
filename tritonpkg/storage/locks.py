"""One materializer per model revision per host (and per shared file system where flock works): the
others wait, then find READY and reuse it. gc takes the same lock without waiting to skip revisions in use."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def hold(path: Path, timeout: float = -1) -> Iterator[float]:
    """Hold the lock at `path`; yields the seconds spent waiting. Raises filelock.Timeout on timeout."""
    from filelock import FileLock

    path.parent.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    with FileLock(str(path), timeout=timeout):
        yield time.monotonic() - start


def try_hold(path: Path):
    """A held lock or None when someone else holds it (for gc: never wait, never remove what is in use)."""
    from filelock import FileLock, Timeout

    path.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(path), timeout=0)
    try:
        lock.acquire()
    except Timeout:
        return None
    return lock
