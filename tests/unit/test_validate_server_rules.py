"""Rules added after the differential corpus showed the real Triton 2.51 refusing these configs;
each has a case the server loads (no problem) and one it refuses (exact rule and field)."""

from __future__ import annotations

import pytest

from tests.support.validate_repos import IO, PY, model, only, py, run

pytestmark = pytest.mark.usefixtures("fixture_backends")

SEQ_IO = ('input [ { name: "IN" data_type: TYPE_FP32 dims: [ 4 ] },'
          ' { name: "START" data_type: TYPE_INT32 dims: [ 1 ] } ]\n'
          'output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] } ]\n')


def seq(controls: str) -> str:
    return py(f"max_batch_size: 4\nsequence_batching {{ control_input [ {controls} ] }}\n", io=SEQ_IO)


@pytest.mark.parametrize(("cfg", "rule", "field"), [
    ('platform: "python"\n' + IO, "backend.platform", "platform"),
    (py('parameters { key: "EXECUTION_ENV_PATH" value { string_value: "$$TRITON_MODEL_DIRECTORY/env.tar.gz" } }\n'),
     "backend.env-path", "parameters[EXECUTION_ENV_PATH]"),
    (py('model_warmup [ { name: "w" batch_size: 1 inputs { key: "NOPE"'
        ' value { data_type: TYPE_FP32 dims: [ 4 ] zero_data: true } } } ]\n'),
     "tensor.warmup-input", "model_warmup[0].inputs[NOPE]"),
    (('backend: "python"\ninput [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] is_shape_tensor: true } ]\n'
     'output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'), "tensor.shape-tensor",
     "input[0].is_shape_tensor"),
    (py("version_policy { specific { } }\n"), "version.specific-empty", "version_policy.specific"),
    (py("max_batch_size: 4\ndynamic_batching { priority_levels: 2 default_priority_level: 3 }\n"),
     "scheduler.priority", "dynamic_batching.default_priority_level"),
    (seq('{ name: "START" control [ { kind: CONTROL_SEQUENCE_START } ] }'), "scheduler.control-values",
     "sequence_batching.control_input[0].control[0]"),
    (seq('{ name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 1 ] } ] }'),
     "scheduler.control-values", "sequence_batching.control_input[0].control[0].int32_false_true"),
    (seq('{ name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] },'
         '{ name: "START2" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] }'),
     "scheduler.control-duplicate", "sequence_batching.control_input[1].control[0].kind"),
    (seq('{ name: "CORRID" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_FP32 } ] }'),
     "scheduler.corrid-type", "sequence_batching.control_input[0].control[0].data_type"),
    (seq('{ control [ { kind: CONTROL_SEQUENCE_READY int32_false_true: [ 0, 1 ] } ] }'),
     "scheduler.control-name", "sequence_batching.control_input[0].name"),
])
def test_server_refusals_are_predicted(tmp_path, cfg, rule, field):
    model(tmp_path, "m", cfg)
    found = only(run(tmp_path), rule)
    assert ("error", field) in [(p.severity, p.field) for p in found]
    assert {p.severity for p in found} == {"error"}


@pytest.mark.parametrize("cfg", [
    py('model_warmup [ { name: "w" batch_size: 1 inputs { key: "IN"'
       ' value { data_type: TYPE_FP32 dims: [ 4 ] zero_data: true } } } ]\n'),
    py("max_batch_size: 4\ndynamic_batching { priority_levels: 2 default_priority_level: 1 }\n"),
    seq('{ name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] }'),
    py("version_policy { specific { versions: [ 1 ] } }\n"),
])
def test_what_the_server_loads_is_not_an_error(tmp_path, cfg):
    model(tmp_path, "m", cfg)
    assert [p for p in run(tmp_path).errors if not p.rule.startswith("runtime.")] == []


def test_model_py_must_compile_and_define_the_class(tmp_path):
    model(tmp_path, "bad_syntax", py(), {"1/model.py": "class TritonPythonModel:\n    def execute(self)\n"})
    model(tmp_path, "no_class", py(), {"1/model.py": "def execute():\n    pass\n"})
    model(tmp_path, "imported", py(), {"1/model.py": "from impl import TritonPythonModel\n"})
    report = run(tmp_path)
    syntax = only(report, "backend.python-syntax")
    assert [(p.model, p.file, p.line) for p in syntax] == [("bad_syntax", "bad_syntax/1/model.py", 2)]
    assert [p.model for p in only(report, "backend.python-class")] == ["no_class"]


def test_leading_zero_version_dirs_are_not_versions(tmp_path):
    model(tmp_path, "m", py(), {"01/model.py": PY})
    assert [p.rule for p in run(tmp_path).errors if p.rule.startswith("version")] == ["version.none"]


ENS_IO = ('input [ { name: "IN" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
          'output [ { name: "A" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "B" data_type: TYPE_FP32 dims: [ 4 ] } ]\n')
ENSEMBLE = ('platform: "ensemble"\n' + ENS_IO +
            'ensemble_scheduling { step [\n'
            '  { model_name: "first" model_version: -1 input_map { key: "IN" value: "IN" }'
            ' output_map { key: "OUT" value: "A" } },\n'
            '  { model_name: "second" model_version: -1 input_map { key: "IN" value: "IN" }'
            ' output_map { key: "OUT" value: "B" } }\n'
            '] }\n')


@pytest.mark.parametrize(("decoupled", "errors"), [(False, []), (True, ["ensemble.decoupled-origin"])])
def test_ensemble_outputs_from_a_decoupled_step_and_elsewhere(tmp_path, decoupled, errors):
    model(tmp_path, "first", py("model_transaction_policy { decoupled: true }\n" if decoupled else ""))
    model(tmp_path, "second", py())
    model(tmp_path, "ens", ENSEMBLE, {"1/": ""})
    assert [p.rule for p in run(tmp_path).errors if p.model == "ens"] == errors


def test_ensemble_with_backend_or_instances(tmp_path):
    model(tmp_path, "first", py())
    model(tmp_path, "second", py())
    model(tmp_path, "ens", ENSEMBLE.replace('platform: "ensemble"', 'platform: "ensemble"\nbackend: "python"')
          + "instance_group [ { kind: KIND_CPU } ]\n", {"1/": ""})
    assert sorted(p.rule for p in run(tmp_path).errors if p.model == "ens") == ["backend.ensemble-backend",
                                                                                 "instance.ensemble"]
