"""The skip guard fails a whole-suite run that skipped a test it must run, in a real pytest run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support import skip_guard

ROOT = Path(__file__).resolve().parents[2]


def test_allowed_file_parses_and_every_entry_has_a_reason() -> None:
    allowed = skip_guard.load_allowed()
    assert allowed
    assert all(reason for reason in allowed.values())


def test_guard_reports_unlisted_skips_and_stale_entries() -> None:
    guard = skip_guard.SkipGuard({"tests/a.py::ok": "meant"})
    guard.collected.update({"tests/a.py::ok", "tests/b.py::t"})
    guard.record("tests/a.py::ok", "meant")
    guard.record("tests/b.py::t", "peft is missing")
    assert guard.violations() == ["tests/b.py::t: skipped (peft is missing)"]
    stale = skip_guard.SkipGuard({"tests/a.py::gone": "was meant", "tests/elsewhere.py::t": "not collected"})
    stale.collected.add("tests/a.py::ok")
    name = skip_guard.ALLOWED.name
    assert stale.violations() == [f"tests/a.py::gone: listed in {name} but matches no collected test"]


def _run(tmp_path: Path, body: str, guard: bool, *args: str) -> subprocess.CompletedProcess[str]:
    test = ROOT / "tests" / "unit" / f"_skip_guard_probe_{os.getpid()}.py"
    test.write_text(body)
    try:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST")}  # this run's own workers
        env[skip_guard.ENV] = "1" if guard else "0"
        env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"  # xdist alone: the installed plugins' imports are most of a start
        return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "xdist", *args,
                               str(test)],
                              cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False)
    finally:
        test.unlink()


def test_a_real_run_with_a_skip_fails_only_under_the_guard(tmp_path: Path) -> None:
    body = "import pytest\n\ndef test_needs_a_part():\n    pytest.importorskip('no_such_module_here')\n"
    plain = _run(tmp_path, body, guard=False)
    assert plain.returncode == 0, plain.stdout
    guarded = _run(tmp_path, body, guard=True)
    assert guarded.returncode == 1, guarded.stdout
    assert "skip guard" in guarded.stdout
    assert "test_needs_a_part: skipped" in guarded.stdout


def test_the_guard_holds_when_workers_run_the_tests(tmp_path: Path) -> None:
    """scripts/test.sh runs the suite on xdist workers: the skip happens in a worker, the verdict is the
    controller's."""
    body = ("import pytest\n\ndef test_needs_a_part():\n    pytest.importorskip('no_such_module_here')\n\n"
            "def test_runs():\n    pass\n")
    guarded = _run(tmp_path, body, True, "-n", "2", "--dist", "loadgroup")
    assert guarded.returncode == 1, guarded.stdout
    assert "test_needs_a_part" in guarded.stdout and "skipped" in guarded.stdout, guarded.stdout
