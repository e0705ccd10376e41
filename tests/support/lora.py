"""Tiny LoRA adapters for the tiny Llama, made offline with peft (examples/tiny-llm-lora/make_adapters.py), and
broken variants for validate. Adapters get random non-zero A and B so each changes greedy output; the seed makes
them reproducible and different from each other."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

from tests.support.paths import EXAMPLES

RANK = 8

# What each broken variant gets wrong; the key names the variant's folder.
BROKEN_KINDS = (
    "no_config",        # adapter_config.json missing
    "bad_json",         # adapter_config.json is not JSON
    "bad_peft",         # parseable JSON that peft's LoraConfig refuses (r: 0)
    "wrong_base",       # base_model_name_or_path names another model
    "high_rank",        # r: 16 above max_lora_rank 8
    "unknown_module",   # target_modules names a module the base architecture lacks
    "bad_shape",        # a lora_A tensor whose input width is not the base's hidden size
    "no_weights",       # adapter_config.json without adapter_model.safetensors
)


def make_base(out: Path) -> Path:
    """The tiny Llama's weights (examples/tiny-llm/make_tiny_llm.py) into `out`."""
    subprocess.run([sys.executable, str(EXAMPLES / "tiny-llm" / "make_tiny_llm.py"), "--out", str(out)],
                   check=True, timeout=300)
    return out


def _example() -> ModuleType:
    """examples/tiny-llm-lora/make_adapters.py, whose make_adapter is the one adapter builder."""
    spec = importlib.util.spec_from_file_location("make_adapters", EXAMPLES / "tiny-llm-lora" / "make_adapters.py")
    if spec is None or spec.loader is None:
        raise ImportError("examples/tiny-llm-lora/make_adapters.py cannot be loaded")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def make_adapter(base: Path, out: Path, seed: int, rank: int = RANK) -> Path:
    """A peft LoRA adapter of `base` (rank `rank` on every projection) with random A and B from `seed`."""
    return _example().make_adapter(base, out, seed, rank)


def make_broken(good: Path, base: Path, root: Path) -> dict[str, Path]:
    """One broken copy of the adapter `good` per kind in BROKEN_KINDS, under `root/<kind>`."""
    from safetensors.torch import load_file, save_file

    made: dict[str, Path] = {}
    for kind in BROKEN_KINDS:
        dest = root / kind
        shutil.copytree(good, dest)
        config_path = dest / "adapter_config.json"
        config = json.loads(config_path.read_text())
        if kind == "no_config":
            config_path.unlink()
        elif kind == "bad_json":
            config_path.write_text('{"r": 8, ')
        elif kind == "no_weights":
            (dest / "adapter_model.safetensors").unlink()
        elif kind == "bad_shape":
            tensors = load_file(str(dest / "adapter_model.safetensors"))
            name = next(k for k in sorted(tensors) if "q_proj.lora_A" in k)
            tensors[name] = tensors[name][:, :64].contiguous()
            save_file(tensors, str(dest / "adapter_model.safetensors"), metadata={"format": "pt"})
        else:
            if kind == "bad_peft":
                config["r"] = 0
            elif kind == "wrong_base":
                config["base_model_name_or_path"] = "meta-llama/Llama-3.1-8B"
            elif kind == "high_rank":
                config["r"] = 16
            elif kind == "unknown_module":
                config["target_modules"] = [*config["target_modules"], "wq"]
            config_path.write_text(json.dumps(config, indent=2))
        made[kind] = dest
    return made
