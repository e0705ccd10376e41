"""How the local target's processes (tritonservers, HAProxy) are started so nothing outlives a command unrecorded,
and stopped again by what the state file recorded: a process group's identity, or the tag each spawned process
carries in its environment (the folder or configuration recorded before the spawn)."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from tritonpkg.deploy import state
from tritonpkg.proc import group as proc_group
from tritonpkg.proc.group import ProcessGroup


def start(fn: Callable[[], object], spawned: Callable[[ProcessGroup], None], tag: str, persistent: bool) -> None:
    """Run `fn`, which starts a child; `spawned` gets each process group it starts right after its Popen
    (proc.group.on_spawn), before `fn` goes on to wait for it, and each carries `tag` in its environment
    (what the caller recorded before, for a kill between the spawn and that record). Persistent children
    are started from a helper thread: the supervisor asks the kernel to kill children of the *main*
    thread when it ends, which the CLI must not do."""
    if not persistent:
        with proc_group.on_spawn(spawned, tag):
            fn()  # the children die with this interpreter: nothing outlives it unrecorded
        return
    box: list[BaseException] = []

    def run() -> None:
        try:
            with proc_group.on_spawn(spawned, tag):
                fn()
        except BaseException as exc:  # re-raised in the caller's thread
            box.append(exc)

    t = threading.Thread(target=run)
    t.start()
    while t.is_alive():
        t.join(0.5)
    if box:
        raise box[0]


def detach(group: Any, persistent: bool) -> None:
    if persistent:
        group.detach()  # no atexit stop: the state file owns this group now


def run_quiet(argv: list[str]) -> str:
    """Run a short command; '' when it succeeded, else what it printed."""
    res = subprocess.run(argv, check=False, capture_output=True, text=True, timeout=30)
    return "" if res.returncode == 0 else (res.stdout + res.stderr).strip()


def spawn_tag(path: Path | str) -> str:
    """The tag (proc.group.SPAWN_TAG) of the processes started for a unit folder or the proxy's configuration:
    the resolved path, recorded in the state before the spawn."""
    return str(Path(path).resolve())


def stop_unrecorded(tag: str, what: str, grace: float = 10.0) -> str:
    """Stop what a killed command spawned with `tag` but never recorded (proc.group.stop_tagged)."""
    found = proc_group.stop_tagged(tag, grace)
    if not found:
        return ""  # nothing was spawned, or it is gone
    return f"{what}: spawned but not recorded (the command was killed); found by its folder: {'; '.join(found)}"


def stop_recorded(facts: Mapping[str, Any], what: str, grace: float = 10.0, leader_first: bool = False) -> str:
    """Stop a process group an earlier command started, only once `state.recorded_group` found its leader
    still the recorded process (proc.group.stop_adopted); returns what it found and did. `leader_first`: SIGTERM
    the leader alone and give the group `grace` s to end in the leader's own order (tritonserver unloads its
    models, whose backends stop their engines), then stop what is left as a group."""
    pgid, note = state.recorded_group(facts, what)
    if pgid is None:
        return note
    leader = (int(facts["pg_start"]), str(facts["pg_exe"]))
    if leader_first:
        if _leader_stopped(pgid, leader, grace):
            return f"{note}: stopped"
        grace = 5.0
    outcome = proc_group.stop_adopted(pgid, leader, grace)
    if outcome == "not permitted":
        return note + ": not permitted to signal it (another user's processes): not stopped"
    return f"{note}: {outcome}"


def _leader_stopped(pgid: int, leader: tuple[int, str], grace: float) -> bool:
    """SIGTERM the recorded leader alone; True once nothing of its group is left within `grace` s."""
    if proc_group.process_identity(pgid) != leader:
        return False
    try:
        os.kill(pgid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        return False
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if not proc_group.group_members(pgid):
            return True
        time.sleep(0.1)
    return False
