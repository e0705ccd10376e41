"""materialize against a real S3 API (moto_server over HTTP on loopback): cold and warm runs, partial
reuse, kill -9 and resume, a corrupted staging refused, two concurrent materializers, a source that
changes mid-copy, clear errors, and `package --materialize-to`."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from boto3.s3.transfer import TransferConfig

from tritonpkg.proc.group import own_group
from tritonpkg.storage import ChecksumError, StorageError, materialize

MiB = 1 << 20
BUCKET = "models"


def _blob(seed: int, size: int) -> bytes:
    """Deterministic incompressible bytes, fast to make."""
    block = hashlib.sha256(str(seed).encode()).digest() * 32  # 1 KiB
    rnd = os.urandom(size)
    return bytes(a ^ b for a, b in zip(rnd[:1024], block, strict=False)) + rnd[1024:]


@pytest.fixture(scope="module")
def objects(s3_server) -> dict[str, dict[str, bytes]]:
    """prefix -> {relative path: bytes}, uploaded once; the large files multipart (8 MiB parts)."""
    s3 = s3_server.client()
    s3.create_bucket(Bucket=BUCKET)
    layout = {
        "llm": {"model.safetensors": _blob(1, 48 * MiB + 123), "config.json": b'{"hidden": 128}',
                "tokenizer/tokenizer.json": _blob(2, MiB), "empty.txt": b""},
        "big": {"weights.bin": _blob(3, 48 * MiB)},
        "pair": {"weights.bin": _blob(4, 24 * MiB)},
        "single": {"weights.bin": _blob(5, 16 * MiB)},
        "moving": {"weights.bin": _blob(6, 24 * MiB)},
    }
    multipart = TransferConfig(multipart_threshold=8 * MiB, multipart_chunksize=8 * MiB)
    for prefix, files in layout.items():
        for rel, data in files.items():
            key = f"{prefix}/{rel}"
            if len(data) >= 8 * MiB and prefix != "single":
                import io

                s3.upload_fileobj(io.BytesIO(data), BUCKET, key, Config=multipart)
            else:
                s3.put_object(Bucket=BUCKET, Key=key, Body=data)
    return layout


def _visible(model_dir: Path) -> list[str]:
    return sorted(p.name for p in model_dir.iterdir() if not p.name.startswith(".")) if model_dir.exists() else []


def _tree_digests(path: Path) -> dict[str, str]:
    return {p.relative_to(path).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in path.rglob("*") if p.is_file() and p.name not in ("READY", "tritonpkg-manifest.json")}


def _expected(files: dict[str, bytes]) -> dict[str, str]:
    return {rel: hashlib.sha256(data).hexdigest() for rel, data in files.items()}


def _cli(server, *args: str) -> subprocess.Popen:
    env = {**os.environ, **server.env}
    return subprocess.Popen([sys.executable, "-m", "tritonpkg", "materialize", *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **own_group())


def _wait_journal(model_dir: Path, parts: int, proc: subprocess.Popen, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        journals = list(model_dir.glob(".staging/*/journal"))
        if journals and len(journals[0].read_text().splitlines()) >= parts:
            return
        if proc.poll() is not None:
            pytest.fail(f"materializer ended early: {proc.communicate()}")
        time.sleep(0.02)
    pytest.fail("no parts journaled in time")


def _kill9(proc: subprocess.Popen) -> None:
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)


def test_cold_then_warm(s3_env, objects, tmp_path):
    cold = materialize(f"s3://{BUCKET}/llm", tmp_path, concurrency=4)
    assert not cold.reused and cold.bytes_downloaded == sum(map(len, objects["llm"].values()))
    assert cold.path.parent == tmp_path / "llm" and (cold.path / "READY").is_file()
    assert _tree_digests(cold.path) == _expected(objects["llm"])
    manifest = json.loads((cold.path / "tritonpkg-manifest.json").read_text())
    entry = manifest["files"]["model.safetensors"]
    assert entry["sha256"] == hashlib.sha256(objects["llm"]["model.safetensors"]).hexdigest()
    assert entry["etag"].endswith("-7") and entry["size"] == 48 * MiB + 123  # multipart upload
    assert manifest["source"] == f"s3://{BUCKET}/llm"

    before = {p: (p.stat().st_ino, p.stat().st_mtime_ns) for p in cold.path.rglob("*") if p.is_file()}
    warm = materialize(f"s3://{BUCKET}/llm", tmp_path, concurrency=4)
    assert warm.reused and warm.bytes_downloaded == 0 and warm.path == cold.path
    assert {p: (p.stat().st_ino, p.stat().st_mtime_ns) for p in warm.path.rglob("*") if p.is_file()} == before


def test_changed_file_fetches_only_that_file(s3_env, objects, tmp_path):
    s3 = s3_env.client()
    s3.put_object(Bucket=BUCKET, Key="llm2/config.json", Body=b'{"v": 1}')
    s3.put_object(Bucket=BUCKET, Key="llm2/tokenizer.json", Body=objects["llm"]["tokenizer/tokenizer.json"])
    first = materialize(f"s3://{BUCKET}/llm2", tmp_path)
    s3.put_object(Bucket=BUCKET, Key="llm2/config.json", Body=b'{"v": 22}')
    second = materialize(f"s3://{BUCKET}/llm2", tmp_path)
    assert second.revision != first.revision and not second.reused
    assert second.bytes_downloaded == len(b'{"v": 22}') and second.files_skipped == 1
    assert (second.path / "tokenizer.json").stat().st_ino == (first.path / "tokenizer.json").stat().st_ino
    assert (second.path / "config.json").read_bytes() == b'{"v": 22}'


def test_kill9_leaves_nothing_visible_and_rerun_resumes(s3_env, objects, tmp_path):
    model_dir = tmp_path / "big"
    args = (f"s3://{BUCKET}/big", "--to", str(tmp_path), "--part-size", "1MiB", "--concurrency", "2", "--json")
    proc = _cli(s3_env, *args, "--max-bandwidth", "12MiB")
    _wait_journal(model_dir, 6, proc)
    _kill9(proc)
    assert _visible(model_dir) == []

    rerun = _cli(s3_env, *args)
    out, err = rerun.communicate(timeout=120)
    assert rerun.returncode == 0, err
    summary = json.loads(out)
    total = 48 * MiB
    assert summary["bytes_resumed"] >= 6 * MiB
    assert summary["bytes_downloaded"] + summary["bytes_resumed"] == total
    assert set(_visible(model_dir)) == {summary["revision"], "LATEST"}
    assert _tree_digests(Path(summary["path"])) == _expected(objects["big"])
    assert not list(model_dir.glob(".staging/*/journal"))


def test_corrupted_staged_part_is_refused(s3_env, objects, tmp_path):
    """A single-part object's ETag is its MD5: a staged part damaged on disk fails the check on resume."""
    model_dir = tmp_path / "single"
    args = (f"s3://{BUCKET}/single", "--to", str(tmp_path), "--part-size", "1MiB", "--concurrency", "2")
    proc = _cli(s3_env, *args, "--max-bandwidth", "8MiB")
    _wait_journal(model_dir, 3, proc)
    _kill9(proc)
    staged = next(model_dir.glob(".staging/*/tree/weights.bin"))
    with open(staged, "r+b") as fh:
        fh.write(b"\0" * 4096)

    with pytest.raises(ChecksumError, match="MD5"):
        materialize(f"s3://{BUCKET}/single", tmp_path, part_size=MiB)
    assert _visible(model_dir) == []
    assert not list(model_dir.glob(".staging/*/tree"))  # never resumed from again

    good = materialize(f"s3://{BUCKET}/single", tmp_path, part_size=MiB)
    assert good.bytes_downloaded == 16 * MiB
    assert _tree_digests(good.path) == _expected(objects["single"])


def test_two_concurrent_materializers_download_once(s3_env, objects, tmp_path):
    args = (f"s3://{BUCKET}/pair", "--to", str(tmp_path), "--json", "--max-bandwidth", "24MiB")
    procs = [_cli(s3_env, *args) for _ in range(2)]
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        outs.append(json.loads(out))
    assert sum(o["bytes_downloaded"] for o in outs) == 24 * MiB
    reuser = next(o for o in outs if o["reused"])
    assert reuser["waited_s"] > 0.2
    assert outs[0]["path"] == outs[1]["path"]
    assert _tree_digests(Path(outs[0]["path"])) == _expected(objects["pair"])


def test_source_changed_during_copy_is_refused(s3_env, objects, tmp_path):
    model_dir = tmp_path / "moving"
    proc = _cli(s3_env, f"s3://{BUCKET}/moving", "--to", str(tmp_path), "--part-size", "1MiB",
                "--concurrency", "2", "--max-bandwidth", "8MiB")
    _wait_journal(model_dir, 2, proc)
    s3_env.client().put_object(Bucket=BUCKET, Key="moving/weights.bin", Body=b"replaced")
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 1
    assert "changed" in err and "moving/weights.bin" in err
    assert _visible(model_dir) == [] and not list(model_dir.glob(".staging/*/tree"))


def test_clear_errors(s3_env, objects, tmp_path, monkeypatch):
    with pytest.raises(StorageError, match="bucket 'no-such-bucket' does not exist"):
        materialize("s3://no-such-bucket/x", tmp_path)
    with pytest.raises(StorageError, match="no objects under s3://models/nothing-here"):
        materialize(f"s3://{BUCKET}/nothing-here", tmp_path)
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(key)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    with pytest.raises(StorageError, match="no AWS credentials found"):
        materialize(f"s3://{BUCKET}/llm", tmp_path)
    assert not (tmp_path / "llm").exists()


def test_package_materialize_to_points_model_json_at_local_copy(s3_env, objects, tmp_path):
    from typer.testing import CliRunner

    from tritonpkg.cli import app

    spec_dir = tmp_path / "spec"
    spec_dir.mkdir()
    (spec_dir / "tritonpkg.yaml").write_text(yaml.safe_dump({
        "name": "tiny", "version": 1, "kind": "vllm", "weights": f"s3://{BUCKET}/llm",
        "engine_args": {"enforce_eager": True}}))
    root, repo = tmp_path / "fsx", tmp_path / "repo"
    result = CliRunner().invoke(app, ["package", str(spec_dir), "-o", str(repo), "--materialize-to", str(root),
                                      "--json"])
    assert result.exit_code == 0, result.output
    model_json = json.loads((repo / "tiny" / "1" / "model.json").read_text())
    local = Path(model_json["model"])
    assert local.parent == root / "llm" and (local / "READY").is_file()
    assert _tree_digests(local) == _expected(objects["llm"])


class _CuttingProxy:
    """A TCP proxy in front of the S3 endpoint that drops the client's connection once `cut_after` bytes of
    a response have gone through, `cuts` times: a connection lost mid-body, as on a real network."""

    def __init__(self, endpoint: str, cut_after: int, cuts: int) -> None:
        import re
        import socket
        import threading
        from urllib.parse import urlparse

        up = urlparse(endpoint)
        self._upstream = (up.hostname, up.port)
        self._cut_after, self._cuts_left = cut_after, cuts
        self._range = re.compile(rb"(?im)^range: bytes=(\d+)-(\d+)")
        self.ranges: list[tuple[int, int]] = []
        self.cuts = 0
        self._lock = threading.Lock()
        self._server = socket.create_server(("127.0.0.1", 0))
        self.endpoint = f"http://127.0.0.1:{self._server.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        import threading

        while True:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client) -> None:
        import socket
        import threading

        upstream = socket.create_connection(self._upstream)

        def requests() -> None:
            while data := client.recv(1 << 16):
                with self._lock:
                    self.ranges += [(int(a), int(b)) for a, b in self._range.findall(data)]
                upstream.sendall(data)

        threading.Thread(target=lambda: _quiet(requests), daemon=True).start()
        sent = 0
        try:
            while data := upstream.recv(1 << 16):
                sent += len(data)
                with self._lock:
                    cut = self._cuts_left > 0 and sent > self._cut_after
                    if cut:
                        self._cuts_left -= 1
                        self.cuts += 1
                if cut:
                    client.shutdown(socket.SHUT_RDWR)  # now, though the request thread still reads from it
                    return
                client.sendall(data)
        except OSError:
            pass
        finally:
            client.close()
            upstream.close()

    def close(self) -> None:
        self._server.close()


def _quiet(fn) -> None:
    with contextlib.suppress(OSError):
        fn()


def test_a_connection_lost_mid_body_resumes_from_the_missing_byte(s3_env, objects, tmp_path, monkeypatch):
    """botocore retries a request until its headers arrive, not a body cut off while it streams: the source
    asks again from the first missing byte (If-Match on the ETag) and the copy completes, verified."""
    proxy = _CuttingProxy(s3_env.endpoint, cut_after=3 * MiB, cuts=2)
    monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
    try:
        result = materialize(f"s3://{BUCKET}/single", tmp_path, part_size=8 * MiB, concurrency=2)
    finally:
        proxy.close()
    assert (result.path / "weights.bin").read_bytes() == objects["single"]["weights.bin"]
    assert proxy.cuts == 2 and result.bytes_downloaded == 16 * MiB
    resumed = [start for start, _ in proxy.ranges if start % (8 * MiB)]
    assert len(resumed) == 2, proxy.ranges  # each cut picked up mid-part, not from the part's start
