"""A wheel built from the checkout is self-contained. Built as `python -m build` does (an sdist, then the
wheel from that sdist, through setuptools' own PEP 517 hooks: no network), installed into a fresh venv that
reaches the project venv's dependencies through a .pth file but tritonpkg only through the wheel, and run
from a folder outside the checkout, it packages, validates and serves a Python-backend example that answers
an inference, with the toolkit's backends linked from the installed package."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient

from tests.support.cli import read_json_document
from tests.support.paths import EXAMPLES, ROOT
from tests.support.procs import group_pids
from tests.support.wheels import make_venv
from tritonpkg.proc.group import own_group, stop_popen
from tritonpkg.proc.ports import free_ports

pytestmark = [pytest.mark.integration, pytest.mark.slow]

BUILD_INPUTS = ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md", "tritonpkg", "templates", "backends")
ASSETS = ("templates", "backends")
"""Folders of the checkout that install inside the package, as tritonpkg/<folder>."""
BUILD = ("import sys; from setuptools import build_meta; "
         "open(sys.argv[3], 'w').write(getattr(build_meta, sys.argv[1])(sys.argv[2]))")
"""Runs one of setuptools' PEP 517 hooks (this venv's setuptools, as --no-isolation would) and records the
file it wrote: the hooks also log to stdout."""


def run(args: Sequence[str | Path], cwd: Path | None = None,
        env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600,
                          check=False)
    assert done.returncode == 0, (f"{' '.join(map(str, args))} exited {done.returncode}:\n"
                                  f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return done


def build(hook: str, source: Path, out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    run([sys.executable, "-c", BUILD, hook, out, out / ".name"], cwd=source)
    return out / (out / ".name").read_text()


def files_under(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*")
            if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"}


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """What the build reads, copied out of the checkout, so building writes nothing into it."""
    src = tmp_path_factory.mktemp("source")
    for name in BUILD_INPUTS:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(ROOT / name, src / name)
    return src


@pytest.fixture(scope="module")
def wheel(source: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("build")
    sdist = build("build_sdist", source, root / "sdist")
    with tarfile.open(sdist) as tar:
        tar.extractall(root / "unpacked", filter="data")
    (unpacked,) = (root / "unpacked").iterdir()
    return build("build_wheel", unpacked, root / "wheelhouse")


def test_the_wheel_holds_every_module_data_file_template_and_backend(source: Path, wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    expected = {f"tritonpkg/{folder}/{name}" for folder in ASSETS for name in files_under(source / folder)}
    expected |= {f"tritonpkg/{name}" for name in files_under(source / "tritonpkg") if name.endswith((".py", ".json"))}
    assert sorted(expected - names) == []
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]


def test_an_installed_wheel_packages_validates_and_serves_an_example(wheel: Path, tmp_path: Path) -> None:
    python = Path(make_venv(tmp_path / "venv", overlay=Path(sysconfig.get_paths()["purelib"]), pip=False))
    site = Path(run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip())
    run([python, "-m", "installer", wheel])  # the venv's own scheme; no pip, which would see the editable install
    work = tmp_path / "work"
    shutil.copytree(EXAMPLES / "sentiment-custom", work / "sentiment-custom")
    here = Path(sys.executable).parent
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "VIRTUAL_ENV", "TRITONPKG_TEMPLATES", "TRITONPKG_BACKENDS")}
    env.update(PATH=os.pathsep.join([str(python.parent), *(p for p in env.get("PATH", "").split(os.pathsep)
                                                            if p and Path(p) != here)]),
               TRITONPKG_CACHE=str(tmp_path / "cache"), NO_COLOR="1", COLUMNS="200")

    found = run([python, "-c", ("import tritonpkg, tritonpkg.paths as p; "
                 "print(tritonpkg.__file__, p.templates_dir(), p.backends_dir(), sep='\\n')")], cwd=work, env=env)
    module, templates, backends = (Path(line) for line in found.stdout.split())
    assert module == site / "tritonpkg" / "__init__.py"  # the checkout is not importable from here
    assert (templates, backends) == (site / "tritonpkg" / "templates", site / "tritonpkg" / "backends")

    tritonpkg = python.parent / "tritonpkg"
    run([tritonpkg, "package", "sentiment-custom", "-o", "repo"], cwd=work, env=env)
    run([tritonpkg, "validate", "repo"], cwd=work, env=env)
    http, grpc, metrics = free_ports(3)
    with (tmp_path / "serve.err").open("w") as err:
        proc = subprocess.Popen([str(tritonpkg), "serve", "repo", "--http-port", str(http), "--grpc-port", str(grpc),
                                 "--metrics-port", str(metrics), "--json"], cwd=work, env=env, text=True,
                                stdout=subprocess.PIPE, stderr=err, **own_group())
    assert proc.stdout is not None
    try:
        try:
            info = read_json_document(proc.stdout)
        except AssertionError:
            raise AssertionError((tmp_path / "serve.err").read_text()[-4000:]) from None
        client = httpclient.InferenceServerClient(info["http_url"].removeprefix("http://"))
        text = httpclient.InferInput("TEXT", [1], "BYTES")
        text.set_data_from_numpy(np.array([b"a great and helpful answer"], dtype=np.object_))
        assert client.infer("sentiment", [text]).as_numpy("LABEL").tolist() == [b"positive"]
        client.close()  # Triton 2.51's stop waits for open HTTP connections, idle ones too, up to its exit timeout

        report = json.loads(run([tritonpkg, "runtime", "info", "--json"], cwd=work, env=env).stdout)
        toolkit = {b["name"]: Path(b["source"]) for b in report["backends"] if b["kind"] == "toolkit"}
        assert toolkit == {name: (backends / name).resolve() for name in toolkit} and "vllm" in toolkit
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0, (tmp_path / "serve.err").read_text()[-4000:]
    finally:
        stop_popen(proc)
    assert group_pids(info["pid"]) == []
