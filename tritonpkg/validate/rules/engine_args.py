"""model.json (the toolkit's `vllm` backend hands it to AsyncEngineArgs(**json)): unknown keys and
wrong value types make the engine fail at load, so both are errors; remote weights are a warning."""

from __future__ import annotations

import difflib
from collections.abc import Iterator

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
    wanted = ctx.release_vllm
    known = engine_fields(wanted)
    if known is None:
        yield m.problem("engine_args.version", "warning", f"no AsyncEngineArgs fields known for vLLM {wanted}",
                        file=f, expected="vLLM installed or a snapshot in tritonpkg/compat/engine_args/")
        return
    if known.vllm_version != wanted:
        yield m.problem("engine_args.version", "warning",
                        f"target runs vLLM {wanted} but engine arguments are checked against vLLM "
                        f"{known.vllm_version} ({known.source}): fields may differ", file=f,
                        expected=f"a snapshot for vLLM {wanted} (python -m tritonpkg.compat.engine_args.snapshot)")
    for key, value in m.engine_args.items():
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
    for key in LOCATION_KEYS:
        value = m.engine_args.get(key)
        if isinstance(value, str) and value.startswith(REMOTE):
            yield m.problem("engine_args.remote", "warning",
                            f"{key} points at a remote location {value!r}: every load downloads it",
                            field=key, file=f, expected="a local path (materialise the weights first)")


RULES = [engine_args]
