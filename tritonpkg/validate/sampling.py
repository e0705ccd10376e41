"""A request's `sampling_parameters` (a spec's smoke request, a contract's requests) against the target's
vLLM: the toolkit's backend turns them into SamplingParams kwargs with backends/vllm/request_params.py, using
the SamplingParams and structured-outputs fields of the vLLM it runs on, and refuses an unknown key. Here the
same function runs on the fields recorded for the target's vLLM (its engine_args snapshot), so a key that
release's vLLM does not know is found before the first request fails."""

from __future__ import annotations

import importlib.util
import json
from functools import lru_cache
from types import ModuleType
from typing import Any

from packaging.version import Version

from tritonpkg import paths
from tritonpkg.compat.engine_args import load_snapshot

# Request keys the backends take out before SamplingParams: NVIDIA's `lora_name` (backends/vllm/lora.py).
TAKEN_BEFORE = ("lora_name",)


@lru_cache(maxsize=1)
def _request_params() -> ModuleType:
    src = paths._asset("backends") / "vllm" / "request_params.py"  # the toolkit's own backend, not a runtime's
    spec = importlib.util.spec_from_file_location("tritonpkg_backend_request_params", src)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {src}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def sampling_fields(vllm: Version) -> dict | None:
    """The recorded SamplingParams facts of `vllm` (its snapshot's `sampling_params`), None without a snapshot."""
    snap = load_snapshot(str(vllm))
    return None if snap is None else snap.get("sampling_params")


def sampling_problem(params: Any, vllm: Version) -> str | None:
    """Why the backend would refuse `params` on `vllm` (None: accepted, or nothing recorded to judge by)."""
    known = sampling_fields(vllm)
    if known is None:
        return None
    if isinstance(params, str):  # the KServe input carries a JSON object as text
        try:
            params = json.loads(params)
        except json.JSONDecodeError as exc:
            return f"not a JSON object: {exc}"
    if not isinstance(params, dict):
        return f"a JSON {type(params).__name__}, not an object"
    rp = _request_params()
    fields = {name: "str" in spec["accepts"] for name, spec in known["fields"].items()}
    given = {k: v for k, v in params.items() if k not in TAKEN_BEFORE}
    try:
        rp.normalize_sampling(given, fields, set(known["structured_fields"]))
    except rp.ParamError as exc:
        return f"{exc} (vLLM {vllm})"
    return None


def smoke_request_problem(request: dict[str, Any] | None, release: str) -> str | None:
    """Why the spec's `deployment.smoke_request` would be refused by `release`'s vLLM ('local': the pinned
    one); None when it has no sampling_parameters, the vLLM is unknown or nothing is recorded for it."""
    from tritonpkg import compat

    if not request or request.get("sampling_parameters") is None:
        return None
    vllm = compat.pinned_vllm() if release == compat.LOCAL else compat.get_release(release).vllm_base
    return None if vllm is None else sampling_problem(request["sampling_parameters"], vllm)
