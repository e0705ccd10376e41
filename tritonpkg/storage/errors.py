"""Errors of materialization. Each says what failed, where, and what to do next."""

from __future__ import annotations

from tritonpkg.errors import TritonpkgError
from tritonpkg.safepath import UnsafePathError


class StorageError(TritonpkgError):
    """Materializing weights failed; nothing partial is visible under the destination."""


class SourceChangedError(StorageError):
    """The source changed between listing and the end of the copy: the copy would mix two versions."""


class ChecksumError(StorageError):
    """Downloaded bytes do not match the checksum the source or a manifest promised."""


class UnsafeKeyError(UnsafePathError, StorageError):
    """A source lists a key that would become a path outside the materialization (the one path rule of
    tritonpkg.safepath); raised before the staging folder exists."""
