"""The model spec (`tritonpkg.yaml`): a pydantic model, its JSON Schema, and a loader whose errors name
the file, the line, the field path and what was expected. Everything downstream takes a `Spec`."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator, model_validator

from tritonpkg import compat
from tritonpkg.errors import SpecError

NAME_RE = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"
TRITON_DTYPES = (
    "BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64",
    "FP16", "FP32", "FP64", "BF16", "STRING",
)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TensorSpec(_Strict):
    """One input or output of a Python-backend model, in Triton's terms."""

    name: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_.\-]*$")
    data_type: str = Field(description="Triton data type: FP32, INT64, STRING (= BYTES), ... TYPE_ prefix optional")
    dims: list[int] = Field(min_length=1, description="shape without the batch dimension; -1 = variable")
    optional: bool = False

    @field_validator("data_type")
    @classmethod
    def _dtype(cls, v: str) -> str:
        bare = v.upper().removeprefix("TYPE_")
        if bare == "BYTES":
            bare = "STRING"
        if bare not in TRITON_DTYPES:
            raise ValueError(f"unknown data type {v!r}; expected one of {', '.join(TRITON_DTYPES)} (BYTES = STRING)")
        return "TYPE_" + bare

    @field_validator("dims")
    @classmethod
    def _dims(cls, v: list[int]) -> list[int]:
        if any(d == 0 or d < -1 for d in v):
            raise ValueError("every dim must be a positive size or -1 (variable)")
        return v


class PythonModel(_Strict):
    """A Python-backend model rendered from a template in templates/."""

    template: str = Field(description="template name: a folder of templates/ (custom, tokenizer, ensemble, ...)")
    parameters: dict[str, Any] = Field(default_factory=dict, description="template parameters")
    inputs: list[TensorSpec] = Field(default_factory=list)
    outputs: list[TensorSpec] = Field(default_factory=list)
    max_batch_size: int = Field(default=0, ge=0)
    instance_count: int = Field(default=1, ge=1)
    files: list[str] = Field(default_factory=list, description="user files (relative to the spec) copied beside model.py")


class Plugin(_Strict):
    """A package that provides vLLM entry points (e.g. `vllm.logits_processors`)."""

    name: str = Field(description="distribution name")
    wheel: str | None = Field(default=None, description="path to a wheel bundled into the model package")
    entry_point_group: str = "vllm.logits_processors"


class Deployment(_Strict):
    strategy: Literal["auto", "red-black", "versioned"] = "auto"
    replicas: int = Field(default=1, ge=1)
    traffic_steps: list[int] = Field(default_factory=lambda: [10, 25, 50, 100])
    instance_kind: Literal["KIND_AUTO", "KIND_CPU", "KIND_GPU", "KIND_MODEL"] = "KIND_AUTO"
    gpus: int = Field(default=0, ge=0)
    smoke_request: dict[str, Any] | None = Field(default=None, description="inputs of the canary request")

    @field_validator("traffic_steps")
    @classmethod
    def _steps(cls, v: list[int]) -> list[int]:
        if not v or v != sorted(v) or v[-1] != 100 or v[0] <= 0:
            raise ValueError("traffic_steps must rise strictly and end at 100, e.g. [10, 25, 50, 100]")
        return v


class Spec(_Strict):
    """One model, one version: what `tritonpkg package` turns into a Triton model repository entry."""

    name: str = Field(pattern=NAME_RE, description="Triton model name")
    version: int = Field(ge=1, description="integer model version (a numeric directory in the repository)")
    kind: Literal["vllm", "python"]
    weights: str | None = Field(
        default=None,
        description="local path (relative to the spec), s3://bucket/prefix, or hf://org/name@revision",
    )
    target_release: str = Field(default_factory=compat.default_release, description="Triton release, e.g. 24.10")
    execution_mode: Literal["embedded", "separate"] = "embedded"
    openai: bool = False
    engine_args: dict[str, Any] = Field(default_factory=dict, description="vLLM engine arguments (vllm kind)")
    python: PythonModel | None = Field(default=None, description="template, parameters and I/O (python kind)")
    requirements: list[str] = Field(default_factory=list, description="extra pip requirements of the model")
    plugins: list[Plugin] = Field(default_factory=list)
    deployment: Deployment = Field(default_factory=Deployment)

    _source: Path | None = PrivateAttr(default=None)

    @field_validator("target_release")
    @classmethod
    def _release(cls, v: str) -> str:
        known = compat.release_names()
        if v not in known:
            raise ValueError(f"unknown Triton release {v!r}; expected one of {', '.join(known)}")
        return v

    @field_validator("weights")
    @classmethod
    def _weights(cls, v: str | None) -> str | None:
        if v is None:
            return v
        if v.startswith("hf://") and not re.fullmatch(r"hf://[\w.\-]+/[\w.\-]+(@[\w.\-/]+)?", v):
            raise ValueError("hf weights must look like hf://org/name@revision")
        if v.startswith("s3://") and not re.fullmatch(r"s3://[a-z0-9.\-]{3,63}(/.*)?", v):
            raise ValueError("s3 weights must look like s3://bucket/prefix")
        return v

    @model_validator(mode="after")
    def _kind_fields(self) -> Spec:
        if self.kind == "python" and self.python is None:
            raise ValueError("kind 'python' needs a 'python' section (template, inputs, outputs)")
        if self.kind == "vllm" and self.python is not None:
            raise ValueError("kind 'vllm' takes 'engine_args', not a 'python' section")
        if self.kind == "python" and self.engine_args:
            raise ValueError("'engine_args' only applies to kind 'vllm'")
        if self.kind == "vllm" and not self.weights and "model" not in self.engine_args:
            raise ValueError("kind 'vllm' needs 'weights' (or engine_args.model)")
        return self

    @property
    def source(self) -> Path | None:
        """The spec file this was loaded from (relative paths resolve against its folder)."""
        return self._source

    @property
    def base_dir(self) -> Path:
        return self._source.parent if self._source else Path.cwd()

    def resolve(self, relative: str) -> Path:
        return (self.base_dir / relative).resolve()

    def weights_location(self) -> str | None:
        """A local weights path made absolute; remote URLs unchanged."""
        if self.weights is None or "://" in self.weights:
            return self.weights
        return str(self.resolve(self.weights))


def json_schema() -> dict[str, Any]:
    return Spec.model_json_schema()


def load_spec(path: str | Path) -> Spec:
    """Read and validate a tritonpkg.yaml; a directory means its tritonpkg.yaml."""
    path = Path(path)
    if path.is_dir():
        path = path / "tritonpkg.yaml"
    if not path.is_file():
        raise SpecError("spec file not found", file=path, expected="a tritonpkg.yaml")
    text = path.read_text()
    try:
        node = yaml.compose(text)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        raise SpecError(f"YAML syntax error: {getattr(exc, 'problem', exc)}", file=where) from exc
    if not isinstance(data, dict):
        raise SpecError("the spec must be a mapping", file=path, expected="keys such as name, version, kind")
    try:
        spec = Spec.model_validate(data)
    except ValidationError as exc:
        raise SpecError(_describe(exc, node, path), file=path) from exc
    spec._source = path.resolve()
    return spec


def _describe(exc: ValidationError, node: yaml.Node | None, path: Path) -> str:
    lines = [f"{len(exc.errors())} problem(s):"]
    for err in exc.errors():
        field = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in err["loc"]).lstrip(".") or "(top level)"
        line = _line_of(node, err["loc"])
        where = f"{path}:{line}" if line else str(path)
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = "unknown field"
        elif err["type"] == "missing":
            msg = "required field is missing"
        lines.append(f"  {where}: {field}: {msg}")
    return "\n".join(lines)


def _line_of(node: yaml.Node | None, loc: tuple[Any, ...]) -> int | None:
    """The 1-based YAML line of the deepest node along `loc` that exists."""
    line = node.start_mark.line + 1 if node is not None else None
    for key in loc:
        if isinstance(node, yaml.MappingNode):
            match = [(k, v) for k, v in node.value if k.value == str(key)]
            if not match:
                break
            line = match[0][0].start_mark.line + 1
            node = match[0][1]
        elif isinstance(node, yaml.SequenceNode) and isinstance(key, int) and key < len(node.value):
            node = node.value[key]
            line = node.start_mark.line + 1
        else:
            break
    return line
