"""An optional bandwidth cap (shared storage and links are shared with other jobs)."""

from __future__ import annotations

import threading
import time


class RateLimiter:
    def __init__(self, bytes_per_s: float | None) -> None:
        self.rate = bytes_per_s
        self._next = time.monotonic()
        self._lock = threading.Lock()

    def take(self, n: int) -> None:
        if not self.rate:
            return
        with self._lock:
            now = time.monotonic()
            start = max(now, self._next)
            self._next = start + n / self.rate
            wait = self._next - now
        if wait > 0:
            time.sleep(wait)
