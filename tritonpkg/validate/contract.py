"""`--contract FILE`: the requests a frontend will send, checked against the models' I/O.

The file is JSON or YAML holding one request or a list of them:

    {"model": "embedder",
     "inputs":  [{"name": "text", "datatype": "BYTES", "shape": [1, 3]}],
     "outputs": ["embedding"]}

`datatype` uses KServe v2 names (BYTES, FP32, INT64, ...; BYTES = TYPE_STRING). `shape` is the full
request shape, batch dimension included when the model's max_batch_size > 0. `outputs` is optional.
`sampling_parameters` (optional, an object or its JSON text) is checked against the SamplingParams fields of
the target's vLLM (validate/sampling.py). Problems point at the contract file and name the request index in
`field`."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from tritonclient.grpc import model_config_pb2 as pb

from tritonpkg import boundedio
from tritonpkg.errors import SpecError, TritonpkgError
from tritonpkg.spec import MAX_SPEC_BYTES, parse_yaml
from tritonpkg.validate.context import Context
from tritonpkg.validate.report import Problem
from tritonpkg.validate.sampling import sampling_problem


class ContractInput(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    datatype: str
    shape: list[int]


class ContractRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    model: str
    inputs: list[ContractInput] = Field(default_factory=list)
    outputs: list[str] = Field(default_factory=list)
    sampling_parameters: dict[str, Any] | str | None = None


class Contract(BaseModel):
    path: Path
    requests: list[ContractRequest]


def load_contract(path: Path) -> Contract:
    if not path.is_file():
        raise TritonpkgError("contract file not found", file=path, expected="a JSON or YAML request description")
    try:  # the spec's bounds: size, and for YAML no aliases, depth, value count
        text = boundedio.read_file(path, MAX_SPEC_BYTES).decode("utf-8")
    except boundedio.FileTooLargeError:
        raise SpecError(f"the file is larger than {MAX_SPEC_BYTES} bytes", file=path,
                        expected=f"at most {MAX_SPEC_BYTES} bytes") from None
    except UnicodeDecodeError as exc:
        raise SpecError(f"not UTF-8 (byte {exc.start})", file=path, expected="UTF-8 text") from None
    if path.suffix == ".json":
        try:
            data: Any = json.loads(text)
        except (json.JSONDecodeError, RecursionError) as exc:
            raise TritonpkgError(f"cannot parse contract: {str(exc)[:200]}", file=path) from None
    else:
        data = parse_yaml(text, path)[1]
    items = data if isinstance(data, list) else [data]
    try:
        return Contract(path=path, requests=[ContractRequest.model_validate(r) for r in items])
    except ValidationError as exc:
        raise TritonpkgError(
            f"invalid contract: {exc}", file=path,
            expected='{"model": ..., "inputs": [{"name", "datatype", "shape"}], "outputs": [...]}',
        ) from exc


def v2_datatype(data_type: int) -> str:
    """ModelConfig TYPE_X -> the v2 protocol name a request uses (TYPE_STRING -> BYTES)."""
    name = pb.DataType.Name(data_type).removeprefix("TYPE_")
    return "BYTES" if name == "STRING" else name


def _shape_ok(shape: list[int], dims: list[int], batching: bool) -> bool:
    want = ([-1] if batching else []) + dims
    return len(shape) == len(want) and all(w == -1 or s == w for s, w in zip(shape, want, strict=False))


def check_contract(contract: Contract, ctx: Context) -> list[Problem]:
    return [p for i, req in enumerate(contract.requests) for p in _check_request(i, req, contract.path, ctx)]


def _check_request(i: int, req: ContractRequest, path: Path, ctx: Context) -> Iterator[Problem]:
    def problem(rule: str, field: str, message: str, expected: str | None) -> Problem:
        return Problem(rule=rule, severity="error", file=str(path), model=req.model, field=f"requests[{i}].{field}",
                       message=message, expected=expected)

    m = ctx.models.get(req.model)
    if m is None or m.config is None:
        yield problem("contract.model", "model", f"model {req.model!r} is not in the repository"
                      if m is None else f"model {req.model!r} has no usable config", f"one of {sorted(ctx.models)}")
        return
    cfg = m.config
    ins = {io.name: io for io in cfg.input}
    outs = {io.name for io in cfg.output}
    sent = set()
    for j, x in enumerate(req.inputs):
        sent.add(x.name)
        io = ins.get(x.name)
        if io is None:
            yield problem("contract.input", f"inputs[{j}].name", f"{req.model!r} has no input {x.name!r}",
                          f"one of {sorted(ins)}")
            continue
        want = v2_datatype(io.data_type)
        given = x.datatype.upper().removeprefix("TYPE_")
        got = "BYTES" if given in ("BYTES", "STRING") else given
        if got != want:
            yield problem("contract.datatype", f"inputs[{j}].datatype",
                          f"input {x.name!r} is sent as {x.datatype} but the model takes {want}", want)
        if not _shape_ok(x.shape, list(io.dims), cfg.max_batch_size > 0):
            full = ([-1] if cfg.max_batch_size > 0 else []) + list(io.dims)
            yield problem("contract.shape", f"inputs[{j}].shape",
                          f"input {x.name!r} shape {x.shape} does not fit dims {list(io.dims)}"
                          + (" plus the batch dimension" if cfg.max_batch_size > 0 else ""),
                          f"shape matching {full} (-1 = any)")
    for name, io in ins.items():
        if name not in sent and not io.optional:
            yield problem("contract.missing-input", "inputs", f"required input {name!r} of {req.model!r} is not sent",
                          f"an input named {name!r}")
    if req.sampling_parameters is not None and ctx.release_vllm is not None:
        why = sampling_problem(req.sampling_parameters, ctx.release_vllm)
        if why:
            yield problem("contract.sampling", "sampling_parameters", f"sampling parameters refused: {why}",
                          f"the SamplingParams fields of vLLM {ctx.release_vllm}")
    for j, name in enumerate(req.outputs):
        if name not in outs:
            yield problem("contract.output", f"outputs[{j}]", f"{req.model!r} has no output {name!r}",
                          f"one of {sorted(outs)}")
