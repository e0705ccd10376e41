"""The drain deadline `serve` announces to the vLLM backend (tritonpkg.serve.stack.announce_stop, read by
backends/vllm/stopping.py). A reader must never see a half-written announcement: the backend's stop watch took an
empty file for "the deadline is now" and cut every in-flight stream about a second into a 5 s drain (seen in 1 of
10 stops of tests/integration/test_engine_death.py)."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import threading
import time
from pathlib import Path

from tritonpkg.serve.stack import announce_stop

SRC = Path(__file__).resolve().parents[2] / "backends" / "vllm" / "stopping.py"


def _stopping(stop_file: Path):
    os.environ["TRITONPKG_VLLM_STOP_FILE"] = str(stop_file)
    try:
        spec = importlib.util.spec_from_file_location("vllm_backend_stopping_under_test", SRC)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        del os.environ["TRITONPKG_VLLM_STOP_FILE"]
    return module


def test_a_reader_never_sees_an_empty_announcement(tmp_path):
    """A reader in a tight loop beside 300 announcements: each read finds no file or a whole deadline."""
    stop_file = tmp_path / "stop" / "drain-deadline"
    stop_file.parent.mkdir(mode=0o700)
    seen: list[str] = []
    done = threading.Event()

    def read() -> None:
        while not done.is_set():
            with contextlib.suppress(OSError):
                seen.append(stop_file.read_text())

    reader = threading.Thread(target=read)
    reader.start()
    try:
        for _ in range(300):
            stop_file.unlink(missing_ok=True)
            announce_stop(stop_file, 5.0)
    finally:
        done.set()
        reader.join()
    assert seen and all(text.strip() for text in seen), f"{sum(not t.strip() for t in seen)} empty reads"
    assert abs(float(stop_file.read_text()) - (time.time() + 5.0)) < 5.0
    assert [p.name for p in stop_file.parent.iterdir()] == ["drain-deadline"]  # no temporary file left


def test_an_announcement_not_yet_written_is_no_deadline(tmp_path):
    """An empty file is a write in progress: no deadline yet, so nothing is cut; a whole one is read as written."""
    stop_file = tmp_path / "drain-deadline"
    stopping = _stopping(stop_file)
    assert stopping.deadline() is None  # no stop announced
    stop_file.write_text("")
    assert stopping.deadline() is None
    stop_file.write_text("1796666711.250\n")
    assert stopping.deadline() == 1796666711.25
    stop_file.write_text("not a number\n")  # anything else: the stop is announced and its deadline is now
    assert abs(stopping.deadline() - time.time()) < 5


def test_an_announcement_is_never_written_through_a_link(tmp_path):
    """The stop file's path comes from a unit's state (deploy): a symlink there, to a file or as its folder, is
    refused, nothing is written outside, and the stop goes on (False, no exception)."""
    outside = tmp_path / "outside"
    outside.mkdir(mode=0o700)
    victim = outside / "victim"
    victim.write_text("keep\n")
    unit = tmp_path / "unit"
    (unit / "stop").mkdir(parents=True, mode=0o700)
    linked_file = unit / "stop" / "drain-deadline"
    linked_file.symlink_to(victim)
    assert announce_stop(linked_file, 5.0) is False
    (unit / "linked").symlink_to(outside, target_is_directory=True)
    assert announce_stop(unit / "linked" / "drain-deadline", 5.0) is False
    assert victim.read_text() == "keep\n" and sorted(p.name for p in outside.iterdir()) == ["victim"]
