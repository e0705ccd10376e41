from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from tests.support.paths import EXAMPLES
from tritonpkg.cli import app
from tritonpkg.errors import SpecError
from tritonpkg.spec import Spec, load_spec

PY = {
    "name": "m",
    "version": 1,
    "kind": "python",
    "python": {
        "template": "custom",
        "parameters": {"module": "h.py"},
        "inputs": [{"name": "X", "data_type": "FP32", "dims": [4]}],
        "outputs": [{"name": "Y", "data_type": "BYTES", "dims": [-1]}],
    },
}


@pytest.mark.parametrize("example", sorted(p.name for p in EXAMPLES.iterdir() if (p / "tritonpkg.yaml").exists()))
def test_every_example_spec_loads(example):
    spec = load_spec(EXAMPLES / example)
    assert spec.source == (EXAMPLES / example / "tritonpkg.yaml").resolve()


def test_dtypes_are_normalised_to_triton_enum_names(write_spec):
    spec = load_spec(write_spec(PY))
    assert spec.python.inputs[0].data_type == "TYPE_FP32"
    assert spec.python.outputs[0].data_type == "TYPE_STRING"
    assert spec.target_release == "24.10"


def test_errors_name_file_line_field_and_expectation(write_spec):
    bad = json.loads(json.dumps(PY))
    bad["version"] = 0
    bad["python"]["inputs"][0]["dims"] = [0]
    bad["target_release"] = "23.01"
    bad["colour"] = "red"
    path = write_spec(bad)
    with pytest.raises(SpecError) as err:
        load_spec(path)
    text = str(err.value)
    assert "4 problem(s)" in text
    assert f"{path}:2: version: Input should be greater than or equal to 1" in text
    assert "python.inputs[0].dims: every dim must be a positive size or -1" in text
    assert "target_release: unknown Triton release '23.01'; expected one of 24.04" in text
    assert "colour: unknown field" in text


def test_yaml_syntax_error_has_line_and_column(tmp_path):
    path = tmp_path / "tritonpkg.yaml"
    path.write_text("name: x\nversion: [1\nkind: vllm\n")
    with pytest.raises(SpecError, match=r"tritonpkg.yaml:\d+:\d+: YAML syntax error"):
        load_spec(path)


@pytest.mark.parametrize(
    ("patch", "message"),
    [
        ({"kind": "vllm"}, "kind 'vllm' takes 'engine_args', not a 'python' section"),
        ({"python": None}, "kind 'python' needs a 'python' section"),
        ({"weights": "hf://just-a-name"}, "hf://org/name@revision"),
        ({"weights": "s3://B"}, "s3://bucket/prefix"),
        ({"deployment": {"traffic_steps": [50, 10, 100]}}, "traffic_steps must rise strictly and end at 100"),
    ],
)
def test_cross_field_rules(write_spec, patch, message):
    with pytest.raises(SpecError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_spec(write_spec({**PY, **patch}))


def test_vllm_kind_needs_weights(write_spec):
    with pytest.raises(SpecError, match="needs 'weights'"):
        load_spec(write_spec({"name": "m", "version": 1, "kind": "vllm"}))


def test_local_weights_resolve_against_the_spec_folder(write_spec, tmp_path):
    spec = load_spec(write_spec({"name": "m", "version": 1, "kind": "vllm", "weights": "./w"}))
    assert spec.weights_location() == str((tmp_path / "spec" / "w").resolve())


def test_schema_command_prints_the_json_schema():
    result = CliRunner().invoke(app, ["schema"])
    assert result.exit_code == 0
    schema = json.loads(result.stdout)
    assert schema == Spec.model_json_schema()
    assert set(schema["required"]) == {"name", "version", "kind"}
