"""A Triton installed in a folder the way NVIDIA's images have it (/opt/tritonserver: bin/tritonserver,
backends/<name>/, lib/): what `tritonpkg serve` runs inside the toolkit image instead of the local runtime."""

from __future__ import annotations

import sys
from pathlib import Path

from tritonpkg.errors import RuntimeSetupError
from tritonpkg.runtime.layout import STUB_NAME, Runtime

VERSION_FILE = "TRITON_VERSION"


def installed_runtime(home: Path) -> Runtime:
    """The Runtime of the Triton in `home`; its backends are the ones installed there (NVIDIA's `vllm`, and the
    toolkit's where the image placed it), never relinked."""
    home = home.absolute()
    server = home / "bin" / "tritonserver"
    stub = home / "backends" / "python" / STUB_NAME
    for path, what in ((server, "bin/tritonserver"), (stub, f"backends/python/{STUB_NAME}")):
        if not path.is_file():
            raise RuntimeSetupError(f"no {what} in the Triton folder", file=path, field="--triton-home",
                                    expected="a Triton installation such as the image's /opt/tritonserver")
    version_file = home / VERSION_FILE
    version = version_file.read_text(errors="replace").strip()[:64] if version_file.is_file() else "unknown"
    backends = home / "backends"
    names = tuple(sorted(p.name for p in backends.iterdir() if p.name != "python" and (p / "model.py").is_file()))
    return Runtime(version=version or "unknown", server_bin=server, backend_dir=backends, lib_dirs=[home / "lib"],
                   root=home, python_version=f"{sys.version_info.major}.{sys.version_info.minor}", python_stub=stub,
                   toolkit_backends=names)
