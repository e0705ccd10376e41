"""`serve --runtime docker`: what a GPU host runs, checked by parsing the rendered shell line back, and the
container view behind it (tests/integration/test_docker_container_view.py runs it)."""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tritonpkg.cli import app
from tritonpkg.compat import default_release, get_release
from tritonpkg.errors import CompatError, RuntimeSetupError
from tritonpkg.serve.docker import docker_command


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
    result = CliRunner().invoke(app, ["serve", str(tmp_path), "--runtime", "docker", "--http-port", "8100",
                                      "--state-dir", str(tmp_path / "state")])
    assert result.exit_code == 0, result.output
    argv = shlex.split(result.stdout.strip())
    assert get_release(default_release()).ngc_image in argv
    assert "127.0.0.1:8100:8000" in _ports(argv)
    assert f"{tmp_path}:/models:ro" in _volumes(argv)


# -- the container view: every folder the repository names, at a container path ---------------------------------

def _digest(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _lora_repo(tmp_path: Path, model: object) -> Path:
    """A repository folder as `package` writes a LoRA model: model.json naming weights, multi_lora.json naming one
    packaged adapter (relative) and one host folder (absolute)."""
    repo = tmp_path / "repository"
    version = repo / "m" / "1"
    (version / "adapters" / "a").mkdir(parents=True)
    (version / "adapters" / "a" / "adapter_config.json").write_text("{}")
    (tmp_path / "host-b").mkdir()
    (repo / "m" / "config.pbtxt").write_text('backend: "vllm"\n')
    (version / "model.json").write_text(json.dumps({"model": model, "max_model_len": 8}))
    (version / "multi_lora.json").write_text(json.dumps({"a": "./adapters/a", "b": str(tmp_path / "host-b")}))
    return repo


def test_the_view_gives_each_named_folder_a_container_path() -> None:
    from tritonpkg.serve.docker import plan_view

    engine_args = {"m/1/model.json": {"model": "/host/w", "tokenizer": "/host/tok", "n": 1},
                   "m/2/model.json": {"model": "/host/w"}, "e/1/model.json": {"model": "./weights"}}
    lists = {"m/1/multi_lora.json": {"a": "./adapters/a", "b": "/host/b", "c": "s3://bucket/c", "d": "adapters/d"}}
    view = plan_view(Path("/r"), engine_args, lists)
    assert [(m.host, m.container) for m in view.mounts] == [
        ("/host/w", "/weights/m/1"), ("/host/tok", "/tokenizers/m/1"), ("/host/b", "/adapters/m/1/b")]
    assert view.rewrites == {
        "e/1/model.json": {"model": "/models/e/1/weights"},  # inside the repository: already mounted
        "m/1/model.json": {"model": "/weights/m/1", "tokenizer": "/tokenizers/m/1", "n": 1},
        "m/2/model.json": {"model": "/weights/m/1"},  # one host folder, one mount
        "m/1/multi_lora.json": {"a": "/models/m/1/adapters/a", "b": "/adapters/m/1/b", "c": "s3://bucket/c",
                                "d": "/models/m/1/adapters/d"}}
    assert view.remote == ["s3://bucket/c"]  # the toolkit image materializes it; ngc passes `materialized`
    fetched = plan_view(Path("/r"), {}, lists, materialized={"s3://bucket/c": "/cache/c"})
    assert fetched.rewrites["m/1/multi_lora.json"]["c"] == "/adapters/m/1/c" and not fetched.remote


def test_ngc_mounts_the_folders_and_the_serving_copy_leaving_the_repository_as_it_was(tmp_path: Path) -> None:
    weights = tmp_path / "host weights"
    weights.mkdir()
    repo = _lora_repo(tmp_path, str(weights))
    before = _digest(repo)
    state = tmp_path / "state"
    result = CliRunner().invoke(app, ["serve", str(repo), "--runtime", "docker", "-r", "26.07", "--json",
                                      "--state-dir", str(state)])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    argv = shlex.split(data["command"])
    assert argv == data["argv"] and _digest(repo) == before
    assert _volumes(argv) == [
        f"{repo}:/models:ro", f"{weights}:/weights/m/1:ro", f"{tmp_path}/host-b:/adapters/m/1/b:ro",
        f"{state}/view/m/1/model.json:/models/m/1/model.json:ro",
        f"{state}/view/m/1/multi_lora.json:/models/m/1/multi_lora.json:ro"]
    served = json.loads((state / "view" / "m" / "1" / "multi_lora.json").read_text())
    assert served == {"a": "/models/m/1/adapters/a", "b": "/adapters/m/1/b"}
    assert json.loads((state / "view" / "m" / "1" / "model.json").read_text())["model"] == "/weights/m/1"
    assert argv[argv.index(get_release("26.07").ngc_image) + 1] == "tritonserver"


def test_ngc_materializes_remote_weights_on_the_host_first(tmp_path: Path, s3_server) -> None:
    import subprocess
    import sys

    s3 = s3_server.client()
    s3.create_bucket(Bucket="docker-view")
    for name, body in (("config.json", b"{}"), ("model.safetensors", b"0" * 1000)):
        s3.put_object(Bucket="docker-view", Key=f"w/{name}", Body=body)
    repo = _lora_repo(tmp_path, "s3://docker-view/w")
    before = _digest(repo)
    root, state = tmp_path / "weights-root", tmp_path / "state"
    done = subprocess.run([sys.executable, "-m", "tritonpkg", "serve", str(repo), "--runtime", "docker", "--json",
                           "--weights-root", str(root), "--state-dir", str(state)],
                          env={**os.environ, **s3_server.env}, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    mounts = {m["container"]: Path(m["host"]) for m in json.loads(done.stdout)["mounts"]}
    host = mounts["/weights/m/1"]
    assert host.is_relative_to(root) and (host / "model.safetensors").read_bytes() == b"0" * 1000
    assert json.loads((state / "view" / "m" / "1" / "model.json").read_text())["model"] == "/weights/m/1"
    assert _digest(repo) == before


def test_toolkit_mounts_an_archive_and_refuses_one_naming_a_host_folder(tmp_path: Path) -> None:
    from tritonpkg.repository import archive
    from tritonpkg.serve.docker import prepare, toolkit_command

    remote = tmp_path / "remote.tar.gz"
    archive.write(remote, {"m/1/model.json": json.dumps({"model": "s3://b/w"}).encode()}, {})
    prepared = prepare(remote, "toolkit", tmp_path / "state")
    argv = toolkit_command(prepared, "tritonpkg:0.1.0-26.07")
    assert _volumes(argv) == [f"{remote}:/package/remote.tar.gz:ro"]
    assert argv[argv.index("tritonpkg:0.1.0-26.07") + 1:] == ["/package/remote.tar.gz", "--host", "0.0.0.0"]
    assert "127.0.0.1:9000:9000" in _ports(argv)

    local = tmp_path / "local.tar.gz"
    archive.write(local, {"m/1/model.json": json.dumps({"model": "/srv/weights"}).encode()}, {})
    with pytest.raises(RuntimeSetupError) as info:
        prepare(local, "toolkit", tmp_path / "state2")
    assert info.value.field == "model" and "m/1/model.json" in str(info.value.file)
