"""The real tritonserver 2.51 (from nvidia-pytriton) started by TritonServer on hand-written
Python-backend models, called with tritonclient over HTTP and gRPC."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from tests.support.procs import group_pids
from tritonpkg.errors import RuntimeSetupError
from tritonpkg.runtime import TritonServer, ensure_runtime

pytestmark = pytest.mark.integration

ADD_CONFIG = """
name: "{name}"
backend: "{backend}"
max_batch_size: 0
input [ {{ name: "A" data_type: TYPE_FP32 dims: [ -1 ] }}, {{ name: "B" data_type: TYPE_FP32 dims: [ -1 ] }} ]
output [ {{ name: "SUM" data_type: TYPE_FP32 dims: [ -1 ] }} ]
instance_group [ {{ kind: KIND_CPU count: 1 }} ]
"""

ADD_MODEL = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for request in requests:
            a = pb_utils.get_input_tensor_by_name(request, "A").as_numpy()
            b = pb_utils.get_input_tensor_by_name(request, "B").as_numpy()
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("SUM", (a + b).astype(np.float32))]))
        return out
"""

BROKEN_MODEL = """
class TritonPythonModel:
    def initialize(self, args):
        raise RuntimeError("boom from initialize")
"""


def write_model(repo: Path, name: str, model_py: str | None, backend: str = "python") -> None:
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "config.pbtxt").write_text(ADD_CONFIG.format(name=name, backend=backend))
    if model_py is not None:
        (repo / name / "1" / "model.py").write_text(textwrap.dedent(model_py))


def assert_group_gone(pgid: int) -> None:
    with pytest.raises(ProcessLookupError):
        os.killpg(pgid, 0)


@pytest.fixture(scope="module")
def runtime(tmp_path_factory):
    root = tmp_path_factory.mktemp("runtime")
    backends = root / "project-backends"
    (backends / "adder").mkdir(parents=True)  # a toolkit backend: a folder with a model.py
    (backends / "adder" / "model.py").write_text(textwrap.dedent(ADD_MODEL))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TRITONPKG_CACHE", str(root / "cache"))
        mp.setenv("TRITONPKG_BACKENDS", str(backends))
        started = time.monotonic()
        rt = ensure_runtime()
        print(f"runtime installed in {time.monotonic() - started:.2f} s")
        yield rt


@pytest.fixture(scope="module")
def good_repo(tmp_path_factory) -> Path:
    repo = tmp_path_factory.mktemp("good")
    write_model(repo, "add", ADD_MODEL)
    write_model(repo, "add_via_backend", None, backend="adder")
    return repo


@pytest.fixture(scope="module")
def mixed_repo(tmp_path_factory) -> Path:
    repo = tmp_path_factory.mktemp("mixed")
    write_model(repo, "add", ADD_MODEL)
    write_model(repo, "broken", BROKEN_MODEL)
    return repo


def test_serves_python_and_toolkit_backend_models_over_http_and_grpc(runtime, good_repo) -> None:
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient

    a = np.array([1.0, 2.0, 3.5], dtype=np.float32)
    b = np.array([10.0, 20.0, -3.5], dtype=np.float32)
    with TritonServer(good_repo, runtime=runtime, startup_timeout=60) as srv:
        print(f"ready in {srv.startup_seconds:.2f} s")
        meta = json.loads(urllib.request.urlopen(srv.http_url + "/v2", timeout=5).read())
        assert meta["version"] == runtime.version == "2.51.0"
        assert sorted(m["name"] for m in srv.ready_models()) == ["add", "add_via_backend"]

        http = httpclient.InferenceServerClient(srv.http_url.removeprefix("http://"))
        grpc = grpcclient.InferenceServerClient(srv.grpc_url)
        for model in ("add", "add_via_backend"):
            inputs = [httpclient.InferInput("A", [3], "FP32"), httpclient.InferInput("B", [3], "FP32")]
            inputs[0].set_data_from_numpy(a)
            inputs[1].set_data_from_numpy(b)
            np.testing.assert_array_equal(http.infer(model, inputs).as_numpy("SUM"), a + b)

            ginputs = [grpcclient.InferInput("A", [3], "FP32"), grpcclient.InferInput("B", [3], "FP32")]
            ginputs[0].set_data_from_numpy(b)
            ginputs[1].set_data_from_numpy(b)
            np.testing.assert_array_equal(grpc.infer(model, ginputs).as_numpy("SUM"), b + b)
        grpc.close()
        http.close()
        metrics = urllib.request.urlopen(srv.metrics_url, timeout=5).read().decode()
        assert 'nv_inference_request_success{model="add",version="1"} 2' in metrics


def test_an_idle_keep_alive_client_delays_stop_only_up_to_the_exit_timeout(runtime, good_repo) -> None:
    import tritonclient.http as httpclient

    with TritonServer(good_repo, runtime=runtime, startup_timeout=60, exit_timeout=2) as srv:
        client = httpclient.InferenceServerClient(srv.http_url.removeprefix("http://"))
        assert client.is_model_ready("add")  # leaves a keep-alive connection open
        started = time.monotonic()
        srv.stop()
        elapsed = time.monotonic() - started
        client.close()
    assert elapsed < 2 + 5, f"stop took {elapsed:.1f} s"
    assert_group_gone(srv.pgid)


def test_explicit_mode_loads_on_request_and_reports_failures(runtime, mixed_repo) -> None:
    srv = TritonServer(mixed_repo, runtime=runtime, model_control="explicit", startup_timeout=60)
    with srv:
        assert srv.ready_models() == []
        assert srv.load_model("add") == (True, "")
        ok, message = srv.load_model("broken")
        assert not ok and "boom from initialize" in message
        ok, message = srv.load_model("no_such_model")
        assert not ok and "no_such_model" in message
        assert [m["name"] for m in srv.ready_models()] == ["add"]

        pgid = srv.pgid
        assert len(group_pids(pgid)) >= 2, "server plus the stub of 'add' share one process group"
        srv.unload_model("add")
        assert srv.ready_models() == []
    assert_group_gone(pgid)
    assert group_pids(pgid) == []


def test_a_failing_model_fails_start_with_the_log_tail(runtime, mixed_repo, tmp_path) -> None:
    log = tmp_path / "server.log"
    srv = TritonServer(mixed_repo, runtime=runtime, startup_timeout=60, log_path=log)
    with pytest.raises(RuntimeSetupError) as err, srv:
        pytest.fail("a repository with a broken model must not come up in 'none' mode")
    assert "model 'broken' version 1 failed to load" in err.value.message
    assert "boom from initialize" in err.value.message
    assert err.value.file == str(log) and log.is_file()
    assert_group_gone(srv.pgid)


def test_startup_timeout_stops_the_server(runtime, good_repo) -> None:
    srv = TritonServer(good_repo, runtime=runtime, startup_timeout=0.2)
    with pytest.raises(RuntimeSetupError, match=r"not ready within 0.2 s"):
        srv.start()
    assert_group_gone(srv.pgid)


GUARD_SCRIPT = """
import os, sys
from tritonpkg.runtime import TritonServer, ensure_runtime
srv = TritonServer(sys.argv[1], runtime=ensure_runtime(), startup_timeout=60).start()
print(srv.pgid, flush=True)
if sys.argv[2] == "kill":
    os.kill(os.getpid(), 9)  # no atexit, no finally: only PR_SET_PDEATHSIG can stop the server
# "exit": fall off the end without stop(); the atexit guard must stop the server
"""


@pytest.mark.parametrize("how", ["exit", "kill"])
def test_server_does_not_outlive_its_owner(runtime, good_repo, how) -> None:
    proc = subprocess.run([sys.executable, "-c", GUARD_SCRIPT, str(good_repo), how], capture_output=True,
                          text=True, timeout=90, env=os.environ, check=False)
    pgid = int(proc.stdout.split()[0])
    deadline = time.monotonic() + 20
    while group_pids(pgid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert group_pids(pgid) == [], proc.stderr
