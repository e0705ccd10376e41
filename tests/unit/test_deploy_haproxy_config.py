"""What the local target's HAProxy configuration replays when a unit fails, read from the rendered text
(the behaviour itself is measured against a real HAProxy in tests/integration/test_deploy_haproxy.py and
test_deploy_unit_death.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tritonpkg.deploy.drivers import haproxy


def render(tmp_path: Path, **kw: object) -> str:
    return haproxy.render_config(http_port=18000, grpc_port=18001, socket_path=tmp_path / "s.sock",
                                 map_path=tmp_path / "r.map", slots=2, **kw)


def frontend(text: str, name: str) -> str:
    return text.split(f"frontend {name}\n", 1)[1].split("\n\n", 1)[0]


@pytest.mark.parametrize(("path", "replayable"), [
    ("/v2/models/echo/infer", True),
    ("/v2/models/echo/versions/3/infer", True),
    ("/v2/models/echo/generate", True),
    ("/v2/models/echo/generate_stream", True),
    ("/v2/models/echo/versions/3/generate_stream", True),
    ("/v2/repository/models/echo/load", False),
    ("/v2/repository/models/echo/unload", False),
    ("/v2/systemsharedmemory/region/r/register", False),
    ("/v2/models/echo/trace/setting", False),
    ("/v2/logging", False),
    ("/v2/models/echo/infer/extra", False),
    ("/v2/models/a/b/infer", False),
])
def test_only_inference_posts_are_replayable(path: str, replayable: bool) -> None:
    assert bool(re.search(haproxy._HTTP_REPLAYABLE, path)) is replayable


def test_each_frontend_holds_replayable_requests_whole_and_replays_nothing_else(tmp_path: Path) -> None:
    text = render(tmp_path)
    http, grpc = frontend(text, "http_in"), frontend(text, "grpc_in")
    assert "http-request wait-for-body time 1000ms if METH_GET || METH_POST inference" in http
    assert "http-request disable-l7-retry unless METH_GET || METH_POST inference" in http
    assert "http-request wait-for-body time 1000ms if replayable" in grpc
    assert "http-request disable-l7-retry unless replayable" in grpc
    grpc_paths = next(ln for ln in grpc.splitlines() if "acl replayable path" in ln).split()[3:]
    assert "/inference.GRPCInferenceService/ModelInfer" in grpc_paths
    assert not {p for p in grpc_paths if p.rsplit("/", 1)[1] in (
        "ModelStreamInfer", "RepositoryModelLoad", "RepositoryModelUnload", "SystemSharedMemoryRegister",
        "CudaSharedMemoryRegister", "TraceSetting", "LogSettings")}
    # the rules sit before use_backend, where HAProxy evaluates them
    assert http.index("disable-l7-retry") < http.index("use_backend")


def test_retries_cover_a_dead_unit_but_not_a_slow_one(tmp_path: Path) -> None:
    text = render(tmp_path, retry=haproxy.RetryPolicy(retries=2, buffer_kib=128))
    retry_on = next(ln for ln in text.splitlines() if ln.strip().startswith("retry-on")).split()[1:]
    assert {"conn-failure", "empty-response", "junk-response", "404", "502", "503"} <= set(retry_on)
    assert "response-timeout" not in retry_on
    assert "    retries 2\n" in text and "    option redispatch 1\n" in text
    assert "    tune.bufsize 131072\n" in text


def test_without_a_body_wait_nothing_is_held(tmp_path: Path) -> None:
    text = render(tmp_path, retry=haproxy.RetryPolicy(body_wait_ms=None))
    assert "wait-for-body" not in text and text.count("disable-l7-retry") == 2


@pytest.mark.parametrize(("model", "expected"), [
    (None, "/v2/health/ready"),
    ("tiny_llm", "/v2/models/tiny_llm/ready"),
    ("a b#c;d", "/v2/models/a%20b%23c%3Bd/ready"),
])
def test_checks_read_the_deployed_models_readiness_as_one_token(tmp_path: Path, model: str | None,
                                                                expected: str) -> None:
    """A dead engine unloads its model, after which /v2/health/ready is true again: the checks must read the
    model's own readiness, and a hostile name must not break the line (HAProxy itself parses the result)."""
    text = render(tmp_path, model=model)
    [line] = [ln for ln in text.splitlines() if "option httpchk" in ln]
    assert line.split() == ["option", "httpchk", "GET", expected]
    cfg = tmp_path / "h.cfg"
    cfg.write_text(text)
    (tmp_path / "r.map").write_text("")
    import subprocess

    res = subprocess.run([haproxy.find_haproxy(), "-c", "-q", "-f", str(cfg)], capture_output=True, text=True,
                         check=False, timeout=30)
    assert res.returncode == 0, res.stdout + res.stderr
