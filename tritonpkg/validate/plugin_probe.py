"""Does a plugin's entry point load, and does the object implement the logits-processor interface of
the pinned vLLM's runner? Answered in a subprocess of the runtime interpreter (loading it imports vLLM,
about ten seconds) and cached per (interpreter, vLLM build, plugin build, entry point, interface)."""

from __future__ import annotations

import hashlib
import json
import subprocess
from dataclasses import dataclass
from pathlib import Path

from tritonpkg import paths
from tritonpkg.repository.atomic import write_file_atomic

# interface -> (base class, {method: positional args after self}, positional args of __init__)
INTERFACES: dict[str, tuple[str, dict[str, int], int]] = {
    "v1": ("vllm.v1.sample.logits_processor:LogitsProcessor",
           {"update_state": 1, "apply": 1, "is_argmax_invariant": 0}, 3),
    "v2": ("vllm.v1.worker.gpu.sample.logits_processor.interface:LogitsProcessor",
           {"add_request": 2, "apply": 2}, 2),
}

_PROBE = r"""
import importlib, inspect, json, sys
from importlib import metadata
def check(group, name, value, base_ref, methods, init_args):
    eps = metadata.entry_points()
    sel = eps.select(group=group) if hasattr(eps, "select") else eps.get(group, [])
    found = [ep for ep in sel if ep.name == name]
    if not found:
        return {"load": f"no entry point {name!r} in group {group!r} is installed"}
    try:
        obj = found[0].load()
    except BaseException as exc:
        return {"load": f"loading {found[0].value} failed: {type(exc).__name__}: {exc}"}
    if not inspect.isclass(obj):
        return {"interface": [f"{found[0].value} is a {type(obj).__name__}, not a class"]}
    mod, _, attr = base_ref.partition(":")
    try:
        base = getattr(importlib.import_module(mod), attr)
    except Exception as exc:
        return {"interface": [f"the runner's interface {base_ref} does not import: {exc}"]}
    bad = []
    if not issubclass(obj, base):
        bad.append(f"is not a subclass of {mod}.{attr} (vLLM rejects it)")
    left = sorted(getattr(obj, "__abstractmethods__", ()))
    if left:
        bad.append("leaves abstract: " + ", ".join(left))
    for meth, n in sorted(methods.items()):
        fn = getattr(obj, meth, None)
        if not callable(fn):
            bad.append(f"has no method {meth}()")
            continue
        try:
            inspect.signature(fn).bind(*([None] * (n + (0 if isinstance(inspect.getattr_static(obj, meth),
                                                                        (classmethod, staticmethod)) else 1))))
        except TypeError as exc:
            bad.append(f"{meth}() cannot take {n} argument(s): {exc}")
        except ValueError:
            pass
    try:
        inspect.signature(obj).bind(*([None] * init_args))
    except TypeError as exc:
        bad.append(f"its constructor cannot take the runner's {init_args} arguments: {exc}")
    except ValueError:
        pass
    return {"interface": bad} if bad else {}
print(json.dumps([check(*args) for args in json.loads(sys.argv[1])]))
"""


@dataclass(frozen=True)
class EntryPointCheck:
    load_error: str | None = None
    interface_errors: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return self.load_error is None and not self.interface_errors


@dataclass(frozen=True)
class EntryPointSpec:
    group: str
    name: str
    value: str
    interface: str
    build_key: str  # identifies what is installed (vLLM and plugin builds); part of the cache key


def check_entry_points(python: str, specs: list[EntryPointSpec], timeout: float = 300) -> list[EntryPointCheck]:
    """One result per spec; the ones not cached are answered together in one subprocess (one vLLM import)."""
    results: dict[int, EntryPointCheck] = {}
    pending: list[tuple[int, list, Path]] = []
    for i, spec in enumerate(specs):
        if spec.interface not in INTERFACES:
            results[i] = EntryPointCheck(interface_errors=(
                f"the pinned vLLM's runner has no entry-point processors ({spec.interface})",))
            continue
        base, methods, init_args = INTERFACES[spec.interface]
        args = [spec.group, spec.name, spec.value, base, methods, init_args]
        key = hashlib.sha256(json.dumps([python, spec.build_key, args]).encode()).hexdigest()[:20]
        cache = paths.cache_dir() / "plugin-probe" / f"{key}.json"
        if cache.is_file():
            results[i] = _result(json.loads(cache.read_text()))
        else:
            pending.append((i, args, cache))
    if pending:
        try:
            proc = subprocess.run([python, "-c", _PROBE, json.dumps([a for _, a, _ in pending])],
                                  capture_output=True, text=True, timeout=timeout, check=False)
            answers = json.loads(proc.stdout.strip().splitlines()[-1])
        except (OSError, subprocess.SubprocessError, json.JSONDecodeError, IndexError) as exc:
            failed = EntryPointCheck(load_error=f"the check itself failed: {type(exc).__name__}: {exc}")
            answers = None
        for n, (i, _, cache) in enumerate(pending):
            if answers is None:
                results[i] = failed
                continue
            write_file_atomic(cache, json.dumps(answers[n]).encode())
            results[i] = _result(answers[n])
    return [results[i] for i in range(len(specs))]


def _result(data: dict) -> EntryPointCheck:
    return EntryPointCheck(load_error=data.get("load"), interface_errors=tuple(data.get("interface", ())))
