"""A start-up that Triton gave up on must end, not hang.

While Triton 2.51's Python backend waits for a stub's initialize, it clears the stub's health flag every second
and expects the stub's native heartbeat thread (every 300 ms) to set it again. One second without a heartbeat
(the stub starved or stalled while a vLLM engine starts on a busy host) and it declares the stub "not healthy"
and then waits for the stub process to exit, without killing it (StubLauncher::Launch). The stub is alive: it
finishes initialize ("engine started" in the log) and waits for commands that never come, and Triton never logs
the model loaded or failed. Stacks of both (tests/integration/test_vllm_backend_startup.py): tritonserver's
loading thread in wait4(<stub pid>) under StubLauncher::WaitForStubProcess, the stub idle in Stub::PopMessage.

The guard watches for exactly that: a thread of the parent (tritonserver) blocked in wait4 on this process
while this process is not finalizing. Then the stub exits, and Triton reports the load as failed with its own
reason ("Stub process '<instance>' is not healthy."). Linux only (/proc/<pid>/task/<tid>/syscall); where that
is unreadable the guard says so once and does nothing."""

from __future__ import annotations

import os
import platform
import threading
from collections.abc import Callable

WAIT4 = {"x86_64": 61, "aarch64": 260}  # the syscall number of wait4, which waitpid() is, per machine
POLL_S = 1.0


def parent_waits_for(pid: int, parent: int) -> bool | None:
    """Is a thread of `parent` blocked in wait4(pid, ...)? None when the kernel will not say (no /proc,
    another machine, no permission)."""
    number = WAIT4.get(platform.machine())
    if number is None:
        return None
    try:
        tids = os.listdir(f"/proc/{parent}/task")
    except OSError:
        return None
    readable = False
    for tid in tids:
        try:
            with open(f"/proc/{parent}/task/{tid}/syscall", encoding="ascii") as f:
                fields = f.read().split()
        except OSError:
            continue
        readable = True
        if len(fields) > 1 and fields[0] == str(number) and int(fields[1], 16) == pid:
            return True
    return False if readable else None


class StartupGuard:
    """From initialize until the model serves its first request (or finalize begins): once the parent waits
    for this process to exit, call `on_abandoned()` (which logs and exits the process)."""

    def __init__(self, on_abandoned: Callable[[], None], on_blind: Callable[[str], None],
                 poll_s: float = POLL_S) -> None:
        self._on_abandoned, self._on_blind, self._poll_s = on_abandoned, on_blind, poll_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="vllm-startup-guard", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        pid, parent = os.getpid(), os.getppid()
        while not self._stop.wait(self._poll_s):
            waiting = parent_waits_for(pid, parent)
            if waiting is None:
                self._on_blind(f"cannot read /proc/{parent}/task/*/syscall on {platform.machine()}: a start-up "
                               "that Triton abandons is not detected")
                return
            if waiting and not self._stop.is_set():
                self._on_abandoned()
                return
