"""ProcessGroup: the child leads its own process group (so stop() reaches every descendant) but stays in
the caller's session, so on Linux it shares the caller's scheduler autogroup."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from tritonpkg.proc.group import ProcessGroup


def _autogroup(pid: int | str) -> str | None:
    """The task's autogroup; None where there is none (no CONFIG_SCHED_AUTOGROUP, or the task sits in a
    non-root cpu cgroup, where the kernel prints nothing)."""
    try:
        fields = Path(f"/proc/{pid}/autogroup").read_text().split()
    except OSError:
        return None
    return fields[0] if fields else None


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="sessions and autogroups as Linux has them")
def test_child_leads_its_group_in_the_callers_session_and_stop_reaches_grandchildren(tmp_path):
    marker = tmp_path / "grandchild"
    group = ProcessGroup(["sh", "-c", f"sleep 60 & echo $! > {marker}; wait"], dict(os.environ), tmp_path / "log")
    group.start()
    try:
        pid = group.pid
        assert os.getpgid(pid) == pid != os.getpgid(0)
        assert os.getsid(pid) == os.getsid(0)
        assert _autogroup(pid) == _autogroup("self")
        deadline = time.monotonic() + 10
        while not marker.exists() or not marker.read_text().strip():
            assert time.monotonic() < deadline, "the child never started its own child"
            time.sleep(0.05)
        grandchild = int(marker.read_text())
    finally:
        group.stop(grace=2, kill_wait=5)
    assert not group.group_alive()
    with pytest.raises(ProcessLookupError):
        os.kill(grandchild, 0)
