"""validate applies Triton's auto-complete before its rules (tritonpkg/validate/autocomplete.py).

The vllm cases run the toolkit's real backends/vllm/model.py auto_complete_config (its module imports no
vLLM) on Triton's own pb_utils.ModelConfig, as the server does; what the real server does with the same
configs is tests/integration/test_validate_autocomplete.py. The other cases use small backends written
here, to reach what the toolkit's backend never does (a value that breaks a rule, a conflicting input)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tritonpkg import paths
from tritonpkg.cli import app
from tritonpkg.validate import Report, validate_repository
from tritonpkg.validate.autocomplete import apply, triton_json
from tritonpkg.validate.loaded import load_repository

SAMPLE = Path(__file__).parent / "validate_fixtures" / "nvidia_vllm_sample"
REAL_BACKENDS = paths.PROJECT_ROOT / "backends"
IG = "instance_group [ { count: 1 kind: KIND_MODEL } ]\n"
PY = ("import triton_python_backend_utils as pb_utils\nclass TritonPythonModel:\n"
      "    def execute(self, requests):\n        return []\n")


@pytest.fixture(autouse=True)
def _real_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    """The toolkit's own backends (the subject here); no live vLLM is asked about engine arguments."""
    monkeypatch.setenv("TRITONPKG_BACKENDS", str(REAL_BACKENDS))
    monkeypatch.setenv("TRITONPKG_NO_LIVE_VLLM", "1")


def sample(tmp_path: Path, config: str | None = None) -> Path:
    """A copy of the NVIDIA-sample fixture, its config.pbtxt replaced by `config` when given."""
    repo = tmp_path / "repo"
    shutil.copytree(SAMPLE, repo)
    if config is not None:
        (repo / "vllm_model" / "config.pbtxt").write_text(config)
    return repo


def errors(report: Report) -> list[tuple[str, str | None, int | None]]:
    return [(p.rule, p.field, p.line) for p in report.problems if p.severity == "error"]


def test_nvidias_sample_validates_clean_and_the_cli_exits_0() -> None:
    report = validate_repository(SAMPLE)
    assert report.ok and report.problems == [], report.problems
    result = CliRunner().invoke(app, ["validate", str(SAMPLE)], env={"TRITONPKG_NO_LIVE_VLLM": "1", "COLUMNS": "200"})
    assert result.exit_code == 0, result.output


def test_the_completed_config_is_the_backends_contract_decoupled_and_unbatched() -> None:
    (m,) = load_repository(SAMPLE.resolve())
    apply([m], REAL_BACKENDS)
    assert m.config is not None and m.written is not None
    assert len(m.written.input) == 0 and not m.written.HasField("model_transaction_policy")
    names = [t.name for t in m.config.input]
    assert {"text_input", "stream", "sampling_parameters", "exclude_input_in_output"} <= set(names)
    assert "text_output" in [t.name for t in m.config.output]
    assert m.config.model_transaction_policy.decoupled and m.config.max_batch_size == 0
    assert list(m.config.instance_group) == list(m.written.instance_group)  # auto-complete leaves it alone
    assert m.auto_filled["model_transaction_policy"] == "the 'vllm' backend's auto_complete_config"
    assert {f"input[{i}]" for i in range(len(names))} <= set(m.auto_filled)


def test_without_auto_complete_the_sample_is_refused_as_the_backend_refuses_it() -> None:
    report = validate_repository(SAMPLE, auto_complete=False)
    assert errors(report) == [("backend.decoupled", "model_transaction_policy", None)]
    result = CliRunner().invoke(app, ["validate", str(SAMPLE), "--disable-auto-complete-config"],
                                env={"TRITONPKG_NO_LIVE_VLLM": "1", "COLUMNS": "200"})
    assert result.exit_code == 1, result.output


@pytest.mark.parametrize(("written", "field", "line", "says"), [
    ("model_transaction_policy { decoupled: false }\n", "model_transaction_policy", 2, "decoupled property"),
    ("model_transaction_policy { }\n", "model_transaction_policy", 2, "decoupled property"),
    ("max_batch_size: 8\n", "max_batch_size", 2, "max_batch_size 8"),
])
def test_what_the_config_writes_is_never_overridden(tmp_path: Path, written: str, field: str, line: int,
                                                    says: str) -> None:
    """pb_utils.ModelConfig refuses to change a written value: Triton fails the load in auto-complete,
    before the backend's own decoupled check (so that is not reported twice)."""
    report = validate_repository(sample(tmp_path, 'backend: "vllm"\n' + written + IG))
    assert errors(report) == [("autocomplete.conflict", field, line)]
    assert says in report.errors[0].message


def test_written_inputs_are_kept_and_the_rest_supplied(tmp_path: Path) -> None:
    """The vllm backend adds only the inputs the config leaves out; one written without a data_type stays
    without one, and Triton's core then refuses it."""
    cfg = 'backend: "vllm"\ninput [ { name: "text_input" dims: [ 1 ] } ]\n' + IG
    report = validate_repository(sample(tmp_path, cfg))
    assert errors(report) == [("tensor.data-type", "input[0].data_type", 2)]
    assert report.errors[0].auto_complete is None  # the config wrote that input


def write_backend(root: Path, name: str, body: str) -> Path:
    """`root/name/model.py`: a Python-based backend whose auto_complete_config is `body`."""
    (root / name).mkdir(parents=True)
    (root / name / "model.py").write_text(
        "import triton_python_backend_utils as pb_utils\n\nclass TritonPythonModel:\n"
        "    @staticmethod\n    def auto_complete_config(c):\n"
        + "".join(f"        {line}\n" for line in body.splitlines()) + "        return c\n\n"
        "    def execute(self, requests):\n        return []\n")
    return root


def one_model(tmp_path: Path, backend: str, cfg: str) -> Path:
    d = tmp_path / "repo" / "m"
    (d / "1").mkdir(parents=True)
    (d / "config.pbtxt").write_text(f'backend: "{backend}"\n' + cfg)
    return tmp_path / "repo"


def test_a_finding_on_a_supplied_value_says_auto_complete_supplied_it(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    backends = write_backend(tmp_path / "backends", "odd",
                             'c.add_input({"name": "IN", "data_type": "TYPE_FP32", "dims": [0]})\n'
                             'c.add_output({"name": "OUT", "data_type": "TYPE_FP32", "dims": [4]})')
    monkeypatch.setenv("TRITONPKG_BACKENDS", str(backends))
    report = validate_repository(one_model(tmp_path, "odd", ""))
    (p,) = [p for p in report.problems if p.rule == "tensor.dims"]
    assert (p.field, p.auto_complete) == ("input[0].dims[0]", "the 'odd' backend's auto_complete_config")
    assert "a value Triton's auto-complete supplies" in p.message


def test_an_input_the_backend_declares_otherwise_is_refused_at_that_field(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    backends = write_backend(tmp_path / "backends", "typed",
                             'c.add_input({"name": "IN", "data_type": "TYPE_INT32", "dims": [4]})')
    monkeypatch.setenv("TRITONPKG_BACKENDS", str(backends))
    cfg = ('output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
           'input [ { name: "IN" data_type: TYPE_FP32 dims: [ 4 ] } ]\n')
    report = validate_repository(one_model(tmp_path, "typed", cfg))
    assert errors(report) == [("autocomplete.conflict", "input[0].data_type", 3)]
    assert "configuration expects datatype TYPE_FP32" in report.errors[0].message


def test_a_repositorys_own_auto_complete_config_is_reported_and_never_run(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    code = (f"open({str(marker)!r}, 'w').close()\n" + PY
            + "    @staticmethod\n    def auto_complete_config(c):\n        return c\n")
    d = tmp_path / "repo" / "m"
    (d / "1").mkdir(parents=True)
    (d / "config.pbtxt").write_text('backend: "python"\n')
    (d / "1" / "model.py").write_text(code)
    report = validate_repository(tmp_path / "repo")
    (p,) = [p for p in report.problems if p.rule == "autocomplete.not-run"]
    assert p.severity == "warning" and p.file == "m/1/model.py"
    assert not marker.exists()


def test_the_config_is_handed_over_as_triton_serialises_it() -> None:
    """64-bit fields as numbers (protobuf's JSON writes strings), fields without presence printed, the
    directory's name when the config has none: what pb_utils.ModelConfig compares against."""
    (m,) = load_repository(SAMPLE.resolve())
    assert m.config is not None
    m.config.input.add(name="x", dims=[1, -1])
    data = triton_json(m.config, m.name)
    assert data["name"] == "vllm_model" and data["max_batch_size"] == 0
    assert data["input"][0]["dims"] == [1, -1] and data["input"][0]["optional"] is False
    assert json.loads(json.dumps(data)) == data


def test_a_backend_name_that_is_a_path_runs_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Only folders of the toolkit's backend directory run: `backend: "../elsewhere"` is no way out."""
    marker = tmp_path / "ran"
    backends = tmp_path / "backends"
    backends.mkdir()
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "model.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    monkeypatch.setenv("TRITONPKG_BACKENDS", str(backends))
    validate_repository(one_model(tmp_path, "../elsewhere", ""))
    assert not marker.exists()
