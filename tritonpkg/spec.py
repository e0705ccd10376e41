"""The model spec (`tritonpkg.yaml`): a pydantic model, its JSON Schema, and a loader whose errors name
the file, the line, the field path and what was expected. Everything downstream takes a `Spec`.

The loader is bounded: at most MAX_SPEC_BYTES of UTF-8, nesting at most MAX_DEPTH deep, no YAML anchors
or aliases (an alias bomb of a few hundred bytes expands to gigabytes), no duplicate keys (YAML lets the
last one win silently), only string keys and JSON's kinds of values."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, NoReturn

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    PrivateAttr,
    Tag,
    ValidationError,
    field_validator,
    model_validator,
)

from tritonpkg import adapter_names, boundedio, compat
from tritonpkg.errors import SpecError
from tritonpkg.safepath import MAX_NAME_BYTES, MAX_SEGMENT_BYTES, quote, within

NAME_RE = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"
MAX_NAME = 200  # a directory name, with room for an ensemble's "_detokenize" suffix
INT32_MAX, INT64_MAX = 2**31 - 1, 2**63 - 1  # the ModelConfig fields they end up in
MAX_VERSION = INT64_MAX  # Triton keeps model versions as int64
MAX_DIMS = 64
MAX_SPEC_BYTES = 1 << 20
MAX_DEPTH = 32
MAX_NODES = 50_000  # a real spec has hundreds; parsing a 1 MiB list of half a million takes seconds
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
    dims: list[int] = Field(min_length=1, max_length=MAX_DIMS,
                            description="shape without the batch dimension; -1 = variable")
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
        if any(d == 0 or d < -1 or d > INT64_MAX for d in v):
            raise ValueError(f"every dim must be a positive size or -1 (variable), at most {INT64_MAX}")
        return v


class PythonModel(_Strict):
    """A Python-backend model rendered from a template in templates/."""

    template: str = Field(max_length=64,
                          description="template name: a folder of templates/ (custom, tokenizer, ensemble, ...)")
    parameters: dict[str, Any] = Field(default_factory=dict, description="template parameters")
    inputs: list[TensorSpec] = Field(default_factory=list)
    outputs: list[TensorSpec] = Field(default_factory=list)
    max_batch_size: int = Field(default=0, ge=0, le=INT32_MAX)
    instance_count: int = Field(default=1, ge=1, le=INT32_MAX)
    files: list[str] = Field(default_factory=list,
                             description="user files (relative to the spec) copied beside model.py")


class Plugin(_Strict):
    """A package that provides vLLM entry points (e.g. `vllm.logits_processors`)."""

    name: str = Field(description="distribution name")
    wheel: str | None = Field(default=None, description="path to a wheel bundled into the model package")
    entry_point_group: str = "vllm.logits_processors"


DNS_LABEL_RE = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"


class Volume(_Strict):
    """A volume the Kubernetes target mounts into every pod (e.g. an FSx for Lustre or other PVC claim):
    a local `weights` or adapter path under `mount` names the same path inside the pod."""

    claim: str = Field(pattern=DNS_LABEL_RE, description="the PersistentVolumeClaim's name")
    mount: str = Field(pattern=r"^/[A-Za-z0-9_.\-/]{0,250}$", description="absolute path it is mounted at in the pod")
    read_only: bool = True

    @field_validator("mount")
    @classmethod
    def _mount(cls, v: str) -> str:
        parts = v.strip("/").split("/")
        if v == "/" or any(p in ("", ".", "..") for p in parts):
            raise ValueError("mount must be an absolute path below / without '.', '..' or empty parts")
        return "/" + "/".join(parts)


class Autoscaling(_Strict):
    """The Kubernetes target's HorizontalPodAutoscaler (autoscaling/v2) per unit on a per-pod load metric."""

    min_replicas: int = Field(default=1, ge=1, le=INT32_MAX)
    max_replicas: int = Field(ge=1, le=INT32_MAX)
    metric: str = Field(default="vllm_num_requests_waiting", pattern=r"^[A-Za-z_][A-Za-z0-9_:]{0,200}$",
                        description="pods metric through the custom metrics API (the Prometheus adapter's name "
                                    "for vLLM's vllm:num_requests_waiting)")
    target_average: float = Field(default=2.0, gt=0, le=1e9, description="per-pod average the HPA keeps below")

    @model_validator(mode="after")
    def _bounds(self) -> Autoscaling:
        if self.max_replicas < self.min_replicas:
            raise ValueError("max_replicas must be at least min_replicas")
        return self


class Deployment(_Strict):
    strategy: Literal["auto", "red-black", "versioned"] = "auto"
    replicas: int = Field(default=1, ge=1, le=INT32_MAX)
    traffic_steps: list[int] = Field(default_factory=lambda: [10, 25, 50, 100])
    instance_kind: Literal["KIND_AUTO", "KIND_CPU", "KIND_GPU", "KIND_MODEL"] = "KIND_AUTO"
    gpus: int = Field(default=0, ge=0, le=INT32_MAX)
    smoke_request: dict[str, Any] | None = Field(default=None, description="inputs of the canary request")
    min_requests: int | None = Field(default=None, ge=0, le=INT32_MAX,
                                     description="requests the gate must see per traffic step (None: deploy's default)")
    unit_port_base: int | None = Field(default=None, ge=1, le=65535,
                                       description="local target: units' loopback ports from here, 3 per HAProxy slot "
                                                   "(None: deploy --unit-port-base, the recorded base, or free ports)")
    volumes: list[Volume] = Field(default_factory=list, max_length=16,
                                  description="kubernetes target: claims mounted in every pod (local weights must "
                                              "lie under one)")
    autoscaling: Autoscaling | None = Field(default=None, description="kubernetes target: an HPA per unit")

    @field_validator("traffic_steps")
    @classmethod
    def _steps(cls, v: list[int]) -> list[int]:
        if not v or v != sorted(v) or v[-1] != 100 or v[0] <= 0:
            raise ValueError("traffic_steps must rise strictly and end at 100, e.g. [10, 25, 50, 100]")
        return v


PARSER_NAME_RE = r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$"


class OpenAIOptions(_Strict):
    """`openai:` as a mapping: the API on, and how its answers are parsed. The parsers are vLLM's own
    (`vllm serve --tool-call-parser` / `--reasoning-parser` names); `tritonpkg validate` checks that the
    pinned vLLM has them."""

    enabled: bool = True
    tool_call_parser: str | None = Field(default=None, max_length=64, pattern=PARSER_NAME_RE,
                                         description="vLLM tool-call parser (hermes, llama3_json, mistral, "
                                                     "pythonic, ...): automatic tool choice")
    reasoning_parser: str | None = Field(default=None, max_length=64, pattern=PARSER_NAME_RE,
                                         description="vLLM reasoning parser (deepseek_r1, qwen3, ...): "
                                                     "reasoning_content in answers")

    def parsers(self) -> dict[str, str]:
        return {k: v for k, v in (("tool_call_parser", self.tool_call_parser),
                                  ("reasoning_parser", self.reasoning_parser)) if v}


def check_location(v: str, what: str) -> str:
    """A weights or adapter source: a local path, s3://bucket/prefix or hf://org/name@revision."""
    if not v or any(ord(c) < 0x20 or c == "\x7f" for c in v):
        raise ValueError(f"{what} must be a non-empty location without NUL or control characters")
    if len(v.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES or ("://" not in v and any(
            len(part.encode("utf-8", "surrogatepass")) > MAX_SEGMENT_BYTES for part in v.split("/"))):
        raise ValueError(f"{what} must be at most {MAX_NAME_BYTES} bytes, each folder name at most "
                         f"{MAX_SEGMENT_BYTES}")
    if v.startswith("hf://") and not re.fullmatch(HF_RE, v):
        raise ValueError(f"hf {what} must look like hf://org/name@revision")
    if v.startswith("s3://") and not re.fullmatch(r"s3://[a-z0-9.\-]{3,63}(/.*)?", v):
        raise ValueError(f"s3 {what} must look like s3://bucket/prefix")
    return v


HF_RE = r"hf://[\w.\-]+/[\w.\-]+(@[\w.\-/]+)?"


class Adapter(_Strict):
    """One LoRA adapter of a vllm-kind model, served by name beside the base (NVIDIA's `lora_name`)."""

    name: str = Field(pattern=adapter_names.SPEC_PATTERN, max_length=adapter_names.MAX_NAME,
                      description="the adapter's name in requests")
    source: str = Field(description="peft adapter folder: a local path (relative to the spec), "
                                    "s3://bucket/prefix, or hf://org/name@revision")
    revision: str | None = Field(default=None, max_length=128, pattern=r"^[\w.\-/]+$",
                                 description="Hub revision of an hf:// source (or write hf://org/name@revision)")

    @field_validator("source")
    @classmethod
    def _source(cls, v: str) -> str:
        return check_location(v, "source")

    @model_validator(mode="after")
    def _revision(self) -> Adapter:
        if self.revision is None:
            return self
        if not self.source.startswith("hf://"):
            raise ValueError("revision applies to an hf:// source only")
        given = self.source.partition("@")[2]
        if given and given != self.revision:
            raise ValueError(f"revision {self.revision!r} differs from the source's @{given}")
        return self

    def location(self) -> str:
        """The source with its revision: hf://org/name@rev, s3://..., or the path as written."""
        if self.revision and "@" not in self.source:
            return f"{self.source}@{self.revision}"
        return self.source


class Spec(_Strict):
    """One model, one version: what `tritonpkg package` turns into a Triton model repository entry."""

    name: str = Field(pattern=NAME_RE, max_length=MAX_NAME, description="Triton model name")
    version: int = Field(ge=1, le=MAX_VERSION,
                         description="integer model version (a numeric directory in the repository; Triton's int64)")
    kind: Literal["vllm", "python"]
    weights: str | None = Field(
        default=None,
        description="local path (relative to the spec), s3://bucket/prefix, or hf://org/name@revision",
    )
    target_release: str = Field(default_factory=compat.default_release, description="Triton release, e.g. 24.10")
    execution_mode: Literal["embedded", "separate"] = "embedded"
    openai: Annotated[Annotated[bool, Tag("bool")] | Annotated[OpenAIOptions, Tag("mapping")],
                      Discriminator(lambda v: "mapping" if isinstance(v, (dict, OpenAIOptions)) else "bool")] = Field(
        default=False,
        description="serve the OpenAI API: true, or a mapping {tool_call_parser, reasoning_parser, enabled}")
    engine_args: dict[str, Any] = Field(default_factory=dict, description="vLLM engine arguments (vllm kind)")
    python: PythonModel | None = Field(default=None, description="template, parameters and I/O (python kind)")
    requirements: list[str] = Field(default_factory=list, description="extra pip requirements of the model")
    plugins: list[Plugin] = Field(default_factory=list)
    adapters: list[Adapter] = Field(default_factory=list, max_length=256,
                                    description="LoRA adapters served beside the base model (vllm kind)")
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
        return v if v is None else check_location(v, "weights")

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
        if self.adapters and self.kind != "vllm":
            raise ValueError("'adapters' only applies to kind 'vllm'")
        return self

    @field_validator("adapters")
    @classmethod
    def _adapter_names(cls, v: list[Adapter]) -> list[Adapter]:
        seen: dict[str, int] = {}
        for i, adapter in enumerate(v):
            if adapter.name in seen:
                raise ValueError(f"adapters[{i}].name: duplicate adapter name {adapter.name!r} (first at "
                                 f"adapters[{seen[adapter.name]}].name)")
            seen[adapter.name] = i
        return v

    @model_validator(mode="after")
    def _adapters_apart_from_model(self) -> Spec:
        for i, adapter in enumerate(self.adapters):
            if adapter.name == self.name:
                raise ValueError(f"adapters[{i}].name: {adapter.name!r} is the model's own name (a request for "
                                 "that name must reach the base model)")
        return self

    @property
    def openai_enabled(self) -> bool:
        return self.openai.enabled if isinstance(self.openai, OpenAIOptions) else bool(self.openai)

    @property
    def openai_parsers(self) -> dict[str, str]:
        """The vLLM parser names the OpenAI frontend uses for this model ({} for none)."""
        return self.openai.parsers() if isinstance(self.openai, OpenAIOptions) else {}

    @property
    def source(self) -> Path | None:
        """The spec file this was loaded from (relative paths resolve against its folder)."""
        return self._source

    @property
    def base_dir(self) -> Path:
        return self._source.parent if self._source else Path.cwd()

    def resolve(self, relative: str) -> Path:
        return (self.base_dir / relative).resolve()

    def adapter_location(self, adapter: Adapter) -> str:
        """An adapter's local source made absolute; a remote one with its revision."""
        location = adapter.location()
        return location if "://" in location else str(self.resolve(location))

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
    try:
        text = boundedio.read_file(path, MAX_SPEC_BYTES).decode("utf-8")
    except boundedio.FileTooLargeError:
        raise SpecError(f"the file is larger than {MAX_SPEC_BYTES} bytes", file=path,
                        expected=f"at most {MAX_SPEC_BYTES} bytes") from None
    except UnicodeDecodeError as exc:
        raise SpecError(f"not UTF-8 (byte {exc.start})", file=path, expected="UTF-8 text") from None
    node, data = parse_yaml(text, path)
    if not isinstance(data, dict):
        raise SpecError("the spec must be a mapping", file=path, expected="keys such as name, version, kind")
    try:
        spec = Spec.model_validate(data)
    except ValidationError as exc:
        raise SpecError(_describe(exc, node, path), file=path) from exc
    spec._source = path.resolve()
    _check_local_weights(spec, node, path)
    _check_local_adapters(spec, node, path)
    _check_template_parameters(spec, node, path)
    return spec


def _check_template_parameters(spec: Spec, node: yaml.Node | None, path: Path) -> None:
    """The template's typed parameters, checked as the packager will, but with the spec's line."""
    if spec.python is None:
        return
    from tritonpkg import template_params as templates

    try:
        templates.resolve_parameters(templates.load(spec.python.template), spec.python.parameters, path)
    except SpecError as exc:
        loc = tuple(int(p) if p.isdigit() else p for p in re.split(r"[.\[\]]+", exc.field or "") if p)
        line = _line_of(node, loc or ("python",))
        raise SpecError(exc.message, file=f"{path}:{line}" if line else path, field=exc.field,
                        expected=exc.expected) from None


def _check_local_weights(spec: Spec, node: yaml.Node | None, path: Path) -> None:
    """A relative local `weights` path must stay inside the spec's folder (links followed): `../../etc`
    is a way out, not a checkpoint. An absolute path is the operator's explicit choice and is kept."""
    if spec.weights is None or "://" in spec.weights or Path(spec.weights).is_absolute():
        return
    if not within(spec.base_dir / spec.weights, spec.base_dir):
        line = _line_of(node, ("weights",))
        raise SpecError(f"{quote(spec.weights)} leads outside the spec's folder {spec.base_dir}",
                        file=f"{path}:{line}" if line else path, field="weights",
                        expected="a path inside the spec's folder, an absolute path, s3:// or hf://")


def _check_local_adapters(spec: Spec, node: yaml.Node | None, path: Path) -> None:
    """A relative local adapter source, like local weights, stays inside the spec's folder."""
    for i, adapter in enumerate(spec.adapters):
        if "://" in adapter.source or Path(adapter.source).is_absolute():
            continue
        if not within(spec.base_dir / adapter.source, spec.base_dir):
            line = _line_of(node, ("adapters", i, "source"))
            raise SpecError(f"{quote(adapter.source)} leads outside the spec's folder {spec.base_dir}",
                            file=f"{path}:{line}" if line else path, field=f"adapters[{i}].source",
                            expected="a path inside the spec's folder, an absolute path, s3:// or hf://")


class _Refused(yaml.MarkedYAMLError):
    """YAML the spec loader does not accept (an alias, a duplicate key, ...), at its mark."""


if TYPE_CHECKING:  # both bases below offer SafeLoader's interface; the checker sees that one
    _SafeBase = yaml.SafeLoader
elif yaml.__with_libyaml__:
    from yaml.composer import Composer
    from yaml.constructor import SafeConstructor
    from yaml.cyaml import CParser
    from yaml.resolver import Resolver

    class _SafeBase(Composer, CParser, SafeConstructor, Resolver):
        """SafeLoader with libyaml's parser (4x faster) under PyYAML's own composer, which can be bounded."""

        def __init__(self, stream: str) -> None:
            CParser.__init__(self, stream)
            Composer.__init__(self)
            SafeConstructor.__init__(self)
            Resolver.__init__(self)
else:
    _SafeBase = yaml.SafeLoader


class _SpecLoader(_SafeBase):
    """PyYAML's SafeLoader, bounded: refuses anchors and aliases, nesting deeper than MAX_DEPTH, more than
    MAX_NODES nodes, duplicate and non-string keys, and values JSON has no kind for (timestamps, binary,
    sets, non-finite floats)."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0
        self._nodes = 0

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        event = self.peek_event()
        mark = event.start_mark
        if isinstance(event, yaml.AliasEvent):
            raise _Refused(problem=f"YAML aliases are not accepted in a spec (*{event.anchor}); write the value out",
                           problem_mark=mark)
        if getattr(event, "anchor", None) is not None:
            raise _Refused(problem=f"YAML aliases are not accepted in a spec (anchor &{event.anchor}); "
                                   "write the value out", problem_mark=mark)
        self._depth += 1
        self._nodes += 1
        try:
            if self._nodes > MAX_NODES:
                raise _Refused(problem=f"more than {MAX_NODES} values", problem_mark=mark)
            if self._depth > MAX_DEPTH:
                raise _Refused(problem=f"nested deeper than {MAX_DEPTH} levels", problem_mark=mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[str, yaml.Node] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                raise _Refused(problem="YAML merge keys (<<) are not accepted in a spec; write the keys out",
                               problem_mark=key_node.start_mark)
            key = self.construct_object(key_node, deep=deep)
            if not isinstance(key, str):
                raise _Refused(problem=f"a mapping key must be a string, not {type(key).__name__} {key!r} "
                                       "(quote it)", problem_mark=key_node.start_mark)
            if key in seen:
                raise _Refused(problem=f"duplicate key {key!r} (first on line {seen[key].start_mark.line + 1})",
                               problem_mark=key_node.start_mark)
            seen[key] = key_node
        return super().construct_mapping(node, deep=deep)

    def construct_yaml_int(self, node: yaml.ScalarNode) -> int:
        try:
            return super().construct_yaml_int(node)
        except ValueError:
            raise _Refused(problem="an integer too long to read", problem_mark=node.start_mark) from None

    def construct_yaml_float(self, node: yaml.ScalarNode) -> float:
        value = super().construct_yaml_float(node)
        if not math.isfinite(value):
            raise _Refused(problem=f"{node.value!r} is not a finite number (JSON has no inf or nan)",
                           problem_mark=node.start_mark)
        return value

    def _not_json(self, node: yaml.Node) -> NoReturn:
        kind = node.tag.rsplit(":", 1)[-1]
        raise _Refused(problem=f"a YAML {kind} is not accepted in a spec (quote the value to make it a string)",
                       problem_mark=node.start_mark)


def _construct_map(loader: _SpecLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    return loader.construct_mapping(node)


_SpecLoader.add_constructor("tag:yaml.org,2002:int", _SpecLoader.construct_yaml_int)
_SpecLoader.add_constructor("tag:yaml.org,2002:float", _SpecLoader.construct_yaml_float)
_SpecLoader.add_constructor("tag:yaml.org,2002:map", _construct_map)
for _tag in ("timestamp", "binary", "set", "omap", "pairs"):
    _SpecLoader.add_constructor(f"tag:yaml.org,2002:{_tag}", _SpecLoader._not_json)


def parse_yaml(text: str, path: Path) -> tuple[yaml.Node | None, Any]:
    """The node tree (for line numbers) and the data of one YAML document, read by the bounded loader
    (for every YAML a user hands the toolkit); a refusal is a SpecError at file:line:column."""
    loader = _SpecLoader(text)
    try:
        node = loader.get_single_node()
        data = loader.construct_document(node) if node is not None else None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        problem = getattr(exc, "problem", None) or str(exc)
        prefix = "" if isinstance(exc, _Refused) else "YAML syntax error: "
        raise SpecError(f"{prefix}{problem}", file=where) from None
    finally:
        loader.dispose()
    return node, data


def _describe(exc: ValidationError, node: yaml.Node | None, path: Path) -> str:
    lines = [f"{len(exc.errors())} problem(s):"]
    for err in exc.errors():
        if err["loc"][:1] == ("openai",):  # the union's branch tag is no field
            err["loc"] = ("openai", *err["loc"][2:])
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
