"""A packaged vLLM model version's own files, read back: the engine arguments (model.json), whether LoRA is on,
the adapter list (NVIDIA's multi_lora.json, name -> folder) and the backend's acknowledgement of the list it
serves. Serve, the OpenAI frontend, validate and deploy all read them here, so the files mean one thing to all
four; each caller turns a ValueError (the content) or an OSError (the file) into its own error. The vLLM backend
reads the same files inside Triton's stub, without tritonpkg, and keeps its own copy (backends/vllm/lora.py).
A running unit's list is rewritten here too (write_adapter_list), by a rename the backend never sees half of.

A repository may be hostile: every read is bounded (boundedio) and every parse failure, nesting too deep for
the parser included, is a ValueError saying why."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from tritonpkg import boundedio, vllm_io

ENGINE_ARGS = "model.json"
MULTI_LORA = vllm_io.load().adapter_list.file
SERVED = vllm_io.load().adapter_list.served  # written by the backend beside the list, after each list it applies
ADAPTER_LIST_STATUS = ".adapter-list.status.json"  # a served repository's top: the followed list's state
MAX_ENGINE_ARGS_BYTES = 16 << 20
MAX_ADAPTER_LIST_BYTES = 1 << 20


class NotAnObjectError(ValueError):
    """Valid JSON that is not the object the file must hold."""


def _json(data: bytes, **kw: Any) -> Any:
    try:
        return json.loads(data, **kw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"not valid JSON: {str(exc)[:200]}") from None
    except RecursionError:
        raise ValueError("not valid JSON: nested too deeply") from None


def engine_args(data: bytes) -> dict[str, Any]:
    """model.json's engine arguments (what AsyncEngineArgs(**json) gets)."""
    args = _json(data)
    if not isinstance(args, dict):
        raise NotAnObjectError("not a JSON object of engine arguments")
    return args


def lora_enabled(args: dict[str, Any] | None) -> bool:
    """enable_lora as NVIDIA's backend reads it (a bool or the string "true", any case)."""
    return args is not None and str(args.get("enable_lora", "")).lower() == "true"


def adapter_pairs(data: bytes) -> list[tuple[str, Any]]:
    """multi_lora.json's (name, folder) pairs in the file's order, a name written twice kept twice (a JSON object
    keeps only the last: validate reports it)."""
    found = _json(data, object_pairs_hook=_Pairs)
    if not isinstance(found, _Pairs):
        raise NotAnObjectError("not a JSON object of adapter name -> folder")
    return list(found)


def adapter_list(data: bytes) -> dict[str, Any]:
    """multi_lora.json as the backend applies it: name -> folder (relative ones: to the version) or a source."""
    found = _json(data)
    if not isinstance(found, dict):
        raise NotAnObjectError("not a JSON object of adapter name -> folder")
    return found


def read_engine_args(version: Path) -> dict[str, Any]:
    """The version folder's model.json."""
    return engine_args(boundedio.read_file(version / ENGINE_ARGS, MAX_ENGINE_ARGS_BYTES))


def read_adapter_pairs(version: Path) -> list[tuple[str, Any]]:
    return adapter_pairs(boundedio.read_file(version / MULTI_LORA, MAX_ADAPTER_LIST_BYTES))


def read_adapter_list(version: Path) -> dict[str, Any]:
    """The version folder's multi_lora.json."""
    return adapter_list(boundedio.read_file(version / MULTI_LORA, MAX_ADAPTER_LIST_BYTES))


def read_served(version: Path) -> dict[str, Any]:
    """The backend's acknowledgement of the list it last applied: its sha256, what it serves, what it refused."""
    ack = _json(boundedio.read_file(version / SERVED, MAX_ADAPTER_LIST_BYTES))
    if not isinstance(ack, dict):
        raise NotAnObjectError("not a JSON object acknowledging an adapter list")
    return ack


def served_digest(version: Path) -> str | None:
    """The sha256 of the adapter list the backend last applied, from its acknowledgement (None: none readable)."""
    try:
        digest = read_served(version).get("list_sha256")
    except (OSError, ValueError):
        return None
    return digest if isinstance(digest, str) else None


def write_json(path: Path, data: Any) -> bytes:
    """`data` at `path` by a rename (a reader sees the old file or the new one, never half); the bytes written."""
    body = (json.dumps(data, indent=2) + "\n").encode()
    staged = path.with_name(f".{path.name}.next")
    staged.unlink(missing_ok=True)
    fd = os.open(staged, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "wb") as fh:
        fh.write(body)
    os.replace(staged, path)
    return body


def write_adapter_list(version: Path, listing: dict[str, str]) -> str:
    """Replace the version's adapter list by a rename (the backend follows the file), asking the backend to
    acknowledge each list it applies (an acknowledgement file present); returns the sha256 it will acknowledge."""
    if not (version / SERVED).is_file():
        (version / SERVED).write_text("{}\n")
    return hashlib.sha256(write_json(version / MULTI_LORA, listing)).hexdigest()


def read_adapter_list_status(repository: Path) -> dict[str, Any] | None:
    """serve --adapter-list's follower state, at the served repository's top (ADAPTER_LIST_STATUS); None where no
    list is followed. The OpenAI frontend's /health routes read it."""
    try:
        data = _json(boundedio.read_file(repository / ADAPTER_LIST_STATUS, 1 << 16))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def version_folders(repo: Path, name: str) -> list[Path]:
    """Every `<model>/<version>/` of the repository (a numeric version) that holds a file `name`, sorted."""
    return [p.parent for p in sorted(repo.glob(f"*/*/{name}")) if p.parent.name.isdigit()]


class _Pairs(list[tuple[str, Any]]):
    """A JSON object's pairs (json's object_pairs_hook), told apart from a JSON array."""
