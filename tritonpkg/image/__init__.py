"""The toolkit image: NVIDIA's `<release>-vllm-python-py3` with the toolkit installed, its vLLM backend placed
where Triton finds it, and `tritonpkg serve` as the entrypoint. One image per release, so the tag names both
versions.

    plan = plan_image("26.07")           # pure: base image, tag, backend placement, build args
    write_context(plan, Path("ctx"))     # Dockerfile + the toolkit's wheel
    run_build(plan, Path("ctx"))         # `docker build`, where Docker exists

Where the toolkit's backend goes is the matrix's call (toolkit_features, `toolkit_backend` on the release's
vLLM): replacing NVIDIA's `vllm` only where it holds, beside it as `tritonpkg_vllm` elsewhere."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Literal

from pydantic import BaseModel

from tritonpkg import __version__, paths
from tritonpkg.errors import PackageError

IMAGE_NAME = "tritonpkg"
DOCKERFILE = Path(__file__).with_name("Dockerfile")
BESIDE_NAME = "tritonpkg_vllm"
"""The toolkit backend's folder under /opt/tritonserver/backends when NVIDIA's keeps the name `vllm`."""
RUN_USER = "triton-server"
"""The non-root user (uid 1000) NVIDIA's images create for running Triton."""
CONTAINER_TRITON_HOME = "/opt/tritonserver"
WHEEL_BUILD_TIMEOUT_S = 600
ENGINE_PROBE_TIMEOUT_S = 20
_SOURCES = ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md", "tritonpkg", "templates", "backends")
"""What of the checkout the wheel is built from (copied aside: a build never writes into the checkout)."""

BackendPlacement = Literal["beside", "replace"]


def default_tag(release: str) -> str:
    """The tag `tritonpkg image build --release R` gives its image (and Kubernetes' --toolkit-image default):
    the toolkit version and the Triton release, e.g. 'tritonpkg:0.1.0-26.07'."""
    from tritonpkg.compat import get_release

    return f"{IMAGE_NAME}:{__version__}-{get_release(release).release}"


class ImagePlan(BaseModel):
    """What one image build is: every value comes from the matrix or the caller, none is read from disk."""

    release: str
    base_image: str
    tag: str
    vllm: str | None
    toolkit_backend: BackendPlacement
    backend_name: str  # the toolkit backend's name in the image (config.pbtxt's `backend:` that selects it)
    why: str

    def build_args(self, wheel: str) -> dict[str, str]:
        return {"RELEASE": self.release, "WHEEL": wheel, "TOOLKIT_BACKEND": self.toolkit_backend}


def plan_image(release: str, tag: str | None = None) -> ImagePlan:
    """The image of `release` (a row of the matrix); pure."""
    from tritonpkg.compat import feature_holds, get_release

    row = get_release(release)
    base = f"nvcr.io/nvidia/tritonserver:{row.release}-vllm-python-py3"
    if row.ngc_image != base:
        raise PackageError(f"the matrix names {row.ngc_image!r} for {row.release}; the Dockerfile builds FROM {base}",
                           file="tritonpkg/compat/matrix.json", field=f"releases[{row.release}].ngc_image",
                           expected=base)
    holds = feature_holds("toolkit_backend", row.vllm_base) if row.vllm_base is not None else None
    if holds is not None and holds[0]:
        placement: BackendPlacement = "replace"
        why = (f"the toolkit's backend holds on this release's vLLM {row.vllm_base} ({holds[1]}): it serves as "
               f"`vllm`; NVIDIA's is kept as vllm_nvidia")
    else:
        placement = "beside"
        reason = holds[1] if holds is not None else "the matrix does not know this release's vLLM"
        why = (f"the toolkit's backend does not hold on vLLM {row.vllm_base or 'unknown'} ({reason}): NVIDIA's "
               f"backend stays `vllm`, the toolkit's sits beside it as `{BESIDE_NAME}`")
    return ImagePlan(release=row.release, base_image=base, tag=tag or default_tag(row.release),
                     vllm=str(row.vllm_base) if row.vllm_base else None, toolkit_backend=placement,
                     backend_name="vllm" if placement == "replace" else BESIDE_NAME, why=why)


def docker_build_argv(plan: ImagePlan, context: Path, wheel: str) -> list[str]:
    argv = ["docker", "build", "--tag", plan.tag]
    for key, value in plan.build_args(wheel).items():
        argv += ["--build-arg", f"{key}={value}"]
    return [*argv, str(context)]


def write_context(plan: ImagePlan, out: Path, project: Path | None = None) -> str:
    """Write the build context (Dockerfile + the toolkit's wheel) to `out`, whole or not at all; returns the
    wheel's file name. `out` must not hold anything yet: a context is never mixed with older files."""
    from tritonpkg.repository.atomic import staged_directory

    root = project or paths.PROJECT_ROOT
    if not (root / "pyproject.toml").is_file():
        raise PackageError("the toolkit's wheel is built from its project checkout, and there is none here",
                           file=root / "pyproject.toml", expected="tritonpkg run from a checkout of the project")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise PackageError("the build context folder already holds files", file=out,
                           expected="a new or empty folder")
    with staged_directory(out, copy_existing=False) as staging:
        shutil.copyfile(DOCKERFILE, staging / "Dockerfile")
        return _build_wheel(root, staging)


def _build_wheel(root: Path, dest: Path) -> str:
    """`pip wheel --no-deps` of a copy of the checkout's sources (offline: the build backend is this
    interpreter's setuptools)."""
    with tempfile.TemporaryDirectory(prefix="tritonpkg-wheel-") as tmp:
        src = Path(tmp) / "src"
        src.mkdir()
        for name in _SOURCES:
            path = root / name
            if path.is_dir():
                shutil.copytree(path, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
            elif path.is_file():
                shutil.copyfile(path, src / name)
        result = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                                 "--wheel-dir", str(dest), str(src)], capture_output=True, text=True,
                                timeout=WHEEL_BUILD_TIMEOUT_S, check=False)
        wheels = sorted(dest.glob("tritonpkg-*.whl"))
        if result.returncode != 0 or len(wheels) != 1:
            raise PackageError(f"building the toolkit's wheel failed:\n{(result.stdout + result.stderr)[-2000:]}",
                               file=root / "pyproject.toml", expected="`pip wheel --no-deps .` to succeed")
    return wheels[0].name


def docker_engine() -> bool:
    """Whether a Docker engine answers here (a `docker` CLI without a daemon cannot build)."""
    docker = shutil.which("docker")
    if docker is None:
        return False
    try:
        probe = subprocess.run([docker, "version", "--format", "{{.Server.Version}}"], capture_output=True,
                               timeout=ENGINE_PROBE_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        return False
    return probe.returncode == 0


def run_build(argv: list[str]) -> int:
    """Run `docker build`; its output goes straight to the terminal."""
    return subprocess.run(argv, check=False).returncode
