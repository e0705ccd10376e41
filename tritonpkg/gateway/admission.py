"""A bound on the tokens in flight through the gateway: past it, requests are refused at once (the
frontend answers HTTP 429) instead of queueing until every client times out."""

from __future__ import annotations

import threading

from tritonpkg.errors import TritonpkgError


class GatewayOverloaded(TritonpkgError):  # noqa: N818  names a condition (as StopIteration does); renaming touches 21 uses in other rooms
    """The gateway has `in_flight` tokens running and cannot take `requested` more (limit `limit`)."""

    def __init__(self, requested: int, in_flight: int, limit: int) -> None:
        self.requested, self.in_flight, self.limit = requested, in_flight, limit
        if requested > limit:
            message = (f"this request has {requested} tokens, more than the gateway's limit of {limit} tokens "
                       "in flight; split it into smaller batches")
        else:
            message = (f"overloaded: {in_flight} tokens in flight and this request adds {requested}, over the "
                       f"limit of {limit}; retry shortly or send smaller batches")
        super().__init__(message, field="input", expected=f"at most {max(limit - in_flight, 0)} tokens now")


class TokenAdmission:
    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError("the in-flight token limit must be at least 1")
        self.limit = limit
        self.in_flight = 0
        self._lock = threading.Lock()

    def acquire(self, tokens: int) -> None:
        with self._lock:
            if self.in_flight + tokens > self.limit:
                raise GatewayOverloaded(tokens, self.in_flight, self.limit)
            self.in_flight += tokens

    def release(self, tokens: int) -> None:
        with self._lock:
            self.in_flight -= tokens

    def hold(self, tokens: int) -> _Held:
        """`with admission.hold(n):` acquire on entry (or raise GatewayOverloaded), release on exit."""
        self.acquire(tokens)
        return _Held(self, tokens)


class _Held:
    def __init__(self, admission: TokenAdmission, tokens: int) -> None:
        self.admission, self.tokens = admission, tokens

    def __enter__(self) -> _Held:
        return self

    def __exit__(self, *exc: object) -> None:
        self.admission.release(self.tokens)
