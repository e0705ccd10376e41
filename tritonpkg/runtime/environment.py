"""The process environment tritonserver and its Python-backend stubs need.

Measured on Triton 2.51 (nvidia-pytriton 0.7.0), each rule below was seen failing without it:

* LD_LIBRARY_PATH starts with this interpreter's LIBDIR: the stub links `libpython3.X.so.1.0`, and
  without it the loader may pick the distribution's libpython, whose stdlib extensions then fail
  (`undefined symbol: _PyModule_Add`). The wheel's `nvidia_pytriton.libs` follows, for the stub and
  for backends copied out of their RPATH-relative place.
* PATH starts with the directory of this interpreter: the stub's embedded Python derives its
  `sys.prefix` (so site-packages, the virtualenv) from the `python3` it finds on PATH.

Deliberately not set: PYTHONNOUSERSITE, PYTHONUTF8, LC_ALL, PYTHONPATH. The stub starts an *isolated*
interpreter that ignores all PYTHON* variables and the locale environment (observed: user site is
already off, PYTHONPATH is not on sys.path, and the preferred encoding stays ASCII even with
LC_ALL=C.UTF-8 and PYTHONUTF8=1). A model.py that imports torch or vLLM must therefore call
`locale.setlocale(locale.LC_ALL, "C.UTF-8")` itself before those imports; see STUB_LOCALE_NOTE."""

from __future__ import annotations

import os
from collections.abc import Mapping

from tritonpkg.proc.interpreter import interpreter_bin_dir, interpreter_lib_dir
from tritonpkg.runtime.layout import Runtime

STUB_LOCALE_NOTE = (
    "Triton's Python-backend stub runs an isolated interpreter with the C (ASCII) locale and ignores "
    "LC_ALL/PYTHONUTF8: call locale.setlocale(locale.LC_ALL, 'C.UTF-8') in model.py before importing "
    "torch, transformers or vLLM."
)


def _prepend(first: list[str], existing: str | None) -> str:
    items = first + [p for p in (existing or "").split(os.pathsep) if p]
    return os.pathsep.join(dict.fromkeys(items))  # first occurrence of each, in order


def server_environment(rt: Runtime, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The full environment for the server process: `base` (default os.environ) plus the rules above."""
    env = dict(os.environ if base is None else base)
    libdir = interpreter_lib_dir()
    lib_first = ([str(libdir)] if libdir else []) + [str(d) for d in rt.lib_dirs]
    env["LD_LIBRARY_PATH"] = _prepend(lib_first, env.get("LD_LIBRARY_PATH"))
    env["PATH"] = _prepend([str(interpreter_bin_dir())], env.get("PATH"))
    return env
