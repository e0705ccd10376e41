"""materialize from local folders, a Hugging Face cache (offline) and fsspec URLs; free space, names,
S3 error messages, gc, and `package --materialize-to` with local weights."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tritonpkg.storage import ChecksumError, StorageError, gc, materialize
from tritonpkg.storage.layout import ModelDir


def _model(folder: Path, files: dict[str, bytes]) -> Path:
    for rel, data in files.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_bytes(data)
    return folder


def _hf_cache(cache: Path, files: dict[str, bytes], commit: str = "a" * 40, lie: str | None = None) -> None:
    """The layout huggingface_hub writes: blobs named by sha256 (LFS) and snapshots of symlinks."""
    repo = cache / "models--org--tiny"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    (repo / "blobs").mkdir()
    for rel, data in files.items():
        oid = hashlib.sha256(data).hexdigest() if rel != lie else "0" * 64
        (repo / "blobs" / oid).write_bytes(data)
        link = repo / "snapshots" / commit / rel
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(repo / "blobs" / oid, link.parent))


FILES = {"config.json": b"{}", "model.safetensors": os.urandom(3 << 20), "sub/vocab.txt": b"a\nb\n"}


def test_local_folder_round_trip_and_warm_rerun(tmp_path):
    src = _model(tmp_path / "tiny", FILES)
    cold = materialize(str(src), tmp_path / "root", part_size=1 << 20, concurrency=3)
    assert cold.path == tmp_path / "root" / "tiny" / cold.revision
    assert {rel: (cold.path / rel).read_bytes() for rel in FILES} == FILES
    manifest = json.loads((cold.path / "tritonpkg-manifest.json").read_text())
    assert manifest["files"]["model.safetensors"]["sha256"] == hashlib.sha256(FILES["model.safetensors"]).hexdigest()
    warm = materialize(str(src), tmp_path / "root")
    assert warm.reused and warm.bytes_downloaded == 0


def test_hf_cache_offline(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    _hf_cache(tmp_path / "hub", FILES)
    result = materialize("hf://org/tiny@main", tmp_path / "root", hf_cache=tmp_path / "hub")
    assert result.model == "org--tiny" and result.revision == "a" * 40
    assert (result.path / "model.safetensors").read_bytes() == FILES["model.safetensors"]
    assert not (result.path / "model.safetensors").is_symlink()
    with pytest.raises(StorageError, match="org/tiny@v2 is not in the local Hugging Face cache"):
        materialize("hf://org/tiny@v2", tmp_path / "root", hf_cache=tmp_path / "hub")


def test_hf_cache_blob_that_lies_about_its_sha256_is_refused(tmp_path):
    _hf_cache(tmp_path / "hub", FILES, lie="model.safetensors")
    with pytest.raises(ChecksumError, match="checksum mismatch"):
        materialize("hf://org/tiny@main", tmp_path / "root", hf_cache=tmp_path / "hub")
    assert [p.name for p in (tmp_path / "root" / "org--tiny").iterdir() if not p.name.startswith(".")] == []


def test_cli_hf_cache_json(tmp_path):
    _hf_cache(tmp_path / "hub", FILES)
    out = subprocess.run([sys.executable, "-m", "tritonpkg", "materialize", "hf://org/tiny@main", "--to",
                          str(tmp_path / "root"), "--hf-cache", str(tmp_path / "hub"), "--json"],
                         capture_output=True, text=True, check=True)
    summary = json.loads(out.stdout)
    assert summary["files"] == 3 and summary["bytes_downloaded"] == sum(map(len, FILES.values()))
    assert {"seconds", "mb_per_s", "files_skipped", "bytes_total"} <= set(summary)
    assert summary["part_size"] == 8 << 20  # the automatic minimum for a small listing


def test_fsspec_memory_url(tmp_path):
    import fsspec

    fs = fsspec.filesystem("memory")
    fs.pipe({"/weights/m/a.bin": b"x" * 300_000, "/weights/m/b.json": b"{}"})
    result = materialize("memory://weights/m", tmp_path / "root", part_size=64 << 10)
    assert (result.path / "a.bin").read_bytes() == b"x" * 300_000 and result.model == "m"
    assert result.part_size == 64 << 10
    again = materialize("memory://weights/m", tmp_path / "root", part_size=64 << 10)
    assert again.reused and again.part_size is None


def test_not_enough_free_space_says_how_much_and_where(tmp_path):
    src = tmp_path / "huge"
    src.mkdir()
    with open(src / "weights.bin", "wb") as fh:
        fh.truncate(8 << 40)  # sparse: 8 TiB listed, nothing stored
    with pytest.raises(StorageError, match=r"not enough free space: 8\.0 TiB still to download") as err:
        materialize(str(src), tmp_path / "root")
    assert str(tmp_path / "root") in str(err.value)
    assert not list((tmp_path / "root" / "huge").glob("*/READY"))


def test_bad_inputs(tmp_path):
    import fsspec

    fsspec.filesystem("memory").pipe({"/bad/READY": b"", "/bad/w": b"1"})
    with pytest.raises(StorageError, match="source holds READY"):
        materialize("memory://bad", tmp_path / "root")
    done = materialize(str(_model(tmp_path / "m", {"w": b"1"})), tmp_path / "root")
    again = materialize(str(done.path), tmp_path / "root2")  # a materialization as a source: markers skipped
    assert again.files == 1
    with pytest.raises(StorageError, match=r"name '../x' cannot be a folder name"):
        materialize(str(_model(tmp_path / "ok", {"w": b"1"})), tmp_path / "root", name="../x")
    with pytest.raises(StorageError, match="source directory not found"):
        materialize(str(tmp_path / "missing"), tmp_path / "root")
    with pytest.raises(StorageError, match="part size"):
        materialize(str(tmp_path / "ok"), tmp_path / "root", part_size=10)


def test_explicit_revision_with_other_content_is_refused(tmp_path):
    src = _model(tmp_path / "m", {"w": b"1"})
    materialize(str(src), tmp_path / "root", revision="v1")
    (src / "w").write_bytes(b"22")
    with pytest.raises(StorageError, match="already holds revision 'v1' with different content"):
        materialize(str(src), tmp_path / "root", revision="v1")
    assert (tmp_path / "root" / "m" / "v1" / "w").read_bytes() == b"1"


def test_s3_errors_say_what_to_fix():
    from botocore.exceptions import ClientError, NoCredentialsError

    from tritonpkg.storage.sources.s3 import translate

    denied = ClientError({"Error": {"Code": "AccessDenied", "Message": "no"},
                          "ResponseMetadata": {"HTTPStatusCode": 403}}, "ListObjectsV2")
    assert "access denied to list s3://b/p" in str(translate(denied, "s3://b/p", "list"))
    assert "s3:ListBucket" in str(translate(denied, "s3://b/p", "list"))
    assert "s3:GetObject" in str(translate(denied, "s3://b/p/k", "read"))
    assert "no AWS credentials" in str(translate(NoCredentialsError(), "s3://b/p", "list"))
    gone = ClientError({"Error": {"Code": "PreconditionFailed"}, "ResponseMetadata": {"HTTPStatusCode": 412}},
                       "GetObject")
    assert "changed or disappeared" in str(translate(gone, "s3://b/p/k", "read"))


def _three_revisions(tmp_path: Path) -> ModelDir:
    src = _model(tmp_path / "m", {"w": b"0"})
    for i, rev in enumerate(("r1", "r2", "r3")):
        (src / "w").write_bytes(str(i).encode())
        materialize(str(src), tmp_path / "root", revision=rev)
        os.utime(tmp_path / "root" / "m" / rev / "READY", (1000 + i, 1000 + i))
    return ModelDir(tmp_path / "root", "m")


def test_gc_keeps_newest_and_latest(tmp_path):
    where = _three_revisions(tmp_path)
    (where.path / "LATEST").write_text("r1\n")  # r1 was the last one materialized (reused)
    result = gc(tmp_path / "root", keep=1)
    assert result.removed == ["m/r2"] and sorted(result.kept) == ["m/r1", "m/r3"]
    assert sorted(where.revisions()) == ["r1", "r3"]


def test_gc_never_removes_a_locked_revision(tmp_path):
    where = _three_revisions(tmp_path)
    code = ("import sys, time; from filelock import FileLock; l = FileLock(sys.argv[1]); l.acquire(); "
            "print('held', flush=True); time.sleep(60)")
    holder = subprocess.Popen([sys.executable, "-c", code, str(where.lock("r1"))], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        result = gc(tmp_path / "root", keep=1)
    finally:
        holder.kill()
        holder.wait()
    assert result.in_use == ["m/r1"] and result.removed == ["m/r2"]
    assert (where.path / "r1" / "READY").is_file()
    with pytest.raises(StorageError, match="--keep must be at least 1"):
        gc(tmp_path / "root", keep=0)


def test_package_materialize_to_with_local_weights(tmp_path, write_spec):
    from typer.testing import CliRunner

    from tritonpkg.cli import app

    _model(tmp_path / "spec" / "weights", {"config.json": b"{}"})
    spec = write_spec({"name": "tiny", "version": 1, "kind": "vllm", "weights": "./weights"})
    result = CliRunner().invoke(app, ["package", str(spec), "-o", str(tmp_path / "repo"),
                                      "--materialize-to", str(tmp_path / "fsx")])
    assert result.exit_code == 0, result.output
    model = Path(json.loads((tmp_path / "repo" / "tiny" / "1" / "model.json").read_text())["model"])
    assert model.parent == tmp_path / "fsx" / "weights" and (model / "READY").is_file()


def test_a_spec_stands_for_its_weights_named_after_its_model(tmp_path):
    """`tritonpkg materialize SPEC --to ROOT` copies the spec's weights into ROOT/<spec name>/."""
    import json as _json

    from typer.testing import CliRunner

    from tritonpkg.cli import app

    (tmp_path / "spec" / "weights").mkdir(parents=True)
    (tmp_path / "spec" / "weights" / "config.json").write_text('{"hidden_size": 8}')
    (tmp_path / "spec" / "tritonpkg.yaml").write_text("name: small\nversion: 1\nkind: vllm\nweights: ./weights\n")
    result = CliRunner().invoke(app, ["materialize", str(tmp_path / "spec"), "--to", str(tmp_path / "root"), "--json"])
    assert result.exit_code == 0, result.output
    summary = _json.loads(result.stdout)
    assert summary["model"] == "small" and summary["files"] == 1
    assert (Path(summary["path"]) / "config.json").read_text() == '{"hidden_size": 8}'


def test_an_automatic_part_size_resumes_under_another_concurrency(tmp_path, monkeypatch):
    """The interrupted run split 20 MiB into 8 MiB parts over 4 threads; the rerun with one thread would
    pick one 20 MiB part, but keeps the staging's part size and fetches only the missing part."""
    import time

    from tritonpkg.storage.sources.local import LocalSource

    data = os.urandom(20 << 20)
    src = _model(tmp_path / "big", {"model.safetensors": data})
    real_read = LocalSource.read

    def broken(self, f, start, end):
        if start == 16 << 20:
            time.sleep(0.3)  # let the other parts land first
            raise OSError("link dropped")
        return real_read(self, f, start, end)

    monkeypatch.setattr(LocalSource, "read", broken)
    with pytest.raises(OSError, match="link dropped"):
        materialize(str(src), tmp_path / "root", concurrency=4)
    monkeypatch.setattr(LocalSource, "read", real_read)
    done = materialize(str(src), tmp_path / "root", concurrency=1)
    assert (done.bytes_resumed, done.bytes_downloaded) == (16 << 20, 4 << 20)
    assert (done.path / "model.safetensors").read_bytes() == data


def test_progress_moves_within_a_part_and_ends_at_the_total(tmp_path):
    from tritonpkg.storage.sources import CHUNK

    src = tmp_path / "src"
    src.mkdir()
    data = os.urandom(2 * CHUNK + 12345)
    (src / "weights.bin").write_bytes(data)
    seen: list[tuple[int, int]] = []
    result = materialize(str(src), tmp_path / "root", part_size=4 * CHUNK, progress=lambda d, t: seen.append((d, t)))
    assert (result.path / "weights.bin").read_bytes() == data and result.part_size == 4 * CHUNK
    done = [d for d, _ in seen]
    assert done == sorted(done) and done[-1] == len(data) and {t for _, t in seen} == {len(data)}
    assert len([d for d in done if 0 < d < len(data)]) >= 2  # one part, reported chunk by chunk


def test_a_source_that_under_reads_is_refused_and_nothing_is_published(tmp_path, monkeypatch):
    """The engine checks every part's length itself, so a source (a plugin, an fsspec backend) that returns
    fewer bytes than asked without raising never gets a short part journaled or published."""
    from tritonpkg.storage.errors import SourceChangedError
    from tritonpkg.storage.sources.local import LocalSource

    src = tmp_path / "src"
    src.mkdir()
    (src / "weights.bin").write_bytes(os.urandom(300_000))
    honest = LocalSource.read
    monkeypatch.setattr(LocalSource, "read", lambda self, f, start, end: [b"".join(honest(self, f, start, end))[:-1]])
    with pytest.raises(SourceChangedError, match="bytes read for part"):
        materialize(str(src), tmp_path / "root", part_size=64 << 10)
    assert not any(p.name == "READY" for p in (tmp_path / "root").rglob("*"))
    assert not [p for p in (tmp_path / "root" / "src").iterdir() if not p.name.startswith(".")]
