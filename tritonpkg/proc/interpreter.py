"""Where this interpreter lives: the directory whose `python3` it is (what Triton's Python-backend stub
finds first on PATH and embeds) and the shared libpython the stub links."""

from __future__ import annotations

import sys
import sysconfig
from pathlib import Path

from tritonpkg.errors import RuntimeSetupError


def interpreter_lib_dir() -> Path | None:
    libdir = sysconfig.get_config_var("LIBDIR")
    return Path(libdir) if libdir else None


def libpython() -> Path | None:
    """The shared libpython the stub will load from LIBDIR, or None when this Python has none there."""
    libdir, soname = interpreter_lib_dir(), sysconfig.get_config_var("INSTSONAME")
    if libdir is None or not soname:
        return None
    path = libdir / soname
    return path if path.exists() else None


def interpreter_bin_dir() -> Path:
    """The directory whose `python3` is this interpreter (the venv's bin/ inside a virtualenv)."""
    bindir = Path(sys.executable).parent
    if not (bindir / "python3").exists():
        raise RuntimeSetupError(
            "the Python-backend stub finds its interpreter as `python3` on PATH, and this "
            "interpreter's directory has none",
            file=bindir,
            expected=f"a python3 next to {sys.executable} (e.g. run from a virtualenv)",
        )
    return bindir
