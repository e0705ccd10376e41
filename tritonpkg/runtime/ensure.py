"""`ensure_runtime()`: the one call that makes a usable local runtime, cheaply repeatable."""

from __future__ import annotations

from pathlib import Path

from tritonpkg import paths
from tritonpkg.runtime.backends import build_backend_dir, current_python
from tritonpkg.runtime.fsutil import file_lock
from tritonpkg.runtime.install import LOCK_NAME, install_server, read_marker
from tritonpkg.runtime.layout import Runtime, backend_root, install_root, libs_dir, server_tree
from tritonpkg.runtime.source import RuntimeSource, locate_source


def ensure_runtime(
    cache: Path | None = None,
    *,
    source: RuntimeSource | None = None,
    python_version: str | None = None,
) -> Runtime:
    """Install the server into the cache if missing, then refresh the backend directory.

    Idempotent: after the first install a call only re-links the toolkit backends (milliseconds)."""
    cache = Path(cache) if cache is not None else paths.cache_dir()
    src = source if source is not None else locate_source()
    root = install_server(src, cache)
    version = python_version or current_python()
    with file_lock(cache / LOCK_NAME):
        stub, names = build_backend_dir(backend_root(cache), server_tree(root), version)
    return _runtime(root, src.server_version, backend_root(cache), version, stub, names)


def find_runtime(cache: Path | None = None, *, version: str | None = None) -> Runtime | None:
    """The installed runtime as it is now, without installing or refreshing anything (for `info`)."""
    cache = Path(cache) if cache is not None else paths.cache_dir()
    if version is None:
        from tritonpkg.compat import toolkit

        version = toolkit()["local_runtime"]["server_version"]
    root = install_root(cache, version)
    if read_marker(root) is None:
        return None
    bdir = backend_root(cache)
    stub = bdir / "python" / "triton_python_backend_stub"
    names = tuple(
        sorted(p.name for p in bdir.iterdir() if p.name != "python" and not p.name.startswith("."))
    ) if bdir.is_dir() else ()
    return _runtime(root, version, bdir, stub_python(root, stub) or "unknown", stub, names)


def stub_python(root: Path, stub: Path) -> str | None:
    """Which Python version the stub in the backend dir was built for (by content, not by name)."""
    from tritonpkg.runtime.fsutil import same_file

    if not stub.is_file():
        return None
    for candidate in sorted((server_tree(root) / "python_backend_stubs").glob("*/triton_python_backend_stub")):
        if same_file(candidate, stub):
            return candidate.parent.name
    return None


def _runtime(root: Path, version: str, bdir: Path, py: str, stub: Path, names: tuple[str, ...]) -> Runtime:
    return Runtime(
        version=version,
        server_bin=server_tree(root) / "bin" / "tritonserver",
        backend_dir=bdir,
        lib_dirs=[libs_dir(root)],
        root=root,
        python_version=py,
        python_stub=stub,
        toolkit_backends=names,
    )
