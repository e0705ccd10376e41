"""NVIDIA's multi-LoRA contract: with `enable_lora` in model.json, `<version>/multi_lora.json` maps each adapter's
name to its folder, and a request picks one by `lora_name` in its sampling parameters. The adapters are
numbered in the list's order from 1, as NVIDIA's backend numbers them, and handed to vLLM as LoRARequests.

A relative folder (`./adapters/<name>`, what `tritonpkg package` writes) is resolved against the model version,
so the repository can move; NVIDIA's backend hands the path to vLLM as written (absolute in its samples).
Pure but for vLLM's LoRARequest (imported only when the model has adapters): unit-testable without Triton."""

from __future__ import annotations

import json
import os
from typing import Any

from request_params import ParamError

MULTI_LORA_FILE = "multi_lora.json"
MAX_LIST_BYTES = 1 << 20


class AdapterError(ValueError):
    """The model's adapter list cannot be served; the message names the file."""


def lora_enabled(engine_args: dict[str, Any]) -> bool:
    """enable_lora as NVIDIA's backend reads it: a bool or the string "true" (any case)."""
    return str(engine_args.get("enable_lora", "")).lower() == "true"


def read_adapters(version_dir: str, engine_args: dict[str, Any]) -> dict[str, str]:
    """Adapter name -> absolute folder, {} when LoRA is off. LoRA on without the list is an error at load
    (NVIDIA's backend raises FileNotFoundError there too)."""
    if not lora_enabled(engine_args):
        return {}
    path = os.path.join(version_dir, MULTI_LORA_FILE)
    try:
        with open(path, "rb") as fh:
            raw = fh.read(MAX_LIST_BYTES + 1)
    except FileNotFoundError:
        raise AdapterError(f"enable_lora is on but {path} is missing; it lists the LoRA adapters") from None
    if len(raw) > MAX_LIST_BYTES:
        raise AdapterError(f"{path} is larger than {MAX_LIST_BYTES} bytes")
    try:
        entries = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise AdapterError(f"{path}: not valid JSON ({str(exc)[:200]})") from None
    if not isinstance(entries, dict) or not all(isinstance(v, str) and v for v in entries.values()):
        raise AdapterError(f"{path}: expected a JSON object of adapter name -> folder")
    return {name: folder if os.path.isabs(folder) else os.path.normpath(os.path.join(version_dir, folder))
            for name, folder in entries.items()}


class Adapters:
    """The adapters one model serves and the LoRARequest of each, built once."""

    def __init__(self, folders: dict[str, str]) -> None:
        self.folders = folders
        self._requests: dict[str, Any] = {}
        if folders:
            from vllm.lora.request import LoRARequest

            self._requests = {name: LoRARequest(name, i, folder)
                              for i, (name, folder) in enumerate(folders.items(), start=1)}

    def take(self, params: dict[str, Any]) -> Any:
        """The LoRARequest `params["lora_name"]` selects (removed from `params`); None without one."""
        name = params.pop("lora_name", None)
        if name is None:
            return None
        if not isinstance(name, str):
            raise ParamError(f"sampling parameter 'lora_name' must be a string, got {type(name).__name__}")
        request = self._requests.get(name)
        if request is None:
            known = ", ".join(repr(n) for n in self._requests) or "none (enable_lora is off)"
            shown = name if len(name) <= 64 else name[:64] + "..."
            raise ParamError(f"unknown LoRA adapter {shown!r} in 'lora_name'; this model serves: {known}")
        return request
