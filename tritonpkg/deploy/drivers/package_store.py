"""Where a Kubernetes pod gets its model repository: the release as one `package --archive` file in object
storage, under a key named by its sha256 (a restarted pod fetches exactly the archive its manifest names), so
no API object carries the repository and no size limit of the API server applies.

Pure parts (`ArchiveRef`, `archive_ref`, `check` with `host_paths`) say where things go and what is refused;
`write_archive` and `upload` are the effects."""

from __future__ import annotations

import hashlib
import re
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from tritonpkg import version_files
from tritonpkg.errors import TritonpkgError

if TYPE_CHECKING:
    from tritonpkg.deploy.release import Release
    from tritonpkg.spec import Volume

_STORE = re.compile(r"s3://[a-z0-9.\-]{3,63}(/[A-Za-z0-9_.\-/]*)?")


class ArchiveRef(BaseModel):
    """One release's archive in the store: `url` is the prefix `tritonpkg materialize` copies (the archive
    alone lies under it), `revision` the folder it lands in, `file` its name."""

    url: str
    revision: str
    file: str
    sha256: str

    @property
    def key_url(self) -> str:
        return f"{self.url}/{self.file}"


def check_store(store: str | None) -> str:
    if not store or not _STORE.fullmatch(store) or "/../" in f"{store}/" or "/./" in f"{store}/":
        raise TritonpkgError(f"package store {store!r} is not an s3:// prefix" if store else
                             "the kubernetes target needs a package store", field="--package-store",
                             expected="s3://bucket/prefix where the pods fetch the release's package archive")
    return store.rstrip("/")


def archive_ref(store: str, model: str, version: int, sha256: str) -> ArchiveRef:
    safe = "".join(c if c.isalnum() or c in "-_." else "-" for c in model).strip("-.") or "model"
    revision = sha256[:16]
    return ArchiveRef(url=f"{check_store(store)}/{safe}/{revision}", revision=revision,
                      file=f"{safe}-v{version}.tar.gz", sha256=sha256)


def _under(path: str, volumes: Sequence[Volume]) -> bool:
    return any(path == v.mount or path.startswith(v.mount + "/") for v in volumes)


def host_paths(release: Release, volumes: Sequence[Volume]) -> None:
    """Refuse a release whose weights or adapters name a folder of this host: a pod has no such folder. A spec's
    local `weights` must lie under a declared volume (deployment.volumes); local adapters are copied into the
    archive and travel with it. A packaged repository's model.json `model` and multi_lora.json entries are held
    to the same rule (relative adapter folders are inside the archive)."""
    spec = release.spec
    if spec is not None and spec.weights is not None and "://" not in spec.weights:
        location = spec.weights_location() or spec.weights
        if not _under(location, volumes):
            raise TritonpkgError(f"weights {spec.weights!r} is a folder of this host, which a pod does not have",
                                 file=spec.source, field="weights",
                                 expected="s3://bucket/prefix, hf://org/name@revision, or a path under a volume of "
                                          "deployment.volumes (a PVC claim mounted in the pod at the same path)")
    repo = release.repository
    if not release.built or not repo.is_dir():  # a spec not yet written: checked again once it is
        return
    readers = ((version_files.ENGINE_ARGS, version_files.read_engine_args),
               (version_files.MULTI_LORA, version_files.read_adapter_list))
    for name, read in readers:
        for version in version_files.version_folders(repo, name):
            try:
                data = read(version)
            except version_files.NotAnObjectError:
                continue
            except (OSError, ValueError) as exc:
                raise TritonpkgError(f"cannot read it: {exc}", file=version / name, expected="a JSON object") from None
            _refuse_host_folders(version / name, {"model": data.get("model")} if name == version_files.ENGINE_ARGS
                                 else data, volumes)


def _refuse_host_folders(path: Path, entries: dict[str, Any], volumes: Sequence[Volume]) -> None:
    for field, value in entries.items():
        if not isinstance(value, str) or "://" in value:
            continue
        if value.startswith(("/", "~")) and not _under(value, volumes):
            raise TritonpkgError(f"{value!r} is a folder of this host, which a pod does not have", file=path,
                                 field=field, expected="a remote source (s3://, hf://), a folder inside the "
                                                       "package, or a path under a declared volume")


def check(release: Release, store: str | None) -> str:
    """What a pod needs, refused before anything is written: a package store to fetch the release from
    (check_store; returned as archive_ref takes it), and no weights or adapters that name a folder of this host
    (host_paths, against the spec's deployment.volumes)."""
    store = check_store(store)
    host_paths(release, release.spec.deployment.volumes if release.spec is not None else [])
    return store


def write_archive(release: Release, path: Path) -> str:
    """The release's package archive at `path` (the spec packaged again with `--archive`, or a packaged
    repository's files with its lock); returns its sha256."""
    from tritonpkg.repository import archive as archive_mod
    from tritonpkg.repository import package_spec

    path.parent.mkdir(parents=True, exist_ok=True)
    if release.spec is not None:
        with tempfile.TemporaryDirectory(prefix="tritonpkg-archive-") as scratch:
            package_spec(release.spec, Path(scratch) / "repository", archive=path)
    else:
        repo = release.repository
        files = {p.relative_to(repo).as_posix(): p.read_bytes()
                 for p in sorted(repo.rglob("*")) if p.is_file() and not p.is_symlink()}
        archive_mod.write(path, files, {})
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def upload(path: Path, ref: ArchiveRef) -> str:
    """Put the archive at `ref` unless an object of that name and size is there (its key is its digest)."""
    from tritonpkg.storage.sources.s3 import _client, translate

    bucket, _, key = ref.key_url.removeprefix("s3://").partition("/")
    client: Any = _client(4)
    try:
        try:
            head = client.head_object(Bucket=bucket, Key=key)
            if head.get("ContentLength") == path.stat().st_size:
                return f"{ref.key_url} already there"
        except Exception as exc:
            if getattr(exc, "response", {}).get("Error", {}).get("Code") not in ("404", "NoSuchKey", "NotFound"):
                raise
        with path.open("rb") as body:
            client.put_object(Bucket=bucket, Key=key, Body=body, Metadata={"sha256": ref.sha256})
    except Exception as exc:
        raise translate(exc, ref.key_url, "write") from exc
    return f"uploaded {path.stat().st_size} bytes to {ref.key_url}"
