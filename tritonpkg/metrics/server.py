"""`MergedMetricsServer`: the public /metrics of a serving stack. Each scrape fetches Triton's metrics
from its internal port and reads the multiprocess directory, so the answer is as fresh as either source;
a source that cannot be read is reported by `tritonpkg_metrics_source_up` instead of failing the scrape."""

from __future__ import annotations

import threading
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from tritonpkg.errors import RuntimeSetupError
from tritonpkg.metrics.exposition import MergedExposition, merge_expositions
from tritonpkg.metrics.multiproc import multiproc_exposition

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
FETCH_TIMEOUT = 3.0


def _fetch(url: str) -> str:
    with urllib.request.urlopen(url, timeout=FETCH_TIMEOUT) as resp:
        return resp.read().decode()


def _up_family(up: dict[str, bool]) -> str:
    lines = ["# HELP tritonpkg_metrics_source_up 1 when the last scrape could read this source of /metrics.",
             "# TYPE tritonpkg_metrics_source_up gauge"]
    lines += [f'tritonpkg_metrics_source_up{{source="{name}"}} {int(ok)}' for name, ok in up.items()]
    return "\n".join(lines) + "\n"


class MergedMetricsServer:
    """Serves GET /metrics on (host, port) from a thread; port 0 picks a free one."""

    def __init__(self, triton_metrics_url: str | None, multiproc_dir: str | Path | None, host: str = "127.0.0.1",
                 port: int = 0) -> None:
        self.triton_metrics_url = triton_metrics_url
        self.multiproc_dir = Path(multiproc_dir) if multiproc_dir else None
        self.host, self.port = host, port
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host = "127.0.0.1" if self.host in ("0.0.0.0", "") else self.host
        return f"http://{host}:{self.port}/metrics"

    def collect(self) -> MergedExposition:
        sources: list[tuple[str, str]] = []
        up: dict[str, bool] = {}
        if self.triton_metrics_url:
            try:
                sources.append(("triton", _fetch(self.triton_metrics_url)))
                up["triton"] = True
            except (OSError, urllib.error.URLError):
                up["triton"] = False
        if self.multiproc_dir is not None:
            try:
                sources.append(("vllm", multiproc_exposition(self.multiproc_dir)))
                up["vllm"] = True
            except (OSError, ValueError):  # a value file half-written by a dying process
                up["vllm"] = False
        return merge_expositions([("tritonpkg", _up_family(up)), *sources])

    def start(self) -> "MergedMetricsServer":
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's spelling
                if self.path.split("?")[0] != "/metrics":
                    self.send_error(404, "only /metrics is served here")
                    return
                body = server.collect().text.encode()
                self.send_response(200)
                self.send_header("Content-Type", CONTENT_TYPE)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_args: object) -> None:
                pass

        try:
            self._httpd = ThreadingHTTPServer((self.host, self.port), Handler)
        except OSError as exc:
            raise RuntimeSetupError(f"cannot open the metrics port {self.port} on {self.host}: {exc.strerror or exc}",
                                    field="metrics_port", expected="a free port (0 picks one)") from exc
        self._httpd.daemon_threads = True
        self.port = self._httpd.server_address[1]
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="tritonpkg-metrics", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> "MergedMetricsServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
