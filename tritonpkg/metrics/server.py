"""`MergedMetricsServer`: the public /metrics of a serving stack. Each scrape fetches Triton's metrics
from its internal port and reads the multiprocess directory, so the answer is as fresh as either source;
a source that cannot be read is reported by `tritonpkg_metrics_source_up` instead of failing the scrape.

Triton's series must not vanish for one slow fetch (a busy 2-core host under start-up load took longer than
a short timeout): a failed fetch is tried again within the scraper's own timeout, and if it still fails the
last good Triton text, no older than `stale_after` seconds, is served again with its source marked down.

The port is public, so it is served by one asyncio loop (h11 parses): an idle or trickling connection costs a
coroutine, not a thread. A request head must arrive whole within `request_timeout`; at `max_connections` the
oldest connection still waiting for its request is closed to make room; concurrent scrapes share one
collection on one worker thread. With a `token`, /metrics wants `Authorization: Bearer <token>` (Prometheus'
`authorization: {credentials: ...}`), compared in constant time; 401 without it."""

from __future__ import annotations

import asyncio
import concurrent.futures
import hmac
import threading
import time
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path

import h11

from tritonpkg.errors import RuntimeSetupError
from tritonpkg.metrics.exposition import MergedExposition, merge_expositions
from tritonpkg.metrics.multiproc import multiproc_exposition

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
SCRAPE_BUDGET = 8.0  # seconds for one scrape when the scraper does not say (Prometheus' default timeout is 10)
SCRAPE_TIMEOUT_HEADER = "X-Prometheus-Scrape-Timeout-Seconds"
FETCH_ATTEMPTS = 2
REQUEST_TIMEOUT = 10.0  # seconds for a whole request head, from connect (or the previous answer) on
WRITE_TIMEOUT = 10.0  # seconds for a client to take its answer
MAX_CONNECTIONS = 256
MAX_HEAD = 8192  # bytes of request line + headers (and of a body, which /metrics never reads)
BACKLOG = 1024  # the kernel caps it at net.core.somaxconn


def _fetch(url: str, timeout: float) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as resp:  # noqa: S310  Triton's own http:// metrics URL
        return resp.read().decode()


def _budget(header: str | None) -> float:
    """Seconds this scrape may spend on Triton: the scraper's timeout less a margin for the reply."""
    try:
        return max(0.5, min(SCRAPE_BUDGET, float(header) - 1.0)) if header else SCRAPE_BUDGET
    except ValueError:
        return SCRAPE_BUDGET


def _up_family(up: dict[str, bool], served: dict[str, bool]) -> str:
    lines = ["# HELP tritonpkg_metrics_source_up 1 when the last scrape could read this source of /metrics.",
             "# TYPE tritonpkg_metrics_source_up gauge"]
    lines += [f'tritonpkg_metrics_source_up{{source="{name}"}} {int(ok)}' for name, ok in up.items()]
    lines += [("# HELP tritonpkg_metrics_source_served 1 when this /metrics serves this source; triton 0: "
               "Triton's own metrics are off (serve --no-metrics)."),
              "# TYPE tritonpkg_metrics_source_served gauge"]
    lines += [f'tritonpkg_metrics_source_served{{source="{name}"}} {int(on)}' for name, on in served.items()]
    return "\n".join(lines) + "\n"


class MergedMetricsServer:
    """Serves GET /metrics on (host, port) from a thread; port 0 picks a free one."""

    def __init__(self, triton_metrics_url: str | None, multiproc_dir: str | Path | None, host: str = "127.0.0.1",
                 port: int = 0, stale_after: float = 30.0, token: str | None = None,
                 max_connections: int = MAX_CONNECTIONS, request_timeout: float = REQUEST_TIMEOUT,
                 extra: Callable[[], str] | None = None) -> None:
        self.triton_metrics_url = triton_metrics_url
        self.multiproc_dir = Path(multiproc_dir) if multiproc_dir else None
        self.host, self.port = host, port
        self.stale_after = stale_after
        self.extra = extra  # more tritonpkg families (serve's engine gauge), text exposition
        self._expected_auth = f"Bearer {token}".encode() if token else None
        self.max_connections = max_connections
        self.request_timeout = request_timeout
        self._last_triton: tuple[float, str] | None = None  # (monotonic time, text) of the last good fetch
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._conns: dict[asyncio.Task, bool] = {}  # open connections, oldest first -> waiting for a request?
        self._inflight: asyncio.Future | None = None  # the collection concurrent scrapes share

    @property
    def url(self) -> str:
        host = "127.0.0.1" if self.host in ("0.0.0.0", "") else self.host  # noqa: S104  a comparison, no bind
        return f"http://{host}:{self.port}/metrics"

    def fetch_triton(self, budget: float = SCRAPE_BUDGET) -> str:
        """Triton's metrics text, tried up to FETCH_ATTEMPTS times within `budget` seconds; remembered as the
        last good scrape. Raises OSError when every attempt failed."""
        url = self.triton_metrics_url
        if url is None:
            raise OSError("this server has no Triton metrics URL to fetch")
        deadline = time.monotonic() + budget
        attempt = 1
        while True:
            try:
                text = _fetch(url,
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
        served = {"triton": self.triton_metrics_url is not None, "vllm": self.multiproc_dir is not None}
        own = _up_family(up, served) + (self.extra() if self.extra is not None else "")
        return merge_expositions([("tritonpkg", own), *sources])

    # -- serving -----------------------------------------------------------------------------------
    def start(self) -> MergedMetricsServer:
        loop = asyncio.new_event_loop()
        bound: concurrent.futures.Future = concurrent.futures.Future()
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=1,
                                                           thread_name_prefix="tritonpkg-metrics-collect")
        self._thread = threading.Thread(target=self._run, args=(loop, bound), name="tritonpkg-metrics", daemon=True)
        self._thread.start()
        try:
            self.port = bound.result()
        except OSError as exc:
            self._thread.join(timeout=5)
            self._thread = None
            self._pool.shutdown(wait=False)
            raise RuntimeSetupError(f"cannot open the metrics port {self.port} on {self.host}: {exc.strerror or exc}",
                                    field="metrics_port", expected="a free port (0 picks one)") from exc
        self._loop = loop
        return self

    def _run(self, loop: asyncio.AbstractEventLoop, bound: concurrent.futures.Future) -> None:
        asyncio.set_event_loop(loop)
        try:
            server = loop.run_until_complete(asyncio.start_server(
                self._connection, self.host, self.port, backlog=BACKLOG, limit=MAX_HEAD))
        except OSError as exc:
            bound.set_exception(exc)
            loop.close()
            return
        bound.set_result(server.sockets[0].getsockname()[1])
        try:
            loop.run_forever()
        finally:
            server.close()
            tasks = [t for t in asyncio.all_tasks(loop) if not t.done()]
            for task in tasks:
                task.cancel()
            loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
            loop.close()

    def stop(self) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._loop = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("a connection is handled outside an asyncio task")
        if len(self._conns) >= self.max_connections and not self._evict():
            writer.close()
            return
        self._conns[task] = True
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD)
        try:
            while True:
                self._conns[task] = True
                try:
                    request = await asyncio.wait_for(_read_request(reader, conn), self.request_timeout)
                except h11.RemoteProtocolError as exc:
                    if conn.our_state in (h11.IDLE, h11.SEND_RESPONSE):
                        await self._send(writer, conn, exc.error_status_hint, b"bad request\n")
                    return
                if request is None:
                    return
                self._conns[task] = False
                status, body, headers = await self._answer(request)
                await self._send(writer, conn, status, body, headers)
                if conn.our_state is not h11.DONE or conn.their_state is not h11.DONE:
                    return  # a body we did not read, or the client asked to close
                conn.start_next_cycle()
        except (asyncio.TimeoutError, asyncio.CancelledError, ConnectionError, h11.LocalProtocolError):
            pass  # timed out, evicted or shutting down: asyncio's stream callback must see a normal end
        finally:
            self._conns.pop(task, None)
            writer.close()

    def _evict(self) -> bool:
        """Close the oldest connection that has not sent a whole request yet; False when none is waiting."""
        for task, waiting in self._conns.items():
            if waiting:
                self._conns.pop(task)
                task.cancel()
                return True
        return False

    async def _answer(self, request: h11.Request) -> tuple[int, bytes, list[tuple[bytes, bytes]]]:
        if request.target.split(b"?")[0] != b"/metrics":
            return 404, b"only /metrics is served here\n", []
        if request.method != b"GET":
            return 405, b"GET /metrics\n", [(b"allow", b"GET")]
        fields = dict(request.headers)
        if self._expected_auth is not None and not hmac.compare_digest(
                fields.get(b"authorization", b""), self._expected_auth):
            return 401, b"a bearer token is required\n", [(b"www-authenticate", b'Bearer realm="metrics"')]
        timeout = fields.get(SCRAPE_TIMEOUT_HEADER.lower().encode())
        try:
            text = await self._scrape(_budget(timeout.decode(errors="replace") if timeout else None))
        except Exception as exc:
            return 500, f"collecting the metrics failed: {type(exc).__name__}: {exc}\n".encode(), []
        return 200, text.encode(), [(b"content-type", CONTENT_TYPE.encode())]

    async def _scrape(self, budget: float) -> str:
        """One collection at a time on the worker thread; scrapes that arrive meanwhile share its result."""
        if self._inflight is None or self._inflight.done():
            loop = asyncio.get_running_loop()
            self._inflight = loop.run_in_executor(self._pool, lambda: self.collect(budget).text)
        return await asyncio.shield(self._inflight)

    @staticmethod
    async def _send(writer: asyncio.StreamWriter, conn: h11.Connection, status: int, body: bytes,
                    headers: Sequence[tuple[bytes, bytes]] = ()) -> None:
        head = [(b"content-length", str(len(body)).encode()), *headers]
        if status >= 400 and not any(name == b"content-type" for name, _ in headers):
            head.append((b"content-type", b"text/plain; charset=utf-8"))
        writer.write(conn.send(h11.Response(status_code=status, headers=head)) + conn.send(h11.Data(data=body))
                     + conn.send(h11.EndOfMessage()))
        await asyncio.wait_for(writer.drain(), WRITE_TIMEOUT)

    def __enter__(self) -> MergedMetricsServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


async def _read_request(reader: asyncio.StreamReader, conn: h11.Connection) -> h11.Request | None:
    """The next request once its head and any body (at most MAX_HEAD bytes, then dropped) are in;
    None when the client closed."""
    request = None
    body = 0
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            conn.receive_data(await reader.read(4096))
        elif isinstance(event, h11.Request):
            request = event
        elif isinstance(event, h11.Data):
            body += len(event.data)
            if body > MAX_HEAD:
                raise h11.RemoteProtocolError("request body too large", error_status_hint=413)
        elif isinstance(event, h11.EndOfMessage):
            return request
        elif isinstance(event, h11.ConnectionClosed) or event is h11.PAUSED:
            return None
