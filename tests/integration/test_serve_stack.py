"""`tritonpkg serve ARCHIVE --openai` end to end, one real stack for the module: a package archive holding
the tiny LLM (real vLLM, metrics on, weights in a real S3 API) and a Python model whose load sleeps,
served by the CLI in a subprocess.

While it starts, pollers hammer the public HTTP, gRPC and metrics ports: each attempt must be refused
or fully successful, never an error from a half-loaded server. Once up, Debian's real Prometheus scrapes
the merged /metrics and is queried for a vLLM series and a Triton series through its HTTP API."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from tests.support.cli import read_json_document, tritonpkg
from tests.support.paths import EXAMPLES
from tests.support.procs import group_pids
from tritonpkg.proc.group import own_group
from tritonpkg.proc.ports import free_ports

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PROMETHEUS = Path("/usr/bin/prometheus")
SLOW_HOOKS = """
import time


def load_model(context):
    time.sleep(4)  # a model that takes a while to load: the ports must stay closed meanwhile
    return lambda inputs: {"Y": inputs["X"] + 1}
"""
SLOW_SPEC = {
    "name": "slow_loader", "version": 1, "kind": "python",
    "python": {"template": "custom", "parameters": {"module": "hooks.py", "model": "load_model", "factory": True},
               "files": ["hooks.py"],
               "inputs": [{"name": "X", "data_type": "FP32", "dims": [2]}],
               "outputs": [{"name": "Y", "data_type": "FP32", "dims": [2]}]},
}


BUCKET = "serve-stack-weights"


@pytest.fixture(scope="module")
def archive(tmp_path_factory, s3_server, tiny_llm_weights) -> Path:
    """One package archive (the layout `package --archive` writes) with both models and their lock; the
    LLM's weights live in a real S3 API (moto server), so serving must materialize them first."""
    from tritonpkg.repository import archive as archive_mod
    from tritonpkg.repository import package_spec
    from tritonpkg.spec import load_spec

    root = tmp_path_factory.mktemp("serve-stack")
    weights = tiny_llm_weights
    llm = yaml.safe_load((EXAMPLES / "tiny-llm" / "tritonpkg.yaml").read_text())
    s3 = s3_server.client()
    s3.create_bucket(Bucket=BUCKET)
    for path in sorted(weights.rglob("*")):
        if path.is_file():
            s3.upload_file(str(path), BUCKET, f"tiny-llm/{path.relative_to(weights).as_posix()}")
    llm["weights"] = f"s3://{BUCKET}/tiny-llm"
    llm["engine_args"]["disable_log_stats"] = False  # vLLM records its metrics
    repo = root / "repository"
    for name, data, files in (("llm", llm, {}), ("slow", SLOW_SPEC, {"hooks.py": SLOW_HOOKS})):
        folder = root / name
        folder.mkdir()
        for fname, text in files.items():
            (folder / fname).write_text(text)
        (folder / "tritonpkg.yaml").write_text(yaml.safe_dump(data))
        package_spec(load_spec(folder), repo)
    files = {p.relative_to(repo).as_posix(): p.read_bytes() for p in sorted(repo.rglob("*")) if p.is_file()}
    path = root / "models.tar.gz"
    archive_mod.write(path, files, {})
    return path


@dataclass
class Poller:
    """Polls one public port until stopped; every attempt is 'refused', 'ok' or a bad outcome kept verbatim."""

    name: str
    port: int
    probe: object  # callable() -> bool, run only once the TCP connect succeeded
    outcomes: list[str] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=2).close()
            except ConnectionRefusedError:
                self.outcomes.append("refused")
                time.sleep(0.05)
                continue
            except OSError as exc:
                self.outcomes.append(f"connect: {exc!r}")
                continue
            try:
                self.outcomes.append("ok" if self.probe() else "probe returned False")
            except urllib.error.HTTPError as exc:
                self.outcomes.append(f"HTTP {exc.code}: {exc.read()[:200]!r}")
            except Exception as exc:
                self.outcomes.append(f"{type(exc).__name__}: {exc}")
            time.sleep(0.5)  # open now: keep checking, without taking the CPU the rest of start-up needs

    @property
    def bad(self) -> list[str]:
        return [o for o in self.outcomes if o not in ("refused", "ok")]


def http_ready(port: int) -> bool:
    """Ready, and a real inference on the slow model answers (the first connection must get a result)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/health/ready", timeout=5) as resp:
        if resp.status != 200:
            return False
    body = {"inputs": [{"name": "X", "shape": [2], "datatype": "FP32", "data": [1.0, 2.0]}]}
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v2/models/slow_loader/infer",
                                 data=json.dumps(body).encode(), method="POST")
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.loads(resp.read())["outputs"][0]["data"] == [2.0, 3.0]


def grpc_ready(port: int) -> bool:
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(f"127.0.0.1:{port}")
    try:
        return client.is_server_ready() and client.is_model_ready("tiny_llm") and client.is_model_ready("slow_loader")
    finally:
        client.close()


METRICS_TOKEN = "serve-stack-metrics-token-0123456789"
BEARER = {"Authorization": f"Bearer {METRICS_TOKEN}"}


def metrics_ok(port: int) -> bool:
    req = urllib.request.Request(f"http://127.0.0.1:{port}/metrics", headers=BEARER)
    with urllib.request.urlopen(req, timeout=15) as resp:  # > the 8 s fetch budget
        return resp.status == 200 and b"nv_inference_request_success" in resp.read()


def openai_ready(port: int) -> bool:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/health/ready", timeout=5) as resp:
        return resp.status == 200


@pytest.fixture(scope="module")
def stack(archive, tmp_path_factory, s3_server):
    """The CLI serving the archive, with the pollers' record of its start-up."""
    http, grpc, metrics, openai = free_ports(4)
    env = {**os.environ, **s3_server.env, "VLLM_CPU_KVCACHE_SPACE": "1", "NO_COLOR": "1", "COLUMNS": "200",
           "TRITONPKG_API_KEY": OPENAI_KEY, "TRITONPKG_METRICS_TOKEN": METRICS_TOKEN}
    weights_root = tmp_path_factory.mktemp("weights-root")
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    pollers = [Poller("http", http, lambda: http_ready(http)), Poller("grpc", grpc, lambda: grpc_ready(grpc)),
               Poller("metrics", metrics, lambda: metrics_ok(metrics)),
               Poller("openai", openai, lambda: openai_ready(openai))]
    threads = [threading.Thread(target=p.run, daemon=True) for p in pollers]
    for t in threads:
        t.start()
    started = time.monotonic()
    proc = subprocess.Popen(
        tritonpkg("serve", str(archive), "--http-port", str(http), "--grpc-port", str(grpc), "--metrics-port",
                  str(metrics), "--openai", "--openai-port", str(openai), "--timeout", "300", "--weights-root",
                  str(weights_root), "--state-dir", str(tmp_path_factory.mktemp("state")), "--json"),
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **own_group())
    try:
        try:
            info = read_json_document(proc.stdout)
        except AssertionError:
            proc.wait(timeout=60)
            raise AssertionError(f"serve exited {proc.returncode}:\n{proc.stderr.read()[-4000:]}") from None
        ready_after = time.monotonic() - started
        time.sleep(1.0)  # keep polling the open ports a little
        for p in pollers:
            p.stop.set()
        for t in threads:
            t.join(timeout=15)
        print(f"serve ready after {ready_after:.1f} s; steps {info['steps']}; polls "
              + ", ".join(f"{p.name}: {p.outcomes.count('refused')} refused / {p.outcomes.count('ok')} ok"
                          for p in pollers))
        yield {"proc": proc, "info": info, "pollers": {p.name: p for p in pollers},
               "ports": {"http": http, "grpc": grpc, "metrics": metrics, "openai": openai},
               "weights_root": weights_root}
    finally:
        for p in pollers:
            p.stop.set()
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def test_public_ports_are_refused_until_every_model_is_ready(stack) -> None:
    for name, poller in stack["pollers"].items():
        assert poller.bad == [], f"{name}: a client saw the half-started server: {poller.bad[:5]}"
        assert "refused" in poller.outcomes, f"{name}: never polled during start-up"
        assert "ok" in poller.outcomes, f"{name}: never answered after start-up"
        first_ok = poller.outcomes.index("ok")
        assert "refused" not in poller.outcomes[first_ok:], f"{name}: closed again after opening"
    info = stack["info"]
    assert {m["name"] for m in info["models"]} == {"tiny_llm", "slow_loader"}
    assert [s["step"] for s in info["steps"]] == ["unpack", "verify", "weights", "metrics_dir", "triton", "metrics",
                                                  "frontend"]
    assert info["metrics_url"] == f"http://127.0.0.1:{stack['ports']['metrics']}/metrics"
    assert info["execution_mode"] == "embedded"
    assert info["openai_url"] == f"http://127.0.0.1:{stack['ports']['openai']}/v1"
    internal = urllib.parse.urlsplit(info["triton_metrics_url"])
    assert internal.hostname == "127.0.0.1" and internal.port != stack["ports"]["metrics"]


def test_s3_weights_were_materialized_and_vllm_loaded_the_local_copy(stack) -> None:
    [weights] = stack["info"]["weights"]
    assert weights["model_json"] == "tiny_llm/1/model.json"
    assert (weights["kind"], weights["source"]) == ("materialized", f"s3://{BUCKET}/tiny-llm")
    local = Path(weights["path"])
    assert local.is_relative_to(stack["weights_root"]) and (local / "config.json").is_file()
    served = json.loads((Path(stack["info"]["repository"]) / "tiny_llm" / "1" / "model.json").read_text())
    assert served["model"] == str(local)
    assert generate(stack["ports"]["http"], "hello")["text_output"]


def generate(port: int, prompt: str) -> dict:
    body = {"text_input": prompt, "sampling_parameters": json.dumps({"max_tokens": 8, "temperature": 0})}
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v2/models/tiny_llm/generate",
                                 data=json.dumps(body).encode(), method="POST")
    with urllib.request.urlopen(req, timeout=120) as resp:
        return json.loads(resp.read())


@pytest.fixture(scope="module")
def prometheus(stack, tmp_path_factory):
    """Debian's Prometheus scraping the public metrics port every second."""
    if not PROMETHEUS.exists():
        pytest.fail(f"{PROMETHEUS} is missing: scripts/setup.sh installs Debian's prometheus")
    root = tmp_path_factory.mktemp("prometheus")
    (root / "prometheus.yml").write_text(yaml.safe_dump({
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "scrape_configs": [{"job_name": "tritonpkg", "authorization": {"credentials": METRICS_TOKEN},
                            "static_configs": [
            {"targets": [f"127.0.0.1:{stack['ports']['metrics']}"]}]}],
    }))
    [port] = free_ports(1)
    with open(root / "prometheus.log", "wb") as log:  # the child keeps its own copy of the descriptor
        proc = subprocess.Popen([str(PROMETHEUS), f"--config.file={root / 'prometheus.yml'}",
                                 f"--storage.tsdb.path={root / 'data'}", f"--web.listen-address=127.0.0.1:{port}"],
                                stdout=subprocess.DEVNULL, stderr=log, **own_group())
    try:
        yield f"http://127.0.0.1:{port}", root / "prometheus.log"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def query(base: str, promql: str) -> list[dict]:
    url = f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return json.loads(resp.read())["data"]["result"]
    except OSError:
        return []  # Prometheus still starting


def test_prometheus_scrapes_vllm_and_triton_series_from_one_endpoint(stack, prometheus) -> None:
    base, log = prometheus
    for prompt in ("hello", "hello world", "a third prompt"):
        assert generate(stack["ports"]["http"], prompt)["text_output"]
    wanted = {
        "vllm": 'sum(vllm:prompt_tokens_total{model_name=~".+"})',
        "triton": 'nv_inference_request_success{model="tiny_llm"}',
        "up": 'up{job="tritonpkg"}',
    }
    found: dict[str, list] = {}
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and len(found) < len(wanted):
        for key, promql in wanted.items():
            result = query(base, promql)
            if result and float(result[0]["value"][1]) >= (3 if key != "up" else 1):
                found[key] = result
        time.sleep(0.5)
    assert set(found) == set(wanted), f"missing {set(wanted) - set(found)}; prometheus log:\n{log.read_text()[-2000:]}"
    assert float(found["triton"][0]["value"][1]) >= 3
    assert float(found["vllm"][0]["value"][1]) >= 3  # at least one prompt token per request


OPENAI_KEY = "serve-stack-openai-key-0123456789"


def test_the_embedded_openai_api_answers_through_triton(stack) -> None:
    """With the key serve was given (TRITONPKG_API_KEY); without it, a 401 the SDK raises."""
    from openai import AuthenticationError, OpenAI

    assert stack["info"]["openai_auth"] == "bearer"
    with pytest.raises(AuthenticationError):
        OpenAI(base_url=stack["info"]["openai_url"], api_key="not-the-key", max_retries=0, timeout=60).models.list()
    client = OpenAI(base_url=stack["info"]["openai_url"], api_key=OPENAI_KEY, timeout=120)
    assert "tiny_llm" in {m.id for m in client.models.list()}
    completion = client.completions.create(model="tiny_llm", prompt="hello", max_tokens=5, temperature=0)
    assert completion.choices[0].text and completion.usage.completion_tokens >= 1


def test_tritons_admin_apis_need_the_key_serve_printed(stack) -> None:
    """Model control and logging through serve's own ports only with its admin key (the embedded OpenAI API
    lists models through the repository index with it: test above)."""
    info, url = stack["info"], f"http://127.0.0.1:{stack['ports']['http']}"
    for headers, wanted in (({}, 403), ({"admin-key": info["admin_key"]}, 200)):
        req = urllib.request.Request(url + "/v2/logging", data=b'{"log_verbose_level": 0}', method="POST",
                                     headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:
                status = resp.status
        except urllib.error.HTTPError as exc:
            status = exc.code
        assert status == wanted, headers
    assert Path(info["admin_key_file"]).stat().st_mode & 0o077 == 0


def test_merged_text_has_every_family_once(stack) -> None:
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(stack["info"]["metrics_url"], timeout=10)
    assert refused.value.code == 401 and stack["info"]["metrics_auth"] == "bearer"
    with urllib.request.urlopen(urllib.request.Request(stack["info"]["metrics_url"], headers=BEARER),
                                timeout=10) as resp:
        text = resp.read().decode()
    families = [line.split()[2] for line in text.splitlines() if line.startswith("# TYPE ")]
    assert len(families) == len(set(families)), sorted(f for f in families if families.count(f) > 1)
    assert {"nv_inference_request_success", "vllm:num_requests_running", "vllm:time_to_first_token_seconds",
            "vllm:kv_cache_usage_perc"} <= set(families)
    assert 'tritonpkg_metrics_source_up{source="triton"} 1' in text


def test_sigterm_stops_everything_and_closes_every_port(stack) -> None:
    proc, info = stack["proc"], stack["info"]
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 0, proc.stderr.read()[-3000:]
    assert group_pids(info["pid"]) == []
    assert group_pids(proc.pid) == []
    for port in stack["ports"].values():
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), timeout=2).close()


def test_an_unsafe_archive_is_refused_by_the_cli(tmp_path: Path) -> None:
    import gzip
    import io
    import tarfile

    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        info = tarfile.TarInfo("../../escaped.txt")
        info.size = 1
        tar.addfile(info, io.BytesIO(b"x"))
    evil = tmp_path / "evil.tar.gz"
    evil.write_bytes(gzip.compress(raw.getvalue()))
    state = tmp_path / "state"
    out = subprocess.run(tritonpkg("serve", str(evil), "--state-dir", str(state), "--http-port", "0",
                                   "--grpc-port", "0", "--metrics-port", "0"),
                         capture_output=True, text=True, timeout=60, env={**os.environ, "COLUMNS": "200"}, check=False)
    assert out.returncode == 1
    assert "evil.tar.gz" in out.stderr and "breaks the path rule: a '..' segment" in out.stderr
    assert list(state.iterdir()) == [] and not (tmp_path.parent / "escaped.txt").exists()


def children_of(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.append(int(entry.name))
    return found


def test_sigterm_during_start_up_aborts_it_and_leaves_nothing(tmp_path: Path) -> None:
    from tritonpkg.repository import package_spec
    from tritonpkg.spec import load_spec

    spec_dir = tmp_path / "spec"
    spec_dir.mkdir()
    (spec_dir / "hooks.py").write_text(SLOW_HOOKS.replace("time.sleep(4)", "time.sleep(120)"))
    (spec_dir / "tritonpkg.yaml").write_text(yaml.safe_dump({**SLOW_SPEC, "name": "never_ready"}))
    archive = package_spec(load_spec(spec_dir), tmp_path / "repo", archive=tmp_path / "pkg.tar.gz").archive
    state = tmp_path / "state"
    http = free_ports(1)[0]
    proc = subprocess.Popen(tritonpkg("serve", str(archive), "--state-dir", str(state), "--http-port", str(http),
                                      "--grpc-port", "0", "--metrics-port", "0", "--timeout", "300"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **own_group(),
                            env={**os.environ, "NO_COLOR": "1"})
    try:
        deadline = time.monotonic() + 60
        server = []
        while not server and time.monotonic() < deadline:  # wait until Triton is loading the model
            server = [p for p in children_of(proc.pid) if "tritonserver" in Path(f"/proc/{p}/cmdline").read_text()]
            time.sleep(0.2)
        assert server, "tritonserver never started"
        time.sleep(2)
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert code == 130, proc.stderr.read()
    assert "interrupted during start-up" in proc.stderr.read()
    assert group_pids(server[0]) == [] and group_pids(proc.pid) == []
    assert [p.name for p in state.iterdir()] == ["prometheus-multiproc"]  # the unpacked package is gone
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", http), timeout=2).close()


def test_a_folder_with_remote_weights_is_served_from_a_copy_and_left_untouched(tmp_path: Path) -> None:
    """The user's repository keeps its model.json; the materialized path goes into a copy that start-up
    removes again. (The model's backend does not exist, so Triton fails fast once the weights are there.)"""
    import fsspec

    from tritonpkg.runtime import ServerStartError
    from tritonpkg.serve import ServingStack, StartupOptions

    fs = fsspec.filesystem("memory")
    fs.pipe("/serve-folder-test/config.json", b'{"model_type": "llama"}')
    repo = tmp_path / "repo"
    (repo / "llm" / "1").mkdir(parents=True)
    (repo / "llm" / "config.pbtxt").write_text('name: "llm"\nbackend: "tritonpkg_test_absent_backend"\n')
    original = json.dumps({"model": "memory://serve-folder-test"})
    (repo / "llm" / "1" / "model.json").write_text(original)
    stack = ServingStack(StartupOptions(source=repo, state_dir=tmp_path / "state", weights_root=tmp_path / "w",
                                        http_port=0, grpc_port=0, metrics_port=0, startup_timeout=60))
    with pytest.raises(ServerStartError, match="tritonpkg_test_absent_backend"):
        stack.start()
    assert (repo / "llm" / "1" / "model.json").read_text() == original
    [weights] = stack.weights
    assert Path(weights.path).is_relative_to(tmp_path / "w") and (Path(weights.path) / "config.json").is_file()
    assert stack.repository != repo and not stack.repository.exists()  # the copy is gone with the stack
    assert [p.name for p in (tmp_path / "state").iterdir()] == ["prometheus-multiproc"]
