"""Triton's admin APIs behind a per-deployment key.

Anyone who reaches Triton's HTTP or gRPC port could otherwise load and unload models, raise the log level,
register shared memory, start traces or read statistics. Every tritonserver the toolkit starts restricts those
API groups with Triton's own options (`--http-restricted-api`, `--grpc-restricted-protocol`) to requests that
carry the admin header; inference, metadata, model config and health stay open.

Triton reads the HTTP header `<key>` and the gRPC metadata `triton-grpc-protocol-<key>`. The key is also on
tritonserver's command line (Triton has no other way to receive it), so it protects against the network,
not against other users of the same host who can read /proc/<pid>/cmdline."""

from __future__ import annotations

import re
import secrets
from pathlib import Path

from tritonpkg import private
from tritonpkg.errors import RuntimeSetupError
from tritonpkg.proc.admin_header import GRPC_PREFIX, HEADER, grpc_headers, http_headers

__all__ = ["GRPC_PREFIX", "HEADER", "KEY_FILE", "RESTRICTED", "check_key", "ensure_key", "grpc_headers",
           "http_headers", "new_key", "read_key", "restricted_args", "server_args", "write_key"]

RESTRICTED = ("model-repository", "logging", "trace", "shared-memory", "statistics")
KEY_FILE = "admin-key"
_KEY = re.compile(r"[A-Za-z0-9_-]{16,256}")  # ':', '=' and ',' would split Triton's option value


def new_key() -> str:
    return secrets.token_urlsafe(32)


def check_key(key: str, field: str = "admin_key") -> str:
    if not isinstance(key, str) or not _KEY.fullmatch(key):
        raise RuntimeSetupError("the admin key has a character Triton's option cannot carry, or a bad length",
                                field=field, expected="16-256 characters of A-Z a-z 0-9 _ -")
    return key


def server_args(key: str) -> list[str]:
    """tritonserver options that restrict the admin API groups on HTTP and gRPC to holders of `key`."""
    return restricted_args(check_key(key))


def restricted_args(value: str) -> list[str]:
    """The same options with `value` as it will stand on the command line: a checked key, or a reference
    the container runtime expands (Kubernetes' `$(VAR)` from a Secret)."""
    groups = ",".join(RESTRICTED)
    return [f"--http-restricted-api={groups}:{HEADER}={value}", f"--grpc-restricted-protocol={groups}:{HEADER}={value}"]


def write_key(folder: Path, key: str) -> Path:
    """`folder/admin-key`, mode 0600 from its creation, in a folder that is this user's alone (0700)."""
    check_key(key)
    private.secure_dir(folder)
    return private.write_private(folder / KEY_FILE, key)


def read_key(folder: Path) -> str | None:
    """The key stored in `folder`; None when there is none. A key file that is a link, another user's, or
    writable by others is refused (StateDirError): it would decide who may control the server."""
    path = folder / KEY_FILE
    private.secure_dir(folder)
    if not private.check_file(path):
        return None
    text = private.read_private(path, limit=512).decode(errors="replace").strip()
    return check_key(text, field=str(path))


def ensure_key(folder: Path) -> str:
    """The key stored in `folder`, or a new one stored there."""
    key = read_key(folder)
    if key is None:
        key = new_key()
        write_key(folder, key)
    return key
