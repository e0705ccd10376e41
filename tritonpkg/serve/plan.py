"""The start-up procedure of a serving unit (`tritonpkg serve`, `tritonpkg demo`, a local deploy unit), as
pure plans: which steps run, in which order, with which settings. tritonpkg.serve.stack runs them.

Planning happens twice because what a package asks for is only known once it is safely unpacked and
verified: `plan_prepare` (from the options alone) gets the repository onto disk and checked, then
`plan_serve` (options + facts read from the verified package) brings it up. `plan_startup` joins both
for display and tests.

The order is the contract of issue 6: unpack and verify, weights, plugins, a clean Prometheus
multiprocess directory, Triton with its public ports closed until every model is ready, and only then
the merged /metrics and the OpenAI frontend."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from tritonpkg.frontend.auth import exposure_warning
from tritonpkg.runtime.server import EXIT_TIMEOUT_S
from tritonpkg.serve.supervisor import DEFAULT_POLICY, EngineDeathPolicy
from tritonpkg.serve.triton_options import TritonOptions
from tritonpkg.serve.unpack import DEFAULT_MAX_BYTES, DEFAULT_MAX_MEMBERS

ExecutionMode = Literal["embedded", "separate"]
# "plan" only labels notes about the plan itself (what will not happen, and why); it runs nothing.
# "engine" labels what the engine supervisor reports while serving (a death, a restart).
StepKind = Literal["plan", "unpack", "verify", "weights", "plugins", "metrics_dir", "triton", "metrics", "frontend",
                   "engine"]
DEFAULT_MODE: ExecutionMode = "embedded"


class StartupOptions(BaseModel):
    """Everything a start-up was asked for. Ports: 0 picks a free one. None for execution_mode or openai
    means: what the package asks for (its lock), else embedded without the OpenAI API. startup_timeout None:
    wait as long as Triton runs and reports models loading (a failed load ends the start at once)."""

    model_config = ConfigDict(extra="forbid")

    source: Path = Field(description="a model repository folder or a `tritonpkg package --archive` file")
    host: str = "127.0.0.1"
    http_port: int = Field(default=8000, ge=0, le=65535)
    grpc_port: int = Field(default=8001, ge=0, le=65535)
    metrics_port: int = Field(default=8002, ge=0, le=65535)
    openai_port: int = Field(default=9000, ge=0, le=65535)
    execution_mode: ExecutionMode | None = None
    openai: bool | None = None
    state_dir: Path | None = Field(default=None, description="unpacked package and metrics files; None: a temp dir")
    weights_root: Path | None = Field(default=None, description="where remote weights are materialized")
    multiproc_dir: Path | None = Field(default=None, description="PROMETHEUS_MULTIPROC_DIR; None: env or state dir")
    startup_timeout: float | None = Field(default=None, gt=0, description="upper bound on Triton's start")
    triton: TritonOptions = Field(default_factory=TritonOptions, description="tritonserver options beyond ours")
    merged_metrics: bool = Field(default=True, description="open the public merged /metrics (a deploy unit's "
                                                           "gate reads Triton's own instead)")
    log_path: Path | None = Field(default=None, description="tritonserver's log; None: a temp file kept on failure")
    on_engine_death: EngineDeathPolicy = Field(default=DEFAULT_POLICY, description="restart: load the model again "
                                               "(bounded retries); exit: stop the stack non-zero")
    drain_timeout: float = Field(default=0, ge=0, le=3600, description="on stop, seconds in-flight requests and "
                                 "streams get to end before they are cut (0: no drain, Triton's exit timeout alone)")
    exit_timeout: int = Field(default=EXIT_TIMEOUT_S, ge=0, le=3600, description="Triton's --exit-timeout-secs")
    max_members: int = Field(default=DEFAULT_MAX_MEMBERS, ge=1, description="refuse archives with more members")
    max_bytes: int = Field(default=DEFAULT_MAX_BYTES, ge=1, description="refuse archives that expand to more")
    install_plugins: bool = True
    absolute_adapters: bool = Field(default=False, description="write each local adapter folder absolute into the "
                                    "serving copy: NVIDIA's backend hands a relative one to vLLM as written")
    openai_api_key: str | None = Field(default=None, repr=False, min_length=1, max_length=1024,
                                       description="bearer key every /v1 route of the OpenAI API requires; None: open")
    max_request_bytes: int = Field(default=16 * 1024 * 1024, ge=1024, description="largest OpenAI request body")
    admin_key_dir: Path | None = Field(default=None, description="a folder that keeps the admin key (one key for "
                                                                 "several units, as deploy's); None: the state dir")
    admin_key: str | None = Field(default=None, repr=False,
                                  description="Triton's admin-API key (tritonpkg.runtime.admin); None: a new one")
    metrics_token: str | None = Field(default=None, repr=False, min_length=16, max_length=4096,
                                      description="bearer token the merged /metrics requires; None: open")

    @property
    def triton_metrics_port(self) -> int:
        """Triton's own metrics port (0: a free one, on loopback): metrics_port where no merged /metrics takes it
        (a deploy unit, whose gate reads Triton's own), else a free one that the merged /metrics reads."""
        return 0 if self.merged_metrics else self.metrics_port


@dataclass(frozen=True)
class PackageFacts:
    """What the verified package says about itself (tritonpkg.lock.json and its files)."""

    wheels: int = 0
    recorded_wheels: int = 0  # plugin wheels the lock names (a folder carries none of them)
    execution_mode: ExecutionMode | None = None
    openai: bool | None = None


@dataclass(frozen=True)
class Step:
    kind: StepKind
    title: str


@dataclass
class StartupPlan:
    steps: list[Step]
    execution_mode: ExecutionMode = DEFAULT_MODE
    openai: bool = False
    notes: list[str] = field(default_factory=list)

    @property
    def kinds(self) -> list[StepKind]:
        return [s.kind for s in self.steps]


def plan_prepare(options: StartupOptions, source_is_archive: bool) -> StartupPlan:
    if source_is_archive:
        return StartupPlan([
            Step("unpack", f"unpack {options.source.name} (at most {options.max_members} members, "
                           f"{options.max_bytes} bytes)"),
            Step("verify", "verify every file against tritonpkg.lock.json"),
        ])
    return StartupPlan([Step("verify", "compare the repository with its lock (drift is reported, not fatal)")])


def plan_serve(options: StartupOptions, facts: PackageFacts) -> StartupPlan:
    mode = options.execution_mode or facts.execution_mode or DEFAULT_MODE
    openai = options.openai if options.openai is not None else bool(facts.openai)
    plan = StartupPlan([], execution_mode=mode, openai=openai)
    plan.steps.append(Step("weights", "weights on this machine (materialize remote sources)"))
    if facts.wheels and options.install_plugins:
        plan.steps.append(Step("plugins", f"install {facts.wheels} bundled plugin wheel(s)"))
    elif facts.wheels:
        plan.notes.append(f"{facts.wheels} bundled plugin wheel(s) not installed (--no-plugins)")
    elif facts.recorded_wheels:
        plan.notes.append(f"the lock names {facts.recorded_wheels} plugin wheel(s) that only a package archive "
                          "carries; they must already be installed")
    plan.steps.append(Step("metrics_dir", "clear the Prometheus multiprocess directory"))
    t = options.triton
    if t.model_control_mode != "explicit":
        gate = "closed until every model is ready"
    elif t.load_models:
        gate = f"closed until {', '.join(t.load_models)} {'is' if len(t.load_models) == 1 else 'are'} ready"
    else:
        gate = "closed until Triton is live (explicit model control, no model named)"
    plan.steps.append(Step("triton", f"start Triton; public HTTP/gRPC ports stay {gate}"))
    if options.merged_metrics:
        served = "Triton + vLLM" if t.metrics else "vLLM only: Triton's own metrics are off"
        plan.steps.append(Step("metrics", f"open the merged /metrics ({served})"))
    if openai and mode == "embedded":
        plan.steps.append(Step("frontend", "open the OpenAI-compatible API"))
        warning = exposure_warning(options.host, options.openai_port, options.openai_api_key is not None)
        if warning:
            plan.notes.append(warning)
    elif openai:
        plan.notes.append("separate mode: run `tritonpkg frontend --triton-grpc ...` beside this server "
                          "for the OpenAI API, with TRITONPKG_ADMIN_KEY set to this server's admin key")
    return plan


def plan_startup(options: StartupOptions, source_is_archive: bool, facts: PackageFacts) -> StartupPlan:
    prepare, serve = plan_prepare(options, source_is_archive), plan_serve(options, facts)
    return StartupPlan(prepare.steps + serve.steps, serve.execution_mode, serve.openai, prepare.notes + serve.notes)


def packaged_serving(lock: dict) -> tuple[ExecutionMode | None, bool | None]:
    """The execution mode and OpenAI wish the lock records for its models, when it records them:
    embedded wins over separate, and one model asking for the OpenAI API turns it on."""
    modes: set[str] = set()
    wants: set[bool] = set()
    for model in lock.get("models", {}).values():
        for entry in model.get("versions", {}).values():
            serving = entry.get("serving") or {}
            if serving.get("execution_mode") in ("embedded", "separate"):
                modes.add(serving["execution_mode"])
            if isinstance(serving.get("openai"), bool):
                wants.add(serving["openai"])
    mode: ExecutionMode | None = "embedded" if "embedded" in modes else ("separate" if modes else None)
    return mode, (True in wants) if wants else None
