"""What a source lists: one file, with the identity that must not change while it is copied."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass

_MD5_ETAG = re.compile(r'^"?([0-9a-fA-F]{32})"?$')


@dataclass(frozen=True)
class RemoteFile:
    path: str  # relative POSIX path inside the materialization
    key: str  # where the source finds it (S3 key, absolute path, fsspec path)
    size: int
    etag: str | None = None
    version_id: str | None = None
    sha256: str | None = None  # promised by the source (HF LFS oid, SHA256SUMS), checked after the copy

    def identity(self) -> dict[str, object]:
        """The fields that change when the object changes."""
        return {"size": self.size, "etag": self.etag, "version_id": self.version_id}

    def identity_tag(self, part_size: int) -> str:
        """Short digest of identity + part size: journaled parts are valid only under the same tag."""
        blob = json.dumps([self.path, self.identity(), part_size], sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:16]

    @property
    def md5(self) -> str | None:
        """The MD5 an S3 ETag carries for single-part uploads; None for multipart ETags (`...-N`)."""
        m = _MD5_ETAG.match(self.etag or "")
        return m.group(1).lower() if m else None


def listing_digest(files: list[RemoteFile]) -> str:
    """Content address of a listing: the default revision name for sources without one."""
    rows = sorted((f.path, f.size, f.etag, f.version_id, f.sha256) for f in files)
    return hashlib.sha256(json.dumps(rows).encode()).hexdigest()
