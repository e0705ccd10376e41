"""CPU masking cost of the C++ engine's thread pool, A/B in one run: the pool that wakes every worker and
waits for all of them (old) against the one that starts at once and never waits for a sleeping worker
(new), one thread (serial), and the split apply (C++ saves and restores the allowed values, torch's
own threads do the -inf fill), each against the `fill_` floor (torch's threads) and the floor on one
thread. Allow-50 rows (save 50 values, fill the row with -inf, restore). Needs only torch and
logits_ext (no vLLM, no xgrammar), so it also runs on machines with many idle cores.

    python bench/logits_cpu_ab.py [--repeats 5] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics

import torch
from logits import timeit  # bench/logits.py: the same median-of-calls timer

BATCHES = (1, 8, 32, 128, 256)
VOCABS = (32000, 128256)


def cell(b: int, v: int, repeats: int, gen: torch.Generator) -> dict[str, float]:
    from tritonpkg_logits import Engine
    from tritonpkg_logits import _core as core

    eng = Engine(v, [0])
    for row in range(b):
        ids = torch.randperm(v, generator=gen)[:50].tolist()
        eng.set_row(row, eng.compile({"type": "allow", "tokens": ids, "eos": False}))
    x = torch.randn(b, v, generator=gen)
    neg = float("-inf")
    threads = torch.get_num_threads()
    out: dict[str, list[float]] = {k: [] for k in ("floor", "floor_1t", "old", "new", "serial", "split")}
    for _ in range(repeats):  # interleaved, so drift on a shared machine hits every method alike
        out["floor"].append(timeit(lambda: x.fill_(neg)))
        torch.set_num_threads(1)
        out["floor_1t"].append(timeit(lambda: x.fill_(neg)))
        torch.set_num_threads(threads)
        core._set_pool_wait_all(True)
        out["old"].append(timeit(lambda: eng.apply(x)))
        core._set_pool_wait_all(False)
        out["new"].append(timeit(lambda: eng.apply(x)))
        core._set_pool_min_elems(1 << 62)
        out["serial"].append(timeit(lambda: eng.apply(x)))
        core._set_pool_min_elems(1 << 16)
        out["split"].append(timeit(lambda: eng.apply_split(x)))
    return {k: statistics.median(vs) for k, vs in out.items()} | {"engine_threads": eng._core.threads()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--json")
    args = ap.parse_args()
    gen = torch.Generator().manual_seed(0)
    rows = [{"B": b, "V": v, **cell(b, v, args.repeats, gen)} for v in VOCABS for b in BATCHES]
    print(f"allow-50 masking, median µs; torch threads {torch.get_num_threads()}, engine threads {rows[0]['engine_threads']}")
    head = ("B", "V", "floor", "floor 1t", "old pool", "new pool", "serial", "split", "old/floor", "new/floor",
            "split/floor", "new/old")
    print("| " + " | ".join(head) + " |\n|" + "---|" * len(head))
    for r in rows:
        print(f"| {r['B']} | {r['V']} | {r['floor']:.0f} | {r['floor_1t']:.0f} | {r['old']:.0f} | {r['new']:.0f} | "
              f"{r['serial']:.0f} | {r['split']:.0f} | {r['old'] / r['floor']:.2f}x | {r['new'] / r['floor']:.2f}x | "
              f"{r['split'] / r['floor']:.2f}x | {r['new'] / r['old']:.2f}x |")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=1)


if __name__ == "__main__":
    main()
