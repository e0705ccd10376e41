"""`tritonpkg serve` with Triton's options, against the real Triton and the Python-backend sentiment example:
explicit model control (one named model loads, the other stays absent, then the admin API loads and unloads
with the run's key), the options reaching tritonserver's command line, metrics off, an explicit --openai-port,
and start-up that follows Triton's progress: a slow load is waited for without a timeout, a failed load ends
the start at once naming the model, and --timeout is an upper bound."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml

from tests.support.cli import read_json_document, tritonpkg
from tests.support.paths import EXAMPLES
from tests.support.procs import group_pids
from tests.support.triton_repos import BROKEN, make_repo
from tritonpkg.proc.group import own_group, stop_popen

pytestmark = pytest.mark.integration

SLOW = """
import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        time.sleep({seconds})

    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor("Y", pb_utils.get_input_tensor_by_name(r, "X").as_numpy())])
                for r in requests]
"""


@pytest.fixture(scope="module")
def two_models(tmp_path_factory) -> Path:
    """The sentiment example packaged twice into one repository: `sentiment` and `sentiment_b`."""
    from tritonpkg.repository import package_spec
    from tritonpkg.spec import load_spec

    root = tmp_path_factory.mktemp("explicit")
    repo = root / "repository"
    for name in ("sentiment", "sentiment_b"):
        folder = root / name
        shutil.copytree(EXAMPLES / "sentiment-custom", folder)
        spec = yaml.safe_load((folder / "tritonpkg.yaml").read_text())
        spec["name"] = name
        (folder / "tritonpkg.yaml").write_text(yaml.safe_dump(spec))
        package_spec(load_spec(folder), repo)
    return repo


def call(method: str, url: str, body: object = None, headers: dict[str, str] | None = None) -> tuple[int, dict]:
    data = json.dumps(body).encode() if body is not None else (b"" if method == "POST" else None)
    req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json",
                                                                          **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            text = resp.read()
            return resp.status, json.loads(text) if text else {}
    except urllib.error.HTTPError as exc:
        text = exc.read()
        return exc.code, json.loads(text) if text else {}


def start_serve(env: dict[str, str], *args: str) -> tuple[subprocess.Popen, dict]:
    proc = subprocess.Popen(tritonpkg("serve", *args, "--http-port", "0", "--grpc-port", "0", "--metrics-port", "0",
                                      "--json"),
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **own_group())
    try:
        return proc, read_json_document(proc.stdout)
    except BaseException:
        stop_popen(proc, grace=20)
        raise AssertionError(f"serve did not start: {proc.stderr.read()}") from None


def run_serve(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """`tritonpkg serve ARGS` expected to fail at start-up (bounded here at 120 s)."""
    return subprocess.run(tritonpkg("serve", *args, "--http-port", "0", "--grpc-port", "0", "--metrics-port", "0"),
                          env=env, capture_output=True, text=True, timeout=120, check=False)


def stop_serve(proc: subprocess.Popen, info: dict) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        assert proc.wait(timeout=40) == 0, proc.stderr.read()
    finally:
        stop_popen(proc, grace=5)
    assert group_pids(info["pid"]) == []


def triton_argv(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")


def ready(info: dict, model: str) -> int:
    return call("GET", f"{info['http_url']}/v2/models/{model}/ready")[0]


def test_explicit_mode_loads_the_named_model_and_the_admin_api_loads_and_unloads(cli_env, two_models) -> None:
    proc, info = start_serve(cli_env, str(two_models), "--model-control-mode", "explicit", "--load-model", "sentiment",
                             "--backend-config", "python,shm-default-byte-size=4194304", "--log-verbose", "1",
                             "--triton-arg=--log-info=true")
    try:
        assert info["model_control_mode"] == "explicit"
        assert [m["name"] for m in info["models"]] == ["sentiment"]
        assert ready(info, "sentiment") == 200 and ready(info, "sentiment_b") != 200
        argv = triton_argv(info["pid"])
        assert {"--model-control-mode=explicit", "--load-model=sentiment", "--log-verbose=1", "--log-info=true",
                "--backend-config=python,shm-default-byte-size=4194304"} <= set(argv)
        url, key = info["http_url"], {"admin-key": info["admin_key"]}
        assert call("POST", f"{url}/v2/repository/models/sentiment_b/load")[0] == 403  # the key is required
        status, body = call("POST", f"{url}/v2/repository/models/sentiment_b/load", headers=key)
        assert status == 200, body
        assert ready(info, "sentiment_b") == 200
        answer = call("POST", f"{url}/v2/models/sentiment_b/infer",
                      {"inputs": [{"name": "TEXT", "shape": [1], "datatype": "BYTES", "data": ["a great answer"]}]})
        assert answer[0] == 200 and answer[1]["outputs"], answer
        status, body = call("POST", f"{url}/v2/repository/models/sentiment/unload", headers=key)
        assert status == 200, body
        deadline = time.monotonic() + 30
        while ready(info, "sentiment") == 200 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert ready(info, "sentiment") != 200
        states = {m["name"]: m.get("state") for m in call("POST", f"{url}/v2/repository/index", headers=key)[1]}
        assert states["sentiment_b"] == "READY" and states["sentiment"] != "READY"
    finally:
        stop_serve(proc, info)


def test_no_metrics_turns_tritons_metrics_off_and_the_merged_endpoint_says_so(cli_env, two_models) -> None:
    proc, info = start_serve(cli_env, str(two_models), "--no-metrics")
    try:
        assert info["triton_metrics_url"] is None and "--allow-metrics=false" in triton_argv(info["pid"])
        with urllib.request.urlopen(info["metrics_url"], timeout=10) as resp:
            text = resp.read().decode()
        assert 'tritonpkg_metrics_source_served{source="triton"} 0' in text
        assert 'tritonpkg_metrics_source_served{source="vllm"} 1' in text
        assert "nv_inference_request_success" not in text
    finally:
        stop_serve(proc, info)


def test_an_explicit_openai_port_turns_the_openai_api_on(cli_env, two_models) -> None:
    proc, info = start_serve(cli_env, str(two_models), "--openai-port", "0")
    try:
        assert info["openai_url"], info
        with urllib.request.urlopen(info["openai_url"] + "/models", timeout=10) as resp:
            assert resp.status == 200
    finally:
        stop_serve(proc, info)


def test_start_up_waits_for_a_slow_load_without_a_timeout_and_timeout_bounds_it(cli_env, tmp_path) -> None:
    repo = make_repo(tmp_path / "repo", {"slow": SLOW.format(seconds=6)})
    proc, info = start_serve(cli_env, str(repo))
    try:
        assert [m["name"] for m in info["models"]] == ["slow"] and info["startup_seconds"] >= 6
    finally:
        stop_serve(proc, info)
    began = time.monotonic()
    out = run_serve(cli_env, str(repo), "--timeout", "2")
    assert out.returncode == 1 and time.monotonic() - began < 30
    assert "not ready within 2 s" in out.stderr and "still loading: slow" in out.stderr, out.stderr


def test_a_failed_load_ends_start_up_at_once_naming_the_model_and_reason(cli_env, tmp_path) -> None:
    """Triton itself exits only once every other model finished loading (here: 40 s); serve stops at the
    failure Triton logged."""
    repo = make_repo(tmp_path / "repo", {"slow": SLOW.format(seconds=40), "broken": BROKEN})
    began = time.monotonic()
    out = run_serve(cli_env, str(repo))
    seconds = time.monotonic() - began
    print(f"a failed load ended `tritonpkg serve` after {seconds:.1f} s (the slow model needs 40 s)")
    assert out.returncode == 1, out.stderr
    assert "model 'broken' version 1 failed to load" in out.stderr
    assert "model.py refuses to start: missing weights" in out.stderr
    assert seconds < 30, out.stderr
