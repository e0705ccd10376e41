"""Each validate rule: a valid case (no problem from that rule) and an invalid one (exact rule,
field, line). Behaviours encoded here were observed on a real Triton 2.51 (see rule docstrings)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.validate_repos import IO, PY, model, only, py, run
from tritonpkg.validate import Report

pytestmark = pytest.mark.usefixtures("fixture_backends")


def test_valid_python_model_is_clean(tmp_path):
    model(tmp_path, "m", py())
    report = run(tmp_path)
    assert [p for p in report.problems if not p.rule.startswith("runtime.")] == []
    assert report.models == ["m"]


# --- layout -------------------------------------------------------------------------------------
def test_config_missing_with_model_py_is_a_warning(tmp_path):
    model(tmp_path, "m", None)
    (p,) = only(run(tmp_path), "layout.config-missing")
    assert p.severity == "warning"


def test_config_missing_without_model_py_is_an_error(tmp_path):
    model(tmp_path, "m", None, {"1/model.json": "{}"})
    (p,) = only(run(tmp_path), "layout.config-missing")
    assert p.severity == "error" and p.file == "m/config.pbtxt"


def test_name_mismatch(tmp_path):
    model(tmp_path, "ok", 'name: "ok"\n' + py())
    model(tmp_path, "m", 'backend: "python"\nname: "other"\n' + IO)
    (p,) = only(run(tmp_path), "layout.name-mismatch")
    assert (p.model, p.field, p.line, p.column) == ("m", "name", 2, 1)


def test_model_file_missing_and_negative_version(tmp_path):
    model(tmp_path, "m", py(), {"1/": ""})
    model(tmp_path, "n", py(), {"-1/model.py": PY})
    report = run(tmp_path)
    (p,) = only(report, "layout.model-file")
    assert p.file == "m/1" and p.severity == "error" and p.expected == "m/1/model.py"
    (q,) = only(report, "layout.version-dir")
    assert q.model == "n"


def test_vllm_backend_needs_model_json(tmp_path):
    model(tmp_path, "ok", 'backend: "vllm"\n' + IO + "model_transaction_policy { decoupled: true }\n",
          {"1/model.json": '{"model": "/w"}'})
    model(tmp_path, "m", 'backend: "vllm"\n' + IO + "model_transaction_policy { decoupled: true }\n", {"1/": ""})
    (p,) = only(run(tmp_path), "layout.model-file")
    assert p.model == "m" and "model.json" in p.message


def test_ensemble_version_dir_may_be_empty(tmp_path):
    model(tmp_path, "a", py())
    model(tmp_path, "e", ENS, {"1/": ""})
    report = run(tmp_path)
    assert only(report, "layout.model-file") == [] and only(report, "version.none") == []


def test_stray_entries_are_warnings(tmp_path):
    model(tmp_path, "m", py(), {"1/model.py": PY, "README.md": "x", "v2/model.py": PY})
    (tmp_path / "notes.txt").write_text("x")
    stray = only(run(tmp_path), "layout.stray")
    assert sorted(p.file for p in stray) == ["m/README.md", "m/v2", "notes.txt"]
    assert {p.severity for p in stray} == {"warning"}


# --- config syntax ------------------------------------------------------------------------------
def test_unknown_field_has_line_and_column(tmp_path):
    model(tmp_path, "m", py("foo: 1\n"))
    (p,) = only(run(tmp_path), "config.syntax")
    assert (p.line, p.column) == (4, 1) and "foo" in p.message


def test_syntax_error_and_oneof_conflict(tmp_path):
    model(tmp_path, "m", py("max_batch_size: \n"))
    model(tmp_path, "n", py("max_batch_size: 4\nsequence_batching { }\ndynamic_batching { }\n"))
    report = run(tmp_path)
    assert sorted(p.model for p in only(report, "config.syntax")) == ["m", "n"]


# --- tensors ------------------------------------------------------------------------------------
def test_tensor_rules_report_every_problem(tmp_path):
    cfg = py(io='input [ { name: "A" dims: [ 4 ] },\n'
                '  { name: "B" data_type: TYPE_FP32 dims: [ 0, -2 ] },\n'
                '  { data_type: TYPE_FP32 dims: [ 1 ] } ]\n'
                'output [ { name: "OUT" data_type: TYPE_FP32 } ]\n')
    model(tmp_path, "m", cfg)
    report = run(tmp_path)
    assert [(p.field, p.line) for p in only(report, "tensor.data-type")] == [("input[0].data_type", 2)]
    assert [p.field for p in only(report, "tensor.dims")] == ["input[1].dims[0]", "input[1].dims[1]", "output[0].dims"]
    assert [p.field for p in only(report, "tensor.name")] == ["input[2].name"]


def test_reshape(tmp_path):
    ok = ('input [ { name: "IN" data_type: TYPE_FP32 dims: [ -1, 4 ] reshape: { shape: [ -1, 2, 2 ] } } ]\n'
          'output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] } ]\n')
    bad = ok.replace("[ -1, 2, 2 ]", "[ 8 ]")
    scalar = ('input [ { name: "IN" data_type: TYPE_FP32 dims: [ 1 ] reshape: { shape: [ ] } } ]\n'
              'output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] } ]\n')
    model(tmp_path, "ok", py(io=ok))
    model(tmp_path, "okscalar", py("max_batch_size: 4\n", io=scalar))
    model(tmp_path, "bad", py(io=bad))
    model(tmp_path, "badscalar", py(io=scalar))
    found = {(p.model, p.field) for p in only(run(tmp_path), "tensor.reshape")}
    assert found == {("bad", "input[0].reshape"), ("badscalar", "input[0].reshape")}


def test_duplicate_names_warn(tmp_path):
    io = IO + 'input [ { name: "IN" data_type: TYPE_INT32 dims: [ 4 ] } ]\n'
    model(tmp_path, "m", py(io=io))
    (p,) = only(run(tmp_path), "tensor.duplicate")
    assert (p.severity, p.field, p.line) == ("warning", "input[1].name", 4)


# --- batching / instances / versions -------------------------------------------------------------
def test_batching(tmp_path):
    model(tmp_path, "ok", py("max_batch_size: 8\ndynamic_batching { preferred_batch_size: [ 4, 8 ] }\n"))
    model(tmp_path, "m", py("max_batch_size: 4\ndynamic_batching { preferred_batch_size: [ 0, 8 ] }\n"))
    model(tmp_path, "n", py("max_batch_size: -1\n"))
    model(tmp_path, "w", py("dynamic_batching { }\n"))
    model(tmp_path, "z", py("dynamic_batching { preferred_batch_size: [ 4 ] }\n"))
    report = run(tmp_path)
    assert [(p.model, p.field) for p in only(report, "batching.preferred")] == [
        ("m", "dynamic_batching.preferred_batch_size[0]"), ("m", "dynamic_batching.preferred_batch_size[1]"),
        ("z", "dynamic_batching.preferred_batch_size[0]")]
    assert [p.model for p in only(report, "batching.max-batch-size")] == ["n"]
    assert [(p.model, p.severity) for p in only(report, "batching.dynamic-without-batch")] == [("w", "warning"),
                                                                                               ("z", "warning")]


def test_instance_groups(tmp_path):
    model(tmp_path, "ok", py("instance_group [ { kind: KIND_CPU count: 2 }, { kind: KIND_AUTO } ]\n"))
    model(tmp_path, "gpu", py("instance_group [ { kind: KIND_GPU } ]\n"))
    model(tmp_path, "cpugpus", py("instance_group [ { kind: KIND_CPU gpus: [ 0 ] } ]\n"))
    model(tmp_path, "zero", py("instance_group [ { kind: KIND_CPU count: 0 } ]\n"))
    report = run(tmp_path)
    if not Path("/dev/nvidia0").exists():
        (p,) = only(report, "instance.no-gpu")
        assert (p.model, p.field, p.line) == ("gpu", "instance_group[0].kind", 4)
    assert [p.model for p in only(report, "instance.gpus")] == ["cpugpus"]
    assert [(p.model, p.severity) for p in only(report, "instance.count")] == [("zero", "warning")]
    # an NGC target has GPUs: KIND_GPU is fine there
    assert only(run(tmp_path, target_release="24.10"), "instance.no-gpu") == []


def test_version_policy(tmp_path):
    model(tmp_path, "ok", py("version_policy { specific { versions: [ 1 ] } }\n"))
    model(tmp_path, "partial", py("version_policy { specific { versions: [ 1, 2 ] } }\n"))
    model(tmp_path, "none", py("version_policy { specific { versions: [ 3 ] } }\n"))
    model(tmp_path, "latest0", py("version_policy { latest { num_versions: 0 } }\n"))
    model(tmp_path, "nodir", py(), {})
    report = run(tmp_path)
    assert sorted((p.model, p.severity, p.field) for p in only(report, "version.missing")) == [
        ("none", "error", "version_policy.specific.versions[0]"),
        ("partial", "warning", "version_policy.specific.versions[1]")]
    assert [p.model for p in only(report, "version.latest")] == ["latest0"]
    assert [p.model for p in only(report, "version.none")] == ["nodir"]


# --- backend ------------------------------------------------------------------------------------
def test_backend_rules(tmp_path):
    model(tmp_path, "auto", IO)  # no backend, model.py present: auto-completed as python
    model(tmp_path, "nosuch", 'backend: "nosuch"\n' + IO)
    model(tmp_path, "nobackend", IO, {"1/model.json": "{}"})
    model(tmp_path, "sched", py('ensemble_scheduling { step [ { model_name: "auto" } ] }\n'))
    report = run(tmp_path)
    assert [(p.model, p.field) for p in only(report, "backend.unavailable")] == [("nosuch", "backend")]
    assert [p.model for p in only(report, "backend.missing")] == ["nobackend"]
    assert [p.model for p in only(report, "backend.ensemble-scheduling")] == ["sched"]


def test_vllm_backend_requires_decoupled(tmp_path):
    cfg = 'backend: "vllm"\n' + IO
    model(tmp_path, "ok", cfg + "model_transaction_policy { decoupled: true }\n", {"1/model.json": "{}"})
    model(tmp_path, "m", cfg, {"1/model.json": "{}"})
    (p,) = only(run(tmp_path), "backend.decoupled")
    assert (p.model, p.severity, p.field) == ("m", "error", "model_transaction_policy")


def test_python_sender_without_decoupled_warns(tmp_path):
    model(tmp_path, "m", py(), {"1/model.py": PY + "# request.get_response_sender()\n"})
    (p,) = only(run(tmp_path), "backend.decoupled")
    assert p.severity == "warning"


# --- ensembles ----------------------------------------------------------------------------------
A = py(io='input [ { name: "A_IN" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
          'output [ { name: "A_OUT" data_type: TYPE_FP32 dims: [ 4 ] } ]\n')
ENS = ('platform: "ensemble"\n'
       'input [ { name: "E_IN" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
       'output [ { name: "E_OUT" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
       'ensemble_scheduling { step [ { model_name: "a" model_version: -1\n'
       '  input_map { key: "A_IN" value: "E_IN" }\n'
       '  output_map { key: "A_OUT" value: "E_OUT" } } ] }\n')


def ens_repo(tmp_path, cfg: str) -> Report:
    model(tmp_path, "a", A)
    model(tmp_path, "e", cfg, {"1/": ""})
    return run(tmp_path)


def ens_rules(report: Report) -> list[tuple[str, str | None]]:
    return [(p.rule, p.field) for p in report.problems if p.model == "e"]


def test_ensemble_valid(tmp_path):
    assert ens_rules(ens_repo(tmp_path, ENS)) == []


def test_ensemble_unknown_model(tmp_path):
    assert ens_rules(ens_repo(tmp_path, ENS.replace('model_name: "a"', 'model_name: "zz"'))) == [
        ("ensemble.unknown-model", "ensemble_scheduling.step[0].model_name")]


def test_ensemble_io_names(tmp_path):
    report = ens_repo(tmp_path, ENS.replace('key: "A_IN"', 'key: "NOPE"'))
    (p,) = only(report, "ensemble.io-name")
    assert (p.field, p.line) == ("ensemble_scheduling.step[0].input_map[NOPE]", 5)


def test_ensemble_dtype_and_shape(tmp_path):
    cfg = ENS.replace('"E_IN" data_type: TYPE_FP32', '"E_IN" data_type: TYPE_INT32').replace(
        '"E_OUT" data_type: TYPE_FP32 dims: [ 4 ]', '"E_OUT" data_type: TYPE_FP32 dims: [ 5 ]')
    rules = ens_rules(ens_repo(tmp_path, cfg))
    assert ("ensemble.dtype", "ensemble_scheduling.step[0].input_map[A_IN]") in rules
    assert ("ensemble.shape", "ensemble_scheduling.step[0].output_map[A_OUT]") in rules


def test_ensemble_wildcard_shape_is_compatible(tmp_path):
    assert ens_rules(ens_repo(tmp_path, ENS.replace('"E_IN" data_type: TYPE_FP32 dims: [ 4 ]',
                                                    '"E_IN" data_type: TYPE_FP32 dims: [ -1 ]'))) == []


def test_ensemble_graph(tmp_path):
    cfg = ENS.replace('value: "E_IN"', 'value: "E_XX"').replace(
        "output [", 'output [ { name: "E_OUT2" data_type: TYPE_FP32 dims: [ 4 ] },')
    rules = [r for r, _ in ens_rules(ens_repo(tmp_path, cfg))]
    assert rules.count("ensemble.unused") == 1  # E_IN
    assert "ensemble.unconnected" in rules  # E_XX
    assert rules.count("ensemble.output-not-written") == 2  # E_OUT2 (no step), E_OUT (via E_XX)


def test_ensemble_batch_size_and_missing_maps(tmp_path):
    model(tmp_path, "a", A.replace('backend: "python"\n', 'backend: "python"\nmax_batch_size: 2\n'))
    model(tmp_path, "e", ENS.replace('platform: "ensemble"\n', 'platform: "ensemble"\nmax_batch_size: 8\n'), {"1/": ""})
    model(tmp_path, "f", ENS.replace('  input_map { key: "A_IN" value: "E_IN" }\n', ""), {"1/": ""})
    report = run(tmp_path)
    assert [(p.model, p.field) for p in only(report, "ensemble.batch-size")] == [("e", "max_batch_size")]
    assert [(p.model, p.field) for p in only(report, "ensemble.step-map")] == [("f", "ensemble_scheduling.step[0]")]


def test_ensemble_unmapped_required_input(tmp_path):
    model(tmp_path, "a",
          A.replace("input [", 'input [ { name: "A_OPT" data_type: TYPE_FP32 dims: [ 4 ] optional: true },'
                                              ' { name: "A_REQ" data_type: TYPE_FP32 dims: [ 4 ] },'))
    model(tmp_path, "e", ENS, {"1/": ""})
    (p,) = only(run(tmp_path), "ensemble.step-input-missing")
    assert (p.field, p.line) == ("ensemble_scheduling.step[0].input_map", 5) and "A_REQ" in p.message


def test_ensemble_cycle_between_ensembles(tmp_path):
    model(tmp_path, "e", ENS.replace('model_name: "a"', 'model_name: "e"').replace('"A_IN"', '"E_IN"').replace(
        '"A_OUT"', '"E_OUT"'), {"1/": ""})
    assert "ensemble.cycle" in [p.rule for p in run(tmp_path).problems]


# --- runtime (matrix-based: no vLLM import) -----------------------------------------------------
def test_numpy2_pin_on_a_numpy1_release(tmp_path):
    model(tmp_path, "ok", py(), {"1/model.py": PY, "requirements.txt": "numpy<2\n"})
    model(tmp_path, "m", py(), {"1/model.py": PY, "requirements.txt": "# pins\nnumpy>=2.0\n"})
    report = run(tmp_path, target_release="24.10")
    (p,) = only(report, "runtime.numpy")
    assert (p.model, p.file, p.line) == ("m", "m/requirements.txt", 2)
    assert only(run(tmp_path, target_release="24.12"), "runtime.numpy") == []  # 24.11+ stubs take numpy 2


def test_ngc_backend_imports_against_matrix(tmp_path):
    cfg = 'backend: "vllm"\n' + IO + "model_transaction_policy { decoupled: true }\n"
    model(tmp_path, "ok", cfg, {"1/model.json": "{}"})
    model(tmp_path, "m", cfg, {"1/model.json": "{}", "requirements.txt": "vllm==0.12.0\n"})
    report = run(tmp_path, target_release="25.09")
    bad = only(report, "runtime.vllm-import")
    assert {p.model for p in bad} == {"m"}
    assert any("vllm.engine.metrics" in p.message for p in bad)
    assert any("GuidedDecodingParams" in p.message for p in bad)


def test_unknown_release_is_refused(tmp_path):
    from tritonpkg.errors import CompatError

    with pytest.raises(CompatError):
        run(tmp_path, target_release="99.99")


# --- checkpoints (embedding / scoring templates) --------------------------------------------------
def test_a_template_model_whose_weights_folder_changed_after_packaging(tmp_path):
    import shutil

    import yaml

    from tests.support.minilm import MINILM
    from tests.support.paths import EXAMPLES
    from tritonpkg.repository import package_spec
    from tritonpkg.spec import load_spec

    weights = tmp_path / "weights"
    shutil.copytree(MINILM, weights)
    minilm = EXAMPLES / "minilm-embeddings-template"
    for name, template in (("embed", minilm), ("score", minilm / "scoring")):
        data = yaml.safe_load((template / "tritonpkg.yaml").read_text())
        (tmp_path / name).mkdir()
        (tmp_path / name / "tritonpkg.yaml").write_text(yaml.safe_dump({**data, "weights": str(weights)}))
        package_spec(load_spec(tmp_path / name), tmp_path / "repo")
    assert only(run(tmp_path / "repo"), "checkpoint.unloadable") == []

    (weights / "tokenizer.json").unlink()
    bad = only(run(tmp_path / "repo"), "checkpoint.unloadable")
    assert {(p.model, p.file, p.severity) for p in bad} == {("minilm_embed", "minilm_embed/1/model.py", "error"),
                                                            ("minilm_score", "minilm_score/1/model.py", "error")}
    assert all("holds no tokenizer.json" in p.message and str(weights) in p.message for p in bad)

    shutil.rmtree(weights)
    gone = only(run(tmp_path / "repo"), "checkpoint.missing")
    assert {(p.model, p.severity) for p in gone} == {("minilm_embed", "warning"), ("minilm_score", "warning")}
    assert only(run(tmp_path / "repo"), "checkpoint.unloadable") == []
