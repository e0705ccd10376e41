"""The part journal: one line per part that reached the staged file, appended after the write. After a
kill -9 the journaled parts are reused and only the rest is fetched. Entries carry the file's identity
tag, so parts of an object that has since changed are never reused."""

from __future__ import annotations

import json
import os
import threading
from collections import defaultdict
from pathlib import Path


class Journal:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None
        self._lock = threading.Lock()

    def done(self) -> dict[tuple[str, str], set[int]]:
        """(path, identity tag) -> part indexes already staged; a torn last line is ignored."""
        parts: dict[tuple[str, str], set[int]] = defaultdict(set)
        try:
            text = self.path.read_text(errors="replace")
        except FileNotFoundError:
            return {}
        for line in text.splitlines():
            try:
                entry = json.loads(line)
                parts[(entry["p"], entry["t"])].add(int(entry["i"]))
            except (ValueError, KeyError, TypeError):
                continue
        return dict(parts)

    def record(self, path: str, tag: str, index: int) -> None:
        line = (json.dumps({"p": path, "t": tag, "i": index}) + "\n").encode()
        with self._lock:
            if self._fd is None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            os.write(self._fd, line)

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None
