"""The whole-suite schedule (tests/support/schedule.py) in a real xdist run: a module runs whole on one
worker, and the modules that read one session server run on the same worker, so no server starts twice."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROBE = '''
import os
from pathlib import Path

import pytest

LOG = Path({log!r})


{fixture}
@pytest.mark.parametrize("n", range(6))
def test_probe({arg}n):
    with LOG.open("a") as f:
        f.write(f"{{__name__}} {{os.environ['PYTEST_XDIST_WORKER']}}\\n")
'''
SERVER = "@pytest.fixture(scope='module')\ndef vllm_server():\n    return None\n"


def test_modules_stay_whole_and_a_shared_server_s_users_share_a_worker(tmp_path: Path) -> None:
    log = tmp_path / "workers.log"
    probes = []
    for name, shared in (("a", True), ("b", True), ("c", False), ("d", False)):
        path = ROOT / "tests" / "unit" / f"_schedule_probe_{os.getpid()}_{name}.py"
        path.write_text(PROBE.format(log=str(log), fixture=SERVER if shared else "",
                                     arg="vllm_server, " if shared else ""))
        probes.append(path)
    try:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_XDIST", "TRITONPKG_TEST_GROUPS"))}
        run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2",
                              "--dist", "loadgroup", "--no-loadscope-reorder", *map(str, probes)],
                             cwd=ROOT, env=env, capture_output=True, text=True, timeout=180, check=False)
    finally:
        for path in probes:
            path.unlink()
    assert run.returncode == 0, run.stdout + run.stderr
    seen: dict[str, set[str]] = {}
    for line in log.read_text().splitlines():
        module, worker = line.split()
        seen.setdefault(module[-1], set()).add(worker)
    assert all(len(workers) == 1 for workers in seen.values()), seen
    assert seen["a"] == seen["b"], seen
    assert len(seen) == 4 and len(set().union(*seen.values())) == 2, seen  # both workers had work
