"""Readiness lag after an engine's death: SIGKILL the tiny LLM's EngineCore under `ServingStack` (the start
procedure of `tritonpkg serve`, --on-engine-death restart) KILLS times, and print, per readiness endpoint, the
p50 and max seconds from the kill until it first said not ready (polled every 50 ms), and the time until the
restarted model answered again. Baseline: before issue 44 no endpoint ever said not ready (the model stayed
READY in Triton's "none" mode), so the lag was unbounded.

    .venv/bin/python bench/engine_death.py [--kills 5] [--json OUT]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    import tritonclient.grpc as grpcclient

    from tests.integration.test_engine_death import _generate, _kill_and_measure, _readiness, _start
    from tests.support.repositories import make_tiny_llm

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=5)
    parser.add_argument("--json", metavar="OUT", help="also write the table's figures here (as JSON)")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench-engine-death-"))
    stack = _start(root, make_tiny_llm(root / "weights"), "restart")
    lags: list[dict[str, float]] = []
    restarts: list[float] = []
    try:
        client = grpcclient.InferenceServerClient(stack.server.grpc_url)
        for i in range(args.kills):
            lags.append(_kill_and_measure(stack, client))
            killed = time.monotonic()
            while not all(_readiness(stack, client).values()):
                if stack.problem():
                    raise SystemExit(stack.problem())
                time.sleep(0.2)
            assert _generate(stack)[0] == 200
            restarts.append(time.monotonic() - killed)
            print(f"kill {i + 1}: {', '.join(f'{k} {v:.2f} s' for k, v in lags[-1].items())}; "
                  f"answering again after {restarts[-1]:.1f} s", flush=True)
    finally:
        stack.stop()
    print(f"\n{'endpoint':<22} {'p50 s':>7} {'max s':>7}   (bar 2 s; before: never not-ready)")
    for name in lags[0]:
        values = [lag.get(name, float("inf")) for lag in lags]
        print(f"{name:<22} {statistics.median(values):>7.2f} {max(values):>7.2f}")
    print(f"{'answering again':<22} {statistics.median(restarts):>7.1f} {max(restarts):>7.1f}")
    from tritonpkg.benchmarks import results

    def seconds(values: list[float]) -> dict:  # never (inf) is JSON's null
        return {k: None if x == float("inf") else x
                for k, x in (("p50", statistics.median(values)), ("max", max(values)))} | {
            "kills": [None if x == float("inf") else x for x in values]}

    results.write(args.json, "bench/engine_death.py", {"kills": args.kills}, {
        "not_ready_after_s": {name: seconds([lag.get(name, float("inf")) for lag in lags]) for name in lags[0]},
        "answering_again_s": seconds(restarts)})


if __name__ == "__main__":
    main()
