"""The server environment: the library path and PATH order the stub needs (see ENVIRONMENT.md)."""

from __future__ import annotations

import os
import sys
import sysconfig
from pathlib import Path

from tritonpkg.runtime import Runtime, server_environment


def _rt(tmp_path: Path) -> Runtime:
    return Runtime(version="2.51.0", server_bin=tmp_path / "bin" / "tritonserver", backend_dir=tmp_path / "b",
                   lib_dirs=[tmp_path / "libs"], root=tmp_path, python_version="3.11",
                   python_stub=tmp_path / "stub")


def test_libdir_first_then_runtime_libs_then_existing(tmp_path: Path) -> None:
    base = {"LD_LIBRARY_PATH": f"/opt/x:{tmp_path / 'libs'}", "PATH": "/usr/bin:/bin", "KEEP": "1"}
    env = server_environment(_rt(tmp_path), base)
    ld = env["LD_LIBRARY_PATH"].split(os.pathsep)
    assert ld == [sysconfig.get_config_var("LIBDIR"), str(tmp_path / "libs"), "/opt/x"]
    assert env["KEEP"] == "1"
    assert base["PATH"] == "/usr/bin:/bin"  # the caller's mapping is not modified


def test_path_starts_with_this_interpreters_python3(tmp_path: Path) -> None:
    env = server_environment(_rt(tmp_path), {"PATH": "/usr/bin"})
    first = env["PATH"].split(os.pathsep)[0]
    assert first == str(Path(sys.executable).parent)
    assert (Path(first) / "python3").exists()
    assert env["PATH"].endswith("/usr/bin")


def test_defaults_to_os_environ_and_sets_no_python_variables(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("TRITONPKG_PROBE", "yes")
    monkeypatch.delenv("LD_LIBRARY_PATH", raising=False)
    env = server_environment(_rt(tmp_path))
    assert env["TRITONPKG_PROBE"] == "yes"
    assert env["LD_LIBRARY_PATH"].endswith(str(tmp_path / "libs"))
    # The stub's interpreter is isolated: these would have no effect, so they are not invented.
    assert not {"PYTHONNOUSERSITE", "PYTHONUTF8"} & (set(env) - set(os.environ))
