"""Run inside a lane's venv: which of the given vLLM symbols ('module' or 'module:name') do not resolve there.

    <lane>/bin/python tests/lanes/imports_probe.py < symbols.json   ->   last line {"symbol": "why", ...} (failing ones)

Imports only vLLM and the standard library (the lane has no tritonpkg)."""

from __future__ import annotations

import importlib
import json
import os
import sys

os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")  # vLLM logs to stdout


def why_not(symbol: str) -> str | None:
    mod, _, name = symbol.partition(":")
    try:
        m = importlib.import_module(mod)
    except Exception as exc:  # the backend's import would fail the same way
        return f"{type(exc).__name__}: {exc}"
    if name and not hasattr(m, name):
        try:
            importlib.import_module(f"{mod}.{name}")
        except ImportError:
            return f"{mod} has no attribute {name}"
    return None


def main() -> int:
    found = {s: why_not(s) for s in json.load(sys.stdin)}
    sys.stdout.write("\n" + json.dumps({s: w for s, w in found.items() if w}, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
