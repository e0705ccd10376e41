from __future__ import annotations


def validate() -> None:
    """Validate a model repository (not yet built)."""
    raise SystemExit("not implemented yet")
