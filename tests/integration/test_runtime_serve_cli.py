"""`tritonpkg serve` as a user runs it: a separate process, stopped with SIGTERM."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request

import pytest

from tests.support.cli import read_json_document, tritonpkg
from tests.support.procs import group_pids
from tests.support.triton_repos import BROKEN, ECHO, make_repo
from tritonpkg.proc.group import own_group
from tritonpkg.proc.ports import free_ports

pytestmark = pytest.mark.integration

def test_serve_answers_ready_and_exits_zero_on_sigterm(cli_env, tmp_path) -> None:
    repo = make_repo(tmp_path / "repo", {"echo": ECHO})
    http, grpc, metrics = free_ports(3)
    started = time.monotonic()
    proc = subprocess.Popen(
        tritonpkg("serve", str(repo), "--http-port", str(http), "--grpc-port", str(grpc),
                  "--metrics-port", str(metrics), "--timeout", "60", "--json"),
        env=cli_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **own_group())
    try:
        info = read_json_document(proc.stdout)
        print(f"`tritonpkg serve` ready after {time.monotonic() - started:.2f} s "
              f"(server start-up {info['startup_seconds']} s)")
        assert info["http_url"] == f"http://127.0.0.1:{http}"
        assert info["grpc_url"] == f"127.0.0.1:{grpc}"
        assert [m["name"] for m in info["models"]] == ["echo"]
        with urllib.request.urlopen(f"http://127.0.0.1:{http}/v2/health/ready", timeout=5) as resp:
            assert resp.status == 200
        server_pgid = info["pid"]
        assert group_pids(server_pgid)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0, proc.stderr.read()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert group_pids(server_pgid) == []
    assert group_pids(proc.pid) == []  # nothing left in the CLI's own group either
    with pytest.raises(OSError):  # noqa: PT011  refused, reset or timed out: each means nothing answers there
        urllib.request.urlopen(f"http://127.0.0.1:{http}/v2/health/ready", timeout=2)


def test_serve_with_a_broken_model_exits_nonzero_and_shows_the_log_tail(cli_env, tmp_path) -> None:
    repo = make_repo(tmp_path / "repo", {"echo": ECHO, "broken": BROKEN})
    proc = subprocess.run(tritonpkg("serve", str(repo), "--http-port", "0", "--grpc-port", "0",
                                    "--metrics-port", "0", "--timeout", "60"),
                          env=cli_env, capture_output=True, text=True, timeout=90, check=False)
    assert proc.returncode == 1
    assert "model 'broken' version 1 failed to load" in proc.stderr
    assert "model.py refuses to start: missing weights" in proc.stderr
    assert "full log:" in proc.stderr


def test_serve_refuses_a_port_in_use(cli_env, tmp_path) -> None:
    import socket

    repo = make_repo(tmp_path / "repo", {"echo": ECHO})
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        busy = s.getsockname()[1]
        proc = subprocess.run(tritonpkg("serve", str(repo), "--http-port", str(busy), "--grpc-port", "0",
                                        "--metrics-port", "0"), env=cli_env, capture_output=True, text=True,
                              timeout=60, check=False)
    assert proc.returncode == 1
    assert f"port {busy}" in proc.stderr and "http_port" in proc.stderr


def test_runtime_info_and_install_json(cli_env) -> None:
    out = subprocess.run(tritonpkg("runtime", "install", "--json"), env=cli_env, capture_output=True, text=True,
                         timeout=60, check=False)
    assert out.returncode == 0, out.stderr
    installed = json.loads(out.stdout)
    assert installed["version"] == "2.51.0"
    info = subprocess.run(tritonpkg("runtime", "info", "--json"), env=cli_env, capture_output=True, text=True,
                          timeout=60, check=False)
    report = json.loads(info.stdout)
    assert report["installed"] and report["server_bin"] == installed["server_bin"]
    assert report["stub_python"] == f"{sys.version_info.major}.{sys.version_info.minor}"
    assert {b["name"] for b in report["backends"]} >= {"python"}
    assert all(b["ok"] for b in report["backends"])
