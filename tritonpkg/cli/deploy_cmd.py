"""`tritonpkg deploy`, `status`, `rollback` and `diff`: options in, library calls, tables or JSON out.
The library is imported inside each command so `tritonpkg --help` stays fast."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from tritonpkg.cli._common import EXIT_PROBLEMS, console, err_console, library_errors, print_json
from tritonpkg.deploy.defaults import ADAPTER_GRACE_S, DWELL_S, GC_GRACE_S

if TYPE_CHECKING:
    from tritonpkg.deploy.executor import Outcome
    from tritonpkg.deploy.service import DryRun, Teardown

STATE_HELP = "Folder holding state.db (deployments, units, runs, steps) and the local target's files."
DEFAULT_STATE = Path(".tritonpkg") / "deploy"


def _steps_table(title: str, steps: list[str]) -> None:
    from rich.table import Table

    table = Table(title=title)
    table.add_column("#", justify="right")
    table.add_column("step")
    for i, line in enumerate(steps, 1):
        table.add_row(str(i), line)
    console.print(table)


def _print_outcome(out: Outcome, as_json: bool) -> None:
    if as_json:
        print_json(out.model_dump())
    else:
        for rec in out.recovered:
            _steps_table(f"recovered: run {rec.run} (interrupted, {rec.new_unit or '-'}) rolled back first", rec.steps)
        _steps_table(f"{out.model}: {out.strategy} — {out.reason}", out.steps)
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
    strategy: str | None = typer.Option(None, "--strategy", "-s", help="auto | red-black | versioned | adapters "
                                        "(wins over the spec's deployment.strategy; default: the spec's, else "
                                        "auto). auto: adapters when the only change is the LoRA adapters (local "
                                        "and kubernetes targets), else red-black when the new I/O is compatible "
                                        "with the live version, else versioned."),
    target: str = typer.Option("local", "--target", "-t", help="local (tritonservers behind HAProxy) | kubernetes"),
    state: Path = typer.Option(DEFAULT_STATE, "--state", help=STATE_HELP),
    http_port: int = typer.Option(0, "--http-port", help="local: HAProxy's HTTP port on first deploy (0: free)."),
    grpc_port: int = typer.Option(0, "--grpc-port", help="local: HAProxy's gRPC port on first deploy (0: free)."),
    unit_port_base: int = typer.Option(0, "--unit-port-base", min=0, max=65535,
                                       help="local: units' own loopback ports from here, 3 per HAProxy slot (HTTP, "
                                            "gRPC, metrics: base+3*slot..+2; kept for the deployment's later "
                                            "deploys; 0: the recorded base, else free ports)."),
    max_error_rate: float = typer.Option(0.01, "--max-error-rate", help="Gate: highest error rate of the new version."),
    max_p99_ms: float = typer.Option(1000.0, "--max-p99-ms", help="Gate: highest p99 latency of the new version."),
    min_requests: int | None = typer.Option(None, "--min-requests", min=0,
                                            help="Gate: requests of the new version each step must see (wins over "
                                                 "the spec's deployment.min_requests; default 1; 0: liveness "
                                                 "only)."),
    dwell: float = typer.Option(DWELL_S, "--dwell", help="Seconds of traffic at each step before its gate."),
    gc_grace: float = typer.Option(GC_GRACE_S, "--gc-grace",
                                   help="versioned: retire superseded versions idle this long."),
    adapter_grace: float = typer.Option(ADAPTER_GRACE_S, "--adapter-grace", min=0,
                                        help="adapters: seconds the old adapters stay served after their names "
                                             "moved, so requests on them finish."),
    dry_run: bool = typer.Option(False, "--dry-run",
                                 help="Print the plan (and with -o, write manifests); change nothing."),
    out: Path | None = typer.Option(None, "--out", "-o", help="kubernetes: write the validated manifests here."),
    namespace: str = typer.Option("default", "--namespace", help="kubernetes namespace."),
    gateway: str = typer.Option("tritonpkg", "--gateway", help="kubernetes: the Gateway the HTTPRoute attaches to."),
    toolkit_image: str | None = typer.Option(None, "--toolkit-image", show_default=False,
                                             help="kubernetes: the pods' image (init container: fetch the archive; "
                                                  "main: `tritonpkg serve`); default: the toolkit image `tritonpkg "
                                                  "image build` tags for the spec's release."),
    package_store: str | None = typer.Option(None, "--package-store", metavar="s3://BUCKET/PREFIX",
                                             help="kubernetes: where the release's package archive is put and the "
                                                  "pods fetch it from (with --dry-run -o, written beside the "
                                                  "manifests to upload there)."),
    on_engine_death: str | None = typer.Option(
        None, "--on-engine-death", metavar="restart|exit", show_default=False,
        help="What the units this deploy starts do when a vLLM engine dies (readiness turns false within ~1 s, so "
             "HAProxy or the Service stops sending either way): restart loads the model again in the unit (3 "
             "attempts; exhausted: as exit); exit stops the unit (local: HAProxy keeps traffic on the others; "
             "kubernetes: the container exits and the kubelet restarts it). Default: restart locally, exit on "
             "kubernetes."),
    teardown: bool = typer.Option(False, "--teardown", help="Stop every unit of model SOURCE (and its local proxy)."),
    as_json: bool = typer.Option(False, "--json", help="Print the outcome as JSON."),
) -> None:
    """Roll a new model version out with no failed requests: red-black (health-checked, traffic shifted in the
    spec's deployment.traffic_steps with an error-rate/p99 gate after each, atomic rollback on any failure) or
    versioned (its own route, an alias for the current one, idle old versions retired after --gc-grace), or, when
    only the LoRA adapters changed, adapters (into the live unit's running engine: loaded as <name>@<version>,
    a canary each, names moved, the old dropped after --adapter-grace; the live list back on any failure)."""
    if strategy not in (None, "auto", "red-black", "versioned", "adapters"):
        raise typer.BadParameter("expected auto, red-black, versioned or adapters", param_hint="--strategy")
    if target not in ("local", "kubernetes"):
        raise typer.BadParameter("expected local or kubernetes", param_hint="--target")
    if on_engine_death not in (None, "restart", "exit"):
        raise typer.BadParameter("expected restart or exit", param_hint="--on-engine-death")
    from tritonpkg.deploy import service
    from tritonpkg.deploy.gate import Limits
    from tritonpkg.deploy.release import release_from

    k8s = service.KubernetesOptions(namespace=namespace, gateway=gateway, toolkit_image=toolkit_image,
                                    package_store=package_store,
                                    **({"on_engine_death": on_engine_death} if on_engine_death else {}))
    if teardown:
        _print_teardown(service.teardown(state, source, k8s), as_json)
        return
    release = release_from(source, state, strategy)
    if dry_run or (target == "kubernetes" and out is not None):  # writes nothing but `out`; checks the target itself
        _print_dry_run(service.dry_run(service.store_at(state, read_only=True), release, target, out, k8s,
                                       adapter_grace_s=adapter_grace), release.version, as_json)
        return
    service.check_target(release, target, k8s)  # before the state or the driver writes anything
    store = service.store_at(state)
    driver = service.driver_for(target, state, release.model, http_port=http_port, grpc_port=grpc_port,
                                unit_port_base=unit_port_base, kubernetes=k8s,
                                on_engine_death=on_engine_death)  # type: ignore[arg-type]  # checked above
    progress = None if as_json else (lambda phase, step: err_console.print(
        f"[dim]{phase}:[/] {step.describe()}", highlight=False))
    limits = Limits(max_error_rate=max_error_rate, max_p99_ms=max_p99_ms,
                    **({} if min_requests is None else {"min_requests": min_requests}))  # unset: the spec's
    outcome = service.deploy(store, driver, release, limits=limits, dwell_s=dwell, gc_grace=gc_grace,
                             adapter_grace_s=adapter_grace, on_step=progress)
    if outcome.ok and target == "local" and not as_json:
        entry = driver.entry()
        console.print(f"serving through HAProxy: HTTP {entry.http_url}  gRPC {entry.grpc_url}")
    _print_outcome(outcome, as_json)


def _print_dry_run(result: DryRun, version: int, as_json: bool) -> None:
    if as_json:
        print_json(result.model_dump())
        return
    from rich.table import Table

    plan = result.plan
    table = Table(title=f"{plan.model} v{version}: {plan.strategy} — {plan.reason} (dry run)")
    table.add_column("#", justify="right")
    table.add_column("step")
    table.add_column("on failure")
    for i, s in enumerate(plan.steps, 1):
        undone = s.kind in ("provision", "health_check", "shift", "gate", "adapters", "adapter_check")
        table.add_row(str(i), s.describe(), "rollback" if undone else "")
    console.print(table)
    console.print("rollback: " + " → ".join(s.describe() for s in plan.rollback))
    for line in result.validated:
        console.print(f"[green]✓[/] {line}", highlight=False)
    for name in result.written:
        console.print(f"wrote {name}", highlight=False)
    if result.archive:
        console.print(f"the pods fetch the package archive from {result.archive}"
                      + (" (upload the archive written here to it)" if result.written else ""), highlight=False)


def _print_teardown(result: Teardown, as_json: bool) -> None:
    if as_json:
        print_json(result.model_dump())
        return
    console.print(f"stopped {', '.join(result.stopped) or 'nothing'} of {result.model}")
    for note in result.notes:
        err_console.print(note, highlight=False, markup=False)


@library_errors()
def status(
    model: str | None = typer.Argument(None, help="One model (default: every deployed model)."),
    state: Path = typer.Option(DEFAULT_STATE, "--state", help=STATE_HELP),
    as_json: bool = typer.Option(False, "--json", help="Print the state as JSON."),
) -> None:
    """Deployments, their units (version, color, weight, route, liveness), the alias consumers should use, and
    the last runs — an interrupted one shows as such until the next deploy or rollback rolls it back."""
    from tritonpkg.deploy import service

    report = service.status(state, model)
    if as_json:
        print_json([rep.model_dump() for rep in report])
        return
    if not report:
        console.print(f"no deployments in {state}")
        return
    from rich.table import Table

    for rep in report:
        title = f"{rep.model} ({rep.target}, {rep.strategy or '-'}), alias: {rep.alias or '-'}"
        if rep.proxy.get("http_url"):
            title += f" — HTTP {rep.proxy['http_url']} gRPC {rep.proxy['grpc_url']}"
        table = Table(title=title)
        for col in ("unit", "version", "color", "weight %", "routed", "status", "alive", "engine", "endpoint",
                    "adapters"):
            table.add_column(col)
        for u in service.units_sorted(rep.units):
            ep = u.endpoints
            adapters = ", ".join(u.adapters) or "-"
            if u.adapter_release:
                adapters += f" (from v{u.adapter_release})"
            table.add_row(u.name, str(u.version), u.color or "-", str(u.weight), "yes" if u.routed else "-",
                          u.status, "yes" if u.alive else "-", u.engine, ep.get("http_url") or ep.get("name") or "-",
                          adapters)
        console.print(table)
        if rep.admin_key:
            console.print(f"Triton admin APIs (model control, logging, trace, shared memory, statistics): header "
                          f"{rep.admin_header}: {rep.admin_key}", highlight=False, markup=False, soft_wrap=True)
        runs = Table(title="last runs")
        for col in ("run", "strategy", "status", "reason", "error"):
            runs.add_column(col)
        for r in rep.runs:
            runs.add_row(str(r.id), r.strategy, r.status, r.reason, r.error or "")
        console.print(runs)


@library_errors()
def rollback(
    model: str = typer.Argument(..., help="The deployed model to roll back."),
    state: Path = typer.Option(DEFAULT_STATE, "--state", help=STATE_HELP),
    as_json: bool = typer.Option(False, "--json", help="Print the outcome as JSON."),
) -> None:
    """Send all traffic back to the previous unit still running in one proxy operation (and retire the newer
    one for red-black); an interrupted deploy is rolled back first."""
    from tritonpkg.deploy import service

    _print_outcome(service.rollback(state, model), as_json)


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
    from tritonpkg.deploy.strategy import choose

    d = iodiff.diff(iodiff.load(old), iodiff.load(new))
    strategy, reason = choose("auto", d.compatible, d.reasons())
    if as_json:
        print_json({"compatible": d.compatible, "strategy": strategy, "reason": reason,
                    "changes": [c.model_dump() for c in d.changes], "old": d.old.model_dump(),
                    "new": d.new.model_dump()})
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
