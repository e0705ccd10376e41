"""`tritonpkg package` with plugins: lock entries read from the wheel's metadata, bundled wheels, and
the refusals (wrong distribution, missing entry-point group, a requirement that moves a pin)."""

from __future__ import annotations

import io
import json
import tarfile

import pytest

from tests.support.specs import HOOKS, custom_spec
from tests.support.wheels import make_wheel
from tritonpkg.errors import PackageError
from tritonpkg.plugins import recorded_plugins
from tritonpkg.repository import LOCK_NAME, package_spec
from tritonpkg.spec import load_spec

GROUP = "vllm.logits_processors"
EP = {GROUP: {"demo": "demo_plugin:Processor"}, "console_scripts": {"demo": "demo_plugin:main"}}


def _spec(write_spec, tmp_path, plugins, **wheel_kw):
    make_wheel(tmp_path / "spec", **wheel_kw)
    return load_spec(write_spec(custom_spec(1, plugins=plugins), extra_files={"hooks.py": HOOKS}))


def test_lock_records_name_version_wheel_sha_and_entry_points(write_spec, tmp_path):
    spec = _spec(write_spec, tmp_path, [{"name": "demo_plugin", "wheel": "demo_plugin-0.1.0-py3-none-any.whl"},
                                        {"name": "preinstalled-plugin"}],
                 requires=("torch>=2", "regex"), entry_points=EP)
    package_spec(spec, tmp_path / "r", archive=tmp_path / "m.tar.gz")
    lock = json.loads((tmp_path / "r" / LOCK_NAME).read_text())
    plugins = lock["models"]["double"]["versions"]["1"]["plugins"]
    wheel = (tmp_path / "spec" / "demo_plugin-0.1.0-py3-none-any.whl").read_bytes()
    import hashlib
    assert plugins == [
        {"name": "demo-plugin", "version": "0.1.0", "wheel": "demo_plugin-0.1.0-py3-none-any.whl",
         "sha256": hashlib.sha256(wheel).hexdigest(), "entry_point_group": GROUP, "entry_points": EP,
         "requires_dist": ["torch>=2", "regex"]},
        {"name": "preinstalled-plugin", "version": None, "wheel": None, "sha256": None,
         "entry_point_group": GROUP, "entry_points": {}, "requires_dist": []},
    ]
    with tarfile.open(tmp_path / "m.tar.gz") as tar:
        assert tar.extractfile("wheels/demo_plugin-0.1.0-py3-none-any.whl").read() == wheel
        archived_lock = json.load(io.BytesIO(tar.extractfile(f"repository/{LOCK_NAME}").read()))
    assert [r.wheel for r in recorded_plugins(archived_lock)] == ["demo_plugin-0.1.0-py3-none-any.whl", None]


@pytest.mark.parametrize(
    ("declared", "wheel_kw", "field", "message"),
    [
        ({"name": "other"}, {}, "plugins[0].name", "is distribution 'demo-plugin', not 'other'"),
        ({"name": "demo-plugin", "entry_point_group": "vllm.general_plugins"}, {},
         "plugins[0].entry_point_group", "no entry point in group 'vllm.general_plugins'"),
        ({"name": "demo-plugin"}, {"requires": ("torch<2",)}, "plugins[0].wheel",
         "'torch<2' needs torch<2 but the runtime has torch 2.13.0"),
        ({"name": "demo-plugin"}, {"requires": ("vllm>=0.40",)}, "plugins[0].wheel", "vllm>=0.40"),
    ],
)
def test_package_refuses_a_plugin_that_does_not_fit(write_spec, tmp_path, declared, wheel_kw, field, message):
    spec = _spec(write_spec, tmp_path, [{**declared, "wheel": "demo_plugin-0.1.0-py3-none-any.whl"}],
                 entry_points=EP, **wheel_kw)
    with pytest.raises(PackageError) as err:
        package_spec(spec, tmp_path / "r")
    assert err.value.field == field and message in err.value.message
    assert not (tmp_path / "r").exists()


def test_package_names_an_unreadable_wheel(write_spec, tmp_path):
    (tmp_path / "spec").mkdir()
    (tmp_path / "spec" / "x-1-py3-none-any.whl").write_bytes(b"PK-not-really")
    spec = load_spec(write_spec(custom_spec(1, plugins=[{"name": "x", "wheel": "x-1-py3-none-any.whl"}]),
                                extra_files={"hooks.py": HOOKS}))
    with pytest.raises(PackageError, match=r"plugins\[0\].wheel: not a wheel"):
        package_spec(spec, tmp_path / "r")
