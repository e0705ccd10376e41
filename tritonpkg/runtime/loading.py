"""What Triton says about each model while it starts, read from its log as it grows.

In model-control mode none (and poll), Triton 2.51 loads every model before it opens its HTTP/gRPC ports, so
during that time the log is the only report: `loading: NAME:VERSION`, then `successfully loaded 'NAME'` or
`failed to load 'NAME' version V: REASON`. Start-up waits while a model is loading and fails as soon as one
failed, naming it and Triton's reason (Triton itself would first wait for every other model to finish)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

_LOADING = re.compile(r'"loading: (?P<name>[^:"]+):(?P<version>\d+)"')
_LOADED = re.compile(r"\"successfully loaded '(?P<name>[^']+)'")
_FAILED = re.compile(r"\"failed to load '(?P<name>[^']+)' version (?P<version>\d+): (?P<reason>.*)\"\s*$")
READ_LIMIT = 1 << 20  # bytes read per poll: a start-up log grows by kilobytes


@dataclass
class ModelLoad:
    name: str
    state: Literal["loading", "loaded", "failed"]
    version: str | None = None
    reason: str = ""


@dataclass
class LoadLog:
    """Follows one server log from its start; `poll()` reads what was appended since the last call."""

    path: Path
    offset: int = 0  # where this start's lines begin (a log appended to by earlier runs)
    models: dict[str, ModelLoad] = field(default_factory=dict)
    _partial: bytes = b""

    def poll(self) -> dict[str, ModelLoad]:
        try:
            with open(self.path, "rb") as fh:
                fh.seek(self.offset)
                data = fh.read(READ_LIMIT)
        except OSError:
            return self.models
        self.offset += len(data)
        lines = (self._partial + data).split(b"\n")
        self._partial = lines.pop()
        for raw in lines:
            self.feed(raw.decode(errors="replace"))
        return self.models

    def feed(self, line: str) -> None:
        if m := _LOADING.search(line):
            self.models[m["name"]] = ModelLoad(m["name"], "loading", m["version"])
        elif m := _LOADED.search(line):
            known = self.models.get(m["name"])
            self.models[m["name"]] = ModelLoad(m["name"], "loaded", known.version if known else None)
        elif m := _FAILED.search(line):
            self.models[m["name"]] = ModelLoad(m["name"], "failed", m["version"], m["reason"].replace('\\"', '"'))

    def failed(self) -> list[ModelLoad]:
        return [m for m in self.models.values() if m.state == "failed"]

    def loading(self) -> list[ModelLoad]:
        return [m for m in self.models.values() if m.state == "loading"]
