"""The start-up procedure: the pure plans (order, execution mode, OpenAI, plugins), the weights plan, and
the effects that fail before Triton starts (refused archive, missing weights) leaving nothing behind."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.paths import EXAMPLES
from tritonpkg.errors import RuntimeSetupError, TritonpkgError
from tritonpkg.serve.plan import PackageFacts, StartupOptions, packaged_serving, plan_serve, plan_startup
from tritonpkg.serve.weights import WeightsAction, ensure_weights, plan_weights

SERVE_ORDER = ["weights", "metrics_dir", "triton", "metrics"]


def options(**kw) -> StartupOptions:
    return StartupOptions(source=Path("pkg.tar.gz"), **kw)


def test_an_archive_is_unpacked_and_verified_before_anything_else() -> None:
    plan = plan_startup(options(), source_is_archive=True, facts=PackageFacts())
    assert plan.kinds == ["unpack", "verify", *SERVE_ORDER]
    assert (plan.execution_mode, plan.openai) == ("embedded", False)


def test_a_folder_is_only_compared_with_its_lock() -> None:
    assert plan_startup(options(), source_is_archive=False, facts=PackageFacts()).kinds == ["verify", *SERVE_ORDER]


def test_plugins_install_after_weights_and_before_the_metrics_dir_and_triton() -> None:
    plan = plan_serve(options(), PackageFacts(wheels=2))
    assert plan.kinds == ["weights", "plugins", "metrics_dir", "triton", "metrics"]
    assert "2 bundled" in plan.steps[1].title
    skipped = plan_serve(options(install_plugins=False), PackageFacts(wheels=2))
    assert "plugins" not in skipped.kinds and "--no-plugins" in skipped.notes[0]


def test_a_folder_cannot_install_wheels_only_an_archive_carries() -> None:
    plan = plan_serve(options(), PackageFacts(wheels=0, recorded_wheels=1))
    assert "plugins" not in plan.kinds
    assert "must already be installed" in plan.notes[0]


@pytest.mark.parametrize(
    ("cli", "packaged", "mode", "frontend"),
    [
        ({}, {}, "embedded", False),
        ({}, {"openai": True}, "embedded", True),
        ({"openai": False}, {"openai": True}, "embedded", False),
        ({"openai": True}, {}, "embedded", True),
        ({}, {"openai": True, "execution_mode": "separate"}, "separate", False),
        ({"execution_mode": "embedded"}, {"openai": True, "execution_mode": "separate"}, "embedded", True),
        ({"execution_mode": "separate", "openai": True}, {}, "separate", False),
    ],
)
def test_execution_mode_and_openai_come_from_the_package_unless_the_cli_says(cli, packaged, mode, frontend) -> None:
    plan = plan_serve(options(**cli), PackageFacts(**packaged))
    assert plan.execution_mode == mode
    assert ("frontend" in plan.kinds) is frontend
    if frontend:
        assert plan.kinds[-1] == "frontend"  # after Triton is ready and /metrics is open
    if plan.openai and not frontend:
        assert "tritonpkg frontend --triton-grpc" in plan.notes[0]


def test_packaged_serving_reads_every_model_of_the_lock() -> None:
    def lock(*servings):
        return {"models": {f"m{i}": {"versions": {"1": {"serving": s}}} for i, s in enumerate(servings)}}

    assert packaged_serving({"models": {"m": {"versions": {"1": {}}}}}) == (None, None)
    assert packaged_serving(lock({"execution_mode": "separate", "openai": False})) == ("separate", False)
    assert packaged_serving(lock({"execution_mode": "separate"}, {"execution_mode": "embedded", "openai": True},
                                 {"openai": False})) == ("embedded", True)


def test_options_refuse_bad_values() -> None:
    with pytest.raises(Exception, match="http_port"):
        options(http_port=70000)
    with pytest.raises(Exception, match="execution_mode"):
        options(execution_mode="sidecar")


# -- weights -------------------------------------------------------------------------------------


def test_weights_are_classified_from_model_json() -> None:
    plan = plan_weights({
        "a/1/model.json": {"model": "/srv/weights/a"},
        "b/1/model.json": {"model": "file:///srv/b"},
        "c/1/model.json": {"model": "s3://bucket/c"},
        "d/1/model.json": {"model": "org/name", "revision": "abc123"},
        "e/1/model.json": {"model": "./weights"},
        "f/1/model.json": {"model": "hf://org/f@main"},
    })
    assert plan == [
        WeightsAction("a/1/model.json", "local", "/srv/weights/a"),
        WeightsAction("b/1/model.json", "local", "/srv/b"),
        WeightsAction("c/1/model.json", "materialize", "s3://bucket/c"),
        WeightsAction("d/1/model.json", "materialize", "hf://org/name@abc123"),
        WeightsAction("e/1/model.json", "local", "e/1/weights"),
        WeightsAction("f/1/model.json", "materialize", "hf://org/f@main"),
    ]


@pytest.mark.parametrize("args", [{}, {"model": ""}, {"model": "not a path or id"}])
def test_weights_that_name_nothing_usable_are_refused(args) -> None:
    with pytest.raises(RuntimeSetupError) as info:
        plan_weights({"m/1/model.json": args})
    assert info.value.file == "m/1/model.json" and info.value.field == "model"


def test_missing_local_weights_name_the_model_json(tmp_path: Path) -> None:
    (tmp_path / "m" / "1").mkdir(parents=True)
    (tmp_path / "m" / "1" / "model.json").write_text(json.dumps({"model": str(tmp_path / "gone")}))
    with pytest.raises(RuntimeSetupError, match="weights not found") as info:
        ensure_weights(tmp_path, plan_weights({"m/1/model.json": {"model": str(tmp_path / "gone")}}), tmp_path / "w")
    assert info.value.file == str(tmp_path / "m" / "1" / "model.json")


def test_remote_weights_are_materialized_and_model_json_points_at_the_copy(tmp_path: Path) -> None:
    import fsspec

    fs = fsspec.filesystem("memory")
    fs.pipe("/startup-test/config.json", b'{"model_type": "llama"}')
    fs.pipe("/startup-test/model.safetensors", b"\1" * 4096)
    model_json = tmp_path / "repo" / "m" / "1" / "model.json"
    model_json.parent.mkdir(parents=True)
    model_json.write_text(json.dumps({"model": "memory://startup-test", "revision": "x", "max_model_len": 64}))
    actions = plan_weights({"m/1/model.json": json.loads(model_json.read_text())})
    [first] = ensure_weights(tmp_path / "repo", actions, tmp_path / "weights")
    local = Path(first.path)
    assert first.kind == "materialized" and local.is_relative_to(tmp_path / "weights")
    assert (local / "model.safetensors").read_bytes() == b"\1" * 4096
    assert json.loads(model_json.read_text()) == {"model": str(local), "max_model_len": 64}
    [again] = ensure_weights(tmp_path / "repo", actions, tmp_path / "weights")
    assert again.detail == "reused"


# -- effects that stop before Triton -------------------------------------------------------------


def test_a_refused_archive_stops_start_up_and_leaves_no_state(tmp_path: Path) -> None:
    from tritonpkg.repository import package_spec
    from tritonpkg.serve.stack import ServingStack
    from tritonpkg.spec import load_spec

    archive = package_spec(load_spec(EXAMPLES / "sentiment-custom"), tmp_path / "repo",
                           archive=tmp_path / "pkg.tar.gz").archive
    events = []
    stack = ServingStack(StartupOptions(source=archive, state_dir=tmp_path / "state", max_members=3),
                         on_event=events.append)
    with pytest.raises(TritonpkgError, match="more than 3 members"):
        stack.start()
    assert [(e.step.kind, e.state) for e in events] == [("unpack", "start")]
    assert stack.server is None
    assert list((tmp_path / "state").iterdir()) == []


def test_missing_weights_stop_start_up_before_triton(tmp_path: Path) -> None:
    from tritonpkg.serve.stack import ServingStack

    repo = tmp_path / "repo"
    (repo / "llm" / "1").mkdir(parents=True)
    (repo / "llm" / "config.pbtxt").write_text('name: "llm"\nbackend: "vllm"\n')
    (repo / "llm" / "1" / "model.json").write_text(json.dumps({"model": str(tmp_path / "nowhere")}))
    events = []
    with pytest.raises(RuntimeSetupError, match="weights not found"):
        ServingStack(StartupOptions(source=repo), on_event=events.append).start()
    assert [(e.step.kind, e.state) for e in events] == [("verify", "start"), ("verify", "warn"), ("weights", "start")]
    assert "no tritonpkg.lock.json" in events[1].detail


def test_a_bundled_plugin_that_does_not_fit_stops_start_up_before_installing(write_spec, tmp_path: Path) -> None:
    from tests.support.specs import HOOKS, custom_spec
    from tests.support.wheels import make_wheel
    from tritonpkg.plugins import PluginError
    from tritonpkg.repository import package_spec
    from tritonpkg.serve.stack import ServingStack
    from tritonpkg.spec import load_spec

    make_wheel(tmp_path / "spec", requires=("tritonpkg-test-absent-dist>=1",),
               entry_points={"vllm.logits_processors": {"demo": "demo_plugin:Processor"}})
    spec = load_spec(write_spec(custom_spec(1, plugins=[{"name": "demo-plugin",
                                                         "wheel": "demo_plugin-0.1.0-py3-none-any.whl"}]),
                                extra_files={"hooks.py": HOOKS}))
    archive = package_spec(spec, tmp_path / "repo", archive=tmp_path / "pkg.tar.gz").archive
    events = []
    with pytest.raises(PluginError, match="tritonpkg-test-absent-dist"):
        ServingStack(StartupOptions(source=archive), on_event=events.append).start()
    assert [e.step.kind for e in events if e.state == "start"] == ["unpack", "verify", "weights", "plugins"]
    import importlib.metadata

    with pytest.raises(importlib.metadata.PackageNotFoundError):
        importlib.metadata.version("demo-plugin")


def test_the_cli_help_states_the_library_defaults() -> None:
    from tritonpkg.serve.unpack import UnpackLimits

    assert UnpackLimits().max_members == 20000 and UnpackLimits().max_bytes == 4 << 30  # as --help says
    assert StartupOptions(source=Path("x")).max_members == UnpackLimits().max_members
