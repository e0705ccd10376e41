"""backends/vllm/io_contract.json is the one statement of the vLLM backend's I/O: the backend (auto-complete,
request flags), `tritonpkg package` (config.pbtxt) and the OpenAI frontend (the return_* flags it sends) all
read it, and a change to the file reaches all three."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tritonpkg import vllm_io
from tritonpkg.errors import PackageError

ROOT = Path(__file__).resolve().parents[2]
CONTRACT = ROOT / "backends" / "vllm" / "io_contract.json"
TINY = ROOT / "examples" / "tiny-llm"


def backend_contract(folder: Path):
    """The backend's own contract module (it runs in the stub, without tritonpkg), loaded from `folder`."""
    spec = importlib.util.spec_from_file_location(f"vllm_backend_contract_{abs(hash(folder))}", folder / "contract.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def packaged_io(spec_dir: Path, target_release: str, tmp_path: Path) -> tuple[list[tuple], list[tuple]]:
    """(name, data_type, dims, optional) of the inputs and outputs `package` writes into config.pbtxt."""
    from tritonpkg.repository.build import build_models
    from tritonpkg.repository.config import parse_pbtxt
    from tritonpkg.spec import load_spec

    spec = load_spec(spec_dir).model_copy(update={"target_release": target_release})
    (model,) = build_models(spec)
    config = parse_pbtxt(model.files[model.config_path].decode())
    from tritonclient.grpc import model_config_pb2 as pb

    def rows(tensors) -> list[tuple]:
        return [(t.name, pb.DataType.Name(t.data_type), tuple(t.dims), getattr(t, "optional", False)) for t in tensors]

    return rows(config.input), rows(config.output)


def test_the_backend_reads_the_file():
    data = json.loads(CONTRACT.read_text())
    module = backend_contract(CONTRACT.parent)
    strip = ("name", "data_type", "dims", "optional")
    assert [{k: t[k] for k in strip if k in t} for t in data["inputs"]] == module.INPUTS
    assert [{k: t[k] for k in strip if k in t} for t in data["outputs"]] == module.OUTPUTS
    assert tuple(data["return_flags"]) == module.RETURN_FLAGS
    assert set(module.CONTROL_KEYS) == {"stream", "exclude_input_in_output", *data["return_flags"]}


@pytest.mark.parametrize("release", ["24.10", "24.12", "25.02", "26.07"])
def test_the_packaged_config_is_the_file(release, tmp_path):
    contract = vllm_io.load()
    inputs, outputs = packaged_io(TINY, release, tmp_path)
    want_in, want_out = contract.packaged_io("generate", release)
    assert inputs == [(t.name, t.data_type, t.dims, t.optional) for t in want_in]
    assert outputs == [(t.name, t.data_type, t.dims, t.optional) for t in want_out]
    if release == "24.10":  # NVIDIA's backend of 24.10 reads no additional output
        assert [row[0] for row in inputs] == ["text_input", "stream", "sampling_parameters", "exclude_input_in_output"]
    if release == "26.07":  # every flag NVIDIA's backend reads by then (the toolkit's own are auto-completed)
        nvidia = {t.name for t in contract.inputs if t.nvidia_since} & set(contract.return_flags)
        assert {row[0] for row in inputs} >= nvidia and len(nvidia) == 5


def test_the_frontend_asks_with_the_files_flags():
    from tritonpkg.frontend.triton import RETURN_FLAGS

    contract = vllm_io.load()
    assert set(RETURN_FLAGS) <= set(contract.return_flags)
    assert [contract.return_flags[f] for f in RETURN_FLAGS] == ["finish_reason", "num_input_tokens",
                                                                 "num_output_tokens", "logprobs"]


PROBE = (
    "import json, sys\n"
    "from tritonpkg.spec import load_spec\n"
    "from tritonpkg.repository.build import build_models\n"
    "from tritonpkg.frontend.triton import RETURN_FLAGS\n"
    "spec = load_spec(sys.argv[1]).model_copy(update={'target_release': '26.07'})\n"
    "(model,) = build_models(spec)\n"
    "print(json.dumps({'flags': RETURN_FLAGS, 'config': model.files[model.config_path].decode()}))\n"
)


def edited_backends(tmp_path: Path, edit) -> Path:
    backends = tmp_path / "backends"
    shutil.copytree(ROOT / "backends", backends, ignore=shutil.ignore_patterns("__pycache__"))
    path = backends / "vllm" / "io_contract.json"
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))
    return backends


def probe(backends: Path) -> subprocess.CompletedProcess:
    """`package` and the frontend in a fresh interpreter that finds its backends/ in `backends`."""
    env = {**os.environ, "TRITONPKG_BACKENDS": str(backends)}
    return subprocess.run([sys.executable, "-c", PROBE, str(TINY)], env=env, capture_output=True, text=True,
                          timeout=120, check=False, cwd=ROOT)


def rename(names: list, old: str, new: str) -> list:
    return [new if n == old else n for n in names]


def test_a_change_to_the_file_reaches_the_backend_the_packager_and_the_frontend(tmp_path):
    """Rename one return flag and widen a dim in a copy of backends/: all three follow."""

    def edit(data: dict) -> None:
        for t in data["inputs"]:
            if t["name"] == "return_finish_reason":
                t["name"] = "return_stop_reason"
            if t["name"] == "stream":
                t["dims"] = [-1]
        data["return_flags"] = {("return_stop_reason" if k == "return_finish_reason" else k): v
                                for k, v in data["return_flags"].items()}
        gen = data["packaged"]["generate"]
        gen["inputs"] = rename(gen["inputs"], "return_finish_reason", "return_stop_reason")

    backends = edited_backends(tmp_path, edit)
    module = backend_contract(backends / "vllm")
    assert "return_stop_reason" in module.RETURN_FLAGS and "return_finish_reason" not in module.CONTROL_KEYS
    assert {"name": "stream", "data_type": "TYPE_BOOL", "dims": [-1], "optional": True} in module.INPUTS
    out = probe(backends)
    assert out.returncode == 0, out.stderr[-3000:]
    seen = json.loads(out.stdout)
    assert seen["flags"][0] == "return_stop_reason"
    assert 'name: "return_stop_reason"' in seen["config"] and "return_finish_reason" not in seen["config"]
    assert 'name: "stream"\n  data_type: TYPE_BOOL\n  dims: -1' in seen["config"]


def test_an_output_the_frontend_reads_that_the_file_drops_stops_the_frontend_naming_the_file(tmp_path):
    def edit(data: dict) -> None:
        data["outputs"] = [t for t in data["outputs"] if t["name"] != "logprobs"]
        data["inputs"] = [t for t in data["inputs"] if t["name"] != "return_logprobs"]
        del data["return_flags"]["return_logprobs"]
        gen = data["packaged"]["generate"]
        gen["inputs"].remove("return_logprobs")
        gen["outputs"].remove("logprobs")

    out = probe(edited_backends(tmp_path, edit))
    assert out.returncode != 0
    assert "io_contract.json: return_flags: no return flag asks for logprobs" in out.stderr


def test_a_broken_file_is_an_error_naming_it(tmp_path, monkeypatch):
    folder = tmp_path / "backends" / "vllm"
    folder.mkdir(parents=True)
    data = json.loads(CONTRACT.read_text())
    data["return_flags"]["return_everything"] = "everything"
    (folder / "io_contract.json").write_text(json.dumps(data))
    monkeypatch.setenv("TRITONPKG_BACKENDS", str(tmp_path / "backends"))
    with pytest.raises(PackageError, match=r"io_contract\.json: not a valid I/O contract: .*return_everything"):
        vllm_io.load()
