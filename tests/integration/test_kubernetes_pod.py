"""A Kubernetes pod of the LoRA example, run without a cluster: `deploy --target kubernetes --dry-run -o` writes
the manifests and the package archive; the Deployment's init container command and then its main container
command run as written (tests/support/k8s_pod.py), in a mount and network namespace of their own, against an S3
API (moto) holding the archive at the URL the manifest names and the weights at the spec's s3:// source, with a
tmpfs over every host folder the release came from (spec, adapters, weights, manifests) and over the pod's
emptyDirs. The model answers: base and each adapter (copied into the archive at package time) give different
greedy outputs, over KServe and the OpenAI API, and Triton's admin API takes the Secret's key only. One engine
start."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.support.cli import tritonpkg
from tests.support.lora import make_adapter
from tritonpkg.deploy.drivers import kubernetes as k8s

pytestmark = [pytest.mark.integration, pytest.mark.slow]
pytest.importorskip("peft")
pytest.importorskip("kubernetes_validate")

MODEL = "tiny_llm_lora"
WEIGHTS_URL = "s3://weights/tiny-llm"
STORE = "s3://packages/releases"
ADAPTERS = ("support-bot", "legal-bot")
ENGINE_ARGS = {"enforce_eager": True, "max_model_len": 256, "dtype": "float32", "max_num_seqs": 4,
               "max_num_batched_tokens": 256, "disable_log_stats": True}
ROOT = Path(__file__).resolve().parents[2]


def _can_unshare() -> str | None:
    if os.geteuid() != 0:
        return "mount namespaces need root"
    probe = subprocess.run(["unshare", "-m", "-n", "true"], check=False, capture_output=True, text=True)
    return None if probe.returncode == 0 else f"unshare -m -n failed: {probe.stderr.strip()}"


@pytest.fixture(scope="module")
def pod(tmp_path_factory, tiny_llm_weights):
    """The manifests, the plan the runner follows and what it saw."""
    why = _can_unshare()
    if why:
        (pytest.fail if os.environ.get("CI") else pytest.skip)(why)
    root = tmp_path_factory.mktemp("k8s-pod")
    host = root / "host"  # everything of the deploying machine the pod must not need: hidden in the namespace
    spec_dir = host / "spec"
    spec_dir.mkdir(parents=True)
    for seed, name in enumerate(ADAPTERS, start=1):
        make_adapter(tiny_llm_weights, spec_dir / "made" / name, seed=seed)
    spec = {"name": MODEL, "version": 1, "kind": "vllm", "target_release": "24.10", "weights": WEIGHTS_URL,
            "openai": True, "engine_args": ENGINE_ARGS,
            "adapters": [{"name": n, "source": f"./made/{n}"} for n in ADAPTERS]}
    (spec_dir / "tritonpkg.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    out = host / "manifests"
    res = subprocess.run(tritonpkg("deploy", str(spec_dir), "--target", "kubernetes", "--package-store", STORE,
                                   "--dry-run", "-o", str(out), "--state", str(host / "state"), "--json"),
                         check=False, capture_output=True, text=True, timeout=300, cwd=root)
    assert res.returncode == 0, res.stderr + res.stdout
    dry = json.loads(res.stdout)
    manifests = {p.name: yaml.safe_load(p.read_text()) for p in out.glob("*.yaml")}
    deployment = next(m for m in manifests.values() if m["kind"] == "Deployment")
    secret = next(m for m in manifests.values() if m["kind"] == "Secret")
    pod_spec = deployment["spec"]["template"]["spec"]
    fetch, verify = pod_spec["initContainers"]
    serve, = pod_spec["containers"]
    archive_file = out / dry["archive"].rsplit("/", 1)[1]

    pod_dirs = sorted({m["mountPath"] for c in (fetch, verify, serve) for m in c["volumeMounts"]})
    created = [d for d in pod_dirs if not os.path.exists(d)]
    for d in created:  # empty mount points on the host; the tmpfs over each exists only in the namespace
        os.makedirs(d)
    venv_bin = str(Path(sys.executable).parent)
    env = {"PATH": f"{venv_bin}:/usr/local/bin:/usr/bin:/bin", "HOME": os.environ.get("HOME", "/root"),
           "LANG": "C.UTF-8", "NO_COLOR": "1", "VLLM_CPU_KVCACHE_SPACE": "1",
           **{k: v for k, v in os.environ.items() if k in ("TRITONPKG_CACHE", "XDG_CACHE_HOME")}}
    plan = {
        "model": MODEL, "adapters": list(ADAPTERS), "prompt": "hello world",
        "sampling": {"max_tokens": 12, "temperature": 0},
        "uploads": {dry["archive"]: str(archive_file), WEIGHTS_URL: str(tiny_llm_weights)},
        "hide": [str(host), str(tiny_llm_weights)], "pod_dirs": pod_dirs, "env": env,
        "init": [[*c["command"], *c.get("args", [])] for c in pod_spec["initContainers"]],
        "main": [*serve["command"], *serve["args"]],
        "main_env": {"TRITONPKG_ADMIN_KEY": secret["stringData"]["admin-key"]},
        "http": f"http://127.0.0.1:{k8s.HTTP}", "openai": f"http://127.0.0.1:{k8s.OPENAI}",
        "moto_log": str(root / "moto.log"), "result": str(root / "result.json"), "serve_log": str(root / "serve.log"),
    }
    (root / "plan.json").write_text(json.dumps(plan, indent=1))
    try:
        run = subprocess.run(["unshare", "-m", "-n", "--propagation", "private", sys.executable, "-m",
                              "tests.support.k8s_pod", str(root / "plan.json")],
                             check=False, capture_output=True, text=True, timeout=1500, cwd=ROOT)
    finally:
        for d in reversed(created):
            shutil.rmtree(d, ignore_errors=True)
    assert run.returncode == 0, run.stderr[-4000:]
    result = json.loads((root / "result.json").read_text())
    result["log"] = (root / "serve.log").read_text(errors="replace")
    return manifests, dry, plan, result


def test_no_manifest_names_a_host_path(pod):
    manifests, _, plan, _ = pod
    text = json.dumps(manifests)
    for folder in plan["hide"]:
        assert folder not in text
    assert not [m for m in manifests.values() if m["kind"] == "ConfigMap"]
    assert k8s.validate(list(manifests.values()))


def test_the_init_containers_fetch_and_verify_the_archive_from_the_store(pod):
    _, _, plan, result = pod
    assert result["hidden"] == {folder: [] for folder in plan["hide"]}  # the host folders are hidden
    fetched, verified = result["init"]
    assert fetched["rc"] == 0, fetched
    summary = json.loads(fetched["stdout"])
    assert verified["rc"] == 0 and ": OK" in verified["stdout"], verified  # the sha256 the manifest names
    assert summary["files"] == 1 and summary["path"].startswith("/package/package/")


def test_the_main_container_serves_base_and_adapters_with_the_host_folders_hidden(pod):
    _, _, plan, result = pod
    assert result["ready"][0] == 200, (result["ready"], result["log"][-6000:])
    outputs = {}
    for name, (status, body) in result["generate"].items():
        assert status == 200, (name, body)
        outputs[name] = body["text_output"]
    assert len(set(outputs.values())) == len(outputs), outputs  # base != each adapter, adapters differ
    status, body = result["completions"]
    assert status == 200 and body["choices"][0]["text"] == outputs[""], body
    assert (result["admin_with_key"], result["admin_without_key"]) == (200, 403)
    assert result["serve_exit"] == 0, result["log"][-4000:]  # SIGTERM: a clean drain and stop
    assert plan["main_env"]["TRITONPKG_ADMIN_KEY"] not in result["log"]  # the pod's log keeps no key
