"""Which gRPC stream a non-streamed request rides on: an idle one when there is one, a new one while
under the limit, else the least busy (Triton writes one stream's responses in order, so sharing is
the last resort)."""

from __future__ import annotations

from tritonpkg.frontend.triton import _StreamPool


def _busy(stream, n: int) -> None:
    for i in range(n):
        stream._waiting[f"{id(stream)}-{i}"] = object()


def test_an_idle_stream_is_reused_and_a_busy_one_is_not():
    pool = _StreamPool(stub=None, error=None, limit=4)
    first = pool._pick()
    assert pool._pick() is first  # idle: reused, no second call opened
    _busy(first, 1)
    second = pool._pick()
    assert second is not first and len(pool._streams) == 2
    first._waiting.clear()
    _busy(second, 1)
    assert pool._pick() is first


def test_past_the_limit_requests_share_the_least_busy_stream():
    pool = _StreamPool(stub=None, error=None, limit=3)
    streams = []
    for load in (3, 1, 2):
        stream = pool._pick()
        _busy(stream, load)
        streams.append(stream)
    assert len(pool._streams) == 3
    assert pool._pick() is streams[1]
    assert len(pool._streams) == 3
