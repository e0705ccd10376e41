"""Run a child in its own process group and make sure the whole group ends with us.

tritonserver forks one Python-backend stub per model instance; a stub that dies can leave the server
hanging on shutdown. So the server gets its own process group (not the terminal's foreground group: a
Ctrl-C does not reach it half-way), is signalled as a group (SIGTERM, grace, then SIGKILL), is killed by
the kernel if the starting thread dies (PR_SET_PDEATHSIG, main thread only: the signal fires when the
*thread* that forked exits), and an atexit hook stops whatever is still running when the interpreter exits.

No Python code runs in the child between fork and exec: CPython then forks without its at-fork hooks (vfork), and
grpcio's after-fork hook, which a preexec_fn brings in, aborted 6-9 of 400 children of a process with gRPC calls
in flight (the tritonserver starts that exited -6 with "epoll_wait error: Bad file descriptor"). The death
signal is set by a small exec shim instead (`_PDEATHSIG_SHIM`), a child of the starting thread like the server.

It stays in the caller's session on purpose. Linux schedules sessions as autogroups, and on a small
CPU host a new session for the server let vLLM's busy engine processes keep a co-located frontend or
client waiting 0.6-0.9 s at a time on the run queue (measured on 2 cores: /proc/<pid>/schedstat); in
one session the kernel shares the CPU per task, and the stalls were gone."""

from __future__ import annotations

import atexit
import contextlib
import errno
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

_LIVE: set[ProcessGroup] = set()
_LIVE_LOCK = threading.Lock()
_SPAWN = threading.local()  # .callback, .tag: see on_spawn
SPAWN_TAG = "TRITONPKG_SPAWN_TAG"
"""What a tagged start (on_spawn's `tag`) adds to the child's environment; its group's processes inherit it."""


_PDEATHSIG_SHIM = """import os, signal, sys
try:
    import ctypes
    ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGTERM), 0, 0, 0)  # PR_SET_PDEATHSIG, kept across exec
except (OSError, AttributeError):
    pass
if os.getppid() != int(sys.argv[1]):
    os._exit(1)  # the starter died before the signal was set
done = int(sys.argv[2])
os.set_inheritable(done, False)  # closed by a successful exec: the starter's read ends then
try:
    os.execvpe(sys.argv[3], sys.argv[3:], os.environ)
except OSError as exc:
    os.write(done, str(exc).encode())
    os._exit(127)
"""
"""Run by the child as `python -I -S -c SHIM STARTER_PID FD ARGV...`: asks the kernel to SIGTERM it when its
starting thread dies, then execs ARGV (the signal survives exec). FD closes at the exec (or carries its error), so
the starter returns only once ARGV runs, as a plain Popen does: what it records of the child is ARGV's."""


def _start_with_pdeathsig(argv: Sequence[str], env: Mapping[str, str], **popen: object) -> subprocess.Popen:
    """Popen ARGV behind the death-signal shim, returning once ARGV has been exec'd; a program that is missing
    or cannot be run raises as in Popen."""
    program = argv[0] if os.sep in argv[0] else shutil.which(argv[0], path=env.get("PATH", os.defpath))
    if program is None:
        raise FileNotFoundError(errno.ENOENT, "no such program", argv[0])
    read, write = os.pipe()
    try:
        proc = subprocess.Popen([sys.executable, "-I", "-S", "-c", _PDEATHSIG_SHIM, str(os.getpid()), str(write),
                                 program, *argv[1:]], env=env, pass_fds=(write,), **popen)  # type: ignore[call-overload]
    except BaseException:
        os.close(read)
        raise
    finally:
        os.close(write)
    with os.fdopen(read, "rb") as done:
        failure = done.read(4096)
    if failure:
        proc.wait()
        raise OSError(f"{argv[0]}: {failure.decode(errors='replace')}")
    return proc


def own_group(then: Callable[[], None] | None = None) -> dict:
    """Popen arguments that make the child lead a new process group in the caller's session, then run
    `then` before exec (`process_group=` is Python 3.11+; 3.10 gets the same setpgid in a preexec_fn).
    Without `then` on 3.11+ no Python code runs in the child before exec (see the module's docstring)."""
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
        self._terminated = False  # the leader got its SIGTERM

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    @property
    def pgid(self) -> int | None:
        return self.pid  # own_group() makes the child its group's leader

    def start(self) -> None:
        use_pdeathsig = (sys.platform.startswith("linux") and bool(sys.executable)
                         and threading.current_thread() is threading.main_thread())
        tag = getattr(_SPAWN, "tag", None)
        env = self.env if tag is None else {**self.env, SPAWN_TAG: tag}
        with open(self.log_path, "ab") as log:
            streams = {"stdin": subprocess.DEVNULL, "stdout": log, "stderr": subprocess.STDOUT, **own_group()}
            self.proc = (_start_with_pdeathsig(self.argv, env, **streams) if use_pdeathsig
                         else subprocess.Popen(self.argv, env=env, **streams))
        with _LIVE_LOCK:
            _LIVE.add(self)
        callback = getattr(_SPAWN, "callback", None)
        if callback is not None:
            callback(self)

    def detach(self) -> None:
        """Let the group outlive this interpreter: no stop at exit (whoever recorded its pgid owns it now)."""
        with _LIVE_LOCK:
            _LIVE.discard(self)

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
        if self.pgid is not None:
            signal_group(self.pgid, sig)

    def terminate_leader(self) -> None:
        """SIGTERM the leader alone, once (a second SIGTERM must not cut the first one's graceful stop short)."""
        if self.proc is not None and self.proc.poll() is None and not self._terminated:
            self._terminated = True
            self.proc.send_signal(signal.SIGTERM)

    def stop(self, grace: float = 15.0, kill_wait: float = 5.0, leader_only: bool = False) -> int | None:
        """SIGTERM the group (`leader_only`: the leader alone, which stops its children in its own order), wait
        up to `grace` s for the leader, SIGKILL whatever is left of the group."""
        if self.proc is None:
            return None
        try:
            if leader_only:
                self.terminate_leader()
            elif self.proc.poll() is None:
                self._signal(signal.SIGTERM)
            if self.proc.poll() is None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.proc.wait(timeout=grace)
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


@contextlib.contextmanager
def on_spawn(callback: Callable[[ProcessGroup], None], tag: str | None = None) -> Iterator[None]:
    """Within the block, every ProcessGroup this thread starts is handed to `callback` as soon as its Popen
    returns (the child has exec'd), before start() returns to whatever started it: a caller that must record
    what it started before it can be interrupted (the deploy state) does so however deep the start is.
    With a `tag`, each child gets SPAWN_TAG=`tag` in its environment, so a caller that recorded the tag before
    the spawn finds the group (stop_tagged) even when it was killed between the spawn and `callback`'s record."""
    outer = getattr(_SPAWN, "callback", None), getattr(_SPAWN, "tag", None)
    _SPAWN.callback = callback
    if tag is not None:
        _SPAWN.tag = tag
    try:
        yield
    finally:
        _SPAWN.callback, _SPAWN.tag = outer


def signal_group(pgid: int, sig: int) -> bool:
    """Send `sig` to the process group `pgid`; False when the group is gone or not ours to signal."""
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def process_identity(pid: int) -> tuple[int, str] | None:
    """(start time in clock ticks since boot: /proc/<pid>/stat field 22, executable: /proc/<pid>/exe) of a
    live process; None when there is none (or only its zombie). An executable this user may not read
    (another user's process) is "?", which matches no record."""
    try:
        with open(f"/proc/{int(pid)}/stat", "rb") as fh:
            text = fh.read().decode(errors="replace")
    except OSError:
        return None
    fields = text[text.rindex(")") + 2:].split()  # comm may hold spaces and parentheses; fields from 3 on
    if fields[0] in ("Z", "X"):
        return None
    try:
        exe = os.readlink(f"/proc/{int(pid)}/exe").removesuffix(" (deleted)")
    except OSError:
        exe = "?"
    return int(fields[19]), exe


def group_members(pgid: int) -> list[tuple[int, int]]:
    """(pid, start time) of every live (not zombie) process whose process group is `pgid`."""
    out = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as fh:
                text = fh.read().decode(errors="replace")
        except OSError:
            continue
        fields = text[text.rindex(")") + 2:].split()
        if fields[0] != "Z" and int(fields[2]) == pgid:
            out.append((int(entry.name), int(fields[19])))
    return out


def stop_adopted(pgid: int, leader: tuple[int, str], grace: float = 10.0) -> str:
    """End a process group another process started (so there is no child to wait for), whose leader the
    caller has just found to be `leader` (start time, executable): SIGTERM, up to `grace` s for the group to
    go (members left only as zombies that their parent elsewhere has not reaped count as gone after 2 s),
    then SIGKILL what is left, unless pid `pgid` is by then another process. Returns "gone", "stopped",
    "killed", or "not permitted" (another user's group)."""
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        return "gone"
    except PermissionError:
        return "not permitted"
    deadline = time.monotonic() + grace
    only_zombies = None
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return "stopped"
        if group_members(pgid):
            only_zombies = None
        elif only_zombies is None:
            only_zombies = time.monotonic()
        elif time.monotonic() - only_zombies > 2.0:
            return "stopped"
        time.sleep(0.1)
    # still there after the grace: the leader, or its stragglers if it exited meanwhile (the group existed at
    # every poll, and Linux reuses no pid that is still some process's group id)
    now = process_identity(pgid)
    if now is not None and now != leader:
        return "stopped"
    signal_group(pgid, signal.SIGKILL)
    return "killed"


def tagged_groups(tag: str) -> dict[int, list[tuple[int, int]]]:
    """pgid -> (pid, start time) of this user's live processes whose environment holds SPAWN_TAG=`tag`
    exactly (another user's environment is unreadable, so never listed)."""
    want = f"{SPAWN_TAG}={tag}".encode()
    uid = os.getuid()
    out: dict[int, list[tuple[int, int]]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            if entry.stat().st_uid != uid:
                continue
            with open(f"/proc/{entry.name}/environ", "rb") as fh:
                environ = fh.read(1 << 20).split(b"\0")
            with open(f"/proc/{entry.name}/stat", "rb") as fh:
                text = fh.read().decode(errors="replace")
        except OSError:
            continue
        fields = text[text.rindex(")") + 2:].split()
        if want in environ and fields[0] not in ("Z", "X"):
            out.setdefault(int(fields[2]), []).append((int(entry.name), int(fields[19])))
    return out


def stop_tagged(tag: str, grace: float = 10.0) -> list[str]:
    """Stop every process group a tagged start (on_spawn's `tag`) left running: a group whose leader carries
    the tag is stopped with stop_adopted; a tagged process whose leader is gone is SIGKILLed alone, if it is
    still the process found (same start time). Returns one line per group found (none: nothing was left)."""
    lines = []
    for pgid, members in sorted(tagged_groups(tag).items()):
        leader = process_identity(pgid) if any(pid == pgid for pid, _ in members) else None
        if leader is not None:
            lines.append(f"process group {pgid}: {stop_adopted(pgid, leader, grace)}")
            continue
        for pid, start in members:
            now = process_identity(pid)
            if now is not None and now[0] == start:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
        lines.append(f"process group {pgid} (its leader gone): pids {', '.join(str(p) for p, _ in members)} killed")
    return lines


def stop_popen(proc: subprocess.Popen, grace: float = 10.0, kill_wait: float = 10.0) -> int | None:
    """End a child started with `own_group()` and its whole group: SIGTERM, up to `grace` s for the
    leader, then SIGKILL; returns the leader's exit code."""
    if proc.poll() is None:
        signal_group(proc.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=grace)
    signal_group(proc.pid, signal.SIGKILL)  # stragglers of the group, or a leader that ignored SIGTERM
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=kill_wait)
    return proc.returncode


@atexit.register
def _stop_all() -> None:
    with _LIVE_LOCK:
        groups = list(_LIVE)
    for group in groups:
        group.stop(grace=5.0)
