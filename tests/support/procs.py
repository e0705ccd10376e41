"""What is left running: the live processes of a process group, read from /proc."""

from __future__ import annotations

from pathlib import Path


def group_pids(pgid: int) -> list[int]:
    """Live (non-zombie) processes whose process group is `pgid`."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            pids.append(int(entry.name))
    return pids
