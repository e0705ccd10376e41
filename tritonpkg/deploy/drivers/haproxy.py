"""HAProxy for the local target: the configuration (pure), and its runtime API over the admin socket,
which changes weights, addresses, map entries and drains servers without a reload.

Layout, fixed at start so nothing ever needs a reload: `SLOTS` server slots, each a tritonserver when
taken. Backends `live_http`/`live_grpc` hold every slot (weights = percent of unversioned traffic);
`slotK_http`/`slotK_grpc` hold slot K alone. A request naming a version (Triton's own
`/v2/models/<m>/versions/<N>/...` path, or an `x-model-version: <N>|current` header, which is how gRPC
asks) is sent to the slot the routes map names; everything else goes to `live_*`. Failed connects
and empty or 503 answers are retried on another server, so a unit that dies costs no request."""

from __future__ import annotations

import shutil
import socket
from pathlib import Path

from tritonpkg.errors import TritonpkgError

PLACEHOLDER = "127.0.0.1:9"  # never contacted: slots start disabled


class ProxyError(TritonpkgError):
    """HAProxy is missing, did not start, or refused a runtime command."""


def find_haproxy() -> str:
    path = shutil.which("haproxy") or next((p for p in ("/usr/sbin/haproxy", "/usr/local/sbin/haproxy")
                                            if Path(p).is_file()), None)
    if path is None:
        raise ProxyError("haproxy is not installed; the local target routes traffic through it",
                         field="--target local",
                         expected="haproxy on PATH: `apt-get install haproxy` (Debian/Ubuntu), or --target kubernetes")
    return path


def render_config(*, http_port: int, grpc_port: int, socket_path: Path, map_path: Path, slots: int,
                  check_interval_ms: int = 250) -> str:
    """The whole configuration. Health checks probe Triton's /v2/health/ready on each slot's HTTP port
    (also for the gRPC servers, through check-port), fall after one failure so a dead unit leaves the
    rotation within `check_interval_ms`."""
    servers_http = "\n".join(f"    server s{k} {PLACEHOLDER} weight 0 disabled check" for k in range(slots))
    servers_grpc = "\n".join(f"    server s{k} {PLACEHOLDER} proto h2 check-proto h1 weight 0 disabled check" for k in range(slots))
    slot_backends = "".join(
        f"\nbackend slot{k}_http\n    server s{k} {PLACEHOLDER} disabled check\n"
        f"\nbackend slot{k}_grpc\n    server s{k} {PLACEHOLDER} proto h2 check-proto h1 disabled check\n" for k in range(slots))
    route = f"%[var(txn.route),map({map_path},live)]"
    return f"""# written by tritonpkg deploy (local target); changed at run time through the admin socket only
global
    stats socket {socket_path} mode 600 level admin
    maxconn 4096

defaults
    mode http
    timeout connect 1s
    timeout client 60s
    timeout server 60s
    timeout http-request 10s
    timeout http-keep-alive 30s
    retries 3
    option redispatch 1
    retry-on conn-failure empty-response response-timeout 502 503 504
    option httpchk GET /v2/health/ready
    default-server inter {check_interval_ms}ms fastinter {check_interval_ms}ms downinter {check_interval_ms}ms fall 1 rise 1

frontend http_in
    bind 127.0.0.1:{http_port}
    http-request set-var(txn.route) str(default)
    http-request set-var(txn.route) path,field(6,/) if {{ path,field(5,/) -m str versions }}
    http-request set-var(txn.route) req.hdr(x-model-version) if {{ req.hdr(x-model-version) -m found }}
    use_backend {route}_http

frontend grpc_in
    bind 127.0.0.1:{grpc_port} proto h2
    http-request set-var(txn.route) str(default)
    http-request set-var(txn.route) req.hdr(x-model-version) if {{ req.hdr(x-model-version) -m found }}
    use_backend {route}_grpc

backend live_http
    balance roundrobin
{servers_http}

backend live_grpc
    balance roundrobin
{servers_grpc}
{slot_backends}"""


def enable_slot(slot: int, http_port: int, grpc_port: int) -> list[str]:
    """Point slot K at a server and take it out of maintenance, with no share of live traffic yet."""
    cmds = []
    for be, port in ((f"live_http", http_port), (f"live_grpc", grpc_port),
                     (f"slot{slot}_http", http_port), (f"slot{slot}_grpc", grpc_port)):
        cmds += [f"set server {be}/s{slot} addr 127.0.0.1 port {port}",
                 f"set server {be}/s{slot} check-port {http_port}"]
        if be.startswith("live"):
            cmds.append(f"set weight {be}/s{slot} 0")
        cmds.append(f"set server {be}/s{slot} state ready")
    return cmds


def weight_commands(weights: dict[int, int]) -> list[str]:
    """slot -> percent; raised weights first, so a shift never leaves a moment with no server."""
    order = sorted(weights.items(), key=lambda kv: -kv[1])
    return [f"set weight {be}/s{slot} {w}" for slot, w in order for be in ("live_http", "live_grpc")]


def disable_slot(slot: int) -> list[str]:
    return [f"set server {be}/s{slot} state maint"
            for be in ("live_http", "live_grpc", f"slot{slot}_http", f"slot{slot}_grpc")]


def drain_slot(slot: int) -> list[str]:
    return [f"set weight {be}/s{slot} 0" for be in ("live_http", "live_grpc")] + [
        f"set server {be}/s{slot} state drain" for be in ("live_http", "live_grpc", f"slot{slot}_http",
                                                          f"slot{slot}_grpc")]


class Admin:
    """The runtime API: commands joined with ';' go in one write, so HAProxy applies them together."""

    def __init__(self, socket_path: str | Path) -> None:
        self.socket_path = str(socket_path)

    def send(self, commands: list[str] | str, timeout: float = 5.0) -> str:
        line = commands if isinstance(commands, str) else "; ".join(commands)
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                sock.settimeout(timeout)
                sock.connect(self.socket_path)
                sock.sendall(line.encode() + b"\n")
                chunks = []
                while True:
                    data = sock.recv(65536)
                    if not data:
                        break
                    chunks.append(data)
        except OSError as exc:
            raise ProxyError(f"HAProxy admin socket did not answer: {exc}", file=self.socket_path) from exc
        answer = b"".join(chunks).decode(errors="replace")
        bad = [ln for ln in answer.splitlines() if ln.strip() and not _harmless(ln)]
        if bad and not line.startswith("show"):
            raise ProxyError(f"HAProxy refused `{line[:200]}`: {' | '.join(bad)[:400]}", file=self.socket_path)
        return answer

    def stats(self) -> list[dict[str, str]]:
        text = self.send("show stat")
        lines = [ln for ln in text.splitlines() if ln.strip()]
        if not lines or not lines[0].startswith("# "):
            return []
        header = lines[0][2:].split(",")
        return [dict(zip(header, ln.split(","))) for ln in lines[1:]]


def _harmless(line: str) -> bool:
    """Informational answers of set server / map commands."""
    low = line.lower()
    return any(s in low for s in ("ip changed", "port changed", "no need to change", "done", "health check port updated"))
