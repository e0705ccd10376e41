from __future__ import annotations


def serve() -> None:
    """Serve a model repository in the real Triton server (not yet built)."""
    raise SystemExit("not implemented yet")
