"""The kubernetes target without a cluster: generated manifests validated against the real schemas and this
target's rules (1 MiB, no host path), the archive put into a real S3 API (moto), and the exact sequence of
client calls the executor makes, recorded by a fake of the official client (the one fake in these tests: no
API server can run here)."""

from __future__ import annotations

import copy
import hashlib
import io
import json
import subprocess
import tarfile
import types

import pytest

from tritonpkg import version_files
from tritonpkg.deploy.adapters import read_facts
from tritonpkg.deploy.drivers import kubernetes as k8s
from tritonpkg.deploy.drivers import package_store
from tritonpkg.deploy.executor import Executor, Release
from tritonpkg.deploy.plan import Unit
from tritonpkg.deploy.state import StateStore
from tritonpkg.errors import TritonpkgError
from tritonpkg.image import default_tag
from tritonpkg.serve import adapter_list
from tritonpkg.spec import Autoscaling, Volume

pytest.importorskip("kubernetes_validate", reason="pip install kubernetes-validate")

STORE_BUCKET = "packages"
STORE = f"s3://{STORE_BUCKET}/releases"
ARCHIVE = package_store.archive_ref(STORE, "m", 1, "ab" * 32)


class ApiError(Exception):
    def __init__(self, status: int, body: str = "") -> None:
        super().__init__(f"HTTP {status}")
        self.status, self.body = status, body


class FakeCluster:
    """Records every call (method, name) in order and keeps the objects, answering like the API server:
    409 on creating what exists, 404 on touching what does not. Deployments report all replicas ready
    unless their name is in `never_ready`."""

    def __init__(self, never_ready: set[str] = frozenset()) -> None:
        self.calls: list[tuple[str, str]] = []
        self.objects: dict[tuple[str, str], dict] = {}
        self.never_ready = set(never_ready)
        self.apps, self.core, self.custom = (types.SimpleNamespace() for _ in range(3))
        self.autoscaling = types.SimpleNamespace()
        for api, kinds in ((self.apps, ["deployment"]), (self.core, ["config_map", "service", "secret"]),
                           (self.autoscaling, ["horizontal_pod_autoscaler"])):
            for kind in kinds:
                setattr(api, f"create_namespaced_{kind}", self._create(kind))
                setattr(api, f"replace_namespaced_{kind}", self._replace(kind))
                setattr(api, f"delete_namespaced_{kind}", self._delete(kind))
        self.autoscaling.read_namespaced_horizontal_pod_autoscaler = self._read_hpa
        self.autoscaling.patch_namespaced_horizontal_pod_autoscaler = self._patch_hpa
        self.apps.read_namespaced_deployment_status = self._status
        self.apps.patch_namespaced_deployment_scale = self._scale
        self.custom.patch_namespaced_custom_object = self._patch_route
        self.custom.create_namespaced_custom_object = self._create_route
        # the pods, as the API server lists them and reaches them through its pod proxy; each pod's serve
        # follows its unit's ConfigMap with the pod's own rules (adapter_list.parse) unless it is in `failing`
        self.core.list_namespaced_pod = self._pods
        self.core.api_client = types.SimpleNamespace(call_api=self._proxy)
        self.failing: dict[str, str] = {}  # pod -> the error its follower reports

    def _pod_names(self, unit):
        dep = self.objects.get(("deployment", unit))
        return [f"{unit}-pod-{i}" for i in range(dep["spec"]["replicas"] if dep else 0)]

    def _pods(self, namespace, label_selector):
        unit = label_selector.removeprefix("tritonpkg.io/unit=")
        self.calls.append(("list_pods", unit))
        ready = [types.SimpleNamespace(type="Ready", status="True")]
        return types.SimpleNamespace(items=[types.SimpleNamespace(
            metadata=types.SimpleNamespace(name=n, deletion_timestamp=None),
            status=types.SimpleNamespace(conditions=ready)) for n in self._pod_names(unit)])

    def _proxy(self, resource, method, header_params=None, body=None, auth_settings=None,
               _return_http_data_only=None, _preload_content=True, _request_timeout=None):
        pod_port, _, path = resource.split("/pods/", 1)[1].partition("/proxy/")
        pod, port = pod_port.split(":")
        self.calls.append(("proxy", f"{method} {pod}:{port}/{path}"))
        unit = pod.rsplit("-pod-", 1)[0]
        data = self.objects.get(("config_map", k8s.adapter_list_name(unit)), {}).get("data", {}).get("adapters.json")
        listing = adapter_list.parse(data.encode()) if data else {}
        if method == "GET" and path == "health/adapters":
            sha = adapter_list.digest(data.encode()) if data else None
            state = ({"list_sha256": sha, "applied_sha256": None, "error": self.failing[pod]} if pod in self.failing
                     else {"list_sha256": sha, "applied_sha256": sha, "error": None, "served": sorted(listing)})
            return types.SimpleNamespace(data=json.dumps(state).encode())
        name = json.loads(body["sampling_parameters"]).get("lora_name")
        if method == "POST" and path == "v2/models/m/generate" and name in listing:
            return types.SimpleNamespace(data=json.dumps({"text_output": f"from {name}"}).encode())
        raise ApiError(400, f"unknown LoRA adapter {name!r}")

    def _create(self, kind):
        def create(namespace, body):
            name = body["metadata"]["name"]
            self.calls.append((f"create_{kind}", name))
            if (kind, name) in self.objects:
                raise ApiError(409)
            self.objects[(kind, name)] = copy.deepcopy(body)
        return create

    def _replace(self, kind):
        def replace(name, namespace, body):
            self.calls.append((f"replace_{kind}", name))
            self.objects[(kind, name)] = copy.deepcopy(body)
        return replace

    def _delete(self, kind):
        def delete(name, namespace):
            self.calls.append((f"delete_{kind}", name))
            if self.objects.pop((kind, name), None) is None:
                raise ApiError(404)
        return delete

    def _status(self, name, namespace):
        self.calls.append(("read_deployment_status", name))
        dep = self.objects[("deployment", name)]
        want = dep["spec"]["replicas"]
        ready = 0 if name in self.never_ready else want
        return types.SimpleNamespace(spec=types.SimpleNamespace(replicas=want),
                                     status=types.SimpleNamespace(ready_replicas=ready))

    def _read_hpa(self, name, namespace):
        self.calls.append(("read_hpa", name))
        hpa = self.objects.get(("horizontal_pod_autoscaler", name))
        if hpa is None:
            raise ApiError(404)
        return types.SimpleNamespace(  # as the client answers: attributes in snake case
            metadata=types.SimpleNamespace(annotations=hpa["metadata"].get("annotations")),
            spec=types.SimpleNamespace(min_replicas=hpa["spec"]["minReplicas"],
                                       max_replicas=hpa["spec"]["maxReplicas"]))

    def _patch_hpa(self, name, namespace, body):
        self.calls.append(("patch_hpa", f"{name} min={body['spec']['minReplicas']}"))
        self.objects[("horizontal_pod_autoscaler", name)]["spec"].update(body["spec"])

    def _scale(self, name, namespace, body):
        self.calls.append(("scale_deployment", f"{name}={body['spec']['replicas']}"))
        self.objects[("deployment", name)]["spec"]["replicas"] = body["spec"]["replicas"]

    def _patch_route(self, group, version, namespace, plural, name, body):
        if ("route", name) not in self.objects:
            self.calls.append(("patch_route", name))
            raise ApiError(404)
        self.calls.append(("patch_route", self._weights(body)))
        self.objects[("route", name)] = copy.deepcopy(body)

    def _create_route(self, group, version, namespace, plural, body):
        self.calls.append(("create_route", self._weights(body)))
        self.objects[("route", body["metadata"]["name"])] = copy.deepcopy(body)

    @staticmethod
    def _weights(body) -> str:
        default = [r for r in body["spec"]["rules"] if r["matches"][0].get("path", {}).get("value") == "/"]
        refs = default[0]["backendRefs"] if default else []
        return " ".join(f"{b['name']}={b['weight']}" for b in refs)


def release(tmp_path, version: int, **kw) -> Release:
    repo = tmp_path / f"repo{version}"
    (repo / "m" / str(version)).mkdir(parents=True)
    (repo / "m" / "config.pbtxt").write_text('name: "m"\nbackend: "python"\n')
    (repo / "m" / str(version) / "model.py").write_text("class TritonPythonModel: pass\n")
    return Release(model="m", version=version, repository=repo, traffic_steps=[50, 100],
                   weights="s3://models/m/rev1", strategy="red-black", **kw)


@pytest.fixture
def store(s3_env):
    """The package store: a bucket of the real S3 API (moto), empty for each test."""
    s3 = s3_env.client()
    if STORE_BUCKET in [b["Name"] for b in s3.list_buckets()["Buckets"]]:
        for obj in s3.list_objects_v2(Bucket=STORE_BUCKET).get("Contents", []):
            s3.delete_object(Bucket=STORE_BUCKET, Key=obj["Key"])
    else:
        s3.create_bucket(Bucket=STORE_BUCKET)
    return s3


def executor(tmp_path, cluster):
    driver = k8s.KubernetesDriver(cluster.apps, cluster.core, cluster.custom, cluster.autoscaling,
                                  namespace="serving", poll_s=0, ready_timeout=0, package_store=STORE)
    return Executor(StateStore(tmp_path / "state.db"), driver, dwell_s=0, adapter_grace_s=0)


def pod_of(deployment):
    return deployment["spec"]["template"]["spec"]


def test_manifests_validate_against_the_kubernetes_schemas():
    scaling = Autoscaling(min_replicas=2, max_replicas=6, target_average=1.5)
    dep, svc, hpa = k8s.unit_manifests("m", Unit(name="m-blue", version=1, color="blue", replicas=2),
                                       archive=ARCHIVE, gpus=1, autoscaling=scaling,
                                       volumes=[Volume(claim="fsx-models", mount="/mnt/fsx")])
    route = k8s.route_manifest("m", weights={"m-blue": 90, "m-green": 10}, versions={"2": "m-v2"}, alias="m-v2")
    lines = k8s.validate([dep, svc, hpa, route])
    assert len(lines) == 4 and "kubernetes-validate" in lines[0] and "no host path" in lines[0]
    assert "HorizontalPodAutoscaler/m-blue: valid" in lines[2] and "checked-in Gateway API" in lines[3]
    pod = pod_of(dep)
    fetch, verify = pod["initContainers"]
    serve, = pod["containers"]
    # the archive, fetched by the start procedure from the store, never carried by an API object
    assert fetch["args"][:3] == ["materialize", "copy", f"{STORE}/m/{'ab' * 8}"]
    assert serve["command"] == ["tritonpkg"]
    assert serve["args"][:2] == ["serve", f"/package/package/{'ab' * 8}/m-v1.tar.gz"]
    assert {"--on-engine-death", "exit", "--openai-port", "9000"} <= set(serve["args"])
    assert verify["command"][:2] == ["sh", "-c"] and "ab" * 32 in verify["command"][2]
    assert fetch["image"] == verify["image"] == serve["image"] == default_tag("24.10")  # the release's toolkit image
    for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
        assert serve[probe]["httpGet"]["port"] == "openai"
    assert serve["readinessProbe"]["httpGet"]["path"] == "/health/ready"
    assert serve["livenessProbe"]["httpGet"]["path"] == "/health/live"
    assert pod["terminationGracePeriodSeconds"] == 30
    assert serve["resources"]["limits"] == {"nvidia.com/gpu": "1"}
    assert {"name": "volume-0", "mountPath": "/mnt/fsx", "readOnly": True} in serve["volumeMounts"]
    assert {"name": "volume-0", "persistentVolumeClaim": {"claimName": "fsx-models", "readOnly": True}} in \
        pod["volumes"]
    assert not any("hostPath" in v for v in pod["volumes"])
    # the unit's adapter list: a ConfigMap the pod mounts read-only (absent until an adapter rollout) and serve follows
    assert {"name": "adapters", "configMap": {"name": "m-blue-adapters", "optional": True}} in pod["volumes"]
    assert {"name": "adapters", "mountPath": "/etc/tritonpkg/adapters", "readOnly": True} in serve["volumeMounts"]
    assert serve["args"][-2:] == ["--adapter-list", "/etc/tritonpkg/adapters/adapters.json"]
    assert {"name": "openai", "port": 9000, "targetPort": "openai"} in svc["spec"]["ports"]
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "m-blue"}
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (2, 6)
    assert hpa["spec"]["metrics"] == [{"type": "Pods", "pods": {
        "metric": {"name": "vllm_num_requests_waiting"}, "target": {"type": "AverageValue", "averageValue": "1500m"}}}]
    default = route["spec"]["rules"][-1]["backendRefs"]
    assert default == [{"name": "m-blue", "port": 8000, "weight": 90}, {"name": "m-green", "port": 8000, "weight": 10}]


def test_invalid_manifests_are_refused_with_the_field():
    bad = k8s.route_manifest("m", weights={"m-blue": -1}, versions={}, alias=None)
    with pytest.raises(k8s.ManifestError, match="weight"):
        k8s.validate([bad])
    dep = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "x"}, "spec": {"replicas": "two"}}
    with pytest.raises(k8s.ManifestError, match="Deployment/x"):
        k8s.validate([dep])
    hpa = k8s.hpa_manifest("x", "default", {}, Autoscaling(max_replicas=2))
    del hpa["spec"]["maxReplicas"]  # required
    with pytest.raises(k8s.ManifestError, match="HorizontalPodAutoscaler/x"):
        k8s.validate([hpa])


def test_the_verify_init_container_stops_a_pod_whose_archive_changed_in_the_store(tmp_path):
    """Its command, run as written (in a scratch root standing for the pod's /package): the archive the manifest
    names passes, one changed byte fails."""
    data = b"an archive" * 100
    ref = package_store.archive_ref(STORE, "m", 1, hashlib.sha256(data).hexdigest())
    command = k8s.verify_command(ref)
    local = [*command[:2], command[2].replace(f"{k8s.PACKAGE}/", f"{tmp_path}/", 1)]
    archive = tmp_path / k8s.archive_path(ref).removeprefix(k8s.PACKAGE + "/")
    archive.parent.mkdir(parents=True)
    archive.write_bytes(data)
    assert subprocess.run(local, capture_output=True, check=False).returncode == 0
    archive.write_bytes(data[:-1] + b"!")
    failed = subprocess.run(local, capture_output=True, text=True, check=False)
    assert failed.returncode != 0 and "FAILED" in failed.stdout + failed.stderr


def test_a_host_path_or_an_object_over_1_mib_is_refused_naming_the_field():
    def unit():
        dep, _ = k8s.unit_manifests("m", Unit(name="m-blue", version=1), archive=ARCHIVE)
        return dep

    host = unit()
    pod_of(host)["volumes"].append({"name": "weights-here", "hostPath": {"path": "/srv/weights"}})
    with pytest.raises(k8s.ManifestError, match="hostPath") as exc:
        k8s.validate([host])
    assert exc.value.field == "spec.template.spec.volumes[4]"
    outside = unit()
    pod_of(outside)["initContainers"][0]["args"][2] = "/home/me/made/weights"
    with pytest.raises(k8s.ManifestError, match="outside the container's mounts") as exc:
        k8s.validate([outside])
    assert exc.value.field == "spec.template.spec.initContainers[0].args[2]"
    big = unit()
    big["metadata"]["annotations"] = {"x": "y" * (1 << 20)}
    with pytest.raises(k8s.ManifestError, match="1048576 bytes"):
        k8s.validate([big])


def test_local_weights_are_refused_unless_under_a_declared_volume(write_spec, tmp_path):
    from tritonpkg.deploy.release import release_from
    from tritonpkg.deploy.service import KubernetesOptions, check_target

    (tmp_path / "spec" / "made").mkdir(parents=True)
    spec = {"name": "m", "version": 1, "kind": "vllm", "weights": "./made", "engine_args": {"max_model_len": 64}}
    options = KubernetesOptions(package_store=STORE)
    local = release_from(write_spec(spec), tmp_path / "state")
    with pytest.raises(TritonpkgError, match="folder of this host") as exc:
        check_target(local, "kubernetes", options)
    assert exc.value.field == "weights" and str(exc.value.file).endswith("tritonpkg.yaml")
    check_target(local, "local", options)  # the local target serves it as it is
    with pytest.raises(TritonpkgError) as exc:
        check_target(local, "kubernetes", KubernetesOptions())
    assert exc.value.field == "--package-store"
    on_volume = {**spec, "weights": "/mnt/fsx/models/m",
                 "deployment": {"volumes": [{"claim": "fsx", "mount": "/mnt/fsx"}]}}
    check_target(release_from(write_spec(on_volume, folder="vol"), tmp_path / "state"), "kubernetes", options)


def test_a_packaged_repository_naming_a_host_folder_is_refused(tmp_path):
    rel = release(tmp_path, 1)
    (rel.repository / "m" / "1" / "model.json").write_text(json.dumps({"model": str(tmp_path / "weights")}))
    with pytest.raises(TritonpkgError, match="folder of this host") as exc:
        package_store.host_paths(rel, [])
    assert exc.value.field == "model" and str(exc.value.file).endswith("m/1/model.json")
    (rel.repository / "m" / "1" / "model.json").write_text(json.dumps({"model": "s3://models/m"}))
    (rel.repository / "m" / "1" / "multi_lora.json").write_text(json.dumps({"a": "./adapters/a", "b": "/srv/b"}))
    with pytest.raises(TritonpkgError) as exc:
        package_store.host_paths(rel, [])
    assert exc.value.field == "b"
    package_store.host_paths(rel, [Volume(claim="srv", mount="/srv")])


def test_a_packaged_adapter_list_is_read_by_the_one_bounded_reader(tmp_path):
    """The list a pod would apply is read as serve, the frontend and validate read it (version_files)."""
    rel = release(tmp_path, 1)
    listing = rel.repository / "m" / "1" / "multi_lora.json"
    listing.write_bytes(b'{"a": "' + b"x" * version_files.MAX_ADAPTER_LIST_BYTES + b'"}')
    with pytest.raises(TritonpkgError, match="larger than") as exc:
        package_store.host_paths(rel, [])
    assert str(exc.value.file).endswith("m/1/multi_lora.json")
    listing.write_bytes(b"[" * 100_000 + b"]" * 100_000)
    with pytest.raises(TritonpkgError, match="nested too deeply"):
        package_store.host_paths(rel, [])


def test_red_black_makes_these_api_calls_in_this_order(tmp_path, store):
    cluster = FakeCluster()
    ex = executor(tmp_path, cluster)
    assert ex.deploy(release(tmp_path, 1)).ok
    assert cluster.calls == [
        ("create_secret", "m-triton-admin"),
        ("create_deployment", "m-blue"), ("create_service", "m-blue"),
        ("read_deployment_status", "m-blue"),
        ("patch_route", "m"), ("create_route", "m-blue=100"),  # the first shift creates the route
        ("patch_route", "m-blue=100"),  # alias annotation
    ]
    # the archive the pod fetches is in the store, under the key its manifest names, with that content
    fetch = pod_of(cluster.objects[("deployment", "m-blue")])["initContainers"][0]["args"][2]
    keys = [o["Key"] for o in store.list_objects_v2(Bucket=STORE_BUCKET)["Contents"]]
    assert keys == [fetch.removeprefix(f"s3://{STORE_BUCKET}/") + "/m-v1.tar.gz"]
    body = store.get_object(Bucket=STORE_BUCKET, Key=keys[0])["Body"].read()
    assert keys[0].split("/")[-2] == hashlib.sha256(body).hexdigest()[:16]
    cluster.calls.clear()
    out = ex.deploy(release(tmp_path, 2))
    assert out.ok, out.error
    assert cluster.calls == [
        ("create_secret", "m-triton-admin"),  # exists (409): kept, so the key stays the same
        ("create_deployment", "m-green"), ("create_service", "m-green"),
        ("read_deployment_status", "m-green"),
        ("patch_route", "m-blue=50 m-green=50"), ("read_deployment_status", "m-green"),  # shift, gate
        ("patch_route", "m-blue=0 m-green=100"), ("read_deployment_status", "m-green"),
        ("patch_route", "m-green=100"),  # drain: blue leaves the route
        ("delete_deployment", "m-blue"), ("delete_service", "m-blue"), ("delete_horizontal_pod_autoscaler", "m-blue"),
        ("patch_route", "m-green=100"),  # alias
    ]
    route = cluster.objects[("route", "m")]
    assert route["metadata"]["annotations"] == {"tritonpkg.io/current": "m-green"}
    assert len(store.list_objects_v2(Bucket=STORE_BUCKET)["Contents"]) == 2


def test_units_take_the_secrets_admin_key(tmp_path, store):
    """Every unit's `tritonpkg serve` gets the deployment's Secret key (serve --admin-key's variable), so Triton's
    restricted admin APIs answer the same key on every unit; the key itself is in no manifest but the Secret."""
    cluster = FakeCluster()
    ex = executor(tmp_path, cluster)
    assert ex.deploy(release(tmp_path, 1)).ok
    key = cluster.objects[("secret", "m-triton-admin")]["stringData"]["admin-key"]
    assert ex.deploy(release(tmp_path, 2)).ok
    assert cluster.objects[("secret", "m-triton-admin")]["stringData"]["admin-key"] == key
    serve = pod_of(cluster.objects[("deployment", "m-green")])["containers"][0]
    assert serve["env"] == [{"name": "TRITONPKG_ADMIN_KEY",
                             "valueFrom": {"secretKeyRef": {"name": "m-triton-admin", "key": "admin-key"}}}]
    assert len(key) >= 32 and key not in str(cluster.objects[("deployment", "m-green")])


def test_a_unit_that_never_gets_ready_is_rolled_back_with_these_calls(tmp_path, store):
    cluster = FakeCluster(never_ready={"m-green"})
    ex = executor(tmp_path, cluster)
    assert ex.deploy(release(tmp_path, 1)).ok
    cluster.calls.clear()
    out = ex.deploy(release(tmp_path, 2))
    assert not out.ok and out.rolled_back and "0/1 pods ready" in out.error
    assert cluster.calls == [
        ("create_secret", "m-triton-admin"),
        ("create_deployment", "m-green"), ("create_service", "m-green"),
        ("read_deployment_status", "m-green"),  # health check fails
        ("patch_route", "m-blue=100 m-green=0"),  # rollback: all traffic back in one route change
        ("patch_route", "m-blue=100"),  # drain green
        ("delete_deployment", "m-green"), ("delete_service", "m-green"),
        ("delete_horizontal_pod_autoscaler", "m-green"),
        ("patch_route", "m-blue=100"),  # alias back
    ]
    assert {k for k in cluster.objects if k[0] == "deployment"} == {("deployment", "m-blue")}


def test_scale_follows_the_traffic_share(tmp_path, store):
    cluster = FakeCluster()
    ex = executor(tmp_path, cluster)
    assert ex.deploy(release(tmp_path, 1, replicas=4)).ok
    cluster.calls.clear()
    assert ex.deploy(release(tmp_path, 2, replicas=4)).ok
    scales = [c[1] for c in cluster.calls if c[0] == "scale_deployment"]
    assert scales == ["m-green=2", "m-blue=2", "m-green=4", "m-blue=1"]


def test_a_shift_moves_the_hpa_floor_within_its_bounds(tmp_path, store, write_spec):
    """With deployment.autoscaling the HPA owns the replica count: the shift's scale steps move each unit's
    minReplicas, never outside the spec's [min, max], and never patch the Deployment under the HPA."""
    from tritonpkg.deploy.release import release_from

    def spec(version):
        return write_spec({"name": "m", "version": version, "kind": "vllm", "weights": "s3://models/m",
                           "engine_args": {"max_model_len": 64},
                           "deployment": {"strategy": "red-black", "traffic_steps": [50, 100], "replicas": 4,
                                          "autoscaling": {"min_replicas": 2, "max_replicas": 3}}},
                          folder=f"v{version}")

    cluster = FakeCluster()
    ex = executor(tmp_path, cluster)
    assert ex.deploy(release_from(spec(1), tmp_path / "state")).ok
    assert cluster.objects[("horizontal_pod_autoscaler", "m-blue")]["spec"]["minReplicas"] == 3
    cluster.calls.clear()
    out = ex.deploy(release_from(spec(2), tmp_path / "state"))
    assert out.ok, out.error
    assert not [c for c in cluster.calls if c[0] == "scale_deployment"]
    assert [c[1] for c in cluster.calls if c[0] == "patch_hpa"] == [
        "m-green min=2", "m-blue min=2", "m-green min=3", "m-blue min=2"]  # wanted 2, 2, 4 (> max 3), 1 (< min 2)
    hpa = cluster.objects[("horizontal_pod_autoscaler", "m-green")]
    assert hpa["spec"]["maxReplicas"] == 3 and hpa["metadata"]["annotations"] == {"tritonpkg.io/min-replicas": "2"}
    dep = cluster.objects[("deployment", "m-green")]
    assert dep["spec"]["replicas"] == 2  # provisioned at its first share, within the bounds


# -- adapter rollouts -----------------------------------------------------------------------------------------
def lora_release(tmp_path, version: int, adapters: dict[str, bytes], replicas: int = 2) -> Release:
    """A packaged LoRA release (vLLM config, model.json with LoRA on, adapters copied into the version, a lock):
    `adapters` maps each name to its weights' bytes (its identity)."""
    repo = tmp_path / f"lora{version}"
    vdir = repo / "m" / str(version)
    (repo / "m").mkdir(parents=True)
    (repo / "m" / "config.pbtxt").write_text('name: "m"\nbackend: "vllm"\n')
    vdir.mkdir()
    (vdir / "model.json").write_text(json.dumps({"model": "s3://models/m/rev1", "enable_lora": True,
                                                 "max_loras": len(adapters), "max_lora_rank": 8}))
    (vdir / "multi_lora.json").write_text(json.dumps({n: f"./adapters/{n}" for n in adapters}))
    for name, weights in adapters.items():
        (vdir / "adapters" / name).mkdir(parents=True)
        (vdir / "adapters" / name / "adapter_config.json").write_text('{"r": 8, "peft_type": "LORA"}')
        (vdir / "adapters" / name / "adapter_model.safetensors").write_bytes(weights)
    (repo / "tritonpkg.lock.json").write_text('{"models": {}}')
    return Release(model="m", version=version, repository=repo, traffic_steps=[100], replicas=replicas,
                   weights="s3://models/m/rev1", strategy="auto", adapter_facts=read_facts(repo, "m", version))


def configmap_list(cluster, unit="m-blue") -> dict:
    data = cluster.objects[("config_map", f"{unit}-adapters")]["data"]["adapters.json"]
    return adapter_list.parse(data.encode())


def test_an_adapter_only_release_rolls_into_the_live_pods_with_these_calls(tmp_path, store):
    """auto picks an adapter rollout on this target too: the unit's ConfigMap (mounted by every pod) takes each
    list, every ready pod's serve acknowledges it through the pod proxy, each new adapter answers the smoke
    request on every pod, and no Deployment is touched (the engines are kept). The changed adapter travels in the
    new release's archive, put into the store under its sha256; the unchanged one stays in the live archive."""
    cluster = FakeCluster()
    ex = executor(tmp_path, cluster)
    assert ex.deploy(lora_release(tmp_path, 1, {"support": b"s1", "legal": b"l1"})).ok
    live_ep = ex.store.endpoints("m", "m-blue")
    assert live_ep["adapter_list"] == "m-blue-adapters" and sorted(live_ep["adapters"]) == ["legal", "support"]
    cluster.calls.clear()
    out = ex.deploy(lora_release(tmp_path, 2, {"support": b"s2", "legal": b"l1"}))
    assert out.ok, out.error
    assert out.strategy == "adapters" and "only the LoRA adapters changed" in out.reason
    acks = [("list_pods", "m-blue"), ("proxy", "GET m-blue-pod-0:9000/health/adapters"),
            ("proxy", "GET m-blue-pod-1:9000/health/adapters")]
    assert cluster.calls == [
        ("create_config_map", "m-blue-adapters"), *acks,  # load: support@2 beside the live ones
        ("list_pods", "m-blue"), ("proxy", "POST m-blue-pod-0:8000/v2/models/m/generate"),
        ("proxy", "POST m-blue-pod-1:8000/v2/models/m/generate"),  # canary on every pod
        ("create_config_map", "m-blue-adapters"), ("replace_config_map", "m-blue-adapters"), *acks,  # alias
        ("create_config_map", "m-blue-adapters"), ("replace_config_map", "m-blue-adapters"), *acks,  # final
    ]
    final = configmap_list(cluster)
    assert sorted(final) == ["legal", "legal@2", "support", "support@2"]
    unchanged = adapter_list.parse_location("legal", live_ep["adapters"]["legal"])
    assert final["legal"] == final["legal@2"] == unchanged  # nothing to load: in v1's archive, the pod's own
    new = final["support"]
    assert isinstance(new, adapter_list.ArchiveLocation) and new.path == "m/2/adapters/support"
    body = store.get_object(Bucket=STORE_BUCKET, Key=f"{new.url}/{new.file}".removeprefix(f"s3://{STORE_BUCKET}/"))
    data = body["Body"].read()
    assert hashlib.sha256(data).hexdigest() == new.sha256  # the archive the pods verify
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        member = tar.extractfile("repository/m/2/adapters/support/adapter_model.safetensors")
        assert member is not None and member.read() == b"s2"
    recorded = ex.store.endpoints("m", "m-blue")
    assert recorded["adapters"] == {n: loc.text() if isinstance(loc, adapter_list.ArchiveLocation) else loc
                                    for n, loc in final.items()}
    assert recorded["adapter_release"] == 2
    assert not [c for c in cluster.calls if "deployment" in c[0]]


def test_a_pod_that_cannot_serve_the_list_rolls_the_live_list_back(tmp_path, store):
    """A pod's follower reports why it failed (an archive whose sha256 changed, say): the step fails at once and the
    rollback writes the live list back into the ConfigMap, which the pods then acknowledge."""
    cluster = FakeCluster()
    ex = executor(tmp_path, cluster)
    assert ex.deploy(lora_release(tmp_path, 1, {"support": b"s1"})).ok
    live = ex.store.endpoints("m", "m-blue")["adapters"]
    cluster.failing["m-blue-pod-1"] = "the archive's sha256 is 00ff (the object changed in the store)"
    out = ex.deploy(lora_release(tmp_path, 2, {"support": b"s2"}))
    assert not out.ok and out.rolled_back and "m-blue-pod-1 cannot serve the adapter list" in out.error
    assert "sha256" in out.error
    cluster.failing.clear()
    out = ex.recover("m")  # nothing left running: the rollback already ran
    assert configmap_list(cluster) == adapter_list.parse(adapter_list.render(
        {n: adapter_list.parse_location(n, v) for n, v in live.items()}))
    assert ex.store.endpoints("m", "m-blue")["adapters"] == live


def test_a_retired_unit_takes_its_adapter_list_with_it(tmp_path, store):
    cluster = FakeCluster()
    ex = executor(tmp_path, cluster)
    assert ex.deploy(lora_release(tmp_path, 1, {"support": b"s1"})).ok
    assert ex.deploy(lora_release(tmp_path, 2, {"support": b"s2"})).ok  # adapters: the ConfigMap now exists
    assert ("config_map", "m-blue-adapters") in cluster.objects
    rel = lora_release(tmp_path, 3, {"support": b"s2"})
    (rel.repository / "m" / "3" / "model.json").write_text(json.dumps({"model": "s3://models/m/rev2",
                                                                       "enable_lora": True}))
    out = ex.deploy(rel)  # the weights changed: red-black, the old unit retired with its list
    assert out.ok and out.strategy == "red-black", out
    assert ("config_map", "m-blue-adapters") not in cluster.objects
    assert "delete_config_map" in [c[0] for c in cluster.calls]


@pytest.mark.parametrize(("entry", "field", "match"), [
    ({"support": "/srv/adapters/support"}, "adapters.support", "no host folder"),
    ({"support": f"{STORE}/m/{'ab' * 8}/m-v2.tar.gz#sha256={'cd' * 32}&path=m/2/adapters/support"},
     "adapters.support", "not an archive location"),  # the key's digest is not the archive's
    ({"support": f"{STORE}/m/{'ab' * 8}/m-v2.tar.gz#sha256={'ab' * 32}&path=m/../../etc"},
     "adapters.support", "path rule"),
    ({"bad name": "s3://adapters/x"}, "adapters.bad name", "adapter name"),
    ({"support": 3}, "adapters.support", "without a location"),
])
def test_a_followed_list_refuses_what_a_pod_cannot_fetch_naming_the_field(entry, field, match):
    with pytest.raises(TritonpkgError, match=match) as exc:
        adapter_list.parse(json.dumps(entry).encode(), "adapters.json")
    assert exc.value.field == field


def test_the_driver_refuses_a_list_entry_that_is_no_packaged_adapter_folder(tmp_path, store):
    cluster = FakeCluster()
    ex = executor(tmp_path, cluster)
    assert ex.deploy(lora_release(tmp_path, 1, {"support": b"s1"})).ok
    from tritonpkg.deploy.driver import Endpoints

    ep = Endpoints.of(ex.store.endpoints("m", "m-blue"))
    (tmp_path / "loose" / "m" / "2" / "adapters" / "x").mkdir(parents=True)  # no lock: not a packaged release
    escape = tmp_path / "lora1" / "m" / "1" / "adapters" / "escape"  # inside a packaged release, a link out of it
    escape.symlink_to(tmp_path / "loose" / "m" / "2" / "adapters" / "x", target_is_directory=True)
    for bad in (str(tmp_path / "loose" / "m" / "2" / "adapters" / "x"), "./adapters/x", "/etc/passwd", str(escape),
                str(tmp_path / "lora1" / "m" / "1" / "adapters" / ".." / ".." / ".." / "loose")):
        with pytest.raises(TritonpkgError, match="not an adapter folder of a packaged release") as exc:
            ex.driver.adapters("m", 1, ep, {"x": bad})
        assert exc.value.field == "adapters.x"
    assert ("config_map", "m-blue-adapters") not in cluster.objects  # refused before anything was written


def test_the_adapter_list_configmap_validates_and_keeps_to_1_mib():
    data = adapter_list.render({"support": adapter_list.parse_location(
        "support", f"{STORE}/m/{'ab' * 8}/m-v2.tar.gz#sha256={'ab' * 32}&path=m/2/adapters/support")})
    body = k8s.adapter_list_manifest("m", "m-blue", data, "serving")
    assert k8s.validate([body])[0].startswith("ConfigMap/m-blue-adapters: valid")
    body["data"]["adapters.json"] = "x" * (1 << 20)
    with pytest.raises(k8s.ManifestError, match="1048576"):
        k8s.validate([body])


def test_the_official_client_sends_the_adapter_steps_as_the_api_server_expects(tmp_path, store):
    """The driver's adapter steps through the real `kubernetes` client (its CoreV1Api and ApiClient), against a
    loopback HTTP server standing for the API server: the ConfigMap created then replaced at its REST paths, the
    pods listed by the unit's label, each pod's /health/adapters read and the canary POSTed (with its body) at
    the pod proxy's path, `<pod>:<port>/proxy/...`."""
    kubernetes = pytest.importorskip("kubernetes", reason="pip install kubernetes (the kubernetes extra)")
    import http.server
    import threading
    import urllib.parse

    seen: list[tuple[str, str]] = []
    maps: dict[str, dict] = {}

    class ApiServer(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def _answer(self, code, body):
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _body(self):
            return json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"null")

        def do_GET(self):
            url = urllib.parse.urlsplit(self.path)
            seen.append(("GET", url.path + (f"?{urllib.parse.unquote(url.query)}" if url.query else "")))
            if url.path == "/api/v1/namespaces/serving/pods":
                ready = {"conditions": [{"type": "Ready", "status": "True"}]}
                return self._answer(200, {"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": [
                    {"metadata": {"name": "m-blue-0"}, "status": ready}]})
            data = maps["m-blue-adapters"]["data"]["adapters.json"].encode()
            sha = adapter_list.digest(data)
            return self._answer(200, {"list_sha256": sha, "applied_sha256": sha, "error": None})

        def do_POST(self):
            body = self._body()
            seen.append(("POST", self.path))
            if self.path == "/api/v1/namespaces/serving/configmaps":
                name = body["metadata"]["name"]
                if name in maps:
                    return self._answer(409, {"kind": "Status", "code": 409, "reason": "AlreadyExists"})
                maps[name] = body
                return self._answer(201, body)
            lora = json.loads(body["sampling_parameters"])["lora_name"]
            return self._answer(200, {"text_output": f"from {lora}"})

        def do_PUT(self):
            body = self._body()
            seen.append(("PUT", self.path))
            maps[body["metadata"]["name"]] = body
            return self._answer(200, body)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), ApiServer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        conf = kubernetes.client.Configuration(host=f"http://127.0.0.1:{server.server_port}")
        core = kubernetes.client.CoreV1Api(kubernetes.client.ApiClient(conf))
        driver = k8s.KubernetesDriver(None, core, None, namespace="serving", poll_s=0, package_store=STORE)
        rel = lora_release(tmp_path, 2, {"support": b"s2"})
        from tritonpkg.deploy.driver import Endpoints

        ep = Endpoints.of({"name": "m-blue", "adapter_list": "m-blue-adapters"})
        folder = str(rel.repository / "m" / "2" / "adapters" / "support")
        written = driver.adapters("m", 1, ep, {"support@2": folder})
        assert driver.adapters("m", 1, ep, {"support": folder}) == {"support": written["support@2"]}
        assert driver.adapter_check("m", ep, {"text_input": "hi", "sampling_parameters": {"max_tokens": 1}},
                                    "support") == "support answered on 1 pod(s) (m-blue-0)"
    finally:
        server.shutdown()
    pods = ("GET", "/api/v1/namespaces/serving/pods?labelSelector=tritonpkg.io/unit=m-blue")
    ack = ("GET", "/api/v1/namespaces/serving/pods/m-blue-0:9000/proxy/health/adapters")
    assert seen == [
        ("POST", "/api/v1/namespaces/serving/configmaps"), pods, ack,
        ("POST", "/api/v1/namespaces/serving/configmaps"),  # 409: it exists, replaced
        ("PUT", "/api/v1/namespaces/serving/configmaps/m-blue-adapters"), pods, ack,
        pods, ("POST", "/api/v1/namespaces/serving/pods/m-blue-0:8000/proxy/v2/models/m/generate"),
    ]
    assert list(adapter_list.parse(maps["m-blue-adapters"]["data"]["adapters.json"].encode())) == ["support"]


def test_a_dry_run_of_an_adapter_rollout_has_the_configmap_it_leaves(tmp_path, store):
    """What `deploy --dry-run -o` writes for an adapter plan (service.dry_run, once it plans adapter rollouts on this
    target): only the unit's ConfigMap after the plan's last list, the release's changed adapter named inside the
    archive the dry run writes, the unchanged one in the live unit's archive; valid, under 1 MiB."""
    cluster = FakeCluster()
    ex = executor(tmp_path, cluster)
    assert ex.deploy(lora_release(tmp_path, 1, {"support": b"s1", "legal": b"l1"})).ok
    live = ex.store.endpoints("m", "m-blue")["adapters"]
    rel = lora_release(tmp_path, 2, {"support": b"s2", "legal": b"l1"})
    plan = ex.plan(rel)
    assert plan.strategy == "adapters"
    archive = package_store.archive_ref(STORE, "m", 2, package_store.write_archive(rel, tmp_path / "v2.tar.gz"))
    manifests = k8s.adapter_plan_manifests(plan, rel, archive, "serving")
    assert [m["kind"] for m in manifests] == ["ConfigMap"] and k8s.validate(manifests)
    listing = adapter_list.parse(manifests[0]["data"]["adapters.json"].encode())
    assert listing["support"] == adapter_list.ArchiveLocation(url=archive.url, file=archive.file,
                                                              sha256=archive.sha256, path="m/2/adapters/support")
    assert listing["legal"] == adapter_list.parse_location("legal", live["legal"])
    assert str(tmp_path) not in json.dumps(manifests)  # no host path


def test_deploy_dry_run_plans_an_adapter_rollout_and_writes_only_its_configmap(tmp_path, store):
    """service.dry_run (what `deploy --dry-run -o` calls) after a live v1: an adapter-only v2 is planned as an
    adapter rollout on this target too, and `out` gets the unit's adapters ConfigMap and the v2 archive, nothing
    else; the live objects are untouched."""
    from tritonpkg.deploy import service

    cluster = FakeCluster()
    ex = executor(tmp_path, cluster)
    assert ex.deploy(lora_release(tmp_path, 1, {"support": b"s1", "legal": b"l1"})).ok
    before = repr(sorted(cluster.objects.items()))
    out = tmp_path / "dry"
    result = service.dry_run(ex.store, lora_release(tmp_path, 2, {"support": b"s2", "legal": b"l1"}), "kubernetes",
                             out=out, kubernetes=service.KubernetesOptions(namespace="serving", package_store=STORE))
    assert result.plan.strategy == "adapters", result.plan.reason
    assert {s.kind for s in result.plan.steps} == {"adapters", "adapter_check"}, result.plan.steps
    names = sorted(p.name for p in out.iterdir())
    assert len(names) == 2 and "configmap-m-blue-adapters.yaml" in names, names
    assert names[1].endswith(".tar.gz") and sorted(result.written) == [str(out / n) for n in names], names
    assert repr(sorted(cluster.objects.items())) == before


def test_a_list_no_ready_pod_acknowledges_times_out_naming_why(tmp_path, store):
    """No ready pod (all restarting, say) is no acknowledgement: the step waits, then fails saying so, and the
    rollback writes the live list back (the pods read it when they start)."""
    cluster = FakeCluster()
    ex = executor(tmp_path, cluster)
    assert ex.deploy(lora_release(tmp_path, 1, {"support": b"s1"})).ok
    ex.driver.adapter_ack_timeout = 0
    cluster.objects[("deployment", "m-blue")]["spec"]["replicas"] = 0
    out = ex.deploy(lora_release(tmp_path, 2, {"support": b"s2"}))
    assert not out.ok and "no ready pod of m-blue" in out.error, out.error
    live = ex.store.endpoints("m", "m-blue")["adapters"]
    assert {n: loc.text() for n, loc in configmap_list(cluster).items()} == live
