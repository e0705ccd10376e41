"""Any other fsspec URL (gcs://, az://, memory://, ...) through the filesystem fsspec resolves for it."""

from __future__ import annotations

from tritonpkg.storage.errors import SourceChangedError, StorageError, UnsafeKeyError
from tritonpkg.storage.objects import RemoteFile


class FsspecSource:
    def __init__(self, url: str) -> None:
        import fsspec  # imported only for a URL no other source takes

        self.url = url
        try:
            self.fs, self.root = fsspec.core.url_to_fs(url)
        except (ImportError, ValueError) as exc:
            raise StorageError(f"no filesystem for {url}: {exc}",
                               expected="s3://, hf://, a local path, or an fsspec URL whose package is installed"
                               ) from exc
        self.root = self.root.rstrip("/")

    def default_name(self) -> str:
        return self.root.rsplit("/", 1)[-1] or "model"

    def revision(self) -> str | None:
        return None

    def list_files(self) -> list[RemoteFile]:
        try:
            found = self.fs.find(self.root, detail=True)
        except FileNotFoundError:
            found = {}
        except Exception as exc:
            raise StorageError(f"listing {self.url} failed: {exc}") from exc
        files = []
        for path, info in sorted(found.items()):
            if info.get("type") == "directory":
                continue
            etag = (info.get("ETag") or info.get("etag") or info.get("md5Hash") or info.get("mtime")
                    or info.get("created"))
            files.append(RemoteFile(path=relative_key(path, self.root, self.url), key=path, size=int(info["size"]),
                                    etag=str(etag) if etag is not None else None))
        if not files:
            raise StorageError(f"no files under {self.url}", field="SOURCE",
                               expected="a folder holding the model files")
        return files

    def read(self, f: RemoteFile, start: int, end: int) -> list[bytes]:
        try:
            data = self.fs.cat_file(f.key, start=start, end=end)
        except FileNotFoundError as exc:
            raise SourceChangedError(f"{f.key} disappeared during the copy", expected="an unchanged source") from exc
        if len(data) != end - start:
            raise SourceChangedError(f"{f.key}: short read", expected=f"{end - start} bytes (the listed size)")
        return [data]

    def close(self) -> None:
        pass


def relative_key(path: str, root: str, source: str) -> str:
    """`path` below `root` with exactly the one separator between them removed: a `//` or a leading `/`
    that is left stays visible to the path rule instead of being stripped away. A URL naming one file
    lists that file under its own name."""
    if root and path == root:
        return root.rsplit("/", 1)[-1]
    if root and not path.startswith(root + "/"):
        raise UnsafeKeyError(path, "the listing names a path outside the source's root", source=source)
    return path[len(root) + 1:] if root else path.removeprefix("/")
