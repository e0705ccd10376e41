"""A deploy builds its release once: the spec loaded once, its models built once and written once, whatever the
plan compares (the live unit's I/O schema for auto, the adapter comparison) taken from the built files."""

from __future__ import annotations

import shutil
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.unit.test_deploy_executor import Recorder
from tritonpkg.deploy import gate
from tritonpkg.deploy.adapters import AdapterFacts, read_facts
from tritonpkg.deploy.executor import Executor, plan_release
from tritonpkg.deploy.release import build, release_from
from tritonpkg.deploy.state import StateStore

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "sentiment-custom"
COUNTED = ("load_spec", "build_models", "package_spec")


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """How often each of COUNTED ran, wherever it was imported under its own name (each call goes through)."""
    import tritonpkg.repository.build
    import tritonpkg.repository.package
    import tritonpkg.spec

    counts: Counter[str] = Counter()
    originals = {"load_spec": tritonpkg.spec.load_spec, "build_models": tritonpkg.repository.build.build_models,
                 "package_spec": tritonpkg.repository.package.package_spec}

    def counting(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kw: Any) -> Any:
            counts[name] += 1
            return fn(*args, **kw)
        return call

    for module in [m for n, m in list(sys.modules.items()) if n.startswith("tritonpkg") and m is not None]:
        for name, fn in originals.items():
            if getattr(module, name, None) is fn:
                monkeypatch.setattr(module, name, counting(name, fn))
    return counts


def example(tmp_path: Path, version: int) -> Path:
    folder = tmp_path / f"sentiment-v{version}"
    shutil.copytree(EXAMPLE, folder)
    spec = folder / "tritonpkg.yaml"
    spec.write_text(spec.read_text().replace("version: 1\n", f"version: {version}\n"))
    return folder


def test_a_deploy_loads_its_spec_once_builds_once_and_writes_once(tmp_path: Path, calls: Counter[str]) -> None:
    store = StateStore(tmp_path / "s.db")
    ex = Executor(store, Recorder(), dwell_s=0, limits=gate.Limits(min_requests=0))
    for version in (1, 2):  # the first onto nothing, the second against a live unit (auto compares the I/O)
        calls.clear()
        out = ex.deploy(release_from(example(tmp_path, version), tmp_path / "work"))
        assert out.ok, out.error
        assert dict(calls) == {"load_spec": 1, "build_models": 1, "package_spec": 1}, version
    assert out.strategy == "red-black" and "compatible" in out.reason
    written = tmp_path / "work" / "releases" / "sentiment-v2" / "repository"
    assert (written / "sentiment" / "2" / "model.py").is_file() and (written / "tritonpkg.lock.json").is_file()


def test_the_plan_and_the_build_take_the_files_built_in_memory(tmp_path: Path, calls: Counter[str]) -> None:
    release = release_from(example(tmp_path, 1), tmp_path / "work")
    assert not release.built and not release.repository.exists()
    plan_release(StateStore(tmp_path / "s.db"), release)
    facts = release.adapter_facts
    assert isinstance(facts, AdapterFacts) and not facts.lora and "lexicon.json" in facts.rest
    built = build(release)
    assert built.built and build(built) is built  # written once
    assert built.adapter_facts == facts == read_facts(built.repository, "sentiment", 1)  # the files as written
    assert release_from(built.repository, tmp_path / "work").adapter_facts == facts  # a packaged one: read once
    assert dict(calls) == {"load_spec": 1, "build_models": 1, "package_spec": 1}
    assert built.schema_ is not None and [t.name for t in built.schema_.inputs] == ["TEXT"]
