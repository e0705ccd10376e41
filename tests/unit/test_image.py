"""The toolkit image: its Dockerfile read instruction by instruction (base image per matrix row, nothing fetched at
run time, a non-root user, `tritonpkg serve` as entrypoint) and `tritonpkg image build` writing a context whose
wheel carries the Dockerfile and the toolkit's backend."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import zipfile
from pathlib import Path

import pytest

from tests.support.cli import tritonpkg
from tritonpkg.compat import feature_holds, releases
from tritonpkg.errors import CompatError, PackageError
from tritonpkg.image import BESIDE_NAME, DOCKERFILE, RUN_USER, default_tag, plan_image

NETWORK = re.compile(r"\b(curl|wget|pip3?\s+install|apt-get|git\s+clone|ADD\s+https?://)", re.IGNORECASE)


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) per Dockerfile instruction, continuation lines joined, comments dropped."""
    joined = re.sub(r"\\\n", " ", "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#")))
    out = []
    for line in joined.splitlines():
        if line.strip():
            word, _, rest = line.strip().partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def expand(text: str, args: dict[str, str]) -> str:
    return re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], text)


def test_the_base_image_is_the_matrix_row_of_each_release() -> None:
    steps = instructions(DOCKERFILE.read_text())
    assert steps[0] == ("ARG", "RELEASE")  # no default: a build always names its release
    base = next(rest for word, rest in steps if word == "FROM")
    for row in releases():
        plan = plan_image(row.release)
        assert expand(base, plan.build_args("w.whl")) == row.ngc_image == plan.base_image
        holds = feature_holds("toolkit_backend", row.vllm_base) if row.vllm_base else None
        assert plan.toolkit_backend == ("replace" if holds and holds[0] else "beside"), row.release
    assert plan_image("26.07").backend_name == BESIDE_NAME  # vLLM 0.24: the toolkit's backend needs >= 0.30


def test_nothing_is_fetched_at_run_time_and_the_user_is_not_root() -> None:
    steps = instructions(DOCKERFILE.read_text())
    words = [w for w, _ in steps]
    user_at = max(i for i, w in enumerate(words) if w == "USER")
    user = expand(steps[user_at][1], {"RUN_USER": RUN_USER})
    assert user == "triton-server" and user not in ("root", "0")
    assert "RUN" not in words[user_at:]  # nothing runs as the image user at build time either
    runtime = [rest for word, rest in steps if word in ("ENTRYPOINT", "CMD")]
    assert json.loads(runtime[0]) == ["tritonpkg", "serve"]
    assert not any(NETWORK.search(r) for r in runtime)
    env = " ".join(rest for word, rest in steps if word == "ENV")
    assert "PIP_NO_INDEX=1" in env.split() and "TRITONPKG_TRITON_HOME=/opt/tritonserver" in env.split()
    assert not any(word == "ADD" for word in words)  # only COPY from the context
    build = " ".join(rest for word, rest in steps if word == "RUN")
    assert "--constraint /tmp/image-packages.txt" in build  # NVIDIA's vLLM, torch, numpy never move
    assert f"{BESIDE_NAME}" in build and "/opt/tritonserver/backends/vllm" in build


def test_image_build_writes_a_context_the_dockerfile_accepts(tmp_path: Path) -> None:
    out = tmp_path / "ctx"
    env = {**os.environ, "PATH": str(tmp_path / "no-docker")}  # no engine: the command is printed, not run
    result = subprocess.run(tritonpkg("image", "build", "--release", "26.07", "-o", str(out), "--json"), env=env,
                            capture_output=True, text=True, timeout=600, check=False)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["built"] is False and data["tag"] == default_tag("26.07") == "tritonpkg:0.1.0-26.07"
    assert sorted(p.name for p in out.iterdir()) == sorted(["Dockerfile", data["wheel"]])
    assert (out / "Dockerfile").read_bytes() == DOCKERFILE.read_bytes()
    argv = shlex.split(data["command"])
    assert argv[:2] == ["docker", "build"] and argv[-1] == str(out)
    build_args = dict(argv[i + 1].split("=", 1) for i, a in enumerate(argv) if a == "--build-arg")
    assert build_args == {"RELEASE": "26.07", "WHEEL": data["wheel"], "TOOLKIT_BACKEND": "beside"}
    steps = instructions((out / "Dockerfile").read_text())
    copy = expand(next(rest for word, rest in steps if word == "COPY"), build_args).split()
    assert (out / copy[0]).is_file()  # the COPY source is in the context
    with zipfile.ZipFile(out / data["wheel"]) as wheel:
        names = set(wheel.namelist())
    assert {"tritonpkg/image/Dockerfile", "tritonpkg/backends/vllm/model.py", "tritonpkg/cli/serve_cmd.py"} <= names

    again = subprocess.run(tritonpkg("image", "build", "--release", "26.07", "-o", str(out)), env=env,
                           capture_output=True, text=True, timeout=600, check=False)
    assert again.returncode != 0 and "already holds files" in again.stderr


def test_an_unknown_release_is_refused() -> None:
    with pytest.raises(CompatError, match="unknown Triton release"):
        plan_image("99.99")


def test_a_context_is_never_written_outside_a_checkout(tmp_path: Path) -> None:
    from tritonpkg.image import write_context

    with pytest.raises(PackageError, match="project checkout"):
        write_context(plan_image("26.07"), tmp_path / "ctx", project=tmp_path)
    assert not (tmp_path / "ctx").exists()
