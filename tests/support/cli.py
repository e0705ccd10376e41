"""Running `tritonpkg` as a user does: a separate process of this interpreter."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable
from typing import Any


def tritonpkg(*args: str) -> list[str]:
    """The command line of `tritonpkg ARGS` in this interpreter (its venv, not whatever is on PATH)."""
    return [sys.executable, "-m", "tritonpkg", *args]


def read_json_document(stream: Iterable[str]) -> dict[str, Any]:
    """The first JSON document of a `--json` command's output: print_json writes one indented document,
    so lines are read until a closing brace at column 0, leaving the stream open for what follows."""
    text = ""
    for line in stream:
        text += line
        if line.rstrip() == "}":
            document: dict[str, Any] = json.loads(text)
            return document
    raise AssertionError(f"no JSON document in output: {text!r}")
