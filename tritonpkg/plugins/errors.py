"""The error every plugin step raises (a TritonpkgError, so the CLI renders it as one actionable line)."""

from __future__ import annotations

from tritonpkg.errors import TritonpkgError


class PluginError(TritonpkgError):
    """A bundled plugin wheel that cannot be read, trusted or installed without breaking the runtime."""
