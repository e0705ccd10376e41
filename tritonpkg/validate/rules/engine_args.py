"""model.json (the toolkit's `vllm` backend hands it to AsyncEngineArgs(**json)): unknown keys, wrong
value types, a value outside a Literal's choices and a number outside the limits vLLM's config classes
declare (`stream_interval: 0`, `gpu_memory_utilization: 1.5`) make the engine fail at load, so all are
errors; remote weights are a warning. A limit on a feature the model does not use (LoRA, multimodal, a
MoE kernel backend) is checked by vLLM only once the feature is on; validate reports it either way."""

from __future__ import annotations

import difflib
import operator
from collections.abc import Iterator

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
        kind = kind_of(value)
        if "any" not in accepts and kind not in accepts:
            yield m.problem("engine_args.type", "error",
                            f"{key!r} is a JSON {kind}, but AsyncEngineArgs.{key} is {spec['type']}",
                            field=key, file=f, expected=spec["type"])
            continue
        yield from _value_problems(m, key, value, spec, known.vllm_version)
    for key in LOCATION_KEYS:
        value = args.get(key)
        if isinstance(value, str) and value.startswith(REMOTE):
            yield m.problem("engine_args.remote", "warning",
                            f"{key} points at a remote location {value!r}: every load downloads it",
                            field=key, file=f, expected="a local path (materialise the weights first)")


_LIMITS = {"ge": (operator.ge, ">="), "gt": (operator.gt, ">"), "le": (operator.le, "<="), "lt": (operator.lt, "<")}


def _value_problems(m: LoadedModel, key: str, value, spec: dict, version) -> Iterator[Problem]:
    f = m.engine_args_file
    choices = spec.get("choices")
    if choices is not None and value is not None and value not in choices:
        close = difflib.get_close_matches(value, [c for c in choices if isinstance(c, str)], n=1) \
            if isinstance(value, str) else []
        yield m.problem("engine_args.choice", "error",
                        f"{key!r} is {value!r}; vLLM {version} accepts {', '.join(map(repr, choices))}"
                        + (f"; did you mean {close[0]!r}?" if close else ""),
                        field=key, file=f, expected=" | ".join(map(repr, choices)))
    bounds = spec.get("bounds")
    if bounds and isinstance(value, (int, float)) and not isinstance(value, bool):
        limits = " and ".join(f"{_LIMITS[k][1]} {b}" for k, b in bounds.items())
        if not all(_LIMITS[k][0](value, b) for k, b in bounds.items()):
            yield m.problem("engine_args.range", "error", f"{key!r} is {value}; vLLM {version} requires {limits}",
                            field=key, file=f, expected=f"a number {limits}")


RULES = [engine_args]
