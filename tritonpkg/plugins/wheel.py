"""What a plugin wheel declares, read from its own .dist-info without installing or importing it, and
where it would write (tritonpkg.plugins.contents: every member checked against RECORD and the path rule)."""

from __future__ import annotations

import configparser
import hashlib
import zipfile
from email.parser import BytesHeaderParser
from pathlib import Path

from packaging.utils import canonicalize_name
from pydantic import BaseModel, Field

from tritonpkg.plugins.contents import WheelContents, inspect_zip
from tritonpkg.plugins.errors import PluginError


class WheelInfo(BaseModel):
    """A wheel's identity (name, version, sha256) and what it registers (entry points) and needs."""

    name: str = Field(description="distribution name as the wheel spells it")
    version: str
    wheel: str = Field(description="wheel file name")
    sha256: str
    requires_dist: list[str] = Field(default_factory=list)
    entry_points: dict[str, dict[str, str]] = Field(default_factory=dict, description="group -> name -> object")
    contents: WheelContents | None = Field(default=None, description="where pip would install each file")

    @property
    def key(self) -> str:
        return canonicalize_name(self.name)


MAX_META_BYTES = 1 << 20


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _dist_info(names: list[str], path: Path) -> str:
    tops = sorted({n.split("/", 1)[0] for n in names if n.split("/", 1)[0].endswith(".dist-info")})
    if len(tops) != 1:
        raise PluginError(f"a wheel holds exactly one .dist-info folder; found {len(tops)}", file=path,
                          expected="a wheel built by pip/setuptools (`pip wheel --no-deps ./pkg`)")
    return tops[0]


class _CaseSensitiveParser(configparser.ConfigParser):
    def optionxform(self, optionstr: str) -> str:
        return optionstr  # entry-point names are case-sensitive


def parse_entry_points(text: str) -> dict[str, dict[str, str]]:
    parser = _CaseSensitiveParser(delimiters=("=",), interpolation=None)
    parser.read_string(text)
    return {group: {k: v.strip() for k, v in parser.items(group)} for group in sorted(parser.sections())}


def read_wheel(path: Path) -> WheelInfo:
    """Metadata of the wheel at `path`; PluginError naming the file when it isn't a usable wheel."""
    path = Path(path)
    if path.suffix != ".whl" or not path.is_file():
        raise PluginError("plugin wheel not found", file=path, expected="an existing .whl file")
    try:
        with zipfile.ZipFile(path) as zf:
            names = zf.namelist()
            info_dir = _dist_info(names, path)
            if f"{info_dir}/METADATA" not in names:
                raise PluginError(f"{info_dir}/METADATA is missing", file=path, expected="a wheel with core metadata")
            for small in (f"{info_dir}/METADATA", f"{info_dir}/entry_points.txt"):
                if small in names and zf.getinfo(small).file_size > MAX_META_BYTES:
                    raise PluginError(f"{small} is larger than {MAX_META_BYTES} bytes", file=path, field=small,
                                      expected="the metadata of a plugin wheel")
            meta = BytesHeaderParser().parsebytes(zf.read(f"{info_dir}/METADATA"))
            ep_name = f"{info_dir}/entry_points.txt"
            entry_points = parse_entry_points(zf.read(ep_name).decode()) if ep_name in names else {}
            name, version = meta.get("Name"), meta.get("Version")
            if not name or not version:
                raise PluginError("METADATA has no Name or Version", file=path, field=f"{info_dir}/METADATA",
                                  expected="Name: and Version: headers")
            contents = inspect_zip(zf, path, info_dir=info_dir, name=name, version=version,
                                   entry_points=entry_points)
    except zipfile.BadZipFile as exc:
        raise PluginError(f"not a wheel (zip) file: {exc}", file=path, expected="a .whl built by pip") from exc
    except (configparser.Error, UnicodeDecodeError) as exc:
        raise PluginError(f"unreadable entry_points.txt: {exc}", file=path, field="entry_points.txt") from exc
    return WheelInfo(name=name, version=version, wheel=path.name, sha256=sha256_file(path),
                     requires_dist=list(meta.get_all("Requires-Dist") or []), entry_points=entry_points,
                     contents=contents)
