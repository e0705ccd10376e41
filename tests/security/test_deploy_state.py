"""The deploy state folder is trusted only when it is this user's alone (issue 23, item 5).

A state folder owned by another user or writable by others, or a symlink where a state file is expected, is
refused before anything is written (the link's target keeps its content); a recorded process group is
signalled only while its leader has the recorded start time and executable, so `deploy --teardown` leaves a
process that took over the number alone, and state written before identities were recorded is never used
to signal."""

from __future__ import annotations

import json
import os
import sqlite3
import stat
import subprocess
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tritonpkg.cli import app
from tritonpkg.deploy import state as state_mod
from tritonpkg.deploy.drivers.local import LocalDriver
from tritonpkg.deploy.plan import Unit
from tritonpkg.deploy.state import StateDirError, StateStore

runner = CliRunner()
OTHER_UID = 54321


def _tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def test_a_new_state_folder_is_private(tmp_path):
    store = StateStore(tmp_path / "deploy" / "state.db")
    assert stat.S_IMODE(os.stat(tmp_path / "deploy").st_mode) == 0o700
    assert stat.S_IMODE(os.stat(store.path).st_mode) == 0o600
    store.ensure_deployment("m", "local")
    assert store.models() == ["m"]


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a folder to another uid needs root (chown)")
def test_a_state_folder_owned_by_another_user_is_refused(tmp_path):
    folder = tmp_path / "deploy"
    folder.mkdir(mode=0o700)
    os.chown(folder, OTHER_UID, -1)
    with pytest.raises(StateDirError) as err:
        StateStore(folder / "state.db")
    assert str(folder) in str(err.value) and f"owned by uid {OTHER_UID}" in str(err.value)
    assert _tree(folder) == set()
    res = runner.invoke(app, ["status", "--state", str(folder), "--json"])
    assert res.exit_code != 0 and f"owned by uid {OTHER_UID}" in res.output


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another uid needs root (chown)")
def test_a_state_db_owned_by_another_user_is_refused(tmp_path):
    StateStore(tmp_path / "state.db")
    os.chown(tmp_path / "state.db", OTHER_UID, -1)
    with pytest.raises(StateDirError, match=f"state.db: is owned by uid {OTHER_UID}"):
        StateStore(tmp_path / "state.db")


def test_a_state_folder_others_can_write_is_refused(tmp_path):
    folder = tmp_path / "deploy"
    folder.mkdir()
    folder.chmod(0o777)
    with pytest.raises(StateDirError, match=r"writable by group or others \(mode 0777\)"):
        StateStore(folder / "state.db")
    assert _tree(folder) == set()


def test_a_symlinked_state_folder_or_db_is_refused_and_its_target_kept(tmp_path):
    real = tmp_path / "elsewhere"
    real.mkdir(mode=0o700)
    (tmp_path / "link").symlink_to(real)
    with pytest.raises(StateDirError, match="is a symlink where the state expects a folder"):
        StateStore(tmp_path / "link" / "state.db")
    assert _tree(real) == set()

    folder = tmp_path / "deploy"
    folder.mkdir(mode=0o700)
    precious = tmp_path / "precious.db"
    precious.write_bytes(b"not a database of ours")
    (folder / "state.db").symlink_to(precious)
    with pytest.raises(StateDirError, match=r"state.db: is a symlink"):
        StateStore(folder / "state.db")
    assert precious.read_bytes() == b"not a database of ours"


@pytest.mark.parametrize("name", ["routes.map", "haproxy.cfg", "haproxy.log"])
def test_the_local_driver_refuses_a_symlinked_state_file_and_truncates_nothing(name, tmp_path):
    """Before: `routes.map` and `haproxy.cfg` were written through the link (truncating its target)."""
    workdir = tmp_path / "state" / "local" / "m"
    workdir.mkdir(parents=True, mode=0o700)
    precious = tmp_path / "precious.txt"
    precious.write_text("keep me\n")
    (workdir / name).symlink_to(precious)
    driver = LocalDriver(workdir, persistent=True)
    try:
        with pytest.raises(StateDirError) as err:
            driver.ensure_proxy()
    finally:
        driver.shutdown()  # had it started HAProxy (the code before this rule did), stop it
    assert str(workdir / name) in str(err.value) and "symlink" in str(err.value)
    assert precious.read_text() == "keep me\n"
    assert driver.haproxy.group is None and not driver.proxy.get("pgid")
    assert set(os.listdir(workdir)) <= {name, "routes.map", "haproxy.cfg"}  # written before the refusal, no temp


def test_write_private_is_atomic_and_refuses_links(tmp_path):
    target = state_mod.write_private(tmp_path / "f", "one")
    assert target.read_text() == "one" and stat.S_IMODE(target.stat().st_mode) == 0o600
    state_mod.write_private(target, "two")
    assert target.read_text() == "two" and _tree(tmp_path) == {"f"}  # no temporary file left
    (tmp_path / "g").symlink_to(target)
    with pytest.raises(StateDirError):
        state_mod.write_private(tmp_path / "g", "three")
    with pytest.raises(StateDirError):
        state_mod.read_private(tmp_path / "g")
    assert target.read_text() == "two"


# -- process groups --------------------------------------------------------------------------------------
def _sleeper() -> subprocess.Popen:
    return subprocess.Popen(["sleep", "60"], process_group=0)


def _alive(proc: subprocess.Popen) -> bool:
    return proc.poll() is None


def _deployed(folder: Path, endpoints: dict) -> StateStore:
    """A state with one local deployment whose unit has `endpoints` (no proxy: nothing answers its socket)."""
    store = StateStore(folder / "state.db")
    store.ensure_deployment("m", "local", {"proxy": {}})
    store.put_unit("m", Unit(name="m-blue", version=1, color="blue", status="serving"), endpoints)
    return store


def _teardown(folder: Path) -> dict:
    res = runner.invoke(app, ["deploy", "m", "--teardown", "--state", str(folder), "--json"])
    assert res.exit_code == 0, res.output
    return json.loads(res.output)


def test_teardown_leaves_a_process_that_took_over_the_recorded_pgid_alone(tmp_path):
    first = _sleeper()
    recorded = state_mod.identity_fields(first.pid)
    assert recorded["pg_exe"].endswith("sleep") and recorded["pg_start"] > 0
    first.kill()
    first.wait()
    time.sleep(0.02)  # a start time is in clock ticks (10 ms): the next process starts after it
    other = _sleeper()
    try:
        # pid reuse, made on purpose: the recorded number now names another process (its own start time)
        _deployed(tmp_path, {"slot": 0, **recorded, "pgid": other.pid})
        out = _teardown(tmp_path)
        assert _alive(other), "teardown signalled a process group that is not the one it started"
        assert any("is gone, not ours" in n and str(other.pid) in n for n in out["notes"]), out
    finally:
        other.kill()
        other.wait()


def test_teardown_stops_the_group_it_recorded(tmp_path):
    proc = _sleeper()
    try:
        _deployed(tmp_path, {"slot": 0, **state_mod.identity_fields(proc.pid)})
        out = _teardown(tmp_path)
        proc.wait(timeout=15)
        assert out["stopped"] == ["m-blue"] and any("stopped" in n for n in out["notes"]), out
    finally:
        if _alive(proc):
            proc.kill()
            proc.wait()


def test_teardown_does_not_signal_a_group_whose_leader_has_exited(tmp_path):
    """The leader's identity is what makes a group ours; without it the rest of the group is only reported."""
    leader = subprocess.Popen(["sh", "-c", "sleep 60 & echo $!; read x"], process_group=0,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    straggler = int(leader.stdout.readline())
    try:
        recorded = state_mod.identity_fields(leader.pid)
        leader.stdin.close()
        leader.wait(timeout=10)
        _deployed(tmp_path, {"slot": 0, **recorded})
        out = _teardown(tmp_path)
        os.kill(straggler, 0)  # still alive
        assert any("has exited" in n and str(straggler) in n for n in out["notes"]), out
    finally:
        os.kill(straggler, 9)


OLD_SCHEMA_UNIT = ("CREATE TABLE units (model TEXT NOT NULL, name TEXT NOT NULL, version INTEGER NOT NULL, color TEXT,"
                   " weight INTEGER NOT NULL DEFAULT 0, replicas INTEGER NOT NULL DEFAULT 1, status TEXT NOT NULL,"
                   " routed INTEGER NOT NULL DEFAULT 0, last_active REAL, endpoints TEXT NOT NULL DEFAULT '{}',"
                   " PRIMARY KEY (model, name));"
                   "CREATE TABLE deployments (model TEXT PRIMARY KEY, target TEXT NOT NULL, strategy TEXT, alias TEXT,"
                   " info TEXT NOT NULL DEFAULT '{}', updated REAL NOT NULL);")


def test_an_older_state_db_is_migrated_and_its_groups_never_signalled(tmp_path):
    proc = _sleeper()
    try:
        folder = tmp_path / "deploy"
        folder.mkdir(mode=0o700)
        db = sqlite3.connect(folder / "state.db")
        db.executescript(OLD_SCHEMA_UNIT)
        db.execute("INSERT INTO deployments VALUES ('m', 'local', 'red-black', 'm-blue', ?, 0)",
                   (json.dumps({"proxy": {"pgid": proc.pid, "socket": str(folder / "none.sock")}}),))
        db.execute("INSERT INTO units VALUES ('m', 'm-blue', 1, 'blue', 100, 1, 'serving', 0, NULL, ?)",
                   (json.dumps({"slot": 0, "pgid": proc.pid, "http_url": "http://127.0.0.1:9"}),))
        db.commit()
        db.close()
        os.chmod(folder / "state.db", 0o600)
        store = StateStore(folder / "state.db")
        assert store.endpoints("m", "m-blue")["pg_identity"] == "unrecorded"
        assert store.deployment("m")["info"]["proxy"]["pg_identity"] == "unrecorded"
        out = _teardown(folder)
        assert _alive(proc)
        notes = " | ".join(out["notes"])
        assert "recorded without its start time and executable" in notes and f"kill -TERM -- -{proc.pid}" in notes
    finally:
        proc.kill()
        proc.wait()
