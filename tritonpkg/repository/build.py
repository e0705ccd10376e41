"""From a Spec to the files of its models: pure (it reads the spec's own files and the templates, writes
nothing). The result maps repository-relative paths to bytes, so writing, hashing and archiving are
separate steps and the same spec always yields the same bytes."""

from __future__ import annotations

import importlib.util
import json
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from tritonpkg import boundedio, compat, safepath, vllm_io
from tritonpkg.errors import CompatError, PackageError, SpecError
from tritonpkg.repository import config as cfg
from tritonpkg.repository import templates
from tritonpkg.repository.adapters import MULTI_LORA, build_adapters, multi_lora_json
from tritonpkg.spec import PythonModel, Spec

MAX_SPEC_FILE_BYTES = 256 << 20  # one `python.files` entry: code, configs, a lexicon; weights travel apart

@dataclass
class BuiltModel:
    """One Triton model of a package: its config and the files of one version."""

    name: str
    version: int
    role: str  # "vllm", a template name, or "ensemble"
    files: dict[str, bytes] = field(default_factory=dict)
    modes: dict[str, int] = field(default_factory=dict)  # permission bits of copied user files; others 0o644
    adapters: dict[str, dict[str, Any]] = field(default_factory=dict)  # LoRA name -> {source, folder}
    config: Any = None  # the ModelConfig protobuf config.pbtxt is rendered from (read without parsing it back)

    def set_config(self, config: cfg.ModelConfigSpec) -> None:
        self.config = cfg.build(config)
        self.files[self.config_path] = cfg.to_pbtxt(self.config).encode()

    @property
    def config_path(self) -> str:
        return f"{self.name}/config.pbtxt"


def build_models(spec: Spec, requirements: list[str] | None = None) -> list[BuiltModel]:
    """The models of `spec`; `requirements` (already checked against the pins) are written beside
    each model's code as requirements.txt, where validate and the serving runtime read them."""
    if spec.kind == "vllm":
        models = [_vllm_model(spec)]
    elif spec.python is not None and spec.python.template == "ensemble":
        models = _ensemble_models(spec)
    else:
        python = _python(spec)
        models = [_python_model(spec, spec.name, python.template, python.parameters)]
    if requirements:
        text = ("\n".join(requirements) + "\n").encode()
        for m in models:
            if m.role != "ensemble":
                m.files[f"{m.name}/{m.version}/requirements.txt"] = text
    return models


def _python(spec: Spec) -> PythonModel:
    """The spec's `python` section, which every kind but vllm has (Spec checks it at load)."""
    if spec.python is None:
        raise SpecError(f"a {spec.kind} model needs a `python` section", file=spec.source, field="python",
                        expected="python: {template, parameters, inputs, outputs}")
    return spec.python


def engine_args(spec: Spec) -> dict[str, Any]:
    """model.json: the spec's engine args with the weights location filled in."""
    args = dict(spec.engine_args)
    location = spec.weights_location()
    if location and location.startswith("hf://"):
        repo, _, revision = location.removeprefix("hf://").partition("@")
        args.setdefault("model", repo)
        if revision:
            args.setdefault("revision", revision)
    elif location:
        args.setdefault("model", location)
    return args


def _vllm_model(spec: Spec) -> BuiltModel:
    """config.pbtxt + model.json. The I/O comes from the backend's contract (backends/vllm/io_contract.json):
    only what NVIDIA's backend of the spec's target release also accepts (each tensor's `nvidia_since`), so
    the repository means the same in NVIDIA's image; the toolkit's backend auto-completes the rest when it
    serves the model. `runner: pooling` (or `convert: embed`) in engine_args selects the embedding I/O."""
    pooling = spec.engine_args.get("runner") == "pooling" or spec.engine_args.get("convert") == "embed"
    inputs, outputs = vllm_io.load().packaged_io("embed" if pooling else "generate", spec.target_release)
    _refuse_outside_toolkit_range(spec, [t.name for t in (*inputs, *outputs) if t.toolkit_only])
    config = cfg.ModelConfigSpec(
        name=spec.name,
        backend="vllm",
        inputs=[cfg.Tensor(t.name, t.data_type, t.dims, t.optional) for t in inputs],
        outputs=[cfg.Tensor(t.name, t.data_type, t.dims, t.optional) for t in outputs],
        decoupled=True,
        instance_kind="KIND_MODEL",
    )
    model = BuiltModel(spec.name, spec.version, "vllm")
    model.set_config(config)
    prefix = f"{spec.name}/{spec.version}"
    lora = build_adapters(spec)
    args = {**lora.engine_args, **engine_args(spec)}  # what the spec sets wins
    model.files[f"{prefix}/model.json"] = _json(args)
    if lora.multi_lora:
        model.files[f"{prefix}/{MULTI_LORA}"] = multi_lora_json(lora.multi_lora)
        model.files.update({f"{prefix}/{rel}": data for rel, data in lora.files.items()})
        model.adapters = lora.lock
    return model


def _refuse_outside_toolkit_range(spec: Spec, toolkit_tensors: list[str]) -> None:
    """A model whose I/O only the toolkit's backend serves (the embedding I/O) cannot load on a release whose vLLM
    that backend does not run on: refused here, before anything is written, with validate's line."""
    refusal = compat.toolkit_backend_refusal(spec.target_release) if toolkit_tensors else None
    if refusal:
        raise CompatError(f"model {spec.name!r} would declare {', '.join(toolkit_tensors)}, which only the toolkit's "
                          f"vLLM backend serves; {refusal}", file=spec.source, field="target_release",
                          expected=f"a release whose vLLM is {compat.toolkit_backend_range()}")


def _tensors(given: list, defaults: list[dict]) -> list[cfg.Tensor]:
    if given:
        return [cfg.Tensor.of(t) for t in given]
    return [cfg.Tensor(d["name"], d["data_type"], tuple(d["dims"]), d.get("optional", False)) for d in defaults]


def _instance_kind(spec: Spec) -> str:
    kind = spec.deployment.instance_kind
    return "KIND_CPU" if kind == "KIND_AUTO" else kind


def _python_model(
    spec: Spec,
    name: str,
    template_name: str,
    given_params: dict[str, Any],
    io: tuple[list[cfg.Tensor], list[cfg.Tensor]] | None = None,
) -> BuiltModel:
    python = _python(spec)
    template = templates.load(template_name)
    params = templates.resolve_parameters(template, given_params, spec.source)
    if template.meta.get("weights_check"):
        _check_weights(spec, scoring=template.meta["weights_check"] == "scoring")
    if io is None:
        d_in, d_out = template.default_io(str(params.get("mode", "")))
        io = (_tensors(python.inputs, d_in), _tensors(python.outputs, d_out))
    inputs, outputs = io
    if not inputs or not outputs:
        raise SpecError(f"template {template_name!r} needs inputs and outputs", file=spec.source,
                        field="python.inputs" if not inputs else "python.outputs",
                        expected="a list of {name, data_type, dims}")
    config = cfg.ModelConfigSpec(
        name=name,
        backend="python",
        max_batch_size=python.max_batch_size,
        inputs=inputs,
        outputs=outputs,
        instance_kind=_instance_kind(spec),
        instance_count=python.instance_count,
        decoupled=bool(template.meta.get("decoupled")),
    )
    model = BuiltModel(name, spec.version, template_name)
    model.set_config(config)
    context = {
        "name": name,
        "version": spec.version,
        "params": params,
        "inputs": [_tensor_dict(t) for t in inputs],
        "outputs": [_tensor_dict(t) for t in outputs],
        "max_batch_size": python.max_batch_size,
        "weights": spec.weights_location(),
    }
    prefix = f"{name}/{spec.version}"
    for filename, data in templates.render(template, context).items():
        model.files[f"{prefix}/{filename}"] = data
    model.files.update(_vendored_files(template, prefix))
    if "module" in params:
        _user_files(spec, model, prefix)
        listed = [PurePosixPath(f).name for f in python.files]
        if params["module"] not in listed:  # else the stub fails to load the hooks (or loads model.py itself)
            raise SpecError(f"module {params['module']!r} is not one of the python.files", file=spec.source,
                            field="python.parameters.module",
                            expected=f"the name of one of them ({', '.join(listed) or 'none'})")
    if "tokenizer" in params:
        model.files[f"{prefix}/tokenizer/tokenizer.json"] = _tokenizer_json(spec, params["tokenizer"])
    return model


def _check_weights(spec: Spec, scoring: bool) -> None:
    """A local checkpoint folder the template's engine could not load fails here, not at Triton's load.
    Remote weights (materialized later) and a folder not there yet are left to the model's own load."""
    location = spec.weights_location()
    if location is None or "://" in location or not Path(location).is_dir():
        return
    from tritonpkg.embedding.checkpoint import read_checkpoint
    from tritonpkg.embedding.errors import EmbeddingInputError

    try:
        read_checkpoint(location, scoring=scoring)
    except EmbeddingInputError as exc:
        where = "" if exc.field in (None, "weights") else f" (field {exc.field})"
        raise SpecError(exc.message + where, file=spec.source, field="weights", expected=exc.expected) from None


def _ensemble_models(spec: Spec) -> list[BuiltModel]:
    """tokenize -> model -> detokenize, wired by an ensemble named after the spec."""
    python = _python(spec)
    template = templates.load("ensemble")
    params = templates.resolve_parameters(template, python.parameters, spec.source)
    d_in, d_out = template.default_io("ensemble")
    ens_in = _tensors(python.inputs, d_in)
    ens_out = _tensors(python.outputs, d_out)
    if len(ens_in) != 1 or len(ens_out) != 1 or ens_in[0].data_type != "TYPE_STRING" \
            or ens_out[0].data_type != "TYPE_STRING":
        raise SpecError("an ensemble takes one text input and gives one text output", file=spec.source,
                        field="python.inputs/outputs", expected="one TYPE_STRING input and one TYPE_STRING output")
    ids = ("TYPE_INT64", (-1,))
    names = {step: f"{spec.name}_{step}" for step in ("tokenize", "model", "detokenize")}
    tokenize = _python_model(
        spec, names["tokenize"], "tokenizer",
        {"tokenizer": params["tokenizer"], "mode": "encode", "add_special_tokens": params["add_special_tokens"]},
        io=([cfg.Tensor("TEXT", "TYPE_STRING", (1,))],
            [cfg.Tensor("INPUT_IDS", *ids), cfg.Tensor("ATTENTION_MASK", *ids)]),
    )
    model = _python_model(
        spec, names["model"], "custom", {"module": params["module"], "model": params["model"]},
        io=([cfg.Tensor("INPUT_IDS", *ids)], [cfg.Tensor("OUTPUT_IDS", *ids)]),
    )
    detokenize = _python_model(
        spec, names["detokenize"], "tokenizer", {"tokenizer": params["tokenizer"], "mode": "decode"},
        io=([cfg.Tensor("IDS", *ids)], [cfg.Tensor("TEXT", "TYPE_STRING", (1,))]),
    )
    steps = [
        cfg.EnsembleStep(names["tokenize"], {"TEXT": ens_in[0].name}, {"INPUT_IDS": "_ids"}),
        cfg.EnsembleStep(names["model"], {"INPUT_IDS": "_ids"}, {"OUTPUT_IDS": "_out_ids"}),
        cfg.EnsembleStep(names["detokenize"], {"IDS": "_out_ids"}, {"TEXT": ens_out[0].name}),
    ]
    ensemble = BuiltModel(spec.name, spec.version, "ensemble")
    config = cfg.ModelConfigSpec(name=spec.name, platform="ensemble", inputs=ens_in, outputs=ens_out,
                                 instance_kind=None, ensemble_steps=steps)
    ensemble.set_config(config)
    ensemble.files[f"{spec.name}/{spec.version}/.keep"] = b""
    return [tokenize, model, detokenize, ensemble]


def _tensor_dict(t: cfg.Tensor) -> dict[str, Any]:
    return {"name": t.name, "data_type": t.data_type, "dims": list(t.dims), "optional": t.optional}


def _vendored_files(template: templates.Template, prefix: str) -> dict[str, bytes]:
    """Toolkit packages a template's model.py imports (template.yaml `vendor: {folder: package}`), copied
    beside it: in NVIDIA's images the Python-backend stub has no tritonpkg to import."""
    out: dict[str, bytes] = {}
    for folder, package in sorted((template.meta.get("vendor") or {}).items()):
        found = importlib.util.find_spec(package)
        if found is None or not found.origin:
            raise PackageError(f"template {template.name} vendors {package}, which is not installed",
                               field=f"vendor.{folder}", expected="an importable package beside tritonpkg")
        for path in sorted(Path(found.origin).parent.glob("*.py")):
            out[f"{prefix}/{folder}/{path.name}"] = path.read_bytes()
    return out


def _user_files(spec: Spec, model: BuiltModel, prefix: str) -> None:
    """`python.files` beside model.py, each with its own mode bits; an entry must name a file inside the
    spec's folder (the one path rule, every link followed) and may not replace a file already there."""
    python = _python(spec)
    for i, rel in enumerate(python.files):
        field_name = f"python.files[{i}]"
        data, mode = read_spec_file(spec, rel, field_name)
        dest = f"{prefix}/{PurePosixPath(rel).name}"
        if dest in model.files:
            raise SpecError(f"{safepath.quote(rel)} would replace {dest}", file=spec.source, field=field_name,
                            expected="file names distinct from each other and from the template's files")
        model.files[dest] = data
        model.modes[dest] = mode


def read_spec_file(spec: Spec, rel: object, field_name: str) -> tuple[bytes, int]:
    """The bytes and permission bits of a regular file the spec names relative to its own folder, refused
    (with the spec as file, `field_name` as field) when the name or a link on the way leads out of it."""
    expected = "a file inside the spec's folder, named relative to it, without '..'"
    base = spec.base_dir
    try:
        name = safepath.check_name(rel, source=spec.source, what=field_name)
        path = base / PurePosixPath(name)
        if not path.exists() and not path.is_symlink():
            raise SpecError(f"file not found: {path}", file=spec.source, field=field_name, expected=expected)
        fd = safepath.open_inside(path, base, name=name, source=spec.source, what=field_name)
    except safepath.UnsafePathError as exc:
        raise SpecError(f"{safepath.quote(rel)} breaks the path rule: {exc.rule}", file=spec.source,
                        field=field_name, expected=expected) from None
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fh.fileno())
        if st.st_size > MAX_SPEC_FILE_BYTES:
            raise SpecError(f"{safepath.quote(rel)} is {st.st_size} bytes", file=spec.source, field=field_name,
                            expected=f"at most {MAX_SPEC_FILE_BYTES} bytes (weights belong in `weights`)")
        try:
            data = boundedio.read_at_most(fh, MAX_SPEC_FILE_BYTES, path)
        except boundedio.FileTooLargeError:
            raise SpecError(f"{safepath.quote(rel)} grew past {MAX_SPEC_FILE_BYTES} bytes while read",
                            file=spec.source, field=field_name,
                            expected=f"at most {MAX_SPEC_FILE_BYTES} bytes") from None
    return data, stat.S_IMODE(st.st_mode) & 0o755  # never wider; group/other write (a umask's) dropped


def _tokenizer_json(spec: Spec, rel: str) -> bytes:
    """The tokenizer.json the spec names (the file, or a folder holding one), read under the path rule."""
    field_name = "python.parameters.tokenizer"
    name = str(rel).rstrip("/")
    if name and safepath.within(spec.base_dir / name, spec.base_dir) and (spec.base_dir / name).is_dir():
        name += "/tokenizer.json"
    return read_spec_file(spec, name or rel, field_name)[0]


def lock_pins(spec: Spec) -> dict[str, Any]:
    """The versions a repository entry was built for: its target release and the toolkit's runtime."""
    release = compat.get_release(spec.target_release)
    tk = compat.toolkit()
    return {
        "target_release": release.release,
        "ngc_image": release.ngc_image,
        "server_version": release.server_version,
        "image_vllm": release.vllm,
        "image_python": release.python,
        "stub_numpy": release.stub_numpy,
        "local_runtime": {"server_version": tk["local_runtime"]["server_version"],
                          "package": tk["local_runtime"]["package"]},
        "vllm": tk["vllm"]["version"],
    }


def _json(data: Any) -> bytes:
    return (json.dumps(data, indent=2, sort_keys=True) + "\n").encode()
