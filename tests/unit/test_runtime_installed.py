"""An installed Triton as NVIDIA's images lay it out (/opt/tritonserver), what `serve --triton-home` runs; and the
serving copy that names every packaged adapter folder absolute for NVIDIA's backend."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tritonpkg.errors import RuntimeSetupError
from tritonpkg.runtime.environment import server_environment
from tritonpkg.runtime.installed import installed_runtime


def _home(tmp_path: Path) -> Path:
    home = tmp_path / "opt" / "tritonserver"
    for rel in ("bin/tritonserver", "backends/python/triton_python_backend_stub", "backends/vllm/model.py",
                "backends/tritonpkg_vllm/model.py", "lib/libtritonserver.so"):
        (home / rel).parent.mkdir(parents=True, exist_ok=True)
        (home / rel).write_text("")
    (home / "backends" / "notes").mkdir()
    (home / "TRITON_VERSION").write_text("2.59.0\n")
    return home


def test_the_image_layout_becomes_a_runtime(tmp_path: Path) -> None:
    home = _home(tmp_path)
    rt = installed_runtime(home)
    assert (rt.server_bin, rt.backend_dir, rt.version) == (home / "bin" / "tritonserver", home / "backends", "2.59.0")
    assert rt.toolkit_backends == ("tritonpkg_vllm", "vllm")  # folders with a model.py, python excluded
    assert server_environment(rt, {})["LD_LIBRARY_PATH"].split(":")[-1] == str(home / "lib")


def test_a_folder_without_triton_is_refused_naming_the_option(tmp_path: Path) -> None:
    home = _home(tmp_path)
    (home / "backends" / "python" / "triton_python_backend_stub").unlink()
    with pytest.raises(RuntimeSetupError) as info:
        installed_runtime(home)
    assert info.value.field == "--triton-home" and "triton_python_backend_stub" in str(info.value.file)


def test_absolute_adapters_rewrite_a_serving_copy_never_the_repository(tmp_path: Path) -> None:
    from tritonpkg.serve import ServingStack, StartupOptions

    repo = tmp_path / "repository"
    version = repo / "m" / "1"
    (version / "adapters" / "a").mkdir(parents=True)
    (version / "adapters" / "a" / "adapter_config.json").write_text(json.dumps({"r": 8}))
    (tmp_path / "weights").mkdir()
    (version / "model.json").write_text(json.dumps({"model": str(tmp_path / "weights")}))
    lora = version / "multi_lora.json"
    lora.write_text(json.dumps({"a": "./adapters/a"}))
    stack = ServingStack(StartupOptions(source=repo, absolute_adapters=True, state_dir=tmp_path / "state"))
    try:
        stack._source()
        stack._step_weights()
        served = stack.repository
        assert served is not None and served != repo.absolute()
        assert json.loads((served / "m" / "1" / "multi_lora.json").read_text()) == {
            "a": str(served / "m" / "1" / "adapters" / "a")}
        assert json.loads(lora.read_text()) == {"a": "./adapters/a"}
    finally:
        stack.stop()
