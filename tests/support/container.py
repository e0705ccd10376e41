"""A container's view without Docker: a command run (as root) in its own mount and network namespaces, chrooted
into a tmpfs root that holds only the system folders, the "image" (the toolkit checkout, its virtualenv and local
Triton placed at /opt/tritonserver as NVIDIA's images have it) and the container's `-v` mounts at their container
paths, read-only. The host folders a repository came from are absent there, and covered by a tmpfs where an image
folder would show them, so a host path left in any file the server reads fails. The network namespace has its
own loopback (fixed container ports never meet another test's); `in_network` runs a client inside it, as a
published port would reach the container."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import sysconfig
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.engine_layout import GPU_LAYOUT, VLLM_MP
from tritonpkg.proc.group import own_group

SYSTEM = ("usr", "bin", "lib", "lib64", "sbin", "etc")
"""The host's system folders the image is made of (Debian's /bin, /lib... are links into /usr: kept as links)."""
PSEUDO = ("dev", "proc", "sys")
TRITON_HOME = "/opt/tritonserver"


def volumes(argv: Sequence[str]) -> list[tuple[str, str]]:
    """(host, container) of each `-v HOST:CONTAINER:ro` of a docker argv; every one must be read-only."""
    found = []
    for i, arg in enumerate(argv):
        if arg == "-v":
            host, container, mode = argv[i + 1].split(":")
            assert mode == "ro", argv[i + 1]
            found.append((host, container))
    return found


def image_part(argv: Sequence[str], image: str) -> list[str]:
    """What follows the image in a docker argv: the container's command (or its entrypoint's arguments)."""
    return list(argv[argv.index(image) + 1:])


@dataclass
class ContainerView:
    root: Path  # an empty host folder the namespace mounts its tmpfs root on
    mounts: list[tuple[str, str]]  # (host, container), all read-only
    image: list[tuple[str, str]] = field(default_factory=list)  # (host, container) of the image's own folders
    hidden: list[str] = field(default_factory=list)  # host folders that must not be seen
    writable: list[str] = field(default_factory=list)  # container folders that get an empty tmpfs (the image's HOME)

    @classmethod
    def for_toolkit(cls, root: Path, mounts: list[tuple[str, str]], runtime, checkout: Path,
                    hidden: Iterable[str]) -> ContainerView:
        """The image: the toolkit checkout and its virtualenv's interpreter (same paths), the local Triton's binary,
        libraries and backend folder at /opt/tritonserver/{bin,lib,backends}."""
        python_home = Path(sys.base_prefix)
        image = [(str(checkout), str(checkout)), (str(python_home), str(python_home)),
                 (str(runtime.server_bin.parent), f"{TRITON_HOME}/bin"),
                 (str(runtime.lib_dirs[0]), f"{TRITON_HOME}/lib"),
                 (str(runtime.backend_dir), f"{TRITON_HOME}/backends")]
        # the backend folder links each toolkit backend to its checkout folder: visible, being inside the checkout
        return cls(root, mounts, image, list(hidden))

    def script(self) -> str:
        r = shlex.quote(str(self.root))
        lines = ["set -eu", "ip link set lo up", f"mount -t tmpfs -o mode=755 tmpfs {r}"]
        for name in SYSTEM:
            host = Path("/") / name
            if host.is_symlink():
                lines.append(f"ln -s {shlex.quote(os.readlink(host))} {r}/{name}")
            elif host.is_dir():
                lines += [f"mkdir -p {r}/{name}", f"mount --rbind /{name} {r}/{name}"]
        for name in PSEUDO:
            lines += [f"mkdir -p {r}/{name}", f"mount --rbind /{name} {r}/{name}"]
        lines += [f"mkdir -p {r}/tmp", f"mount -t tmpfs -o mode=1777 tmpfs {r}/tmp"]
        for host, container in sorted(self.image + self.mounts, key=lambda m: len(Path(m[1]).parts)):
            target = f"{r}{shlex.quote(container)}"
            make = (f"mkdir -p {target}" if Path(host).is_dir()
                    else f"mkdir -p $(dirname {target}); [ -e {target} ] || : > {target}")
            lines += [make, f"mount --bind {shlex.quote(host)} {target}", f"mount -o remount,bind,ro {target}"]
        for container in self.writable:
            lines += [f"mkdir -p {r}{shlex.quote(container)}",
                      f"mount -t tmpfs -o mode=1777 tmpfs {r}{shlex.quote(container)}"]
        for host in self.hidden:
            target = f"{r}{shlex.quote(host)}"
            lines.append(f"if [ -d {target} ]; then mount -t tmpfs tmpfs {target}; fi")
        lines.append(f'exec chroot {r} "$@"')
        return "\n".join(lines)

    def popen(self, command: Sequence[str], env: dict[str, str], log: Path, cwd: str = "/") -> subprocess.Popen:
        """Start `command` in the view (cwd inside it); output to `log` on the host."""
        inner = ["/bin/sh", "-c", f"cd {shlex.quote(cwd)} && exec \"$@\"", "container", *command]
        argv = ["unshare", "--mount", "--net", "--propagation", "private", "--", "/bin/sh", "-c", self.script(),
                "view", "/usr/bin/env", "-i", *(f"{k}={v}" for k, v in env.items()), *inner]
        with open(log, "wb") as out:
            return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    **own_group())


def in_network(pid: int, argv: Sequence[str], timeout: float) -> subprocess.CompletedProcess:
    """Run `argv` (on the host's files) inside the network namespace of process `pid`, once `pid` has one of its own:
    `unshare --net` makes it only after it starts, and an nsenter before that joins this host's namespace (seen: a
    client polling the host's loopback for a server that was ready in the view)."""
    own = os.readlink("/proc/self/ns/net")
    deadline = time.monotonic() + 30
    while os.readlink(f"/proc/{pid}/ns/net") == own:
        assert time.monotonic() < deadline, f"process {pid} never left this network namespace"
        time.sleep(0.02)
    return subprocess.run(["nsenter", f"--net=/proc/{pid}/ns/net", "--", *argv], capture_output=True, text=True,
                          timeout=timeout, check=False)


def interpreter_env(venv_bin: Path, extra_path: Iterable[str] = ()) -> dict[str, str]:
    """The environment the image's ENV lines would give: the virtualenv first on PATH, this interpreter's libpython
    first for the Python-backend stub (tritonpkg.runtime.environment's rule). The vLLM engines run the layout the rest
    of the suite runs (tests/support/engine_layout.py)."""
    libdir = sysconfig.get_config_var("LIBDIR") or ""
    return {"PATH": ":".join([str(venv_bin), *extra_path, "/usr/local/bin", "/usr/bin", "/bin"]),
            "LD_LIBRARY_PATH": ":".join(p for p in (libdir, f"{TRITON_HOME}/lib") if p),
            "HOME": "/tmp", "LANG": "C.UTF-8", "VLLM_CPU_KVCACHE_SPACE": "1", "NO_COLOR": "1", VLLM_MP: GPU_LAYOUT}
