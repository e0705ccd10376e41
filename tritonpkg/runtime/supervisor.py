"""Run a child in its own process group and make sure the whole group ends with us.

tritonserver forks one Python-backend stub per model instance; a stub that dies can leave the server
hanging on shutdown. So the server gets its own process group (not the terminal's foreground group: a
Ctrl-C does not reach it half-way), is signalled as a group (SIGTERM, grace, then SIGKILL), is killed by
the kernel if the starting thread dies (PR_SET_PDEATHSIG, main thread only: the signal fires when the
*thread* that forked exits), and an atexit hook stops whatever is still running when the interpreter exits.

It stays in the caller's session on purpose. Linux schedules sessions as autogroups, and on a small
CPU host a new session for the server let vLLM's busy engine processes keep a co-located frontend or
client waiting 0.6-0.9 s at a time on the run queue (measured on 2 cores: /proc/<pid>/schedstat); in
one session the kernel shares the CPU per task, and the stalls were gone."""

from __future__ import annotations

import atexit
import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable, Mapping, Sequence

_LIVE: set["ProcessGroup"] = set()
_LIVE_LOCK = threading.Lock()
_PR_SET_PDEATHSIG = 1


def _pdeathsig_hook():
    """A preexec_fn asking the kernel to SIGTERM the child when its parent thread dies. prctl is
    resolved here, in the parent: the child must not touch the dynamic loader between fork and exec."""
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):  # pragma: no cover - not glibc; atexit and stop() remain
        return None

    def hook() -> None:
        prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)

    return hook


def own_group(then: Callable[[], None] | None = None) -> dict:
    """Popen arguments that make the child lead a new process group in the caller's session, then run
    `then` before exec (`process_group=` is Python 3.11+; 3.10 gets the same setpgid in a preexec_fn)."""
    if sys.version_info >= (3, 11):
        return {"process_group": 0, "preexec_fn": then}

    def hook() -> None:
        os.setpgid(0, 0)
        if then is not None:
            then()

    return {"preexec_fn": hook}


class ProcessGroup:
    """One started child, leader of its own process group, with its output appended to `log_path`."""

    def __init__(self, argv: Sequence[str], env: Mapping[str, str], log_path: Path) -> None:
        self.argv = list(argv)
        self.env = dict(env)
        self.log_path = log_path
        self.proc: subprocess.Popen | None = None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    @property
    def pgid(self) -> int | None:
        return self.pid  # own_group() makes the child its group's leader

    def start(self) -> None:
        use_pdeathsig = sys.platform.startswith("linux") and threading.current_thread() is threading.main_thread()
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                self.argv,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                **own_group(_pdeathsig_hook() if use_pdeathsig else None),
            )
        with _LIVE_LOCK:
            _LIVE.add(self)

    def poll(self) -> int | None:
        return self.proc.poll() if self.proc else None

    def group_alive(self) -> bool:
        if self.pgid is None:
            return False
        if self.proc is not None:
            self.proc.poll()  # reap the leader, else its zombie keeps the group "alive"
        try:
            os.killpg(self.pgid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True

    def _signal(self, sig: int) -> None:
        try:
            os.killpg(self.pgid, sig)  # type: ignore[arg-type]
        except (ProcessLookupError, PermissionError):
            pass

    def stop(self, grace: float = 15.0, kill_wait: float = 5.0) -> int | None:
        """SIGTERM the group, wait up to `grace` s for the leader, SIGKILL whatever is left of the group."""
        if self.proc is None:
            return None
        try:
            if self.proc.poll() is None:
                self._signal(signal.SIGTERM)
                try:
                    self.proc.wait(timeout=grace)
                except subprocess.TimeoutExpired:
                    pass
            if self.group_alive():  # the leader hung, or stubs outlived it
                self._signal(signal.SIGKILL)
                self.proc.wait(timeout=kill_wait)
                deadline = time.monotonic() + kill_wait
                while self.group_alive() and time.monotonic() < deadline:
                    time.sleep(0.05)
        finally:
            with _LIVE_LOCK:
                _LIVE.discard(self)
        return self.proc.returncode


@atexit.register
def _stop_all() -> None:
    with _LIVE_LOCK:
        groups = list(_LIVE)
    for group in groups:
        group.stop(grace=5.0)
