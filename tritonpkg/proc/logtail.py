"""Read the end of a (possibly large) server log without loading all of it."""

from __future__ import annotations

from pathlib import Path

CHUNK = 256 * 1024


def tail(path: Path, lines: int = 80) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(0, 2)
            size = fh.tell()
            fh.seek(max(0, size - CHUNK))
            data = fh.read()
    except OSError:
        return ""
    text = data.decode(errors="replace").splitlines()
    return "\n".join(text[-lines:]) if lines > 0 else ""


# Error-level lines Triton 2.51 logs on every CPU-only host; they explain nothing about a failure.
BENIGN_ERRORS = ("CudaDriverHelper has not been initialized",)


def error_lines(path: Path, limit: int = 20) -> list[str]:
    """Triton's error-level lines (glog `E...`) and its final `error:` line: the cause of a failed start,
    which the start-up tables printed afterwards push out of a plain tail."""
    text = tail(path, lines=100_000)
    found = []
    for line in text.splitlines():
        is_error = (line[:1] == "E" and line[1:5].isdigit()) or line.startswith("error:")
        if is_error and not any(b in line for b in BENIGN_ERRORS) and line not in found:
            found.append(line)
    return found[-limit:]
