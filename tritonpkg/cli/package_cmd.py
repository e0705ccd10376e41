from __future__ import annotations


def package() -> None:
    """Package a spec into a model repository (not yet built)."""
    raise SystemExit("not implemented yet")
