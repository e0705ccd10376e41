"""Find the Triton server shipped inside the installed `nvidia-pytriton` wheel.

PyPI's `tritonserver` name is a placeholder; the only pip-installable full server is the one pytriton
bundles, so that wheel is the runtime's source. Its version is checked against the compatibility
matrix because the install directory is named after the server version the matrix records for it."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement

from tritonpkg.errors import RuntimeSetupError
from tritonpkg.runtime.layout import PIP_HINT, STUB_NAME, libs_dir, server_tree

DIST = "nvidia-pytriton"


@dataclass(frozen=True)
class RuntimeSource:
    """A wheel-shaped tree: `<site>/pytriton/tritonserver` and `<site>/nvidia_pytriton.libs`."""

    site: Path
    server_version: str
    dist_version: str

    @property
    def tree(self) -> Path:
        return server_tree(self.site)

    @property
    def libs(self) -> Path:
        return libs_dir(self.site)


def _pin() -> tuple[Requirement, str]:
    from tritonpkg.compat import toolkit

    local = toolkit()["local_runtime"]
    return Requirement(local["package"]), local["server_version"]


def locate_source() -> RuntimeSource:
    """The installed wheel, checked to be the version the toolkit's matrix pins."""
    pin, server_version = _pin()
    spec = importlib.util.find_spec("pytriton")  # does not import pytriton itself
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeSetupError(
            f"{DIST} is not installed in this interpreter, so there is no Triton server to install",
            field=DIST,
            expected=f"`{PIP_HINT}` (installs {pin})",
        )
    site = Path(next(iter(spec.submodule_search_locations))).parent
    try:
        dist_version = metadata.version(DIST)
    except metadata.PackageNotFoundError:
        dist_version = "unknown"
    if dist_version not in pin.specifier:
        raise RuntimeSetupError(
            f"{DIST} {dist_version} is installed; the toolkit's runtime is Triton {server_version} from {pin}",
            field=DIST,
            expected=f"`{PIP_HINT}`",
        )
    src = RuntimeSource(site=site, server_version=server_version, dist_version=dist_version)
    check_source(src)
    return src


def check_source(src: RuntimeSource) -> None:
    """Fail with the missing path rather than later with a cryptic loader error."""
    needed = [src.tree / "bin" / "tritonserver", src.tree / "backends" / "python", src.libs]
    for path in needed:
        if not path.exists():
            raise RuntimeSetupError(
                "the nvidia-pytriton installation is incomplete",
                file=path,
                expected=f"a reinstall: `pip install --force-reinstall {DIST}` then `{PIP_HINT}`",
            )


def stub_versions(tree: Path) -> list[str]:
    stubs = tree / "python_backend_stubs"
    found = [p.parent.name for p in stubs.glob(f"*/{STUB_NAME}")] if stubs.is_dir() else []
    return sorted(found, key=lambda v: tuple(int(x) for x in v.split(".") if x.isdigit()))


def python_stub(tree: Path, python_version: str) -> Path:
    """The Python-backend stub built for `python_version` ("3.11"); the stub embeds that libpython."""
    stub = tree / "python_backend_stubs" / python_version / STUB_NAME
    if not stub.is_file():
        have = ", ".join(stub_versions(tree)) or "none"
        raise RuntimeSetupError(
            f"no Python-backend stub for Python {python_version}; Triton's Python backend cannot run "
            "models from this interpreter",
            file=stub,
            expected=f"Python {' or '.join(stub_versions(tree)) or '3.8-3.13'} (stubs present: {have})",
        )
    return stub
