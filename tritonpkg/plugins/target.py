"""What a target interpreter has installed, its PEP 508 marker values and its entry points, read by
running that interpreter once (the runtime venv may not be the one running tritonpkg)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from packaging.utils import canonicalize_name
from pydantic import BaseModel

from tritonpkg.plugins import footprint
from tritonpkg.plugins.contents import Footprint
from tritonpkg.plugins.errors import PluginError
from tritonpkg.proc.interpreter import interpreter_bin_dir

_PROBE = r"""
import json, os, platform, sys, sysconfig
from importlib import metadata
groups = json.loads(sys.argv[1])
dists, stamps = {}, {}
for d in metadata.distributions():
    name = d.metadata["Name"]
    if name and name not in dists:
        dists[name] = d.version
        path = getattr(d, "_path", None)  # the .dist-info folder; its mtime changes on every reinstall
        if path is not None and os.path.exists(str(path)):
            stamps[name] = os.stat(str(path)).st_mtime_ns
eps = metadata.entry_points()
points, owners = {}, {}
for g in groups:
    sel = eps.select(group=g) if hasattr(eps, "select") else eps.get(g, [])
    points[g] = {ep.name: ep.value for ep in sel}
    owners[g] = {ep.name: ep.dist.metadata["Name"] for ep in sel if getattr(ep, "dist", None) is not None}
impl = sys.implementation
iv = "{0.major}.{0.minor}.{0.micro}".format(impl.version)
markers = {
    "implementation_name": impl.name, "implementation_version": iv, "os_name": os.name,
    "platform_machine": platform.machine(), "platform_release": platform.release(),
    "platform_system": platform.system(), "platform_version": platform.version(),
    "python_full_version": platform.python_version(),
    "platform_python_implementation": platform.python_implementation(),
    "python_version": ".".join(platform.python_version_tuple()[:2]), "sys_platform": sys.platform,
}
print(json.dumps({"dists": dists, "stamps": stamps, "entry_points": points, "owners": owners, "markers": markers,
                  "executable": sys.executable, "purelib": sysconfig.get_paths()["purelib"]}))
"""


class TargetEnvironment(BaseModel):
    python: str
    executable: str
    purelib: str
    dists: dict[str, str]  # canonical name -> version
    stamps: dict[str, int] = {}  # canonical name -> mtime of its .dist-info (a reinstall changes it)
    entry_points: dict[str, dict[str, str]]  # group -> name -> object
    owners: dict[str, dict[str, str]] = {}  # group -> name -> distribution (Python >= 3.10)
    markers: dict[str, str]


def probe(python: str, groups: list[str], timeout: float = 120) -> TargetEnvironment:
    data = json.loads(_last_line(python, [_PROBE, json.dumps(sorted(set(groups)))], "packages", timeout))
    dists = {canonicalize_name(k): v for k, v in data.pop("dists").items()}
    stamps = {canonicalize_name(k): v for k, v in data.pop("stamps").items()}
    return TargetEnvironment(python=python, dists=dists, stamps=stamps, **data)


def footprint_of(python: str, timeout: float = 120) -> Footprint:
    """What `python`'s environment has on its import path and in its bin folder, with owners: the source
    of tritonpkg.plugins.footprint run in that interpreter (it need not have tritonpkg)."""
    source = Path(footprint.__file__).read_text()
    return Footprint.model_validate_json(_last_line(python, [source], "files", timeout))


def _last_line(python: str, code_and_args: list[str], listing: str, timeout: float) -> str:
    """The last line `python -c CODE ARGS...` prints: what a probe run in the runtime interpreter answers."""
    try:
        proc = subprocess.run([python, "-c", *code_and_args], capture_output=True, text=True, timeout=timeout,
                              check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise PluginError(f"cannot run the runtime interpreter: {exc}", file=python,
                          expected="the python that runs Triton's Python-backend stub") from exc
    if proc.returncode != 0:
        tail = "\n".join(proc.stderr.strip().splitlines()[-5:])
        raise PluginError(f"the runtime interpreter failed to list its {listing}:\n{tail}", file=python)
    return proc.stdout.strip().splitlines()[-1]


def local_footprint() -> Footprint:
    """The same picture of this interpreter's environment, in-process (what `package` checks against)."""
    return Footprint.model_validate(footprint.footprint())


def default_python() -> str:
    """The interpreter Triton's stub embeds: `python3` in the first PATH entry the server gets,
    i.e. beside this interpreter (tritonpkg.runtime.environment); the stub ignores PYTHON* variables."""
    return str(Path(interpreter_bin_dir()) / "python3")
