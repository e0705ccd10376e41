"""Triton's admin APIs (model repository, logging, trace, shared memory, statistics) answer only to the
per-deployment admin key, on HTTP and gRPC, in every tritonserver the toolkit starts; inference, metadata,
model config and health stay open. Real tritonserver on examples/sentiment-custom (a Python model: seconds).

Before the fix `POST /v2/logging` and gRPC `RepositoryModelLoad` from anyone answered 200 / loaded."""

from __future__ import annotations

import json
import os
import shlex
import stat
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.support.paths import EXAMPLES

pytestmark = pytest.mark.integration

MODEL = "sentiment"


def call(method: str, url: str, body: dict | None = None, headers: dict | None = None) -> tuple[int, dict]:
    data = json.dumps(body).encode() if body is not None else (b"" if method == "POST" else None)
    req = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            status, text = resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        status, text = exc.code, exc.read()
    return status, json.loads(text) if text else {}


def infer(http_url: str) -> dict:
    body = {"inputs": [{"name": "TEXT", "shape": [1], "datatype": "BYTES", "data": ["a great answer"]}]}
    status, answer = call("POST", f"{http_url}/v2/models/{MODEL}/infer", body)
    assert status == 200, answer
    return {o["name"]: o["data"] for o in answer["outputs"]}


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> Path:
    from tritonpkg.repository import package_spec
    from tritonpkg.spec import load_spec

    root = tmp_path_factory.mktemp("admin") / "repository"
    package_spec(load_spec(EXAMPLES / "sentiment-custom"), root)
    return root


@pytest.fixture(scope="module")
def server(repo):
    """Explicit model control with nothing loaded: a load that gets through is visible."""
    from tritonpkg.runtime import TritonServer, ensure_runtime

    with TritonServer(repo, runtime=ensure_runtime(), model_control="explicit", startup_timeout=120) as srv:
        yield srv


def test_every_admin_api_is_refused_over_http_without_the_key(server) -> None:
    url = server.http_url
    refused = [("POST", "/v2/logging", {"log_verbose_level": 1}), ("GET", "/v2/logging", None),
               ("POST", "/v2/repository/index", None), ("POST", f"/v2/repository/models/{MODEL}/load", None),
               ("GET", "/v2/models/stats", None), ("GET", "/v2/trace/setting", None),
               ("POST", "/v2/trace/setting", {"trace_level": ["TIMESTAMPS"]}),
               ("GET", "/v2/systemsharedmemory/status", None),
               ("POST", "/v2/systemsharedmemory/region/r/register", {"key": "/k", "offset": 0, "byte_size": 8}),
               ("GET", "/v2/cudasharedmemory/status", None)]
    for method, path, body in refused:
        status, answer = call(method, url + path, body)
        assert status == 403, (method, path, status, answer)
        assert "admin-key" in answer["error"], answer
    for method, path, body in refused[:2]:
        assert call(method, url + path, body, {"admin-key": "not-the-key-0123456789"})[0] == 403

    # nothing changed behind the refusals: verbose logging is still off, nothing was loaded or registered
    status, settings = call("GET", url + "/v2/logging", headers=server.admin_headers)
    assert status == 200 and settings["log_verbose_level"] == 0
    assert server.ready_models() == []
    status, regions = call("GET", url + "/v2/systemsharedmemory/status", headers=server.admin_headers)
    assert status == 200 and regions == []


def test_the_key_opens_them_and_inference_stays_open(server) -> None:
    url = server.http_url
    status, settings = call("POST", url + "/v2/logging", {"log_verbose_level": 0}, server.admin_headers)
    assert status == 200 and settings["log_verbose_level"] == 0
    assert server.load_model(MODEL) == (True, "")  # the toolkit's own model control sends the key
    try:
        assert call("GET", f"{url}/v2/models/{MODEL}/stats", headers=server.admin_headers)[0] == 200
        for path in ("/v2/health/live", "/v2/health/ready", f"/v2/models/{MODEL}/ready", f"/v2/models/{MODEL}",
                     f"/v2/models/{MODEL}/config", "/v2"):
            assert call("GET", url + path)[0] == 200, path
        assert infer(url)["LABEL"] == ["positive"]
    finally:
        server.unload_model(MODEL)


def test_grpc_model_control_and_logging_need_the_key(server) -> None:
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException

    from tritonpkg.runtime import admin

    client = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        with pytest.raises(InferenceServerException, match="restricted"):
            client.load_model(MODEL)
        assert not client.is_model_ready(MODEL)
        with pytest.raises(InferenceServerException, match="restricted"):
            client.update_log_settings({"log_verbose_level": 1})
        with pytest.raises(InferenceServerException, match="restricted"):
            client.get_inference_statistics()
        with pytest.raises(InferenceServerException, match="restricted"):
            client.get_model_repository_index()
        with pytest.raises(InferenceServerException, match="restricted"):
            client.load_model(MODEL, headers={"triton-grpc-protocol-admin-key": "not-the-key-0123456789"})

        key = admin.grpc_headers(server.admin_key)
        client.load_model(MODEL, headers=key)
        assert client.is_model_ready(MODEL)  # health and metadata stay open
        assert client.get_model_metadata(MODEL).name == MODEL
        inp = grpcclient.InferInput("TEXT", [1], "BYTES")
        import numpy as np

        inp.set_data_from_numpy(np.array([b"a great answer"], dtype=object))
        assert client.infer(MODEL, [inp]).as_numpy("LABEL")[0] == b"positive"
        client.unload_model(MODEL, headers=key)
    finally:
        client.close()


def test_the_serve_stack_stores_its_key_0600_and_restricts_triton(repo, tmp_path) -> None:
    from tritonpkg.serve.plan import StartupOptions
    from tritonpkg.serve.stack import ServingStack

    state = tmp_path / "state"
    options = StartupOptions(source=repo, http_port=0, grpc_port=0, metrics_port=0, openai=False,
                             state_dir=state, startup_timeout=120)
    with ServingStack(options) as stack:
        info = stack.endpoints()
        key_file = Path(info["admin_key_file"])
        assert key_file.read_text() == info["admin_key"] == stack.server.admin_key
        assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
        assert stat.S_IMODE(key_file.parent.stat().st_mode) == 0o700
        assert key_file.is_relative_to(state)
        assert call("POST", info["http_url"] + "/v2/logging", {"log_verbose_level": 1})[0] == 403
        assert call("GET", info["http_url"] + "/v2/logging", headers={"admin-key": info["admin_key"]})[0] == 200
        assert infer(info["http_url"])["LABEL"] == ["positive"]
        assert info["models"] == [{"name": MODEL, "version": "1", "state": "READY"}]
    assert not key_file.exists()  # the key goes with the stack
    assert sorted(p.name for p in state.iterdir()) == ["prometheus-multiproc"]


def test_a_key_of_characters_tritons_option_cannot_carry_is_refused(repo) -> None:
    from tritonpkg.errors import RuntimeSetupError
    from tritonpkg.runtime import TritonServer

    for bad in ("short", "a" * 20 + ":logging", "a" * 20 + "=x", "a" * 20 + ",trace", "a" * 300):
        with pytest.raises(RuntimeSetupError) as info:
            TritonServer(repo, admin_key=bad)
        assert info.value.field == "admin_key"


def test_the_docker_command_publishes_on_loopback_and_restricts_triton(repo) -> None:
    from typer.testing import CliRunner

    from tritonpkg.cli import app

    result = CliRunner().invoke(app, ["serve", str(repo), "--runtime", "docker", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    argv = shlex.split(data["command"])
    ports = [argv[i + 1] for i, a in enumerate(argv) if a == "-p"]
    assert ports == ["127.0.0.1:8000:8000", "127.0.0.1:8001:8001", "127.0.0.1:8002:8002"]
    groups = "model-repository,logging,trace,shared-memory,statistics"
    assert f"--http-restricted-api={groups}:admin-key={data['admin_key']}" in argv
    assert f"--grpc-restricted-protocol={groups}:admin-key={data['admin_key']}" in argv

    wide = CliRunner().invoke(app, ["serve", str(repo), "--runtime", "docker", "--host", "0.0.0.0", "--json"])
    assert [p for p in json.loads(wide.stdout)["argv"] if p.endswith(":8000")] == ["0.0.0.0:8000:8000"]
    v6 = CliRunner().invoke(app, ["serve", str(repo), "--runtime", "docker", "--host", "::1", "--json"])
    assert "[::1]:8001:8001" in json.loads(v6.stdout)["argv"]
    bad = CliRunner().invoke(app, ["serve", str(repo), "--runtime", "docker", "--host", "0.0.0.0:1 -v /:/h"])
    assert bad.exit_code != 0 and "--host" in bad.output
    assert os.path.isdir(repo)  # nothing ran


def test_deploy_units_behind_haproxy_share_one_stored_key_that_status_prints(tmp_path) -> None:
    """Through deploy's HAProxy the admin APIs were open to whoever reached the proxy port."""
    import subprocess
    import sys

    from tests.support.specs import write_deploy_spec
    from tritonpkg.deploy.drivers.haproxy import ProxyError, find_haproxy

    try:
        find_haproxy()
    except ProxyError as exc:
        (pytest.fail if os.environ.get("CI") else pytest.skip)(str(exc))

    def tp(*args: str) -> str:
        res = subprocess.run([sys.executable, "-m", "tritonpkg", *args], capture_output=True, text=True, timeout=180,
                             check=False)
        assert res.returncode == 0, res.stdout + res.stderr
        return res.stdout

    state = tmp_path / "state"
    try:
        tp("deploy", str(write_deploy_spec(tmp_path, "adm", 1)), "--state", str(state), "--dwell", "0.3", "--json")
        [status] = json.loads(tp("status", "--state", str(state), "--json"))
        key, proxy = status["admin_key"], status["proxy"]["http_url"]
        assert status["admin_header"] == "admin-key" and len(key) >= 32
        [key_file] = list(state.rglob("admin-key"))
        assert key_file.read_text() == key and stat.S_IMODE(key_file.stat().st_mode) == 0o600
        assert key not in json.dumps(status["units"])  # the key lives in its 0600 file, not in state.db's rows
        unit = status["units"][0]["endpoints"]["http_url"]
        for url in (proxy, unit):
            assert call("POST", url + "/v2/logging", {"log_verbose_level": 1})[0] == 403, url
            assert call("POST", url + "/v2/repository/index")[0] == 403, url
            assert call("GET", url + "/v2/logging", headers={"admin-key": key})[0] == 200, url
        body = {"inputs": [{"name": "X", "shape": [2], "datatype": "FP32", "data": [1, 2]}]}
        assert call("POST", f"{proxy}/v2/models/adm/infer", body)[0] == 200
        assert f"admin-key: {key}" in tp("status", "--state", str(state))
    finally:
        subprocess.run([sys.executable, "-m", "tritonpkg", "deploy", "adm", "--teardown", "--state", str(state)],
                       capture_output=True, timeout=120, check=False)
