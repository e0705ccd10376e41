"""The merged /metrics port is public: slow or idle connections must not starve a real scrape nor cost a
thread each, a request head is bounded in time and size, and an optional bearer token guards it.

Before the fix (http.server's ThreadingHTTPServer, no timeout, listen backlog 5) 500 slow connections held
one thread each and later connections were reset."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tritonpkg.metrics import MergedMetricsServer, prepare_multiproc_dir

SLOW = 500
TOKEN = "scrape-token-0123456789abcdef"


def threads() -> int:
    return len(os.listdir("/proc/self/task"))


def scrape(url: str, headers: dict | None = None, timeout: float = 5.0) -> tuple[int, str]:
    req = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=5)


@pytest.fixture
def multiproc(tmp_path: Path) -> Path:
    return prepare_multiproc_dir(tmp_path / "mp")


def test_500_slow_connections_neither_starve_a_scrape_nor_take_a_thread_each(multiproc) -> None:
    with MergedMetricsServer(None, multiproc, port=0) as server:
        before = threads()
        held: list[socket.socket] = []
        stop = threading.Event()

        def trickle() -> None:  # half of them send one byte of a request line every second
            while not stop.wait(1.0):
                for s in held[::2]:
                    with contextlib.suppress(OSError):
                        s.send(b"G")

        sender = threading.Thread(target=trickle, daemon=True)
        try:
            held += [connect(server.port) for _ in range(SLOW)]  # a listen backlog of 5 reset these before
            sender.start()
            time.sleep(2.5)
            during = threads()
            started = time.monotonic()
            status, text = scrape(server.url)
            took = time.monotonic() - started
            assert status == 200 and "tritonpkg_metrics_source_up" in text
            assert took < 2.0, took
            assert during - before <= 2, (before, during)  # the trickle thread + at most the collector
            assert len(server._conns) <= server.max_connections
        finally:
            stop.set()
            for s in held:
                s.close()
        sender.join(timeout=5)


def test_a_request_head_must_arrive_within_the_timeout(multiproc) -> None:
    with MergedMetricsServer(None, multiproc, port=0, request_timeout=1.5) as server:
        idle, trickling = connect(server.port), connect(server.port)
        started = time.monotonic()
        for part in (b"GET /met", b"rics HTTP/1.1\r\n", b"Host: x\r\n"):
            trickling.send(part)
            time.sleep(0.4)
        for s in (idle, trickling):
            s.settimeout(5)
            assert s.recv(100) == b""  # closed by the server, no answer
            s.close()
        assert time.monotonic() - started < 3.5
        assert scrape(server.url)[0] == 200


def test_oversized_heads_and_bodies_are_refused(multiproc) -> None:
    with MergedMetricsServer(None, multiproc, port=0) as server:
        status, _ = scrape(server.url, {"X-Filler": "a" * 20000})
        assert status == 431
        s = connect(server.port)
        s.sendall(b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n" + b"a" * 20000)
        assert s.recv(100).startswith(b"HTTP/1.1 413")
        s.close()
        assert scrape(server.url)[0] == 200


def test_listen_backlog_is_raised() -> None:
    with MergedMetricsServer(None, None, port=0) as server:
        out = subprocess.run(["ss", "-ltnH", f"sport = :{server.port}"], capture_output=True, text=True,
                             check=False).stdout
    backlog = int(out.split()[2])  # Send-Q of a listening socket is its backlog
    assert backlog >= 1024 or backlog == int(Path("/proc/sys/net/core/somaxconn").read_text())


def test_a_bearer_token_guards_the_endpoint(multiproc) -> None:
    with MergedMetricsServer(None, multiproc, port=0, token=TOKEN) as server:
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Bearer {TOKEN}x"},
                        {"Authorization": f"Basic {TOKEN}"}, {"Authorization": TOKEN}):
            status, body = scrape(server.url, headers)
            assert status == 401, headers
            assert "tritonpkg_metrics_source_up" not in body
        status, text = scrape(server.url, {"Authorization": f"Bearer {TOKEN}"})
        assert status == 200 and "tritonpkg_metrics_source_up" in text
        # keep-alive: two scrapes on one connection, as Prometheus does
        import http.client

        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
        for _ in range(2):
            conn.request("GET", "/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
            resp = conn.getresponse()
            assert resp.status == 200 and b"tritonpkg_metrics_source_up" in resp.read()
        conn.close()


def test_the_serve_cli_takes_the_token_from_the_environment(tmp_path) -> None:
    """`--metrics-token` / TRITONPKG_METRICS_TOKEN reach the stack's options; a short token is refused."""
    from typer.testing import CliRunner

    from tritonpkg.cli import app

    result = CliRunner().invoke(app, ["serve", str(tmp_path / "missing"), "--metrics-token", "short"])
    assert result.exit_code == 2 and "--metrics-token" in result.output and "16 to 4096" in result.output
    result = CliRunner(env={"TRITONPKG_METRICS_TOKEN": "short"}).invoke(app, ["serve", str(tmp_path / "missing")])
    assert result.exit_code == 2 and "16 to 4096" in result.output
    result = CliRunner(env={"TRITONPKG_METRICS_TOKEN": TOKEN}).invoke(app, ["serve", str(tmp_path / "missing")])
    assert result.exit_code == 1 and "nothing to serve" in result.output  # the token passed; the source did not
