"""Benchmark: cross-encoder reranking. The `scoring` template on a cross-encoder checkpoint (through the
gateway's gRPC path) against vLLM's own server scoring the same checkpoint (`--runner pooling`, whose
/score route runs it as a cross-encoder too) and sentence-transformers' CrossEncoder in this process (the
no-serving floor), in one run, rounds alternating which system leads.

The checkpoint is made offline: all-MiniLM-L6-v2's encoder under a BertForSequenceClassification head
with one label, the architecture and cost of cross-encoder/ms-marco-MiniLM-L-6-v2 (whose weights do not
ship offline); its classifier is random, so the scores are compared between systems, not judged.

    .venv/bin/python bench/rerank.py [--rounds 6] [--docs 5 25 50] [--tokens 512] [--settle 1.5]

Prints p50/p90 latency per request (one query and its documents), tritonpkg's ratio to each system, and
the largest score difference from the floor."""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import sys
import tempfile
from collections.abc import Awaitable, Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Protocol

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tritonpkg.benchmarks.embeddings import concurrent, free_port, minilm_weights, percentiles, process, text_of

MODEL = "xenc"
Scores = dict[str, tuple[list[float], np.ndarray]]  # by system name: per-call latencies (s), first scores


class System(Protocol):
    """One way of scoring a query against documents (Floor, Tritonpkg, VLLM)."""

    name: str

    async def score(self, query: str, docs: list[str]) -> np.ndarray: ...

    async def close(self) -> None: ...


def make_checkpoint(folder: Path) -> Path:
    import torch
    from transformers import BertForSequenceClassification

    torch.manual_seed(0)
    weights = minilm_weights()
    BertForSequenceClassification.from_pretrained(weights, num_labels=1).eval().save_pretrained(folder)
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
        shutil.copy(weights / name, folder / name)
    return folder


class Floor:
    name = "floor (in-process CrossEncoder)"

    def __init__(self, weights: Path, max_length: int) -> None:
        from sentence_transformers import CrossEncoder

        self.model = CrossEncoder(str(weights), device="cpu", max_length=max_length)

    async def score(self, query: str, docs: list[str]) -> np.ndarray:
        return self.model.predict([(query, d) for d in docs], batch_size=64)

    async def close(self) -> None:
        pass


class Tritonpkg:
    name = "tritonpkg (Triton + gateway)"

    def __init__(self, grpc_url: str, weights: Path) -> None:
        from tritonpkg.gateway import EmbeddingGateway

        self.gateway = EmbeddingGateway([grpc_url], MODEL, weights, scoring_model=MODEL,
                                        max_inflight_tokens=10_000_000)

    async def score(self, query: str, docs: list[str]) -> np.ndarray:
        return (await self.gateway.score(query, docs)).scores

    async def close(self) -> None:
        await self.gateway.close()


class VLLM:
    name = "vLLM server (pooling, /score)"

    def __init__(self, base: str) -> None:
        import httpx

        self.url = base + "/score"
        self.http = httpx.AsyncClient(timeout=600)

    async def score(self, query: str, docs: list[str]) -> np.ndarray:
        r = await self.http.post(self.url, json={"model": MODEL, "text_1": query, "text_2": docs})
        r.raise_for_status()
        return np.array([d["score"] for d in sorted(r.json()["data"], key=lambda d: d["index"])], dtype=np.float32)

    async def close(self) -> None:
        await self.http.aclose()


@contextmanager
def triton(weights: Path, work: Path, max_length: int) -> Iterator[str]:
    import yaml

    from tritonpkg.repository import package_spec
    from tritonpkg.runtime import TritonServer, ensure_runtime
    from tritonpkg.spec import load_spec

    example = Path(__file__).resolve().parent.parent / "examples" / "minilm-embeddings-template" / "scoring"
    spec = yaml.safe_load((example / "tritonpkg.yaml").read_text())
    spec.update(name=MODEL, weights=str(weights))
    spec["python"]["parameters"].update(max_length=max_length)
    (work / "spec").mkdir()
    (work / "spec" / "tritonpkg.yaml").write_text(yaml.safe_dump(spec))
    package_spec(load_spec(work / "spec"), work / "repo")
    with TritonServer(work / "repo", runtime=ensure_runtime(), startup_timeout=300) as server:
        yield server.grpc_url


@contextmanager
def vllm(weights: Path, max_length: int) -> Iterator[str]:
    port = free_port()
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(weights),
           "--runner", "pooling", "--served-model-name", MODEL, "--host", "127.0.0.1", "--port", str(port),
           "--max-model-len", str(max_length), "--enforce-eager", "--dtype", "float32"]
    with process(cmd, f"http://127.0.0.1:{port}/health", {"VLLM_CPU_KVCACHE_SPACE": "1"}):
        yield f"http://127.0.0.1:{port}"


def score_call(system: System, query: str, docs: list[str]) -> Callable[[int], Awaitable[None]]:
    """One scoring call of `system`, in the shape `concurrent` times."""

    async def call(_: int) -> None:
        await system.score(query, docs)

    return call


async def measure(systems: list[System], query: str, docs: list[str], rounds: int, settle: float) -> Scores:
    """`settle` seconds after every call: vLLM's shared-memory readers spin (sched_yield) for ~1 s after
    each message they read, holding a core that the next system measured would otherwise lose."""
    out: Scores = {}
    for s in systems:
        out[s.name] = ([], await s.score(query, docs))  # warm-up, and the scores compared below
        await asyncio.sleep(settle)
    for r in range(rounds):
        for s in (systems if r % 2 == 0 else systems[::-1]):
            _, samples = await concurrent(score_call(s, query, docs), 1, 1)
            out[s.name][0].extend(samples)
            await asyncio.sleep(settle)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--docs", type=int, nargs="+", default=[5, 25, 50])
    ap.add_argument("--tokens", type=int, default=512, help="tokens of each (query, document) pair")
    ap.add_argument("--settle", type=float, default=1.5, help="idle seconds after every call (0: back to back)")
    ap.add_argument("--json", metavar="OUT", help="also write the table's figures here (as JSON)")
    args = ap.parse_args()

    from rich.console import Console
    from rich.table import Table

    console = Console()
    query = text_of(16, 3)  # 14 words + [CLS] [SEP]
    with ExitStack() as stack, tempfile.TemporaryDirectory(prefix="bench-rerank-") as tmp:
        weights = make_checkpoint(Path(tmp) / "weights")
        console.print("starting Triton and vLLM ...")
        grpc = stack.enter_context(triton(weights, Path(tmp), args.tokens))
        base = stack.enter_context(vllm(weights, args.tokens))

        async def run() -> list[tuple[int, Scores]]:
            systems: list[System] = [Tritonpkg(grpc, weights), Floor(weights, args.tokens), VLLM(base)]
            try:
                results: list[tuple[int, Scores]] = []
                for n in args.docs:
                    docs = [text_of(args.tokens - 16 + 1, i) for i in range(n)]  # pair = query + doc - one [CLS]
                    results.append((n, await measure(systems, query, docs, args.rounds, args.settle)))
                    console.print(f"  {n} documents done")
                return results
            finally:
                for s in systems:
                    await s.close()

        results = asyncio.run(run())

    t = Table(title=f"rerank with a MiniLM-L6 cross-encoder, {args.tokens}-token pairs, float32, {args.rounds} rounds "
                    "interleaved (ratio = tritonpkg vs that system; >1 = tritonpkg faster)")
    for col in ("documents", "system", "p50 ms", "p90 ms", "ratio (p50)", "max |score - floor|"):
        t.add_column(col, justify="left" if col == "system" else "right")
    rows = []
    for n, by_system in results:
        ours = statistics.median(by_system[Tritonpkg.name][0])
        floor_scores = by_system[Floor.name][1]
        for name, (samples, scores) in by_system.items():
            p = percentiles(samples)
            ratio = "" if name == Tritonpkg.name else f"{p['p50_ms'] / (ours * 1e3):.2f}x"
            diff = "" if name == Floor.name else f"{np.abs(np.asarray(scores) - floor_scores).max():.1e}"
            t.add_row(str(n), name, f"{p['p50_ms']:.1f}", f"{p['p90_ms']:.1f}", ratio, diff)
            rows.append({"documents": n, "system": name, "p50_ms": p["p50_ms"], "p90_ms": p["p90_ms"],
                         "ratio": None if name == Tritonpkg.name else p["p50_ms"] / (ours * 1e3),
                         "max_score_diff": None if name == Floor.name
                         else float(np.abs(np.asarray(scores) - floor_scores).max())})
    console.print(t)
    from tritonpkg.benchmarks import results as results_file

    results_file.write(args.json, "bench/rerank.py", {k: v for k, v in vars(args).items() if k != "json"},
                       {"rows": rows})


if __name__ == "__main__":
    main()
