"""HAProxy's admin socket stays short and private however deep the state folder is: a Unix socket path is
limited (HAProxy: 97 bytes), so the socket lives in a 0700 folder of this user's, named by the workdir's hash,
under $XDG_RUNTIME_DIR or the temp folder; a real HAProxy is started from a deep state folder."""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from pathlib import Path

import pytest

from tritonpkg.deploy.drivers import haproxy
from tritonpkg.deploy.drivers.local import LocalDriver


def deep(tmp_path: Path) -> Path:
    return tmp_path / ("state-" + "d" * 50) / ("nested-" + "e" * 50) / "local" / "m"


def test_the_first_deploy_from_a_deep_state_folder_starts_haproxy(tmp_path: Path) -> None:
    if not (shutil.which("haproxy") or shutil.which("haproxy", path="/usr/sbin")):
        pytest.skip("haproxy not installed (scripts/setup.sh installs it as root)")
    workdir = deep(tmp_path)
    assert len(str(workdir / "haproxy.sock")) > 97  # where the socket was: HAProxy refused to start
    driver = LocalDriver(workdir)
    try:
        facts = driver.ensure_proxy()
        sock = Path(facts["socket"])
        assert driver.haproxy.alive() and len(str(sock)) <= 97
        assert stat.S_IMODE(sock.parent.lstat().st_mode) == 0o700 and sock.parent.stat().st_uid == os.getuid()
        again = LocalDriver(workdir, proxy=dict(facts))  # a later command finds it from the recorded facts
        assert again.haproxy.alive() and again.ensure_proxy()["pgid"] == facts["pgid"]
    finally:
        driver.shutdown()
    assert not sock.parent.exists()  # stopped: the socket's folder goes with it


def test_the_socket_folder_is_per_workdir_and_short(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run = Path(tempfile.mkdtemp(prefix="run-"))  # a short one, as /run/user/<uid> is
    try:
        monkeypatch.setenv("XDG_RUNTIME_DIR", str(run))
        one, two = haproxy.socket_dir(deep(tmp_path)), haproxy.socket_dir(deep(tmp_path) / "other")
        assert one != two and one.parent == run and one == haproxy.socket_dir(deep(tmp_path))
    finally:
        run.rmdir()
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / ("x" * 120)))  # absent or too long: the temp folder
    assert len(str(haproxy.socket_dir(deep(tmp_path)) / "haproxy.sock")) <= 97
