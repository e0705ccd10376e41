"""The kubernetes target: per unit a Deployment, a Service and (with deployment.autoscaling) a
HorizontalPodAutoscaler; per model one Gateway API HTTPRoute whose backend weights shift traffic and whose
version rules route versioned units, and one Secret holding the Triton admin key every unit's restricted admin
APIs ask for.

A pod runs the start procedure of `tritonpkg serve`, in the toolkit image (tritonpkg.image): an init
container fetches the release's package archive from the package store (package_store.py: object storage,
keyed by the archive's sha256), then the main container serves it (unpack + verify against the lock, weights
materialized from s3:// or hf:// or read from a declared volume, plugins, Triton, merged /metrics, the OpenAI
API). No API object carries the repository and no manifest names a folder of the deploying host: `validate`
refuses a hostPath volume, a path argument outside the container's own mounts, and an object over the API
server's 1 MiB limit. Probes read the start procedure's readiness (the OpenAI API's /health/ready: Triton and
every model READY, false within a second of an engine death); with `--on-engine-death exit` a dead engine
ends the container, which the kubelet restarts.

Manifests are pure functions (`unit_manifests`, `route_manifest`, `hpa_manifest`), validated by `validate()`:
core kinds with kubernetes-validate, the HTTPRoute against the CRD schema checked in beside this file
(kubernetes-validate has no Gateway API schemas). `KubernetesDriver` uploads the archive and applies the
objects through the official `kubernetes` client objects it is given."""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tritonpkg import compat, safepath
from tritonpkg.deploy.driver import AdapterRollouts, Driver, Endpoints, Entry, OnStarted
from tritonpkg.deploy.drivers import package_store as store_mod
from tritonpkg.deploy.drivers.kubernetes_pods import Pods, ReleaseArchives
from tritonpkg.deploy.drivers.package_store import ArchiveRef
from tritonpkg.deploy.plan import Plan, Unit
from tritonpkg.errors import TritonpkgError
from tritonpkg.runtime import admin
from tritonpkg.runtime.server import DRAIN_TIMEOUT_S
from tritonpkg.serve import adapter_list as followed
from tritonpkg.serve.supervisor import EngineDeathPolicy

if TYPE_CHECKING:
    from tritonpkg.deploy.driver import Release
    from tritonpkg.spec import Autoscaling, Volume

GATEWAY_GROUP, GATEWAY_VERSION, ROUTES = "gateway.networking.k8s.io", "v1", "httproutes"
ROUTE_SCHEMA = Path(__file__).with_name("httproute.schema.json")
K8S_VERSION = "1.30.0"
HTTP, GRPC, METRICS, OPENAI = 8000, 8001, 8002, 9000
MAX_OBJECT_BYTES = 1 << 20  # the API server refuses a ConfigMap or Secret over 1 MiB; no object here comes near
PACKAGE, STATE, WEIGHTS = "/package", "/state", "/weights"  # the pod's own folders (emptyDirs)
MIN_REPLICAS = "tritonpkg.io/min-replicas"  # the spec's HPA floor, kept on the HPA a shift moves the floor of
ADMIN_ENV = "TRITONPKG_ADMIN_KEY"  # serve --admin-key's variable, from the deployment's Secret
ADAPTER_ACK_S = 600.0  # a ConfigMap change reaches the pods' files within the kubelet's sync + cache TTL (~2 min)


class ManifestError(TritonpkgError):
    """A generated manifest does not match its Kubernetes schema or breaks a rule of this target."""


def _name(text: str) -> str:
    """A DNS-1123 name from a model or unit name (Kubernetes forbids '_' and upper case)."""
    out = "".join(c if c.isalnum() or c in "-." else "-" for c in text.lower()).strip("-.")
    return out[:63] or "model"


def triton_image(release: str) -> str:
    return f"nvcr.io/nvidia/tritonserver:{release}-vllm-python-py3"


def toolkit_image_for(release: str, given: str | None = None) -> str:
    """The image the pod runs: the one given, else the toolkit image `tritonpkg image build` tags for `release`."""
    from tritonpkg.image import default_tag

    return given or default_tag(release)


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


def archive_path(archive: ArchiveRef) -> str:
    """Where the init container's `tritonpkg materialize` puts the archive: ROOT/<name>/<revision>/<file>."""
    return f"{PACKAGE}/package/{archive.revision}/{archive.file}"


def fetch_args(archive: ArchiveRef) -> list[str]:
    return ["materialize", "copy", archive.url, "--to", PACKAGE, "--name", "package", "--revision",
            archive.revision, "--json"]


def verify_command(archive: ArchiveRef) -> list[str]:
    """The second init container: the fetched archive is the one this manifest names (its sha256, coreutils'
    sha256sum), so a changed object in the store stops the pod before anything of it is unpacked."""
    return ["sh", "-c", f"echo '{archive.sha256}  {archive_path(archive)}' | sha256sum --check --strict"]


def serve_args(archive: ArchiveRef, on_engine_death: EngineDeathPolicy = "exit") -> list[str]:
    """The main container's `tritonpkg serve` (the image's entrypoint): every public port bound in the pod,
    the OpenAI API on, a dead engine handled by `on_engine_death` (exit: the container ends and the kubelet
    restarts it; restart: serve loads the model again in place, readiness false meanwhile), the drain within the
    termination grace; no --json, whose report carries the admin key, into the pod's log."""
    pod_ip = "0.0.0.0"  # noqa: S104 - the pod's own network namespace: the Service and the kubelet's probes reach it
    return ["serve", archive_path(archive), "--host", pod_ip, "--http-port", str(HTTP), "--grpc-port", str(GRPC),
            "--metrics-port", str(METRICS), "--openai-port", str(OPENAI), "--state-dir", f"{STATE}/serve",
            "--weights-root", WEIGHTS, "--on-engine-death", on_engine_death, "--drain-timeout", str(DRAIN_TIMEOUT_S),
            "--adapter-list", f"{followed.MOUNT}/{followed.KEY}"]


def adapter_list_name(unit: str) -> str:
    """The unit's ConfigMap holding the adapter list its pods follow."""
    return f"{_name(unit)[:54]}-adapters"


def adapter_list_manifest(model: str, unit: str, data: bytes, namespace: str = "default") -> dict[str, Any]:
    """The unit's adapter list (adapter_list.render's bytes), which every pod of the unit mounts read-only and
    its `serve --adapter-list` follows: only the driver writes it, at an adapter rollout."""
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": adapter_list_name(unit), "namespace": namespace,
                         "labels": {"app.kubernetes.io/name": _name(model), "app.kubernetes.io/managed-by": "tritonpkg",
                                    "tritonpkg.io/unit": _name(unit)}},
            "data": {followed.KEY: data.decode()}}


def _floor(n: int, scaling: Autoscaling) -> int:
    return min(max(n, scaling.min_replicas), scaling.max_replicas)


def _quantity(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{round(value * 1000)}m"


def hpa_manifest(name: str, namespace: str, labels: dict[str, str], scaling: Autoscaling,
                 floor: int | None = None) -> dict[str, Any]:
    """autoscaling/v2 on a per-pod metric through the custom metrics API (the Prometheus adapter's `pods`
    metrics): `floor` is the minReplicas a red-black shift holds (within the spec's bounds), kept beside the
    spec's own floor."""
    return {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": name, "namespace": namespace, "labels": labels,
                         "annotations": {MIN_REPLICAS: str(scaling.min_replicas)}},
            "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
                     "minReplicas": _floor(floor if floor is not None else scaling.min_replicas, scaling),
                     "maxReplicas": scaling.max_replicas,
                     "metrics": [{"type": "Pods", "pods": {
                         "metric": {"name": scaling.metric},
                         "target": {"type": "AverageValue", "averageValue": _quantity(scaling.target_average)}}}]}}


def unit_manifests(model: str, unit: Unit, *, archive: ArchiveRef, namespace: str = "default",
                   release: str | None = None, gpus: int = 0, toolkit_image: str | None = None,
                   replicas: int | None = None, volumes: Sequence[Volume] = (),
                   autoscaling: Autoscaling | None = None,
                   on_engine_death: EngineDeathPolicy = "exit") -> list[dict[str, Any]]:
    """The unit's Deployment and Service, and its HPA when the spec asks for autoscaling."""
    name = _name(unit.name)
    release = release or compat.default_release()
    image = toolkit_image_for(release, toolkit_image)
    labels = {"app.kubernetes.io/name": _name(model), "app.kubernetes.io/managed-by": "tritonpkg",
              "tritonpkg.io/unit": name, "tritonpkg.io/version": str(unit.version)}
    if unit.color:
        labels["tritonpkg.io/color"] = unit.color
    probe = lambda path, period, failures: {  # noqa: E731
        "httpGet": {"path": path, "port": "openai"}, "periodSeconds": period, "timeoutSeconds": 2,
        "failureThreshold": failures}
    resources: dict[str, Any] = {"requests": {"cpu": "1", "memory": "4Gi"}}
    if gpus:
        resources["requests"]["nvidia.com/gpu"] = str(gpus)
        resources["limits"] = {"nvidia.com/gpu": str(gpus)}
    claims = [{"name": f"volume-{i}", "persistentVolumeClaim": {"claimName": v.claim, "readOnly": v.read_only}}
              for i, v in enumerate(volumes)]
    pod: dict[str, Any] = {
        "initContainers": [{
            "name": "fetch", "image": image, "command": ["tritonpkg"], "args": fetch_args(archive),
            "volumeMounts": [{"name": "package", "mountPath": PACKAGE}]}, {
            "name": "verify", "image": image, "command": verify_command(archive),
            "volumeMounts": [{"name": "package", "mountPath": PACKAGE, "readOnly": True}]}],
        "containers": [{
            "name": "serve", "image": image, "command": ["tritonpkg"], "args": serve_args(archive, on_engine_death),
            "env": [{"name": ADMIN_ENV, "valueFrom": {"secretKeyRef": {"name": admin_secret_name(model),
                                                                       "key": admin.KEY_FILE}}}],
            "ports": [{"name": "http", "containerPort": HTTP}, {"name": "grpc", "containerPort": GRPC},
                      {"name": "metrics", "containerPort": METRICS}, {"name": "openai", "containerPort": OPENAI}],
            # the start procedure's own readiness: the OpenAI API opens last, and its /health/ready is false while
            # Triton or any model is not READY (a dead engine's model within ~1 s)
            "readinessProbe": probe("/health/ready", 5, 3),
            "livenessProbe": probe("/health/live", 10, 3),
            "startupProbe": probe("/health/live", 10, 360),  # fetch, unpack, weights, engine: up to an hour
            "resources": resources,
            "volumeMounts": [{"name": "package", "mountPath": PACKAGE, "readOnly": True},
                             {"name": "state", "mountPath": STATE}, {"name": "weights", "mountPath": WEIGHTS},
                             {"name": "adapters", "mountPath": followed.MOUNT, "readOnly": True},
                             *({"name": c["name"], "mountPath": v.mount, "readOnly": v.read_only}
                               for c, v in zip(claims, volumes, strict=True))]}],
        # the unit's adapter list: absent (optional) until an adapter rollout creates it; the kubelet projects a
        # created or changed ConfigMap into the running pod by a rename, and serve follows the file
        "volumes": [{"name": "package", "emptyDir": {}}, {"name": "state", "emptyDir": {}},
                    {"name": "weights", "emptyDir": {}},
                    {"name": "adapters", "configMap": {"name": adapter_list_name(unit.name), "optional": True}},
                    *claims],
        "terminationGracePeriodSeconds": DRAIN_TIMEOUT_S + 10,  # the drain, then the models' unload
    }
    want = replicas if replicas is not None else unit.replicas
    deployment = {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {"replicas": _floor(want, autoscaling) if autoscaling else want,
                 "selector": {"matchLabels": {"tritonpkg.io/unit": name}},
                 "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}},
                 "template": {"metadata": {"labels": labels, "annotations": {
                     "prometheus.io/scrape": "true", "prometheus.io/port": str(METRICS),
                     "prometheus.io/path": "/metrics"}}, "spec": pod}},
    }
    service = {
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {"selector": {"tritonpkg.io/unit": name},
                 "ports": [{"name": "http", "port": HTTP, "targetPort": "http"},
                           {"name": "grpc", "port": GRPC, "targetPort": "grpc", "appProtocol": "kubernetes.io/h2c"},
                           {"name": "metrics", "port": METRICS, "targetPort": "metrics"},
                           {"name": "openai", "port": OPENAI, "targetPort": "openai"}]},
    }
    out = [deployment, service]
    if autoscaling is not None:
        out.append(hpa_manifest(name, namespace, labels, autoscaling, floor=want))
    return out


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
        check_rules(m)
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
        done.append(f"{what}: valid (kubernetes-validate, Kubernetes {k8s_version}, strict; under 1 MiB, no host "
                    "path)")
    return done


def check_rules(manifest: dict[str, Any]) -> None:
    """What the schemas let through and a cluster would not run: an object over the API server's 1 MiB, a
    hostPath volume, a container whose path arguments lie outside its own mounts (a folder of the deploying
    host, say). Raises ManifestError naming the object and the field."""
    what = f"{manifest.get('kind')}/{manifest.get('metadata', {}).get('name')}"
    size = len(json.dumps(manifest, separators=(",", ":")).encode())
    if size > MAX_OBJECT_BYTES:
        raise ManifestError(f"{size} bytes", file=what, field="(top)",
                            expected=f"an object of at most {MAX_OBJECT_BYTES} bytes (the API server's limit)")
    pod = manifest.get("spec", {}).get("template", {}).get("spec") if manifest.get("kind") == "Deployment" else None
    if not pod:
        return
    for i, volume in enumerate(pod.get("volumes", [])):
        if "hostPath" in volume:
            raise ManifestError("a hostPath volume", file=what, field=f"spec.template.spec.volumes[{i}]",
                                expected="emptyDir or a persistentVolumeClaim: a pod has no folder of this host")
    for group in ("initContainers", "containers"):
        for i, container in enumerate(pod.get(group, [])):
            mounts = [m["mountPath"].rstrip("/") for m in container.get("volumeMounts", [])]
            for j, arg in enumerate(container.get("args", [])):
                path = arg.partition("=")[2] if arg.startswith("--") and "=" in arg else arg
                if path.startswith("/") and not any(path == m or path.startswith(m + "/") for m in mounts):
                    raise ManifestError(f"{path!r} lies outside the container's mounts ({', '.join(mounts)})",
                                        file=what, field=f"spec.template.spec.{group}[{i}].args[{j}]",
                                        expected="a path under one of the container's volumeMounts")


class KubernetesDriver:
    """Uploads each release's archive to the package store and applies units and the route through the
    kubernetes client. `apps`, `core`, `custom` and `autoscaling` are AppsV1Api, CoreV1Api, CustomObjectsApi
    and AutoscalingV2Api instances (or anything with the same methods); `upload` puts an archive in the store."""

    target = "kubernetes"

    def __init__(self, apps: Any, core: Any, custom: Any, autoscaling: Any = None, *, namespace: str = "default",
                 gateway: str = "tritonpkg", toolkit_image: str | None = None, package_store: str | None = None,
                 ready_timeout: float = 900.0, poll_s: float = 2.0, release: Release | None = None,
                 upload: Any = None, on_engine_death: EngineDeathPolicy = "exit") -> None:
        self.apps, self.core, self.custom, self.autoscaling = apps, core, custom, autoscaling
        self.namespace, self.gateway, self.toolkit_image = namespace, gateway, toolkit_image
        self.package_store = package_store
        self.on_engine_death = on_engine_death  # the pods' serve --on-engine-death
        self.upload = upload or store_mod.upload
        self.ready_timeout, self.poll_s = ready_timeout, poll_s
        self.release = release
        self.model: str | None = None
        self.weights: dict[str, int] = {}
        self.versions: dict[str, str] = {}
        self.alias_unit: str | None = None
        self.proxy: dict[str, Any] = {}
        self.adapter_ack_timeout = ADAPTER_ACK_S
        self.pods = Pods(core, namespace)
        self.archives = ReleaseArchives(package_store, self.upload)

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
        return cls(client.AppsV1Api(), client.CoreV1Api(), client.CustomObjectsApi(), client.AutoscalingV2Api(),
                   **kw)

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
        """Put the archive in the store, then apply the unit's objects (named by the unit, so nothing needs
        recording early)."""
        self.model = model
        deployment = release.spec.deployment if release.spec is not None else None
        volumes = deployment.volumes if deployment else []
        store = store_mod.check(release, self.package_store)
        with tempfile.TemporaryDirectory(prefix="tritonpkg-archive-") as scratch:
            path = Path(scratch) / "package.tar.gz"
            sha = store_mod.write_archive(release, path)
            archive = store_mod.archive_ref(store, model, release.version, sha)
            objects = unit_manifests(
                model, unit, archive=archive, namespace=self.namespace, release=release.target_release,
                gpus=release.gpus, toolkit_image=self.toolkit_image, replicas=unit.replicas, volumes=volumes,
                autoscaling=deployment.autoscaling if deployment else None, on_engine_death=self.on_engine_death)
            secret = admin_secret_manifest(model, self.namespace)
            validate([secret, *objects])
            self.upload(path, archive)
        self._create_once(self.core.create_namespaced_secret, secret)
        for body in objects:
            kind = body["kind"]
            if kind == "Deployment":
                self._apply(self.apps.create_namespaced_deployment, self.apps.replace_namespaced_deployment, body)
            elif kind == "Service":
                self._apply(self.core.create_namespaced_service, self.core.replace_namespaced_service, body)
            else:
                self._apply(self.autoscaling.create_namespaced_horizontal_pod_autoscaler,
                            self.autoscaling.replace_namespaced_horizontal_pod_autoscaler, body)
        facts: dict[str, Any] = {"name": _name(unit.name), "namespace": self.namespace, "archive": archive.key_url,
                                 "repository": str(release.repository)}
        packaged = packaged_adapters(release, archive)
        if packaged is not None:  # the list the pods serve from the archive, as a rollout (or its rollback) names it
            facts.update(adapter_list=adapter_list_name(unit.name), adapters=packaged)
        return Endpoints.of(facts)

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
                return (f"{ready}/{want} pods ready (readiness probe: the start procedure's /health/ready); the "
                        "canary request is not sent from outside the cluster")
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
        """A unit with an HPA gets the count as the HPA's floor, within the spec's bounds (the HPA owns the
        replica count; patching the Deployment would be undone by it); others have their Deployment scaled."""
        done = []
        for unit, n in replicas.items():
            name = _name(unit)
            bounds = self._hpa_bounds(name)
            if bounds is None:
                self.apps.patch_namespaced_deployment_scale(name=name, namespace=self.namespace,
                                                            body={"spec": {"replicas": n}})
                done.append(f"{unit}={n}")
                continue
            low, high = bounds
            floor = min(max(n, low), high)
            self.autoscaling.patch_namespaced_horizontal_pod_autoscaler(
                name=name, namespace=self.namespace, body={"spec": {"minReplicas": floor}})
            done.append(f"{unit}={n} (HPA floor {floor}, bounds {low}-{high})")
        return ", ".join(done)

    def _hpa_bounds(self, name: str) -> tuple[int, int] | None:
        """The spec's (min, max) replicas of the unit's HPA; None where it has none."""
        if self.autoscaling is None:
            return None
        try:
            hpa = self.autoscaling.read_namespaced_horizontal_pod_autoscaler(name=name, namespace=self.namespace)
        except Exception as exc:
            if getattr(exc, "status", None) != 404:
                raise
            return None
        high = int(hpa.spec.max_replicas)
        low = int((hpa.metadata.annotations or {}).get(MIN_REPLICAS) or hpa.spec.min_replicas or 1)
        return low, high

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
        deletes = [self.apps.delete_namespaced_deployment, self.core.delete_namespaced_service]
        if ep.adapter_list:
            self._delete(self.core.delete_namespaced_config_map, ep.adapter_list)
        if self.autoscaling is not None:
            deletes.append(self.autoscaling.delete_namespaced_horizontal_pod_autoscaler)
        for delete in deletes:
            self._delete(delete, name)
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

    # -- adapter rollouts (AdapterRollouts) -------------------------------------------------------------
    def adapters(self, model: str, version: int, ep: Endpoints, listing: Mapping[str, str]) -> dict[str, str]:
        """Write `listing` into the unit's ConfigMap and wait until every ready pod serves it (its follower's
        /health/adapters, read through the API server's pod proxy). An adapter folder of a packaged release (as the
        plan names the new release's) travels as that release's archive, put into the package store first."""
        if not ep.name or not ep.adapter_list:
            raise TritonpkgError(f"{ep.name or 'the unit'} records no adapter list (deployed before its pods followed "
                                 "one)", field="strategy", expected="--strategy red-black once")
        located = {name: self.archives.location(model, name, value) for name, value in listing.items()}
        data = followed.render(located)
        body = adapter_list_manifest(model, ep.name, data, self.namespace)
        validate([body])
        self._apply(self.core.create_namespaced_config_map, self.core.replace_namespaced_config_map, body)
        want = followed.digest(data)
        deadline = time.monotonic() + self.adapter_ack_timeout
        while True:
            waiting = self._not_serving(ep.name, want)
            if not waiting:
                return {n: loc.text() if isinstance(loc, followed.ArchiveLocation) else loc
                        for n, loc in located.items()}
            if time.monotonic() > deadline:
                raise TritonpkgError(f"pods not serving the adapter list {want[:12]} after "
                                     f"{self.adapter_ack_timeout:g} s: {'; '.join(waiting)}",
                                     file=f"ConfigMap/{body['metadata']['name']}", field="adapters",
                                     expected="each ready pod's serve following the list (serve --adapter-list)")
            time.sleep(self.poll_s)

    def adapter_check(self, model: str, ep: Endpoints, smoke: dict[str, Any] | None, name: str) -> str:
        """The smoke request with `lora_name` = `name`, sent to every ready pod through the API server's pod proxy
        (KServe generate on the pod's http port): a pod that does not answer with the adapter fails the step."""
        request = dict(smoke or {"text_input": "hello", "sampling_parameters": {"max_tokens": 1}})
        params = request.get("sampling_parameters") or {}
        params = json.loads(params) if isinstance(params, str) else dict(params)
        request["sampling_parameters"] = json.dumps({**params, "lora_name": name})
        pods = self.pods.ready(ep.name or "")
        if not pods:
            raise TritonpkgError(f"{ep.name}: no ready pod", field="adapter_check")
        for pod in pods:
            status, text = self.pods.request("POST", pod, HTTP, f"v2/models/{model}/generate", request)
            if status != 200:
                raise TritonpkgError(f"adapter {name} on pod {pod}: HTTP {status}: {text[:300]}", field="adapter_check")
        return f"{name} answered on {len(pods)} pod(s) ({', '.join(pods)})"

    def _not_serving(self, unit: str, want: str) -> list[str]:
        """Why each ready pod does not serve the list `want` yet ([]: all do, and there is one at least); a pod that
        failed it fails now."""
        pods = self.pods.ready(unit)
        waiting = [] if pods else [f"no ready pod of {unit}"]
        for pod in pods:
            status, text = self.pods.request("GET", pod, OPENAI, "health/adapters")
            try:
                state = json.loads(text) if status == 200 else None
            except ValueError:
                state = None
            if not isinstance(state, dict):
                waiting.append(f"{pod}: HTTP {status} {text[:200]}")
            elif state.get("applied_sha256") == want:
                continue
            elif state.get("list_sha256") == want and state.get("error"):
                raise TritonpkgError(f"pod {pod} cannot serve the adapter list: {state['error']}", field="adapters")
            else:
                waiting.append(f"{pod}: serving {str(state.get('applied_sha256'))[:12]}")
        return waiting

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


def adapter_plan_manifests(plan: Plan, release: Release, archive: ArchiveRef,
                           namespace: str = "default") -> list[dict[str, Any]]:
    """The ConfigMap an adapter rollout's plan leaves its unit with (the plan's last list), the release's own adapter
    folders named inside `archive` (the release's archive, as a dry run writes it beside the manifests): what a dry
    run of an adapter rollout has to show and validate. Nothing else changes: no Deployment, no route."""
    last = next((s for s in reversed(plan.steps) if s.kind == "adapters" and s.adapters is not None), None)
    if last is None or not last.unit:
        raise TritonpkgError("the plan writes no adapter list", field="strategy", expected="an adapter rollout's plan")
    repository = Path(release.repository)
    located: dict[str, followed.Location] = {}
    for name, value in (last.adapters or {}).items():
        folder = Path(value)
        if "://" in value or not folder.is_absolute() or not safepath.lexically_within(folder, repository):
            located[name] = followed.parse_location(name, value)
            continue
        inside = safepath.check_name(folder.relative_to(repository).as_posix(), source=value,
                                     what=f"adapters.{name}")
        located[name] = followed.ArchiveLocation(url=archive.url, file=archive.file, sha256=archive.sha256,
                                                 path=inside)
    return [adapter_list_manifest(plan.model, last.unit, followed.render(located), namespace)]


def packaged_adapters(release: Release, archive: ArchiveRef) -> dict[str, str] | None:
    """The release's packaged adapter list as its pods serve it: a folder inside the version is that folder in the
    unit's own archive, a remote source stays; None where the release has no list or one a pod cannot follow (a
    folder of a declared volume: no adapter rollout into that unit)."""
    version = Path(release.repository) / release.model / str(release.version)
    if not (version / followed.version_files.MULTI_LORA).is_file():
        return None
    out: dict[str, str] = {}
    for name, value in followed.version_files.read_adapter_list(version).items():
        if not isinstance(value, str):
            return None
        if "://" in value:
            out[name] = value
        elif not value.startswith(("/", "~")):
            inside = f"{release.model}/{release.version}/{value.removeprefix('./').rstrip('/')}"
            out[name] = followed.ArchiveLocation(url=archive.url, file=archive.file, sha256=archive.sha256,
                                                 path=inside).text()
        else:
            return None
    try:
        followed.parse(followed.render(out))
    except TritonpkgError:
        return None
    return out


def _implements(driver: KubernetesDriver) -> tuple[Driver, AdapterRollouts]:
    return driver, driver  # mypy proves the driver implements the core protocol and adapter rollouts
