"""`tritonpkg validate`'s engine-argument choices and limits against the real vLLM deciding.

For every AsyncEngineArgs field the pinned snapshot gives a Literal's choices or a numeric limit, one
value just outside is put in a model.json; validate must report each, and vLLM's own
`AsyncEngineArgs(**args).create_engine_config()` (what the backend's engine start runs first) on the
tiny model must refuse each, except fields whose config vLLM builds only when the feature is on. That
set is asserted exactly, so a field vLLM starts (or stops) checking fails the test until it is updated.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.validate_repos import repo_with
from tritonpkg import compat
from tritonpkg.compat.engine_args import load_snapshot
from tritonpkg.validate import validate_repository

# Checked by vLLM only when the model or the arguments use the feature (not the tiny text model):
# LoRA, multimodal inputs, and kernel backends of MoE / linear-attention / sparse-attention models.
FEATURE_GATED = {
    "max_lora_cls_labels", "max_lora_rank", "max_loras",
    "mm_encoder_fp8_scale_save_margin", "mm_ipc_gpu_memory_gb", "mm_processor_cache_gb",
    "mm_shm_cache_max_object_size_mb", "video_pruning_rate",
    "gdn_prefill_backend", "kda_decode_backend", "kda_prefill_backend", "linear_backend", "moe_backend",
    "sparse_indexer_topk_backend",
}

VLLM_DECIDES = r"""
import json, sys
from vllm.engine.arg_utils import AsyncEngineArgs
model, cases = sys.argv[1], json.loads(sys.argv[2])
out = []
for name, value in cases:
    try:
        AsyncEngineArgs(model=model, **{name: value}).create_engine_config()
        out.append(None)
    except Exception as exc:
        out.append(f"{type(exc).__name__}: {str(exc)[:200]}")
print("RESULT " + json.dumps(out))
"""


def outside(spec: dict) -> list:
    """Values just outside the field's choices and limits."""
    values = []
    choices = spec.get("choices")
    if choices:
        numbers = [c for c in choices if isinstance(c, (int, float)) and not isinstance(c, bool)]
        values.append(max(numbers) + 1 if numbers and len(numbers) == len(choices) else "no-such-choice")
    step = 1 if spec["accepts"] == ["int"] or spec["accepts"] == ["int", "null"] else 0.5
    for key, bound in spec.get("bounds", {}).items():
        values.append({"ge": bound - step, "gt": bound, "le": bound + step, "lt": bound}[key])
    return values


@pytest.fixture(scope="module")
def tiny(tiny_llm_weights) -> Path:
    return tiny_llm_weights


@pytest.fixture(scope="module")
def cases() -> list[tuple[str, object]]:
    fields = load_snapshot(str(compat.pinned_vllm()))["fields"]
    found = [(name, value) for name, spec in sorted(fields.items()) for value in outside(spec)]
    assert len(found) >= 60, "the snapshot lost its choices/bounds (python -m tritonpkg.compat.engine_args.snapshot)"
    return found


def test_validate_reports_every_value_outside(tmp_path, monkeypatch, cases):
    """An error each, except a limit of a config class vLLM builds only for a feature the arguments leave off
    (LoRAConfig, MultiModalConfig): a warning saying so, as vLLM accepts it then (FEATURE_GATED below)."""
    model = "/weights"
    monkeypatch.setenv("TRITONPKG_NO_LIVE_VLLM", "1")
    fields = load_snapshot(str(compat.pinned_vllm()))["fields"]
    missed = []
    for i, (name, value) in enumerate(cases):
        report = validate_repository(repo_with(tmp_path / str(i), {"model": model, name: value}))
        gated = {"LoRAConfig", "MultiModalConfig"} & set(fields[name].get("configs", []))
        flagged = [p for p in report.problems
                   if p.field == name and p.rule in ("engine_args.choice", "engine_args.range")
                   and (p.severity == "error" or (gated and "checked only for" in p.message))]
        if not flagged:
            missed.append((name, value))
    assert not missed


@pytest.mark.slow
def test_vllm_refuses_them_at_engine_config(cases, tiny):
    pytest.importorskip("vllm", reason="the real vLLM decides (pip install -e '.[cpu]')")
    control = ("enforce_eager", True)  # must be accepted, or every refusal below proves nothing
    res = subprocess.run([sys.executable, "-c", VLLM_DECIDES, str(tiny), json.dumps([control, *cases])],
                         capture_output=True, text=True, timeout=600, check=False)
    lines = [line for line in res.stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, res.stderr[-3000:]
    first, *verdicts = json.loads(lines[-1][len("RESULT "):])
    assert first is None, f"vLLM refused the control arguments: {first}"
    accepted = {name for (name, _), why in zip(cases, verdicts, strict=False) if why is None}
    assert accepted == FEATURE_GATED, (
        f"vLLM accepted values validate refuses: {sorted(accepted - FEATURE_GATED)}; "
        f"now refuses feature-gated ones: {sorted(FEATURE_GATED - accepted)}")
    assert all(why for (name, _), why in zip(cases, verdicts, strict=False) if name not in FEATURE_GATED)
