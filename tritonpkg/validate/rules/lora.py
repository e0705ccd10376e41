"""LoRA adapters of a vLLM model (`<version>/multi_lora.json`, NVIDIA's name -> folder, with `enable_lora`
in model.json), checked against the base model before the engine would refuse them at load or at the first
request: the list itself (present when LoRA is on: NVIDIA's backend raises FileNotFoundError without it;
JSON; no name twice), each adapter's adapter_config.json (present, JSON, peft's LoraConfig fields, the
rules vLLM's PEFTHelper applies when it loads one), its weights file, rank against max_lora_rank, target
modules against the base's module names and tensor shapes against the base's, both read from safetensors
headers (no weight is loaded). Remote adapters and bases not on this host are left to serve."""

from __future__ import annotations

import functools
import json
import os
import re
import struct
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tritonpkg import adapter_names, safepath, version_files
from tritonpkg.repository.adapters import VLLM_DEFAULT_MAX_LORA_RANK
from tritonpkg.validate.context import Context
from tritonpkg.validate.loaded import LoadedModel, read_json
from tritonpkg.validate.report import Problem

MULTI_LORA = version_files.MULTI_LORA
ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = ("adapter_model.safetensors", "adapter_model.bin")
MAX_HEADER_BYTES = 100 << 20  # the safetensors format's own limit on a header
ADAPTER_PREFIX = "base_model.model."
# Features vLLM's PEFTHelper refuses (adapter_config.json key -> why).
UNSUPPORTED = {"use_dora": "vLLM does not support DoRA", "lora_bias": "vLLM does not support LoRA bias",
               "use_qalora": "vLLM does not support QALoRA", "layer_replication": "vLLM does not support "
               "layer_replication", "alora_invocation_tokens": "vLLM does not support Activated LoRA"}


def adapters(m: LoadedModel, ctx: Context) -> Iterator[Problem]:
    if m.engine_args_file is None or m.engine_args is None:
        return
    version = m.engine_args_file.parent
    listing = version / MULTI_LORA
    enabled = version_files.lora_enabled(m.engine_args)
    if not listing.is_file():
        if enabled:
            yield m.problem("lora.list_missing", "error", f"enable_lora is on but {MULTI_LORA} is missing (NVIDIA's "
                            "backend fails the load with FileNotFoundError)", file=m.engine_args_file,
                            field="enable_lora", expected=f"{MULTI_LORA} beside model.json, or enable_lora off")
        return
    try:
        entries = version_files.read_adapter_pairs(version)
    except version_files.NotAnObjectError:
        yield m.problem("lora.list_json", "error", f"{MULTI_LORA} is not a JSON object", file=listing,
                        expected="a JSON object of adapter name -> folder")
        return
    except (OSError, ValueError) as exc:
        yield m.problem("lora.list_json", "error", f"{MULTI_LORA} cannot be read: {str(exc)[:200]}", file=listing,
                        expected="a JSON object of adapter name -> folder")
        return
    if not enabled:
        yield m.problem("lora.disabled", "warning", f"{MULTI_LORA} lists adapters but enable_lora is not on: "
                        "they are not served", file=m.engine_args_file, field="enable_lora", expected="true")
    if enabled and not entries:
        yield m.problem("lora.list_empty", "error", "enable_lora is on but the adapter list is empty",
                        file=listing, expected="at least one adapter name -> folder")
    seen: set[str] = set()
    base = _Base.of(m.engine_args, version)
    max_rank = m.engine_args.get("max_lora_rank", VLLM_DEFAULT_MAX_LORA_RANK)
    for name, location in entries:
        why = adapter_names.name_problem(name)
        if why is not None:
            yield m.problem("lora.name", "error", f"adapter name '{adapter_names.shown(name)}' {why} (it "
                            "becomes a request's lora_name and an OpenAI model id)", file=listing,
                            field=adapter_names.shown(name), expected=f"a name of {adapter_names.RULE}")
            continue
        if name in seen:
            yield m.problem("lora.duplicate", "error", f"adapter {name!r} is listed twice (JSON keeps the last)",
                            file=listing, field=name, expected="each adapter name once")
            continue
        seen.add(name)
        if not isinstance(location, str) or not location:
            yield m.problem("lora.folder", "error", f"adapter {name!r} has no folder", file=listing, field=name,
                            expected="a folder path, or an s3:// / hf:// source that serve materializes")
            continue
        if "://" in location:
            continue  # remote: materialized (and checked by vLLM) at serve
        folder = _local(location, version)
        if folder is None:
            yield m.problem("lora.folder", "warning", f"adapter {name!r}: folder {location} names no home folder "
                            "of this host", file=listing, field=name,
                            expected="the adapter's folder (on the serving host)")
            continue
        if not location.startswith(("/", "~")) and not _inside(folder, version):
            yield m.problem("lora.folder", "error", f"adapter {name!r}: {location!r} leads outside the model "
                            "version", file=listing, field=name, expected="./<folder> inside the version")
            continue
        if not safepath.is_dir(folder):
            yield m.problem("lora.folder", "error" if not location.startswith(("/", "~")) else "warning",
                            f"adapter {name!r}: folder {location} not found", file=listing, field=name,
                            expected="the adapter's folder (on the serving host)")
            continue
        yield from _adapter(m, name, folder, base, max_rank)


def _adapter(m: LoadedModel, name: str, folder: Path, base: _Base, max_rank: Any) -> Iterator[Problem]:
    config_file = folder / ADAPTER_CONFIG
    if not safepath.is_file(config_file):
        yield m.problem("lora.config_missing", "error", f"adapter {name!r}: {ADAPTER_CONFIG} is missing",
                        file=config_file, expected="peft's adapter_config.json (save_pretrained writes it)")
        return
    try:
        config = read_json(config_file)
    except (OSError, ValueError) as exc:
        yield m.problem("lora.config_json", "error", f"adapter {name!r}: {exc}", file=config_file,
                        expected="peft's adapter_config.json")
        return
    if not isinstance(config, dict):
        yield m.problem("lora.config_json", "error", f"adapter {name!r}: not a JSON object", file=config_file,
                        expected="peft's adapter_config.json")
        return
    bad = list(_config_problems(config))
    for field, message, expected in bad:
        yield m.problem("lora.config", "error", f"adapter {name!r}: {message}", file=config_file, field=field,
                        expected=expected)
    if bad:
        return
    ranks = [config["r"], *config.get("rank_pattern", {}).values()]
    if isinstance(max_rank, int) and max(ranks) > max_rank:
        yield m.problem("lora.rank", "error", f"adapter {name!r}: rank {max(ranks)} is above max_lora_rank "
                        f"{max_rank}", file=config_file, field="r",
                        expected=f"at most {max_rank}, or a larger max_lora_rank in model.json")
    yield from _base_name(m, name, config, config_file, base)
    weights = next((folder / w for w in ADAPTER_WEIGHTS if safepath.is_file(folder / w)), None)
    if weights is None:
        yield m.problem("lora.weights_missing", "error", f"adapter {name!r}: no adapter weights",
                        file=folder / ADAPTER_WEIGHTS[0], expected=" or ".join(ADAPTER_WEIGHTS))
        return
    if base.shapes is None:
        return  # the base's weights are not on this host
    yield from _targets(m, name, config, config_file, base)
    if weights.suffix == ".safetensors":
        yield from _shapes(m, name, weights, base.shapes, max_rank)


def _config_problems(config: dict[str, Any]) -> Iterator[tuple[str, str, str]]:
    """(field, message, expected) for what peft's LoraConfig or vLLM's PEFTHelper refuses."""
    peft_type = config.get("peft_type", "LORA")
    if peft_type != "LORA":
        yield "peft_type", f"peft_type is {peft_type!r}", "LORA"
    known = _lora_config_fields()
    if known is not None:
        for key in sorted(set(config) - known - {"peft_type", "auto_mapping", "base_model_name_or_path",
                                                   "revision", "task_type", "inference_mode", "peft_version"}):
            yield key, f"{key!r} is not a field of peft's LoraConfig", "a LoraConfig field"
    for key in ("r", "lora_alpha", "target_modules"):
        if key not in config:
            yield key, f"{key} is missing (vLLM needs it)", "the field peft writes"
    r = config.get("r")
    if "r" in config and (not isinstance(r, int) or isinstance(r, bool) or r <= 0):
        yield "r", f"the rank r is {r!r}", "a positive integer"
    alpha = config.get("lora_alpha")
    if "lora_alpha" in config and (not isinstance(alpha, (int, float)) or isinstance(alpha, bool)):
        yield "lora_alpha", f"lora_alpha is {alpha!r}", "a number"
    targets = config.get("target_modules")
    if "target_modules" in config and not (isinstance(targets, str) or (
            isinstance(targets, list) and targets and all(isinstance(t, str) for t in targets))):
        yield "target_modules", f"target_modules is {targets!r}", "a list of module names or a regex"
    pattern = config.get("rank_pattern") or {}
    if not isinstance(pattern, dict) or any(not isinstance(v, int) or isinstance(v, bool) or v <= 0
                                            for v in pattern.values()):
        yield "rank_pattern", "rank_pattern holds a rank that is not a positive integer", "module -> rank > 0"
    for key, why in UNSUPPORTED.items():
        if config.get(key):
            yield key, why, f"{key} off"
    saved = config.get("modules_to_save")
    if saved and not (isinstance(saved, list) and all(isinstance(name, str) for name in saved)):
        yield "modules_to_save", f"modules_to_save is {saved!r:.80}", "a list of module names, or null"
    elif saved and set(saved) - {"classifier", "score"}:
        yield "modules_to_save", "vLLM serves modules_to_save only for classifier/score heads", "null"
    if config.get("bias", "none") != "none":
        yield "bias", f"bias {config['bias']!r}: vLLM serves adapters without bias", "none"


@functools.lru_cache(maxsize=1)
def _lora_config_fields() -> frozenset[str] | None:
    """peft's LoraConfig fields, when peft is installed. Asked in a child interpreter: peft imports torch,
    which costs seconds and, at exit, prints its bindings' leak reports into validate's output."""
    probe = ("import dataclasses, json; from peft import LoraConfig; "
             "print(json.dumps([f.name for f in dataclasses.fields(LoraConfig)]))")
    try:
        out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300,
                             check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        return None
    try:
        names = json.loads(out.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return None
    return frozenset(n for n in names if isinstance(n, str))


def _base_name(m: LoadedModel, name: str, config: dict[str, Any], config_file: Path, base: _Base) -> Iterator[Problem]:
    """base_model_name_or_path against the served base: the same name or folder, else compared by
    architecture where both configs are on this host."""
    given = config.get("base_model_name_or_path")
    if not isinstance(given, str) or not given or base.model is None:
        return
    if given == base.model or (base.folder is not None and safepath.is_dir(given)
                               and os.path.realpath(given) == os.path.realpath(base.folder)):
        return
    other = _arch(Path(given)) if safepath.is_dir(given) else None
    if other is not None and base.arch is not None:
        if other != base.arch:
            yield m.problem("lora.base", "error", f"adapter {name!r} was made for {given} ({_fmt(other)}), the "
                            f"model serves {base.model} ({_fmt(base.arch)})", file=config_file,
                            field="base_model_name_or_path", expected=f"an adapter of {base.model}")
        return
    yield m.problem("lora.base", "warning", f"adapter {name!r} names base {given!r}, the model serves "
                    f"{base.model!r}", file=config_file, field="base_model_name_or_path",
                    expected=f"an adapter of {base.model} (tensor shapes are checked against it)")


def _targets(m: LoadedModel, name: str, config: dict[str, Any], config_file: Path, base: _Base) -> Iterator[Problem]:
    """Each target module names a module of the base (peft: the name or its last dotted parts; a string is
    a regex on full names)."""
    targets = config["target_modules"]
    modules = base.modules()
    if isinstance(targets, str):
        try:
            if not any(re.fullmatch(targets, mod) for mod in modules):
                yield m.problem("lora.target_modules", "error", f"adapter {name!r}: target_modules {targets!r} "
                                "matches no module of the base", file=config_file, field="target_modules",
                                expected="a regex over the base's module names")
        except re.error as exc:
            yield m.problem("lora.target_modules", "error", f"adapter {name!r}: target_modules is not a regex "
                            f"({exc})", file=config_file, field="target_modules", expected="a valid regex")
        return
    leaves = sorted({mod.rsplit(".", 1)[-1] for mod in modules})
    for target in targets:
        if not any(mod == target or mod.endswith("." + target) for mod in modules):
            yield m.problem("lora.target_modules", "error", f"adapter {name!r}: target module {target!r} is not "
                            f"in the base ({base.arch_name or 'its architecture'})", file=config_file,
                            field="target_modules", expected="one of " + ", ".join(leaves[:20]))


def _shapes(m: LoadedModel, name: str, weights: Path, shapes: dict[str, list[int]], max_rank: Any
            ) -> Iterator[Problem]:
    """lora_A is (rank, in_features) and lora_B (out_features, rank) of the base layer (`shapes`) they adapt."""
    try:
        tensors = safetensors_shapes(weights)
    except ValueError as exc:
        yield m.problem("lora.weights", "error", f"adapter {name!r}: {exc}", file=weights,
                        expected="a safetensors file")
        return
    for key, shape in sorted(tensors.items()):
        found = re.fullmatch(r"(.+)\.lora_([AB])(?:\.[^.]+)?\.weight", key.removeprefix(ADAPTER_PREFIX))
        if not found or len(shape) != 2:
            continue
        module, part = found.groups()
        target = shapes.get(f"{module}.weight")
        if target is None or len(target) != 2:
            yield m.problem("lora.shape", "error", f"adapter {name!r}: {key} adapts {module}, which the base does "
                            "not have", file=weights, field=key, expected="a module of the base")
            continue
        out_features, in_features = target
        rank, width = (shape[0], shape[1]) if part == "A" else (shape[1], shape[0])
        want = in_features if part == "A" else out_features
        if width != want:
            yield m.problem("lora.shape", "error", f"adapter {name!r}: {key} has shape {list(shape)}, the base's "
                            f"{module} is {list(target)}", file=weights, field=key,
                            expected=f"{'[rank, ' + str(want) + ']' if part == 'A' else '[' + str(want) + ', rank]'}")
        elif isinstance(max_rank, int) and rank > max_rank:
            yield m.problem("lora.rank", "error", f"adapter {name!r}: {key} has rank {rank}, above max_lora_rank "
                            f"{max_rank}", file=weights, field=key, expected=f"at most {max_rank}")


def safetensors_shapes(path: Path) -> dict[str, list[int]]:
    """Tensor name -> shape from a safetensors file's header (8-byte little-endian size, then JSON)."""
    with open(path, "rb") as fh:
        head = fh.read(8)
        if len(head) != 8:
            raise ValueError("shorter than a safetensors header")
        (size,) = struct.unpack("<Q", head)
        if size > MAX_HEADER_BYTES or size > os.fstat(fh.fileno()).st_size - 8:
            raise ValueError(f"a safetensors header of {size} bytes does not fit the file")
        raw = fh.read(size)
    try:
        header = json.loads(raw)
    except (ValueError, RecursionError):
        raise ValueError("the safetensors header is not JSON") from None
    if not isinstance(header, dict):
        raise ValueError("the safetensors header is not a JSON object")
    return {k: list(v["shape"]) for k, v in header.items() if k != "__metadata__" and isinstance(v, dict)
            and isinstance(v.get("shape"), list) and all(isinstance(d, int) for d in v["shape"])}


class _Base:
    """The served base model as far as this host can see it: its name, folder, config and weight shapes."""

    def __init__(self, model: str | None, folder: Path | None) -> None:
        self.model, self.folder = model, folder
        self.arch = _arch(folder) if folder is not None else None
        self.arch_name = self.arch[0] if self.arch else None
        self.shapes: dict[str, list[int]] | None = None
        if folder is not None:
            files = sorted(folder.glob("*.safetensors"))
            if files:
                shapes: dict[str, list[int]] = {}
                try:
                    for f in files:
                        shapes.update(safetensors_shapes(f))
                except (OSError, ValueError):
                    shapes = {}
                self.shapes = shapes or None

    @classmethod
    def of(cls, args: dict[str, Any], version: Path) -> _Base:
        model = args.get("model")
        if not isinstance(model, str) or not model or "://" in model:
            return cls(model if isinstance(model, str) else None, None)
        path = _local(model, version)
        return cls(model, path if path is not None and safepath.is_dir(path) else None)

    def modules(self) -> set[str]:
        """Module names with weights (`model.layers.0.self_attn.q_proj`), from the tensor names."""
        return {k.rsplit(".", 1)[0] for k in self.shapes or {} if "." in k}


def _local(location: str, version: Path) -> Path | None:
    """A local location as model.json and multi_lora.json write it: absolute, `~`, or relative to the version;
    None for a `~user` of no user of this host."""
    if not location.startswith(("/", "~")):
        return version / location
    try:
        return Path(location).expanduser()
    except RuntimeError:
        return None


def _arch(folder: Path) -> tuple[str, str, Any] | None:
    """(architecture, model_type, hidden_size) from a model folder's config.json."""
    try:
        config = read_json(folder / "config.json")
    except (OSError, ValueError):
        return None
    if not isinstance(config, dict):
        return None
    archs = config.get("architectures") or [""]
    return (str(archs[0]), str(config.get("model_type", "")), config.get("hidden_size"))


def _fmt(arch: tuple[str, str, Any]) -> str:
    return f"{arch[0] or arch[1]}, hidden size {arch[2]}"


def _inside(path: Path, root: Path) -> bool:
    from tritonpkg import safepath

    return safepath.lexically_within(path, root) and (not os.path.lexists(path) or safepath.within(path, root))


def names_apart(models: list[LoadedModel], ctx: Context) -> Iterator[Problem]:
    """An adapter named like a model of the repository, or like another model's adapter: the OpenAI API serves
    one name once (a model wins over an adapter, the first model's adapter over a later one's)."""
    owners: dict[str, str] = {m.name: "" for m in models}
    for m in sorted(models, key=lambda x: x.name):
        if m.engine_args_file is None or not version_files.lora_enabled(m.engine_args):
            continue
        listing = m.engine_args_file.parent / MULTI_LORA
        try:
            entries = version_files.read_adapter_list(listing.parent)
        except (OSError, ValueError):
            continue  # the model rule reports it
        for name in entries:
            if adapter_names.name_problem(name) is not None:
                continue  # the model rule reports it
            owner = owners.get(name)
            if owner is None:
                owners[name] = m.name
                continue
            shadow = f"model {name!r}" if owner == "" else f"an adapter of model {owner!r}"
            yield m.problem("lora.name_taken", "warning", f"adapter {name!r} has the name of {shadow}: the OpenAI "
                            f"API's model {name!r} is that one, this adapter only reachable by lora_name",
                            file=listing, field=name, expected="an adapter name no model or other adapter has")


RULES = [adapters]
REPO_RULES = [names_apart]
