"""Inputs and outputs, with the messages Triton 2.51 gives at load ("must specify 'name'",
"must specify 'data_type'", "must specify 'dims'", "dimension must be integer >= 1, or -1",
"has different size for dims and reshape", "cannot have empty reshape for non-batching model").
Duplicate names load on 2.51 (the second silently shadows the first), so they are warnings."""

from __future__ import annotations

from collections.abc import Iterator

from tritonclient.grpc import model_config_pb2 as pb

from tritonpkg.validate.context import Context
from tritonpkg.validate.loaded import LoadedModel
from tritonpkg.validate.report import Problem


def _ios(m: LoadedModel):
    for kind, items in (("input", m.parsed.input), ("output", m.parsed.output)):
        for i, io in enumerate(items):
            yield kind, i, io


def _chunks(dims) -> list[int]:
    """Element counts between variable (-1) dims: how Triton compares dims with reshape."""
    out, cur = [], 1
    for d in dims:
        if d == -1:
            out.append(cur)
            cur = 1
        else:
            cur *= d
    out.append(cur)
    return out


def io_fields(m: LoadedModel, ctx: Context) -> Iterator[Problem]:
    if m.config is None:
        return
    for kind, i, io in _ios(m):
        path = f"{kind}[{i}]"
        label = f"{kind} {io.name!r}" if io.name else kind
        if not io.name:
            yield m.problem("tensor.name", "error", f"{kind} has no name", field=f"{path}.name",
                            expected="name: \"...\"")
        if io.data_type == pb.TYPE_INVALID:
            yield m.problem("tensor.data-type", "error", f"{label} has no data_type (or TYPE_INVALID)",
                            field=f"{path}.data_type", expected="a data type such as TYPE_FP32 or TYPE_STRING")
        if len(io.dims) == 0:
            yield m.problem("tensor.dims", "error", f"{label} has no dims", field=f"{path}.dims",
                            expected="dims: [ ... ] (-1 for a variable size)")
        for j, d in enumerate(io.dims):
            if d == 0 or d < -1:
                yield m.problem("tensor.dims", "error", f"{label} has dimension {d}", field=f"{path}.dims[{j}]",
                                expected="an integer >= 1, or -1 for a variable size")
        if io.HasField("reshape"):
            yield from _reshape(m, f"{path}.reshape", label, io)


def _reshape(m: LoadedModel, path: str, label: str, io) -> Iterator[Problem]:
    shape = list(io.reshape.shape)
    if not shape and m.parsed.max_batch_size == 0:
        yield m.problem("tensor.reshape", "error",
                        f"{label} has an empty reshape on a non-batching model (scalars are not supported)",
                        field=path, expected="max_batch_size > 0, or a non-empty shape")
        return
    if any(d == 0 or d < -1 for d in shape) or any(d == 0 or d < -1 for d in io.dims) or not io.dims:
        if any(d == 0 or d < -1 for d in shape):
            yield m.problem("tensor.reshape", "error", f"{label} reshape has an invalid dimension",
                            field=path, expected="integers >= 1, or -1")
        return
    a, b = _chunks(io.dims), _chunks(shape)
    if len(a) != len(b):
        yield m.problem(
            "tensor.reshape", "error",
            f"{label}: dims {list(io.dims)} and reshape {shape} have different numbers of variable (-1) dimensions",
            field=path, expected="the same number of -1 dims, with equal element counts between them")
    elif a != b:
        yield m.problem("tensor.reshape", "error",
                        f"{label}: dims {list(io.dims)} and reshape {shape} hold different numbers of elements",
                        field=path, expected="a reshape with the same element count as dims")


def duplicate_names(m: LoadedModel, ctx: Context) -> Iterator[Problem]:
    if m.config is None:
        return
    for kind, items in (("input", m.config.input), ("output", m.config.output)):
        seen: dict[str, int] = {}
        for i, io in enumerate(items):
            if io.name and io.name in seen:
                yield m.problem("tensor.duplicate", "warning",
                                f"{kind} name {io.name!r} is also {kind}[{seen[io.name]}]: Triton loads it, "
                                "but clients can only address one of them",
                                field=f"{kind}[{i}].name", expected="unique names")
            seen.setdefault(io.name, i)


def shape_tensors(m: LoadedModel, ctx: Context) -> Iterator[Problem]:
    """2.51: "shape tensors are only supported for TensorRT platform"."""
    if m.config is None or m.config.platform == "tensorrt_plan":
        return
    for kind, i, io in _ios(m):
        if io.is_shape_tensor:
            yield m.problem("tensor.shape-tensor", "error", f"{io.name} is a shape tensor on backend {m.backend!r}",
                            field=f"{kind}[{i}].is_shape_tensor",
                            expected="is_shape_tensor only on platform tensorrt_plan")


def warmup_inputs(m: LoadedModel, ctx: Context) -> Iterator[Problem]:
    """A warmup sample is a real request sent at load: unknown names or missing required inputs fail
    the load (2.51: "expected 2 inputs but got 0 inputs ... missing required input(s)")."""
    if m.config is None:
        return
    names = {i.name for i in m.config.input}
    required = {i.name for i in m.config.input if not i.optional}
    for w, sample in enumerate(m.config.model_warmup):
        path = f"model_warmup[{w}]"
        for key in sample.inputs:
            if key not in names:
                yield m.problem("tensor.warmup-input", "error", f"warmup {sample.name!r} sends unknown input {key!r}",
                                field=f"{path}.inputs[{key}]", expected=f"one of {', '.join(sorted(names))}")
        missing = sorted(required - set(sample.inputs))
        if missing:
            yield m.problem("tensor.warmup-input", "error",
                            f"warmup {sample.name!r} misses required input(s) {', '.join(missing)}",
                            field=f"{path}.inputs", expected=f"values for {', '.join(sorted(required))}")


RULES = [io_fields, duplicate_names, shape_tensors, warmup_inputs]
