"""The Prometheus multiprocess directory the vLLM engines write into (prometheus_client's file-backed
values, one file per process and metric kind), and reading it back as one exposition."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from tritonpkg.errors import RuntimeSetupError

CLAIM_FILE = ".tritonpkg-serve.lock"


class MultiprocDirClaim:
    """An exclusive flock on a multiprocess directory for the life of one serving stack: two stacks sharing
    one PROMETHEUS_MULTIPROC_DIR would wipe each other's values and publish each other's series."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = os.open(path / CLAIM_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self.release()
            raise RuntimeSetupError("the Prometheus multiprocess directory is in use by another serving stack",
                                    file=path, field="PROMETHEUS_MULTIPROC_DIR",
                                    expected="a directory of its own per `tritonpkg serve` (unset the variable "
                                             "to get a private one)") from None

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def claim_multiproc_dir(path: str | Path) -> MultiprocDirClaim:
    """Claim `path` for this stack (see MultiprocDirClaim), then clear it with prepare_multiproc_dir."""
    path = prepare_multiproc_dir(path, clear=False)
    claim = MultiprocDirClaim(path)
    prepare_multiproc_dir(path)
    return claim


def prepare_multiproc_dir(path: str | Path, clear: bool = True) -> Path:
    """Create `path` and remove the value files a previous run left (prometheus_client would add them to
    this run's counters). Only its `*.db` files are removed: the folder may be one the user chose."""
    path = Path(path).absolute()
    try:
        path.mkdir(parents=True, exist_ok=True)
        if not clear:
            return path
        for stale in path.glob("*.db"):
            stale.unlink()
    except OSError as exc:
        raise RuntimeSetupError(f"cannot prepare the Prometheus multiprocess directory: {exc.strerror or exc}",
                                file=path, field="PROMETHEUS_MULTIPROC_DIR", expected="a writable folder") from exc
    if not os.access(path, os.W_OK):
        raise RuntimeSetupError("the Prometheus multiprocess directory is not writable", file=path,
                                field="PROMETHEUS_MULTIPROC_DIR", expected="a writable folder")
    return path


def multiproc_exposition(path: str | Path) -> str:
    """Every metric in the directory, aggregated across processes, in the text format."""
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.multiprocess import MultiProcessCollector

    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=str(path))
    return generate_latest(registry).decode()
