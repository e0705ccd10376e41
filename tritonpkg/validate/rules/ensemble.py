"""Ensembles, checked the way Triton 2.51 does at poll/load (messages seen on the real server):
"contains models that are not available", "mapping to non-existing input", "mapped from
non-existing output", "must specify 'input_map'", "ensemble input ... is not used", "ensemble tensor
't' is unused", "can appear in an output map only once", "output ... is not written: ... is not
connected", "inconsistent data type/shape", "allows maximum batch size 8, but it contains model ...",
"circular dependency between ensembles". Shapes compare dims without the batch dim, -1 matching
anything; a composing model with max_batch_size 0 is accepted under a batching ensemble."""

from __future__ import annotations

from collections.abc import Iterator

from tritonclient.grpc import model_config_pb2 as pb

from tritonpkg.validate.context import Context
from tritonpkg.validate.loaded import LoadedModel
from tritonpkg.validate.report import Problem
from tritonpkg.validate.rules.versions import loaded_versions

_S = "ensemble_scheduling.step"


def _dtype(t: int) -> str:
    return pb.DataType.Name(t)


def _compatible(a, b) -> bool:
    return len(a) == len(b) and all(x == y or x == -1 or y == -1 for x, y in zip(a, b, strict=False))


def ensemble(m: LoadedModel, ctx: Context) -> Iterator[Problem]:
    if not m.is_ensemble or not m.parsed.HasField("ensemble_scheduling"):
        return
    cfg = m.parsed
    steps = cfg.ensemble_scheduling.step
    ins = {i.name: i for i in cfg.input}
    outs = {o.name: o for o in cfg.output}
    # tensor -> [(dtype, dims, who, field)] declarations, for the consistency check
    decl: dict[str, list[tuple[int, list[int], str, str]]] = {}
    for kind, items in (("input", cfg.input), ("output", cfg.output)):
        for i, io in enumerate(items):
            decl.setdefault(io.name, []).append((io.data_type, list(io.dims), m.name, f"{kind}[{i}]"))
    producers: dict[str, list[int]] = {}
    consumers: dict[str, list[int]] = {}

    for s, step in enumerate(steps):
        path = f"{_S}[{s}]"
        for mapname in ("input_map", "output_map"):
            if not getattr(step, mapname):
                yield m.problem("ensemble.step-map", "error", f"step {s} ({step.model_name!r}) has no {mapname}",
                                field=path,
                                expected=f"{mapname} {{ key: \"<model tensor>\" value: \"<ensemble tensor>\" }}")
        for value in step.input_map.values():
            consumers.setdefault(value, []).append(s)
        for key, value in step.output_map.items():
            if value in producers:
                yield m.problem(
                    "ensemble.output-map-dup", "error",
                    f"ensemble tensor {value!r} is written by step {producers[value][0]} and again by step {s}",
                    field=f"{path}.output_map[{key}]", expected="each tensor written by one step")
            producers.setdefault(value, []).append(s)
        sub = ctx.models.get(step.model_name)
        if sub is None or (sub.config is None and sub.has_config_file):
            if sub is None:
                yield m.problem("ensemble.unknown-model", "error",
                                f"step {s} uses model {step.model_name!r}, which is not in the repository",
                                field=f"{path}.model_name", expected=f"one of {sorted(ctx.models)}")
            continue
        if sub.config is None:
            continue
        if step.model_version >= 0 and step.model_version not in loaded_versions(sub):
            yield m.problem("ensemble.model-version", "error",
                            f"step {s} needs version {step.model_version} of {sub.name!r}, which will not be loaded",
                            field=f"{path}.model_version", expected=f"-1 or one of {sorted(loaded_versions(sub))}")
        sub_in = {i.name: i for i in sub.config.input}
        sub_out = {o.name: o for o in sub.config.output}
        for mapname, declared, role in (("input_map", sub_in, "an input"), ("output_map", sub_out, "an output")):
            for key, value in getattr(step, mapname).items():
                io = declared.get(key)
                if io is None:
                    if sub.has_config_file:
                        yield m.problem("ensemble.io-name", "error",
                                        f"{mapname} key {key!r} is not {role} of {sub.name!r}",
                                        field=f"{path}.{mapname}[{key}]", expected=f"one of {sorted(declared)}")
                    continue
                decl.setdefault(value, []).append((io.data_type, list(io.dims), sub.name, f"{path}.{mapname}[{key}]"))
        for key, io in sub_in.items():
            if key not in step.input_map and not io.optional and step.input_map:
                yield m.problem("ensemble.step-input-missing", "error",
                                f"input {key!r} of {sub.name!r} is not mapped to any ensemble tensor in step {s}",
                                field=f"{path}.input_map", expected=f"input_map {{ key: \"{key}\" value: ... }}")
        if sub.config.max_batch_size > 0 and cfg.max_batch_size > sub.config.max_batch_size:
            yield m.problem("ensemble.batch-size", "error",
                            f"max_batch_size {cfg.max_batch_size} exceeds {sub.name!r}'s {sub.config.max_batch_size}",
                            field="max_batch_size", expected=f"<= {sub.config.max_batch_size}")

    yield from _graph(m, steps, ins, outs, producers, consumers)
    yield from _consistency(m, decl)


def _graph(m, steps, ins, outs, producers, consumers) -> Iterator[Problem]:
    ready = set(ins)
    done: set[int] = set()
    changed = True
    while changed:
        changed = False
        for s, step in enumerate(steps):
            if s not in done and set(step.input_map.values()) <= ready:
                done.add(s)
                ready |= set(step.output_map.values())
                changed = True
    for i, name in enumerate(ins):
        if name not in consumers:
            yield m.problem("ensemble.unused", "error", f"ensemble input {name!r} is not used by any step",
                            field=f"input[{i}]", expected="an input_map value naming it")
    for name, steps_using in consumers.items():
        if name not in ins and name not in producers:
            s = steps_using[0]
            yield m.problem("ensemble.unconnected", "error",
                            f"step {s} reads {name!r}, which is neither an ensemble input nor written by a step",
                            field=f"{_S}[{s}].input_map", expected=f"one of {sorted(set(ins) | set(producers))}")
    for name, steps_writing in producers.items():
        if name not in consumers and name not in outs:
            s = steps_writing[0]
            yield m.problem("ensemble.unused", "error",
                            f"tensor {name!r} written by step {s} is never read and is not an ensemble output",
                            field=f"{_S}[{s}].output_map", expected="a consumer or an ensemble output of that name")
        elif name in producers and name not in ready and all(
            c in producers or c in ins for c in _inputs_of(steps, steps_writing)
        ):
            s = steps_writing[0]
            yield m.problem("ensemble.cycle", "error",
                            f"tensor {name!r} (step {s}) depends on itself: the steps form a cycle",
                            field=f"{_S}[{s}].output_map", expected="an acyclic chain of steps")
    for i, name in enumerate(outs):
        if name not in producers:
            yield m.problem("ensemble.output-not-written", "error", f"ensemble output {name!r} is written by no step",
                            field=f"output[{i}]", expected="an output_map value naming it")
        elif name not in ready:
            yield m.problem("ensemble.output-not-written", "error",
                            f"ensemble output {name!r} depends on tensors that are never available",
                            field=f"output[{i}]", expected="every tensor on its path connected to the ensemble inputs")


def _inputs_of(steps, idxs) -> set[str]:
    return {v for s in idxs for v in steps[s].input_map.values()}


def _consistency(m: LoadedModel, decl) -> Iterator[Problem]:
    for name, declared in decl.items():
        items = [d for d in declared if d[0] != pb.TYPE_INVALID]  # reported on the model itself
        if not items:
            continue
        dtype0, dims0, who0, _ = items[0]
        for dtype, dims, who, field in items[1:]:
            if dtype != dtype0:
                yield m.problem("ensemble.dtype", "error",
                                f"tensor {name!r} is {_dtype(dtype0)} in {who0!r} but {_dtype(dtype)} in {who!r}",
                                field=field, expected=_dtype(dtype0))
            elif not _compatible(dims0, dims):
                yield m.problem("ensemble.shape", "error",
                                f"tensor {name!r} has dims {dims0} in {who0!r} but {dims} in {who!r}",
                                field=field, expected=f"dims compatible with {dims0} (-1 matches any size)")


def ensemble_cycles(m: LoadedModel, ctx: Context) -> Iterator[Problem]:
    """An ensemble that reaches itself through its steps (Triton: 'circular dependency')."""
    if not m.is_ensemble:
        return
    seen: set[str] = set()
    stack = [(m.name, [m.name])]
    while stack:
        name, trail = stack.pop()
        mm = ctx.models.get(name)
        if mm is None or not mm.is_ensemble:
            continue
        for step in mm.parsed.ensemble_scheduling.step:
            if step.model_name == m.name:
                yield m.problem("ensemble.cycle", "error",
                                f"circular dependency between ensembles: {' -> '.join([*trail, m.name])}",
                                field=f"{_S}", expected="no ensemble that (indirectly) contains itself")
                return
            if step.model_name not in seen:
                seen.add(step.model_name)
                stack.append((step.model_name, [*trail, step.model_name]))


def decoupled_origins(m: LoadedModel, ctx: Context) -> Iterator[Problem]:
    """Responses of a decoupled step cannot be joined with tensors from elsewhere: every step, and the
    ensemble's outputs, must draw all inputs from one origin (2.51: "step of model 'x' receives inputs
    originated from different decoupled models"). An origin is the nearest upstream decoupled step,
    or the ensemble's own request."""
    if not m.is_ensemble or not m.parsed.HasField("ensemble_scheduling"):
        return
    steps = m.parsed.ensemble_scheduling.step
    origin: dict[str, str] = {i.name: "" for i in m.parsed.input}
    pending = set(range(len(steps)))
    while pending:
        ready = [s for s in sorted(pending) if set(steps[s].input_map.values()) <= set(origin)]
        if not ready:
            return  # unconnected tensors and cycles are reported by the graph rules
        for s in ready:
            pending.discard(s)
            step = steps[s]
            sources = {origin[t] for t in step.input_map.values()}
            if len(sources) > 1:
                yield m.problem("ensemble.decoupled-origin", "error",
                                f"step {s} ({step.model_name!r}) joins tensors from different decoupled origins",
                                field=f"{_S}[{s}].input_map",
                                expected="inputs that all come after the same decoupled step")
            sub = ctx.models.get(step.model_name)
            decoupled = sub is not None and sub.config is not None and sub.config.model_transaction_policy.decoupled
            out_origin = f"{s}:{step.model_name}" if decoupled else next(iter(sources), "")
            for t in step.output_map.values():
                origin[t] = out_origin
    final = {origin[o.name] for o in m.parsed.output if o.name in origin}
    if len(final) > 1:
        yield m.problem("ensemble.decoupled-origin", "error",
                        "the ensemble's outputs come from different decoupled origins", field="output",
                        expected="outputs that all come after the same decoupled step (or none)")


RULES = [ensemble, ensemble_cycles, decoupled_origins]
