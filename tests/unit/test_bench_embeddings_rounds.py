"""The embeddings bench's round scheduler: every system runs every round, the leading system alternates,
a failing system is reported in its row and sits out the rest, a system without scoring gets a note."""

from __future__ import annotations

import asyncio
import time

from tritonpkg.benchmarks.embeddings import Scenario, System, measure


class Recorder(System):
    def __init__(self, name: str, log: list, fail_after: int | None = None, can_score: bool = True) -> None:
        self.name, self.log, self.fail_after, self.can_score = name, log, fail_after, can_score
        self.calls = 0

    async def embed(self, texts: list[str]) -> None:
        self.calls += 1
        if self.fail_after is not None and self.calls > self.fail_after:
            raise RuntimeError("the server went away")
        self.log.append(self.name)
        await asyncio.sleep(0)


def test_rounds_alternate_the_leader_and_every_call_is_counted():
    log: list[str] = []
    a, b = Recorder("a", log), Recorder("b", log)
    scenario = Scenario("s", lambda s, i: s.embed(["x"]), "concurrency", rounds=4, clients=2, per_client=3)
    rows = asyncio.run(measure(scenario, [a, b], lambda m: None))
    measured = log[2:]  # after one warm-up call each
    leaders = [measured[i * 12] for i in range(4)]
    assert leaders == ["a", "b", "a", "b"]
    assert [r.system for r in rows] == ["a", "b"]
    assert all(r.values["req_per_s"] > 0 and r.values["p50_ms"] >= 0 for r in rows)
    assert a.calls == b.calls == 1 + 4 * 2 * 3


def test_each_round_starts_after_the_settle_pause():
    log: list[str] = []
    a, b = Recorder("a", log), Recorder("b", log)
    scenario = Scenario("s", lambda s, i: s.embed(["x"]), rounds=3)
    start = time.perf_counter()
    asyncio.run(measure(scenario, [a, b], lambda m: None, settle=0.05))
    assert time.perf_counter() - start >= 6 * 0.05  # 3 rounds x 2 systems
    assert a.calls == b.calls == 4


def test_a_failing_system_is_reported_and_sits_out_and_scoring_needs_a_route():
    log: list[str] = []
    ok, broken = Recorder("ok", log), Recorder("broken", log, fail_after=2)
    rows = asyncio.run(measure(Scenario("s", lambda s, i: s.embed(["x"]), rounds=5), [ok, broken], lambda m: None))
    assert rows[0].values and "p50_ms" in rows[0].values
    assert rows[1].note == "failed: the server went away" and not rows[1].values
    assert broken.calls == 3 and ok.calls == 6

    no_score = Recorder("embed-only", log, can_score=False)
    rows = asyncio.run(measure(Scenario("score", lambda s, i: s.embed(["x"]), scoring=True), [ok, no_score],
                               lambda m: None))
    assert rows[1].note == "no scoring route" and no_score.calls == 0
    na = asyncio.run(measure(Scenario("4096", None, note="n/a: too long"), [ok], lambda m: None))
    assert na[0].note == "n/a: too long"
