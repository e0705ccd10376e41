"""The detached unit's watcher (tritonpkg.deploy.drivers.unit_watch) against a real tritonserver it did not start, in
explicit model control as a unit runs: a model that leaves READY without the watcher asking (what the vLLM backend's
self-unload after an engine death looks like; here the admin API unloads a Python-backend model) is loaded again
under `restart`, and stops the unit under `exit`; a SIGTERM (the unit being retired) ends the watcher alone."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tritonpkg.deploy.drivers import unit_watch
from tritonpkg.deploy.state import identity_fields
from tritonpkg.proc import rest
from tritonpkg.runtime import Runtime, TritonServer, admin

pytestmark = [pytest.mark.integration]

CONFIG = """
name: "echo"
backend: "python"
max_batch_size: 0
input [ { name: "X" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ -1 ] } ]
"""
MODEL = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor("Y", pb_utils.get_input_tensor_by_name(r, "X").as_numpy())])
                for r in requests]
"""


def start(tmp_path: Path, runtime: Runtime) -> TritonServer:
    repo = tmp_path / "repo"
    (repo / "echo" / "1").mkdir(parents=True)
    (repo / "echo" / "config.pbtxt").write_text(textwrap.dedent(CONFIG))
    (repo / "echo" / "1" / "model.py").write_text(textwrap.dedent(MODEL))
    key = admin.ensure_key(tmp_path)
    return TritonServer(repo, runtime=runtime, model_control="explicit", load_models=["echo"], admin_key=key,
                        metrics=False, startup_timeout=120, log_path=tmp_path / "triton.log").start()


def watcher(tmp_path: Path, server: TritonServer, policy: str) -> subprocess.Popen[bytes]:
    ident = identity_fields(server.pgid)
    options = unit_watch.WatchOptions(http_url=server.http_url, admin_key_dir=tmp_path, pgid=ident["pgid"],
                                      pg_start=ident["pg_start"], pg_exe=ident["pg_exe"], models=["echo"],
                                      policy=policy, log=server.log_path,
                                      engine_file=tmp_path / unit_watch.ENGINE_FILE, stop_grace=20)
    (tmp_path / "watch.json").write_text(options.model_dump_json())
    proc = subprocess.Popen([sys.executable, "-m", "tritonpkg.deploy.drivers.unit_watch", str(tmp_path / "watch.json")],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 30
    while not (tmp_path / unit_watch.ENGINE_FILE).exists():
        assert proc.poll() is None and time.monotonic() < deadline, proc.stdout.read() if proc.stdout else ""
        time.sleep(0.05)
    return proc


def unload(server: TritonServer) -> None:
    code, body = rest.request("POST", f"{server.http_url}/v2/repository/models/echo/unload",
                              headers=server.admin_headers)
    assert code == 200, body


def engine(tmp_path: Path) -> dict:
    return unit_watch.read_engine_file(tmp_path / unit_watch.ENGINE_FILE).get("echo", {})


def test_restart_loads_the_model_again_and_sigterm_ends_the_watcher_alone(tmp_path, deploy_runtime):
    server = start(tmp_path, deploy_runtime)
    proc = watcher(tmp_path, server, "restart")
    try:
        assert engine(tmp_path)["state"] == "alive"
        unload(server)
        deadline = time.monotonic() + 60
        while engine(tmp_path).get("event") != "restarted":
            assert time.monotonic() < deadline and proc.poll() is None, engine(tmp_path)
            time.sleep(0.1)
        assert rest.ok(f"{server.http_url}/v2/models/echo/ready")
        assert engine(tmp_path)["state"] == "alive"
        proc.terminate()
        assert proc.wait(timeout=15) == 0
        assert server.running and rest.ok(f"{server.http_url}/v2/models/echo/ready")
    finally:
        if proc.poll() is None:
            proc.kill()
        server.stop()
    out = proc.stdout.read().decode() if proc.stdout else ""
    assert "engine of echo: died" in out and "engine of echo: restarted" in out, out


def test_exit_stops_the_unit_with_a_one_line_reason(tmp_path, deploy_runtime):
    server = start(tmp_path, deploy_runtime)
    proc = watcher(tmp_path, server, "exit")
    try:
        unload(server)
        assert proc.wait(timeout=60) == 1
        deadline = time.monotonic() + 30
        while server.running and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not server.running
        state = json.loads((tmp_path / unit_watch.ENGINE_FILE).read_text())["echo"]
        assert state["state"] == "dead" and state["event"] == "died", state
    finally:
        if proc.poll() is None:
            proc.kill()
        server.stop()
    out = proc.stdout.read().decode() if proc.stdout else ""
    assert "--on-engine-death exit stops the stack" in out, out
