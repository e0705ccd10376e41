"""Correctness and cost of logits_ext's device path (CPU-built packed bitmask, one device kernel).

Self-contained for a GPU machine with torch (CUDA), pybind11 and a C++ compiler but no vLLM:

    pip install --no-deps --no-build-isolation ./logits_ext
    python bench/logits_gpu_check.py [--device cuda] [--json out.json]

For B in {1, 32, 128} and V in {32000, 128256}, rows carry a mix of constraints (allow 50 ids, ban 50
ids, a token DFA and n-gram bans advanced by real output ids, unconstrained rows). The reference is the
engine's CPU in-place path on float32. Checked on the device, bit for bit (masked = -inf, the rest
untouched): float32 through `Engine.apply_any` (Triton kernel on CUDA), float32 through the torch
unpack fallback, bfloat16 through `apply_any`, and a permuted row->slot mapping with unmapped rows
(the V2 runner's layout). Timed per step, median wall time with a device sync after each step:
  floor    logits.masked_fill_(mask, -inf) with the bool mask already on the device
  apply    Engine.apply_any: bitmask built on the CPU + host->device copy + kernel
  kernel   the kernel alone, packed bitmask already on the device
Exits 1 on any mismatch. Runs on the CPU too (--device cpu), where only the bitmask paths differ
from the reference.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import torch

BATCHES = (1, 32, 128)
VOCABS = (32000, 128256)
K = 50


def build(b: int, v: int, gen: torch.Generator):
    from tritonpkg_logits import Engine

    eng = Engine(v, [v - 1])
    lists: list[list[int]] = []
    for row in range(b):
        ids = torch.randperm(v - 1, generator=gen)[:K].tolist()
        kind = row % 5
        out: list[int] = []
        if kind == 0:
            spec = {"type": "allow", "tokens": ids, "eos": row % 2 == 0}
        elif kind == 1:
            spec = {"type": "ban", "tokens": ids}
        elif kind == 2:  # chain 0 -a-> 1 -b-> 2 (accepting), state 1 also loops on 8 ids
            a, b2 = ids[0], ids[1]
            spec = {"type": "token_dfa", "start": 0, "accept": [2],
                    "transitions": [[0, a, 1], [1, b2, 2], *[[1, t, 1] for t in ids[2:10]], [2, a, 1]]}
            out = [a, *ids[2:2 + row % 3]]
        elif kind == 3:
            spec = {"type": "ngram", "banned": [[ids[0], ids[1]], [ids[2]]], "max_repeat": 2}
            out = [ids[0]] if row % 2 else [ids[3], ids[3]]
        else:
            lists.append([])
            continue  # unconstrained row
        lists.append(out)
        eng.set_row(row, eng.compile(spec), out)
    return eng


def timeit(fn, sync, iters: int) -> float:
    for _ in range(3):
        fn()
    sync()
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e6


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    a, b = a.detach().cpu().contiguous(), b.detach().cpu().contiguous()
    ints = {torch.float32: torch.int32, torch.bfloat16: torch.int16, torch.float16: torch.int16}[a.dtype]
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a.view(ints), b.view(ints))


def check_cell(b: int, v: int, device: torch.device, iters: int) -> dict:
    from tritonpkg_logits.device import apply_bitmask, triton_available

    gen = torch.Generator().manual_seed(b * 1000003 + v)
    eng = build(b, v, gen)
    logits0 = torch.randn(b, v, generator=gen)
    ref = logits0.clone()
    eng.apply(ref)  # the CPU in-place path; also brings every row's state up to date
    banned = torch.isneginf(ref) & ~torch.isneginf(logits0)
    res: dict = {"B": b, "V": v, "masked": int(banned.sum()),
                 "kernel_path": "triton" if triton_available(logits0.to(device)) else "torch"}

    x = logits0.to(device)
    eng.apply_any(x) if device.type != "cpu" else apply_bitmask(x, eng.bitmask(b), v)
    res["f32"] = same_bits(x, ref)

    x = logits0.to(device)
    apply_bitmask(x, eng.bitmask(b).to(device), v, use_triton=False)
    res["f32_torch"] = same_bits(x, ref)

    x = logits0.to(torch.bfloat16).to(device)
    eng.apply_any(x)
    res["bf16"] = same_bits(x, logits0.to(torch.bfloat16).masked_fill(banned, float("-inf")))

    perm = torch.randperm(b, generator=gen).tolist()
    slots = [s if i % 7 != 3 else -1 for i, s in enumerate(perm)]
    ref_s = logits0.clone()
    eng.apply(ref_s, slots)
    x = logits0.to(device)
    eng.apply_any(x, slots) if device.type != "cpu" else apply_bitmask(x, eng.bitmask(b, slots), v)
    res["slots"] = same_bits(x, ref_s)
    # a check that masks nothing (or everything) would pass trivially
    res["ok"] = all(res[k] for k in ("f32", "f32_torch", "bf16", "slots")) and 0 < res["masked"] < b * v

    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    x = logits0.to(device)
    mask = banned.to(device)
    packed = eng.bitmask(b).to(device)
    res["floor_us"] = timeit(lambda: x.masked_fill_(mask, float("-inf")), sync, iters)
    res["apply_us"] = timeit(lambda: eng.apply_any(x), sync, iters)
    res["kernel_us"] = timeit(lambda: apply_bitmask(x, packed, v), sync, iters)
    res["bitmask_cpu_us"] = timeit(lambda: eng.bitmask(b), lambda: None, iters)
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--iters", type=int, default=200)
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args()
    import tritonpkg_logits

    if "vllm" in sys.modules:
        print("FAIL: importing tritonpkg_logits imported vllm", file=sys.stderr)
        return 1
    device = torch.device(args.device)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(f"tritonpkg_logits from {tritonpkg_logits.__file__}; torch {torch.__version__}; device {name}")
    rows = [check_cell(b, v, device, args.iters) for v in VOCABS for b in BATCHES]
    head = ("B", "V", "path", "f32", "f32 torch", "bf16", "slots", "floor µs", "apply µs", "kernel µs",
            "cpu bitmask µs", "apply/floor", "kernel/floor")
    print("| " + " | ".join(head) + " |\n|" + "---|" * len(head))
    for r in rows:
        mark = {True: "ok", False: "MISMATCH"}
        print(f"| {r['B']} | {r['V']} | {r['kernel_path']} | {mark[r['f32']]} | {mark[r['f32_torch']]} | "
              f"{mark[r['bf16']]} | {mark[r['slots']]} | {r['floor_us']:.1f} | {r['apply_us']:.1f} | "
              f"{r['kernel_us']:.1f} | {r['bitmask_cpu_us']:.1f} | {r['apply_us'] / r['floor_us']:.2f}x | "
              f"{r['kernel_us'] / r['floor_us']:.2f}x |")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"device": name, "torch": torch.__version__, "rows": rows}, fh, indent=2)
    bad = [r for r in rows if not r["ok"]]
    print("all bit-for-bit equal to the CPU engine" if not bad else f"FAIL: {len(bad)} cell(s) differ")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
