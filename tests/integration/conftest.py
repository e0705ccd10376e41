"""Servers shared across modules: one real tritonserver for the Python-backend tests (every Python example and
template packaged into one repository, for the whole session) and one with the vLLM backend (the tiny LLM and
MiniLM) for the modules that only read from it. That one starts at its first user and stops after its last,
and the modules that use it run one after another (where the last of them stood): its engines start once
and never sit idle beside the engines other modules start. Made once too: the tiny LLM's weights, and the
differential corpus's outcomes in the real server."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.differential.corpus import build_cases
from tests.differential.run import Outcome, run_corpus
from tests.support.engine_layout import CPU_LAYOUT, VLLM_MP
from tests.support.mock_stream import add_pythonic_mocks, add_streaming_mock
from tests.support.paths import EXAMPLES
from tests.support.repositories import make_tiny_llm, package_tiny_llm_and_minilm
from tests.support.servers import FIXTURE_EXIT_TIMEOUT_S
from tests.support.shared import Shared
from tritonpkg.deploy.drivers.haproxy import ProxyError, find_haproxy
from tritonpkg.repository import package_spec
from tritonpkg.runtime import Runtime, TritonServer, ensure_runtime
from tritonpkg.spec import load_spec

VLLM_MODELS = ("tiny_llm", "minilm")
SHARED_FIXTURES = ("vllm_server",)
SHARED: dict[str, Shared[Any]] = {}
"""Module fixture name -> the session's shared server behind it."""
LAST_USER: dict[str, str] = {}
"""Module fixture name -> the last test (node id) that uses it: its server stops after that test."""

PYTHON_EXAMPLES = ("sentiment-custom", "reverse-ensemble", "mock-tool-llm")

BATCHED_TOKENIZER: dict[str, Any] = {
    "name": "batched_tokenizer",
    "version": 1,
    "kind": "python",
    "python": {
        "template": "tokenizer",
        "parameters": {"tokenizer": "tokenizer", "add_special_tokens": False},  # copied into the spec's folder
        "max_batch_size": 4,
    },
}
BATCHED_CUSTOM: dict[str, Any] = {
    "name": "double",
    "version": 1,
    "kind": "python",
    "python": {
        "template": "custom",
        "parameters": {"module": "hooks.py"},
        "files": ["hooks.py"],
        "max_batch_size": 8,
        "inputs": [{"name": "X", "data_type": "FP32", "dims": [3]}],
        "outputs": [{"name": "Y", "data_type": "FP32", "dims": [3]}],
    },
}


HOOKS = """
def model(inputs):
    if (inputs["X"] < 0).any():
        raise ValueError("X must be non-negative")
    return {"Y": inputs["X"] * 2}
"""


@pytest.fixture(scope="session")
def python_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("python-repo")
    repo = root / "repository"
    for name in PYTHON_EXAMPLES:
        package_spec(load_spec(EXAMPLES / name), repo)
    for data in (BATCHED_TOKENIZER, BATCHED_CUSTOM):
        folder = root / data["name"]
        folder.mkdir()
        (folder / "hooks.py").write_text(HOOKS)
        shutil.copytree(EXAMPLES / "tiny-llm" / "tokenizer", folder / "tokenizer")
        (folder / "tritonpkg.yaml").write_text(yaml.safe_dump(data))
        package_spec(load_spec(folder), repo)
    add_streaming_mock(root, repo)  # the mock tool LLM, decoupled: its answers stream a token at a time
    add_pythonic_mocks(root, repo)  # pythonic answers, with vLLM's pythonic parser and with none
    return repo


@pytest.fixture(scope="session")
def python_server(python_repo: Path) -> Iterator[TritonServer]:
    with TritonServer(python_repo, runtime=ensure_runtime(), startup_timeout=180,
                      exit_timeout=FIXTURE_EXIT_TIMEOUT_S) as server:
        yield server


@pytest.fixture(scope="session")
def deploy_runtime() -> Runtime:
    """The runtime of the local rollout tests, which also need HAProxy: a missing one skips them, except
    under CI, which must never pass by skipping them (scripts/setup.sh installs it)."""
    try:
        find_haproxy()
    except ProxyError as exc:
        (pytest.fail if os.environ.get("CI") else pytest.skip)(str(exc))
    return ensure_runtime()


@pytest.fixture(scope="module")
def cli_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The environment of a `tritonpkg` child process with a runtime installed in a cache of its own."""
    cache = tmp_path_factory.mktemp("cli-cache")
    env = {**os.environ, "TRITONPKG_CACHE": str(cache), "NO_COLOR": "1", "COLUMNS": "200"}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TRITONPKG_CACHE", str(cache))
        ensure_runtime()
    return env


@pytest.fixture(scope="session")
def tiny_llm_weights(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny LLM's weights (512-token context), made once for every module that serves them unchanged."""
    return make_tiny_llm(tmp_path_factory.mktemp("tiny-llm") / "weights")


@pytest.fixture(scope="session")
def vllm_repo(tmp_path_factory: pytest.TempPathFactory, tiny_llm_weights: Path) -> Path:
    """tiny_llm (target 24.10, metrics on, 16 sequences, 512 batched tokens: the settings bench/vllm_serving.py
    gives `vllm serve`) and minilm, packaged into one repository."""
    return package_tiny_llm_and_minilm(tmp_path_factory.mktemp("vllm-backend"), weights=tiny_llm_weights,
                                       disable_log_stats=False, max_num_seqs=16, max_num_batched_tokens=512)


@pytest.fixture(scope="session")
def vllm_metrics_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the shared server's vLLM engines write their metrics (Prometheus multiprocess mode)."""
    return tmp_path_factory.mktemp("prometheus-multiproc")


@pytest.fixture(scope="session")
def vllm_servers(vllm_repo: Path, vllm_metrics_dir: Path) -> Iterator[Shared[TritonServer]]:
    """Explicit model control (a dead engine can unload its model), both models loaded at start."""
    shared = Shared(lambda: TritonServer(
        vllm_repo, runtime=ensure_runtime(), startup_timeout=600, model_control="explicit",
        exit_timeout=FIXTURE_EXIT_TIMEOUT_S,
        load_models=list(VLLM_MODELS),
        env={"VLLM_CPU_KVCACHE_SPACE": "1", "PROMETHEUS_MULTIPROC_DIR": str(vllm_metrics_dir),
             VLLM_MP: CPU_LAYOUT}))  # vLLM's CPU layout: its modules see the worker process a CPU user gets
    SHARED["vllm_server"] = shared
    yield shared
    shared.release()


@pytest.fixture(scope="module")
def vllm_server(vllm_servers: Shared[TritonServer]) -> TritonServer:
    """The shared Triton + vLLM server, running (started again if a test released it: one that kills an
    engine does)."""
    return vllm_servers.get()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The modules using a shared server move, in their order, to where the last of them was."""
    for name in SHARED_FIXTURES:
        modules: dict[Path, list[pytest.Item]] = {}
        for item in items:
            modules.setdefault(item.path, []).append(item)
        users = [path for path, its in modules.items() if any(name in getattr(i, "fixturenames", ()) for i in its)]
        if len(users) < 2:
            continue
        order: list[pytest.Item] = []
        for path, its in modules.items():
            if path == users[-1]:
                order += [i for user in users for i in modules[user]]
            elif path not in users:
                order += its
        items[:] = order


def pytest_collection_finish(session: pytest.Session) -> None:
    for name in SHARED_FIXTURES:
        users = [item.nodeid for item in session.items if name in getattr(item, "fixturenames", ())]
        if users:
            LAST_USER[name] = users[-1]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """After the last test that uses a shared server is torn down (its module's fixtures too), stop it."""
    yield
    for name, shared in SHARED.items():
        if LAST_USER.get(name) == item.nodeid:
            shared.release()


@pytest.fixture(scope="session")
def corpus_outcomes(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Outcome]]:
    """Every case of tests/differential/corpus.py loaded in one real tritonserver (auto-complete on, Triton's
    default) and validated, once for the modules that judge the outcomes; the cases are under `workdir/cases`."""
    pytest.importorskip("pytriton", reason="the real server comes from nvidia-pytriton (pip install -e '.[runtime]')")
    workdir = tmp_path_factory.mktemp("differential")
    return workdir, run_corpus(build_cases(), workdir)
