"""LoRA adapters of a vllm-kind model, in NVIDIA's layout: `<version>/multi_lora.json` maps each adapter's
name to its folder, and model.json turns LoRA on (`enable_lora`, `max_loras`, `max_lora_rank`).

A local adapter is copied into the version (`adapters/<name>/`, each file read under the path rule), and
multi_lora.json names it relative to the version (`./adapters/<name>`); serve points the serving copy at
absolute paths, which is what NVIDIA's backend hands vLLM. A remote adapter (s3://, hf://) is named by its
source and materialized by serve, as remote weights are. Pure: reads the spec's files, writes nothing."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tritonpkg import boundedio, compat, safepath
from tritonpkg.compat.engine_args import load_snapshot
from tritonpkg.errors import PackageError
from tritonpkg.spec import Adapter, Spec

MULTI_LORA = "multi_lora.json"  # the file name NVIDIA's vllm backend reads, beside model.json
ADAPTERS_DIR = "adapters"
ADAPTER_CONFIG = "adapter_config.json"
MAX_ADAPTER_FILES = 256
MAX_ADAPTER_FILE_BYTES = 8 << 30
MAX_CONFIG_BYTES = 1 << 20
# vLLM 0.32's LoRAConfig.max_lora_rank default: what applies when model.json leaves max_lora_rank out.
VLLM_DEFAULT_MAX_LORA_RANK = 16


@dataclass
class BuiltAdapters:
    """What a model's adapters add to its version: files, multi_lora.json, engine args, lock entry."""

    files: dict[str, bytes] = field(default_factory=dict)  # version-relative path -> bytes
    multi_lora: dict[str, str] = field(default_factory=dict)  # name -> folder (./adapters/<name>) or source
    engine_args: dict[str, Any] = field(default_factory=dict)
    lock: dict[str, dict[str, Any]] = field(default_factory=dict)  # name -> {source, folder}


def build_adapters(spec: Spec) -> BuiltAdapters:
    built = BuiltAdapters()
    if not spec.adapters:
        return built
    if spec.engine_args.get("enable_lora") is False:
        raise PackageError("engine_args.enable_lora is false, but the spec lists adapters", file=spec.source,
                           field="engine_args.enable_lora", expected="true (or left out), or no adapters")
    ranks: list[int] = []
    for i, adapter in enumerate(spec.adapters):
        location = spec.adapter_location(adapter)
        if "://" in location:
            built.multi_lora[adapter.name] = location
            built.lock[adapter.name] = {"source": location, "folder": None}
            continue
        folder = f"{ADAPTERS_DIR}/{adapter.name}"
        for rel, data in _read_folder(spec, i, adapter, Path(location)).items():
            built.files[f"{folder}/{rel}"] = data
        rank = config_rank(built.files.get(f"{folder}/{ADAPTER_CONFIG}"))
        if rank is not None:
            ranks.append(rank)
        built.multi_lora[adapter.name] = f"./{folder}"
        built.lock[adapter.name] = {"source": adapter.source, "folder": f"./{folder}"}
    built.engine_args = {"enable_lora": True, "max_loras": len(spec.adapters)}
    if ranks:
        built.engine_args["max_lora_rank"] = _rank_choice(max(ranks))
    return built


def multi_lora_json(entries: dict[str, str]) -> bytes:
    """NVIDIA's multi_lora.json, in the spec's order (NVIDIA's backend numbers adapters by it)."""
    return (json.dumps(entries, indent=2) + "\n").encode()


def config_rank(data: bytes | None) -> int | None:
    """The largest rank an adapter_config.json declares (`r` and its `rank_pattern`); None when unreadable
    (validate reports why)."""
    if data is None or len(data) > MAX_CONFIG_BYTES:
        return None
    try:
        config = json.loads(data)
    except (ValueError, RecursionError):
        return None
    if not isinstance(config, dict):
        return None
    values = [config.get("r"), *((config.get("rank_pattern") or {}).values()
                                 if isinstance(config.get("rank_pattern"), dict) else ())]
    ranks = [v for v in values if isinstance(v, int) and not isinstance(v, bool) and v > 0]
    return max(ranks) if ranks else None


def rank_choices() -> list[int]:
    """The max_lora_rank values the pinned vLLM accepts (its Literal, from the engine-args snapshot)."""
    snapshot = load_snapshot(compat.toolkit()["vllm"]["version"]) or {}
    field_info = (snapshot.get("fields") or {}).get("max_lora_rank") or {}
    return sorted(c for c in field_info.get("choices") or [] if isinstance(c, int))


def _rank_choice(rank: int) -> int:
    """The smallest max_lora_rank vLLM accepts that holds `rank` (the rank itself beyond them: validate
    reports it)."""
    return next((c for c in rank_choices() if c >= rank), rank)


def _read_folder(spec: Spec, index: int, adapter: Adapter, folder: Path) -> dict[str, bytes]:
    """Every regular file under a local adapter folder (folder-relative name -> bytes), each opened inside
    the folder: a link out of it, a FIFO or a name breaking the path rule is refused."""
    what = f"adapters[{index}].source"
    expected = "a folder holding a peft adapter (adapter_config.json, adapter_model.safetensors)"
    if not folder.is_dir():
        raise PackageError(f"adapter {adapter.name!r}: {folder} is not a folder", file=spec.source, field=what,
                           expected=expected)
    out: dict[str, bytes] = {}
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames.sort()
        for filename in sorted(filenames):
            path = Path(dirpath) / filename
            rel = path.relative_to(folder).as_posix()
            if len(out) >= MAX_ADAPTER_FILES:
                raise PackageError(f"adapter {adapter.name!r}: more than {MAX_ADAPTER_FILES} files in {folder}",
                                   file=spec.source, field=what, expected=expected)
            try:
                name = safepath.check_name(rel, source=spec.source, what=what)
                fd = safepath.open_inside(path, folder, name=name, source=spec.source, what=what)
            except safepath.UnsafePathError as exc:
                raise PackageError(f"adapter {adapter.name!r}: {safepath.quote(rel)} breaks the path rule: "
                                   f"{exc.rule}", file=spec.source, field=what, expected=expected) from None
            with os.fdopen(fd, "rb") as fh:
                size = os.fstat(fh.fileno()).st_size
                if size > MAX_ADAPTER_FILE_BYTES:
                    raise PackageError(f"adapter {adapter.name!r}: {rel} is {size} bytes", file=spec.source,
                                       field=what, expected=f"files of at most {MAX_ADAPTER_FILE_BYTES} bytes")
                try:
                    out[name] = boundedio.read_at_most(fh, MAX_ADAPTER_FILE_BYTES, path)
                except boundedio.FileTooLargeError:
                    raise PackageError(f"adapter {adapter.name!r}: {rel} grew past {MAX_ADAPTER_FILE_BYTES} bytes "
                                       "while read", file=spec.source, field=what,
                                       expected=f"files of at most {MAX_ADAPTER_FILE_BYTES} bytes") from None
    if not out:
        raise PackageError(f"adapter {adapter.name!r}: {folder} is empty", file=spec.source, field=what,
                           expected=expected)
    return out
