"""`tritonpkg deploy`, `status`, `rollback` and `diff`: options in, library calls, tables or JSON out.
The library is imported inside each command so `tritonpkg --help` stays fast."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import typer

from tritonpkg.cli._common import EXIT_PROBLEMS, console, err_console, library_errors, print_json

STATE_HELP = "Folder holding state.db (deployments, units, runs, steps) and the local target's files."
DEFAULT_STATE = Path(".tritonpkg") / "deploy"


def _store(state: Path):
    from tritonpkg.deploy.state import StateStore

    return StateStore(state / "state.db")


def _local_driver(state: Path, model: str, http_port: int = 0, grpc_port: int = 0):
    from tritonpkg.deploy.drivers.local import LocalDriver

    return LocalDriver(state / "local" / model, http_port=http_port, grpc_port=grpc_port, persistent=True)


def _driver_for(target: str, state: Path, model: str, *, http_port: int = 0, grpc_port: int = 0,
                namespace: str = "default", gateway: str = "tritonpkg", toolkit_image: str = "tritonpkg:latest"):
    if target == "local":
        return _local_driver(state, model, http_port, grpc_port)
    from tritonpkg.deploy.drivers.kubernetes import KubernetesDriver

    return KubernetesDriver.from_kubeconfig(namespace=namespace, gateway=gateway, toolkit_image=toolkit_image)


def _target_of(store, model: str) -> str:
    dep = store.deployment(model)
    if dep is None:
        from tritonpkg.errors import TritonpkgError

        raise TritonpkgError(f"no deployment of {model!r} in this state", field="MODEL",
                             expected=f"one of: {', '.join(store.models()) or '(none yet)'}")
    return dep["target"]


def _print_outcome(out: Any, as_json: bool) -> None:
    if as_json:
        print_json(out.model_dump())
    else:
        from rich.table import Table

        table = Table(title=f"{out.model}: {out.strategy} — {out.reason}")
        table.add_column("#", justify="right")
        table.add_column("step")
        for i, line in enumerate(out.steps, 1):
            table.add_row(str(i), line)
        console.print(table)
        if out.ok:
            console.print(f"[green]done[/] in {out.seconds:.1f} s (run {out.run})")
        else:
            err_console.print(f"[bold red]rolled back:[/] {out.error}  ({out.seconds:.1f} s, run {out.run})",
                              highlight=False)
    if not out.ok:
        raise typer.Exit(EXIT_PROBLEMS)


@library_errors()
def deploy(
    source: str = typer.Argument(..., help="A tritonpkg.yaml (or its folder) or a packaged model repository; "
                                           "with --teardown, a deployed model's name."),
    strategy: str = typer.Option("auto", "--strategy", "-s", help="auto | red-black | versioned. auto: red-black "
                                 "when the new I/O is compatible with the live version, else versioned."),
    target: str = typer.Option("local", "--target", "-t", help="local (tritonservers behind HAProxy) | kubernetes"),
    state: Path = typer.Option(DEFAULT_STATE, "--state", help=STATE_HELP),
    http_port: int = typer.Option(0, "--http-port", help="local: HAProxy's HTTP port on first deploy (0: free)."),
    grpc_port: int = typer.Option(0, "--grpc-port", help="local: HAProxy's gRPC port on first deploy (0: free)."),
    max_error_rate: float = typer.Option(0.01, "--max-error-rate", help="Gate: highest error rate of the new version."),
    max_p99_ms: float = typer.Option(1000.0, "--max-p99-ms", help="Gate: highest p99 latency of the new version."),
    dwell: float = typer.Option(5.0, "--dwell", help="Seconds of traffic at each step before its gate."),
    gc_grace: float = typer.Option(3600.0, "--gc-grace", help="versioned: retire superseded versions idle this long."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the plan (and with -o, write manifests); change nothing."),
    out: Path | None = typer.Option(None, "--out", "-o", help="kubernetes: write the validated manifests here."),
    namespace: str = typer.Option("default", "--namespace", help="kubernetes namespace."),
    gateway: str = typer.Option("tritonpkg", "--gateway", help="kubernetes: the Gateway the HTTPRoute attaches to."),
    toolkit_image: str = typer.Option("tritonpkg:latest", "--toolkit-image",
                                      help="kubernetes: image of the init container that runs `tritonpkg materialize`."),
    teardown: bool = typer.Option(False, "--teardown", help="Stop every unit of model SOURCE (and its local proxy)."),
    as_json: bool = typer.Option(False, "--json", help="Print the outcome as JSON."),
) -> None:
    """Roll a new model version out with no failed requests: red-black (health-checked, traffic shifted in the
    spec's deployment.traffic_steps with an error-rate/p99 gate after each, atomic rollback on any failure) or
    versioned (its own route, an alias for the current one, idle old versions retired after --gc-grace)."""
    if strategy not in ("auto", "red-black", "versioned"):
        raise typer.BadParameter("expected auto, red-black or versioned", param_hint="--strategy")
    if target not in ("local", "kubernetes"):
        raise typer.BadParameter("expected local or kubernetes", param_hint="--target")
    from tritonpkg.deploy.executor import Executor, release_from
    from tritonpkg.deploy.gate import Limits

    store = _store(state)
    if teardown:
        _teardown(store, state, source, as_json)
        return
    release = release_from(source, state, None if strategy == "auto" and _spec_strategy(source) else strategy)
    if dry_run or (target == "kubernetes" and out is not None):
        _dry_run(store, release, target, out, namespace, gateway, toolkit_image, as_json)
        return
    driver = _driver_for(target, state, release.model, http_port=http_port, grpc_port=grpc_port,
                         namespace=namespace, gateway=gateway, toolkit_image=toolkit_image)
    progress = None if as_json else (lambda phase, step: err_console.print(
        f"[dim]{phase}:[/] {step.describe()}", highlight=False))
    ex = Executor(store, driver, limits=Limits(max_error_rate=max_error_rate, max_p99_ms=max_p99_ms),
                  dwell_s=dwell, on_step=progress)
    outcome = ex.deploy(release)
    if outcome.ok and outcome.strategy == "versioned":
        retired = ex.gc(release.model, gc_grace)
        outcome.steps += [f"gc: retired {u}" for u in retired]
    if outcome.ok and target == "local" and not as_json:
        ep = driver.endpoints()
        console.print(f"serving through HAProxy: HTTP {ep['http_url']}  gRPC {ep['grpc_url']}")
    _print_outcome(outcome, as_json)


def _spec_strategy(source: str) -> bool:
    """True when SOURCE is a spec: then its deployment.strategy stands unless --strategy overrides it."""
    p = Path(source)
    return p.suffix in (".yaml", ".yml") or (p / "tritonpkg.yaml").is_file()


def _dry_run(store, release, target: str, out: Path | None, namespace: str, gateway: str, toolkit_image: str,
             as_json: bool) -> None:
    from tritonpkg.deploy.executor import Executor

    class _NoDriver:
        target = "dry-run"

    plan = Executor(store, _NoDriver()).plan(release)
    written: list[str] = []
    checks: list[str] = []
    if target == "kubernetes":
        import yaml

        from tritonpkg.deploy.drivers import kubernetes as k8s
        from tritonpkg.deploy.plan import Unit

        step = plan.steps[0]
        unit = Unit(name=step.unit or release.model, version=release.version, color=step.color,
                    replicas=release.replicas)
        manifests = k8s.unit_manifests(release.model, unit, repository=release.repository, namespace=namespace,
                                       release=release.target_release, weights=release.weights, gpus=release.gpus,
                                       toolkit_image=toolkit_image)
        manifests.insert(0, k8s.admin_secret_manifest(release.model, namespace))  # apply once; never replace
        final = next((s.weights for s in reversed(plan.steps) if s.kind == "shift"), {unit.name: 100})
        versions = {str(release.version): unit.name} if plan.strategy == "versioned" else {}
        manifests.append(k8s.route_manifest(release.model, weights={k: v for k, v in final.items() if v},
                                            versions=versions, alias=unit.name, namespace=namespace,
                                            gateway=gateway))
        checks = k8s.validate(manifests)
        if out is not None:
            out.mkdir(parents=True, exist_ok=True)
            for m in manifests:
                path = out / f"{m['kind'].lower()}-{m['metadata']['name']}.yaml"
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
                with os.fdopen(fd, "w") as fh:  # a Secret's key among them: readable by its owner only
                    fh.write(yaml.safe_dump(m, sort_keys=False))
                written.append(str(path))
    if as_json:
        print_json({"plan": plan.model_dump(), "validated": checks, "written": written})
        return
    from rich.table import Table

    table = Table(title=f"{plan.model} v{release.version}: {plan.strategy} — {plan.reason} (dry run)")
    table.add_column("#", justify="right")
    table.add_column("step")
    table.add_column("on failure")
    for i, s in enumerate(plan.steps, 1):
        table.add_row(str(i), s.describe(), "rollback" if s.kind in ("provision", "health_check", "shift", "gate") else "")
    console.print(table)
    console.print("rollback: " + " → ".join(s.describe() for s in plan.rollback))
    for line in checks:
        console.print(f"[green]✓[/] {line}", highlight=False)
    for path in written:
        console.print(f"wrote {path}", highlight=False)


def _teardown(store, state: Path, model: str, as_json: bool) -> None:
    target = _target_of(store, model)
    units = [u for u in store.units_table(model) if u["status"] != "retired"]
    if target == "local":
        driver = _local_driver(state, model)
        driver.proxy = dict((store.deployment(model) or {}).get("info", {}).get("proxy", {}))
        driver.shutdown([u["endpoints"] for u in units])
    else:
        from tritonpkg.deploy.drivers.kubernetes import KubernetesDriver

        driver = KubernetesDriver.from_kubeconfig()
        for u in units:
            driver.retire(u["endpoints"])
    for u in units:
        store.update_unit(model, u["name"], status="retired", weight=0, routed=False)
    store.set_deployment(model, alias=None)
    notes = [n for n in getattr(driver, "notes", []) if n]  # e.g. a recorded group that is no longer ours
    if as_json:
        print_json({"model": model, "stopped": [u["name"] for u in units], "notes": notes})
    else:
        console.print(f"stopped {', '.join(u['name'] for u in units) or 'nothing'} of {model}")
        for note in notes:
            err_console.print(note, highlight=False, markup=False)


@library_errors()
def status(
    model: str | None = typer.Argument(None, help="One model (default: every deployed model)."),
    state: Path = typer.Option(DEFAULT_STATE, "--state", help=STATE_HELP),
    as_json: bool = typer.Option(False, "--json", help="Print the state as JSON."),
) -> None:
    """Deployments, their units (version, color, weight, route, liveness), the alias consumers should use, and
    the last runs — an interrupted one shows as such until the next deploy or rollback rolls it back."""
    store = _store(state)
    models = [model] if model else store.models()
    report = []
    for name in models:
        dep = store.deployment(name)
        if dep is None:
            _target_of(store, name)
        units = store.units_table(name)
        for u in units:
            u["alive"] = _alive(dep["target"], u) if u["status"] != "retired" else False
            u["endpoints"].pop("schema", None)
        runs = store.runs(name)
        for r in runs:
            if r["status"] == "running":
                r["status"] = "interrupted (rolled back by the next deploy/rollback)"
        key = _local_driver(state, name).admin_key() if dep["target"] == "local" else None
        report.append({"model": name, "target": dep["target"], "strategy": dep["strategy"], "alias": dep["alias"],
                       "proxy": {k: dep["info"].get("proxy", {}).get(k) for k in ("http_url", "grpc_url")},
                       "admin_key": key, "admin_header": "admin-key" if key else None,
                       "units": units, "runs": runs})
    if as_json:
        print_json(report)
        return
    if not report:
        console.print(f"no deployments in {state}")
        return
    from rich.table import Table

    for rep in report:
        proxy = rep["proxy"]
        title = f"{rep['model']} ({rep['target']}, {rep['strategy'] or '-'}), alias: {rep['alias'] or '-'}"
        if proxy.get("http_url"):
            title += f" — HTTP {proxy['http_url']} gRPC {proxy['grpc_url']}"
        table = Table(title=title)
        for col in ("unit", "version", "color", "weight %", "routed", "status", "alive", "endpoint"):
            table.add_column(col)
        for u in units_sorted(rep["units"]):
            ep = u["endpoints"]
            table.add_row(u["name"], str(u["version"]), u["color"] or "-", str(u["weight"]),
                          "yes" if u["routed"] else "-", u["status"], "yes" if u["alive"] else "-",
                          ep.get("http_url") or ep.get("name") or "-")
        console.print(table)
        if rep["admin_key"]:
            console.print(f"Triton admin APIs (model control, logging, trace, shared memory, statistics): header "
                          f"{rep['admin_header']}: {rep['admin_key']}", highlight=False, markup=False, soft_wrap=True)
        runs = Table(title="last runs")
        for col in ("run", "strategy", "status", "reason", "error"):
            runs.add_column(col)
        for r in rep["runs"]:
            runs.add_row(str(r["id"]), r["strategy"], r["status"], r["reason"], r["error"] or "")
        console.print(runs)


def units_sorted(units: list[dict]) -> list[dict]:
    return sorted(units, key=lambda u: (u["status"] == "retired", -u["version"]))


def _alive(target: str, unit: dict) -> bool:
    if target != "local":
        return unit["status"] == "serving"
    from tritonpkg.runtime import rest

    url = unit["endpoints"].get("http_url")
    return bool(url) and rest.ok(url + "/v2/health/live", timeout=1.0)


@library_errors()
def rollback(
    model: str = typer.Argument(..., help="The deployed model to roll back."),
    state: Path = typer.Option(DEFAULT_STATE, "--state", help=STATE_HELP),
    as_json: bool = typer.Option(False, "--json", help="Print the outcome as JSON."),
) -> None:
    """Send all traffic back to the previous unit still running in one proxy operation (and retire the newer
    one for red-black); an interrupted deploy is rolled back first."""
    from tritonpkg.deploy.executor import Executor

    store = _store(state)
    target = _target_of(store, model)
    driver = _driver_for(target, state, model)
    ex = Executor(store, driver)
    recovered = ex.recover(model)
    from tritonpkg.deploy.plan import PlanError

    try:
        outcome = ex.rollback(model)
    except PlanError:
        if not recovered:
            raise
        if as_json:
            print_json({"model": model, "recovered_runs": recovered})
        else:
            console.print(f"rolled back interrupted run(s) {recovered} of {model}")
        return
    _print_outcome(outcome, as_json)


@library_errors()
def diff(
    old: Path = typer.Argument(..., help="The live version: a tritonpkg.yaml, a model repository, a model folder "
                                         "or a config.pbtxt."),
    new: Path = typer.Argument(..., help="The new version, in any of the same forms."),
    as_json: bool = typer.Option(False, "--json", help="Print the changes and the verdict as JSON."),
) -> None:
    """Compare the I/O schemas (names, dtypes, dims, optional flags, batching) and say whether clients of OLD
    keep working against NEW — the choice `deploy --strategy auto` makes (compatible: red-black, else versioned)."""
    from tritonpkg.deploy import iodiff
    from tritonpkg.deploy.plan import choose

    d = iodiff.diff(iodiff.load(old), iodiff.load(new))
    strategy, reason = choose("auto", d.compatible, d.reasons())
    if as_json:
        print_json({"compatible": d.compatible, "strategy": strategy, "reason": reason,
                    "changes": [c.model_dump() for c in d.changes], "old": d.old.model_dump(), "new": d.new.model_dump()})
        return
    from rich.table import Table

    table = Table(title=f"{d.old.model} v{d.old.version or '?'} → {d.new.model} v{d.new.version or '?'}")
    for col in ("where", "old", "new", "breaks old clients", "why"):
        table.add_column(col)
    for c in d.changes:
        table.add_row(c.where, c.old, c.new, "[red]yes[/]" if c.breaking else "no", c.why)
    if d.changes:
        console.print(table)
    else:
        console.print("no I/O changes")
    console.print(f"{'compatible' if d.compatible else '[red]incompatible[/]'}: {reason}")
