"""The kubernetes target: per unit a ConfigMap (the packaged model repository), a Deployment (Triton
with readiness/liveness probes on /v2/health, GPU requests, an init container running
`tritonpkg materialize` for the weights) and a Service; per model one Gateway API HTTPRoute whose
backend weights shift traffic and whose version rules route versioned units, and one Secret holding the
Triton admin key every unit's restricted admin APIs ask for.

Manifests are pure functions (`unit_manifests`, `route_manifest`), validated by `validate()`: core
kinds with kubernetes-validate, the HTTPRoute against the CRD schema checked in beside this file
(kubernetes-validate has no Gateway API schemas). `KubernetesDriver` applies them through the
official `kubernetes` client objects it is given (AppsV1Api, CoreV1Api, CustomObjectsApi)."""

from __future__ import annotations

import base64
import json
import time
import urllib.parse
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tritonpkg import compat
from tritonpkg.deploy.driver import Driver, Endpoints, Entry, OnStarted
from tritonpkg.deploy.plan import Unit
from tritonpkg.errors import TritonpkgError
from tritonpkg.runtime import admin
from tritonpkg.runtime.server import DRAIN_TIMEOUT_S

if TYPE_CHECKING:
    from tritonpkg.deploy.driver import Release

GATEWAY_GROUP, GATEWAY_VERSION, ROUTES = "gateway.networking.k8s.io", "v1", "httproutes"
ROUTE_SCHEMA = Path(__file__).with_name("httproute.schema.json")
K8S_VERSION = "1.30.0"
HTTP, GRPC, METRICS = 8000, 8001, 8002


class ManifestError(TritonpkgError):
    """A generated manifest does not match its Kubernetes schema."""


def _name(text: str) -> str:
    """A DNS-1123 name from a model or unit name (Kubernetes forbids '_' and upper case)."""
    out = "".join(c if c.isalnum() or c in "-." else "-" for c in text.lower()).strip("-.")
    return out[:63] or "model"


def triton_image(release: str) -> str:
    return f"nvcr.io/nvidia/tritonserver:{release}-vllm-python-py3"


def _repository_configmap(name: str, namespace: str, repo: Path, labels: dict[str, str]) -> tuple[dict, list[dict]]:
    """The repository's files as ConfigMap binaryData (keys cannot hold '/', so items map them back)."""
    data, items = {}, []
    for i, path in enumerate(sorted(p for p in repo.rglob("*") if p.is_file())):
        key = f"f{i}-{_name(path.name)}"[:253]
        data[key] = base64.b64encode(path.read_bytes()).decode()
        items.append({"key": key, "path": str(path.relative_to(repo))})
    cm = {"apiVersion": "v1", "kind": "ConfigMap",
          "metadata": {"name": f"{name}-repository", "namespace": namespace, "labels": labels},
          "binaryData": data}
    return cm, items


ADMIN_ENV = "TRITON_ADMIN_KEY"


def admin_secret_name(model: str) -> str:
    return f"{_name(model)}-triton-admin"


def admin_secret_manifest(model: str, namespace: str = "default", key: str | None = None) -> dict[str, Any]:
    """The Secret holding the deployment's Triton admin key (one per model, shared by its units, so the key
    that works through the route works on every unit). Created once and then kept: never replaced."""
    return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": admin_secret_name(model), "namespace": namespace,
                         "labels": {"app.kubernetes.io/name": _name(model),
                                    "app.kubernetes.io/managed-by": "tritonpkg"}},
            "stringData": {admin.KEY_FILE: admin.check_key(key or admin.new_key())}}


def unit_manifests(model: str, unit: Unit, *, repository: Path, namespace: str = "default",
                   release: str | None = None, weights: str | None = None, gpus: int = 0,
                   toolkit_image: str = "tritonpkg:latest", replicas: int | None = None) -> list[dict[str, Any]]:
    name = _name(unit.name)
    labels = {"app.kubernetes.io/name": _name(model), "app.kubernetes.io/managed-by": "tritonpkg",
              "tritonpkg.io/unit": name, "tritonpkg.io/version": str(unit.version)}
    if unit.color:
        labels["tritonpkg.io/color"] = unit.color
    cm, items = _repository_configmap(name, namespace, repository, labels)
    probe = lambda path, period: {"httpGet": {"path": path, "port": "http"}, "periodSeconds": period,  # noqa: E731
                                  "timeoutSeconds": 2, "failureThreshold": 3}
    resources: dict[str, Any] = {"requests": {"cpu": "1", "memory": "4Gi"}}
    if gpus:
        resources["requests"]["nvidia.com/gpu"] = str(gpus)
        resources["limits"] = {"nvidia.com/gpu": str(gpus)}
    mounts = [{"name": "repository", "mountPath": "/models", "readOnly": True},
              {"name": "weights", "mountPath": "/weights"}]
    pod: dict[str, Any] = {
        "containers": [{
            "name": "triton", "image": triton_image(release or compat.default_release()),
            "args": ["tritonserver", "--model-repository=/models", f"--http-port={HTTP}", f"--grpc-port={GRPC}",
                     f"--metrics-port={METRICS}", "--metrics-config=summary_latencies=true",
                     # every model loaded, but explicit: a vLLM model whose engine died unloads itself, so the
                     # readiness probe takes the pod out; in-flight requests get the drain on SIGTERM
                     "--model-control-mode=explicit", "--load-model=*", f"--exit-timeout-secs={DRAIN_TIMEOUT_S}",
                     *admin.restricted_args(f"$({ADMIN_ENV})")],  # admin APIs only with the Secret's key
            "env": [{"name": ADMIN_ENV, "valueFrom": {"secretKeyRef": {"name": admin_secret_name(model),
                                                                       "key": admin.KEY_FILE}}}],
            "ports": [{"name": "http", "containerPort": HTTP}, {"name": "grpc", "containerPort": GRPC},
                      {"name": "metrics", "containerPort": METRICS}],
            # the model's own readiness: Triton's /v2/health/ready turns true again once a dead engine's model
            # has finished unloading (its strict readiness ignores unloaded models)
            "readinessProbe": probe(f"/v2/models/{urllib.parse.quote(model, safe='')}/ready", 5),
            "livenessProbe": probe("/v2/health/live", 10),
            "startupProbe": {**probe("/v2/health/live", 5), "failureThreshold": 120},
            "resources": resources, "volumeMounts": mounts}],
        "volumes": [{"name": "repository", "configMap": {"name": cm["metadata"]["name"], "items": items}},
                    {"name": "weights", "emptyDir": {}}],
        "terminationGracePeriodSeconds": DRAIN_TIMEOUT_S + 10,  # the drain, then the models' unload
    }
    if weights:
        pod["initContainers"] = [{
            "name": "materialize", "image": toolkit_image,
            "args": ["tritonpkg", "materialize", "copy", weights, "--to", "/weights"],
            "volumeMounts": [{"name": "weights", "mountPath": "/weights"}]}]
    deployment = {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {"replicas": replicas if replicas is not None else unit.replicas,
                 "selector": {"matchLabels": {"tritonpkg.io/unit": name}},
                 "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}},
                 "template": {"metadata": {"labels": labels}, "spec": pod}},
    }
    service = {
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {"selector": {"tritonpkg.io/unit": name},
                 "ports": [{"name": "http", "port": HTTP, "targetPort": "http"},
                           {"name": "grpc", "port": GRPC, "targetPort": "grpc", "appProtocol": "kubernetes.io/h2c"},
                           {"name": "metrics", "port": METRICS, "targetPort": "metrics"}]},
    }
    return [cm, deployment, service]


def route_manifest(model: str, *, weights: dict[str, int], versions: dict[str, str], alias: str | None,
                   namespace: str = "default", gateway: str = "tritonpkg") -> dict[str, Any]:
    """weights: unit -> percent of unversioned traffic; versions: version -> unit (versioned routes,
    by Triton's /v2/models/<m>/versions/<N> path or an x-model-version header)."""
    rules: list[dict[str, Any]] = []
    targets = dict(versions)
    if alias:
        targets["current"] = alias
    for key, unit in sorted(targets.items()):
        matches: list[dict[str, Any]] = [{"headers": [{"type": "Exact", "name": "x-model-version", "value": key}]}]
        if key != "current":
            matches.insert(0, {"path": {"type": "PathPrefix", "value": f"/v2/models/{model}/versions/{key}"}})
        rules.append({"matches": matches, "backendRefs": [{"name": _name(unit), "port": HTTP}]})
    live = [{"name": _name(u), "port": HTTP, "weight": w} for u, w in sorted(weights.items())]
    if live:
        rules.append({"matches": [{"path": {"type": "PathPrefix", "value": "/"}}], "backendRefs": live})
    meta: dict[str, Any] = {"name": _name(model), "namespace": namespace,
                            "labels": {"app.kubernetes.io/managed-by": "tritonpkg"}}
    if alias:
        meta["annotations"] = {"tritonpkg.io/current": _name(alias)}
    return {"apiVersion": f"{GATEWAY_GROUP}/{GATEWAY_VERSION}", "kind": "HTTPRoute", "metadata": meta,
            "spec": {"parentRefs": [{"name": gateway}], "rules": rules}}


def validate(manifests: list[dict[str, Any]], k8s_version: str = K8S_VERSION) -> list[str]:
    """One line per manifest: how it was validated. Raises ManifestError on the first invalid one."""
    import jsonschema
    import kubernetes_validate

    done = []
    for m in manifests:
        what = f"{m.get('kind')}/{m.get('metadata', {}).get('name')}"
        if m.get("kind") == "HTTPRoute":
            schema = json.loads(ROUTE_SCHEMA.read_text())
            errors = sorted(jsonschema.Draft7Validator(schema).iter_errors(m), key=lambda e: list(e.path))
            if errors:
                e = errors[0]
                raise ManifestError(e.message, file=what, field=".".join(map(str, e.path)) or "(top)",
                                    expected="a Gateway API v1 HTTPRoute (schema: httproute.schema.json)")
            done.append(f"{what}: valid against the checked-in Gateway API HTTPRoute v1 CRD schema "
                        "(kubernetes-validate has no Gateway API schemas)")
            continue
        try:
            kubernetes_validate.validate(m, k8s_version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            raise ManifestError(str(exc).splitlines()[0], file=what,
                                field=".".join(map(str, getattr(exc, "path", []))) or "(top)",
                                expected=f"a valid {m.get('kind')} for Kubernetes {k8s_version}") from exc
        done.append(f"{what}: valid (kubernetes-validate, Kubernetes {k8s_version}, strict)")
    return done


class KubernetesDriver:
    """Applies units and the route through the kubernetes client. `apps`, `core` and `custom` are
    AppsV1Api, CoreV1Api and CustomObjectsApi instances (or anything with the same methods)."""

    target = "kubernetes"

    def __init__(self, apps: Any, core: Any, custom: Any, *, namespace: str = "default", gateway: str = "tritonpkg",
                 toolkit_image: str = "tritonpkg:latest", ready_timeout: float = 900.0, poll_s: float = 2.0,
                 release: Release | None = None) -> None:
        self.apps, self.core, self.custom = apps, core, custom
        self.namespace, self.gateway, self.toolkit_image = namespace, gateway, toolkit_image
        self.ready_timeout, self.poll_s = ready_timeout, poll_s
        self.release = release
        self.model: str | None = None
        self.weights: dict[str, int] = {}
        self.versions: dict[str, str] = {}
        self.alias_unit: str | None = None
        self.proxy: dict[str, Any] = {}

    @classmethod
    def from_kubeconfig(cls, **kw: Any) -> KubernetesDriver:
        try:
            from kubernetes import client, config
        except ImportError as exc:
            raise TritonpkgError("the kubernetes client is not installed", field="--target kubernetes",
                                 expected="pip install kubernetes (or --dry-run -o DIR to write manifests)") from exc
        try:
            config.load_kube_config()
        except Exception as exc:
            raise TritonpkgError(f"no cluster configured: {exc}", field="--target kubernetes",
                                 expected="a kubeconfig (KUBECONFIG), or --dry-run -o DIR to write manifests") from exc
        return cls(client.AppsV1Api(), client.CoreV1Api(), client.CustomObjectsApi(), **kw)

    def sync(self, model: str, units: Sequence[Mapping[str, Any]], alias: str | None) -> None:
        """Rebuild the route's picture from the state file (each command starts with a fresh driver)."""
        self.model = model
        live = [u for u in units if u["status"] != "retired"]
        self.weights = {_name(u["name"]): u["weight"] for u in live if u["weight"] > 0}
        self.versions = {str(u["version"]): _name(u["name"]) for u in live if u["routed"]}
        self.alias_unit = _name(alias) if alias else None

    # -- steps -----------------------------------------------------------------------------------
    def provision(self, model: str, unit: Unit, release: Release, taken_slots: set[int],
                  on_started: OnStarted) -> Endpoints:
        """Apply the unit's objects; they are named by the unit, so nothing needs recording early."""
        self.model = model
        cm, deployment, service = unit_manifests(
            model, unit, repository=release.repository, namespace=self.namespace, release=release.target_release,
            weights=release.weights, gpus=release.gpus, toolkit_image=self.toolkit_image,
            replicas=unit.replicas)
        secret = admin_secret_manifest(model, self.namespace)
        validate([secret, cm, deployment, service])
        self._create_once(self.core.create_namespaced_secret, secret)
        self._apply(self.core.create_namespaced_config_map, self.core.replace_namespaced_config_map, cm)
        self._apply(self.apps.create_namespaced_deployment, self.apps.replace_namespaced_deployment, deployment)
        self._apply(self.core.create_namespaced_service, self.core.replace_namespaced_service, service)
        return Endpoints(name=deployment["metadata"]["name"], namespace=self.namespace)

    def _create_once(self, create: Any, body: dict[str, Any]) -> None:
        """Create `body` unless it exists (409): the existing one is kept as it is."""
        try:
            create(namespace=self.namespace, body=body)
        except Exception as exc:
            if getattr(exc, "status", None) != 409:
                raise

    def _apply(self, create: Any, replace: Any, body: dict[str, Any]) -> None:
        try:
            create(namespace=self.namespace, body=body)
        except Exception as exc:
            if getattr(exc, "status", None) != 409:
                raise
            replace(name=body["metadata"]["name"], namespace=self.namespace, body=body)

    def health_check(self, model: str, version: int, ep: Endpoints, smoke: dict[str, Any] | None) -> str:
        """Ready replicas = pods whose readiness probe (Triton /v2/health/ready) passes."""
        deadline = time.monotonic() + self.ready_timeout
        while True:
            dep = self.apps.read_namespaced_deployment_status(name=ep.name, namespace=self.namespace)
            want = dep.spec.replicas or 0
            ready = dep.status.ready_replicas or 0
            if want and ready >= want:
                return (f"{ready}/{want} pods ready (readiness probe /v2/health/ready); the canary request is "
                        "not sent from outside the cluster")
            if time.monotonic() > deadline:
                raise TritonpkgError(f"{ep.name}: {ready}/{want} pods ready after {self.ready_timeout:g} s",
                                     field="health_check")
            time.sleep(self.poll_s)

    def alive(self, ep: Endpoints) -> bool:
        dep = self.apps.read_namespaced_deployment_status(name=ep.name, namespace=self.namespace)
        return bool(dep.status.ready_replicas)

    def metrics_text(self, ep: Endpoints) -> str | None:
        return None  # metrics live in the cluster's Prometheus; the gate then checks readiness only

    def shift(self, weights: Mapping[str, tuple[Endpoints, int]]) -> None:
        for unit, (_, w) in weights.items():
            self.weights[_name(unit)] = w
        self._apply_route()

    def scale(self, replicas: Mapping[str, int]) -> str:
        for unit, n in replicas.items():
            self.apps.patch_namespaced_deployment_scale(name=_name(unit), namespace=self.namespace,
                                                        body={"spec": {"replicas": n}})
        return ", ".join(f"{u}={n}" for u, n in replicas.items())

    def drain(self, ep: Endpoints) -> None:
        unit = self._unit_of(ep)
        if unit in self.weights:
            self.weights.pop(unit)
            self._apply_route()

    def retire(self, ep: Endpoints) -> str:
        unit = self._unit_of(ep)
        self.weights.pop(unit, None)
        self.versions = {k: v for k, v in self.versions.items() if v != unit}
        name = ep.name
        if name is None:
            return ""
        for delete in (self.apps.delete_namespaced_deployment, self.core.delete_namespaced_service):
            self._delete(delete, name)
        self._delete(self.core.delete_namespaced_config_map, f"{name}-repository")
        return ""

    def _delete(self, delete: Any, name: str) -> None:
        try:
            delete(name=name, namespace=self.namespace)
        except Exception as exc:
            if getattr(exc, "status", None) != 404:
                raise

    def route(self, ep: Endpoints, version: str) -> None:
        self.versions[version] = self._unit_of(ep)
        self._apply_route()

    def alias(self, ep: Endpoints) -> None:
        self.alias_unit = self._unit_of(ep)
        self._apply_route()

    def entry(self) -> Entry:
        return Entry(route=f"HTTPRoute/{_name(self.model or 'model')} in {self.namespace} (Gateway {self.gateway})")

    def teardown(self, units: Sequence[Endpoints]) -> list[str]:
        """Delete every unit's objects (the route and the admin Secret stay: a next deploy reuses them)."""
        return [note for ep in units if (note := self.retire(ep))]

    def _unit_of(self, ep: Endpoints) -> str:
        return ep.name or ""

    def _apply_route(self) -> None:
        body = route_manifest(self.model or "model", weights=dict(self.weights),
                              versions=self.versions, alias=self.alias_unit, namespace=self.namespace,
                              gateway=self.gateway)
        validate([body])
        try:
            self.custom.patch_namespaced_custom_object(GATEWAY_GROUP, GATEWAY_VERSION, self.namespace, ROUTES,
                                                       body["metadata"]["name"], body)
        except Exception as exc:
            if getattr(exc, "status", None) != 404:
                raise
            self.custom.create_namespaced_custom_object(GATEWAY_GROUP, GATEWAY_VERSION, self.namespace, ROUTES, body)


def _implements(driver: KubernetesDriver) -> Driver:
    return driver  # mypy proves the driver implements the protocol
