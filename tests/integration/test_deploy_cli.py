"""The commands as a user runs them: `tritonpkg deploy` (local target: servers and HAProxy outlive the
command), `status`, `rollback`, `deploy --teardown`, each a separate process sharing one state folder."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.support.deploy import free_port_base
from tests.support.specs import write_deploy_spec

pytestmark = pytest.mark.integration
CLI = [sys.executable, "-m", "tritonpkg"]


def tp(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    res = subprocess.run([*CLI, *args], check=False, capture_output=True, text=True, timeout=180)
    if check:
        assert res.returncode == 0, res.stdout + res.stderr
    return res


def infer(url: str, model: str, version: int, input_name: str) -> str:
    body = json.dumps({"inputs": [{"name": input_name, "shape": [2], "datatype": "FP32", "data": [1, 2]}]}).encode()
    req = urllib.request.Request(f"{url}/v2/models/{model}/versions/{version}/infer", data=body,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.loads(resp.read())["model_version"]


def test_deploy_status_rollback_teardown(tmp_path: Path):
    from tritonpkg.deploy.drivers.haproxy import ProxyError, find_haproxy

    try:
        find_haproxy()
    except ProxyError as exc:
        # scripts/setup.sh installs haproxy as root; CI must never pass by skipping the rollout tests
        (pytest.fail if os.environ.get("CI") else pytest.skip)(str(exc))
    state = str(tmp_path / "state")
    pgids: list[int] = []
    base = free_port_base(3 * 6)  # 3 ports for each of the proxy's 6 slots
    try:
        out = json.loads(tp("deploy", str(write_deploy_spec(tmp_path, "cli_m", 1)), "--state", state, "--dwell", "0.3",
                            "--unit-port-base", str(base), "--json").stdout)
        assert out["ok"] and out["strategy"] == "red-black"
        status = json.loads(tp("status", "--state", state, "--json").stdout)[0]
        pgids = [status["units"][0]["endpoints"]["pgid"]]
        ep = status["units"][0]["endpoints"]
        assert ep["http_url"] == f"http://127.0.0.1:{base + 3 * ep['slot']}"  # the unit's own port, as asked
        url = status["proxy"]["http_url"]
        assert infer(url, "cli_m", 1, "X") == "1"  # the command has exited; its server and proxy serve on

        out = json.loads(tp("deploy", str(write_deploy_spec(tmp_path, "cli_m", 2, input_name="Z")), "--state", state,
                            "--dwell", "0.3", "--json").stdout)
        assert out["ok"] and out["strategy"] == "versioned" and "input X: removed" in out["reason"]
        status = json.loads(tp("status", "cli_m", "--state", state, "--json").stdout)[0]
        pgids += [u["endpoints"]["pgid"] for u in status["units"] if u["name"] == "cli_m-v2"]
        assert status["alias"] == "cli_m-v2"
        [ep] = [u["endpoints"] for u in status["units"] if u["name"] == "cli_m-v2"]
        assert ep["grpc_url"] == f"127.0.0.1:{base + 3 * ep['slot'] + 1}"  # the recorded base, not given again
        assert infer(url, "cli_m", 2, "Z") == "2" and infer(url, "cli_m", 1, "X") == "1"
        table = tp("status", "--state", state).stdout
        assert "cli_m-v2" in table and "alias: cli_m-v2" in table

        out = json.loads(tp("rollback", "cli_m", "--state", state, "--json").stdout)
        assert out["ok"]
        status = json.loads(tp("status", "cli_m", "--state", state, "--json").stdout)[0]
        assert status["alias"] == "cli_m-blue"
        assert {u["name"]: u["status"] for u in status["units"]} == {"cli_m-blue": "serving", "cli_m-v2": "retired"}
        assert infer(url, "cli_m", 1, "X") == "1"

        tp("deploy", "cli_m", "--teardown", "--state", state)
        for pgid in pgids:
            with pytest.raises(ProcessLookupError):
                os.killpg(pgid, 0)
        with pytest.raises(OSError, match=r"refused|reset|closed"):
            urllib.request.urlopen(url + "/v2/health/ready", timeout=2)
    finally:
        tp("deploy", "cli_m", "--teardown", "--state", state, check=False)
        for pgid in pgids:  # belt and braces: never leave a server behind
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, signal.SIGKILL)


def _units_running(state: Path) -> dict[int, str]:
    """pid -> command line of every tritonserver or Python-backend stub serving from under `state`."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            if (entry / "stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                continue
        except OSError:
            continue
        line = " ".join(a.decode(errors="replace") for a in argv)
        if str(state) in line and ("tritonserver" in argv[0].decode(errors="replace") or "backend_stub" in line):
            found[int(entry.name)] = line[:200]
    return found


# The CLI, SIGKILLed inside the local driver's spawn callback once tritonserver has exec'd: after the spawn,
# before its process group's identity (the first thing that callback reads) is written to the state.
KILL_BEFORE_RECORD = """
import os, signal, sys
from tritonpkg.deploy import state
identity_fields = state.identity_fields

def killed_here(pgid):
    # exe, not cmdline: Popen returns once exec has closed the child's descriptors, which is before the kernel
    # has laid out the new argv, so cmdline can still read empty then; exe is already the new program's
    if os.readlink(f"/proc/{pgid}/exe").endswith("/tritonserver"):
        os.kill(os.getpid(), signal.SIGKILL)
    return identity_fields(pgid)

state.identity_fields = killed_here
sys.argv = ["tritonpkg", *sys.argv[1:]]
from tritonpkg.cli import main
main()
"""


def test_deploy_killed_between_spawn_and_record_leaves_nothing_after_rollback(tmp_path: Path):
    """The unit's folder is recorded before the spawn and its processes carry it (proc.group.SPAWN_TAG), so
    `rollback` stops a tritonserver whose process group the killed command never recorded."""
    state = tmp_path / "state"
    spec = write_deploy_spec(tmp_path, "win_m", 1)
    try:
        res = subprocess.run([sys.executable, "-c", KILL_BEFORE_RECORD, "deploy", str(spec), "--state", str(state)],
                             check=False, capture_output=True, timeout=180)
        assert res.returncode == -signal.SIGKILL, res.stderr[-2000:]
        assert _units_running(state), "the unit's tritonserver should outlive the killed command"
        from tritonpkg.deploy.state import StateStore

        [unit] = StateStore(state / "state.db").units_table("win_m")
        # killed inside the window: the running tritonserver's group is not the one recorded (if any is: a first
        # start that failed at once, e.g. on a taken port, and was retried)
        assert unit["endpoints"]["unit_dir"] and unit["endpoints"].get("pgid") not in _units_running(state)
        out = json.loads(tp("rollback", "win_m", "--state", str(state), "--json").stdout)
        assert out["ok"] and [r["new_unit"] for r in out["recovered"]] == ["win_m-blue"]
        deadline = time.monotonic() + 20
        while _units_running(state) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _units_running(state) == {}
    finally:
        tp("deploy", "win_m", "--teardown", "--state", str(state), check=False)
        for pid in _units_running(state):  # what a failing run left: stopped here, never by name
            with contextlib.suppress(ProcessLookupError):
                os.killpg(os.getpgid(pid), signal.SIGKILL)


def test_deploy_killed_during_provision_leaves_nothing_after_rollback(tmp_path: Path):
    """SIGKILL of the command while its first unit's model is still loading (a 10 s import), then `rollback`:
    the unit's process group was recorded when it started, so no tritonserver is left."""
    state = tmp_path / "state"
    spec = write_deploy_spec(tmp_path, "slow_m", 1, prelude="import time\ntime.sleep(10)")
    deploy = subprocess.Popen([*CLI, "deploy", str(spec), "--state", str(state), "--json"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not _units_running(state):
            assert deploy.poll() is None and time.monotonic() < deadline, "the unit's tritonserver never started"
            time.sleep(0.05)
        time.sleep(0.5)  # Triton is up, the model still loading: provision has not returned
        deploy.send_signal(signal.SIGKILL)
        deploy.wait(timeout=10)
        assert _units_running(state), "the unit should outlive the killed command"
        out = json.loads(tp("rollback", "slow_m", "--state", str(state), "--json").stdout)
        assert out["ok"] and [r["new_unit"] for r in out["recovered"]] == ["slow_m-blue"]
        deadline = time.monotonic() + 20
        while _units_running(state) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _units_running(state) == {}
    finally:
        if deploy.poll() is None:
            deploy.kill()
        tp("deploy", "slow_m", "--teardown", "--state", str(state), check=False)
        for pid in _units_running(state):  # what a failing run left: stopped here, never by name
            with contextlib.suppress(ProcessLookupError):
                os.killpg(os.getpgid(pid), signal.SIGKILL)
