"""Installing into the cache and building the backend directory, from a wheel-shaped fake tree
(real files, real renames and links; only the binaries' contents are stand-ins)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tritonpkg.errors import RuntimeSetupError
from tritonpkg.runtime import RuntimeSource, ensure_runtime, find_runtime
from tritonpkg.runtime.layout import MARKER, backend_root
from tritonpkg.runtime.source import python_stub


def fake_site(tmp_path: Path, pythons=("3.10", "3.11")) -> RuntimeSource:
    site = tmp_path / "site"
    tree = site / "pytriton" / "tritonserver"
    (tree / "bin").mkdir(parents=True)
    (tree / "bin" / "tritonserver").write_text("#!/bin/sh\n")
    (tree / "bin" / "tritonserver").chmod(0o755)
    (tree / "backends" / "python").mkdir(parents=True)
    (tree / "backends" / "python" / "libtriton_python.so").write_bytes(b"so")
    (tree / "backends" / "python" / "triton_python_backend_utils.py").write_text("# utils\n")
    for v in pythons:
        (tree / "python_backend_stubs" / v).mkdir(parents=True)
        (tree / "python_backend_stubs" / v / "triton_python_backend_stub").write_bytes(f"stub {v}".encode())
    (site / "nvidia_pytriton.libs").mkdir()
    (site / "nvidia_pytriton.libs" / "libtritonserver.so").write_bytes(b"lib")
    return RuntimeSource(site=site, server_version="2.51.0", dist_version="0.7.0")


@pytest.fixture
def toolkit_backends(tmp_path: Path, monkeypatch) -> Path:
    root = tmp_path / "project-backends"
    (root / "vllm").mkdir(parents=True)
    (root / "vllm" / "model.py").write_text("# vllm backend\n")
    (root / "notes").mkdir()  # no model.py: not a backend
    monkeypatch.setenv("TRITONPKG_BACKENDS", str(root))
    return root


def test_missing_stub_names_the_file_and_the_versions_present(tmp_path: Path) -> None:
    src = fake_site(tmp_path, pythons=("3.10", "3.12"))
    with pytest.raises(RuntimeSetupError) as err:
        python_stub(src.tree, "3.7")
    assert err.value.file.endswith("python_backend_stubs/3.7/triton_python_backend_stub")
    assert "3.10, 3.12" in err.value.expected
    with pytest.raises(RuntimeSetupError, match=r"no Python-backend stub for Python 3.9"):
        ensure_runtime(tmp_path / "cache", source=src, python_version="3.9")


def test_install_then_backend_dir_for_the_python_version(tmp_path: Path, toolkit_backends: Path) -> None:
    src = fake_site(tmp_path)
    rt = ensure_runtime(tmp_path / "cache", source=src, python_version="3.10")
    assert rt.root == tmp_path / "cache" / "triton-2.51.0"
    assert json.loads((rt.root / MARKER).read_text())["server_version"] == "2.51.0"
    assert rt.server_bin.read_text() == "#!/bin/sh\n" and os.access(rt.server_bin, os.X_OK)
    assert rt.lib_dirs == [rt.root / "nvidia_pytriton.libs"]
    py = rt.backend_dir / "python"
    assert sorted(p.name for p in py.iterdir()) == [
        "libtriton_python.so", "triton_python_backend_stub", "triton_python_backend_utils.py"]
    assert (py / "triton_python_backend_stub").read_bytes() == b"stub 3.10"
    assert rt.toolkit_backends == ("vllm",)
    assert (rt.backend_dir / "vllm" / "model.py").read_text() == "# vllm backend\n"
    assert not (rt.backend_dir / "notes").exists()
    # Another interpreter version swaps the stub; find_runtime reports which one is in place.
    ensure_runtime(tmp_path / "cache", source=src, python_version="3.11")
    assert (py / "triton_python_backend_stub").read_bytes() == b"stub 3.11"
    assert find_runtime(tmp_path / "cache").python_version == "3.11"


def test_toolkit_backends_are_refreshed_on_every_call(tmp_path: Path, toolkit_backends: Path) -> None:
    src, cache = fake_site(tmp_path), tmp_path / "cache"
    rt = ensure_runtime(cache, source=src, python_version="3.11")
    (toolkit_backends / "vllm" / "model.py").write_text("# edited\n")
    assert (rt.backend_dir / "vllm" / "model.py").read_text() == "# edited\n"  # linked, not copied
    (toolkit_backends / "embed").mkdir()
    (toolkit_backends / "embed" / "model.py").write_text("# embed\n")
    (toolkit_backends / "vllm" / "model.py").unlink()
    rt = ensure_runtime(cache, source=src, python_version="3.11")
    assert rt.toolkit_backends == ("embed",)
    assert sorted(p.name for p in rt.backend_dir.iterdir()) == ["embed", "python"]


def test_a_backend_named_python_is_refused(tmp_path: Path, toolkit_backends: Path) -> None:
    (toolkit_backends / "python").mkdir()
    (toolkit_backends / "python" / "model.py").write_text("")
    with pytest.raises(RuntimeSetupError, match="shadow Triton's Python backend"):
        ensure_runtime(tmp_path / "cache", source=fake_site(tmp_path), python_version="3.11")


def test_half_installed_leftovers_are_never_taken_for_a_runtime(tmp_path: Path, toolkit_backends: Path) -> None:
    src, cache = fake_site(tmp_path), tmp_path / "cache"
    # What an interrupted older install could leave: the real name without a marker, and a stage.
    (cache / "triton-2.51.0" / "pytriton" / "tritonserver" / "bin").mkdir(parents=True)
    (cache / "triton-2.51.0" / "pytriton" / "tritonserver" / "bin" / "tritonserver").write_text("truncated")
    (cache / ".stage-triton-2.51.0-dead").mkdir()
    assert find_runtime(cache) is None
    rt = ensure_runtime(cache, source=src, python_version="3.11")
    assert rt.server_bin.read_text() == "#!/bin/sh\n"
    assert (rt.root / MARKER).is_file()
    assert not list(cache.glob(".stage-*"))


def test_concurrent_installs_produce_one_complete_runtime(tmp_path: Path, toolkit_backends: Path) -> None:
    src, cache = fake_site(tmp_path), tmp_path / "cache"
    results, errors = [], []

    def worker() -> None:
        try:
            results.append(ensure_runtime(cache, source=src, python_version="3.11"))
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(results) == 8
    assert sorted(p.name for p in cache.iterdir()) == [".install.lock", "backends", "triton-2.51.0"]
    assert sorted(p.name for p in backend_root(cache).iterdir()) == ["python", "vllm"]


def test_missing_nvidia_pytriton_says_what_to_install(tmp_path: Path) -> None:
    # A real interpreter in which `pytriton` is blocked the way Python documents: sys.modules[name] = None.
    code = (
        "import sys\n"
        "sys.modules['pytriton'] = None\n"
        "from tritonpkg.runtime import ensure_runtime\n"
        "from tritonpkg.errors import RuntimeSetupError\n"
        "try:\n"
        "    ensure_runtime(sys.argv[1])\n"
        "except RuntimeSetupError as exc:\n"
        "    print(exc.render())\n"
    )
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "cache")], capture_output=True, text=True,
                         timeout=60, check=False)
    assert "nvidia-pytriton is not installed" in out.stdout, out.stderr
    assert "pip install -e '.[runtime]'" in out.stdout
    assert not (tmp_path / "cache").exists()
