"""What one streamed token costs in each layer of the response path, at an engine's pace, against `vllm serve`.

Issue 43 asks the response path (the Python-backend stub + tritonserver) to cost at most 1.2x what `vllm serve`'s
API server costs per output token. bench/vllm_serving.py measures that with the real engine; this bench takes the
engine out of the picture and adds the floor Triton itself sets. Three servers, each fed by the same token
source, paced: one step every --step-ms for every live stream, one token per stream per step (as a real engine at
this load), so every streamed response carries one token and no send loop merges steps:

- `vllm serve`: vLLM's own OpenAI server (`/v1/completions`, stream) with its EngineCore replaced by the instant
  token source (bench/fake_engine/instant_core.py, paced by TRITONPKG_BENCH_STEP_S): its API server process does
  what it does in production (AsyncLLM's output processing and detokenization, SSE over HTTP).
- `tritonpkg`: tritonpkg's vLLM backend on the same paced source (as bench/response_ceiling.py runs it), in the
  real stub and tritonserver, HTTP `generate_stream`.
- `floor`: the same tritonserver with a Python-backend model that does next to nothing
  (bench/floor_model/model.py: one response of one word per live stream per step), HTTP `generate_stream`.
  What the stub and tritonserver cost here is what any Python-backend model pays per streamed response.

Rounds alternate the servers' order. Per server and stream level it prints tokens/s, tokens per response and CPU
µs per output token of the API server, the stub and tritonserver (tritonpkg.benchmarks.proccpu).

    .venv/bin/python bench/response_floor.py [--streams 16,64] [--tokens 400] [--step-ms 10] [--rounds 2]
        [--json bench/results/response_floor.json]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import response_ceiling as ceiling  # noqa: E402
from vllm_serving import wait_http  # noqa: E402

from tritonpkg.proc.group import own_group, stop_popen  # noqa: E402
from tritonpkg.proc.ports import free_port  # noqa: E402

MODEL = ceiling.MODEL
FLOOR = ROOT / "bench" / "floor_model" / "floor_model.py"  # served as the version folder's model.py
FLOOR_CONFIG = f"""name: "{MODEL}"
backend: "python"
max_batch_size: 0
model_transaction_policy {{ decoupled: true }}
input [
  {{ name: "text_input" data_type: TYPE_STRING dims: [ 1 ] }},
  {{ name: "stream" data_type: TYPE_BOOL dims: [ 1 ] optional: true }},
  {{ name: "sampling_parameters" data_type: TYPE_STRING dims: [ 1 ] optional: true }},
  {{ name: "return_num_output_tokens" data_type: TYPE_BOOL dims: [ 1 ] optional: true }}
]
output [
  {{ name: "text_output" data_type: TYPE_STRING dims: [ -1 ] }},
  {{ name: "num_output_tokens" data_type: TYPE_UINT32 dims: [ -1 ] }}
]
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
"""
ROLES = {"triton_python_backend_stub": "stub", "tritonserver": "tritonserver", "api_server": "API server"}


# -- the servers ------------------------------------------------------------------------------------------
@contextlib.contextmanager
def vllm_serve(weights: Path, work: Path, max_len: int) -> Iterator[tuple[str, int]]:
    """vLLM's OpenAI server on the paced instant source: its python is the overlay's, whose sitecustomize puts
    the source in place of the EngineCore client (no EngineCore process is started)."""
    port = free_port()
    cmd = [str(ceiling.overlay(work) / "python3"), "-m", "vllm.entrypoints.openai.api_server", "--model", str(weights),
           "--port", str(port), "--host", "127.0.0.1", "--served-model-name", MODEL, "--enforce-eager",
           "--dtype", "float32", "--max-model-len", str(max_len), "--max-num-seqs", "256"]
    env = {**os.environ, "TRITONPKG_BENCH_INSTANT_ENGINE": "1"}
    log = work / "vllm-serve.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, **own_group())
    try:
        try:
            wait_http(f"http://127.0.0.1:{port}/health", 600, proc)
        except RuntimeError as exc:
            raise RuntimeError(f"vllm serve: {exc}; log: {log}\n{log.read_text()[-3000:]}") from None
        from tritonpkg.benchmarks.proccpu import descendants

        if len(descendants(proc.pid)) != 1:
            raise RuntimeError(f"vllm serve started processes of its own ({descendants(proc.pid)}): no instant source?")
        yield f"http://127.0.0.1:{port}", proc.pid
    finally:
        stop_popen(proc, grace=30)


@contextlib.contextmanager
def floor_triton(work: Path) -> Iterator[tuple[str, int]]:
    from tritonpkg.runtime import TritonServer, ensure_runtime

    version = work / "floor-repo" / MODEL / "1"
    version.mkdir(parents=True)
    (version / "model.py").write_text(FLOOR.read_text())
    (version.parent / "config.pbtxt").write_text(FLOOR_CONFIG)
    with TritonServer(work / "floor-repo", runtime=ensure_runtime(), startup_timeout=120,
                      extra_args=["--http-thread-count=80"]) as srv:
        assert srv.pid is not None
        yield srv.http_url, srv.pid


@contextlib.contextmanager
def tritonpkg_triton(weights: Path, work: Path, max_len: int,
                     env: dict[str, str] | None = None) -> Iterator[tuple[str, int]]:
    with ceiling.triton(weights, work, 1, max_len, 80, env) as srv:
        yield srv.http_url, srv.pid


# -- the client -------------------------------------------------------------------------------------------
async def vllm_stream(session: Any, url: str, index: int, tokens: int) -> tuple[int, int]:
    body = {"model": MODEL, "prompt": f"{ceiling.PROMPT} {index}", "max_tokens": tokens, "temperature": 0,
            "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}}
    count = responses = 0
    async with session.post(f"{url}/v1/completions", json=body) as resp:
        resp.raise_for_status()
        async for raw in resp.content:
            line = raw.decode().strip()
            if not line.startswith("data:") or line == "data: [DONE]":
                continue
            event = json.loads(line[5:])
            if event.get("usage"):
                count = event["usage"]["completion_tokens"]
            if any(c.get("text") for c in event.get("choices", [])):
                responses += 1
    return count, responses


async def run_round(kind: str, url: str, streams: int, tokens: int) -> tuple[int, int, float]:
    """-> (output tokens, responses with tokens, wall seconds) of `streams` concurrent streams."""
    import aiohttp

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0),
                                     timeout=aiohttp.ClientTimeout(total=900)) as session:
        async def one(i: int) -> tuple[int, int]:
            if kind == "vllm serve":
                return await vllm_stream(session, url, i, tokens)
            count, responses, _ = await ceiling.http_stream(session, url, i, tokens)
            return count, responses

        await one(-1)
        start = time.monotonic()
        done = await asyncio.gather(*(one(i) for i in range(streams)))
        wall = time.monotonic() - start
    count = sum(d[0] for d in done)
    if count != streams * tokens:
        raise RuntimeError(f"{kind}: {count} tokens, expected {streams} x {tokens}")
    return count, sum(d[1] for d in done), wall


def measure(servers: dict[str, tuple[str, int]], levels: list[int], tokens: int,
            rounds: int) -> list[dict[str, Any]]:
    from tritonpkg.benchmarks.proccpu import CpuMeter

    rows: list[dict[str, Any]] = []
    kinds = list(servers)
    for streams in levels:
        totals: dict[str, list[float]] = {k: [0, 0, 0.0] for k in kinds}
        meters = {k: CpuMeter([servers[k][1]], {}, ROLES) for k in kinds}
        for r in range(rounds):
            for kind in kinds if r % 2 == 0 else kinds[::-1]:
                meters[kind].start()
                count, responses, wall = asyncio.run(run_round(kind, servers[kind][0], streams, tokens))
                meters[kind].stop()
                totals[kind] = [totals[kind][0] + count, totals[kind][1] + responses, totals[kind][2] + wall]
        for kind in kinds:
            count, responses, wall = (int(totals[kind][0]), int(totals[kind][1]), totals[kind][2])
            cpu = {role: s * 1e6 for role, s in meters[kind].per_unit(count)}
            rows.append({"server": kind, "streams": streams, "tok_s": count / wall,
                         "tokens_per_response": count / max(1, responses),
                         "cpu_us_per_token": {k: round(v, 1) for k, v in cpu.items()}})
            print(f"  {kind:10} {streams:3} streams: {count / wall:6.0f} tok/s, "
                  f"{count / max(1, responses):.2f} tokens/response, CPU µs/token "
                  + ", ".join(f"{k} {v:.0f}" for k, v in cpu.items()), flush=True)
        api = next((r["cpu_us_per_token"].get("API server") for r in rows[-len(kinds):]
                    if r["server"] == "vllm serve"), None)
        for row in rows[-len(kinds):]:
            path = row["cpu_us_per_token"].get("stub", 0.0) + row["cpu_us_per_token"].get("tritonserver", 0.0)
            if api and path:
                print(f"  {row['server']:10} {streams:3} streams: stub + tritonserver {path:.0f} µs/token, "
                      f"{path / api:.2f}x the API server (issue 43's bar: 1.2x)", flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--streams", default="16,64", help="concurrent streams, a comma-separated list")
    parser.add_argument("--tokens", type=int, default=400, help="output tokens per stream")
    parser.add_argument("--step-ms", type=float, default=10.0, help="the token source's step period")
    parser.add_argument("--rounds", type=int, default=2, help="rounds per server and level (alternating order)")
    parser.add_argument("--servers", default="vllm serve,tritonpkg,floor", help="which servers, comma-separated")
    parser.add_argument("--against-env", metavar="KEY=VALUE",
                        help="add `tritonpkg-b`: tritonpkg's server with KEY=VALUE in its environment "
                             "(e.g. TRITONPKG_VLLM_STEP_POLL_EVERY=1)")
    parser.add_argument("--json", metavar="OUT", help="also write the figures here (as JSON)")
    args = parser.parse_args()
    if args.against_env and "=" not in args.against_env:
        parser.error("--against-env: expected KEY=VALUE")
    levels = [int(x) for x in args.streams.split(",")]
    chosen = [s.strip() for s in args.servers.split(",")]
    os.environ["TRITONPKG_BENCH_STEP_S"] = str(args.step_ms / 1e3)  # read by the instant source and the floor model
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    max_len = 64 + args.tokens
    with tempfile.TemporaryDirectory(prefix="bench-floor-") as tmp, contextlib.ExitStack() as stack:
        work = Path(tmp)
        weights = work / "weights"
        subprocess.run([sys.executable, str(ceiling.TINY / "make_tiny_llm.py"), "--out", str(weights),
                        "--context", str(max_len)], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        starts = {"vllm serve": lambda: vllm_serve(weights, work, max_len),
                  "tritonpkg": lambda: tritonpkg_triton(weights, work / "tritonpkg", max_len),
                  "floor": lambda: floor_triton(work)}
        if args.against_env:
            key, value = args.against_env.split("=", 1)
            chosen.append("tritonpkg-b")
            starts["tritonpkg-b"] = lambda: tritonpkg_triton(weights, work / "tritonpkg-b", max_len, {key: value})
        servers = {name: stack.enter_context(starts[name]()) for name in chosen}
        rows = measure(servers, levels, args.tokens, args.rounds)
    from tritonpkg.benchmarks import results

    results.write(args.json, "bench/response_floor.py", {k: v for k, v in vars(args).items() if k != "json"},
                  {"rows": rows})


if __name__ == "__main__":
    main()
