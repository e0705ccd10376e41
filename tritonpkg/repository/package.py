"""`tritonpkg package`: spec -> model files (pure) -> staged copy of the repository -> swap into place."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from packaging.utils import canonicalize_name

from tritonpkg import safepath
from tritonpkg.errors import PackageError
from tritonpkg.plugins import PluginError, read_wheel, record_for
from tritonpkg.plugins.contents import check_footprint
from tritonpkg.plugins.requires import unmet_requirements
from tritonpkg.plugins.target import local_footprint
from tritonpkg.repository import archive as archive_mod
from tritonpkg.repository import lock as lock_mod
from tritonpkg.repository import templates
from tritonpkg.repository.atomic import staged_directory
from tritonpkg.repository.build import BuiltModel, build_models, lock_pins
from tritonpkg.repository.pins import check_requirements, pinned_versions
from tritonpkg.spec import Spec


@dataclass
class PackageResult:
    repository: Path
    models: list[str]
    version: int
    files: dict[str, str] = field(default_factory=dict)  # path -> sha256, for this version's files
    archive: Path | None = None


def spec_sha256(spec: Spec) -> str:
    canonical = json.dumps(spec.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    return lock_mod.sha256(canonical.encode())


def package_spec(spec: Spec, repository: str | Path, archive: str | Path | None = None,
                 models: list[BuiltModel] | None = None) -> PackageResult:
    """Build `spec` into `repository`. Other models and other versions already there are kept;
    the same version of the same model is replaced whole. Nothing changes unless everything succeeds.
    `models`: `build(spec)` done already (a deploy builds once, compares, then writes)."""
    repo = Path(repository)
    if repo.exists() and not repo.is_dir():
        raise PackageError("output exists and is not a directory", file=repo, expected="a model repository folder")
    requirements = check_requirements(spec)
    wheels, plugins = _plugins(spec)
    models = build(spec, requirements) if models is None else models
    result = PackageResult(repository=repo.absolute(), models=[m.name for m in models], version=spec.version)

    with staged_directory(repo) as stage:
        lock = lock_mod.read(stage)
        for model in models:
            _write_model(stage, model)
            version_files = {p: lock_mod.sha256(d) for p, d in model.files.items() if p != model.config_path}
            result.files.update({p: lock_mod.sha256(d) for p, d in model.files.items()})
            lock_mod.record(lock, model.name, model.version, lock_mod.sha256(model.files[model.config_path]), {
                "package": spec.name,
                "role": model.role,
                # the template that rendered the code, so validate compares the code with that template only
                "template_sha256": (templates.source_digest(model.role)
                                    if model.role in templates.available() else None),
                "kind": spec.kind,
                "spec_sha256": spec_sha256(spec),
                "pins": lock_pins(spec),
                "requirements": requirements,
                "plugins": plugins,
                "serving": {"execution_mode": spec.execution_mode, "openai": spec.openai_enabled,
                            **({"openai_parsers": spec.openai_parsers} if spec.openai_parsers else {})},
                "files": dict(sorted(version_files.items())),
                **({"adapters": adapter_lock} if (adapter_lock := _adapter_lock(model)) else {}),
            })
        (stage / lock_mod.LOCK_NAME).write_bytes(lock_mod.dumps(lock))
        if archive is not None:
            result.archive = Path(archive).absolute()
            files, modes = _package_files(stage, models, lock)
            archive_mod.write(result.archive, files, wheels, modes)
    return result


def build(spec: Spec, requirements: list[str] | None = None) -> list[BuiltModel]:
    """The models `package_spec` writes for `spec`, in memory (requirements checked against the pins)."""
    return build_models(spec, check_requirements(spec) if requirements is None else requirements)


def _adapter_lock(model: BuiltModel) -> dict[str, dict]:
    """Per adapter: its source and, for one copied into the version, its folder and files' sha256 (also
    under `files`, which verify checks); a remote adapter's files are hashed when serve materializes it."""
    prefix = f"{model.name}/{model.version}/"
    out: dict[str, dict] = {}
    for name, entry in model.adapters.items():
        folder = entry["folder"]
        files = ({} if folder is None else {
            p: lock_mod.sha256(d) for p, d in sorted(model.files.items())
            if p.startswith(prefix + folder.removeprefix("./") + "/")})
        out[name] = {**entry, "files": files}
    return out


def _write_model(stage: Path, model: BuiltModel) -> None:
    version_dir = stage / model.name / str(model.version)
    if version_dir.exists():
        shutil.rmtree(version_dir)
    for rel, data in sorted(model.files.items()):
        path = stage / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        path.chmod(model.modes.get(rel, 0o644))


def _package_files(stage: Path, models: list[BuiltModel], lock: dict) -> tuple[dict[str, bytes], dict[str, int]]:
    """Every version of this package's models, with a lock restricted to them, and each file's mode bits
    as written (the archive keeps them rather than widening them)."""
    names = {m.name for m in models}
    files: dict[str, bytes] = {}
    modes: dict[str, int] = {}
    for name in sorted(names):
        for path in sorted((stage / name).rglob("*")):
            if path.is_file() and not path.is_symlink():
                rel = path.relative_to(stage).as_posix()
                files[rel] = path.read_bytes()
                modes[rel] = path.stat().st_mode & 0o777
    sub = {**lock, "models": {k: v for k, v in lock["models"].items() if k in names}}
    files[lock_mod.LOCK_NAME] = lock_mod.dumps(sub)
    return files, modes


def _plugins(spec: Spec) -> tuple[dict[str, bytes], list[dict]]:
    """The wheels to bundle and the lock entry of every declared plugin, read from each wheel's metadata.
    A wheel that is not the declared distribution, lacks the declared entry-point group, or needs a
    version of a pinned package other than the target's is refused here rather than at start-up."""
    pins = pinned_versions(spec.target_release)
    footprint = None  # what the local runtime has installed, read once if a plugin ships a wheel
    wheels: dict[str, bytes] = {}
    records: list[dict] = []
    for i, plugin in enumerate(spec.plugins):
        field = f"plugins[{i}]"
        info = None
        if plugin.wheel is not None:
            path = _wheel_path(spec, plugin.wheel, f"{field}.wheel")
            try:
                info = read_wheel(path)
                if info.contents is None:
                    raise PluginError(f"{path}: its files could not be listed", file=path)
                check_footprint(path, info.name, info.contents, footprint or (footprint := local_footprint()),
                                pins, where="the local runtime")
            except PluginError as exc:
                raise PackageError(f"{exc.message}: {path}", file=spec.source, field=f"{field}.wheel",
                                   expected=exc.expected or "a .whl file relative to the spec") from exc
            if info.key != canonicalize_name(plugin.name):
                raise PackageError(f"the wheel {info.wheel} is distribution {info.name!r}, not {plugin.name!r}",
                                   file=spec.source, field=f"{field}.name", expected=repr(info.name))
            if plugin.entry_point_group not in info.entry_points:
                have = ", ".join(sorted(info.entry_points)) or "none"
                raise PackageError(f"{info.wheel} registers no entry point in group {plugin.entry_point_group!r} "
                                   f"(it has: {have})", file=spec.source, field=f"{field}.entry_point_group",
                                   expected="a group the wheel's entry_points.txt declares")
            unmet = unmet_requirements(info.requires_dist, pins, pins, only_pinned=True)
            if unmet:
                raise PackageError(f"plugin {info.name} {info.version}: " + "; ".join(
                    f"{u.requirement!r} {u.reason}" for u in unmet), file=spec.source, field=f"{field}.wheel",
                    expected=f"a plugin that admits the pins of release {spec.target_release}: "
                             + ", ".join(f"{k} {v}" for k, v in sorted(pins.items())))
            wheels[path.name] = path.read_bytes()
        records.append(record_for(plugin.name, plugin.entry_point_group, info).model_dump(mode="json"))
    return wheels, sorted(records, key=lambda r: r["name"])


def _wheel_path(spec: Spec, name: str, field: str) -> Path:
    """A plugin wheel the spec names: a file inside the spec's folder under the path rule, links followed
    only while they stay inside (it is bundled into the archive and installed by serve)."""
    expected = "a .whl file inside the spec's folder, named relative to it"
    try:
        path = spec.base_dir / safepath.check_name(name, source=spec.source, what=field)
    except safepath.UnsafePathError as exc:
        raise PackageError(f"{safepath.quote(name)} breaks the path rule: {exc.rule}", file=spec.source,
                           field=field, expected=expected) from None
    if not safepath.within(path, spec.base_dir):
        raise PackageError(f"{safepath.quote(name)} is a link that leaves the spec's folder", file=spec.source,
                           field=field, expected=expected)
    return path
