"""The `docker run` that serves a repository in NVIDIA's own image for a release: what a GPU host
runs instead of the local CPU runtime. Nothing is executed here; the command is returned."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable

from tritonpkg.errors import RuntimeSetupError

CONTAINER_REPO = "/models"
CONTAINER_PORTS = {"http": 8000, "grpc": 8001, "metrics": 8002}


def _host_path(path: Path, field: str) -> str:
    """Absolute (symlinks kept: the model config names the path the user gave); `-v` splits on ':'."""
    text = os.path.abspath(os.fspath(path))
    if ":" in text:
        raise RuntimeSetupError("a path with ':' cannot be mounted with docker -v", file=text, field=field,
                                expected="a path without ':'")
    return text


def docker_command(
    repo: Path,
    release: str,
    *,
    weights: Iterable[Path] = (),
    http_port: int = 8000,
    grpc_port: int = 8001,
    metrics_port: int = 8002,
    gpus: str | None = "all",
    shm_size: str = "2g",
) -> list[str]:
    """argv for `docker run` of `<release>-vllm-python-py3` with `repo` read-only at /models and each
    weights path read-only at its own absolute path (so paths inside model.json stay valid)."""
    from tritonpkg.compat import get_release

    image = get_release(release).ngc_image
    argv = ["docker", "run", "--rm"]
    if gpus:
        # docker parses --gpus as CSV: a device list needs its own quotes (--gpus '"device=0,1"').
        argv += ["--gpus", f'"{gpus}"' if "," in gpus and not gpus.startswith('"') else gpus]
    argv += [f"--shm-size={shm_size}", "--ulimit", "memlock=-1", "--ulimit", "stack=67108864"]
    for host, name in ((http_port, "http"), (grpc_port, "grpc"), (metrics_port, "metrics")):
        argv += ["-p", f"{host}:{CONTAINER_PORTS[name]}"]
    argv += ["-v", f"{_host_path(repo, 'repo')}:{CONTAINER_REPO}:ro"]
    seen: set[str] = set()
    for w in weights:
        path = _host_path(w, "weights")
        if path not in seen:
            seen.add(path)
            argv += ["-v", f"{path}:{path}:ro"]
    argv += [image, "tritonserver", f"--model-repository={CONTAINER_REPO}"]
    return argv
