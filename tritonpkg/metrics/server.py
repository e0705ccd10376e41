"""`MergedMetricsServer`: the public /metrics of a serving stack. Each scrape fetches Triton's metrics
from its internal port and reads the multiprocess directory, so the answer is as fresh as either source;
a source that cannot be read is reported by `tritonpkg_metrics_source_up` instead of failing the scrape.

Triton's series must not vanish for one slow fetch (a busy 2-core host under start-up load took longer than
a short timeout): a failed fetch is tried again within the scraper's own timeout, and if it still fails the
last good Triton text, no older than `stale_after` seconds, is served again with its source marked down."""

from __future__ import annotations

import threading
import time
import urllib.request
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from tritonpkg.errors import RuntimeSetupError
from tritonpkg.metrics.exposition import MergedExposition, merge_expositions
from tritonpkg.metrics.multiproc import multiproc_exposition

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
SCRAPE_BUDGET = 8.0  # seconds for one scrape when the scraper does not say (Prometheus' default timeout is 10)
SCRAPE_TIMEOUT_HEADER = "X-Prometheus-Scrape-Timeout-Seconds"
FETCH_ATTEMPTS = 2


def _fetch(url: str, timeout: float) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return resp.read().decode()


def _budget(header: str | None) -> float:
    """Seconds this scrape may spend on Triton: the scraper's timeout less a margin for the reply."""
    try:
        return max(0.5, min(SCRAPE_BUDGET, float(header) - 1.0)) if header else SCRAPE_BUDGET
    except ValueError:
        return SCRAPE_BUDGET


def _up_family(up: dict[str, bool]) -> str:
    lines = ["# HELP tritonpkg_metrics_source_up 1 when the last scrape could read this source of /metrics.",
             "# TYPE tritonpkg_metrics_source_up gauge"]
    lines += [f'tritonpkg_metrics_source_up{{source="{name}"}} {int(ok)}' for name, ok in up.items()]
    return "\n".join(lines) + "\n"


class MergedMetricsServer:
    """Serves GET /metrics on (host, port) from a thread; port 0 picks a free one."""

    def __init__(self, triton_metrics_url: str | None, multiproc_dir: str | Path | None, host: str = "127.0.0.1",
                 port: int = 0, stale_after: float = 30.0) -> None:
        self.triton_metrics_url = triton_metrics_url
        self.multiproc_dir = Path(multiproc_dir) if multiproc_dir else None
        self.host, self.port = host, port
        self.stale_after = stale_after
        self._last_triton: tuple[float, str] | None = None  # (monotonic time, text) of the last good fetch
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host = "127.0.0.1" if self.host in ("0.0.0.0", "") else self.host
        return f"http://{host}:{self.port}/metrics"

    def fetch_triton(self, budget: float = SCRAPE_BUDGET) -> str:
        """Triton's metrics text, tried up to FETCH_ATTEMPTS times within `budget` seconds; remembered as the
        last good scrape. Raises OSError when every attempt failed."""
        deadline = time.monotonic() + budget
        attempt = 1
        while True:
            try:
                text = _fetch(self.triton_metrics_url,
                              timeout=max(0.1, (deadline - time.monotonic()) / (FETCH_ATTEMPTS - attempt + 1)))
                break
            except OSError:
                if attempt == FETCH_ATTEMPTS or time.monotonic() >= deadline:
                    raise
                attempt += 1
        self._last_triton = (time.monotonic(), text)
        return text

    def wait_for_triton(self, timeout: float, models: Sequence[str] = ()) -> None:
        """Block until Triton's metrics answer and name every model in `models`, so the first public scrape is
        complete; RuntimeSetupError after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        error = "no answer yet"
        while True:
            try:
                text = self.fetch_triton(budget=min(SCRAPE_BUDGET, max(0.5, deadline - time.monotonic())))
                missing = [m for m in models if f'model="{m}"' not in text]
                if not missing:
                    return
                error = f"no series yet for {', '.join(missing)}"
            except OSError as exc:
                error = str(exc)
            if time.monotonic() >= deadline:
                raise RuntimeSetupError(f"Triton's metrics at {self.triton_metrics_url} were not complete after "
                                        f"{timeout:.0f} s: {error}", field="metrics",
                                        expected="Triton's metrics endpoint answering for every ready model")
            time.sleep(0.2)

    def collect(self, budget: float = SCRAPE_BUDGET) -> MergedExposition:
        sources: list[tuple[str, str]] = []
        up: dict[str, bool] = {}
        if self.triton_metrics_url:
            try:
                sources.append(("triton", self.fetch_triton(budget)))
                up["triton"] = True
            except OSError:
                up["triton"] = False
                last = self._last_triton
                if last is not None and time.monotonic() - last[0] <= self.stale_after:
                    sources.append(("triton", last[1]))
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
                body = server.collect(_budget(self.headers.get(SCRAPE_TIMEOUT_HEADER))).text.encode()
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
