"""What `tritonpkg runtime info` reports: the installed runtime as found, without installing anything."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from tritonpkg import paths
from tritonpkg.errors import RuntimeSetupError
from tritonpkg.proc.interpreter import libpython
from tritonpkg.runtime.backends import current_python
from tritonpkg.runtime.ensure import find_runtime
from tritonpkg.runtime.layout import PIP_HINT, Runtime
from tritonpkg.runtime.source import locate_source


def backend_entries(rt: Runtime) -> list[dict]:
    """Each folder of the backend directory: Triton's `python`, or a toolkit backend and where it points."""
    out: list[dict] = []
    if not rt.backend_dir.is_dir():
        return out
    for entry in sorted(rt.backend_dir.iterdir()):
        if entry.name.startswith("."):
            continue
        kind = "python" if entry.name == "python" else "toolkit"
        target = os.readlink(entry) if entry.is_symlink() else str(entry)
        out.append({"name": entry.name, "kind": kind, "path": str(entry), "source": target,
                    "ok": (entry / ("libtriton_python.so" if kind == "python" else "model.py")).is_file()})
    return out


def runtime_report(cache: Path | None = None) -> dict:
    cache = Path(cache) if cache is not None else paths.cache_dir()
    report: dict = {
        "cache_dir": str(cache),
        "interpreter": sys.executable,
        "python_version": current_python(),
        "libpython": str(libpython()) if libpython() else None,
        "toolkit_backends_source": str(paths.backends_dir()),
    }
    try:
        src = locate_source()
        report["source"] = {"nvidia_pytriton": src.dist_version, "site": str(src.site), "error": None}
    except RuntimeSetupError as exc:
        report["source"] = {"nvidia_pytriton": None, "site": None, "error": exc.render()}
    rt = find_runtime(cache)
    report["installed"] = rt is not None
    if rt is None:
        report["hint"] = f"run `tritonpkg runtime install` (needs `{PIP_HINT}`)"
        return report
    report.update(rt.to_dict())
    report["stub_python"] = rt.python_version
    report["stub_matches_interpreter"] = rt.python_version == current_python()
    report["backends"] = backend_entries(rt)
    return report
