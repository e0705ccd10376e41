"""config.pbtxt built with Triton's own protobuf schema (tritonclient's model_config_pb2), never from
string templates: what we write is, by construction, something Triton's parser accepts."""

from __future__ import annotations

from dataclasses import dataclass, field

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from tritonpkg.spec import TensorSpec


@dataclass(frozen=True)
class Tensor:
    """A tensor as the repository builder needs it (spec tensors and template defaults both map here)."""

    name: str
    data_type: str  # "TYPE_FP32", ...
    dims: tuple[int, ...]
    optional: bool = False

    @classmethod
    def of(cls, t: TensorSpec) -> Tensor:
        return cls(t.name, t.data_type, tuple(t.dims), t.optional)


@dataclass
class ModelConfigSpec:
    """The parts of a ModelConfig the toolkit decides; everything else keeps Triton's defaults."""

    name: str
    backend: str | None = None
    platform: str | None = None
    max_batch_size: int = 0
    inputs: list[Tensor] = field(default_factory=list)
    outputs: list[Tensor] = field(default_factory=list)
    decoupled: bool = False
    instance_kind: str | None = "KIND_CPU"
    instance_count: int = 1
    parameters: dict[str, str] = field(default_factory=dict)
    ensemble_steps: list[EnsembleStep] = field(default_factory=list)


@dataclass(frozen=True)
class EnsembleStep:
    model_name: str
    input_map: dict[str, str]  # the step model's input name -> ensemble tensor
    output_map: dict[str, str]  # the step model's output name -> ensemble tensor
    model_version: int = -1


def build(spec: ModelConfigSpec) -> mc.ModelConfig:
    cfg = mc.ModelConfig(name=spec.name, max_batch_size=spec.max_batch_size)
    if spec.backend:
        cfg.backend = spec.backend
    if spec.platform:
        cfg.platform = spec.platform
    for t in spec.inputs:
        cfg.input.add(name=t.name, data_type=mc.DataType.Value(t.data_type), dims=list(t.dims), optional=t.optional)
    for t in spec.outputs:
        cfg.output.add(name=t.name, data_type=mc.DataType.Value(t.data_type), dims=list(t.dims))
    if spec.decoupled:
        cfg.model_transaction_policy.decoupled = True
    if spec.instance_kind and spec.platform != "ensemble":
        cfg.instance_group.add(count=spec.instance_count, kind=mc.ModelInstanceGroup.Kind.Value(spec.instance_kind))
    for key in sorted(spec.parameters):
        cfg.parameters[key].string_value = spec.parameters[key]
    for step in spec.ensemble_steps:
        s = cfg.ensemble_scheduling.step.add(model_name=step.model_name, model_version=step.model_version)
        for k in sorted(step.input_map):
            s.input_map[k] = step.input_map[k]
        for k in sorted(step.output_map):
            s.output_map[k] = step.output_map[k]
    return cfg


def to_pbtxt(cfg: mc.ModelConfig) -> str:
    """Deterministic text: fields in schema order, map entries sorted by key."""
    return text_format.MessageToString(cfg)


def parse_pbtxt(text: str) -> mc.ModelConfig:
    return text_format.Parse(text, mc.ModelConfig())
