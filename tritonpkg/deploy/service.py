"""The deploy service behind `tritonpkg deploy`, `status` and `rollback`: which driver a target gets, a
deploy with its gc, a dry run and its Kubernetes manifests, status, and teardown — library calls with typed
results, so tests call them and the CLI only parses options and prints."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field

from tritonpkg.deploy.defaults import ADAPTER_GRACE_S, DWELL_S, GC_GRACE_S
from tritonpkg.deploy.driver import Driver, Endpoints
from tritonpkg.deploy.executor import Executor, Outcome, plan_release
from tritonpkg.deploy.gate import Limits
from tritonpkg.deploy.plan import Plan, Step, Unit
from tritonpkg.deploy.release import Release, build
from tritonpkg.deploy.state import StateStore
from tritonpkg.errors import TritonpkgError
from tritonpkg.serve.supervisor import DEFAULT_POLICY, EngineDeathPolicy

if TYPE_CHECKING:
    from tritonpkg.deploy.drivers.local import LocalDriver
    from tritonpkg.deploy.drivers.package_store import ArchiveRef

INTERRUPTED = "interrupted (rolled back by the next deploy/rollback)"
"""How status shows a run a stopped command left `running` (the state keeps `running`: recover finds it)."""


class KubernetesOptions(BaseModel):
    namespace: str = "default"
    gateway: str = "tritonpkg"
    toolkit_image: str | None = Field(default=None, description="None: tritonpkg.image.default_tag(release)")
    package_store: str | None = Field(default=None, description="s3://bucket/prefix the pods fetch archives from")
    on_engine_death: EngineDeathPolicy = Field(default="exit", description="the pods' serve --on-engine-death")


# -- state and drivers ---------------------------------------------------------------------------------
def store_at(state: Path, read_only: bool = False) -> StateStore:
    """The state file in folder `state`; `read_only` (a dry run) creates and writes nothing there."""
    return StateStore(state / "state.db", read_only=read_only)


def local_driver(state: Path, model: str, http_port: int = 0, grpc_port: int = 0,
                 unit_port_base: int = 0, on_engine_death: EngineDeathPolicy = DEFAULT_POLICY) -> LocalDriver:
    """The CLI's local driver: its files under state/local/<model>, its processes outliving the command;
    `on_engine_death` is the policy of the engine watchers of the units it starts."""
    from tritonpkg.deploy.drivers.local import LocalDriver

    return LocalDriver(state / "local" / model, http_port=http_port, grpc_port=grpc_port, persistent=True,
                       unit_port_base=unit_port_base, on_engine_death=on_engine_death)


def driver_for(target: str, state: Path, model: str, *, http_port: int = 0, grpc_port: int = 0,
               unit_port_base: int = 0, kubernetes: KubernetesOptions | None = None,
               on_engine_death: EngineDeathPolicy | None = None) -> Driver:
    """The target's driver. `on_engine_death` is what the local units it starts do when a vLLM engine dies (None:
    restart); Kubernetes pods take `kubernetes.on_engine_death` (exit), as the dry run does."""
    if target == "local":
        return local_driver(state, model, http_port, grpc_port, unit_port_base, on_engine_death or DEFAULT_POLICY)
    from tritonpkg.deploy.drivers.kubernetes import KubernetesDriver

    k = kubernetes or KubernetesOptions()
    return KubernetesDriver.from_kubeconfig(namespace=k.namespace, gateway=k.gateway, toolkit_image=k.toolkit_image,
                                            package_store=k.package_store, on_engine_death=k.on_engine_death)


def check_target(release: Release, target: str, kubernetes: KubernetesOptions | None = None) -> None:
    """Refuse, before anything is written, a release the target cannot run: on kubernetes one without a package
    store, or whose weights or adapters name a folder of this host."""
    if target != "kubernetes":
        return
    from tritonpkg.deploy.drivers import package_store

    package_store.check(release, (kubernetes or KubernetesOptions()).package_store)


def target_of(store: StateStore, model: str) -> str:
    dep = store.deployment(model)
    if dep is None:
        raise TritonpkgError(f"no deployment of {model!r} in this state", field="MODEL",
                             expected=f"one of: {', '.join(store.models()) or '(none yet)'}")
    return str(dep["target"])


# -- deploy and rollback ---------------------------------------------------------------------------------
def deploy(store: StateStore, driver: Driver, release: Release, *, limits: Limits | None = None,
           dwell_s: float = DWELL_S, gc_grace: float = GC_GRACE_S, adapter_grace_s: float = ADAPTER_GRACE_S,
           on_step: Callable[[str, Step], None] | None = None) -> Outcome:
    """Recover, plan, run (executor.Executor.deploy); a versioned rollout then retires superseded versions idle
    for `gc_grace` s, each listed as a step of the outcome."""
    ex = Executor(store, driver, limits=limits, dwell_s=dwell_s, on_step=on_step, adapter_grace_s=adapter_grace_s)
    outcome = ex.deploy(release)
    if outcome.ok and outcome.strategy == "versioned":
        outcome.steps += [f"gc: retired {u}" for u in ex.gc(release.model, gc_grace)]
    return outcome


def rollback(state: Path, model: str) -> Outcome:
    store = store_at(state)
    return Executor(store, driver_for(target_of(store, model), state, model)).rollback(model)


# -- dry run ------------------------------------------------------------------------------------------------
class DryRun(BaseModel):
    plan: Plan
    validated: list[str] = Field(default_factory=list, description="how each manifest was validated")
    written: list[str] = Field(default_factory=list, description="manifest files written")
    archive: str | None = Field(default=None, description="kubernetes: where the pods fetch the package archive "
                                                         "(written beside the manifests with -o: upload it there)")


def dry_run_manifests(plan: Plan, release: Release, k: KubernetesOptions, archive: ArchiveRef) -> list[dict[str, Any]]:
    """The Kubernetes objects the plan's new unit and the route end up as: the admin Secret (applied once,
    never replaced), the unit's Deployment, Service (and HPA), the HTTPRoute after the last shift."""
    from tritonpkg.deploy.drivers import kubernetes as k8s

    step = plan.steps[0]
    unit = Unit(name=step.unit or release.model, version=release.version, color=step.color,
                replicas=release.replicas)
    d = release.spec.deployment if release.spec else None
    manifests = [k8s.admin_secret_manifest(release.model, k.namespace),
                 *k8s.unit_manifests(release.model, unit, archive=archive, namespace=k.namespace,
                                     release=release.target_release, gpus=release.gpus,
                                     toolkit_image=k.toolkit_image, volumes=d.volumes if d else [],
                                     autoscaling=d.autoscaling if d else None, on_engine_death=k.on_engine_death,
                                     replicas=step.replicas.get(unit.name, release.replicas))]
    final = next((s.weights for s in reversed(plan.steps) if s.kind == "shift"), {unit.name: 100})
    versions = {str(release.version): unit.name} if plan.strategy == "versioned" else {}
    manifests.append(k8s.route_manifest(release.model, weights={u: w for u, w in final.items() if w},
                                        versions=versions, alias=unit.name, namespace=k.namespace,
                                        gateway=k.gateway))
    return manifests


def dry_run(store: StateStore, release: Release, target: str, out: Path | None = None,
            kubernetes: KubernetesOptions | None = None, adapter_grace_s: float = ADAPTER_GRACE_S) -> DryRun:
    """The plan deploy would run now, changing nothing live and writing nothing but `out` (give it a read-only
    store: store_at(state, read_only=True)); for kubernetes the release is packaged into a temporary folder, its
    archive made and its manifests validated (written to `out`, each 0600: the Secret's key is among them, with
    the archive to put where the manifests fetch it from)."""
    import contextlib
    import tempfile

    k = kubernetes or KubernetesOptions()
    folder = tempfile.TemporaryDirectory(prefix="tritonpkg-dry-run-") if target == "kubernetes" else None
    with folder or contextlib.nullcontext() as scratch:
        if scratch and not release.built:  # a spec's files, packaged there; a packaged repository is read where it is
            release = release.model_copy(update={"repository": Path(scratch) / "repository"})
        plan = plan_release(store, release, adapter_rollouts=target in ("local", "kubernetes"),
                            adapter_grace_s=adapter_grace_s)  # as deploy: planned before anything is written
        if not scratch:
            return DryRun(plan=plan)
        import shutil

        from tritonpkg.deploy.drivers import kubernetes as k8s
        from tritonpkg.deploy.drivers import package_store

        release = build(release)
        check_target(release, target, k)  # the spec and its packaged files, before its archive is made
        archive_file = Path(scratch) / "package.tar.gz"
        ref = package_store.archive_ref(package_store.check_store(k.package_store), release.model, release.version,
                                        package_store.write_archive(release, archive_file))
        if plan.strategy == "adapters":  # only the unit's adapter list changes
            manifests = k8s.adapter_plan_manifests(plan, release, ref, k.namespace)
        else:
            manifests = dry_run_manifests(plan, release, k, ref)
        result = DryRun(plan=plan, validated=k8s.validate(manifests), archive=ref.key_url)
        if out is not None:
            import yaml

            out.mkdir(parents=True, exist_ok=True)
            for m in manifests:
                path = out / f"{m['kind'].lower()}-{m['metadata']['name']}.yaml"
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
                with os.fdopen(fd, "w") as fh:
                    fh.write(yaml.safe_dump(m, sort_keys=False))
                result.written.append(str(path))
            shutil.copyfile(archive_file, out / ref.file)
            (out / ref.file).chmod(0o600)
            result.written.append(str(out / ref.file))
    return result


# -- teardown ---------------------------------------------------------------------------------------------
class Teardown(BaseModel):
    model: str
    stopped: list[str] = Field(description="units stopped and marked retired")
    notes: list[str] = Field(default_factory=list, description="what stopping found, e.g. a group not ours")


def teardown(state: Path, model: str, kubernetes: KubernetesOptions | None = None) -> Teardown:
    """Stop every unit of `model` (and the local proxy), mark them retired and clear the alias."""
    store = store_at(state)
    target = target_of(store, model)
    units = [u for u in store.units_table(model) if u["status"] != "retired"]
    driver = driver_for(target, state, model, kubernetes=kubernetes)
    driver.proxy = dict((store.deployment(model) or {}).get("info", {}).get("proxy", {}))
    notes = driver.teardown([Endpoints.of(u["endpoints"]) for u in units])
    for u in units:
        store.update_unit(model, u["name"], status="retired", weight=0, routed=False)
    store.set_deployment(model, alias=None)
    return Teardown(model=model, stopped=[u["name"] for u in units], notes=notes)


# -- status -------------------------------------------------------------------------------------------------
class UnitStatus(BaseModel):
    model: str
    name: str
    version: int
    color: str | None
    weight: int
    replicas: int
    status: str
    routed: bool
    last_active: float | None
    endpoints: dict[str, Any] = Field(description="as recorded, without the I/O schema")
    alive: bool
    engine: str = Field(default="-", description="local: the model's readiness and each engine's last state")
    adapters: list[str] = Field(default_factory=list, description="the LoRA adapters the unit serves, by name")
    adapter_release: int | None = Field(default=None, description="the release its adapters were rolled out from")


class RunStatus(BaseModel):
    id: int
    strategy: str
    status: str = Field(description=f"done, rolled_back, or '{INTERRUPTED}'")
    reason: str
    error: str | None
    started: float
    finished: float | None


class DeploymentStatus(BaseModel):
    model: str
    target: str
    strategy: str | None
    alias: str | None
    proxy: dict[str, str | None] = Field(description="the local proxy's http_url and grpc_url")
    admin_key: str | None = Field(description="the local deployment's Triton admin-API key")
    admin_header: str | None
    units: list[UnitStatus]
    runs: list[RunStatus]


def _alive(target: str, unit: dict[str, Any]) -> bool:
    if unit["status"] == "retired":
        return False
    if target != "local":
        return bool(unit["status"] == "serving")  # no cluster call from status
    from tritonpkg.proc import rest

    url = unit["endpoints"].get("http_url")
    return bool(url) and rest.ok(url + "/v2/health/live", timeout=1.0)


def status(state: Path, model: str | None = None) -> list[DeploymentStatus]:
    """Every deployment in the state (or one): units with their liveness, the alias, the last runs (a run left
    running by a stopped command shows as interrupted), and for local ones the proxy and the admin key."""
    store = store_at(state)
    report = []
    for name in [model] if model else store.models():
        target = target_of(store, name)
        dep = store.deployment(name) or {}
        units = []
        for row in store.units_table(name):
            row["alive"] = _alive(target, row)
            if target == "local" and row["alive"]:
                from tritonpkg.deploy.drivers.unit_watch import engine_state

                row["engine"] = engine_state(name, row["endpoints"])
            row["endpoints"].pop("schema", None)
            row["adapters"] = list(row["endpoints"].get("adapters") or _packaged_adapters(row["endpoints"], name,
                                                                                          row["version"]))
            row["adapter_release"] = row["endpoints"].get("adapter_release")
            units.append(UnitStatus.model_validate(row))
        runs = [RunStatus.model_validate({**r, "status": INTERRUPTED if r["status"] == "running" else r["status"]})
                for r in store.runs(name)]
        key = local_driver(state, name).admin_key() if target == "local" else None
        proxy = dep["info"].get("proxy", {})
        report.append(DeploymentStatus(model=name, target=target, strategy=dep["strategy"], alias=dep["alias"],
                                       proxy={k: proxy.get(k) for k in ("http_url", "grpc_url")},
                                       admin_key=key, admin_header="admin-key" if key else None,
                                       units=units, runs=runs))
    return report


def _packaged_adapters(endpoints: dict[str, Any], model: str, version: int) -> list[str]:
    """A unit no adapter rollout has touched: the names its served list holds."""
    from tritonpkg.deploy.adapters import served_list

    serving = endpoints.get("serving_repository")
    if not serving or not (Path(serving) / model / str(version) / "multi_lora.json").is_file():
        return []
    try:
        return list(served_list(Path(serving) / model / str(version)))
    except TritonpkgError:
        return []


def units_sorted(units: list[UnitStatus]) -> list[UnitStatus]:
    """Live units first, newest version first."""
    return sorted(units, key=lambda u: (u.status == "retired", -u.version))
