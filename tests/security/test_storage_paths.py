"""Issue 23 item 1: a source's keys are names from outside. S3 keys (real S3 API: moto server), fsspec
paths (memory://), a Hugging Face cache snapshot's links and a local folder's links that would lead out
of the materialization root are refused before anything is made under it, by `materialize` and by the
`serve` weights step, with an error naming the source, the key and the rule."""

from __future__ import annotations

import hashlib
import json
import os
import uuid
from pathlib import Path

import pytest

from tritonpkg.serve.weights import WeightsAction, ensure_weights
from tritonpkg.storage import StorageError, manifest, materialize
from tritonpkg.storage.errors import UnsafeKeyError

MARKER = b"tritonpkg-escape-marker"


def _scratch(tmp_path: Path) -> tuple[Path, Path]:
    """A scratch tree with the root six levels down: enough `..` in a key lands in the scratch tree,
    where the walk below would find it."""
    root = tmp_path / "a" / "b" / "root"
    return tmp_path, root


def _markers(tree: Path) -> list[Path]:
    """Every file under `tree` holding the marker bytes."""
    found = []
    for dirpath, _dirs, names in os.walk(tree):
        for name in names:
            path = Path(dirpath) / name
            if not path.is_symlink() and path.is_file() and path.read_bytes() == MARKER:
                found.append(path)
    return found


def _assert_nothing_written(scratch: Path, root: Path, *, allowed: tuple[Path, ...] = ()) -> None:
    assert [p for p in _markers(scratch) if not any(p.is_relative_to(a) for a in allowed)] == []
    leftovers = list(root.rglob("*")) if root.exists() else []
    assert leftovers == [], f"left under the root: {leftovers}"


# --- S3 (a real S3 API) -----------------------------------------------------------------------------

ESCAPING_KEYS = [
    ("../../../../../../outside/X", "'..' segment"),
    ("/outside/X", "an absolute path"),  # `model//outside/X`: the empty segment after the prefix
    ("sub//X", "an empty segment"),
    ("./X", "'.' segment"),
]


@pytest.fixture
def bucket(s3_env):
    name = "paths-" + uuid.uuid4().hex[:8]
    s3_env.client().create_bucket(Bucket=name)
    return name


@pytest.mark.parametrize(("rel", "rule"), ESCAPING_KEYS)
def test_s3_key_leaving_the_root_is_refused_before_anything_is_written(s3_env, bucket, tmp_path, rel, rule):
    s3 = s3_env.client()
    s3.put_object(Bucket=bucket, Key="model/config.json", Body=b"{}")
    s3.put_object(Bucket=bucket, Key="model/" + rel, Body=MARKER)
    scratch, root = _scratch(tmp_path)
    with pytest.raises(UnsafeKeyError) as err:
        materialize(f"s3://{bucket}/model", root, concurrency=2)
    text = str(err.value)
    assert f"s3://{bucket}/model" in text and repr("model/" + rel) in text and rule in text, text
    assert isinstance(err.value, StorageError)
    _assert_nothing_written(scratch, root)


def test_s3_file_that_is_also_a_folder_is_refused(s3_env, bucket, tmp_path):
    s3 = s3_env.client()
    s3.put_object(Bucket=bucket, Key="model/a", Body=MARKER)
    s3.put_object(Bucket=bucket, Key="model/a/b", Body=MARKER)
    scratch, root = _scratch(tmp_path)
    with pytest.raises(UnsafeKeyError, match="both a file and a folder"):
        materialize(f"s3://{bucket}/model", root, concurrency=2)
    _assert_nothing_written(scratch, root)


def test_serve_weights_step_inherits_the_refusal(s3_env, bucket, tmp_path):
    """`serve` of a package whose model.json names s3:// weights: the same refusal, model.json untouched."""
    s3 = s3_env.client()
    s3.put_object(Bucket=bucket, Key="model/config.json", Body=b"{}")
    s3.put_object(Bucket=bucket, Key="model/../../../../../../outside/X", Body=MARKER)
    repo = tmp_path / "repo"
    (repo / "m" / "1").mkdir(parents=True)
    model_json = repo / "m" / "1" / "model.json"
    original = json.dumps({"model": f"s3://{bucket}/model"})
    model_json.write_text(original)
    scratch, root = _scratch(tmp_path)
    action = WeightsAction("m/1/model.json", "materialize", f"s3://{bucket}/model")
    with pytest.raises(UnsafeKeyError, match=r"'\.\.' segment"):
        ensure_weights(repo, [action], root)
    assert model_json.read_text() == original
    _assert_nothing_written(scratch, root)


def test_clean_s3_prefix_still_materializes(s3_env, bucket, tmp_path):
    s3 = s3_env.client()
    s3.put_object(Bucket=bucket, Key="model/config.json", Body=b"{}")
    s3.put_object(Bucket=bucket, Key="model/sub/w.bin", Body=MARKER)
    result = materialize(f"s3://{bucket}/model", tmp_path / "root", concurrency=2)
    assert (result.path / "sub" / "w.bin").read_bytes() == MARKER


# --- fsspec (memory://) -----------------------------------------------------------------------------

@pytest.mark.parametrize(("rel", "rule"), ESCAPING_KEYS)
def test_fsspec_path_leaving_the_root_is_refused(tmp_path, rel, rule):
    import fsspec

    fs = fsspec.filesystem("memory")
    base = "/m-" + uuid.uuid4().hex[:8]
    fs.pipe(f"{base}/config.json", b"{}")
    fs.pipe(f"{base}/{rel}", MARKER)
    scratch, root = _scratch(tmp_path)
    try:
        with pytest.raises(UnsafeKeyError) as err:
            materialize(f"memory://{base}", root)
        text = str(err.value)
        assert f"memory://{base}" in text and rule in text, text
        _assert_nothing_written(scratch, root)
    finally:
        fs.rm(base, recursive=True)


# --- Hugging Face cache snapshot and local folders --------------------------------------------------

def _hf_cache(cache: Path, files: dict[str, bytes]) -> tuple[Path, str]:
    """A cache as huggingface_hub writes it: snapshots/<commit>/<file> -> ../../blobs/<sha256>."""
    repo_dir = cache / "models--org--name"
    commit = hashlib.sha1(b"commit", usedforsecurity=False).hexdigest()
    snap = repo_dir / "snapshots" / commit
    (repo_dir / "blobs").mkdir(parents=True)
    (repo_dir / "refs").mkdir()
    (repo_dir / "refs" / "main").write_text(commit)
    for rel, data in files.items():
        digest = hashlib.sha256(data).hexdigest()
        (repo_dir / "blobs" / digest).write_bytes(data)
        (snap / rel).parent.mkdir(parents=True, exist_ok=True)
        depth = "../" * (rel.count("/") + 2)
        os.symlink(f"{depth}blobs/{digest}", snap / rel)
    return snap, commit


def test_hf_cache_links_into_blobs_are_followed(tmp_path):
    _hf_cache(tmp_path / "cache", {"config.json": b"{}", "sub/tok.json": MARKER})
    result = materialize("hf://org/name@main", tmp_path / "root", hf_cache=tmp_path / "cache")
    assert (result.path / "sub" / "tok.json").read_bytes() == MARKER


def test_hf_cache_link_leaving_the_repository_folder_is_refused(tmp_path):
    secret = tmp_path / "host-secret"
    secret.write_bytes(MARKER)
    snap, _ = _hf_cache(tmp_path / "cache", {"config.json": b"{}"})
    os.symlink("../../../../host-secret", snap / "stolen.bin")
    root = tmp_path / "root"
    with pytest.raises(UnsafeKeyError) as err:
        materialize("hf://org/name@main", root, hf_cache=tmp_path / "cache")
    text = str(err.value)
    assert "hf://org/name@main" in text and "'stolen.bin'" in text and "outside the source" in text, text
    _assert_nothing_written(tmp_path, root, allowed=(secret,))


@pytest.mark.parametrize("rev", ["../../../refs-elsewhere", "main/../../x", "/etc/hostname"])
def test_hf_revision_cannot_name_a_file_outside_refs(tmp_path, rev):
    _hf_cache(tmp_path / "cache", {"config.json": b"{}"})
    (tmp_path / "refs-elsewhere").write_text(hashlib.sha1(b"commit", usedforsecurity=False).hexdigest())
    with pytest.raises(UnsafeKeyError, match="revision"):
        materialize(f"hf://org/name@{rev}", tmp_path / "root", hf_cache=tmp_path / "cache")
    assert not (tmp_path / "root").exists()


def test_hf_ref_that_is_not_a_commit_is_refused(tmp_path):
    _hf_cache(tmp_path / "cache", {"config.json": b"{}"})
    (tmp_path / "cache" / "models--org--name" / "refs" / "evil").write_text("../../../../outside")
    with pytest.raises(StorageError, match="not a commit"):
        materialize("hf://org/name@evil", tmp_path / "root", hf_cache=tmp_path / "cache")
    assert not (tmp_path / "root").exists()


def test_local_source_link_leaving_it_is_refused(tmp_path):
    secret = tmp_path / "host-secret"
    secret.write_bytes(MARKER)
    src = tmp_path / "weights"
    (src / "inner").mkdir(parents=True)
    (src / "inner" / "w.bin").write_bytes(b"w")
    os.symlink("inner/w.bin", src / "alias.bin")  # stays inside: fine
    os.symlink(secret, src / "inner" / "stolen.bin")
    root = tmp_path / "root"
    with pytest.raises(UnsafeKeyError, match=r"'inner/stolen\.bin'.*outside the source"):
        materialize(str(src), root)
    _assert_nothing_written(tmp_path, root, allowed=(secret,))
    (src / "inner" / "stolen.bin").unlink()
    result = materialize(str(src), root)
    assert (result.path / "alias.bin").read_bytes() == b"w"


# --- manifest entries -------------------------------------------------------------------------------

def test_manifest_entry_breaking_the_rule_is_not_a_materialization(tmp_path):
    d = tmp_path / "rev"
    d.mkdir()
    (d / "READY").write_text("now\n")
    (d / "tritonpkg-manifest.json").write_text(json.dumps({"files": {"../../x": {"size": 1}}}))
    assert manifest.read_ready(d) is None
    (d / "tritonpkg-manifest.json").write_text(json.dumps({"files": {"x": {"size": 1}}}))
    assert manifest.read_ready(d) is not None


def test_hf_snapshot_given_as_a_local_folder_may_link_into_its_blobs_only(tmp_path):
    snap, _ = _hf_cache(tmp_path / "cache", {"config.json": b"{}", "w.bin": MARKER})
    result = materialize(str(snap), tmp_path / "root")
    assert (result.path / "w.bin").read_bytes() == MARKER
    (tmp_path / "elsewhere").write_bytes(b"not the model's")
    os.symlink("../../../../elsewhere", snap / "stolen.bin")
    with pytest.raises(UnsafeKeyError, match="outside the source"):
        materialize(str(snap), tmp_path / "root2")
    assert not (tmp_path / "root2").exists()
