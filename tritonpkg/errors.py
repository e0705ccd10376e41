"""Exceptions the library raises. Each names the file, the field and what was expected, so the CLI can
turn it into one actionable line without knowing where it came from."""

from __future__ import annotations

from pathlib import Path


class TritonpkgError(Exception):
    """Base error: `file`, `field` and `expected` locate and explain the problem."""

    def __init__(
        self,
        message: str,
        *,
        file: str | Path | None = None,
        field: str | None = None,
        expected: str | None = None,
    ) -> None:
        self.message = message
        self.file = str(file) if file is not None else None
        self.field = field
        self.expected = expected
        super().__init__(self.render())

    def render(self) -> str:
        where = ": ".join(p for p in (self.file, self.field) if p)
        text = f"{where}: {self.message}" if where else self.message
        if self.expected:
            text += f" (expected {self.expected})"
        return text


class SpecError(TritonpkgError):
    """A tritonpkg.yaml that does not describe a valid model."""


class PackageError(TritonpkgError):
    """Building a repository failed; the target is left as it was."""


class CompatError(TritonpkgError):
    """A release or version the compatibility matrix does not know, or a pin that would be broken."""


class RuntimeSetupError(TritonpkgError):
    """The local Triton runtime is missing, incomplete, or failed to start."""
