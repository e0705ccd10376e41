"""A stop announced by `serve` (tritonpkg.serve.stack): before it sends Triton its SIGTERM, serve writes the
drain deadline (a unix time) into the file TRITONPKG_VLLM_STOP_FILE names. From then on the model refuses new
requests with UNAVAILABLE, sends Triton no self-unload request (a model-control request reaching a server that
shuts down segfaulted the stub), lets in-flight requests and streams run to their end, and at the deadline cuts
what is left with a final error that says so. Without the file (a plain tritonserver) nothing changes."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import Any

STOP_FILE = os.environ.get("TRITONPKG_VLLM_STOP_FILE")
POLL_S = 0.2
REFUSED = "the server is stopping: new requests are refused (send them to another replica)"
CUT = "the server is stopping and its drain timeout ran out: this request was cut before its end"
UNLOADED = "the model is being unloaded: this request was cut before its end"


def deadline() -> float | None:
    """None while no stop is announced, else when in-flight requests are cut (unix time)."""
    if not STOP_FILE:
        return None
    try:
        with open(STOP_FILE, encoding="utf-8", errors="replace") as f:
            text = f.read(64)
    except OSError:
        return None
    if not text.strip():  # created, not yet written (serve writes it whole; an older one may not)
        return None
    try:
        return float(text.split()[0])
    except ValueError:
        return time.time()


def announced() -> bool:
    return deadline() is not None


def drain(inflight: Callable[[], int], fail_all: Callable[[str], None], dead: bool) -> None:
    """In finalize: in-flight requests finish until the announced deadline, then the rest get CUT; an unload
    with no stop announced cuts them at once with UNLOADED (a dead engine has failed them already)."""
    end = deadline()
    while end is not None and inflight() and time.time() < end:
        time.sleep(POLL_S)
    if inflight() and not dead:
        fail_all(CUT if end is not None else UNLOADED)


class StopWatch:
    """A thread that cuts the in-flight requests at the announced deadline even when Triton never gets to the
    model's finalize before it exits (its own exit timeout)."""

    def __init__(self, inflight: Callable[[], int], fail_all: Callable[[str], None], log: Callable[[str], None]):
        self.inflight, self.fail_all, self.log = inflight, fail_all, log
        self._done = threading.Event()
        self._thread: Any = None
        if STOP_FILE:
            self._thread = threading.Thread(target=self._run, name="vllm-stop-watch", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while not self._done.wait(POLL_S):
            end = deadline()
            if end is None or time.time() < end:
                continue
            if self.inflight():
                self.log(f"[vllm] drain timeout: cutting {self.inflight()} in-flight request(s)")
                self.fail_all(CUT)
            return

    def close(self) -> None:
        self._done.set()
