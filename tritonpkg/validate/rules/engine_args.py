"""model.json (the toolkit's `vllm` backend hands it to AsyncEngineArgs(**json)): unknown keys, wrong
value types, a value outside a Literal's choices and a number outside the limits vLLM's config classes
declare (`stream_interval: 0`, `gpu_memory_utilization: 1.5`) make the engine fail at load, so all are
errors; remote weights are a warning. A value of another JSON kind that vLLM's pydantic config classes coerce
in lax mode ("128" for an int, 1 for a bool) loads, so it is a warning naming what it becomes. A limit or choice of a
config class vLLM builds only for a feature (LoRAConfig with enable_lora, MultiModalConfig for a multimodal model) fails
the load only with that feature on: an error then, a warning otherwise (multimodal: always a warning, since which
architectures are multimodal is vLLM's model registry's call)."""

from __future__ import annotations

import difflib
import operator
from collections.abc import Iterator
from typing import Any

from pydantic import TypeAdapter, ValidationError

from tritonpkg import compat
from tritonpkg.validate.context import Context
from tritonpkg.validate.engine_fields import engine_fields
from tritonpkg.validate.loaded import LoadedModel
from tritonpkg.validate.report import Problem

REMOTE = ("s3://", "hf://", "http://", "https://", "gs://")
LOCATION_KEYS = ("model", "tokenizer", "model_weights")


def kind_of(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    return {int: "int", float: "float", str: "str", list: "list", dict: "dict"}[type(value)]


def engine_args(m: LoadedModel, ctx: Context) -> Iterator[Problem]:
    if m.engine_args_file is None:
        return
    f = m.engine_args_file
    if m.engine_args_error:
        yield m.problem("engine_args.json", "error", m.engine_args_error, file=f, expected="a JSON object")
        return
    args = m.engine_args
    if args is None:
        raise ValueError(f"model {m.name!r}: {f} loaded without an error but holds no engine arguments")
    wanted = ctx.release_vllm
    if wanted is None:  # the release publishes no vLLM: validate's target.unknown warning says what goes unchecked
        return
    known = engine_fields(wanted)
    if known is None:
        yield m.problem("engine_args.version", "warning", f"no AsyncEngineArgs fields known for vLLM {wanted}",
                        file=f, expected="vLLM installed or a snapshot in tritonpkg/compat/engine_args/")
        return
    if known.vllm_version != wanted:
        why = compat.engine_args_unavailable(wanted)
        yield m.problem("engine_args.version", "warning",
                        f"target runs vLLM {wanted} but engine arguments are checked against vLLM "
                        f"{known.vllm_version} ({known.source}): fields may differ"
                        + (f" (no snapshot for {wanted}: {why})" if why else ""), file=f,
                        expected=f"a snapshot for vLLM {wanted} (python -m tritonpkg.compat.engine_args.snapshot)")
    for key, value in args.items():
        spec = known.fields.get(key)
        if spec is None:
            close = difflib.get_close_matches(key, known.fields, n=1)
            yield m.problem("engine_args.unknown", "error",
                            f"unknown engine argument {key!r} for vLLM {known.vllm_version}"
                            + (f"; did you mean {close[0]!r}?" if close else ""),
                            field=key, file=f, expected=close[0] if close else "an AsyncEngineArgs field")
            continue
        accepts = spec["accepts"]
        kind, checked = kind_of(value), value
        if "any" not in accepts and kind not in accepts:
            coerced = lax_value(value, accepts) if spec.get("configs") else None
            if coerced is None:
                yield m.problem("engine_args.type", "error",
                                f"{key!r} is a JSON {kind}, but AsyncEngineArgs.{key} is {spec['type']}",
                                field=key, file=f, expected=spec["type"])
                continue
            yield m.problem("engine_args.coerced", "warning",
                            f"{key!r} is the JSON {kind} {value!r}; vLLM {known.vllm_version}'s {spec['configs'][0]} "
                            f"(pydantic, lax mode) turns it into {coerced[0]!r}", field=key, file=f,
                            expected=f"{coerced[0]!r} ({spec['type']})")
            checked = coerced[0]
        yield from _value_problems(m, key, checked, spec, known.vllm_version, args)
    for key in LOCATION_KEYS:
        value = args.get(key)
        if isinstance(value, str) and value.startswith(REMOTE):
            yield m.problem("engine_args.remote", "warning",
                            f"{key} points at a remote location {value!r}: every load downloads it",
                            field=key, file=f, expected="a local path (materialise the weights first)")


_LIMITS = {"ge": (operator.ge, ">="), "gt": (operator.gt, ">"), "le": (operator.le, "<="), "lt": (operator.lt, "<")}


_LAX_TYPES: dict[str, Any] = {"int": int, "float": float, "bool": bool, "str": str, "null": None}


def lax_value(value: Any, accepts: list[str]) -> tuple[Any] | None:
    """(the value) pydantic's lax mode makes of `value` for the first accepted JSON kind that takes it ("128" ->
    128, 1 -> True), as vLLM's pydantic config classes do when create_engine_config hands the argument on; None
    when none does. Lists and objects are not coerced here."""
    for kind in accepts:
        if kind not in _LAX_TYPES:
            continue
        try:
            return (TypeAdapter(_LAX_TYPES[kind]).validate_python(value),)
        except ValidationError:
            continue
    return None


FEATURE_CONFIGS = {"LoRAConfig": "LoRA (vLLM builds LoRAConfig only with enable_lora on)",
                   "MultiModalConfig": "a multimodal model (vLLM builds MultiModalConfig only for one)"}
"""Config classes vLLM builds only when a feature is on: their limits fail the load only then."""


def _feature_off(spec: dict, args: dict, only: bool = False) -> str | None:
    """Which feature's config class holds this field's limits (`only`: its choices, which every class that has the
    field validates, so only a field no other class has), when that feature is not known to be on."""
    classes = spec.get("configs") or ()
    if only and not set(classes) <= set(FEATURE_CONFIGS):
        return None
    for cls in classes:
        if cls == "LoRAConfig" and not args.get("enable_lora"):  # vLLM: `if self.enable_lora`
            return FEATURE_CONFIGS[cls]
        if cls == "MultiModalConfig":  # which architectures are multimodal is vLLM's model registry's call
            return FEATURE_CONFIGS[cls]
    return None


def _value_problems(m: LoadedModel, key: str, value, spec: dict, version, args: dict) -> Iterator[Problem]:
    f = m.engine_args_file
    choices = spec.get("choices")
    if choices is not None and value is not None and value not in choices:
        close = difflib.get_close_matches(value, [c for c in choices if isinstance(c, str)], n=1) \
            if isinstance(value, str) else []
        feature = _feature_off(spec, args, only=True)
        yield m.problem("engine_args.choice", "warning" if feature else "error",
                        f"{key!r} is {value!r}; vLLM {version} accepts {', '.join(map(repr, choices))}"
                        + (f"; did you mean {close[0]!r}?" if close else "")
                        + (f", checked only for {feature}" if feature else ""),
                        field=key, file=f, expected=" | ".join(map(repr, choices)))
    bounds = spec.get("bounds")
    if bounds and isinstance(value, (int, float)) and not isinstance(value, bool):
        limits = " and ".join(f"{_LIMITS[k][1]} {b}" for k, b in bounds.items())
        if not all(_LIMITS[k][0](value, b) for k, b in bounds.items()):
            feature = _feature_off(spec, args)
            yield m.problem("engine_args.range", "warning" if feature else "error",
                            f"{key!r} is {value}; vLLM {version} requires {limits}"
                            + (f", checked only for {feature}" if feature else ""),
                            field=key, file=f, expected=f"a number {limits}")


RULES = [engine_args]
