"""Digests computed while streaming: parts finish out of order, so each file's hasher takes them in
order as they become contiguous (no second read of downloaded bytes)."""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable


class OrderedDigest:
    def __init__(self, parts: int, want_md5: bool, on_hashed: Callable[[int], None]) -> None:
        self.sha256 = hashlib.sha256()
        self.md5 = hashlib.md5(usedforsecurity=False) if want_md5 else None  # checks S3's ETag, not a secret
        self.parts = parts
        self._next = 0
        self._pending: dict[int, list[bytes]] = {}
        self._draining = False
        self._lock = threading.Lock()
        self._on_hashed = on_hashed  # releases the part's memory slot

    def feed(self, index: int, chunks: list[bytes]) -> bool:
        """Hand over part `index` (its bytes in order); returns True on the call that hashed the last part."""
        with self._lock:
            self._pending[index] = chunks
            if self._draining:
                return False
            self._draining = True
        while True:
            with self._lock:
                ready = self._pending.pop(self._next, None)
                if ready is None:
                    self._draining = False
                    return False
                self._next += 1
                last = self._next == self.parts
            for chunk in ready:
                self.sha256.update(chunk)
                if self.md5 is not None:
                    self.md5.update(chunk)
            self._on_hashed(sum(map(len, ready)))
            if last:
                with self._lock:
                    self._draining = False
                return True
