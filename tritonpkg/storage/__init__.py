"""Materialize model weights onto fast (shared) storage: complete, verified, resumable, never partial.

    from tritonpkg.storage import materialize, gc
    result = materialize("s3://bucket/models/llama", "/fsx/models")   # -> /fsx/models/llama/<revision>
"""

from tritonpkg.storage.errors import ChecksumError, SourceChangedError, StorageError
from tritonpkg.storage.gc import GcResult, gc
from tritonpkg.storage.materialize import MaterializeResult, materialize

__all__ = ["ChecksumError", "GcResult", "MaterializeResult", "SourceChangedError", "StorageError", "gc",
           "materialize"]
