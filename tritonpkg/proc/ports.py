"""Loopback port choice. Several servers (and other people's tests) share this machine, so a port is
checked before use instead of trusting defaults: a health check answered by someone else's server on
a taken port would otherwise look like our server being ready."""

from __future__ import annotations

import contextlib
import socket

from tritonpkg.errors import RuntimeSetupError


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """`count` distinct ports the OS says are free right now (all sockets held until all are chosen)."""
    with contextlib.ExitStack() as stack:
        ports = []
        for _ in range(count):
            sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            sock.bind((host, 0))
            ports.append(sock.getsockname()[1])
        return ports


def free_port(host: str = "127.0.0.1") -> int:
    return free_ports(1, host)[0]


def port_in_use(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # TIME_WAIT is not "in use"
        try:
            sock.bind((host, port))
        except OSError:
            return True
    return False


def require_free(port: int, host: str, field: str) -> None:
    if port_in_use(port, host):
        raise RuntimeSetupError(
            f"port {port} on {host} is already in use", field=field, expected="a free port (0 picks one)"
        )
