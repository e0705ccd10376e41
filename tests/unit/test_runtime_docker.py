"""docker_command: what a GPU host runs; checked by parsing the rendered shell line back."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tritonpkg.cli import app
from tritonpkg.compat import default_release, get_release
from tritonpkg.errors import CompatError, RuntimeSetupError
from tritonpkg.runtime import docker_command


def _volumes(argv: list[str]) -> list[str]:
    return [argv[i + 1] for i, a in enumerate(argv) if a == "-v"]


def _ports(argv: list[str]) -> list[str]:
    return [argv[i + 1] for i, a in enumerate(argv) if a == "-p"]


def test_round_trips_through_the_shell_with_image_mounts_and_ports(tmp_path: Path) -> None:
    repo = tmp_path / "model repo"
    weights = [tmp_path / "weights dir", tmp_path / "tok"]
    argv = docker_command(repo, "24.10", weights=weights, http_port=9000, grpc_port=9001, metrics_port=9002)
    parsed = shlex.split(shlex.join(argv))
    assert parsed == argv
    assert parsed[:3] == ["docker", "run", "--rm"]
    image = get_release("24.10").ngc_image
    assert image == "nvcr.io/nvidia/tritonserver:24.10-vllm-python-py3"
    i = parsed.index(image)
    assert parsed[i + 1:i + 3] == ["tritonserver", "--model-repository=/models"]
    assert [a.split("=")[0] for a in parsed[i + 3:]] == ["--http-restricted-api", "--grpc-restricted-protocol"]
    assert _volumes(parsed) == [f"{repo}:/models:ro"] + [f"{w}:{w}:ro" for w in weights]
    assert _ports(parsed) == ["127.0.0.1:9000:8000", "127.0.0.1:9001:8001", "127.0.0.1:9002:8002"]
    assert any(a.startswith("--shm-size=") for a in parsed)
    assert parsed[parsed.index("--gpus") + 1] == "all"
    assert all(parsed.index(a) < i for a in ("-v", "-p", "--gpus"))  # options before the image


def test_relative_paths_become_absolute_and_duplicates_mount_once(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    argv = docker_command(Path("repo"), "24.10", weights=[Path("w"), tmp_path / "w"])
    assert _volumes(argv) == [f"{tmp_path}/repo:/models:ro", f"{tmp_path}/w:{tmp_path}/w:ro"]


def test_gpu_device_list_is_quoted_for_docker_and_can_be_omitted(tmp_path: Path) -> None:
    argv = docker_command(tmp_path, "24.10", gpus="device=0,1")
    assert argv[argv.index("--gpus") + 1] == '"device=0,1"'
    assert "--gpus" not in docker_command(tmp_path, "24.10", gpus=None)


def test_unknown_release_and_unmountable_path_are_errors(tmp_path: Path) -> None:
    with pytest.raises(CompatError, match="unknown Triton release"):
        docker_command(tmp_path, "99.99")
    with pytest.raises(RuntimeSetupError, match="':'"):
        docker_command(tmp_path / "a:b", "24.10")


def test_serve_cli_docker_prints_the_command_for_the_default_release(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["serve", str(tmp_path), "--runtime", "docker", "--http-port", "8100"])
    assert result.exit_code == 0, result.output
    argv = shlex.split(result.stdout.strip())
    assert get_release(default_release()).ngc_image in argv
    assert "127.0.0.1:8100:8000" in _ports(argv)
    assert f"{tmp_path}:/models:ro" in _volumes(argv)
