"""How a client proves it holds Triton's admin key: the HTTP header and the gRPC metadata name that every
tritonserver the toolkit starts accepts for its restricted APIs (tritonpkg.runtime.admin restricts them).
Low on purpose: the frontend, deploy and the runtime all send it."""

from __future__ import annotations

HEADER = "admin-key"  # HTTP header name; gRPC metadata is GRPC_PREFIX + HEADER
GRPC_PREFIX = "triton-grpc-protocol-"


def http_headers(key: str | None) -> dict[str, str]:
    return {HEADER: key} if key else {}


def grpc_headers(key: str | None) -> dict[str, str]:
    """What tritonclient.grpc's `headers=` takes (sent as call metadata)."""
    return {GRPC_PREFIX + HEADER: key} if key else {}
