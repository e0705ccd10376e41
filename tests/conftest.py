"""Fixtures every test directory may use. Each is lazy: a fixture costs only the tests that ask for it, so
a unit test that needs no server, weights or built runtime runs with none of them present. Helpers live in
tests/support/."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

from tests.support import schedule, skip_guard
from tests.support.engine_layout import CPU_LAYOUT, GPU_LAYOUT, VLLM_MP
from tests.support.validate_repos import FIXTURE_BACKENDS
from tritonpkg.devtools.s3 import MotoS3

WriteSpec = Callable[..., Path]


@pytest.fixture
def write_spec(tmp_path: Path) -> WriteSpec:
    """Write a spec (dict) as tritonpkg.yaml in its own folder (with `extra_files`, name -> text) and
    return the path."""

    def _write(data: dict[str, object], folder: str = "spec", extra_files: dict[str, str] | None = None) -> Path:
        d = tmp_path / folder
        d.mkdir(parents=True, exist_ok=True)
        for name, text in (extra_files or {}).items():
            (d / name).write_text(text)
        path = d / "tritonpkg.yaml"
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        return path

    return _write


@pytest.fixture(autouse=True)
def _toolkit_environment_is_left_as_found() -> Iterator[None]:
    """A test that sets a TRITONPKG_* variable without monkeypatch changes every later test's toolkit (a leaked
    TRITONPKG_BACKENDS made 150 later tests read the validate fixtures' backends): the variables are put back
    and the test that changed them fails, naming them."""
    before = {k: v for k, v in os.environ.items() if k.startswith("TRITONPKG_")}
    yield
    after = {k: v for k, v in os.environ.items() if k.startswith("TRITONPKG_")}
    if after != before:
        for key in set(after) - set(before):
            del os.environ[key]
        os.environ.update(before)
        changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
        pytest.fail(f"the test left the environment changed: {', '.join(changed)} (use monkeypatch)")


@pytest.fixture
def fixture_backends(monkeypatch: pytest.MonkeyPatch) -> None:
    """validate reads the fixture backends instead of the toolkit's backends/vllm (which imports vLLM) and
    never asks a live vLLM."""
    monkeypatch.setenv("TRITONPKG_BACKENDS", str(FIXTURE_BACKENDS))
    monkeypatch.setenv("TRITONPKG_NO_LIVE_VLLM", "1")


@pytest.fixture(scope="module")
def vllm_cpu_layout() -> Iterator[None]:
    """vLLM's CPU layout (the worker in a process of its own) for the engines a module starts."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(VLLM_MP, CPU_LAYOUT)
        yield


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MotoS3]:
    """A real S3 API (moto's server on loopback), one per test session."""
    with MotoS3.start(tmp_path_factory.mktemp("moto") / "moto.log") as server:
        yield server


@pytest.fixture
def s3_env(s3_server: MotoS3, monkeypatch: pytest.MonkeyPatch) -> MotoS3:
    """The server, with this process's AWS environment pointing at it for the test."""
    for key, value in s3_server.env.items():
        monkeypatch.setenv(key, value)
    for key in ("AWS_PROFILE", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(key, raising=False)
    return s3_server


_GROUPS = pytest.StashKey[Path | None]()


def _workers_share(config: pytest.Config) -> bool:
    """This process runs or controls a `--dist loadgroup` run (tests/support/schedule.py)."""
    return bool(getattr(config.option, "loadgroup", False)) or getattr(config.option, "dist", "no") == "loadgroup"


def pytest_configure(config: pytest.Config) -> None:
    os.environ.setdefault(VLLM_MP, GPU_LAYOUT)  # tests/support/engine_layout.py; 1 gives the CPU layout throughout
    if _workers_share(config) and "PYTEST_XDIST_WORKER" not in os.environ:
        config.stash[_GROUPS] = schedule.prepare_controller()


def pytest_unconfigure(config: pytest.Config) -> None:
    if (folder := config.stash.get(_GROUPS, None)) is not None:
        shutil.rmtree(folder, ignore_errors=True)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On an xdist worker of a `--dist loadgroup` run: one group per module or shared server, longest first."""
    if _workers_share(config) and "PYTEST_XDIST_WORKER" in os.environ:
        schedule.publish(items, config.rootpath)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    return schedule.GroupScheduling(config, log) if _workers_share(config) else None


_GUARD = skip_guard.SkipGuard(skip_guard.load_allowed()) if skip_guard.enabled() else None


def pytest_collection_finish(session: pytest.Session) -> None:
    if _GUARD is not None:
        _GUARD.collected.update(item.nodeid for item in session.items)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node: object, ids: list[str]) -> None:
    """An xdist controller collects nothing itself: its workers' collections stand for it."""
    if _GUARD is not None:
        _GUARD.collected.update(ids)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if _GUARD is not None and report.skipped and not hasattr(report, "wasxfail"):
        longrepr = report.longrepr
        reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
        _GUARD.record(report.nodeid, reason)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _GUARD is not None and _GUARD.violations() and exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _GUARD is not None and (found := _GUARD.violations()):
        terminalreporter.section("skip guard: tests that must run on these machines did not", red=True)
        for line in found:
            terminalreporter.line(line)
