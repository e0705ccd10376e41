"""`serve --runtime docker` as the container sees it, without Docker: the printed `docker run` of each image is run
in its container view (tests/support/container.py: own mount and network namespaces, a tmpfs root holding only
the image's folders and the command's read-only `-v` mounts at their container paths; every host folder the
repository came from absent or covered by a tmpfs). The local Triton stands in for the image's at
/opt/tritonserver, the toolkit's vLLM backend for NVIDIA's `vllm`.

* ngc: the command's Triton invocation (`tritonserver --model-repository=/models` + the restricted admin APIs)
  serves the LoRA example (tiny Llama + two peft adapters): base and adapter greedy outputs differ.
* toolkit: the toolkit image's ENTRYPOINT and ENV (read from its Dockerfile) with the command's arguments run
  `tritonpkg serve` inside: the same answers over KServe and the OpenAI API, and the merged /metrics.

One engine per mode, one after the other; the packaged repository is unchanged after both."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from tests.support.cli import tritonpkg
from tests.support.container import ContainerView, image_part, in_network, interpreter_env, volumes
from tests.support.lora import make_adapter
from tests.support.paths import EXAMPLES
from tritonpkg import paths
from tritonpkg.compat import get_release
from tritonpkg.image import DOCKERFILE, default_tag
from tritonpkg.repository import package_spec
from tritonpkg.spec import load_spec

# an engine start took 356 s on a loaded 2-core host; each test waits READY_S for it
pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(1800)]
pytest.importorskip("peft")

RELEASE = "26.07"
ADAPTERS = {"support-bot": 1, "legal-bot": 2}
PROMPT = "hello world"
SAMPLING = {"max_tokens": 12, "temperature": 0}
READY_S = 900

CLIENT = textwrap.dedent('''
    import json, sys, time, urllib.request, urllib.error

    def get(url):
        with urllib.request.urlopen(url, timeout=30) as r:
            return r.status, r.read().decode()

    def main():
        model, adapters, prompt, sampling, openai_port, deadline = json.loads(sys.argv[1])
        end = time.monotonic() + deadline
        while True:
            try:
                if get(f"http://127.0.0.1:8000/v2/models/{model}/ready")[0] == 200:
                    break
            except (OSError, urllib.error.URLError):
                pass
            if time.monotonic() > end:
                print("RESULT " + json.dumps({"error": "never ready"}), flush=True)
                return
            time.sleep(2)
        out = {"kserve": {}, "openai": {}}
        for key in [None] + adapters:
            params = dict(sampling, exclude_input_in_output=True, **({"lora_name": key} if key else {}))
            body = json.dumps({"text_input": prompt, "parameters": params}).encode()
            req = urllib.request.Request(f"http://127.0.0.1:8000/v2/models/{model}/generate", data=body,
                                         method="POST")
            with urllib.request.urlopen(req, timeout=300) as r:
                out["kserve"][key or "base"] = json.loads(r.read())["text_output"]
        if openai_port:
            import openai
            client = openai.OpenAI(base_url=f"http://127.0.0.1:{openai_port}/v1", api_key="unused", max_retries=0)
            for key in [model] + adapters:
                out["openai"][key] = client.completions.create(model=key, prompt=prompt, temperature=0,
                                                               max_tokens=sampling["max_tokens"]).choices[0].text
            out["metrics"] = get("http://127.0.0.1:8002/metrics")[1]
        print("RESULT " + json.dumps(out), flush=True)

    main()
''')


def _tree_digest(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def _dockerfile() -> tuple[list[str], dict[str, str], str]:
    """(ENTRYPOINT, ENV, WORKDIR) of the toolkit image, from its Dockerfile."""
    text = DOCKERFILE.read_text().replace("\\\n", " ")
    entry, env, workdir = [], {}, "/"
    for line in text.splitlines():
        word, _, rest = line.strip().partition(" ")
        if word == "ENTRYPOINT":
            entry = json.loads(rest)
        elif word == "ENV":
            for item in rest.split():
                key, _, value = item.partition("=")
                env[key] = value
        elif word == "WORKDIR":
            workdir = rest.strip()
    return entry, env, workdir


@pytest.fixture(scope="module")
def lora_repo(tmp_path_factory, tiny_llm_weights):
    """The tiny-llm-lora example's spec on host folders made for the test (weights, adapters), packaged."""
    root = tmp_path_factory.mktemp("container-view")
    made = root / "made"
    for name, seed in ADAPTERS.items():
        make_adapter(tiny_llm_weights, made / name, seed=seed)
    spec = yaml.safe_load((EXAMPLES / "tiny-llm-lora" / "tritonpkg.yaml").read_text())
    spec["weights"] = str(tiny_llm_weights)
    spec["adapters"] = [{"name": name, "source": str(made / name)} for name in ADAPTERS]
    spec_dir = root / "spec"
    spec_dir.mkdir()
    (spec_dir / "tritonpkg.yaml").write_text(yaml.safe_dump(spec))
    repo = root / "repository"
    package_spec(load_spec(spec_dir), repo)
    return root, repo, spec["name"], [str(tiny_llm_weights), str(made), str(spec_dir), str(repo)]


def _printed(repo: Path, *args: str) -> dict:
    result = subprocess.run(tritonpkg("serve", str(repo), "--runtime", "docker", "--target-release", RELEASE,
                                      "--json", *args), capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def _run_in_view(view: ContainerView, command: list[str], env: dict[str, str], log: Path, model: str,
                 openai_port: int | None = None, cwd: str = "/") -> dict:
    proc = view.popen(command, env, log, cwd=cwd)
    try:
        client = [sys.executable, "-c", CLIENT, json.dumps([model, list(ADAPTERS), PROMPT, SAMPLING, openai_port,
                                                            READY_S])]
        done = in_network(proc.pid, client, timeout=READY_S + 600)
        lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
        assert done.returncode == 0 and lines, done.stdout[-2000:] + done.stderr[-3000:] + log.read_text()[-4000:]
        result = json.loads(lines[-1].removeprefix("RESULT "))
        assert "error" not in result, log.read_text()[-6000:]
        return result
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=90)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


@pytest.fixture(scope="module")
def runtime():
    from tritonpkg.runtime import ensure_runtime

    return ensure_runtime()


def _assert_lora_answers(kserve: dict[str, str]) -> None:
    assert set(kserve) == {"base", *ADAPTERS} and all(kserve.values()), kserve
    for name in ADAPTERS:
        assert kserve[name] != kserve["base"], (name, kserve)
    assert kserve["support-bot"] != kserve["legal-bot"], kserve


def test_ngc_command_serves_the_lora_example_with_every_host_folder_hidden(lora_repo, runtime):
    root, repo, model, hidden = lora_repo
    before = _tree_digest(repo)
    state = root / "state-ngc"
    printed = _printed(repo, "--state-dir", str(state))
    argv = printed["argv"]
    mounts = volumes(argv)
    containers = [c for _, c in mounts]
    assert containers[0] == "/models" and f"/models/{model}/1/model.json" in containers
    assert f"/models/{model}/1/multi_lora.json" in containers
    served = json.loads((state / "view" / model / "1" / "model.json").read_text())
    assert served["model"] == f"/weights/{model}/1" and (hidden[0], served["model"]) in mounts
    adapters = json.loads((state / "view" / model / "1" / "multi_lora.json").read_text())
    assert adapters == {name: f"/models/{model}/1/adapters/{name}" for name in ADAPTERS}
    command = image_part(argv, get_release(RELEASE).ngc_image)
    assert command[:2] == ["tritonserver", "--model-repository=/models"]

    view = ContainerView.for_toolkit(root / "root-ngc", mounts, runtime, paths.PROJECT_ROOT,
                                     [*hidden, str(state)])
    view.root.mkdir()
    env = interpreter_env(Path(sys.executable).parent, ["/opt/tritonserver/bin"])
    result = _run_in_view(view, command, env, root / "ngc.log", model)
    _assert_lora_answers(result["kserve"])
    assert _tree_digest(repo) == before


def test_toolkit_image_entrypoint_runs_serve_inside_with_every_host_folder_hidden(lora_repo, runtime):
    root, repo, model, hidden = lora_repo
    before = _tree_digest(repo)
    state = root / "state-toolkit"
    printed = _printed(repo, "--image", "toolkit", "--openai", "--state-dir", str(state))
    argv = printed["argv"]
    tag = default_tag(RELEASE)
    assert printed["image"] == tag
    entrypoint, image_env, workdir = _dockerfile()
    assert entrypoint == ["tritonpkg", "serve"]
    arguments = image_part(argv, tag)
    assert arguments[:3] == ["/models", "--host", "0.0.0.0"] and "--openai" in arguments

    view = ContainerView.for_toolkit(root / "root-toolkit", volumes(argv), runtime, paths.PROJECT_ROOT,
                                     [*hidden, str(state)])
    view.writable.append(image_env["HOME"])
    view.root.mkdir()
    env = interpreter_env(Path(sys.executable).parent)
    env.update({k: v for k, v in image_env.items() if k != "PATH"})  # the image's PATH leads to its virtualenv
    result = _run_in_view(view, [*entrypoint, *arguments], env, root / "toolkit.log", model, openai_port=9000,
                          cwd=workdir)
    _assert_lora_answers(result["kserve"])
    assert result["openai"] == {model: result["kserve"]["base"], **{n: result["kserve"][n] for n in ADAPTERS}}
    metrics = result["metrics"]  # the merged /metrics (the example turns vLLM's own stats off)
    assert 'tritonpkg_metrics_source_up{source="triton"} 1' in metrics
    assert f'nv_inference_count{{model="{model}"' in metrics
    assert _tree_digest(repo) == before


def test_the_view_hides_every_host_source_folder_and_shows_the_mounts(lora_repo, runtime):
    """The control for the two above: inside the view the host folders the repository came from do not exist, the
    unrewritten model.json's host path among them, while the container paths hold their files, read-only."""
    root, repo, model, hidden = lora_repo
    printed = _printed(repo, "--state-dir", str(root / "state-control"))
    view = ContainerView.for_toolkit(root / "root-control", volumes(printed["argv"]), runtime, paths.PROJECT_ROOT,
                                     [*hidden, str(root / "state-control")])
    view.root.mkdir()
    host_weights = json.loads((repo / model / "1" / "model.json").read_text())["model"]
    checks = [f"test ! -e {p}" for p in [*hidden, host_weights]]
    adapter_config = f"/models/{model}/1/adapters/support-bot/adapter_config.json"
    checks += [f"test -f /weights/{model}/1/config.json", f"test -f {adapter_config}",
               f"grep -q /weights/{model}/1 /models/{model}/1/model.json",
               f"! touch /weights/{model}/1/x", "echo VIEW-OK"]
    proc = view.popen(["/bin/sh", "-c", " && ".join(checks)], interpreter_env(Path(sys.executable).parent),
                      root / "control.log")
    assert proc.wait(timeout=120) == 0, (root / "control.log").read_text()
    assert "VIEW-OK" in (root / "control.log").read_text()
