"""Per-step cost of constraint masking on CPU logits: the C++ engine (logits_ext) vs the alternatives.

For B rows x V vocab float32 logits, two cases: "allow50" (each row may only take its own 50 ids) and
"mostly" (each row bans its own 50 ids). Methods, interleaved in rounds (median of each round's median):
  floor   one logits.fill_() pass: the least a restrict-to-few-ids write can cost
  cpp     tritonpkg_logits Engine.apply (rows on torch's OpenMP team, GIL released, cheapest write per row)
  python  a lean per-request Python processor: save the allowed values, fill, restore, per row
  v0      vLLM V0's own per-request shape: its per-row harness (call the processor with the row's output
          ids, write the returned row back) around its allowed-token-ids processor (a boolean mask built
          once per request, then one masked_fill_ per row and step)
  xgr     xgrammar.apply_token_bitmask_inplace on the CPU with a prebuilt bitmask (bitmask build not timed)

    .venv/bin/python bench/logits.py [--quick] [--rounds 5] [--json out.json] [--vllm]

--vllm also measures decode tokens/s of 16 concurrent requests in vLLM CPU on the tiny Llama
(examples/tiny-llm), with a constraint on every request vs none (the plugin is loaded either way).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable

import torch

BATCHES = (1, 8, 32, 128, 256)
VOCABS = (32000, 128256)
K = 50


def timeit(fn: Callable[[], object], budget_s: float = 0.25, max_iter: int = 60) -> float:
    fn()
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < 3 or (time.perf_counter() - start < budget_s and len(times) < max_iter):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e6


class V0MaskProcessor:
    """A per-request processor as vLLM V0 shipped them: called per row with (output ids, row)."""

    def __init__(self, ids: list[int], ban: bool) -> None:
        self.ids, self.ban = ids, ban
        self.mask: torch.Tensor | None = None

    def __call__(self, output_ids: list[int], row: torch.Tensor) -> torch.Tensor:
        mask = self.mask
        if mask is None:
            mask = self.mask = torch.full((row.shape[-1],), not self.ban, dtype=torch.bool)
            mask[self.ids] = self.ban
        return row.masked_fill_(mask, float("-inf"))


def bench_cell(b: int, v: int, case: str, gen: torch.Generator, rounds: int = 5) -> dict[str, float]:
    import xgrammar

    from tritonpkg_logits import Engine

    ids = [torch.randperm(v, generator=gen)[:K].sort().values for _ in range(b)]
    logits = torch.randn(b, v, generator=gen)
    eng = Engine(v, [0])
    for row, r in enumerate(ids):
        allow = {"type": "allow", "tokens": r.tolist(), "eos": False}
        spec = allow if case == "allow50" else {"type": "ban", "tokens": r.tolist()}
        eng.set_row(row, eng.compile(spec))
    neg = float("-inf")

    def python_rows() -> None:
        for row, r in enumerate(ids):
            x = logits[row]
            if case == "allow50":
                keep = x[r].clone()
                x.fill_(neg)
                x[r] = keep
            else:
                x[r] = neg

    procs = [V0MaskProcessor(r.tolist(), ban=case != "allow50") for r in ids]
    outputs: list[list[int]] = [[] for _ in ids]

    def v0_rows() -> None:
        for row, proc in enumerate(procs):
            logits[row] = proc(outputs[row], logits[row])

    bitmask = eng.bitmask(b)
    methods = {
        "floor": lambda: logits.fill_(neg),
        "cpp": lambda: eng.apply(logits),
        "python": python_rows,
        "v0": v0_rows,
        "xgr": lambda: xgrammar.apply_token_bitmask_inplace(logits, bitmask, vocab_size=v, backend="cpu"),
    }
    # Rounds interleave the methods, each round in another order: this machine's speed drifts within
    # seconds, and one method timed after another differed by up to 2x between runs.
    samples: dict[str, list[float]] = {k: [] for k in methods}
    names = list(methods)
    for i in range(rounds):
        for name in names[i % len(names):] + names[:i % len(names)]:
            samples[name].append(timeit(methods[name], budget_s=0.1, max_iter=30))
    return {k: statistics.median(vs) for k, vs in samples.items()}


def vllm_decode(n: int = 16, max_tokens: int = 128, rounds: int = 8) -> dict[str, float]:
    import importlib.util
    import os
    import tempfile
    from pathlib import Path

    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    # In-process engine: with the engine-core subprocess this config's worker died with SIGILL here,
    # with or without the plugin installed (vLLM CPU, not logits_ext); in-process it runs.
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    from vllm import LLM, SamplingParams

    here = Path(__file__).resolve().parent.parent / "examples" / "tiny-llm" / "make_tiny_llm.py"
    spec = importlib.util.spec_from_file_location("make_tiny_llm", here)
    if spec is None or spec.loader is None:
        raise ImportError(f"{here}: not loadable as a Python module (expected the tiny-llm example's generator)")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    model = mod.make(Path(tempfile.mkdtemp()) / "tiny")
    llm = LLM(model=str(model), enforce_eager=True, max_model_len=256, max_num_seqs=n, seed=0, block_size=32,
              dtype="bfloat16")
    prompts = [f"hello world {i}" for i in range(n)]
    constraints = [{"type": "allow", "tokens": list(range(3 + i, 53 + i))} for i in range(n)]
    params = {
        label: [SamplingParams(max_tokens=max_tokens, ignore_eos=True, temperature=1.0, extra_args=e) for e in extra]
        for label, extra in (("off", [None] * n), ("on", [{"constraint": c} for c in constraints]))
    }
    for p in params.values():
        llm.generate(prompts, p, use_tqdm=False)  # warm-up
    # Rounds alternate which setting goes first: this machine's speed drifts within a run.
    tps: dict[str, list[float]] = {"off": [], "on": []}
    for i in range(rounds):
        for label in ("off", "on") if i % 2 == 0 else ("on", "off"):
            t0 = time.perf_counter()
            outs = llm.generate(prompts, params[label], use_tqdm=False)
            tps[label].append(sum(len(o.outputs[0].token_ids) for o in outs) / (time.perf_counter() - t0))
    result = {label: statistics.median(v) for label, v in tps.items()}
    result["ratio"] = statistics.median(on / off for on, off in zip(tps["on"], tps["off"], strict=True))
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="B in {1, 32, 256} only")
    ap.add_argument("--rounds", type=int, default=5, help="interleaved rounds per cell (median of the rounds' medians)")
    ap.add_argument("--json", help="also write the results here")
    ap.add_argument("--vllm", action="store_true", help="also measure vLLM decode tokens/s, constraints on vs off")
    args = ap.parse_args()
    from rich.console import Console
    from rich.table import Table

    gen = torch.Generator().manual_seed(0)
    cells: list[tuple[str, int, int, dict[str, float]]] = []
    for case in ("allow50", "mostly"):
        for v in VOCABS:
            for b in (1, 32, 256) if args.quick else BATCHES:
                us = bench_cell(b, v, case, gen, args.rounds)
                cells.append((case, b, v, us))
                print(f"{case} B={b} V={v}: " + ", ".join(f"{k}={x:.0f}us" for k, x in us.items()), flush=True)
    table = Table(title=f"constraint masking per step, median µs ({torch.get_num_threads()} torch threads)")
    for col in ("case", "B", "V", "floor", "C++", "C++/row", "python", "V0", "xgrammar", "C++/floor", "python/C++",
                "V0/C++", "xgr/C++"):
        table.add_column(col, justify="right")
    for case, b, v, r in cells:
        table.add_row(case, str(b), str(v), f"{r['floor']:.0f}", f"{r['cpp']:.0f}", f"{r['cpp'] / b:.1f}",
                      f"{r['python']:.0f}", f"{r['v0']:.0f}", f"{r['xgr']:.0f}", f"{r['cpp'] / r['floor']:.2f}x",
                      f"{r['python'] / r['cpp']:.1f}x", f"{r['v0'] / r['cpp']:.1f}x", f"{r['xgr'] / r['cpp']:.1f}x")
    rows: list[dict[str, str | int | float]] = [{"case": case, "B": b, "V": v, **us} for case, b, v, us in cells]
    Console(width=160).print(table)
    if args.vllm:
        tps = vllm_decode()
        print(f"vLLM CPU tiny Llama, 16 concurrent x 128 tokens, 8 alternating rounds (medians): off {tps['off']:.0f} "
              f"tok/s, on {tps['on']:.0f} tok/s, on/off per round {tps['ratio']:.2f}")
        rows.append({"case": "vllm_decode_tok_s", **tps})
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
