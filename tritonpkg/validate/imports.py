"""Which vLLM symbols a backend's code imports, and whether they resolve in the installed vLLM.

Parsing is ast-only (no import); resolving goes through vllm_probe, a subprocess whose answer is
cached, so importing vLLM (seconds, threads, logging) never happens inside the validator's process."""

from __future__ import annotations

import ast
from pathlib import Path

from tritonpkg.validate.loaded import read_text
from tritonpkg.validate.vllm_probe import probe

OPTIONAL_GUARDS = {"ImportError", "ModuleNotFoundError"}


def _guarded(tree: ast.AST) -> set[int]:
    """ids of the import nodes inside a `try:` whose handler catches ImportError: the code has its own fallback for
    a vLLM without them, so they are not demands on the target's vLLM."""
    out: set[int] = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Try):
            continue
        caught = set()
        for handler in node.handlers:
            kinds = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
            caught |= {k.id for k in kinds if isinstance(k, ast.Name)}
        if caught & OPTIONAL_GUARDS:
            out |= {id(n) for stmt in node.body for n in ast.walk(stmt) if isinstance(n, ast.Import | ast.ImportFrom)}
    return out


def vllm_imports(source: Path) -> list[tuple[str, int]]:
    """('module' or 'module:name', line) for every vllm import in `source`, nested ones included, except those
    guarded by `try: ... except ImportError` (optional: the code falls back without them)."""
    try:
        tree = ast.parse(read_text(source))
    except (OSError, SyntaxError, RecursionError, MemoryError):
        return []
    optional = _guarded(tree)
    out: list[tuple[str, int]] = []
    for node in ast.walk(tree):
        if id(node) in optional:
            continue
        if isinstance(node, ast.Import):
            out += [(a.name, node.lineno) for a in node.names if a.name.split(".")[0] == "vllm"]
        elif (isinstance(node, ast.ImportFrom) and node.module and node.level == 0
              and node.module.split(".")[0] == "vllm"):
            out += [(f"{node.module}:{a.name}", node.lineno) for a in node.names]
    return out


def unresolved_installed(symbols: tuple[str, ...]) -> dict[str, str]:
    """symbol -> why it does not resolve in the installed vLLM (asked once per installed build)."""
    if not symbols:
        return {}
    found = probe(symbols, fields=False)
    if found is None:
        return dict.fromkeys(symbols, "vLLM is not installed")
    return found.unresolved
