"""Latency the OpenAI frontend adds over calling Triton's gRPC directly (tiny LLM, non-streaming).

One Triton (tiny_llm) and one `tritonpkg frontend` process in front of it. The same prompt with the
same greedy sampling parameters goes (a) straight to Triton over gRPC the standard way
(tritonclient.grpc.aio stream_infer, one stream per request: the model is decoupled; the baseline),
(b) through the frontend's own Triton client in this process (its pool of open streams: the gRPC share
of the frontend's cost) and (c) to the frontend's /v1/completions over HTTP (aiohttp, keep-alive; httpx,
                                                                             which the openai
client uses, costs about 0.9 ms more per request here, a client cost, not the frontend's), at
1 and 8 concurrent requests. The paths run in rounds, each path leading in turn, so that drift on this
shared machine (and the slower Triton seen right after a burst of requests) hits all alike; latency is
per request.

    .venv/bin/python bench/openai_frontend.py [--requests 400] [--rounds 20] [--max-tokens 4]
        [--triton-grpc HOST:PORT --repo REPO]   # use a Triton already serving tiny_llm

Prints a rich table with the added milliseconds at p50 and p99, the p50's 95% interval over the rounds and
whether the goal (<= 2 ms added at p50) is met, missed or, when the interval straddles it, unsure. A second
table shows the CPU each path took per request at 8 concurrent requests, by process (Triton's only when
this bench started it): on a 2-core machine shared by everything, CPU per request is what latency at
concurrency is made of.
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
import urllib.request
from pathlib import Path

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tritonpkg.proc.group import own_group, stop_popen  # noqa: E402

TINY = ROOT / "examples" / "tiny-llm"
MODEL = "tiny_llm"
PROMPT = "the model serves tokens quickly over grpc"
LEVELS = (1, 8)
GOAL_MS = 2.0
ROLES = {"VLLM::EngineCore": "vLLM EngineCore", "VLLM::Worker": "vLLM worker",
         "triton_python_backend_stub": "Python-backend stub (vLLM)", "tritonserver": "tritonserver",
         "tritonpkg frontend": "OpenAI frontend"}
BASELINE = "Triton gRPC, tritonclient stream_infer"
SHARED = "Triton gRPC, the frontend's stream pool"
FRONTEND = "OpenAI frontend /v1/completions (HTTP, aiohttp)"


def build_repo(root: Path) -> Path:
    from tritonpkg.repository import package_spec
    from tritonpkg.spec import load_spec

    weights = root / "weights"
    subprocess.run([sys.executable, str(TINY / "make_tiny_llm.py"), "--out", str(weights)], check=True)
    spec = yaml.safe_load((TINY / "tritonpkg.yaml").read_text())
    spec["weights"] = str(weights)
    spec["engine_args"].update(max_num_seqs=8, max_num_batched_tokens=512)
    (root / "spec").mkdir()
    (root / "spec" / "tritonpkg.yaml").write_text(yaml.safe_dump(spec))
    repo = root / "repository"
    package_spec(load_spec(root / "spec"), repo)
    return repo


@contextlib.contextmanager
def frontend_process(grpc_url: str, repo: Path, admin_key: str | None = None):
    """`tritonpkg frontend` in its own process (its own GIL, as deployed), on a free port; `admin_key`
    (else TRITONPKG_ADMIN_KEY) is Triton's, which listing the models needs."""
    from tritonpkg.proc.ports import free_port

    port = free_port()
    env = {**os.environ, **({"TRITONPKG_ADMIN_KEY": admin_key} if admin_key else {})}
    proc = subprocess.Popen([sys.executable, "-m", "tritonpkg", "frontend", "--triton-grpc", grpc_url,
                             "--port", str(port), "--model-repository", str(repo), "--json"],
                            stdout=subprocess.DEVNULL, env=env, **own_group())
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            with contextlib.suppress(OSError), urllib.request.urlopen(url + "/health/ready", timeout=5) as resp:
                if resp.status == 200:
                    break
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"the frontend did not start (exit code {proc.poll()})")
            time.sleep(0.2)
        yield url, proc.pid
    finally:
        stop_popen(proc, grace=20)


def grpc_caller(client, max_tokens: int):
    """The standard way to call a decoupled model with tritonclient.grpc.aio: one stream per request."""
    from tritonclient.grpc import InferInput

    params = json.dumps({"max_tokens": max_tokens, "temperature": 0, "ignore_eos": True})

    def tensor(name: str, value) -> InferInput:
        t = InferInput(name, [1], "BOOL" if isinstance(value, bool) else "BYTES")
        t.set_data_from_numpy(np.array([value if isinstance(value, bool) else value.encode()],
                                       dtype=bool if isinstance(value, bool) else np.object_))
        return t

    async def call() -> None:
        tensors = [tensor("text_input", PROMPT), tensor("stream", False), tensor("sampling_parameters", params),
                   tensor("exclude_input_in_output", True), tensor("return_finish_reason", True),
                   tensor("return_num_input_tokens", True), tensor("return_num_output_tokens", True)]

        async def one():
            yield {"model_name": MODEL, "inputs": tensors}

        async for result, error in client.stream_infer(one()):
            if error is not None:
                raise RuntimeError(error)
            result.as_numpy("text_output")

    return call


def shared_stream_caller(backend, max_tokens: int):
    """The frontend's own Triton client (its stream pool), called in-process: its share of the cost."""
    from tritonpkg.frontend.triton import RETURN_FLAGS

    params = {"max_tokens": max_tokens, "temperature": 0, "ignore_eos": True}

    async def call() -> None:
        async for output in backend.generate(MODEL, PROMPT, params, False, frozenset(RETURN_FLAGS[:3])):
            assert output.completion_tokens == [max_tokens]

    return call


def http_caller(session, url: str, max_tokens: int):
    body = {"model": MODEL, "prompt": PROMPT, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True}

    async def call() -> None:
        async with session.post(f"{url}/v1/completions", json=body) as resp:
            resp.raise_for_status()
            assert (await resp.json())["usage"]["completion_tokens"] == max_tokens

    return call


async def run_level(call, concurrency: int, requests: int) -> list[float]:
    latencies: list[float] = []
    queue = iter(range(requests))

    async def worker() -> None:
        for _ in queue:
            start = time.perf_counter()
            await call()
            latencies.append(time.perf_counter() - start)

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return latencies


async def measure(grpc_url: str, frontend_url: str, pids: list[int], args):
    import aiohttp
    import tritonclient.grpc.aio as grpcaio

    from tritonpkg.benchmarks.proccpu import CpuMeter
    from tritonpkg.frontend.triton import TritonBackend

    client = grpcaio.InferenceServerClient(grpc_url)
    backend = TritonBackend(grpc_url, timeout_s=120)
    connector = aiohttp.TCPConnector(limit=max(LEVELS))
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=120)) as session:
        paths = {BASELINE: grpc_caller(client, args.max_tokens),
                 SHARED: shared_stream_caller(backend, args.max_tokens),
                 FRONTEND: http_caller(session, frontend_url, args.max_tokens)}
        for call in paths.values():  # warm-up: connections, first-request paths in vLLM
            await run_level(call, max(LEVELS), max(LEVELS) * 2)
        samples: dict[tuple[int, str], list[list[float]]] = {}  # per round
        meters = {(level, name): CpuMeter(pids, {"client (this bench)": os.getpid()}, ROLES)
                  for level in LEVELS for name in paths}
        per_round = max(1, args.requests // args.rounds)
        names = list(paths)
        for r in range(args.rounds):
            # each path leads in turn: no path always follows a burst
            order = names[r % len(names):] + names[:r % len(names)]
            for level in LEVELS:
                for name in order:
                    meters[(level, name)].start()
                    samples.setdefault((level, name), []).append(await run_level(paths[name], level, per_round))
                    meters[(level, name)].stop()
    await client.close()
    await backend.close()
    return samples, meters


def report(samples: dict[tuple[int, str], list[list[float]]], meters: dict) -> dict:
    """Print the tables; -> their figures (for --json)."""
    from rich.console import Console
    from rich.table import Table

    from tritonpkg.benchmarks.shift import percentile_shift

    table = Table("concurrency", "path", "requests", "p50 ms", "p99 ms", "added p50 ms", "95% interval",
                  "goal", "added p99 ms",
                  title=f"OpenAI frontend vs Triton gRPC, tiny_llm non-streaming (goal: added p50 <= {GOAL_MS:g} ms)",
                  header_style="bold")
    colour = {"met": "green", "missed": "red", "unsure": "yellow"}
    figures: dict = {"levels": [], "cpu_ms_per_request": {}}
    for level in LEVELS:
        base_rounds = [[t * 1000 for t in r] for r in samples[(level, BASELINE)]]
        base = np.concatenate(base_rounds)
        b50, b99 = float(np.percentile(base, 50)), float(np.percentile(base, 99))
        table.add_row(str(level), f"{BASELINE} (baseline)", str(base.size), f"{b50:.2f}", f"{b99:.2f}", "", "", "", "")
        paths: dict[str, dict[str, object]] = {BASELINE: {"requests": int(base.size), "p50_ms": b50, "p99_ms": b99}}
        figures["levels"].append({"concurrency": level, "paths": paths})
        for name in (SHARED, FRONTEND):
            rounds = [[t * 1000 for t in r] for r in samples[(level, name)]]
            times = np.concatenate(rounds)
            shift = percentile_shift(base_rounds, rounds)
            verdict = shift.verdict(GOAL_MS)
            table.add_row("", name, str(times.size), f"{np.percentile(times, 50):.2f}",
                          f"{np.percentile(times, 99):.2f}",
                          f"{shift.value:+.2f}", f"{shift.low:+.2f} .. {shift.high:+.2f}",
                          f"[{colour[verdict]}]{verdict}[/]", f"{np.percentile(times, 99) - b99:+.2f}")
            paths[name] = {"requests": int(times.size), "p50_ms": float(np.percentile(times, 50)),
                           "p99_ms": float(np.percentile(times, 99)), "added_p50_ms": shift.value,
                           "interval": [shift.low, shift.high], "goal": verdict,
                           "added_p99_ms": float(np.percentile(times, 99)) - b99}
    Console(width=160).print(table)
    Console(width=160).print("95% interval: bootstrap over the alternating rounds (tritonpkg.benchmarks.shift); "
                             "the goal is met or missed when the whole interval is, else unsure.")
    level = max(LEVELS)
    cpu = Table("path", "process", "CPU ms / request", header_style="bold",
                title=f"CPU per request at {level} concurrent requests, by process "
                      f"({os.cpu_count()} cores shared by all)")
    for name in (BASELINE, SHARED, FRONTEND):
        rows = meters[(level, name)].per_unit(sum(map(len, samples[(level, name)])))
        for role, seconds in rows:
            if seconds * 1000 >= 0.01:
                cpu.add_row(name, role, f"{seconds * 1000:.2f}")
        cpu.add_row(name, "[bold]all[/]", f"[bold]{sum(s for _, s in rows) * 1000:.2f}[/]", end_section=True)
        figures["cpu_ms_per_request"][name] = {"by_process": {role: s * 1000 for role, s in rows},
                                               "all": sum(s for _, s in rows) * 1000}
    Console(width=140).print(cpu)
    return {"concurrency_of_cpu": level, **figures}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=400, help="requests per path and concurrency level")
    parser.add_argument("--rounds", type=int, default=20,
                        help="alternating rounds the requests are split into (each path leads in turn)")
    parser.add_argument("--max-tokens", type=int, default=4)
    parser.add_argument("--triton-grpc", help="a running Triton serving tiny_llm (else one is started)")
    parser.add_argument("--repo", type=Path, help="that Triton's model repository (with --triton-grpc)")
    parser.add_argument("--json", metavar="OUT", help="also write the table's figures here (as JSON)")
    args = parser.parse_args()

    with contextlib.ExitStack() as stack:
        if args.triton_grpc:
            grpc_url, repo = args.triton_grpc, args.repo
        else:
            from tritonpkg.runtime import TritonServer, ensure_runtime

            os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
            repo = build_repo(Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-openai-"))))
            print("starting Triton (a vLLM engine takes about a minute on a CPU) ...", flush=True)
            triton = stack.enter_context(TritonServer(repo, runtime=ensure_runtime(), startup_timeout=600))
            grpc_url = triton.grpc_url
        key = None if args.triton_grpc else triton.admin_key
        frontend_url, frontend_pid = stack.enter_context(frontend_process(grpc_url, repo, key))
        pids = [frontend_pid] + ([triton.pid] if not args.triton_grpc else [])
        samples, meters = asyncio.run(measure(grpc_url, frontend_url, pids, args))
    from tritonpkg.benchmarks import results

    results.write(args.json, "bench/openai_frontend.py",
                  {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items() if k != "json"},
                  report(samples, meters))


if __name__ == "__main__":
    main()
