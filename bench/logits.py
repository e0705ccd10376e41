"""Per-step cost of constraint masking on CPU logits: the C++ engine (logits_ext) vs the alternatives.

For B rows x V vocab float32 logits, two cases: "allow50" (each row may only take its own 50 ids) and
"mostly" (each row bans its own 50 ids). Methods, each timed as the median of repeated calls:
  floor   one logits.fill_() pass: the least a restrict-to-few-ids write can cost
  cpp     tritonpkg_logits Engine.apply (rows on a thread pool, GIL released, cheapest write per row)
  python  a per-request Python processor: a torch op sequence per row
  xgr     xgrammar.apply_token_bitmask_inplace on the CPU with a prebuilt bitmask (bitmask build not timed)

    .venv/bin/python bench/logits.py [--quick] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

BATCHES = (1, 8, 32, 128, 256)
VOCABS = (32000, 128256)
K = 50


def timeit(fn, budget_s: float = 0.25, max_iter: int = 60) -> float:
    fn()
    times = []
    start = time.perf_counter()
    while len(times) < 3 or (time.perf_counter() - start < budget_s and len(times) < max_iter):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e6


def bench_cell(b: int, v: int, case: str, gen: torch.Generator) -> dict[str, float]:
    import xgrammar

    from tritonpkg_logits import Engine

    ids = [torch.randperm(v, generator=gen)[:K].sort().values for _ in range(b)]
    logits = torch.randn(b, v, generator=gen)
    eng = Engine(v, [0])
    for row, r in enumerate(ids):
        spec = {"type": "allow", "tokens": r.tolist(), "eos": False} if case == "allow50" else {"type": "ban", "tokens": r.tolist()}
        eng.set_row(row, eng.compile(spec))
    neg = float("-inf")

    def python_rows():
        for row, r in enumerate(ids):
            x = logits[row]
            if case == "allow50":
                keep = x[r].clone()
                x.fill_(neg)
                x[r] = keep
            else:
                x[r] = neg

    bitmask = eng.bitmask(b)
    out = {
        "floor": timeit(lambda: logits.fill_(neg)),
        "cpp": timeit(lambda: eng.apply(logits)),
        "python": timeit(python_rows),
        "xgr": timeit(lambda: xgrammar.apply_token_bitmask_inplace(logits, bitmask, vocab_size=v, backend="cpu")),
    }
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="B in {1, 32, 256} only")
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args()
    from rich.console import Console
    from rich.table import Table

    gen = torch.Generator().manual_seed(0)
    rows = []
    for case in ("allow50", "mostly"):
        for v in VOCABS:
            for b in (1, 32, 256) if args.quick else BATCHES:
                r = bench_cell(b, v, case, gen)
                rows.append({"case": case, "B": b, "V": v, **r})
                print(f"{case} B={b} V={v}: " + ", ".join(f"{k}={x:.0f}us" for k, x in r.items()), flush=True)
    table = Table(title=f"constraint masking per step, median µs ({torch.get_num_threads()} torch threads)")
    for col in ("case", "B", "V", "floor", "C++", "C++/row", "python", "xgrammar", "C++/floor", "python/C++", "xgr/C++"):
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(r["case"], str(r["B"]), str(r["V"]), f"{r['floor']:.0f}", f"{r['cpp']:.0f}", f"{r['cpp'] / r['B']:.1f}",
                      f"{r['python']:.0f}", f"{r['xgr']:.0f}", f"{r['cpp'] / r['floor']:.2f}x",
                      f"{r['python'] / r['cpp']:.1f}x", f"{r['xgr'] / r['cpp']:.1f}x")
    Console(width=160).print(table)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
