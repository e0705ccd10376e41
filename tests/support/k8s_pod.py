"""Run a generated Kubernetes pod's containers the way a kubelet would, without a cluster: called as
`unshare -m -n python -m tests.support.k8s_pod PLAN.json`, so it has a mount namespace and a network namespace
of its own (loopback only, like a pod). In it: an S3 API (moto) with the package archive and the weights
uploaded, then a tmpfs over every host folder the release came from and over each of the pod's emptyDirs, then
the init container's command, then the main container's, with the pod's environment; the model is asked from
inside the namespace, the main container stopped with SIGTERM, and what was seen written to the plan's result
file (outside the hidden folders). A host path left in the manifests or the archive fails here."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from tritonpkg.devtools.s3 import MotoS3
from tritonpkg.proc.group import own_group


def _http(url: str, body: dict | None = None, headers: dict[str, str] | None = None) -> tuple[int, Any]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method="POST" if data is not None else "GET",
                                 headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=120) as resp:
            text = resp.read().decode()
            return resp.status, json.loads(text) if text.strip() else None
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")


def _upload(s3: Any, url: str, path: Path) -> None:
    bucket, _, key = url.removeprefix("s3://").partition("/")
    if bucket not in [b["Name"] for b in s3.list_buckets()["Buckets"]]:
        s3.create_bucket(Bucket=bucket)
    if path.is_dir():
        for f in sorted(p for p in path.rglob("*") if p.is_file()):
            s3.upload_file(str(f), bucket, f"{key.rstrip('/')}/{f.relative_to(path).as_posix()}")
    else:
        s3.upload_file(str(path), bucket, key)


def _descendants(root: int) -> dict[str, list[Any]]:
    """Every process under `root` (its children, theirs, ...): pid -> [start time in clock ticks, command line]."""
    procs = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            cmd = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        procs[int(entry)] = (int(fields[1]), [int(fields[19]), cmd.strip()])
    out, todo = {}, [root]
    while todo:
        parent = todo.pop()
        for pid, (ppid, info) in procs.items():
            if ppid == parent and str(pid) not in out:
                out[str(pid)] = info
                todo.append(pid)
    return out


def _kubelet_write(path: Path, text: str) -> None:
    """A ConfigMap's file as the kubelet projects it (its AtomicWriter): the data in a new timestamped folder,
    `..data` renamed onto that folder, the key a link through `..data`."""
    folder = path.parent
    stamped = folder / f"..{time.time_ns()}"
    stamped.mkdir()
    (stamped / path.name).write_text(text)
    (folder / "..data_tmp").symlink_to(stamped.name)
    os.replace(folder / "..data_tmp", folder / "..data")
    if not path.is_symlink():
        path.symlink_to(f"..data/{path.name}")


def _await_adapters(openai: str, key: str, sha: str, wait_s: float = 300) -> tuple[int, Any]:
    """/health/adapters once its `key` names the list `sha` (and, for a refused list, its error is said)."""
    deadline = time.monotonic() + wait_s
    answer: tuple[int, Any] = (0, None)
    while time.monotonic() < deadline:
        answer = _http(f"{openai}/health/adapters")
        state = answer[1] if isinstance(answer[1], dict) else {}
        if state.get(key) == sha and (key == "applied_sha256" or state.get("error")):
            break
        time.sleep(0.5)
    return answer


def _rollout(plan: dict[str, Any], serve_pid: int, result: dict[str, Any]) -> None:
    """The unit's adapter list changed twice under the running pod (a list it must refuse, then one it serves)."""
    import hashlib

    r, model, http, openai = plan["rollout"], plan["model"], plan["http"], plan["openai"]
    out: dict[str, Any] = {"procs_before": _descendants(serve_pid)}
    result["rollout"] = out
    list_file = Path(r["list_file"])
    _kubelet_write(list_file, r["bad"])
    out["bad"] = _await_adapters(openai, "list_sha256", hashlib.sha256(r["bad"].encode()).hexdigest())
    _kubelet_write(list_file, r["good"])
    out["good"] = _await_adapters(openai, "applied_sha256", hashlib.sha256(r["good"].encode()).hexdigest())
    out["ready"] = _http(f"{openai}/health/ready")
    out["generate"] = {}
    for name in [None, *r["names"]]:
        params = {**plan["sampling"], "exclude_input_in_output": True, **({"lora_name": name} if name else {})}
        out["generate"][name or ""] = _http(f"{http}/v2/models/{model}/generate",
                                            {"text_input": plan["prompt"], "parameters": params})
    out["completions"] = _http(f"{openai}/v1/completions",
                               {"model": "remote-bot", "prompt": plan["prompt"], **plan["sampling"]})
    out["procs_after"] = _descendants(serve_pid)


def main(plan_file: str) -> None:
    plan = json.loads(Path(plan_file).read_text())
    result: dict[str, Any] = {}
    out = Path(plan["result"])
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    moto = MotoS3.start(Path(plan["moto_log"]))
    serve = None
    try:
        s3 = moto.client()
        for url, path in plan["uploads"].items():
            _upload(s3, url, Path(path))
        for folder in [*plan["hide"], *plan["pod_dirs"]]:
            subprocess.run(["mount", "-t", "tmpfs", "tmpfs", folder], check=True)
        result["hidden"] = {f: os.listdir(f) for f in plan["hide"]}
        env = {**plan["env"], **moto.env}
        result["init"] = []
        for command in plan["init"]:  # in order, each to completion, as the kubelet runs init containers
            init = subprocess.run(command, check=False, env=env, capture_output=True, text=True, timeout=600)
            result["init"].append({"rc": init.returncode, "stdout": init.stdout[-4000:],
                                   "stderr": init.stderr[-4000:]})
            if init.returncode != 0:
                return
        model, http, openai = plan["model"], plan["http"], plan["openai"]
        with open(plan["serve_log"], "w") as log:  # the container's log, as `kubectl logs` shows it
            serve = subprocess.Popen(plan["main"], env={**env, **plan["main_env"]}, stdout=log,
                                     stderr=subprocess.STDOUT, **own_group())
        deadline = time.monotonic() + 1200
        while serve.poll() is None and time.monotonic() < deadline:  # what the readiness probe asks
            try:
                result["ready"] = _http(f"{openai}/health/ready")
            except OSError as exc:
                result["ready"] = [None, str(exc)]
            if result["ready"][0] == 200:
                break
            time.sleep(2)
        if result.get("ready", [None])[0] != 200:
            result["serve_failed"] = serve.poll()
            return
        result["generate"] = {}
        for name in [None, *plan["adapters"]]:
            params = {**plan["sampling"], "exclude_input_in_output": True, **({"lora_name": name} if name else {})}
            result["generate"][name or ""] = _http(f"{http}/v2/models/{model}/generate",
                                                   {"text_input": plan["prompt"], "parameters": params})
        result["completions"] = _http(f"{openai}/v1/completions",
                                      {"model": model, "prompt": plan["prompt"], **plan["sampling"]})
        key = plan["main_env"]["TRITONPKG_ADMIN_KEY"]
        result["admin_with_key"] = _http(f"{http}/v2/repository/index", {}, {"admin-key": key})[0]
        result["admin_without_key"] = _http(f"{http}/v2/repository/index", {})[0]
        if plan.get("rollout"):
            _rollout(plan, serve.pid, result)
    finally:
        if serve is not None and serve.poll() is None:
            serve.send_signal(signal.SIGTERM)
            try:
                serve.wait(timeout=90)
            except subprocess.TimeoutExpired:
                os.killpg(serve.pid, signal.SIGKILL)
                serve.wait()
            result["serve_exit"] = serve.returncode
        moto.stop()
        out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main(sys.argv[1])
