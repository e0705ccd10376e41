"""Scheduler settings Triton 2.51 checks when it polls a model (messages from the real server):
"default priority level must be in range [1, N]", and the sequence batcher's control tensors
("must specify either 'int32_false_true', 'fp32_false_true' or 'bool_false_true'", "must have exactly
2 entries", "specifies multiple CONTROL_SEQUENCE_START tensors", "unexpected data type for control
CONTROL_SEQUENCE_CORRID", "control tensor must have a name")."""

from __future__ import annotations

from collections.abc import Iterator

from tritonclient.grpc import model_config_pb2 as pb

from tritonpkg.validate.context import Context
from tritonpkg.validate.loaded import LoadedModel
from tritonpkg.validate.report import Problem

_Control = pb.ModelSequenceBatching.Control
_BOOLEAN_CONTROLS = {_Control.CONTROL_SEQUENCE_START, _Control.CONTROL_SEQUENCE_END, _Control.CONTROL_SEQUENCE_READY}
_VALUE_FIELDS = ("int32_false_true", "fp32_false_true", "bool_false_true")
_CORRID_TYPES = {pb.TYPE_UINT64, pb.TYPE_INT64, pb.TYPE_UINT32, pb.TYPE_INT32, pb.TYPE_STRING}


def priority_levels(m: LoadedModel, ctx: Context) -> Iterator[Problem]:
    cfg = m.config
    if cfg is None or not cfg.HasField("dynamic_batching"):
        return
    db = cfg.dynamic_batching
    if db.priority_levels > 0 and not 1 <= db.default_priority_level <= db.priority_levels:
        yield m.problem("scheduler.priority", "error",
                        f"default_priority_level {db.default_priority_level} is outside the {db.priority_levels} "
                        "priority levels", field="dynamic_batching.default_priority_level",
                        expected=f"a level in [1, {db.priority_levels}]")


def sequence_controls(m: LoadedModel, ctx: Context) -> Iterator[Problem]:
    cfg = m.config
    if cfg is None or not cfg.HasField("sequence_batching"):
        return
    seen: dict[int, int] = {}
    for i, ci in enumerate(cfg.sequence_batching.control_input):
        path = f"sequence_batching.control_input[{i}]"
        if not ci.name:
            yield m.problem("scheduler.control-name", "error", "a sequence control tensor has no name",
                            field=f"{path}.name", expected="name: \"START\" (the input the model reads)")
        for j, control in enumerate(ci.control):
            kind = _Control.Kind.Name(control.kind)
            cpath = f"{path}.control[{j}]"
            if control.kind in seen:
                yield m.problem("scheduler.control-duplicate", "error",
                                f"more than one {kind} control tensor", field=f"{cpath}.kind",
                                expected=f"one {kind} (first in control_input[{seen[control.kind]}])")
            seen.setdefault(control.kind, i)
            if control.kind in _BOOLEAN_CONTROLS:
                given = [f for f in _VALUE_FIELDS if len(getattr(control, f))]
                if len(given) != 1:
                    yield m.problem("scheduler.control-values", "error",
                                    f"{kind} gives {' and '.join(given) if given else 'no'} false/true values",
                                    field=cpath, expected="exactly one of int32_false_true, fp32_false_true, "
                                                          "bool_false_true")
                elif len(getattr(control, given[0])) != 2:
                    yield m.problem("scheduler.control-values", "error",
                                    f"{kind} {given[0]} has {len(getattr(control, given[0]))} entries",
                                    field=f"{cpath}.{given[0]}", expected="exactly 2 entries: [false, true]")
            elif control.kind == _Control.CONTROL_SEQUENCE_CORRID and control.data_type not in _CORRID_TYPES:
                yield m.problem("scheduler.corrid-type", "error",
                                f"CONTROL_SEQUENCE_CORRID has data type {pb.DataType.Name(control.data_type)}",
                                field=f"{cpath}.data_type",
                                expected="TYPE_UINT64, TYPE_INT64, TYPE_UINT32, TYPE_INT32 or TYPE_STRING")


RULES = [priority_levels, sequence_controls]
