"""The OpenAI frontend's surface: the API key, the bounds on a request (body, headers, sequences) and a 4xx
in OpenAI's error shape for every client mistake. Real uvicorn on a real socket; the key's 200 through the
`openai` SDK against a real tritonserver (examples/sentiment-custom: seconds).

Before the fix: any token or none got 200; a 64 MiB Content-Length was read whole; megabytes of headers were
held (httptools has no bound); a lone surrogate or max_tokens = 2**64 was a 500; invalid JSON and deep nesting
were FastAPI's {"detail": ...} (param "[1]" for a JSON error's offset); 2,000 prompts x n=4 were accepted."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

import httpx
import pytest

from tests.support.paths import EXAMPLES

KEY = "test-key-0123456789abcdef"
AUTH = {"Authorization": f"Bearer {KEY}"}
LIMIT = 64 * 1024


@pytest.fixture(scope="module")
def bare():
    """The frontend with a key and a 64 KiB body limit, in front of no Triton: everything here is refused
    before a route would reach Triton."""
    from tritonpkg.frontend import FrontendServer, FrontendSettings

    settings = FrontendSettings(triton_grpc_url="127.0.0.1:1", port=0, api_key=KEY, max_request_bytes=LIMIT)
    with FrontendServer(settings) as fe:
        yield fe


def raw(port: int, head: bytes, body_chunks: list[bytes] = ()) -> bytes:
    """Send a request by hand (a lying Content-Length, a chunked body, huge headers) and read the answer."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(head)
        try:
            for chunk in body_chunks:
                sock.sendall(chunk)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server answered and closed before the rest: what it sent is still readable
        data = b""
        try:
            while b"\r\n\r\n" not in data or len(data) < data.index(b"\r\n\r\n") + 4 + _length(data):
                piece = sock.recv(65536)
                if not piece:
                    break
                data += piece
        except ConnectionResetError:
            pass
    return data


def _length(data: bytes) -> int:
    head = data.split(b"\r\n\r\n", 1)[0].lower()
    for line in head.split(b"\r\n"):
        if line.startswith(b"content-length:"):
            return int(line.split(b":", 1)[1])
    return 0


def status_and_error(response: bytes) -> tuple[int, dict]:
    head, _, body = response.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), json.loads(body)["error"]


def assert_openai_error(response: httpx.Response, status: int, param: str | None) -> dict:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"}, body  # never FastAPI's {"detail": ...}
    error = body["error"]
    assert isinstance(error["message"], str) and error["message"], body
    assert error["type"] == "invalid_request_error" and error["param"] == param, body
    return error


# -- the API key ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer wrong-key"}, {"Authorization": KEY},
                                     {"Authorization": f"Basic {KEY}"}, {"Authorization": f"Bearer {KEY}x"}])
def test_every_v1_route_without_the_key_is_a_401_in_openai_shape(bare, headers):
    for method, path in (("GET", "/v1/models"), ("POST", "/v1/completions"), ("POST", "/v1/chat/completions"),
                         ("POST", "/v1/embeddings"), ("POST", "/v1/rerank"), ("POST", "/v1/unknown")):
        response = httpx.request(method, bare.url + path, headers=headers, json={"model": "m"}, timeout=10)
        error = assert_openai_error(response, 401, None)
        assert error["code"] == "invalid_api_key" and KEY not in response.text
        assert response.headers["www-authenticate"] == "Bearer"


def test_health_and_the_api_description_stay_open_and_document_the_bearer_scheme(bare):
    assert httpx.get(bare.url + "/health/live", timeout=10).json() == {"status": "live"}
    assert httpx.get(bare.url + "/health/ready", timeout=10).status_code == 503  # open, and Triton is not there
    spec = httpx.get(bare.url + "/openapi.json", timeout=10).json()
    schemes = spec["components"]["securitySchemes"]
    assert [s["scheme"] for s in schemes.values()] == ["bearer"]
    for path, item in spec["paths"].items():
        for operation in item.values():
            assert bool(operation.get("security")) == path.startswith("/v1/"), path
            assert ("401" in operation["responses"]) == path.startswith("/v1/"), path


@pytest.mark.integration
def test_the_openai_sdk_gets_authentication_error_without_the_key_and_200_with_it(tmp_path):
    import openai

    from tritonpkg.frontend import FrontendServer, FrontendSettings
    from tritonpkg.repository import package_spec
    from tritonpkg.runtime import TritonServer, ensure_runtime
    from tritonpkg.spec import load_spec

    repo = tmp_path / "repository"
    package_spec(load_spec(EXAMPLES / "sentiment-custom"), repo)
    with TritonServer(repo, runtime=ensure_runtime(), startup_timeout=120) as triton, \
            FrontendServer(FrontendSettings(triton_grpc_url=triton.grpc_url, port=0, model_repository=repo,
                                            triton_admin_key=triton.admin_key, api_key=KEY)) as fe:
        for wrong in ("", "sk-not-the-key"):
            client = openai.OpenAI(base_url=f"{fe.url}/v1", api_key=wrong or "x", max_retries=0, timeout=30,
                                   default_headers={"Authorization": ""} if not wrong else None)
            with pytest.raises(openai.AuthenticationError) as info:
                client.models.list()
            assert info.value.status_code == 401 and info.value.code == "invalid_api_key"
        models = openai.OpenAI(base_url=f"{fe.url}/v1", api_key=KEY, max_retries=0, timeout=30).models.list()
        assert models.data == []  # a custom Python model is not an OpenAI model; the call itself is allowed


def test_a_key_file_readable_by_others_is_refused(tmp_path):
    from tritonpkg.frontend.auth import ApiKeyError, load_api_key

    path = tmp_path / "key"
    path.write_text(KEY + "\n")
    path.chmod(0o644)
    with pytest.raises(ApiKeyError, match="readable or writable by others") as info:
        load_api_key(None, path)
    assert info.value.field == "--api-key-file" and "chmod 600" in info.value.render()
    path.chmod(0o600)
    assert load_api_key(None, path) == KEY
    link = tmp_path / "link"
    link.symlink_to(path)
    with pytest.raises(ApiKeyError, match="cannot open"):
        load_api_key(None, link)
    with pytest.raises(ApiKeyError, match="once"):
        load_api_key(KEY, path)
    for bad in ("has space", "é-key", "x" * 2000):
        with pytest.raises(ApiKeyError):
            load_api_key(bad, None)


def test_an_empty_key_never_means_no_key():
    from tritonpkg.frontend import FrontendSettings
    from tritonpkg.frontend.auth import ApiKeyError

    with pytest.raises(ApiKeyError):
        FrontendSettings(api_key="")


def run_frontend_cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """`tritonpkg frontend` against no Triton: it prints its warnings, starts, fails to list models, exits 1."""
    return subprocess.run([sys.executable, "-m", "tritonpkg", "frontend", "--triton-grpc", "127.0.0.1:1",
                           "--port", "0", *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, **(env or {})}, check=False)


def test_the_cli_refuses_a_world_readable_key_file_in_one_line(tmp_path):
    path = tmp_path / "key"
    path.write_text(KEY)
    path.chmod(0o604)
    done = run_frontend_cli("--api-key-file", str(path))
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "readable or writable by others" in lines[0] and str(path) in lines[0], done.stderr


def test_a_public_address_without_a_key_is_warned_about(tmp_path):
    from tritonpkg.serve.plan import PackageFacts, StartupOptions, plan_serve

    done = run_frontend_cli("--host", "0.0.0.0")
    assert "warning:" in done.stderr and "without an API key" in done.stderr, done.stderr
    quiet = run_frontend_cli("--host", "0.0.0.0", env={"TRITONPKG_API_KEY": KEY})
    assert "without an API key" not in quiet.stderr, quiet.stderr
    loopback = run_frontend_cli("--host", "127.0.0.1")
    assert "without an API key" not in loopback.stderr, loopback.stderr

    facts = PackageFacts(openai=True)
    notes = plan_serve(StartupOptions(source=tmp_path, host="0.0.0.0"), facts).notes
    assert any("without an API key" in n and "every interface" in n for n in notes), notes
    assert not any("API key" in n for n in plan_serve(StartupOptions(source=tmp_path, host="0.0.0.0",
                                                                     openai_api_key=KEY), facts).notes)


# -- bounded requests ---------------------------------------------------------------------------------------

def test_a_body_over_the_limit_is_a_413_without_being_read(bare):
    head = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nAuthorization: Bearer "
            + KEY.encode() + b"\r\n")
    began = time.monotonic()
    status, error = status_and_error(raw(bare.port, head + b"Content-Length: 67108864\r\n\r\n"))  # no body sent
    assert status == 413 and error["code"] == "request_too_large" and str(LIMIT) in error["message"]
    assert time.monotonic() - began < 5  # answered on the header, not after waiting for 64 MiB

    chunk = b"%x\r\n%s\r\n" % (16 * 1024, b"a" * 16 * 1024)
    status, error = status_and_error(raw(bare.port, head + b"Transfer-Encoding: chunked\r\n\r\n",
                                         [chunk] * (LIMIT // (16 * 1024) + 1)))
    assert status == 413 and error["type"] == "invalid_request_error"

    fits = {"model": "m", "prompt": "a" * (LIMIT - 100)}  # within the limit: it reaches validation and the route
    assert httpx.post(bare.url + "/v1/completions", json=fits, headers=AUTH, timeout=30).status_code == 503
    text = json.dumps(fits).encode()
    pieces = [b"%x\r\n%s\r\n" % (len(text[i:i + 8192]), text[i:i + 8192]) for i in range(0, len(text), 8192)]
    status, error = status_and_error(raw(bare.port, head + b"Transfer-Encoding: chunked\r\n\r\n",
                                         [*pieces, b"0\r\n\r\n"]))
    assert status == 503 and "unreachable" in error["message"]  # a chunked body within the limit is served whole


def test_header_bounds(bare):
    many = {f"x-h{i}": "1" for i in range(300)}
    response = httpx.get(bare.url + "/health/live", headers=many, timeout=10)
    assert response.status_code == 431 and response.json()["error"]["code"] == "too_many_headers"

    long_head = b"GET /health/live HTTP/1.1\r\nHost: x\r\n"
    status, error = status_and_error(raw(bare.port, long_head, [b"X-Big: " + b"b" * 1000 + b"\r\n"] * 200))
    assert status == 431 and error["code"] == "headers_too_large"
    assert httpx.get(bare.url + "/health/live", timeout=10).status_code == 200  # the server is fine


# -- a 4xx in OpenAI's shape for every client mistake ----------------------------------------------------------

SURROGATE = '"hi \\ud800"'
CHAT = '{"model": "m", "messages": [{"role": "user", "content": "a"}, {"role": "user", "content": %s}]}'


@pytest.mark.parametrize(("route", "body", "status", "param", "says"), [
    ("/v1/completions", f'{{"model": "m", "prompt": {SURROGATE}}}', 400, "prompt", "surrogate"),
    ("/v1/chat/completions", CHAT % SURROGATE, 400, "messages.1.content", "surrogate"),
    ("/v1/chat/completions", CHAT % "5", 400, "messages.1.content", "string"),
    ("/v1/completions", f'{{"model": "m", "prompt": "x", "max_tokens": {2**64}}}', 400, "max_tokens", "64-bit"),
    ("/v1/completions", f'{{"model": "m", "prompt": "x", "max_tokens": {2**63}}}', 400, "max_tokens", "64-bit"),
    ("/v1/completions", f'{{"model": "m", "prompt": "x", "seed": -{2**63 + 1}}}', 400, "seed", "64-bit"),
    ("/v1/completions", '{"model": "m", "prompt": "x", "temperature": NaN}', 400, "temperature", "finite"),
    ("/v1/completions", '{"model": "m", "prompt": "x", "max_tokens": 0}', 400, "max_tokens", "max_tokens"),
    ("/v1/completions", '{"model": "m", "prompt": "x",}', 400, None, "not valid JSON"),
    ("/v1/completions", "[" * 50_000, 400, None, "nested too deeply"),
    ("/v1/completions", '{{"model": "m", "prompt": "x", "vllm_xargs": {}1{}}}'.format('{"a": ' * 100, "}" * 100), 400,
     "vllm_xargs", "nested"),
    ("/v1/completions", '"a string"', 400, None, "JSON object"),
    ("/v1/completions", '{{"model": "m", "prompt": {}, "n": 4}}'.format(json.dumps(["a"] * 100)), 400, "n",
     "sequences"),
    ("/v1/completions", '{{"model": "m", "prompt": {}, "n": 4}}'.format(json.dumps(["a"] * 2000)), 400, "prompt",
     "sequences"),
    ("/v1/embeddings", '{{"model": "m", "input": {}}}'.format(json.dumps(["a"] * 3000)), 400, "input", "2048"),
    ("/v1/rerank", '{{"model": "m", "query": "q", "documents": {}}}'.format(json.dumps(["a"] * 3000)), 400, "documents",
     "2048"),
    ("/v1/embeddings", f'{{"model": "m", "input": "x", "dimensions": {2**70}}}', 400, "dimensions", "64-bit"),
    ("/v1/completions", '{"model": "m", "prompt": "x", "logit_bias": {"%s": 1}}' % ("9" * 5000), 400, "logit_bias",
     "5000 characters"),  # int() of it raised ValueError: a 500
    ("/v1/completions", '{"model": "m", "prompt": "x", "logit_bias": {"\u00b2": 1}}', 400, "logit_bias", "token ids"),
])
def test_every_client_mistake_is_a_4xx_in_openai_shape(bare, route, body, status, param, says):
    response = httpx.post(bare.url + route, content=body.encode(), timeout=30,
                          headers={**AUTH, "Content-Type": "application/json"})
    error = assert_openai_error(response, status, param)
    assert says in error["message"], error


@pytest.mark.parametrize(("method", "path", "status"), [("GET", "/v1/completions", 405), ("POST", "/v1/nothing", 404),
                                                  ("GET", "/nothing", 404)])
def test_unknown_routes_and_methods_answer_in_openai_shape(bare, method, path, status):
    response = httpx.request(method, bare.url + path, headers=AUTH, timeout=10)
    assert_openai_error(response, status, None)

