"""The kubernetes target without a cluster: generated manifests validated against the real schemas,
and the exact sequence of client calls the executor makes, recorded by a fake of the official client
(the one fake in these tests: no API server can run here)."""

from __future__ import annotations

import copy
import types

import pytest

from tritonpkg.deploy.drivers import kubernetes as k8s
from tritonpkg.deploy.executor import Executor, Release
from tritonpkg.deploy.plan import Unit
from tritonpkg.deploy.state import StateStore

pytest.importorskip("kubernetes_validate", reason="pip install kubernetes-validate")


class ApiError(Exception):
    def __init__(self, status: int) -> None:
        super().__init__(f"HTTP {status}")
        self.status = status


class FakeCluster:
    """Records every call (method, name) in order and keeps the objects, answering like the API server:
    409 on creating what exists, 404 on touching what does not. Deployments report all replicas ready
    unless their name is in `never_ready`."""

    def __init__(self, never_ready: set[str] = frozenset()) -> None:
        self.calls: list[tuple[str, str]] = []
        self.objects: dict[tuple[str, str], dict] = {}
        self.never_ready = set(never_ready)
        self.apps, self.core, self.custom = (types.SimpleNamespace() for _ in range(3))
        for api, kinds in ((self.apps, ["deployment"]), (self.core, ["config_map", "service", "secret"])):
            for kind in kinds:
                setattr(api, f"create_namespaced_{kind}", self._create(kind))
                setattr(api, f"replace_namespaced_{kind}", self._replace(kind))
                setattr(api, f"delete_namespaced_{kind}", self._delete(kind))
        self.apps.read_namespaced_deployment_status = self._status
        self.apps.patch_namespaced_deployment_scale = self._scale
        self.custom.patch_namespaced_custom_object = self._patch_route
        self.custom.create_namespaced_custom_object = self._create_route

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


def executor(tmp_path, cluster):
    driver = k8s.KubernetesDriver(cluster.apps, cluster.core, cluster.custom, namespace="serving", poll_s=0,
                                  ready_timeout=0)
    return Executor(StateStore(tmp_path / "state.db"), driver, dwell_s=0)


def test_manifests_validate_against_the_kubernetes_schemas(tmp_path):
    rel = release(tmp_path, 1, gpus=1)
    cm, dep, svc = k8s.unit_manifests("m", Unit(name="m-blue", version=1, color="blue", replicas=2),
                                      repository=rel.repository, weights=rel.weights, gpus=1)
    route = k8s.route_manifest("m", weights={"m-blue": 90, "m-green": 10}, versions={"2": "m-v2"}, alias="m-v2")
    lines = k8s.validate([cm, dep, svc, route])
    assert len(lines) == 4 and "kubernetes-validate" in lines[0] and "checked-in Gateway API" in lines[3]
    pod = dep["spec"]["template"]["spec"]
    triton = pod["containers"][0]
    assert triton["readinessProbe"]["httpGet"]["path"] == "/v2/models/m/ready"
    assert triton["livenessProbe"]["httpGet"]["path"] == "/v2/health/live"
    # a dead engine's model unloads itself (explicit mode, every model loaded); the drain fits the grace
    assert {"--model-control-mode=explicit", "--load-model=*", "--exit-timeout-secs=20"} <= set(triton["args"])
    assert pod["terminationGracePeriodSeconds"] == 30
    assert triton["resources"]["limits"] == {"nvidia.com/gpu": "1"}
    assert pod["initContainers"][0]["args"][:3] == ["tritonpkg", "materialize", "copy"]
    assert {i["path"] for i in pod["volumes"][0]["configMap"]["items"]} == {"m/config.pbtxt", "m/1/model.py"}
    assert dep["spec"]["replicas"] == 2 and triton["image"] == "nvcr.io/nvidia/tritonserver:24.10-vllm-python-py3"
    default = route["spec"]["rules"][-1]["backendRefs"]
    assert default == [{"name": "m-blue", "port": 8000, "weight": 90}, {"name": "m-green", "port": 8000, "weight": 10}]


def test_invalid_manifests_are_refused_with_the_field():
    bad = k8s.route_manifest("m", weights={"m-blue": -1}, versions={}, alias=None)
    with pytest.raises(k8s.ManifestError, match="weight"):
        k8s.validate([bad])
    dep = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "x"}, "spec": {"replicas": "two"}}
    with pytest.raises(k8s.ManifestError, match="Deployment/x"):
        k8s.validate([dep])


def test_red_black_makes_these_api_calls_in_this_order(tmp_path):
    cluster = FakeCluster()
    ex = executor(tmp_path, cluster)
    assert ex.deploy(release(tmp_path, 1)).ok
    assert cluster.calls == [
        ("create_secret", "m-triton-admin"),
        ("create_config_map", "m-blue-repository"), ("create_deployment", "m-blue"), ("create_service", "m-blue"),
        ("read_deployment_status", "m-blue"),
        ("patch_route", "m"), ("create_route", "m-blue=100"),  # the first shift creates the route
        ("patch_route", "m-blue=100"),  # alias annotation
    ]
    cluster.calls.clear()
    out = ex.deploy(release(tmp_path, 2))
    assert out.ok, out.error
    assert cluster.calls == [
        ("create_secret", "m-triton-admin"),  # exists (409): kept, so the key stays the same
        ("create_config_map", "m-green-repository"), ("create_deployment", "m-green"), ("create_service", "m-green"),
        ("read_deployment_status", "m-green"),
        ("patch_route", "m-blue=50 m-green=50"), ("read_deployment_status", "m-green"),  # shift, gate
        ("patch_route", "m-blue=0 m-green=100"), ("read_deployment_status", "m-green"),
        ("patch_route", "m-green=100"),  # drain: blue leaves the route
        ("delete_deployment", "m-blue"), ("delete_service", "m-blue"), ("delete_config_map", "m-blue-repository"),
        ("patch_route", "m-green=100"),  # alias
    ]
    route = cluster.objects[("route", "m")]
    assert route["metadata"]["annotations"] == {"tritonpkg.io/current": "m-green"}


def test_units_restrict_tritons_admin_apis_to_the_secrets_key(tmp_path):
    """Every unit's Triton refuses model control, logging, trace, shared memory and statistics without the
    key of the deployment's Secret (Kubernetes expands $(VAR) in args from the container's env)."""
    cluster = FakeCluster()
    ex = executor(tmp_path, cluster)
    assert ex.deploy(release(tmp_path, 1)).ok
    key = cluster.objects[("secret", "m-triton-admin")]["stringData"]["admin-key"]
    assert ex.deploy(release(tmp_path, 2)).ok
    assert cluster.objects[("secret", "m-triton-admin")]["stringData"]["admin-key"] == key
    triton = cluster.objects[("deployment", "m-green")]["spec"]["template"]["spec"]["containers"][0]
    groups = "model-repository,logging,trace,shared-memory,statistics"
    assert f"--http-restricted-api={groups}:admin-key=$(TRITON_ADMIN_KEY)" in triton["args"]
    assert f"--grpc-restricted-protocol={groups}:admin-key=$(TRITON_ADMIN_KEY)" in triton["args"]
    assert triton["env"] == [{"name": "TRITON_ADMIN_KEY",
                              "valueFrom": {"secretKeyRef": {"name": "m-triton-admin", "key": "admin-key"}}}]
    assert len(key) >= 32 and key not in str(cluster.objects[("deployment", "m-green")])


def test_a_unit_that_never_gets_ready_is_rolled_back_with_these_calls(tmp_path):
    cluster = FakeCluster(never_ready={"m-green"})
    ex = executor(tmp_path, cluster)
    assert ex.deploy(release(tmp_path, 1)).ok
    cluster.calls.clear()
    out = ex.deploy(release(tmp_path, 2))
    assert not out.ok and out.rolled_back and "0/1 pods ready" in out.error
    assert cluster.calls == [
        ("create_secret", "m-triton-admin"),
        ("create_config_map", "m-green-repository"), ("create_deployment", "m-green"), ("create_service", "m-green"),
        ("read_deployment_status", "m-green"),  # health check fails
        ("patch_route", "m-blue=100 m-green=0"),  # rollback: all traffic back in one route change
        ("patch_route", "m-blue=100"),  # drain green
        ("delete_deployment", "m-green"), ("delete_service", "m-green"), ("delete_config_map", "m-green-repository"),
        ("patch_route", "m-blue=100"),  # alias back
    ]
    assert {k for k in cluster.objects if k[0] == "deployment"} == {("deployment", "m-blue")}


def test_scale_follows_the_traffic_share(tmp_path):
    cluster = FakeCluster()
    ex = executor(tmp_path, cluster)
    assert ex.deploy(release(tmp_path, 1, replicas=4)).ok
    cluster.calls.clear()
    assert ex.deploy(release(tmp_path, 2, replicas=4)).ok
    scales = [c[1] for c in cluster.calls if c[0] == "scale_deployment"]
    assert scales == ["m-green=2", "m-blue=2", "m-green=4", "m-blue=1"]
