"""Minimal calls to Triton's HTTP/REST API with the standard library, so starting and supervising a
server needs no client package (tritonclient is for inference, not for health checks)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any


def request(method: str, url: str, body: Any = None, timeout: float = 5.0,
            headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    """(HTTP status, body); status 0 when nothing answered."""
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"{url!r}: expected an http:// or https:// URL")
    data = json.dumps(body).encode() if body is not None else (b"" if method == "POST" else None)
    req = urllib.request.Request(url, data=data,  # noqa: S310  the scheme is checked above method=method,
                                 headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310  the scheme is checked above
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()
    except (urllib.error.URLError, OSError):
        return 0, b""


def ok(url: str, timeout: float = 1.0) -> bool:
    return request("GET", url, timeout=timeout)[0] == 200


def error_text(body: bytes) -> str:
    """Triton answers errors as {"error": "..."}; fall back to the raw text."""
    try:
        data = json.loads(body)
    except ValueError:
        return body.decode(errors="replace").strip()
    return str(data.get("error", data)) if isinstance(data, dict) else str(data)
