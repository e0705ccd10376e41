"""The whole-suite schedule (tests/support/schedule.py) in a real xdist run: a module runs whole on one
worker, and the modules that read one session server run on the same worker, so no server starts twice."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
from pathlib import Path

from tests.support import schedule

ROOT = Path(__file__).resolve().parents[2]

PROBE = '''
import itertools
import os
import time
from pathlib import Path

import pytest

LOG = Path({log!r})
{mark}

{fixture}
@pytest.mark.parametrize("n", range(6))
def test_probe({arg}n):
    began = time.monotonic()
    time.sleep(0.05)
    with LOG.open("a") as f:
        f.write(f"{{__name__}} {{os.environ['PYTEST_XDIST_WORKER']}} {{began}} {{time.monotonic()}}\\n")
'''
SERVER = "@pytest.fixture(scope='module')\ndef vllm_server():\n    return None\n"


def _run(tmp_path: Path, modules: dict[str, str]) -> list[tuple[str, str, float, float]]:
    """Run probe modules (name -> "shared", "alone" or "") on two workers; (module, worker, began, ended) per test."""
    log = tmp_path / "workers.log"
    probes = []
    for name, kind in modules.items():
        path = ROOT / "tests" / "unit" / f"_schedule_probe_{os.getpid()}_{name}.py"
        path.write_text(PROBE.format(log=str(log), fixture=SERVER if kind == "shared" else "",
                                     arg="vllm_server, " if kind == "shared" else "",
                                     mark="pytestmark = pytest.mark.alone" if kind == "alone" else ""))
        probes.append(path)
    try:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_XDIST", "TRITONPKG_TEST_GROUPS"))}
        env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"  # xdist alone: the installed plugins' imports are most of a start
        run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "xdist", "-n", "2",
                              "--dist", "loadgroup", "--no-loadscope-reorder", *map(str, probes)],
                             cwd=ROOT, env=env, capture_output=True, text=True, timeout=180, check=False)
    finally:
        for path in probes:
            path.unlink()
    assert run.returncode == 0, run.stdout + run.stderr
    rows = []
    for line in log.read_text().splitlines():
        module, worker, began, ended = line.split()
        rows.append((module[-1], worker, float(began), float(ended)))
    return rows


def _workers(rows: list[tuple[str, str, float, float]]) -> dict[str, set[str]]:
    seen: dict[str, set[str]] = {}
    for module, worker, _, _ in rows:
        seen.setdefault(module, set()).add(worker)
    return seen


def test_modules_stay_whole_and_a_shared_server_s_users_share_a_worker(tmp_path: Path) -> None:
    seen = _workers(_run(tmp_path, {"a": "shared", "b": "shared", "c": "", "d": ""}))
    assert all(len(workers) == 1 for workers in seen.values()), seen
    assert seen["a"] == seen["b"], seen
    assert len(seen) == 4 and len(set().union(*seen.values())) == 2, seen  # both workers had work


def test_alone_modules_run_with_no_heavy_module_beside_them(tmp_path: Path) -> None:
    """The shared-server probe is heavy; the plain probes under tests/unit are light and may run beside."""
    rows = _run(tmp_path, {"a": "shared", "b": "", "c": "", "e": "alone", "f": "alone"})
    seen = _workers(rows)
    assert all(len(workers) == 1 for workers in seen.values()), seen
    assert seen["e"] == seen["f"], seen  # one worker runs every alone module
    assert len(set().union(*seen.values())) == 2, seen  # the others still ran on two workers
    alone = sorted((r for r in rows if r[0] in "ef"), key=lambda r: r[2])
    heavy = [r for r in rows if r[0] == "a"]
    assert len(alone) == 12 and len(heavy) == 6 and len(rows) == 30, rows
    assert min(r[2] for r in alone) >= max(r[3] for r in heavy), rows  # every heavy test had ended
    assert all(nxt[2] >= cur[3] for cur, nxt in itertools.pairwise(alone)), alone  # one alone test at a time


def test_light_and_heavy_groups_are_told_apart() -> None:
    assert schedule.light("tests/unit/test_spec.py") and schedule.light("tests/security/test_frontend_surface.py")
    assert not schedule.light("tests/integration/test_serve_stack.py")  # starts a server
    assert not schedule.light("python_server") and not schedule.light("vllm_server")  # a session server's users
    assert not schedule.light(schedule.ALONE + "tests/unit/test_spec.py")
    assert not schedule.light("tests/unit/test_plugins_validate.py")  # measured long (vLLM in subprocesses)


def test_alone_modules_alone_in_a_run_do_not_overlap(tmp_path: Path) -> None:
    rows = sorted(_run(tmp_path, {"e": "alone", "f": "alone"}), key=lambda r: r[2])
    assert len(rows) == 12, rows
    assert all(nxt[2] >= cur[3] for cur, nxt in itertools.pairwise(rows)), rows  # one test at a time


def test_a_module_that_asks_for_a_session_server_by_name_declares_it() -> None:
    """The groups are read from each test's declared fixtures: a module that gets a session server through
    `request.getfixturevalue` alone lands in a group of its own, and a two-worker run starts that server twice (the
    differential corpus ran twice so, 90 s of both cores)."""
    texts = {path.relative_to(ROOT).as_posix(): path.read_text(encoding="utf-8")
             for path in sorted((ROOT / "tests").rglob("test_*.py"))}
    undeclared = [(path, name) for path, text in texts.items() for name in schedule.SESSION_SERVERS
                  if f'getfixturevalue("{name}")' in text and f'usefixtures("{name}")' not in text]
    assert undeclared == [], undeclared
