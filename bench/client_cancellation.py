"""Tokens a client that leaves still costs: tritonpkg (frontend -> Triton -> vLLM backend) vs `vllm serve`.

Each round opens STREAMS streamed /v1/completions at once (greedy, ignore_eos, --max-tokens each), reads
two SSE chunks from each, and hangs up. Once both engines are idle again, the tokens vLLM generated in the
round come from vLLM's own counter, `vllm:generation_tokens_total` (Triton's backend: the multiprocess
files under PROMETHEUS_MULTIPROC_DIR; `vllm serve`: its /metrics). Tokens after the disconnect = generated
- tokens the client received (the read chunks' logprobs tokens), per stream. Goal (issue 25): at most 2 engine steps
(2 tokens) per stream, and no worse than `vllm serve` in the same run. Both servers are up together on the
same weights and engine arguments; rounds alternate which goes first.

    .venv/bin/python bench/client_cancellation.py [--rounds 6] [--streams 4] [--max-tokens 240]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from openai_frontend import frontend_process  # noqa: E402
from vllm_serving import TINY, package_tiny_llm, vllm_server  # noqa: E402

CHUNKS_READ = 2
METRIC = "vllm:generation_tokens_total"
RUNNING = "vllm:num_requests_running"


def multiproc_sample(folder: Path, name: str) -> float:
    from prometheus_client import CollectorRegistry
    from prometheus_client.multiprocess import MultiProcessCollector

    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=str(folder))
    return sum(s.value for m in registry.collect() for s in m.samples if s.name == name)


def http_sample(url: str, name: str) -> float:
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith((name + "{", name + " ")))


async def hang_up(url: str, max_tokens: int) -> int:
    """One stream, left after CHUNKS_READ chunks; returns the tokens those chunks held (their logprobs'
    tokens: what the client received, however the server grouped them)."""
    import httpx

    body = {"model": "tiny_llm", "prompt": "hi", "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True,
            "stream": True, "logprobs": 0}
    chunks = tokens = 0
    async with httpx.AsyncClient(timeout=60) as client, client.stream("POST", f"{url}/v1/completions",
                                                                      json=body) as response:
        response.raise_for_status()
        async for line in response.aiter_lines():
            if line.startswith("data:") and line != "data: [DONE]":
                choice = json.loads(line[5:])["choices"][0]
                tokens += len((choice.get("logprobs") or {}).get("tokens") or [])
                chunks += 1
                if chunks == CHUNKS_READ:
                    break  # leaving the block closes the connection
    return tokens


def one_round(url: str, sample, streams: int, max_tokens: int) -> list[float]:
    """Tokens generated after the disconnect, per stream (the round's total spread evenly)."""
    before = sample(METRIC)

    async def all_streams() -> list[int]:
        return list(await asyncio.gather(*(hang_up(url, max_tokens) for _ in range(streams))))

    read = asyncio.run(all_streams())
    deadline = time.monotonic() + 30
    while sample(RUNNING) and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.3)  # the last step's counter update
    generated = sample(METRIC) - before
    return [(generated - sum(read)) / streams] * streams


@contextlib.contextmanager
def tritonpkg_stack(weights: Path, work: Path, metrics: Path, cancel_poll: float | None = None):
    from tritonpkg.runtime import TritonServer, ensure_runtime

    repo = package_tiny_llm(weights, work)
    env = {"PROMETHEUS_MULTIPROC_DIR": str(metrics),
           **({"TRITONPKG_VLLM_CANCEL_POLL": str(cancel_poll)} if cancel_poll is not None else {})}
    with TritonServer(repo, runtime=ensure_runtime(), startup_timeout=600, env=env) as server, \
            frontend_process(server.grpc_url, repo, server.admin_key) as (url, _pid):
        yield url


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=6, help="rounds per server (alternating which goes first)")
    parser.add_argument("--streams", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=240)
    parser.add_argument("--cancel-poll", type=float, default=None,
                        help="the backend's cancel-watch interval in s (TRITONPKG_VLLM_CANCEL_POLL; default: its own)")
    parser.add_argument("--json", metavar="OUT", help="also write the table's figures here (as JSON)")
    args = parser.parse_args()
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    from rich.console import Console
    from rich.table import Table

    results: dict[str, list[float]] = {"tritonpkg": [], "vllm serve": []}
    with tempfile.TemporaryDirectory(prefix="bench-cancel-") as tmp:
        work = Path(tmp)
        weights, metrics = work / "weights", work / "metrics"
        metrics.mkdir()
        subprocess.run([sys.executable, str(TINY / "make_tiny_llm.py"), "--out", str(weights)], check=True,
                       stdout=subprocess.DEVNULL)
        with (tritonpkg_stack(weights, work, metrics, args.cancel_poll) as frontend,
              vllm_server(weights) as (vllm, _pid)):
            servers = {"tritonpkg": (frontend, lambda name: multiproc_sample(metrics, name)),
                       "vllm serve": (vllm, lambda name: http_sample(vllm, name))}
            kinds = list(servers)
            for url, sample in servers.values():  # warm-up: the first requests compile and allocate
                one_round(url, sample, args.streams, args.max_tokens)
            for r in range(args.rounds):
                for kind in kinds if r % 2 == 0 else kinds[::-1]:
                    url, sample = servers[kind]
                    after = one_round(url, sample, args.streams, args.max_tokens)
                    results[kind] += after
                    print(f"  round {r} {kind}: {after[0]:.1f} tokens/stream after the disconnect", flush=True)

    table = Table(title=f"{args.streams} streams x {args.max_tokens} tokens, each left after {CHUNKS_READ} chunks, "
                        f"{args.rounds} rounds per server: tokens generated after the disconnect, per stream "
                        "(vLLM's generation_tokens_total; goal <= 2 engine steps and <= vllm serve)")
    for col in ("server", "median", "mean", "min", "max", f"median of the {args.max_tokens - CHUNKS_READ} left"):
        table.add_column(col, justify="right")
    for kind, values in results.items():
        per_round = values[::args.streams]
        table.add_row(kind, f"{statistics.median(per_round):.1f}", f"{statistics.mean(per_round):.2f}",
                      f"{min(per_round):.1f}", f"{max(per_round):.1f}",
                      f"{statistics.median(per_round) / (args.max_tokens - CHUNKS_READ):.0%}")
    Console(width=140).print(table)
    from tritonpkg.benchmarks import results as results_file

    results_file.write(args.json, "bench/client_cancellation.py", {k: v for k, v in vars(args).items() if k != "json"},
                       {kind: {"median": statistics.median(per_round), "mean": statistics.mean(per_round),
                               "min": min(per_round), "max": max(per_round), "rounds": per_round}
                        for kind, values in results.items() for per_round in [values[::args.streams]]})


if __name__ == "__main__":
    main()
