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
               "max_num_batched_tokens": 256, "disable_log_stats": True, "max_loras": 4}
REMOTE_ADAPTER = "s3://adapters/remote-bot"
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
    rollout = _rollout(host, spec, tiny_llm_weights, out, dry)
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
        "uploads": {dry["archive"]: str(archive_file), WEIGHTS_URL: str(tiny_llm_weights), **rollout.pop("uploads")},
        "rollout": rollout,
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


def _rollout(host: Path, spec: dict, weights: Path, out: Path, dry: dict) -> dict:
    """What an adapter rollout writes into the unit's ConfigMap, as the driver renders it: support-bot switched to
    the v2 release's (its archive packaged by a v2 dry run, in the store under its sha256), legal-bot kept in the
    pod's own archive, remote-bot from an s3:// source; and first a list naming a v2 archive whose object was
    changed in the store (its sha256 no longer the list's), which the pod must refuse."""
    from tritonpkg.serve import adapter_list

    spec2_dir = host / "spec2"
    make_adapter(weights, spec2_dir / "made" / "support-bot", seed=3)
    make_adapter(weights, spec2_dir / "made" / "legal-bot", seed=2)  # v1's legal-bot, byte for byte
    make_adapter(weights, host / "remote-bot", seed=4)
    spec2 = {**spec, "version": 2, "adapters": [{"name": n, "source": f"./made/{n}"} for n in ADAPTERS]}
    (spec2_dir / "tritonpkg.yaml").write_text(yaml.safe_dump(spec2, sort_keys=False))
    res = subprocess.run(tritonpkg("deploy", str(spec2_dir), "--target", "kubernetes", "--package-store", STORE,
                                   "--dry-run", "-o", str(out / "v2"), "--state", str(host / "state"), "--json"),
                         check=False, capture_output=True, text=True, timeout=300, cwd=host)
    assert res.returncode == 0, res.stderr + res.stdout
    url2, _, file2 = json.loads(res.stdout)["archive"].rpartition("/")
    archive2 = out / "v2" / file2
    url1, _, file1 = dry["archive"].rpartition("/")
    sha1 = adapter_list.file_sha256(out / file1)
    sha2 = adapter_list.file_sha256(archive2)
    tampered = host / "tampered.tar.gz"
    data = bytearray(archive2.read_bytes())
    data[-1] ^= 1
    tampered.write_bytes(data)
    tampered_url = f"s3://packages/tampered/{MODEL}/{sha2[:16]}"

    def at(url: str, file: str, sha: str, version: int, name: str) -> adapter_list.ArchiveLocation:
        return adapter_list.ArchiveLocation(url=url, file=file, sha256=sha, path=f"{MODEL}/{version}/adapters/{name}")

    good = {"support-bot": at(url2, file2, sha2, 2, "support-bot"), "legal-bot": at(url1, file1, sha1, 1, "legal-bot"),
            "remote-bot": REMOTE_ADAPTER}
    bad = {**good, "support-bot": at(tampered_url, file2, sha2, 2, "support-bot")}
    return {"list_file": f"{adapter_list.MOUNT}/{adapter_list.KEY}", "bad": adapter_list.render(bad).decode(),
            "good": adapter_list.render(good).decode(), "names": sorted(good),
            "uploads": {f"{url2}/{file2}": str(archive2), f"{tampered_url}/{file2}": str(tampered),
                        REMOTE_ADAPTER: str(host / "remote-bot")}}


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


def test_an_adapter_rollout_reaches_the_running_engine_through_the_followed_list(pod):
    """The unit's ConfigMap changes (written as the kubelet projects it: a new timestamped folder, `..data` renamed
    onto it): the pod's serve refuses a list whose archive changed in the store (its follower says why, the served
    adapters stay), then serves the next list with the engine kept: support-bot switched to v2's (its greedy
    output changes), legal-bot the same, remote-bot fetched from s3://, each different from the base, over KServe
    and the OpenAI API; readiness stays true, every engine process is the one that served before."""
    from tritonpkg.serve import adapter_list

    _, _, plan, result = pod
    r = result["rollout"]
    status, refused = r["bad"]
    assert status == 200 and refused["list_sha256"] == adapter_list.digest(plan["rollout"]["bad"].encode())
    assert "sha256" in refused["error"] and "changed in the store" in refused["error"], refused
    assert refused["applied_sha256"] is None  # nothing applied: the package's own adapters still served
    status, applied = r["good"]
    assert status == 200 and applied["applied_sha256"] == adapter_list.digest(plan["rollout"]["good"].encode())
    assert applied["error"] is None and applied["served"] == ["legal-bot", "remote-bot", "support-bot"], applied
    assert applied["refused"] == {}
    before = {name: body["text_output"] for name, (_, body) in result["generate"].items()}
    after = {}
    for name, (status, body) in r["generate"].items():
        assert status == 200, (name, body)
        after[name] = body["text_output"]
    assert after[""] == before[""] and after["legal-bot"] == before["legal-bot"]
    assert after["support-bot"] != before["support-bot"]  # v2's adapter, loaded into the running engine
    assert len({after[""], after["support-bot"], after["remote-bot"], after["legal-bot"]}) == 4, after
    status, body = r["completions"]
    assert status == 200 and body["choices"][0]["text"] == after["remote-bot"], body
    assert r["ready"][0] == 200
    before_procs, after_procs = r["procs_before"], r["procs_after"]
    assert any("triton_python_backend_stub" in cmd for _, cmd in before_procs.values()), before_procs
    assert {pid: after_procs.get(pid) for pid in before_procs} == before_procs  # each one the same process
