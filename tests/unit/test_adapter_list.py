"""A pod's followed adapter list without an engine (tests/integration/test_kubernetes_pod.py serves one): an
adapter of a release's archive is fetched from a real S3 API (moto), its sha256 checked, unpacked with serve's
bounds and verified against the lock; a changed object and a list naming what a pod cannot fetch are refused and
said in the follower's status, which the OpenAI frontend's /health/adapters and /health/ready read."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from tests.support.paths import EXAMPLES
from tritonpkg.deploy.drivers import package_store
from tritonpkg.errors import TritonpkgError
from tritonpkg.frontend.app import create_app
from tritonpkg.frontend.settings import FrontendSettings
from tritonpkg.repository import package_spec
from tritonpkg.serve import adapter_list
from tritonpkg.spec import load_spec

BUCKET = "adapter-store"
STORE = f"s3://{BUCKET}/releases"


@pytest.fixture
def archive(tmp_path, s3_env):
    """The sentiment example's package archive in the store, under the key the driver gives it."""
    path = tmp_path / "pkg.tar.gz"
    package_spec(load_spec(EXAMPLES / "sentiment-custom"), tmp_path / "repo", archive=path)
    ref = package_store.archive_ref(STORE, "sentiment", 1, adapter_list.file_sha256(path))
    s3 = s3_env.client()
    if BUCKET not in [b["Name"] for b in s3.list_buckets()["Buckets"]]:
        s3.create_bucket(Bucket=BUCKET)
    s3.put_object(Bucket=BUCKET, Key=ref.key_url.removeprefix(f"s3://{BUCKET}/"), Body=path.read_bytes())
    return ref, path, s3


def follower(tmp_path, **kw) -> adapter_list.Follower:
    served = tmp_path / "served"
    served.mkdir(exist_ok=True)
    return adapter_list.Follower(tmp_path / "list" / "adapters.json", served, work=tmp_path / "work",
                                 weights_root=tmp_path / "weights", log=lambda _: None, **kw)


def test_an_archive_adapter_is_fetched_verified_and_unpacked_once(tmp_path, archive):
    ref, _, _ = archive
    f = follower(tmp_path)
    location = adapter_list.ArchiveLocation(url=ref.url, file=ref.file, sha256=ref.sha256, path="sentiment/1")
    folder = f._folder(location)
    assert folder == tmp_path / "work" / "unpacked" / ref.revision / "repository" / "sentiment" / "1"
    assert (folder / "model.py").is_file()
    assert f._folder(location) == folder  # unpacked once: the second entry naming it reuses it
    own = follower(tmp_path, own_sha256=ref.sha256)  # the pod's own archive: the repository it serves
    (tmp_path / "served" / "sentiment" / "1").mkdir(parents=True)
    assert own._folder(location) == tmp_path / "served" / "sentiment" / "1"
    missing = adapter_list.ArchiveLocation(url=ref.url, file=ref.file, sha256=ref.sha256, path="sentiment/9")
    with pytest.raises(TritonpkgError, match="no adapter folder 'sentiment/9'") as exc:
        f._folder(missing)
    assert exc.value.field == "path"


def test_an_object_changed_in_the_store_is_refused_and_nothing_is_unpacked(tmp_path, archive):
    ref, path, s3 = archive
    data = bytearray(path.read_bytes())
    data[-1] ^= 1
    s3.put_object(Bucket=BUCKET, Key=ref.key_url.removeprefix(f"s3://{BUCKET}/"), Body=bytes(data))
    f = follower(tmp_path)
    location = adapter_list.ArchiveLocation(url=ref.url, file=ref.file, sha256=ref.sha256, path="sentiment/1")
    with pytest.raises(TritonpkgError, match="changed in the store") as exc:
        f._folder(location)
    assert exc.value.field == "sha256"
    assert not (tmp_path / "work" / "unpacked").exists()
    s3.put_object(Bucket=BUCKET, Key=ref.key_url.removeprefix(f"s3://{BUCKET}/"), Body=path.read_bytes())
    assert (f._folder(location) / "model.py").is_file()  # the object put right: fetched again, not the kept copy


def test_the_follower_says_why_a_list_fails_and_readiness_waits_for_the_first(tmp_path):
    f = follower(tmp_path, ack_timeout=0.2)
    f.pending()
    app = TestClient(create_app(FrontendSettings(model_repository=tmp_path / "served")))
    not_ready = app.get("/health/ready")
    assert not_ready.status_code == 503 and "adapter list is not applied yet" in not_ready.json()["reason"]
    f.step()  # no file yet (an optional ConfigMap not created): the package's own adapters, ready
    assert app.get("/health/adapters").json()["ready"] is True
    (tmp_path / "list").mkdir()
    (tmp_path / "list" / "adapters.json").write_text(json.dumps({"support": "/srv/adapters/support"}))
    f.step()
    state = app.get("/health/adapters").json()
    assert state["applied_sha256"] is None and "adapters.support" in state["error"]
    assert state["list_sha256"] == adapter_list.digest((tmp_path / "list" / "adapters.json").read_bytes())
    # a list naming a folder of the pod's own archive: written as the served version's multi_lora.json, absolute
    own = "ab" * 32
    version = tmp_path / "served" / "m" / "1"
    (version / "adapters" / "support").mkdir(parents=True)
    (version / "multi_lora.json").write_text('{"support": "./adapters/support"}')
    f.own_sha256 = own
    location = adapter_list.ArchiveLocation(url=f"{STORE}/m/{own[:16]}", file="m-v1.tar.gz", sha256=own,
                                            path="m/1/adapters/support")
    (tmp_path / "list" / "adapters.json").write_bytes(adapter_list.render({"support": location}))
    f.step()  # no backend here to acknowledge it: the follower says so and keeps what was applied
    assert json.loads((version / "multi_lora.json").read_text()) == {"support": str(version / "adapters" / "support")}
    state = app.get("/health/adapters").json()
    assert "did not acknowledge the list within 0.2 s" in state["error"] and state["applied_sha256"] is None
    assert state["ready"] is True  # a later list failing leaves readiness to Triton and the models


def test_health_adapters_is_404_where_no_list_is_followed(tmp_path):
    app = TestClient(create_app(FrontendSettings(model_repository=tmp_path)))
    assert app.get("/health/adapters").status_code == 404


def test_an_archive_rebuilt_from_a_packaged_repository_that_bundled_plugins_is_accepted(tmp_path, s3_env):
    """The driver rebuilds a new release's archive from its packaged repository, which keeps no wheels: the lock's
    plugin wheels are not required by the follower (it installs nothing from the archive), every repository file
    still is verified. serve's own start, which installs them, still requires them."""
    from tritonpkg.deploy.release import Release
    from tritonpkg.serve.unpack import LockMismatchError, unpack_archive, verify_unpacked

    repo = tmp_path / "repo"
    package_spec(load_spec(EXAMPLES / "sentiment-custom"), repo)
    lock = json.loads((repo / "tritonpkg.lock.json").read_text())
    lock["models"]["sentiment"]["versions"]["1"]["plugins"] = [{"name": "p", "wheel": "p-1.0-py3-none-any.whl",
                                                               "sha256": "00" * 32}]
    (repo / "tritonpkg.lock.json").write_text(json.dumps(lock))
    path = tmp_path / "rebuilt.tar.gz"
    sha = package_store.write_archive(Release(model="sentiment", version=1, repository=repo), path)
    with pytest.raises(LockMismatchError, match="listed in the lock but missing"):
        verify_unpacked(unpack_archive(path, tmp_path / "strict"), path)
    ref = package_store.archive_ref(STORE, "sentiment", 1, sha)
    s3 = s3_env.client()
    if BUCKET not in [b["Name"] for b in s3.list_buckets()["Buckets"]]:
        s3.create_bucket(Bucket=BUCKET)
    s3.put_object(Bucket=BUCKET, Key=ref.key_url.removeprefix(f"s3://{BUCKET}/"), Body=path.read_bytes())
    location = adapter_list.ArchiveLocation(url=ref.url, file=ref.file, sha256=ref.sha256, path="sentiment/1")
    assert (follower(tmp_path)._folder(location) / "model.py").is_file()


@pytest.mark.parametrize("extra", [["--no-openai"], ["--mode", "separate"], []])
def test_serve_adapter_list_needs_an_archive_and_the_openai_port(tmp_path, extra):
    """Usage errors before anything starts: the list's state is served on the OpenAI port, and the list rewrites
    the served multi_lora.json, which serve owns only for an archive it unpacks (a folder is served in place)."""
    from typer.testing import CliRunner

    from tritonpkg.cli import app

    res = CliRunner().invoke(app, ["serve", str(tmp_path), "--adapter-list", str(tmp_path / "a.json"), *extra])
    assert res.exit_code == 2 and "--adapter-list" in res.output
    assert ("OpenAI port" if extra else "package archive") in res.output
