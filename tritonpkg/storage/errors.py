"""Errors of materialization. Each says what failed, where, and what to do next."""

from __future__ import annotations

from tritonpkg.errors import TritonpkgError


class StorageError(TritonpkgError):
    """Materializing weights failed; nothing partial is visible under the destination."""


class SourceChangedError(StorageError):
    """The source changed between listing and the end of the copy: the copy would mix two versions."""


class ChecksumError(StorageError):
    """Downloaded bytes do not match the checksum the source or a manifest promised."""
