"""Loopback port choice. Several servers (and other people's tests) share this machine, so a port is
checked before use instead of trusting defaults: a health check answered by someone else's server on
a taken port would otherwise look like our server being ready.

Ports are chosen outside the kernel's ephemeral range (net.ipv4.ip_local_port_range): a port handed out
by `bind(0)` or an outgoing connection comes from that range, so a port chosen here and bound a minute
later (a server starting) cannot be taken in between by another process's `bind(0)` (vLLM's engine and
torch pick their ZMQ and rendezvous ports that way)."""

from __future__ import annotations

import contextlib
import secrets
import socket
import threading
from pathlib import Path

from tritonpkg.errors import RuntimeSetupError

_EPHEMERAL = Path("/proc/sys/net/ipv4/ip_local_port_range")
_FLOOR = 10000  # below: ports services commonly claim by number
_issued: set[int] = set()  # chosen by this process: not handed out twice before its first user binds it
_lock = threading.Lock()


def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = (int(v) for v in _EPHEMERAL.read_text().split())
        return low, high
    except (OSError, ValueError):
        return 32768, 60999  # Linux's default


def _candidate_ranges() -> list[range]:
    low, high = _ephemeral_range()
    ranges = [range(_FLOOR, low), range(high + 1, 65536)]
    return [r for r in ranges if len(r) >= 256]


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """`count` distinct ports free right now, outside the ephemeral range where it leaves room (all sockets
    held until all are chosen); otherwise ports the OS picks."""
    ranges = _candidate_ranges()
    with _lock, contextlib.ExitStack() as stack:
        ports: list[int] = []
        for _ in range(64 * count if ranges else 0):
            if len(ports) == count:
                break
            port = secrets.choice(secrets.choice(ranges))
            if port in _issued:
                continue
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                sock.bind((host, port))  # fails for a port taken, or one of `ports`, whose sockets are held
            except OSError:
                sock.close()
                continue
            stack.enter_context(sock)
            ports.append(port)
        while len(ports) < count:
            sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            sock.bind((host, 0))
            ports.append(sock.getsockname()[1])
        if len(_issued) > 4096:
            _issued.clear()
        _issued.update(ports)
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
