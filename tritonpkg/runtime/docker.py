"""The `docker run` that serves a repository in NVIDIA's own image for a release: what a GPU host
runs instead of the local CPU runtime. Nothing is executed here; the command is returned."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from tritonpkg.errors import RuntimeSetupError
from tritonpkg.runtime import admin

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
    host: str = "127.0.0.1",
    admin_key: str | None = None,
) -> list[str]:
    """argv for `docker run` of `<release>-vllm-python-py3` with `repo` read-only at /models and each
    weights path read-only at its own absolute path (so paths inside model.json stay valid). Ports are
    published on `host` only (docker's default would be every interface), and Triton's admin APIs answer
    only to `admin_key` (runtime/admin.py; None: a new one, readable back from the argv)."""
    from tritonpkg.compat import get_release

    image = get_release(release).ngc_image
    argv = ["docker", "run", "--rm"]
    if gpus:
        # docker parses --gpus as CSV: a device list needs its own quotes (--gpus '"device=0,1"').
        argv += ["--gpus", f'"{gpus}"' if "," in gpus and not gpus.startswith('"') else gpus]
    argv += [f"--shm-size={shm_size}", "--ulimit", "memlock=-1", "--ulimit", "stack=67108864"]
    bind = _publish_host(host)
    for port, name in ((http_port, "http"), (grpc_port, "grpc"), (metrics_port, "metrics")):
        argv += ["-p", f"{bind}:{port}:{CONTAINER_PORTS[name]}"]
    argv += ["-v", f"{_host_path(repo, 'repo')}:{CONTAINER_REPO}:ro"]
    seen: set[str] = set()
    for w in weights:
        path = _host_path(w, "weights")
        if path not in seen:
            seen.add(path)
            argv += ["-v", f"{path}:{path}:ro"]
    argv += [image, "tritonserver", f"--model-repository={CONTAINER_REPO}",
             *admin.server_args(admin_key or admin.new_key())]
    return argv


def _publish_host(host: str) -> str:
    """The address part of `-p ADDRESS:HOST_PORT:CONTAINER_PORT` (IPv6 in brackets)."""
    import ipaddress

    text = (host or "").strip().strip("[]")
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        raise RuntimeSetupError(f"{host!r} is not an IP address docker can publish on", field="--host",
                                expected="an IP address such as 127.0.0.1 (the default) or 0.0.0.0") from None
    return f"[{address}]" if address.version == 6 else str(address)
