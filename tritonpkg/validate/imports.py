"""Which vLLM symbols a backend's code imports, and whether they resolve in the installed vLLM.

Parsing is ast-only (no import); resolving runs in a subprocess so importing vLLM (seconds, threads,
logging) never happens inside the validator's process."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

_RESOLVER = r"""
import importlib, importlib.util, json, sys
out = {}
for sym in json.loads(sys.argv[1]):
    mod, _, name = sym.partition(":")
    try:
        if importlib.util.find_spec(mod) is None:
            out[sym] = f"module {mod} not found"; continue
        m = importlib.import_module(mod)
        if name and not hasattr(m, name):
            try:
                importlib.import_module(mod + "." + name)
            except ImportError:
                out[sym] = f"{mod} has no attribute {name}"
    except Exception as exc:
        out[sym] = f"importing {mod} failed: {type(exc).__name__}: {exc}"
print(json.dumps(out))
"""


def vllm_imports(source: Path) -> list[tuple[str, int]]:
    """('module' or 'module:name', line) for every vllm import in `source`, nested ones included."""
    try:
        tree = ast.parse(source.read_text(errors="replace"))
    except SyntaxError:
        return []
    out: list[tuple[str, int]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(a.name, node.lineno) for a in node.names if a.name.split(".")[0] == "vllm"]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and node.module.split(".")[0] == "vllm":
            out += [(f"{node.module}:{a.name}", node.lineno) for a in node.names]
    return out


@lru_cache(maxsize=8)
def unresolved_installed(symbols: tuple[str, ...], python: str = sys.executable) -> dict[str, str]:
    """symbol -> why it does not resolve in the vLLM importable by `python`."""
    if not symbols:
        return {}
    try:
        res = subprocess.run([python, "-c", _RESOLVER, json.dumps(list(symbols))], capture_output=True,
                             text=True, timeout=300)
        return json.loads(res.stdout.strip().splitlines()[-1])
    except (subprocess.SubprocessError, json.JSONDecodeError, IndexError, OSError) as exc:
        return {s: f"could not check: {exc}" for s in symbols}
