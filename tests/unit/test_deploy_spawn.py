"""A unit's process group is recorded from inside ProcessGroup.start, right after its Popen: what the local
driver hands the deploy state before Triton's start-up wait begins (proc.group.on_spawn). Before the spawn
the driver records the unit's folder (the proxy's configuration), whose tag every spawned process carries,
so a command killed between the spawn and that record still leaves nothing teardown cannot find."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

from tritonpkg.deploy import state
from tritonpkg.proc.group import SPAWN_TAG, ProcessGroup, on_spawn, stop_tagged, tagged_groups


def test_on_spawn_sees_the_group_before_start_returns_and_only_in_its_block(tmp_path: Path) -> None:
    returned: list[bool] = []
    seen: list[tuple[int | None, bool, dict]] = []
    first = ProcessGroup(["sleep", "30"], dict(os.environ), tmp_path / "log")
    later = ProcessGroup(["sleep", "30"], dict(os.environ), tmp_path / "log")
    try:
        with on_spawn(lambda g: seen.append((g.pgid, bool(returned), state.identity_fields(g.pgid)))):
            first.start()
            returned.append(True)
        later.start()  # outside the block: not reported
        [(pgid, after_start, facts)] = seen
        assert pgid == first.pgid and not after_start
        assert facts["pg_exe"].endswith("sleep") and facts["pg_start"] > 0  # exec'd: its identity is readable
    finally:
        first.stop(grace=1)
        later.stop(grace=1)


def test_on_spawn_is_per_thread_and_restores_an_outer_callback(tmp_path: Path) -> None:
    outer: list[int | None] = []
    inner: list[int | None] = []
    groups = [ProcessGroup(["sleep", "30"], dict(os.environ), tmp_path / "log") for _ in range(3)]
    try:
        with on_spawn(lambda g: outer.append(g.pgid)):
            with on_spawn(lambda g: inner.append(g.pgid)):
                groups[0].start()
            t = threading.Thread(target=groups[1].start)  # another thread's start is not this block's
            t.start()
            t.join()
            groups[2].start()
        assert inner == [groups[0].pgid] and outer == [groups[2].pgid]
    finally:
        for g in groups:
            g.stop(grace=1)


# -- a kill between the spawn and its record ------------------------------------------------------------------
# The deploy command as the kill leaves it: its child group spawned (from a helper thread, as the persistent
# driver does) with the tag the driver recorded beforehand, then SIGKILLed inside on_spawn's callback, so the
# group's pgid is never written anywhere.
KILLED_DEPLOY = """
import os, signal, sys, threading
from pathlib import Path
from tritonpkg.proc.group import ProcessGroup, on_spawn

def run():
    group = ProcessGroup(["sh", "-c", "sleep 300 & exec sleep 300"], dict(os.environ), Path(sys.argv[2]))
    with on_spawn(lambda g: os.kill(os.getpid(), signal.SIGKILL), sys.argv[1]):
        group.start()

t = threading.Thread(target=run)
t.start()
t.join()
"""


@pytest.fixture
def killed_deploy(tmp_path: Path) -> Iterator[Callable[[str], None]]:
    """Runs KILLED_DEPLOY for a tag; whatever a failing test leaves of its group is killed afterwards."""
    tags: list[str] = []

    def run(tag: str) -> None:
        tags.append(tag)
        _killed_deploy(tag, tmp_path / "spawned.log")

    yield run
    for tag in tags:
        for p in _tagged(tag):
            with contextlib.suppress(psutil.NoSuchProcess):
                p.kill()


def _killed_deploy(tag: str, log: Path) -> None:
    res = subprocess.run([sys.executable, "-c", KILLED_DEPLOY, tag, str(log)], check=False, timeout=60)
    assert res.returncode == -signal.SIGKILL
    deadline = time.monotonic() + 5
    while sum(len(m) for m in tagged_groups(tag).values()) < 2:  # the leader and its backgrounded sleep
        assert time.monotonic() < deadline, "the killed command's group never showed up"
        time.sleep(0.05)


def _tagged(tag: str) -> list[psutil.Process]:
    """The process table's view, independent of tagged_groups: live processes whose environment has the tag."""
    out = []
    for p in psutil.process_iter():
        try:
            if p.status() != psutil.STATUS_ZOMBIE and p.environ().get(SPAWN_TAG) == tag:
                out.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return out


@pytest.fixture
def decoys(tmp_path: Path) -> Iterator[Callable[[str], list[ProcessGroup]]]:
    """Process groups of this user tagged like the orphan but not it: a sibling folder whose name extends
    the orphan's, and the orphan's path through a link (the same folder spelled otherwise is not ours to
    guess), plus an untagged one; each must survive."""
    started: list[ProcessGroup] = []

    def make(tag: str) -> list[ProcessGroup]:
        for t in (tag + "0", tag + "-b", tag + "/", None):
            g = ProcessGroup(["sleep", "300"], dict(os.environ), tmp_path / "decoy.log")
            with on_spawn(lambda _: None, t):
                g.start()
            started.append(g)
        return started

    yield make
    for g in started:
        g.stop(grace=1)


def test_teardown_stops_a_unit_and_proxy_spawned_but_never_recorded(tmp_path: Path, decoys, killed_deploy) -> None:
    from tritonpkg.deploy import service
    from tritonpkg.deploy.drivers.processes import spawn_tag
    from tritonpkg.deploy.plan import Unit

    state_dir = tmp_path / "state"
    workdir = state_dir / "local" / "m"
    unit_dir, cfg = workdir / "units" / "m-v2-green", workdir / "haproxy.cfg"
    store = service.store_at(state_dir)
    # what provision and ensure_proxy record before their spawns, and nothing after
    store.ensure_deployment("m", "local", info={"proxy": {"config": str(cfg)}})
    store.put_unit("m", Unit(name="m-v2-green", version=2), endpoints={"slot": 1, "unit_dir": str(unit_dir),
                                                                        "log": str(workdir / "m-v2-green.log")})
    for tag in (spawn_tag(unit_dir), spawn_tag(cfg)):
        killed_deploy(tag)
    others = decoys(spawn_tag(unit_dir))
    orphans = _tagged(spawn_tag(unit_dir)) + _tagged(spawn_tag(cfg))
    assert len(orphans) == 4

    result = service.teardown(state_dir, "m")

    assert result.stopped == ["m-v2-green"]
    assert any("unit m-v2-green: spawned but not recorded" in n for n in result.notes), result.notes
    assert any("HAProxy: spawned but not recorded" in n for n in result.notes), result.notes
    psutil.wait_procs(orphans, timeout=5)
    assert not _tagged(spawn_tag(unit_dir)) and not _tagged(spawn_tag(cfg))
    assert all(not p.is_running() or p.status() == psutil.STATUS_ZOMBIE for p in orphans)
    assert all(g.poll() is None for g in others)  # similar tags and the untagged one: untouched


def test_stop_tagged_stops_only_the_exact_tag(tmp_path: Path, decoys, killed_deploy) -> None:
    tag = str(tmp_path / "units" / "u1")
    others = decoys(tag)
    assert stop_tagged(tag) == []  # nothing carries the exact tag: nothing signalled
    assert all(g.poll() is None for g in others)
    killed_deploy(tag)
    [line] = stop_tagged(tag, grace=5)
    assert line.endswith(": stopped"), line
    assert not _tagged(tag) and all(g.poll() is None for g in others)
