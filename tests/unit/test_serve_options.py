"""serve's Triton options and its interface rules: the checked pass-through, the shapes it accepts, the usage
errors (exit 2, naming the option) and what the plan says it will gate on; Triton's load log as start-up reads it."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from tritonpkg.cli import app
from tritonpkg.runtime.loading import LoadLog
from tritonpkg.serve import StartupOptions, TritonOptions
from tritonpkg.serve.plan import PackageFacts, plan_serve
from tritonpkg.serve.triton_options import OWNED, TritonOptionError, check_passthrough

runner = CliRunner()


def _serve(tmp_path: Path, *args: str):
    return runner.invoke(app, ["serve", str(tmp_path), *args])


@pytest.mark.parametrize("arg", ["--http-port=1", "--model-repository=/x", "--backend-directory=/b",
                                 "--http-restricted-api=model-repository:k=v", "--grpc-address=0.0.0.0",
                                 "--allow-metrics=false", "--log-verbose=2", "--exit-timeout-secs=1"])
def test_the_pass_through_refuses_what_the_toolkit_owns_with_exit_2_naming_it(tmp_path: Path, arg: str) -> None:
    result = _serve(tmp_path, f"--triton-arg={arg}")
    assert result.exit_code == 2, result.output
    name = arg.split("=", 1)[0]
    assert "--triton-arg" in result.output and name in result.output


def test_the_pass_through_keeps_other_options_as_given() -> None:
    assert check_passthrough("--metrics-config=summary_latencies=true") == "--metrics-config=summary_latencies=true"
    assert check_passthrough("--strict-model-config=false") == "--strict-model-config=false"
    options = TritonOptions(extra_args=("--log-info=false",), backend_config=("python,shm-default-byte-size=1048576",))
    assert options.server_args() == ["--backend-config=python,shm-default-byte-size=1048576", "--log-info=false"]
    with pytest.raises(TritonOptionError, match="not a tritonserver option"):
        check_passthrough("log-info=false")
    with pytest.raises(TritonOptionError, match="use --load-model"):
        check_passthrough("--load-model=x")
    assert set(OWNED) >= {"http-port", "grpc-port", "metrics-port", "model-repository", "backend-directory"}


@pytest.mark.parametrize("value", ["python", "python,", "python,key", ",key=value", "python,key=", "py thon,k=v"])
def test_backend_config_must_be_backend_key_value(tmp_path: Path, value: str) -> None:
    result = _serve(tmp_path, "--backend-config", value)
    assert result.exit_code == 2 and "--backend-config" in result.output and "BACKEND,KEY=VALUE" in result.output
    with pytest.raises(ValidationError, match="BACKEND,KEY=VALUE"):
        TritonOptions(backend_config=(value,))


def test_load_model_needs_explicit_model_control(tmp_path: Path) -> None:
    result = _serve(tmp_path, "--load-model", "adder")
    assert result.exit_code == 2 and "--load-model" in result.output and "explicit" in result.output
    with pytest.raises(ValidationError, match="explicit"):
        TritonOptions(model_control_mode="poll", load_models=("adder",))
    assert TritonOptions(model_control_mode="explicit", load_models=("adder",)).load_models == ("adder",)


def test_an_explicit_openai_port_with_no_openai_is_a_usage_error(tmp_path: Path) -> None:
    result = _serve(tmp_path, "--openai-port", "9100", "--no-openai")
    assert result.exit_code == 2 and "--openai-port" in result.output and "--no-openai" in result.output
    result = _serve(tmp_path, "--openai-port", "9100", "--mode", "separate")
    assert result.exit_code == 2 and "--openai-port" in result.output and "separate" in result.output


def test_unknown_model_control_mode_and_negative_verbosity_are_refused(tmp_path: Path) -> None:
    assert _serve(tmp_path, "--model-control-mode", "dynamic").exit_code == 2
    assert _serve(tmp_path, "--log-verbose", "-1").exit_code == 2


def test_the_plan_says_what_the_gate_waits_for_and_what_metrics_serves(tmp_path: Path) -> None:
    explicit = StartupOptions(source=tmp_path, triton=TritonOptions(model_control_mode="explicit",
                                                                    load_models=("adder",), metrics=False))
    steps = {s.kind: s.title for s in plan_serve(explicit, PackageFacts()).steps}
    assert "until adder is ready" in steps["triton"]
    assert "vLLM only" in steps["metrics"] and "off" in steps["metrics"]
    plain = {s.kind: s.title for s in plan_serve(StartupOptions(source=tmp_path), PackageFacts()).steps}
    assert "every model is ready" in plain["triton"] and "Triton + vLLM" in plain["metrics"]
    unit = plan_serve(StartupOptions(source=tmp_path, merged_metrics=False), PackageFacts())
    assert "metrics" not in unit.kinds and unit.kinds[-1] == "triton"


def test_startup_timeout_is_optional_and_positive(tmp_path: Path) -> None:
    assert StartupOptions(source=tmp_path).startup_timeout is None
    with pytest.raises(ValidationError):
        StartupOptions(source=tmp_path, startup_timeout=0)


TRITON_LOG = [
    'I1129 21:14:14.298368 5011 model_lifecycle.cc:472] "loading: good:1"',
    'I1129 21:14:14.298368 5011 model_lifecycle.cc:472] "loading: bad:1"',
    'I1129 21:14:16.100000 5011 model_lifecycle.cc:839] "successfully loaded \'good\'"',
    ('E1129 21:14:17.492670 5011 model_lifecycle.cc:642] "failed to load \'bad\' version 1: Internal: '
     'RuntimeError: boom"'),
]


def test_the_load_log_follows_each_model_across_partial_writes(tmp_path: Path) -> None:
    log = tmp_path / "triton.log"
    log.write_text("an earlier run's line: \"loading: old:1\"\n")
    watch = LoadLog(log, offset=log.stat().st_size)
    text = "\n".join(TRITON_LOG) + "\n"
    cut = text.index("successfully") + 5
    with open(log, "a") as fh:
        fh.write(text[:cut])
    models = watch.poll()
    assert {n: m.state for n, m in models.items()} == {"good": "loading", "bad": "loading"}
    with open(log, "a") as fh:
        fh.write(text[cut:])
    watch.poll()
    assert watch.models["good"].state == "loaded"
    [failed] = watch.failed()
    assert (failed.name, failed.version, failed.reason) == ("bad", "1", "Internal: RuntimeError: boom")
    assert not watch.loading()
