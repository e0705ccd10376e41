"""Hugging Face repositories: `hf://org/name@revision`. Offline (HF_HUB_OFFLINE=1 or an explicit cache
directory) the snapshot comes from a local HF cache (models--org--name/refs, snapshots, blobs); online,
huggingface_hub's HfFileSystem serves ranged reads of the resolved commit."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, cast

from tritonpkg import safepath
from tritonpkg.storage.errors import SourceChangedError, StorageError, UnsafeKeyError
from tritonpkg.storage.objects import RemoteFile
from tritonpkg.storage.sources.fsspec_source import relative_key
from tritonpkg.storage.sources.local import LocalSource

_COMMIT = re.compile(r"^[0-9a-f]{40}$")


def parse_url(url: str, revision: str | None = None) -> tuple[str, str]:
    repo, _, rev = url.removeprefix("hf://").partition("@")
    if repo.count("/") != 1 or not all(repo.split("/")):
        raise StorageError("not a Hugging Face repository URL", field=url, expected="hf://org/name@revision")
    try:
        safepath.check_name(repo, source=url, what="repository")
    except safepath.UnsafePathError as exc:
        raise UnsafeKeyError(repo, exc.rule, source=url, what="repository") from None
    return repo, rev or revision or "main"


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def open_hf(url: str, *, revision: str | None = None, cache: Path | None = None):
    repo, rev = parse_url(url, revision)
    if cache is not None or _offline():
        return cached_snapshot(url, repo, rev, cache)
    return HfSource(url, repo, rev)


def cached_snapshot(url: str, repo: str, rev: str, cache: Path | None) -> LocalSource:
    """The snapshot of `repo@rev` in a local HF cache, as a local source named by its commit."""
    if cache is None:
        from huggingface_hub import constants

        cache = Path(constants.HF_HUB_CACHE)
    repo_dir = Path(cache).expanduser() / ("models--" + repo.replace("/", "--"))
    try:
        ref = safepath.join_under(repo_dir / "refs", rev, source=url, what="revision")
    except safepath.UnsafePathError as exc:
        raise UnsafeKeyError(rev, exc.rule, source=url, what="revision") from None
    if ref.is_file():
        with open(ref, "rb") as fh:
            commit = fh.read(64).decode("utf-8", "replace").strip()  # a commit and a newline; no more is read
        if not _COMMIT.match(commit):
            raise StorageError(f"ref {safepath.quote(rev)} holds {safepath.quote(commit)}, not a commit", file=ref,
                               expected="40 hexadecimal digits (a Hugging Face cache written by huggingface_hub)")
    elif _COMMIT.match(rev):
        commit = rev
    else:
        raise StorageError(f"{repo}@{rev} is not in the local Hugging Face cache", file=ref,
                           expected="a cached snapshot (download it once online, or pass --hf-cache DIR)")
    snapshot = repo_dir / "snapshots" / commit
    if not snapshot.is_dir():
        raise StorageError(f"snapshot {commit} of {repo} is not in the local Hugging Face cache", file=snapshot,
                           expected="snapshots/<commit>/ holding the model files")
    # The snapshot's files are links into ../../blobs: the repository's cache folder bounds where they may lead.
    return LocalSource(snapshot, url=url, name=repo.replace("/", "--"), revision=commit, link_root=repo_dir)


class HfSource:
    def __init__(self, url: str, repo: str, rev: str) -> None:
        from huggingface_hub import HfApi, HfFileSystem

        self.url, self.repo = url, repo
        try:
            self.commit = HfApi().model_info(repo, revision=rev).sha
        except Exception as exc:
            raise _translate(exc, url) from exc
        self.fs = HfFileSystem()

    def default_name(self) -> str:
        return self.repo.replace("/", "--")

    def revision(self) -> str | None:
        return self.commit

    def list_files(self) -> list[RemoteFile]:
        root = f"{self.repo}@{self.commit}"
        try:
            found = cast("dict[str, dict[str, Any]]", self.fs.find(root, detail=True))  # detail=True: path -> info
        except Exception as exc:
            raise _translate(exc, self.url) from exc
        files = []
        for path, info in sorted(found.items()):
            if info.get("type") != "file":
                continue
            lfs = info.get("lfs") or {}
            files.append(RemoteFile(path=relative_key(path, root, self.url), key=path, size=int(info["size"]),
                                    etag=info.get("blob_id"), sha256=lfs.get("sha256")))
        if not files:
            raise StorageError(f"no files in {self.url}", expected="a repository holding model files")
        return files

    def read(self, f: RemoteFile, start: int, end: int) -> list[bytes]:
        try:
            data = self.fs.cat_file(f.key, start=start, end=end)
        except Exception as exc:
            raise _translate(exc, f"hf://{f.key}") from exc
        if len(data) != end - start:
            raise SourceChangedError(f"hf://{f.key}: short read", expected=f"{end - start} bytes")
        return [data]

    def close(self) -> None:
        pass


def _translate(exc: Exception, url: str) -> Exception:
    from huggingface_hub import errors

    if isinstance(exc, errors.GatedRepoError):
        return StorageError(f"{url} is gated: access not granted", expected="a token (HF_TOKEN) with access")
    if isinstance(exc, errors.RepositoryNotFoundError):
        return StorageError(f"{url}: repository not found (or private)", expected="an existing repository; "
                            "set HF_TOKEN for private ones")
    if isinstance(exc, errors.RevisionNotFoundError):
        return StorageError(f"{url}: revision not found", expected="a branch, tag or commit of the repository")
    if isinstance(exc, (OSError, errors.HfHubHTTPError)):
        return StorageError(f"{url}: Hugging Face Hub request failed: {exc}",
                            expected="network access, or HF_HUB_OFFLINE=1 with a local cache (--hf-cache)")
    return exc
