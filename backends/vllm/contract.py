"""The backend's I/O contract, read from io_contract.json beside this file.

The same file is what `tritonpkg package` writes into config.pbtxt and what the OpenAI frontend asks for
(tritonpkg/vllm_io.py reads it there), so the three cannot drift apart. Plain json: this module runs in the
Triton stub, where tritonpkg may not be installed."""

from __future__ import annotations

import json
import os
from typing import Any

PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "io_contract.json")
TENSOR_KEYS = ("name", "data_type", "dims", "optional")  # what Triton's auto-complete takes


def _load(path: str = PATH) -> dict[str, Any]:
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    for key in ("inputs", "outputs", "return_flags"):
        if key not in data:
            raise ValueError(f"{path}: '{key}' is missing")
    return data


def _tensors(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: e[k] for k in TENSOR_KEYS if k in e} for e in entries]


_DATA = _load()
INPUTS: list[dict[str, Any]] = _tensors(_DATA["inputs"])
OUTPUTS: list[dict[str, Any]] = _tensors(_DATA["outputs"])
# BOOL input -> the additional output it asks for, in the file's order.
RETURN_OUTPUTS: dict[str, str] = dict(_DATA["return_flags"])
RETURN_FLAGS: tuple[str, ...] = tuple(RETURN_OUTPUTS)
# Request parameters that stand in for the inputs of the same name (HTTP /generate's "parameters").
CONTROL_KEYS: tuple[str, ...] = ("stream", "exclude_input_in_output", *RETURN_FLAGS)
# The adapter list of each version, and the backend's acknowledgement of the list it serves (lora.follow_list).
ADAPTER_LIST_FILE: str = _DATA["adapter_list"]["file"]
ADAPTER_SERVED_FILE: str = _DATA["adapter_list"]["served"]
