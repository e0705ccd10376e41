"""validate's plugin rules: each recorded entry point loads in the runtime interpreter and implements the
pinned vLLM runner's logits-processor interface. Broken plugins go into a separate venv layered over the
project's (the project's .venv, whose every vLLM engine loads its entry points, is never changed)."""

from __future__ import annotations

import importlib.util
import os
import sysconfig
from pathlib import Path

import pytest

from tests.support.specs import HOOKS, custom_spec
from tests.support.wheels import make_venv, make_wheel
from tritonpkg import compat
from tritonpkg.plugins import install_bundled
from tritonpkg.repository import package_spec
from tritonpkg.spec import load_spec
from tritonpkg.validate import validate_repository
from tritonpkg.validate.plugin_probe import EntryPointSpec, check_entry_points

if importlib.util.find_spec("vllm") is None:  # found, not imported: the checks import it in a subprocess
    # scripts/setup.sh always installs vLLM: CI must never pass by skipping these checks
    (pytest.fail if os.environ.get("CI") else pytest.skip)("vLLM is not installed (scripts/setup.sh installs it)",
                                                           allow_module_level=True)
GROUP = "vllm.logits_processors"
V1 = "from vllm.v1.sample.logits_processor import LogitsProcessor as B\n"
SOURCE = V1 + """
class Good(B):
    def __init__(self, vllm_config, device, is_pin_memory): pass
    def update_state(self, batch_update): pass
    def apply(self, logits): return logits
    def is_argmax_invariant(self): return False

class NoArgmax(B):
    def __init__(self, vllm_config, device, is_pin_memory): pass
    def update_state(self, batch_update): pass
    def apply(self, logits): return logits

class WrongApply(Good):
    def apply(self, logits, ctx, extra): return logits

class NotAProcessor:
    pass
"""
POINTS = {"good": "bad_procs:Good", "no_argmax": "bad_procs:NoArgmax", "wrong_apply": "bad_procs:WrongApply",
          "plain": "bad_procs:NotAProcessor", "missing": "bad_procs_nowhere:Thing"}


@pytest.fixture(scope="module")
def overlay_python(tmp_path_factory) -> str:
    root = tmp_path_factory.mktemp("overlay")
    python = make_venv(root / "venv", overlay=Path(sysconfig.get_path("purelib")))
    make_wheel(root / "wheels", "bad-procs", entry_points={GROUP: POINTS}, module_source=SOURCE)
    install_bundled(root / "wheels", python=python)
    return python


def test_interface_checks_for_v1_and_v2_runners(overlay_python):
    specs = [EntryPointSpec(GROUP, n, v, "v1", "t1") for n, v in sorted(POINTS.items())]
    adapter = "tritonpkg_logits.vllm_adapter:ConstraintLogitsProcessor"
    specs += [EntryPointSpec(GROUP, "tritonpkg_constraints", adapter, "v2", "t1"),
              EntryPointSpec(GROUP, "good", "bad_procs:Good", "v2", "t1"),
              EntryPointSpec(GROUP, "good", "bad_procs:Good", "v0-per-request", "t1")]
    got = {(s.name, s.interface): r for s, r in zip(specs, check_entry_points(overlay_python, specs), strict=False)}
    assert got[("good", "v1")].ok and got[("tritonpkg_constraints", "v2")].ok
    assert got[("no_argmax", "v1")].interface_errors == ("leaves abstract: is_argmax_invariant",)
    assert "apply() cannot take 1 argument(s)" in got[("wrong_apply", "v1")].interface_errors[0]
    assert ("is not a subclass of vllm.v1.sample.logits_processor.LogitsProcessor"
            in got[("plain", "v1")].interface_errors[0])
    missing = got[("missing", "v1")].load_error
    assert "ModuleNotFoundError" in missing and "bad_procs_nowhere" in missing
    v2 = " ".join(got[("good", "v2")].interface_errors)
    assert "not a subclass of vllm.v1.worker.gpu.sample.logits_processor.interface.LogitsProcessor" in v2
    assert "no entry-point processors" in got[("good", "v0-per-request")].interface_errors[0]


def _packaged(write_spec, tmp_path, plugins) -> Path:
    spec = load_spec(write_spec(custom_spec(1, plugins=plugins), extra_files={"hooks.py": HOOKS}))
    package_spec(spec, tmp_path / "repo")
    return tmp_path / "repo"


def test_validate_reports_each_broken_entry_point_of_an_installed_plugin(write_spec, tmp_path, overlay_python,
                                                                         monkeypatch):
    monkeypatch.setattr("tritonpkg.plugins.target.default_python", lambda: overlay_python)
    make_wheel(tmp_path / "spec", "bad-procs", entry_points={GROUP: POINTS}, module_source=SOURCE)
    repo = _packaged(write_spec, tmp_path, [{"name": "bad-procs", "wheel": "bad_procs-0.1.0-py3-none-any.whl"},
                                            {"name": "not-there"}])
    report = validate_repository(repo)
    mine = [p for p in report.problems if p.rule.startswith("plugins.")]
    text = "\n".join(f"{p.rule} {p.field}: {p.message} (expected {p.expected})" for p in mine)
    assert compat.logits_processor_interface(compat.pinned_vllm(), "cpu") == "v1"
    assert sorted(p.rule for p in mine) == ["plugins.interface", "plugins.interface", "plugins.interface",
                                            "plugins.load", "plugins.not-installed"], text
    assert "plugins.bad-procs: bad_procs:NoArgmax leaves abstract: is_argmax_invariant" in text
    assert "bad_procs:NotAProcessor is not a subclass of vllm.v1.sample.logits_processor.LogitsProcessor" in text
    assert "bad_procs:WrongApply apply() cannot take 1 argument(s)" in text
    assert "entry point missing = bad_procs_nowhere:Thing does not load" in text
    assert "plugins.not-there: not-there is declared without a wheel and is not installed" in text
    assert "update_state/apply/is_argmax_invariant" in text
    assert not report.ok and all(p.file == "tritonpkg.lock.json" for p in mine)


def test_validate_accepts_the_installed_logits_ext_and_flags_an_uninstalled_bundled_plugin(write_spec, tmp_path):
    if importlib.util.find_spec("tritonpkg_logits") is None:
        (pytest.fail if os.environ.get("CI") else pytest.skip)(
            "logits_ext is not installed (scripts/setup.sh builds it)")
    make_wheel(tmp_path / "spec", "later-plugin", entry_points={GROUP: {"x": "later_plugin:X"}})
    repo = _packaged(write_spec, tmp_path, [{"name": "tritonpkg-logits-ext"},
                                            {"name": "later-plugin", "wheel": "later_plugin-0.1.0-py3-none-any.whl"}])
    mine = [p for p in validate_repository(repo).problems if p.rule.startswith("plugins.")]
    assert [(p.rule, p.severity, p.field) for p in mine] == [
        ("plugins.not-installed", "warning", "plugins.later-plugin")], mine
    assert "start-up installs it from wheels/later_plugin-0.1.0-py3-none-any.whl" in mine[0].message


def test_lock_entries_are_checked_without_the_runtime(write_spec, tmp_path, monkeypatch):
    """A release target (or TRITONPKG_NO_LIVE_VLLM) checks the lock alone: a hand-edited entry that
    registers nothing in its group, and a lock from before plugin records."""
    import json

    repo = _packaged(write_spec, tmp_path, [{"name": "tritonpkg-logits-ext"}])
    lock_path = repo / "tritonpkg.lock.json"
    lock = json.loads(lock_path.read_text())
    entry = lock["models"]["double"]["versions"]["1"]
    entry["plugins"] = [{"name": "p", "version": "1", "wheel": "p-1-py3-none-any.whl", "sha256": "0" * 64,
                         "entry_point_group": GROUP, "entry_points": {"console_scripts": {"p": "p:main"}}}]
    lock_path.write_text(json.dumps(lock))
    mine = [p for p in validate_repository(repo, target_release="24.10").problems if p.rule.startswith("plugins.")]
    assert [(p.rule, p.field) for p in mine] == [("plugins.entry-point", "plugins.p")]
    assert "p-1-py3-none-any.whl registers nothing in 'vllm.logits_processors'" in mine[0].message

    entry["plugins"] = ["p-1-py3-none-any.whl"]
    lock_path.write_text(json.dumps(lock))
    monkeypatch.setenv("TRITONPKG_NO_LIVE_VLLM", "1")
    mine = [p for p in validate_repository(repo).problems if p.rule.startswith("plugins.")]
    assert [p.rule for p in mine] == ["plugins.lock"] and "older tritonpkg" in mine[0].message
