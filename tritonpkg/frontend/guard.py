"""The ASGI middleware in front of every route: a bound on the headers, the API key, and a bound on the
body enforced while it is read, each refused in the OpenAI error shape before the app sees the request.

The key is checked before any byte of the body is read, so a client without it cannot make the server
buffer anything. The body limit looks at Content-Length first (refused without reading), then counts
what arrives (chunked bodies have no length): at most `max_body` bytes are ever held. The body, once
whole, is handed to the app as one message; later `receive()` calls (the disconnect watch of the
routes) go to the server unchanged."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from tritonpkg.frontend.auth import bearer_matches, digest
from tritonpkg.frontend.errors import INVALID, APIError

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]

# Routes anyone may call: liveness/readiness probes and the API's description.
OPEN_PATHS = frozenset({"/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc"})
OPEN_PREFIXES = ("/health/",)


def is_open(path: str) -> bool:
    return path in OPEN_PATHS or path.startswith(OPEN_PREFIXES)


class RequestGuard:
    def __init__(self, app: Callable[..., Awaitable[None]], *, api_key: str | None, max_body: int,
                 max_headers: int) -> None:
        self.app = app
        self.digest = digest(api_key) if api_key else None
        self.max_body = max_body
        self.max_headers = max_headers

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = scope["headers"]
        if len(headers) > self.max_headers:
            await _refuse(send, APIError(431, f"the request has {len(headers)} headers; at most {self.max_headers} "
                                              "are accepted", code="too_many_headers"))
            return
        if self.digest is not None and not is_open(scope["path"]) and scope["method"] != "OPTIONS":
            authorization = next((v for k, v in headers if k == b"authorization"), None)
            if not bearer_matches(authorization, self.digest):
                await _refuse(send, APIError(
                    401, "missing or incorrect API key: send the header 'Authorization: Bearer <key>' with the key "
                         "this server was started with", code="invalid_api_key"),
                    [(b"www-authenticate", b"Bearer")])
                return
        lengths = [v for k, v in headers if k == b"content-length"]
        if lengths:
            try:
                declared = int(lengths[0])
            except ValueError:
                declared = -1
            if declared < 0 or any(v != lengths[0] for v in lengths):
                await _refuse(send, APIError(400, "the Content-Length header is not one non-negative integer",
                                             code="bad_content_length"))
                return
            if declared > self.max_body:
                await _refuse(send, _too_large(self.max_body, declared))
                return
        first = await receive()
        if first["type"] == "http.disconnect":
            return  # the client left before its body was whole: nothing to answer
        if first.get("more_body", False):
            body = bytearray(first.get("body", b""))
            while len(body) <= self.max_body:
                message = await receive()
                if message["type"] == "http.disconnect":
                    return
                body += message.get("body", b"")
                if not message.get("more_body", False):
                    break
            first = {"type": "http.request", "body": bytes(body), "more_body": False}
        if len(first.get("body", b"")) > self.max_body:
            await _refuse(send, _too_large(self.max_body, None))
            return
        delivered = False

        async def replay() -> dict[str, Any]:
            nonlocal delivered
            if delivered:
                return await receive()
            delivered = True
            return first

        await self.app(scope, replay, send)


def _too_large(limit: int, declared: int | None) -> APIError:
    size = f" ({declared} bytes)" if declared is not None else ""
    return APIError(413, f"the request body{size} is larger than this server accepts: at most {limit} bytes "
                         "(--max-request-bytes)", code="request_too_large")


async def _refuse(send: Send, error: APIError, extra: list[tuple[bytes, bytes]] | None = None) -> None:
    """The error as the routes would send it; the connection closes, so an unread body is not drained."""
    error.type = INVALID
    payload = json.dumps(error.body()).encode()
    await send({"type": "http.response.start", "status": error.status, "headers": [
        (b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode()),
        (b"connection", b"close"), *(extra or [])]})
    await send({"type": "http.response.body", "body": payload, "more_body": False})
