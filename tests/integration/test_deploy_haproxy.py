"""The local target's HAProxy configuration under load, against a real HAProxy whose one unit is a tiny
HTTP server this test controls: its /v2/health/ready answers late on purpose while requests flow.
With the old checks (every 250 ms, no check timeout, fall 1 rise 1, nothing kept) one late answer
marks the only unit DOWN and requests get 503; with the configuration's checks none fails.

Replays, with two such units of which one reads each request and closes without answering (a unit
killed mid-request): an inference is replayed on the other unit, except in the configuration before
(no body wait), and a model load or a body over the buffer never is."""

from __future__ import annotations

import http.client
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tritonpkg.deploy.drivers import haproxy
from tritonpkg.proc.ports import free_ports

pytestmark = pytest.mark.integration

OLD = haproxy.CheckPolicy(interval_ms=250, fast_interval_ms=250, timeout_ms=None, fall=1, rise=1, keep_last=False)


class Unit(ThreadingHTTPServer):
    """Answers every path at once with 200, except the readiness path, which waits `check_delay` s."""

    daemon_threads = True
    check_delay = 0.0


class Handler(BaseHTTPRequestHandler):
    server: Unit

    def do_GET(self) -> None:
        if self.path == "/v2/health/ready":
            time.sleep(self.server.check_delay)
        body = b"ok"
        try:
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            pass  # HAProxy gave up on a late check answer

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base class's name
        pass


@pytest.fixture
def unit() -> Iterator[Unit]:
    srv = Unit(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()


def start_proxy(tmp_path: Path, checks: haproxy.CheckPolicy | None = None, retry: haproxy.RetryPolicy | None = None,
                ) -> tuple[subprocess.Popen[bytes], haproxy.Admin, int]:
    tmp_path.mkdir(exist_ok=True)
    http_port, grpc_port = free_ports(2)
    sock, routes, cfg = tmp_path / "h.sock", tmp_path / "r.map", tmp_path / "h.cfg"
    routes.write_text("")
    cfg.write_text(haproxy.render_config(http_port=http_port, grpc_port=grpc_port, socket_path=sock,
                                         map_path=routes, slots=2, checks=checks, retry=retry))
    proc = subprocess.Popen([haproxy.find_haproxy(), "-f", str(cfg), "-db"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while not sock.exists():
        assert proc.poll() is None and time.monotonic() < deadline, "HAProxy did not start"
        time.sleep(0.05)
    return proc, haproxy.Admin(sock), http_port


def wait_up(admin: haproxy.Admin, timeout: float = 10.0, slot: int = 0) -> None:
    deadline = time.monotonic() + timeout
    while not any(s.get("pxname") == "live_http" and s.get("svname") == f"s{slot}" and s.get("status") == "UP"
                  for s in admin.stats()):
        assert time.monotonic() < deadline, f"slot {slot} never came UP"
        time.sleep(0.05)


def failed_under_slow_checks(tmp_path: Path, unit: Unit, checks: haproxy.CheckPolicy, delay: float,
                             seconds: float = 4.0) -> tuple[int, int, str]:
    """(failed, total) requests through the proxy while every check takes `delay` s, and slot 0's
    check status at the end."""
    proc, admin, port = start_proxy(tmp_path, checks)
    try:
        twins = checks.keep_last
        admin.send(haproxy.enable_slot(0, unit.server_address[1], unit.server_address[1], twins=twins))
        admin.send(haproxy.weight_commands({0: 100}, twins=twins))
        wait_up(admin)
        unit.check_delay = delay
        failed = total = 0
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            try:
                conn.request("GET", "/v2/models/m/infer")
                res = conn.getresponse()
                ok = res.status == 200 and res.read() == b"ok"
            except (OSError, http.client.HTTPException):
                ok = False
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            failed += not ok
            total += 1
            time.sleep(0.005)
        conn.close()
        status = next(s["status"] for s in admin.stats() if s.get("pxname") == "live_http" and s.get("svname") == "s0")
        return failed, total, status
    finally:
        unit.check_delay = 0.0
        proc.terminate()
        proc.wait(timeout=10)


def test_old_checks_take_the_only_unit_out_on_one_slow_answer(tmp_path: Path, unit: Unit) -> None:
    failed, total, _ = failed_under_slow_checks(tmp_path, unit, OLD, delay=0.4)
    assert total > 100 and failed > total / 4


def test_a_check_slower_than_its_interval_costs_no_request(tmp_path: Path, unit: Unit) -> None:
    checks = haproxy.CheckPolicy()
    assert checks.interval_ms / 1000 < 1.2 < checks.timeout_ms / 1000  # type: ignore[operator]
    failed, total, status = failed_under_slow_checks(tmp_path, unit, checks, delay=1.2)
    assert total > 100 and failed == 0 and status.startswith("UP")


def test_checks_that_fail_outright_keep_traffic_on_the_last_unit(tmp_path: Path, unit: Unit) -> None:
    """Every check times out, the unit goes DOWN, and its unchecked twin carries the traffic; without the
    twin the same checks drop it. A check that times out ends after timeout_ms, so `fall` of them take
    about interval + fall * timeout (7 s here)."""
    failed, total, status = failed_under_slow_checks(tmp_path / "twins", unit, haproxy.CheckPolicy(), delay=3.0,
                                                     seconds=9.0)
    assert total > 100 and failed == 0 and status.startswith("DOWN")
    no_twins = haproxy.CheckPolicy(keep_last=False)
    failed, total, status = failed_under_slow_checks(tmp_path / "none", unit, no_twins, delay=3.0, seconds=9.0)
    assert failed > 0 and status.startswith("DOWN")


class Dropper(ThreadingHTTPServer):
    """A unit that reads each POST whole, records it, and then either answers it (echoing the body) or,
    with `drop`, closes the connection without an answer, as a unit killed while working on it does."""

    daemon_threads = True

    def __init__(self, drop: bool) -> None:
        super().__init__(("127.0.0.1", 0), DropHandler)
        self.drop = drop
        self.seen: list[str] = []


class DropHandler(BaseHTTPRequestHandler):
    server: Dropper
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.server.seen.append(self.path)
        if self.server.drop:
            self.close_connection = True
            return
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base class's name
        pass


@pytest.fixture
def droppers() -> Iterator[tuple[Dropper, Dropper]]:
    pair = (Dropper(drop=True), Dropper(drop=False))
    for srv in pair:
        threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield pair
    for srv in pair:
        srv.shutdown()
        srv.server_close()


def post_split(port: int, path: str, body: bytes) -> int:
    """POST with the headers and the body in separate writes, as tritonclient and most HTTP clients send
    them; the answer's status, or 0 when the connection closed without one."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     f"Content-Length: {len(body)}\r\n\r\n".encode())
        time.sleep(0.02)
        sock.sendall(body)
        answer = sock.makefile("rb").readline()
    return int(answer.split()[1]) if answer else 0


def replay_run(tmp_path: Path, droppers: tuple[Dropper, Dropper], path: str, body: bytes,
               retry: haproxy.RetryPolicy | None = None, n: int = 8) -> tuple[list[int], list[str], list[str]]:
    """`n` POSTs through the proxy to two units sharing traffic 50/50, one of which drops every request
    it reads: the statuses, and the paths each unit saw."""
    proc, admin, port = start_proxy(tmp_path, retry=retry)
    try:
        for slot, srv in enumerate(droppers):
            admin.send(haproxy.enable_slot(slot, srv.server_address[1], srv.server_address[1]))
        admin.send(haproxy.weight_commands({0: 50, 1: 50}))
        for slot in (0, 1):
            wait_up(admin, slot=slot)
        statuses = [post_split(port, path, body) for _ in range(n)]
        return statuses, list(droppers[0].seen), list(droppers[1].seen)
    finally:
        proc.terminate()
        proc.wait(timeout=10)


INFER = b'{"inputs": [{"name": "X", "shape": [1], "datatype": "FP32", "data": [1.0]}]}'


def test_an_inference_its_unit_drops_is_replayed_on_another(tmp_path: Path, droppers: tuple[Dropper, Dropper]) -> None:
    statuses, dropped, answered = replay_run(tmp_path, droppers, "/v2/models/m/infer", INFER)
    assert statuses == [200] * 8 and dropped and len(answered) == 8


def test_without_waiting_for_the_body_a_dropped_inference_is_lost(tmp_path: Path,
                                                                  droppers: tuple[Dropper, Dropper]) -> None:
    """The configuration before: HAProxy sends the headers on as they come, so it holds no whole copy
    of the request and cannot replay it."""
    statuses, dropped, answered = replay_run(tmp_path, droppers, "/v2/models/m/infer", INFER,
                                             haproxy.RetryPolicy(body_wait_ms=None))
    assert statuses.count(502) == len(dropped) > 0 and statuses.count(200) == len(answered)


def test_a_model_load_is_never_sent_twice(tmp_path: Path, droppers: tuple[Dropper, Dropper]) -> None:
    path = "/v2/repository/models/m/load"
    statuses, dropped, answered = replay_run(tmp_path, droppers, path, b"{}")
    assert statuses.count(502) == len(dropped) > 0 and len(dropped) + len(answered) == 8


def test_a_body_larger_than_the_buffer_is_not_replayed(tmp_path: Path, droppers: tuple[Dropper, Dropper]) -> None:
    big = b'{"pad": "' + b"x" * (haproxy.RetryPolicy().buffer_kib * 1024) + b'"}'
    statuses, dropped, answered = replay_run(tmp_path, droppers, "/v2/models/m/infer", big, n=4)
    assert statuses.count(502) == len(dropped) > 0 and len(dropped) + len(answered) == 4
