"""The OpenAI API's key: where it comes from (`--api-key`, `TRITONPKG_API_KEY`, `--api-key-file`), how a
request's bearer token is compared with it, and the warning for a public address that has none.

The key is compared as SHA-256 digests with hmac.compare_digest, so neither its value nor its length
leaks through timing (vLLM's own server compares digests the same way)."""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import os
import re
import stat
from pathlib import Path

from tritonpkg import boundedio
from tritonpkg.errors import TritonpkgError

ENV = "TRITONPKG_API_KEY"
MAX_KEY_FILE_BYTES = 4096
# What an HTTP header can carry unchanged and a shell can pass: printable ASCII without spaces.
_KEY = re.compile(r"[\x21-\x7e]{1,1024}")


class ApiKeyError(TritonpkgError):
    """An API key (or its file) the frontend will not use."""


def check_key(key: str, field: str = "--api-key") -> str:
    if not _KEY.fullmatch(key):
        raise ApiKeyError("the API key is empty, too long or has a character an Authorization header cannot carry",
                          field=field, expected="1-1024 printable ASCII characters without spaces")
    return key


def read_key_file(path: Path) -> str:
    """The key in `path` (one line); refused unless it is a regular file that only its owner can read."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        raise ApiKeyError(f"cannot open the API key file: {exc.strerror or exc}", file=path, field="--api-key-file",
                          expected="a regular file, not a symlink, that only its owner can read (chmod 600)") from None
    with os.fdopen(fd, "rb") as fh:
        info = os.fstat(fh.fileno())  # the file opened, not whatever the name points to by now
        if not stat.S_ISREG(info.st_mode):
            raise ApiKeyError("the API key file is not a regular file", file=path, field="--api-key-file",
                              expected="a regular file")
        if info.st_mode & 0o077:
            mode = stat.S_IMODE(info.st_mode)
            raise ApiKeyError(f"the API key file is readable or writable by others (mode {mode:o})", file=path,
                              field="--api-key-file", expected="mode 600 or 400 (chmod 600 FILE)")
        try:
            data = boundedio.read_at_most(fh, MAX_KEY_FILE_BYTES, path)
        except boundedio.FileTooLargeError:
            raise ApiKeyError("the API key file is too large", file=path, field="--api-key-file",
                              expected=f"one key line, at most {MAX_KEY_FILE_BYTES} bytes") from None
    try:
        text = data.decode("ascii").strip()
    except UnicodeDecodeError:
        text = ""
    return check_key(text, "--api-key-file")


def load_api_key(key: str | None, key_file: Path | None) -> str | None:
    """The key from the option (or TRITONPKG_API_KEY, which the CLI maps onto it) or from the file; None: no key."""
    if key and key_file is not None:
        raise ApiKeyError("give the API key once", field="--api-key-file",
                          expected=f"either --api-key (or {ENV}) or --api-key-file")
    if key_file is not None:
        return read_key_file(key_file)
    return check_key(key) if key else None


def digest(key: str) -> bytes:
    return hashlib.sha256(key.encode("ascii")).digest()


def bearer_matches(authorization: bytes | None, expected_digest: bytes) -> bool:
    """`Authorization: Bearer <token>` (scheme case-insensitive) whose token is the key."""
    if not authorization:
        return False
    scheme, _, token = authorization.partition(b" ")
    if scheme.lower() != b"bearer":
        return False
    return hmac.compare_digest(hashlib.sha256(token.strip()).digest(), expected_digest)


def is_loopback(host: str) -> bool:
    """Whether `host` is reachable from this machine only ('' and 0.0.0.0 / :: are every interface)."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to a public address


def exposure_warning(host: str, port: int | str, has_key: bool, what: str = "the OpenAI API") -> str | None:
    """The warning for an API that anyone on the network can use, or None."""
    if has_key or is_loopback(host):
        return None
    where = "every interface" if host in ("", "0.0.0.0", "::") else host  # noqa: S104  names the wildcard, binds nothing
    return (f"{what} listens on {where} (port {port}) without an API key: anyone who can reach the port can run "
            f"the models and use their compute; set --api-key-file FILE (or {ENV}) or listen on 127.0.0.1")
