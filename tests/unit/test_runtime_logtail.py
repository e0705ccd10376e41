"""Pulling the cause of a failed start out of Triton's log, past the tables it prints afterwards."""

from __future__ import annotations

from pathlib import Path

from tritonpkg.proc.logtail import error_lines, tail

LOG = '''W1129 21:14:14.297021 5011 pinned_memory_manager.cc:273] "Unable to allocate pinned system memory"
E1129 21:14:14.297162 5011 server.cc:241] "CudaDriverHelper has not been initialized."
I1129 21:14:14.298368 5011 model_lifecycle.cc:472] "loading: bad:1"
E1129 21:14:17.492670 5011 model_lifecycle.cc:642] "failed to load 'bad' version 1: Internal: RuntimeError: boom"
+-------+---------+--------+
| Model | Version | Status |
+-------+---------+--------+
Error: Failed to initialize NVML
error: creating server: Internal - failed to load all models
'''


def test_error_lines_keep_causes_and_drop_cpu_noise(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text(LOG + "| filler |\n" * 500)
    found = error_lines(log)
    assert len(found) == 2
    assert "RuntimeError: boom" in found[0]
    assert found[1] == "error: creating server: Internal - failed to load all models"
    assert "boom" not in tail(log, 40)  # why a plain tail is not enough


def test_tail_of_a_missing_log_is_empty(tmp_path: Path) -> None:
    assert tail(tmp_path / "none.log") == ""
    assert error_lines(tmp_path / "none.log") == []
