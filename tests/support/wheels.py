"""Build small, real (pip-installable) pure-Python wheels for the plugin tests, without a build backend."""

from __future__ import annotations

import base64
import hashlib
import sysconfig
import venv
import zipfile
from pathlib import Path


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def make_wheel(
    folder: Path,
    name: str = "demo-plugin",
    version: str = "0.1.0",
    *,
    requires: tuple[str, ...] = (),
    entry_points: dict[str, dict[str, str]] | None = None,
    module_source: str = "class Processor:\n    pass\n",
    tag: str = "py3-none-any",
) -> Path:
    """`name` installs a module `<name with _>` holding `module_source`; entry points as group -> name -> obj."""
    mod = name.replace("-", "_")
    info = f"{mod}-{version}.dist-info"
    meta = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
    meta += [f"Requires-Dist: {r}" for r in requires]
    eps = "".join(f"[{g}]\n" + "".join(f"{k} = {v}\n" for k, v in names.items()) + "\n"
                  for g, names in (entry_points or {}).items())
    files = {
        f"{mod}/__init__.py": module_source.encode(),
        f"{info}/METADATA": ("\n".join(meta) + "\n\n").encode(),
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\nTag: " + tag.encode() + b"\n",
    }
    if eps:
        files[f"{info}/entry_points.txt"] = eps.encode()
    record = [_record_line(k, v) for k, v in files.items()] + [f"{info}/RECORD,,"]
    files[f"{info}/RECORD"] = ("\n".join(record) + "\n").encode()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{mod}-{version}-{tag}.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for k, v in files.items():
            zf.writestr(zipfile.ZipInfo(k, date_time=(1980, 1, 1, 0, 0, 0)), v)
    return path


def make_venv(root: Path, overlay: Path | None = None, *, pip: bool = True) -> str:
    """A fresh venv (with pip unless told); with `overlay` (a site-packages folder) its packages are
    importable too, after the venv's own, so a test can install a plugin (or tritonpkg itself) beside the
    project's vLLM without touching the project's .venv. Returns its python."""
    venv.EnvBuilder(with_pip=pip).create(root)
    if overlay is not None:
        purelib = sysconfig.get_path("purelib", vars={"base": str(root), "platbase": str(root)})
        (Path(purelib) / "_overlay.pth").write_text(f"{overlay}\n")
    return str(root / "bin" / "python3")
