"""CUDA-graph replay vs eager at batch 1, for the embedding engine core (tritonpkg/embedding).

Self-contained for a GPU machine with only torch: a BERT of all-MiniLM-L6-v2's shape (its config.json
below, random weights, or --weights DIR for a real checkpoint) and the core package, imported from this
checkout without the rest of tritonpkg. Prints p50/p90 per path and exits 1 unless graph replay's p50
is at least 2x lower than eager's (the issue's goal), 2 when there is no CUDA device.

    python bench/embeddings_cuda_graphs.py [--tokens 32 128] [--iters 300]

Paths, each timed from token ids on the host to pooled vectors on the host:
- eager: the engine's eager forward (ragged packing, attention per length group);
- eager-static: the bucket-padded forward that graphs capture, run eagerly (a bucket's first hit);
- graph: the same forward replayed from a captured CUDA graph (a bucket's third and later hits);
- engine-eager / engine-graph: the whole EmbeddingEngine (pool, worker thread, event-backed handle)."""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

MINILM_CONFIG = {  # sentence-transformers/all-MiniLM-L6-v2 config.json (the fields the encoder reads)
    "hidden_size": 384, "num_attention_heads": 12, "num_hidden_layers": 6, "intermediate_size": 1536,
    "hidden_act": "gelu", "layer_norm_eps": 1e-12, "max_position_embeddings": 512, "type_vocab_size": 2,
    "vocab_size": 30522,
}


def load_core() -> ModuleType:
    """tritonpkg/embedding as a standalone package `embedcore` (as the packager vendors it)."""
    folder = Path(__file__).resolve().parent.parent / "tritonpkg" / "embedding"
    spec = importlib.util.spec_from_file_location("embedcore", folder / "__init__.py",
                                                  submodule_search_locations=[str(folder)])
    if spec is None or spec.loader is None:
        raise ImportError(f"{folder / '__init__.py'}: not loadable as a Python package (expected tritonpkg/embedding)")
    module = importlib.util.module_from_spec(spec)
    sys.modules["embedcore"] = module
    spec.loader.exec_module(module)
    return module


def timed(fn: Callable[[], object], iters: int, warmup: int = 20) -> list[float]:
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(iters):
        t = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t) * 1e3)
    return out


def pct(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100)[int(q) - 1] if len(values) > 1 else values[0]


def measure(core: ModuleType, model: Any, n: int, iters: int) -> tuple[dict[str, list[float]], float]:
    """Times every path for one request of `n` tokens; also returns max |graph - eager| over the vectors."""
    graphs = importlib.import_module("embedcore.graphs")
    ids = [101] + [1000 + (i * 7) % 20000 for i in range(n - 2)] + [102]
    runner = graphs.GraphRunner(model.encode_static, graphs.BucketCache())

    def eager() -> torch.Tensor:
        return model.encode(core.pack([ids])).cpu()

    def static(graph: bool) -> torch.Tensor:
        p = core.pack([ids], pad_to=graphs.bucket_tokens(n)).to("cuda")
        return (runner.run(p) if graph else model.encode_static(p)).cpu()

    ref = eager()
    graph_out = [static(True) for _ in range(3)][-1]  # eager, capture, replay
    assert runner.cache.stats.replays >= 1, runner.cache.stats
    diff = (graph_out - ref).abs().max().item()
    paths = {"eager": timed(eager, iters), "eager-static": timed(lambda: static(False), iters),
             "graph": timed(lambda: static(True), iters)}
    for use_graphs in (False, True):
        engine = core.EmbeddingEngine(model, 512, cuda_graphs=use_graphs)
        paths["engine-" + ("graph" if use_graphs else "eager")] = timed(partial(engine.embed, [ids]), iters)
        engine.close()
    return paths, diff


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, nargs="+", default=[32, 128])
    parser.add_argument("--iters", type=int, default=300)
    parser.add_argument("--weights", help="a BERT checkpoint folder instead of random weights")
    parser.add_argument("--json", metavar="OUT", help="also write the table's figures here (as JSON)")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA device: this benchmark needs a GPU")
        return 2
    core = load_core()
    # embedcore is only a name in sys.modules (load_core), so its submodules are looked up by name
    encoder = importlib.import_module("embedcore.encoder")
    bert = encoder.PackedBert
    model = bert.from_pretrained(args.weights) if args.weights else bert.random(MINILM_CONFIG)
    model = model.cuda().eval()
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, "
          f"{'weights ' + args.weights if args.weights else 'MiniLM shape, random weights'}")
    rows: list[tuple[int, str, float | None, float | None]] = []
    ok = True
    for n in args.tokens:
        paths, diff = measure(core, model, n, args.iters)
        ratio = statistics.median(paths["eager"]) / statistics.median(paths["graph"])
        engine_ratio = statistics.median(paths["engine-eager"]) / statistics.median(paths["engine-graph"])
        ok &= ratio >= 2.0
        for name, values in paths.items():
            rows.append((n, name, statistics.median(values), pct(values, 90)))
        rows.append((n, f"eager/graph p50 = {ratio:.2f}x (engine {engine_ratio:.2f}x), max |graph-eager| = {diff:.2e}",
                     None, None))
    print(f"{'tokens':>6}  {'path':<14} {'p50 ms':>8} {'p90 ms':>8}")
    for n, name, p50, p90 in rows:
        if p50 is None:
            print(f"{n:>6}  {name}")
        else:
            print(f"{n:>6}  {name:<14} {p50:8.3f} {p90:8.3f}")
    print("PASS: graph replay p50 >= 2x lower than eager" if ok
          else "FAIL: graph replay p50 is not 2x lower than eager")
    from tritonpkg.benchmarks import results

    results.write(args.json, "bench/embeddings_cuda_graphs.py", {k: v for k, v in vars(args).items() if k != "json"},
                  {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "passed": ok,
                   "rows": [{"tokens": n, "path": name, "p50_ms": p50, "p90_ms": p90} for n, name, p50, p90 in rows]})
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
