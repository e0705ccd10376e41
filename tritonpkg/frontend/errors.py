"""OpenAI-style errors: one exception type the routes raise, rendered as
`{"error": {"message", "type", "param", "code"}}` with the matching HTTP status."""

from __future__ import annotations

import os
import re
from typing import Any

INVALID = "invalid_request_error"
NOT_FOUND = "not_found_error"
SERVER = "server_error"
UNAVAILABLE = "service_unavailable"


class APIError(Exception):
    """A request the frontend answers with an error status; `param` names the offending field."""

    def __init__(self, status: int, message: str, *, param: str | None = None,
                 type: str | None = None,  # noqa: A002  OpenAI's error object names the field `type`
                 code: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.type = type or (INVALID if status < 500 else SERVER)
        self.code = code

    def body(self) -> dict[str, Any]:
        return {"error": {"message": without_paths(self.message), "type": self.type, "param": self.param,
                          "code": self.code}}


SERVER_PATH = "<server path>"
ABSOLUTE = re.compile(r"(?<![\w/.:~-])/[^\s'\"`,;:()\[\]{}<>|]+")


def without_paths(text: str) -> str:
    """`text` with every absolute path of this host replaced: a client never sent, and should not learn, the
    server's folders (routes model errors through catalog names first: app.in_served_terms). A path counts as
    one when its top folder exists here (`/tmp/...`, `/home/...`), so a route such as `/v1/models` stays."""
    def redact(found: re.Match[str]) -> str:
        path = found.group(0)
        top = path.split("/", 2)[1]
        return SERVER_PATH if "/" in path[1:] and top and os.path.isdir("/" + top) else path

    return ABSOLUTE.sub(redact, text) if "/" in text else text


def invalid(message: str, param: str | None) -> APIError:
    return APIError(400, message, param=param)


def unknown_model(name: str, served: list[str]) -> APIError:
    listed = ", ".join(served) or "none"
    from tritonpkg.safepath import quote

    return APIError(404, f"The model {quote(name)} does not exist here; served models: {listed}", param="model",
                    type=NOT_FOUND, code="model_not_found")


UNION_TAGS = {"str", "int", "float", "bool", "none", "dict", "list"}


def field_path(loc: tuple[Any, ...]) -> str:
    """pydantic's ('body', 'messages', 0, 'content') -> 'messages.0.content', the dotted form OpenAI's
    errors use (union branch tags dropped)."""
    parts = []
    for i, part in enumerate(loc):
        if part == "body" and i == 0:
            continue
        if isinstance(part, str) and (part in UNION_TAGS or "[" in part or part[:1].isupper() or "-" in part):
            continue  # a union branch's tag ('str', 'list[TextPart]', 'NamedToolChoice'), not a field
        parts.append(str(part))
    return ".".join(parts)


def from_triton(message: str) -> APIError:
    """A Triton or vLLM-backend error text -> the status a client should see. The backend prefixes its
    errors with [vllm]; a request it rejects is the client's fault, a failed or dead engine is not."""
    text = message.strip()
    lower = text.lower()
    if "unknown model" in lower or ("is not found" in lower and "model" in lower):
        return APIError(404, text, param="model", type=NOT_FOUND, code="model_not_found")
    if "not ready" in lower or "being unloaded" in lower or "unavailable" in lower or "engine died" in lower:
        return APIError(503, text, type=UNAVAILABLE)
    if text.startswith("[vllm]") and "failed the request" not in lower:
        return APIError(400, text.removeprefix("[vllm]").strip())
    return APIError(500, text)
