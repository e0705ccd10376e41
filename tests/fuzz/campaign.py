"""A fuzz campaign: `python -m tests.fuzz.campaign [TARGET ...] --minutes N` runs each target's strategy,
unseeded, for N minutes, in rounds of hypothesis runs; each failing case (hypothesis shrinks it first) is written
to tests/fuzz/corpus/<target>/, where the smoke run replays it. Prints executions, outcomes and crashes."""

from __future__ import annotations

import argparse
import collections
import json
import sys
import time
from typing import Any

from hypothesis import HealthCheck, Phase, given, settings

from tests.fuzz.harness import Violation, check, save_case
from tests.fuzz.targets import targets


def campaign(name: str, seconds: float, round_examples: int = 200) -> dict[str, Any]:
    target = targets()[name]
    outcomes: collections.Counter[str] = collections.Counter()
    crashes: list[str] = []
    end = time.monotonic() + seconds
    failing: list[tuple[Any, str]] = []  # this round's failing cases, in the order hypothesis ran them
    while time.monotonic() < end:
        failing.clear()

        @settings(max_examples=round_examples, deadline=None, database=None, derandomize=False,
                  phases=[Phase.generate, Phase.shrink], suppress_health_check=list(HealthCheck))
        @given(target.strategy)
        def run(case: Any) -> None:
            if time.monotonic() > end and not failing:
                return
            try:
                outcomes[check(target, case)] += 1
            except Violation as exc:
                outcomes["violation"] += 1
                failing.append((case, str(exc)))
                raise

        try:
            run()
        except Exception:  # a Violation, or hypothesis's group of several distinct ones
            if not failing:
                raise
            last: dict[str, Any] = {}  # one case per distinct failure: the last one of each is the shrunk one
            for case, why in failing:
                last[": ".join(why.split(": ", 2)[:2])] = case  # "validate: KeyError escaped"
            for why, case in last.items():
                path = save_case(name, case, why)
                crashes.append(f"{path.name}: {why[:200]}")
                print(f"[{name}] crash saved to {path}: {why[:200]}", file=sys.stderr, flush=True)
    return {"target": name, "seconds": seconds, "executions": sum(outcomes.values()), "outcomes": dict(outcomes),
            "crashes": crashes}


def measured(name: str, seconds: float, source: list[str]) -> dict[str, Any]:
    """campaign() under coverage.py: the statements of `source` the campaign's cases reached in this process
    (code that runs in a server the target talks to is not counted), over the files it reached at all."""
    import coverage

    cov = coverage.Coverage(source=source, data_file=None, branch=False)
    cov.start()
    try:
        result = campaign(name, seconds)
    finally:
        cov.stop()
    data = cov.get_data()
    statements = covered = 0
    files = 0
    for path in data.measured_files():
        _, lines, _, missing, _ = cov.analysis2(path)
        if len(lines) > len(missing):
            files += 1
            statements += len(lines)
            covered += len(lines) - len(missing)
    result["coverage"] = {"files_reached": files, "statements": statements, "covered": covered,
                          "percent": round(100 * covered / max(statements, 1), 1)}
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("targets", nargs="*", help=f"targets (default: all): {', '.join(sorted(targets()))}")
    parser.add_argument("--minutes", type=float, default=1.0, help="minutes per target")
    parser.add_argument("--coverage", action="store_true",
                        help="measure the line coverage of tritonpkg/ and backends/ the campaign reached")
    args = parser.parse_args()
    names = args.targets or sorted(targets())
    unknown = sorted(set(names) - set(targets()))
    if unknown:
        parser.error(f"unknown target(s) {unknown}; known: {sorted(targets())}")
    for name in names:
        seconds = args.minutes * 60
        result = measured(name, seconds, ["tritonpkg", "backends"]) if args.coverage else campaign(name, seconds)
        print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
