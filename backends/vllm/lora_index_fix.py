"""A correction of vLLM's CPU LoRA ops, applied only where the defect is found (vllm-project/vllm PR 48421, open;
the toolkit's compatibility matrix records it under `defects`).

vLLM marks a token that uses no adapter with the LoRA index -1. Its GPU kernels skip such a row; the PyTorch ops the
CPU platform runs (vllm/lora/ops/torch_ops/lora_ops.py, through PunicaWrapperCPU) gather `weights[indices]`, where
-1 is Python's "last": a base request batched beside adapter requests gets the last adapter slot's weights applied,
a wrong answer with no error. Batches of base requests only are not hit (PunicaWrapperCPU skips them).

The ops run in vLLM's worker process, not in the stub: where the defect is found, `engine_args` names
`lora_index_worker.NoLoraIndexFix` as the engine argument worker_extension_cls, vLLM imports that module in each
worker, and the import wraps the three gathering ops (the sgmv_* prefill ops call them) so that a -1 row is left as
it was, as the GPU kernels leave it; every other row is computed by vLLM's own op, unchanged.

Guarded three ways, so it never runs where it is not needed: LoRA on, the platform's punica wrapper is the CPU one,
and a probe of the installed op shows the defect (a vLLM with the fix fails the probe and is left alone; the unit
test that the pinned vLLM still has it says when to delete this module and its matrix entry's correction)."""

from __future__ import annotations

import functools
import importlib
import inspect
from collections.abc import Callable
from typing import Any

UPSTREAM = "https://github.com/vllm-project/vllm/pull/48421"
CPU_PUNICA = "vllm.lora.punica_wrapper.punica_cpu.PunicaWrapperCPU"
OPS_MODULE = "vllm.lora.ops.torch_ops.lora_ops"
WRAPPED = ("bgmv_shrink", "bgmv_expand", "bgmv_expand_slice")
# Modules that bind the ops by name at import (`from ... import bgmv_shrink`): each gets the wrapped op too.
IMPORTERS = ("vllm.lora.ops.torch_ops", "vllm.lora.punica_wrapper.punica_cpu")
# The parameters the wrapper reads, in the order vLLM 0.32's ops take them.
LEADING = ("inputs", "output_tensor", "lora_indices_tensor")
EXTENSION = "lora_index_worker.NoLoraIndexFix"
EXTENSION_ARG = "worker_extension_cls"
MARK = "_tritonpkg_skips_no_lora"


class LoraFixError(ValueError):
    """The correction is needed but cannot be applied; the message names the engine argument."""


def defect_present() -> bool:
    """Whether the installed bgmv_shrink applies an adapter to a row whose LoRA index is -1: a last slot of ones,
    an empty first slot, one row with no adapter; a correct op leaves that row's output at 0."""
    import torch

    ops = importlib.import_module(OPS_MODULE)
    weights = torch.zeros(2, 1, 1, 1)
    weights[-1] = 1.0
    out = torch.zeros(1, 1)
    ops.bgmv_shrink(torch.ones(1, 1), weights, out, torch.tensor([-1]), 1.0)
    return bool(out.abs().sum() > 0)


def _signature_matches(op: Callable[..., Any]) -> bool:
    names = list(inspect.signature(op).parameters)
    return len(names) >= 4 and (names[0], names[2], names[3]) == LEADING


def skip_no_lora(op: Callable[..., Any]) -> Callable[..., Any]:
    """`op` with rows whose LoRA index is -1 left untouched in its output tensor (the GPU kernels' early exit)."""
    @functools.wraps(op)
    def without_no_lora_rows(inputs: Any, weights: Any, output_tensor: Any, lora_indices_tensor: Any, *args: Any,
                             **kwargs: Any) -> None:
        no_lora = lora_indices_tensor < 0
        if not bool(no_lora.any()):
            op(inputs, weights, output_tensor, lora_indices_tensor, *args, **kwargs)
            return
        if bool(no_lora.all()):
            return
        rows = no_lora[: output_tensor.shape[0]]
        kept = output_tensor[rows].clone()
        op(inputs, weights, output_tensor, lora_indices_tensor.clamp(min=0), *args, **kwargs)
        output_tensor[rows] = kept

    setattr(without_no_lora_rows, MARK, True)
    return without_no_lora_rows


def apply() -> list[str]:
    """Wrap the ops in this process where the defect is found; the names wrapped ([] when none needed it)."""
    ops = importlib.import_module(OPS_MODULE)
    if getattr(ops.bgmv_shrink, MARK, False) or not defect_present():
        return []
    originals = {name: getattr(ops, name) for name in WRAPPED}
    if not all(_signature_matches(op) for op in originals.values()):
        raise LoraFixError(f"{OPS_MODULE} has the no-adapter index defect ({UPSTREAM}) but ops of another signature "
                           f"than the correction was written for ({', '.join(LEADING)} ...)")
    modules = [ops, *(importlib.import_module(name) for name in IMPORTERS)]
    for name, original in originals.items():
        fixed = skip_no_lora(original)
        for module in modules:
            if getattr(module, name, None) is original:
                setattr(module, name, fixed)
    return list(WRAPPED)


def needed(lora_on: bool) -> bool:
    """LoRA on, vLLM's platform runs the CPU punica wrapper, and its op has the defect."""
    if not lora_on:
        return False
    from vllm.platforms import current_platform

    try:
        punica = current_platform.get_punica_wrapper()
    except NotImplementedError:
        return False
    return punica == CPU_PUNICA and defect_present()


def engine_args(args: dict[str, Any], lora_on: bool) -> tuple[dict[str, Any], bool]:
    """(the engine arguments to start with, whether they carry the correction). Refused where model.json names a
    worker extension of its own: vLLM takes one, and without the correction base answers would be wrong."""
    if not needed(lora_on):
        return args, False
    own = args.get(EXTENSION_ARG)
    if own not in (None, "", EXTENSION):
        raise LoraFixError(f"model.json field {EXTENSION_ARG} is {str(own)[:100]!r}, but with LoRA on this vLLM's "
                           f"CPU LoRA ops apply an adapter to base requests batched beside adapter requests "
                           f"({UPSTREAM}) and the backend's correction needs {EXTENSION_ARG}: expected it unset, "
                           "or enable_lora off")
    return {**args, EXTENSION_ARG: EXTENSION}, True
