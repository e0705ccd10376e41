"""The Prometheus multiprocess directory the vLLM engines write into (prometheus_client's file-backed
values, one file per process and metric kind), and reading it back as one exposition."""

from __future__ import annotations

import os
from pathlib import Path

from tritonpkg.errors import RuntimeSetupError


def prepare_multiproc_dir(path: str | Path) -> Path:
    """Create `path` and remove the value files a previous run left (prometheus_client would add them to
    this run's counters). Only its `*.db` files are removed: the folder may be one the user chose."""
    path = Path(path).absolute()
    try:
        path.mkdir(parents=True, exist_ok=True)
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
