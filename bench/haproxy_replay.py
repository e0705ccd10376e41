"""What holding replayable requests whole costs: the local target's HAProxy configuration (inference
waits for its body, so it can be replayed on another unit) against the same configuration that forwards
requests as they arrive (the configuration before, the baseline), both up at once in front of the same
unit, in rounds whose leader alternates. The unit is a tiny echo server, so the proxy's share shows.
Two clients per round: one write per request (http.client), and headers then body in two writes (as
tritonclient sends them), each on a keep-alive connection.

    .venv/bin/python bench/haproxy_replay.py [--rounds 6] [--requests 400] [--json OUT]
"""

from __future__ import annotations

import argparse
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tritonpkg.deploy.drivers import haproxy  # noqa: E402
from tritonpkg.proc.ports import free_ports  # noqa: E402

BODY = b'{"inputs": [{"name": "X", "shape": [4], "datatype": "FP32", "data": [1.0, 2.0, 3.0, 4.0]}]}'


class Echo(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body are two writes: Nagle + delayed ACK would add 40 ms

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base class's name
        pass


def start_proxy(work: Path, unit_port: int, retry: haproxy.RetryPolicy) -> tuple[subprocess.Popen[bytes], int]:
    work.mkdir()
    http_port, grpc_port = free_ports(2)
    sock, routes, cfg = work / "h.sock", work / "r.map", work / "h.cfg"
    routes.write_text("")
    cfg.write_text(haproxy.render_config(http_port=http_port, grpc_port=grpc_port, socket_path=sock,
                                         map_path=routes, slots=1, retry=retry))
    proc = subprocess.Popen([haproxy.find_haproxy(), "-f", str(cfg), "-db"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    while not sock.exists():
        time.sleep(0.05)
    admin = haproxy.Admin(sock)
    admin.send(haproxy.enable_slot(0, unit_port, unit_port))
    admin.send(haproxy.weight_commands({0: 100}))
    while not any(s.get("svname") == "s0" and s.get("status") == "UP" for s in admin.stats()):
        time.sleep(0.05)
    return proc, http_port


def read_answer(sock: socket.socket) -> None:
    reader = sock.makefile("rb")
    status = reader.readline()
    length = 0
    while (line := reader.readline()) not in (b"\r\n", b""):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
    if not status.startswith(b"HTTP/1.1 200") or len(reader.read(length)) != length:
        raise RuntimeError(f"bad answer {status!r}")


def client(port: int, split: bool) -> Callable[[int], list[float]]:
    head = (f"POST /v2/models/m/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(BODY)}\r\n\r\n").encode()

    def run(n: int) -> list[float]:
        times = []
        with socket.create_connection(("127.0.0.1", port)) as sock:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            for _ in range(n):
                t = time.perf_counter()
                if split:
                    sock.sendall(head)
                    sock.sendall(BODY)
                else:
                    sock.sendall(head + BODY)
                read_answer(sock)
                times.append(time.perf_counter() - t)
        return times
    return run


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--requests", type=int, default=400)
    ap.add_argument("--json", metavar="OUT", help="also write the table's figures here (as JSON)")
    args = ap.parse_args()
    unit = ThreadingHTTPServer(("127.0.0.1", 0), Echo)
    unit.daemon_threads = True
    threading.Thread(target=unit.serve_forever, daemon=True).start()
    systems = {"now (body held)": haproxy.RetryPolicy(), "before (forwarded as it comes)":
               haproxy.RetryPolicy(body_wait_ms=None)}
    with tempfile.TemporaryDirectory() as tmp:
        procs = {name: start_proxy(Path(tmp) / str(i), unit.server_address[1], policy)
                 for i, (name, policy) in enumerate(systems.items())}
        try:
            results: dict[tuple[str, str], list[float]] = {}
            for r in range(args.rounds):
                order = list(procs) if r % 2 == 0 else list(reversed(procs))
                for name in order:
                    for split in (False, True):
                        key = (name, "headers, body" if split else "one write")
                        results.setdefault(key, []).extend(client(procs[name][1], split)(args.requests))
        finally:
            for proc, _ in procs.values():
                proc.terminate()
                proc.wait(timeout=10)
    print(f"{'configuration':32} {'client':14} {'p50 ms':>8} {'p99 ms':>8} {'req/s':>8}")
    rows = []
    for (name, how), times in sorted(results.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        q = statistics.quantiles(times, n=100)
        print(f"{name:32} {how:14} {q[49] * 1e3:8.3f} {q[98] * 1e3:8.3f} {len(times) / sum(times):8.0f}")
        rows.append({"configuration": name, "client": how, "p50_ms": q[49] * 1e3, "p99_ms": q[98] * 1e3,
                     "req_s": len(times) / sum(times)})
    from tritonpkg.benchmarks import results as results_file

    results_file.write(args.json, "bench/haproxy_replay.py", {"rounds": args.rounds, "requests": args.requests},
                       {"rows": rows})


if __name__ == "__main__":
    main()
