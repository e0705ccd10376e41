"""The engine-argument corpus of a release lane: model.json variants that validate -r R and R's vLLM must judge
alike. Built from a real base (the tiny Llama's engine arguments) and from the snapshots themselves: every
key the lane's vLLM knows and the pinned one does not (and the reverse), wrong JSON types, values outside a
Literal's choices or a config class's limits, and LoRA configurations. Deterministic: same cases, same order."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tritonpkg import compat
from tritonpkg.compat.engine_args import load_snapshot


@dataclass(frozen=True)
class Case:
    name: str
    args: dict[str, Any]
    what: str  # the mutation, for the report


def _sample(kinds: list[str], choices: list | None) -> Any:
    """A value of the field's own kind (a valid one where the field has choices)."""
    if choices:
        return choices[0]
    for kind, value in (("bool", True), ("int", 1), ("float", 0.5), ("str", "auto"), ("null", None)):
        if kind in kinds:
            return value
    return None


def build_cases(release: str, model: str) -> list[Case]:
    vllm = compat.get_release(release).vllm_base
    if vllm is None:
        raise ValueError(f"release {release} publishes no vLLM")
    snap = load_snapshot(str(vllm))
    pinned = load_snapshot(str(compat.pinned_vllm()))
    if snap is None or pinned is None:
        raise ValueError(f"no snapshot for vLLM {vllm} or the pinned {compat.pinned_vllm()}")
    fields, other = snap["fields"], pinned["fields"]
    base = {"model": model, "max_model_len": 128, "enforce_eager": True, "dtype": "float32", "max_num_seqs": 4,
            "max_num_batched_tokens": 128}
    cases = [Case("base", dict(base), "the tiny Llama's engine arguments")]
    # keys one vLLM knows and the other does not: unknown to R when only the pinned vLLM has them
    cases += [Case(f"newer_{key}", {**base, key: _sample(other[key]["accepts"], other[key].get("choices"))},
                   f"{key}: in vLLM {compat.pinned_vllm()}, not in {vllm}")
              for key in sorted(set(other) - set(fields))[:12]]
    simple = ("bool", "int", "float", "str")
    for key in sorted(set(fields) - set(other))[:12]:
        spec = fields[key]
        if any(k in simple for k in spec["accepts"]):
            cases.append(Case(f"older_{key}", {**base, key: _sample(spec["accepts"], spec.get("choices"))},
                              f"{key}: in vLLM {vllm}, gone from {compat.pinned_vllm()}"))
    cases += [
        Case("typo_max_model_length", {**base, "max_model_length": 128}, "a misspelt key"),
        Case("type_max_model_len_str", {**base, "max_model_len": "128"}, "an int field given a numeric string"),
        Case("type_max_model_len_word", {**base, "max_model_len": "long"}, "an int field given a word"),
        Case("type_enforce_eager_int", {**base, "enforce_eager": 1}, "a bool field given 1"),
        Case("type_enforce_eager_str", {**base, "enforce_eager": "sure"}, "a bool field given a word"),
        Case("type_gmu_list", {**base, "gpu_memory_utilization": [0.5]}, "a float field given a list"),
        Case("type_gmu_str", {**base, "gpu_memory_utilization": "0.5"}, "a float field given a numeric string"),
        Case("type_max_num_seqs_str", {**base, "max_num_seqs": "4"}, "a scheduler int given a numeric string"),
        Case("type_max_model_len_float", {**base, "max_model_len": 128.0}, "an int field given a whole float"),
        Case("type_max_model_len_frac", {**base, "max_model_len": 128.5}, "an int field given a fraction"),
        Case("type_enforce_eager_true_str", {**base, "enforce_eager": "true"}, "a bool field given 'true'"),
        Case("type_dtype_int", {**base, "dtype": 16}, "a str field given an int"),
        Case("choice_dtype_bf16", {**base, "dtype": "bf16"}, "dtype outside its choices"),
        Case("choice_dtype_float16", {**base, "dtype": "float16"}, "dtype inside its choices"),
    ]
    for key, spec in sorted(fields.items()):
        b = spec.get("bounds") or {}
        if key in base or key.startswith(("_", "max_lora", "max_cpu_loras")):
            continue
        if "gt" in b:
            cases.append(Case(f"range_{key}_at_gt", {**base, key: b["gt"]}, f"{key} = its exclusive lower limit"))
        if "ge" in b:
            cases.append(Case(f"range_{key}_below_ge", {**base, key: b["ge"] - 1}, f"{key} below its lower limit"))
        if "le" in b:
            cases.append(Case(f"range_{key}_above_le", {**base, key: b["le"] + 1}, f"{key} above its upper limit"))
    for key, spec in sorted(fields.items()):  # choices of fields a feature's config class holds (LoRA, multimodal)
        if spec.get("choices") and {"LoRAConfig", "MultiModalConfig"} & set(spec.get("configs", [])):
            bad = 0 if all(isinstance(c, int) for c in spec["choices"]) else "no-such-choice"
            cases.append(Case(f"choice_{key}_outside", {**base, key: bad}, f"{key} outside its choices"))
    cases += [
        Case("range_gpu_memory_utilization_1_5", {**base, "gpu_memory_utilization": 1.5}, "above 1"),
        Case("lora_on", {**base, "enable_lora": True, "max_loras": 1, "max_lora_rank": 8}, "LoRA on, valid"),
        Case("lora_rank_0", {**base, "enable_lora": True, "max_lora_rank": 0}, "LoRA rank 0"),
        Case("lora_loras_0", {**base, "enable_lora": True, "max_loras": 0}, "LoRA max_loras 0"),
        Case("lora_off_loras_0", {**base, "enable_lora": False, "max_loras": 0}, "max_loras 0 with LoRA off"),
        Case("lora_off_rank_0", {**base, "max_lora_rank": 0}, "max_lora_rank 0, enable_lora absent"),
        Case("lora_on_loras_str", {**base, "enable_lora": True, "max_loras": "2"}, "LoRA on, max_loras a string"),
    ]
    names = [c.name for c in cases]
    assert len(names) == len(set(names)), "corpus case names must be unique"
    return cases
