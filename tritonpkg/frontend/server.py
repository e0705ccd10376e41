"""FrontendServer: the app under uvicorn in a background thread, for callers that already run
something else (the serve start-up, tests, the benchmark)."""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING

from tritonpkg.errors import RuntimeSetupError
from tritonpkg.frontend.settings import FrontendSettings

if TYPE_CHECKING:
    import uvicorn

START_TIMEOUT_S = 120.0
HEADERS_TOO_LARGE = (b'{"error":{"message":"the request line and headers are larger than this server accepts",'
                     b'"type":"invalid_request_error","param":null,"code":"headers_too_large"}}')


def bounded_http_protocol():
    """uvicorn's httptools protocol with h11's bound on the request head (its
    `h11_max_incomplete_event_size`), which httptools lacks: without it a client can send megabytes of
    headers and the server holds them all. Bytes are counted after parsing, so a chunk that ends the head
    and carries the body is not mistaken for a long head; at most one read (256 KiB) passes the bound.
    Without httptools: h11, which enforces the same bound itself."""
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
    except ImportError:
        return "h11"

    class BoundedHttpToolsProtocol(HttpToolsProtocol):
        _in_head = False
        _head_bytes = 0

        def on_message_begin(self) -> None:
            super().on_message_begin()
            self._in_head, self._head_bytes = True, 0

        def on_headers_complete(self) -> None:
            self._in_head = False
            super().on_headers_complete()

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if not self._in_head or self.transport.is_closing():
                return
            self._head_bytes += len(data)
            limit = self.config.h11_max_incomplete_event_size
            if limit is not None and self._head_bytes > limit:
                self.logger.warning("request head over %d bytes refused", limit)
                self.transport.write(b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-type: application/json"
                                     b"\r\ncontent-length: " + str(len(HEADERS_TOO_LARGE)).encode() +
                                     b"\r\nconnection: close\r\n\r\n" + HEADERS_TOO_LARGE)
                self.transport.close()

    return BoundedHttpToolsProtocol


class FrontendServer:
    """`with FrontendServer(settings) as fe: fe.url`. start() returns once the port listens and the
    models are discovered, or raises RuntimeSetupError with the reason."""

    def __init__(self, settings: FrontendSettings) -> None:
        self.settings = settings
        self.port = settings.port
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self._failure: BaseException | None = None

    @property
    def url(self) -> str:
        host = "127.0.0.1" if self.settings.host in ("0.0.0.0", "") else self.settings.host  # noqa: S104  maps the wildcard
        return f"http://{host}:{self.port}"

    def start(self, timeout: float = START_TIMEOUT_S) -> FrontendServer:
        import uvicorn

        from tritonpkg.frontend.app import create_app
        from tritonpkg.proc.ports import free_port

        if self._thread is not None:
            return self
        if not self.port:
            wildcard = self.settings.host in ("0.0.0.0", "")  # noqa: S104  tests for the wildcard, binds nothing
            self.port = free_port("127.0.0.1" if wildcard else self.settings.host)
        config = uvicorn.Config(create_app(self.settings), host=self.settings.host, port=self.port,
                                log_level=self.settings.log_level, lifespan="on", access_log=False,
                                timeout_graceful_shutdown=5, http=bounded_http_protocol(),
                                h11_max_incomplete_event_size=self.settings.max_header_bytes)
        # uvicorn leaves signals alone off the main thread: the caller owns them
        self._server = server = uvicorn.Server(config)

        def run() -> None:
            try:
                server.run()
            except BaseException as exc:  # reported by start()
                self._failure = exc

        self._thread = threading.Thread(target=run, name="openai-frontend", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                cause = f"{type(self._failure).__name__}: {self._failure}" if self._failure else (
                    "it exited during start-up (see the log above: Triton unreachable or the port taken)"
                    if time.monotonic() <= deadline else f"not listening after {timeout:g} s")
                where = f"{self.settings.host}:{self.port}"
                raise RuntimeSetupError(f"the OpenAI frontend on {where} did not start: {cause}",
                                        field="frontend",
                                        expected=f"Triton reachable at {self.settings.triton_grpc_url}")
            time.sleep(0.05)
        return self

    def stop(self, drain: float | None = None) -> None:
        """Stop listening; open requests and streams get `drain` seconds (default: the 5 s set at start) to end."""
        if self._server is not None:
            if drain is not None:
                self._server.config.timeout_graceful_shutdown = max(1, round(drain))
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=15 + (drain or 0))
        self._thread = None
        self._server = None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def __enter__(self) -> FrontendServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
