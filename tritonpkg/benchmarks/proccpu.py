"""CPU time per process of a server's process tree, read from /proc, for benchmarks that share one small
machine between the servers and the client: there a path that costs more CPU per response is slower
even when every step is fast, so the benches print where the CPU went beside the throughput.

Linux only (/proc/<pid>/stat, whose user + system times cover all of a process's threads). A process that
exits between two readings cannot be read at the second, so what it used since the first is not counted."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

PROC = Path("/proc")
TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> tuple[str, int, float] | None:
    """(comm, parent pid, user + system CPU seconds) of one process, or None when it is gone."""
    try:
        raw = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    comm, rest = raw[raw.index("(") + 1:raw.rindex(")")], raw[raw.rindex(")") + 2:].split()
    return comm, int(rest[1]), (int(rest[11]) + int(rest[12])) * TICK_S


def descendants(root: int) -> list[int]:
    """`root` and every process below it, from one scan of /proc."""
    parents: dict[int, list[int]] = {}
    for entry in PROC.iterdir():
        if entry.name.isdigit():
            info = _stat(int(entry.name))
            if info is not None:
                parents.setdefault(info[1], []).append(int(entry.name))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(parents.get(pid, ()))
    return found


def _role(pid: int, comm: str, roles: dict[str, str]) -> str:
    """The first role whose key occurs in the process name or command line; else the process name."""
    try:
        cmdline = (PROC / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        cmdline = ""
    for key, role in roles.items():
        if key in comm or key in cmdline:
            return role
    return comm


@dataclass
class CpuMeter:
    """CPU seconds by role over the intervals between `start()` and `stop()`, summed over calls.
    `trees`: pids whose whole process trees are measured (a server); `singles`: role -> a pid measured
    alone (the bench's own process, whose children are the servers); `roles`: a substring of a process
    name or command line -> the role it is reported under (else its process name)."""

    trees: list[int]
    singles: dict[str, int] = field(default_factory=dict)
    roles: dict[str, str] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)  # role -> CPU seconds
    _open: dict[int, tuple[str, float]] = field(default_factory=dict)

    def _read(self) -> dict[int, tuple[str, float]]:
        now: dict[int, tuple[str, float]] = {}
        for root in self.trees:
            for pid in descendants(root):
                info = _stat(pid)
                if info is not None:
                    now[pid] = (_role(pid, info[0], self.roles), info[2])
        for role, pid in self.singles.items():
            info = _stat(pid)
            if info is not None:
                now[pid] = (role, info[2])
        return now

    def start(self) -> None:
        self._open = self._read()

    def stop(self) -> None:
        for pid, (role, cpu) in self._read().items():
            before = self._open.get(pid)
            self.seconds[role] = self.seconds.get(role, 0.0) + cpu - (before[1] if before else 0.0)
        self._open = {}

    def per_unit(self, units: float) -> list[tuple[str, float]]:
        """[(role, CPU seconds per unit)], the largest first."""
        return sorted(((role, s / units) for role, s in self.seconds.items() if s > 0), key=lambda r: -r[1])
