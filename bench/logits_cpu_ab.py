"""CPU masking cost of the C++ engine on the process's OpenMP team (torch's) against the `fill_` floor, in
one run: with torch's threads hot (calls back to back, as in a decode loop right after the forward pass)
and cold (2 ms idle before each call, long enough for libgomp's spinning threads to sleep), and the
engine on one thread. Allow-50 rows (save 50 values, fill the row with -inf, restore). Needs only torch
and logits_ext (no vLLM, no xgrammar), so it also runs on machines with many idle cores.

    python bench/logits_cpu_ab.py [--repeats 5] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
from logits import timeit  # bench/logits.py: the same median-of-calls timer

BATCHES = (1, 8, 32, 128, 256)
VOCABS = (32000, 128256)
IDLE_S = 0.002


def timeit_cold(fn, calls: int = 40) -> float:
    times = []
    for _ in range(calls):
        time.sleep(IDLE_S)
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e6


def cell(b: int, v: int, repeats: int, gen: torch.Generator) -> dict[str, float]:
    from tritonpkg_logits import Engine

    team, serial = Engine(v, [0]), Engine(v, [0], num_threads=1)
    for row in range(b):
        spec = {"type": "allow", "tokens": torch.randperm(v, generator=gen)[:50].tolist(), "eos": False}
        team.set_row(row, team.compile(spec))
        serial.set_row(row, serial.compile(spec))
    x = torch.randn(b, v, generator=gen)
    neg = float("-inf")
    threads = torch.get_num_threads()
    out: dict[str, list[float]] = {k: [] for k in ("floor", "floor_1t", "engine", "serial", "floor_cold",
                                                   "engine_cold")}
    for _ in range(repeats):  # interleaved, so drift on a shared machine hits every method alike
        out["floor"].append(timeit(lambda: x.fill_(neg)))
        out["engine"].append(timeit(lambda: team.apply(x)))
        out["serial"].append(timeit(lambda: serial.apply(x)))
        out["floor_cold"].append(timeit_cold(lambda: x.fill_(neg)))
        out["engine_cold"].append(timeit_cold(lambda: team.apply(x)))
        torch.set_num_threads(1)
        out["floor_1t"].append(timeit(lambda: x.fill_(neg)))
        torch.set_num_threads(threads)
    return {k: statistics.median(vs) for k, vs in out.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--json")
    args = ap.parse_args()
    gen = torch.Generator().manual_seed(0)
    rows = [{"B": b, "V": v, **cell(b, v, args.repeats, gen)} for v in VOCABS for b in BATCHES]
    print(f"allow-50 masking, median µs; torch threads {torch.get_num_threads()}; "
          f"cold = {IDLE_S * 1e3:.0f} ms idle before each call")
    head = ("B", "V", "floor", "engine", "engine/floor", "floor 1t", "engine 1t", "floor cold", "engine cold",
            "cold ratio")
    print("| " + " | ".join(head) + " |\n|" + "---|" * len(head))
    for r in rows:
        print(f"| {r['B']} | {r['V']} | {r['floor']:.0f} | {r['engine']:.0f} | {r['engine'] / r['floor']:.2f}x | "
              f"{r['floor_1t']:.0f} | {r['serial']:.0f} | {r['floor_cold']:.0f} | {r['engine_cold']:.0f} | "
              f"{r['engine_cold'] / r['floor_cold']:.2f}x |")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=1)


if __name__ == "__main__":
    main()
