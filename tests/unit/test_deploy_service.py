"""The deploy service as a library: status, teardown and dry-run manifests called directly, and the CLI
printing exactly what they return (no processes but one `sleep` standing in for a unit)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tritonpkg.cli import app
from tritonpkg.deploy import service
from tritonpkg.deploy import state as state_mod
from tritonpkg.deploy.executor import Release
from tritonpkg.deploy.plan import LiveState, Unit, plan_red_black, plan_versioned


def _state(folder: Path, endpoints: dict) -> state_mod.StateStore:
    store = service.store_at(folder)
    store.ensure_deployment("m", "local", {"proxy": {"http_url": "http://127.0.0.1:9", "grpc_url": "127.0.0.1:8"}})
    store.put_unit("m", Unit(name="m-blue", version=1, color="blue", weight=100, status="serving"),
                   {**endpoints, "schema": {"inputs": []}})
    return store


def test_status_reports_units_runs_and_an_interrupted_run(tmp_path: Path) -> None:
    store = _state(tmp_path, {"slot": 0})
    store.start_run(plan_red_black(store.live("m"), 2, [100]))  # left 'running': a command stopped mid-run
    [rep] = service.status(tmp_path)
    assert (rep.model, rep.target, rep.proxy) == ("m", "local", {"http_url": "http://127.0.0.1:9",
                                                                 "grpc_url": "127.0.0.1:8"})
    [unit] = rep.units
    assert (unit.name, unit.alive, unit.endpoints) == ("m-blue", False, {"slot": 0})  # no schema, not alive
    assert [r.status for r in rep.runs] == [service.INTERRUPTED]
    assert store.running_runs("m"), "status only shows the run as interrupted; the state keeps it for recover"
    cli = json.loads(CliRunner().invoke(app, ["status", "--state", str(tmp_path), "--json"]).output)
    assert cli == [rep.model_dump()]


def test_teardown_stops_the_recorded_group_and_retires_the_units(tmp_path: Path) -> None:
    proc = subprocess.Popen(["sleep", "60"], process_group=0)
    try:
        store = _state(tmp_path, {"slot": 0, **state_mod.identity_fields(proc.pid)})
        store.set_deployment("m", alias="m-blue")
        result = service.teardown(tmp_path, "m")
        assert proc.wait(timeout=15) is not None
        assert result.stopped == ["m-blue"] and any(n.endswith(": stopped") for n in result.notes), result
        assert [u["status"] for u in store.units_table("m")] == ["retired"]
        assert (store.deployment("m") or {})["alias"] is None
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_dry_run_manifests_are_the_new_unit_and_the_final_route(tmp_path: Path) -> None:
    from tritonpkg.deploy.drivers.package_store import archive_ref

    (tmp_path / "m" / "1").mkdir(parents=True)
    (tmp_path / "m" / "config.pbtxt").write_text('name: "m"\n')
    release = Release(model="m", version=1, repository=tmp_path, traffic_steps=[50, 100])
    k = service.KubernetesOptions(namespace="serving", gateway="gw", package_store="s3://packages/releases")
    archive = archive_ref("s3://packages/releases", "m", 1, "0" * 64)
    manifests = service.dry_run_manifests(plan_red_black(LiveState(model="m"), 1, [50, 100]), release, k, archive)
    assert [(m["kind"], m["metadata"]["name"]) for m in manifests] == [
        ("Secret", "m-triton-admin"), ("Deployment", "m-blue"), ("Service", "m-blue"), ("HTTPRoute", "m")]
    assert {m["metadata"]["namespace"] for m in manifests} == {"serving"}
    route = manifests[-1]["spec"]
    assert route["parentRefs"] == [{"name": "gw"}]
    assert route["rules"][-1]["backendRefs"] == [{"name": "m-blue", "port": 8000, "weight": 100}]
    versioned = service.dry_run_manifests(plan_versioned(LiveState(model="m"), 1), release, k, archive)[-1]["spec"]
    assert versioned["rules"][0]["matches"][0] == {"path": {"type": "PathPrefix", "value": "/v2/models/m/versions/1"}}


def test_unit_ports_come_from_the_base_three_per_slot_and_the_recorded_base_is_kept(tmp_path: Path) -> None:
    from tritonpkg.deploy.drivers.local import LocalDriver
    from tritonpkg.errors import TritonpkgError

    unit = Unit(name="m-blue", version=1)
    options = LocalDriver(tmp_path, unit_port_base=20000).unit_options(unit, tmp_path, slot=2)
    assert (options.http_port, options.grpc_port, options.metrics_port) == (20006, 20007, 20008)
    assert options.triton_metrics_port == 20008  # Triton's own metrics there: the unit has no merged /metrics
    from tritonpkg.serve import StartupOptions

    assert StartupOptions(source=tmp_path).triton_metrics_port == 0  # serve: the merged /metrics takes 8002
    assert LocalDriver(tmp_path).unit_ports(3) == (0, 0, 0)  # no base anywhere: free ports
    recorded = LocalDriver(tmp_path, proxy={"unit_port_base": 21000})
    assert recorded.unit_ports(1) == (21003, 21004, 21005)  # a later command, given none, keeps the deployment's
    assert LocalDriver(tmp_path, proxy={"unit_port_base": 21000}, unit_port_base=22000).unit_ports(0)[0] == 22000
    with pytest.raises(TritonpkgError) as err:
        LocalDriver(tmp_path, unit_port_base=65530)
    assert err.value.field == "--unit-port-base" and "1..65518" in str(err.value.expected)
    res = CliRunner().invoke(app, ["deploy", str(tmp_path), "--unit-port-base", "-1"])
    assert res.exit_code == 2 and "--unit-port-base" in res.output


def test_the_spec_can_set_the_unit_port_base_and_the_command_line_wins(write_spec, tmp_path: Path) -> None:
    from tritonpkg.deploy.drivers.local import LocalDriver
    from tritonpkg.deploy.release import release_from
    from tritonpkg.errors import TritonpkgError

    path = write_spec({"name": "m", "version": 1, "kind": "python", "deployment": {"unit_port_base": 23000},
                       "python": {"template": "custom", "parameters": {"module": "h.py"}, "files": ["h.py"],
                                  "inputs": [{"name": "X", "data_type": "FP32", "dims": [2]}],
                                  "outputs": [{"name": "Y", "data_type": "FP32", "dims": [2]}]}},
                      extra_files={"h.py": "def model(i):\n    return i\n"})
    release = release_from(path, tmp_path / "work")
    assert release.unit_port_base == 23000
    assert LocalDriver(tmp_path).port_base_for(release) == 23000
    assert LocalDriver(tmp_path, unit_port_base=24000).port_base_for(release) == 24000
    assert LocalDriver(tmp_path).port_base_for(release.model_copy(update={"unit_port_base": None})) == 0
    with pytest.raises(TritonpkgError) as err:
        LocalDriver(tmp_path).port_base_for(release.model_copy(update={"unit_port_base": 65530}))
    assert err.value.field == "deployment.unit_port_base"


def test_a_unit_serves_a_copy_of_its_own_and_a_rename_there_leaves_the_source(tmp_path: Path) -> None:
    from tritonpkg.deploy.drivers.local import serving_copy

    src = tmp_path / "repo"
    (src / "m" / "1" / "adapters" / "a").mkdir(parents=True)
    (src / "m" / "1" / "multi_lora.json").write_text('{"a": "./adapters/a"}\n')
    (src / "m" / "1" / "adapters" / "a" / "w.bin").write_bytes(b"\1" * 64)
    copy = serving_copy(src, tmp_path / "unit" / "repository")
    version = copy / "m" / "1"
    assert (version / "adapters" / "a" / "w.bin").stat().st_ino == (src / "m" / "1" / "adapters" / "a" /
                                                                     "w.bin").stat().st_ino  # linked, not copied
    assert not (version / "adapters").samefile(src / "m" / "1" / "adapters")  # folders of its own
    staged = version / ".multi_lora.json.next"
    staged.write_text("{}\n")
    staged.replace(version / "multi_lora.json")  # how the driver writes the served list
    (version / ".multi_lora.served.json").write_text("{}\n")
    assert (src / "m" / "1" / "multi_lora.json").read_text() == '{"a": "./adapters/a"}\n'
    assert sorted(p.name for p in (src / "m" / "1").iterdir()) == ["adapters", "multi_lora.json"]
