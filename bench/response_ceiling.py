"""The response path's ceiling: the most output tokens/s one model instance delivers when vLLM's engine is instant.

vLLM's EngineCore (scheduler + model) is replaced by an instant token source (bench/fake_engine/instant_core.py):
vLLM's own `AsyncLLM` still runs in the Triton stub (renderer, output processor with its incremental
detokenizer, `generate()`), and its engine-core client answers every step at once with one token for each
request whose previous output was taken. Everything after that is the product as served: tritonpkg's vLLM
backend in the real Python-backend stub, the real tritonserver (`tritonpkg.runtime.TritonServer`, as
bench/vllm_serving.py starts it) and real clients: NVIDIA's `tritonclient` gRPC streaming client (default) or
aiohttp on HTTP `/v2/models/<m>/generate_stream`, N concurrent streams of a few thousand tokens each, spread
over one or more client processes. The fake goes in without touching the product: the stub's interpreter is
isolated (it ignores PYTHONPATH), so the server's PATH starts with a virtualenv-shaped folder (`overlay`) whose
site-packages puts bench/fake_engine/ first on sys.path; its sitecustomize.py patches vLLM's engine-core client
factory when the backend imports vLLM (only with TRITONPKG_BENCH_INSTANT_ENGINE=1). The bench checks that the
stub started no EngineCore process.

    .venv/bin/python bench/response_ceiling.py [--streams 16,64] [--tokens 2000] [--instances 1,2]
        [--client-procs 1,2] [--protocol grpc|http] [--rounds 2] [--json bench/results/response_ceiling.json]

For every instance count (config.pbtxt's instance_group count, one Triton each), stream level and number of
client processes it prints output tokens/s delivered to the clients, responses/s (tokens per response > 1: the
backend's send loop merged steps that queued behind a send, stream_merge.py), TTFT p50, and per process the CPU
it used per output token and how many cores it kept busy (CPU seconds / wall seconds; tritonpkg.benchmarks.proccpu
reads /proc). The process that saturates first is the one near 1.0 core (the stub is GIL-bound; the client is
one asyncio loop); on this 2-core machine the machine itself may be full before any one process is.
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
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

FAKE = ROOT / "bench" / "fake_engine"
TINY = ROOT / "examples" / "tiny-llm"
MODEL = "tiny_llm"
ENGINE: dict[str, Any] = {"enforce_eager": True, "dtype": "float32", "max_num_seqs": 256,
                          "max_num_batched_tokens": 8192, "disable_log_stats": False}
PROMPT = "the model serves tokens quickly over grpc and http while the engine batches requests"


# -- the client processes --------------------------------------------------------------------------------
def sampling(tokens: int) -> str:
    return json.dumps({"max_tokens": tokens, "temperature": 0, "ignore_eos": True})


async def grpc_stream(client: Any, index: int, tokens: int) -> tuple[int, int, float]:
    """One request on its own gRPC stream -> (output tokens, responses with tokens, TTFT seconds)."""
    import numpy as np
    import tritonclient.grpc.aio as grpcclient

    def tensor(name: str, dtype: str, value: Any) -> Any:
        t = grpcclient.InferInput(name, [1], dtype)
        t.set_data_from_numpy(np.asarray([value], dtype=np.object_ if dtype == "BYTES" else np.bool_))
        return t

    inputs = [tensor("text_input", "BYTES", f"{PROMPT} {index}".encode()), tensor("stream", "BOOL", True),
              tensor("sampling_parameters", "BYTES", sampling(tokens).encode()),
              tensor("return_num_output_tokens", "BOOL", True)]

    async def requests() -> Any:
        yield {"model_name": MODEL, "inputs": inputs, "request_id": f"s{index}", "enable_empty_final_response": True}

    start = time.monotonic()
    ttft = 0.0
    count = responses = 0
    stream = client.stream_infer(requests())
    async for result, error in stream:
        if error is not None:
            raise RuntimeError(f"stream {index}: {error}")
        response = result.get_response()
        if response.outputs:
            n = int(result.as_numpy("num_output_tokens").sum())
            result.as_numpy("text_output")  # a client reads the text it was sent
            if not count:
                ttft = time.monotonic() - start
            count, responses = count + n, responses + 1
        final = response.parameters.get("triton_final_response")
        if final is not None and final.bool_param:
            break
    stream.cancel()
    return count, responses, ttft


async def http_stream(session: Any, url: str, index: int, tokens: int) -> tuple[int, int, float]:
    body = {"text_input": f"{PROMPT} {index}", "stream": True, "return_num_output_tokens": True,
            "sampling_parameters": sampling(tokens)}
    start = time.monotonic()
    ttft = 0.0
    count = responses = 0
    async with session.post(f"{url}/v2/models/{MODEL}/generate_stream", json=body) as resp:
        resp.raise_for_status()
        async for raw in resp.content:
            line = raw.decode().strip()
            if not line.startswith("data:"):
                continue
            event = json.loads(line[5:])
            if "error" in event:
                raise RuntimeError(f"stream {index}: {event['error']}")
            n = event.get("num_output_tokens", 0)
            n = sum(n) if isinstance(n, list) else n
            if n:
                if not count:
                    ttft = time.monotonic() - start
                count, responses = count + n, responses + 1
    return count, responses, ttft


async def client_run(protocol: str, url: str, first: int, streams: int, tokens: int) -> dict[str, Any]:
    """`streams` concurrent requests from this process, started together once 'go' arrives on stdin; the
    result holds this process's own CPU seconds (all its threads, gRPC's included) while they ran."""
    import aiohttp
    import tritonclient.grpc.aio as grpcclient

    async def go() -> tuple[float, float]:
        print("ready", flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
        return time.monotonic(), time.process_time()

    if protocol == "grpc":
        client = grpcclient.InferenceServerClient(url)
        await grpc_stream(client, -1, 4)  # the channel is up before the clock starts
        start, cpu = await go()
        done = await asyncio.gather(*(grpc_stream(client, first + i, tokens) for i in range(streams)))
        end, cpu = time.monotonic(), time.process_time() - cpu
        await client.close()
    else:
        connector = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=900)) as session:
            await http_stream(session, url, -1, 4)
            start, cpu = await go()
            done = await asyncio.gather(*(http_stream(session, url, first + i, tokens) for i in range(streams)))
            end, cpu = time.monotonic(), time.process_time() - cpu
    return {"start": start, "end": end, "cpu_s": cpu, "tokens": sum(d[0] for d in done),
            "responses": sum(d[1] for d in done), "ttfts": [d[2] for d in done]}


def client_main(args: argparse.Namespace) -> None:
    result = asyncio.run(client_run(args.protocol, args.url, args.first, args.client_streams, args.tokens))
    print("result " + json.dumps(result), flush=True)


async def alone_run(weights: str, max_len: int, streams: int, tokens: int) -> dict[str, Any]:
    """vLLM's AsyncLLM on the instant token source with nothing after it: `streams` generate() loops in this
    process that only count what they get. What the stub's engine side costs per token, without Triton."""
    from vllm import SamplingParams
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.sampling_params import RequestOutputKind
    from vllm.v1.engine.async_llm import AsyncLLM

    llm = AsyncLLM.from_engine_args(AsyncEngineArgs(model=weights, **ENGINE, max_model_len=max_len))
    params = SamplingParams(max_tokens=tokens, temperature=0, ignore_eos=True, output_kind=RequestOutputKind.DELTA)

    async def one(index: int) -> tuple[int, int]:
        prompt: Any = {"prompt": f"{PROMPT} {index}"}
        (engine_input,) = await llm.renderer.render_cmpl_async([prompt])
        count = outputs = 0
        async for output in llm.generate(engine_input, params, f"r{index}"):
            count, outputs = count + len(output.outputs[0].token_ids), outputs + 1
        return count, outputs

    await one(-1)
    start, cpu = time.monotonic(), time.process_time()
    done = await asyncio.gather(*(one(i) for i in range(streams)))
    wall, cpu = time.monotonic() - start, time.process_time() - cpu
    llm.shutdown()
    llm.shutdown = lambda *a, **k: None  # type: ignore[method-assign]  # as engine_host.py does
    count = sum(d[0] for d in done)
    if count != streams * tokens:
        raise RuntimeError(f"{count} tokens, expected {streams} x {tokens}")
    return {"streams": streams, "tok_s": count / wall, "tokens_per_output": count / sum(d[1] for d in done),
            "cores_busy": cpu / wall, "cpu_us_per_token": cpu / count * 1e6}


def alone(weights: Path, max_len: int, streams: int, tokens: int, work: Path) -> dict[str, Any]:
    """alone_run in a fresh interpreter whose site-packages are the stub's (the overlay: the same fake)."""
    python = overlay(work) / "python3"
    env = {**os.environ, "TRITONPKG_BENCH_INSTANT_ENGINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1"}
    out = subprocess.run([str(python), __file__, "--alone", str(weights), "--max-len", str(max_len), "--tokens",
                          str(tokens), "--client-streams", str(streams)], env=env, capture_output=True, text=True,
                         timeout=600, check=False)
    found = [x for x in out.stdout.splitlines() if x.startswith("result ")]
    if out.returncode != 0 or not found:
        raise RuntimeError(f"AsyncLLM alone exited {out.returncode}: {out.stderr[-3000:]}")
    return dict(json.loads(found[-1][7:]))


# -- the server -------------------------------------------------------------------------------------------
def package(weights: Path, work: Path, instances: int, max_len: int) -> Path:
    """examples/tiny-llm on `weights`, the engine settings above, `instances` model instances."""
    from tritonpkg.repository import package_spec
    from tritonpkg.repository.config import parse_pbtxt, to_pbtxt
    from tritonpkg.spec import load_spec

    spec = yaml.safe_load((TINY / "tritonpkg.yaml").read_text())
    spec["weights"] = str(weights)
    spec["engine_args"] = {**ENGINE, "max_model_len": max_len}
    (work / "spec").mkdir(parents=True)
    (work / "spec" / "tritonpkg.yaml").write_text(yaml.safe_dump(spec))
    package_spec(load_spec(work / "spec"), work / "repo")
    pbtxt = work / "repo" / MODEL / "config.pbtxt"
    config = parse_pbtxt(pbtxt.read_text())
    config.instance_group[0].count = instances  # the vllm kind's spec has no instance_count: set it here
    pbtxt.write_text(to_pbtxt(config))
    return work / "repo"


def overlay(work: Path) -> Path:
    """A virtualenv-shaped folder whose `bin/python3` the stub finds first on PATH. The stub's interpreter is
    isolated (PYTHONPATH is ignored, tritonpkg/runtime/environment.py) but takes sys.prefix, so its
    site-packages, from that python3; there one .pth file puts bench/fake_engine/ first on sys.path (so `site`
    imports its sitecustomize.py) and adds this virtualenv's site-packages with their own .pth files."""
    import sysconfig

    env = work / "stub-env"
    if (env / "bin").exists():
        return env / "bin"
    (env / "bin").mkdir(parents=True)
    (env / "bin" / "python3").symlink_to(Path(sys.executable).resolve())
    (env / "pyvenv.cfg").write_text((Path(sys.prefix) / "pyvenv.cfg").read_text())
    site = env / Path(sysconfig.get_path("purelib")).relative_to(sys.prefix)
    site.mkdir(parents=True)
    venv = sysconfig.get_path("purelib")
    (site / "instant_engine.pth").write_text(
        f"import sys; sys.path.insert(0, {str(FAKE)!r}); import site; site.addsitedir({venv!r})\n")
    return env / "bin"


@contextlib.contextmanager
def triton(weights: Path, work: Path, instances: int, max_len: int, streams: int,
           extra_env: dict[str, str] | None = None) -> Iterator[Any]:
    from tritonpkg.runtime import TritonServer, ensure_runtime
    from tritonpkg.runtime.environment import server_environment

    rt = ensure_runtime()
    env = {"TRITONPKG_BENCH_INSTANT_ENGINE": "1",
           "PATH": os.pathsep.join([str(overlay(work)), server_environment(rt)["PATH"]]), **(extra_env or {})}
    # Each HTTP generate_stream holds one HTTP worker for its whole stream: as many as the streams.
    with TritonServer(package(weights, work, instances, max_len), runtime=rt, startup_timeout=600,
                      env=env, extra_args=[f"--http-thread-count={max(16, streams)}"]) as srv:
        assert srv.pid is not None
        check_instant(srv.pid, instances)
        yield srv


def stubs(server_pid: int) -> list[int]:
    from tritonpkg.benchmarks.proccpu import descendants

    return [pid for pid in descendants(server_pid) if "triton_python_backend_stub" in cmdline(pid)]


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def thread_cpu(pids: list[int]) -> dict[tuple[int, int], float]:
    """(pid, thread id) -> CPU seconds of every thread of `pids`, from /proc/<pid>/task/<tid>/stat."""
    from tritonpkg.benchmarks.proccpu import TICK_S

    out = {}
    for pid in pids:
        for task in Path(f"/proc/{pid}/task").glob("*"):
            try:
                raw = (task / "stat").read_text()
            except OSError:
                continue
            fields = raw[raw.rindex(")") + 2:].split()
            out[(pid, int(task.name))] = (int(fields[11]) + int(fields[12])) * TICK_S
    return out


def check_instant(server_pid: int, instances: int) -> None:
    """The stubs run the instant token source: as many stubs as instances, and no vLLM engine process."""
    from tritonpkg.benchmarks.proccpu import descendants

    found = stubs(server_pid)
    engines = [pid for pid in descendants(server_pid) if "EngineCore" in cmdline(pid) or
               "EngineCore" in Path(f"/proc/{pid}/comm").read_text(errors="replace")]
    if len(found) != instances or engines:
        raise RuntimeError(f"expected {instances} stub(s) and no EngineCore: stubs {found}, engine processes "
                           f"{engines} (was the fake engine not put in?)")


# -- one measurement --------------------------------------------------------------------------------------
def measure(srv: Any, protocol: str, streams: int, procs: int, tokens: int) -> dict[str, Any]:
    """`streams` streams over `procs` client processes, all started at once; CPU metered by process."""
    from tritonpkg.benchmarks.proccpu import CpuMeter

    url = srv.grpc_url if protocol == "grpc" else srv.http_url
    shares = [streams // procs + (1 if i < streams % procs else 0) for i in range(procs)]
    clients = []
    first = 0
    for share in shares:
        clients.append(subprocess.Popen(
            [sys.executable, __file__, "--client", "--protocol", protocol, "--url", url, "--first", str(first),
             "--client-streams", str(share), "--tokens", str(tokens)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True))
        first += share
    try:
        for c in clients:
            assert c.stdout is not None
            line = c.stdout.readline()
            if line.strip() != "ready":
                raise RuntimeError(f"client {c.pid}: {line!r}")
        stub_pids = stubs(srv.pid)
        singles = {"tritonserver": srv.pid}
        singles.update({f"stub {i}" if len(stub_pids) > 1 else "stub": pid for i, pid in enumerate(stub_pids)})
        meter = CpuMeter([], singles)  # each process alone (its threads included): the stubs told apart
        started = time.monotonic()
        threads = thread_cpu(stub_pids)
        meter.start()
        for c in clients:
            assert c.stdin is not None
            c.stdin.write("go\n")
            c.stdin.flush()
        results = []
        for c in clients:
            assert c.stdout is not None
            out = c.stdout.read()
            c.wait(timeout=900)
            found = [x for x in out.splitlines() if x.startswith("result ")]
            if c.returncode != 0 or not found:
                raise RuntimeError(f"client {c.pid} exited {c.returncode}: {out[-2000:]}")
            results.append(json.loads(found[-1][7:]))
        meter.stop()
        threads = {k: v - threads.get(k, 0.0) for k, v in thread_cpu(stub_pids).items()}
        metered = time.monotonic() - started
    finally:
        for c in clients:
            if c.poll() is None:
                c.kill()
                c.wait()
    wall = max(r["end"] for r in results) - min(r["start"] for r in results)
    count = sum(r["tokens"] for r in results)
    if count != streams * tokens:
        raise RuntimeError(f"{count} tokens delivered, expected {streams} x {tokens}")
    responses = sum(r["responses"] for r in results)
    seconds = {name: cpu for name, cpu in meter.seconds.items() if cpu > 0}
    for i, r in enumerate(results):  # the clients have exited by now: they metered themselves
        seconds[f"client {i}" if procs > 1 else "client"] = r["cpu_s"]
    names = {pid: name for name, pid in singles.items()}
    busiest = sorted(threads.items(), key=lambda kv: -kv[1])[:3]
    return {"streams": streams, "client_procs": procs,
            "stub_busiest_threads": [{"process": names.get(pid, str(pid)), "cores_busy": s / wall}
                                     for (pid, _tid), s in busiest],
            "tok_s": count / wall, "responses_s": responses / wall,
            "tokens_per_response": count / responses,
            "ttft_p50_ms": statistics.median(t for r in results for t in r["ttfts"]) * 1e3,
            "wall_s": wall, "metered_s": metered,
            "processes": [{"process": name, "cores_busy": s / wall, "cpu_us_per_token": s / count * 1e6}
                          for name, s in sorted(seconds.items(), key=lambda kv: -kv[1])]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--streams", default="16,64", help="concurrent streams, a comma-separated list")
    parser.add_argument("--tokens", type=int, default=2000, help="output tokens per stream")
    parser.add_argument("--instances", default="1,2", help="instance_group counts, a comma-separated list")
    parser.add_argument("--client-procs", default="1,2", help="client processes, a comma-separated list")
    parser.add_argument("--protocol", choices=("grpc", "http"), default="grpc")
    parser.add_argument("--rounds", type=int, default=1, help="measurements per configuration (the best is kept)")
    parser.add_argument("--json", metavar="OUT", help="also write the figures here (as JSON)")
    # a client process (started by the bench itself)
    parser.add_argument("--client", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--first", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--client-streams", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--alone", metavar="WEIGHTS", help=argparse.SUPPRESS)
    parser.add_argument("--max-len", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.client:
        client_main(args)
        return
    if args.alone:
        import locale

        locale.setlocale(locale.LC_ALL, "C.UTF-8")
        result = asyncio.run(alone_run(args.alone, args.max_len, args.client_streams, args.tokens))
        print("result " + json.dumps(result), flush=True)
        return
    levels = [int(x) for x in args.streams.split(",")]
    instance_counts = [int(x) for x in args.instances.split(",")]
    proc_counts = [int(x) for x in args.client_procs.split(",")]
    max_len = 64 + args.tokens
    rows: list[dict[str, Any]] = []
    floors: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="bench-ceiling-") as tmp:
        work = Path(tmp)
        weights = work / "weights"
        subprocess.run([sys.executable, str(TINY / "make_tiny_llm.py"), "--out", str(weights),
                        "--context", str(max_len)], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for streams in levels:
            floors.append(alone(weights, max_len, streams, args.tokens, work))
            print(f"  AsyncLLM alone, {streams} streams: {floors[-1]['tok_s']:.0f} tok/s, "
                  f"{floors[-1]['cpu_us_per_token']:.1f} CPU us/token", flush=True)
        for instances in instance_counts:
            with triton(weights, work / f"i{instances}", instances, max_len, max(levels)) as srv:
                for streams in levels:
                    for procs in proc_counts:
                        best = None
                        for _ in range(args.rounds):
                            row = measure(srv, args.protocol, streams, procs, args.tokens)
                            if best is None or row["tok_s"] > best["tok_s"]:
                                best = row
                        assert best is not None
                        best["instances"] = instances
                        rows.append(best)
                        top = best["processes"][0]
                        print(f"  instances {instances}, {streams} streams, {procs} client process(es): "
                              f"{best['tok_s']:.0f} tok/s, {best['tokens_per_response']:.2f} tokens/response, "
                              f"busiest {top['process']} {top['cores_busy']:.2f} cores (the stubs' busiest thread "
                              f"{best['stub_busiest_threads'][0]['cores_busy']:.2f})", flush=True)
    show(rows, floors, args)
    from tritonpkg.benchmarks import results

    internal = ("json", "client", "url", "first", "client_streams", "alone", "max_len")
    results.write(args.json, "bench/response_ceiling.py", {k: v for k, v in vars(args).items() if k not in internal},
                  {"rows": rows, "asyncllm_alone": floors, "load_average_1m_at_end": round(os.getloadavg()[0], 2)})


def show(rows: list[dict[str, Any]], floors: list[dict[str, Any]], args: argparse.Namespace) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"response-path ceiling: instant engine, {args.tokens} tokens/stream, {args.protocol} "
                        f"streaming clients ({os.cpu_count()} cores shared by servers and clients)")
    for col in ("instances", "streams", "client procs", "tok/s", "tokens/resp", "TTFT p50 ms",
                "by process: cores busy, CPU µs/token", "stubs' busiest threads: cores"):
        table.add_column(col, justify="left" if col.startswith("by") else "right")
    for r in rows:
        procs = "; ".join(f"{p['process']} {p['cores_busy']:.2f}, {p['cpu_us_per_token']:.1f}"
                          for p in r["processes"] if p["cores_busy"] >= 0.01)
        table.add_row(str(r["instances"]), str(r["streams"]), str(r["client_procs"]), f"{r['tok_s']:.0f}",
                      f"{r['tokens_per_response']:.2f}", f"{r['ttft_p50_ms']:.0f}", procs,
                      ", ".join(f"{t['cores_busy']:.2f}" for t in r["stub_busiest_threads"]))
    Console(width=200).print(table)
    for f in floors:
        print(f"vLLM's AsyncLLM alone on the instant source (no Triton, in one process), {f['streams']} streams: "
              f"{f['tok_s']:.0f} tok/s, {f['cores_busy']:.2f} cores, {f['cpu_us_per_token']:.1f} CPU us/token")


if __name__ == "__main__":
    main()
