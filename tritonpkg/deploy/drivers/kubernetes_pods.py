"""What an adapter rollout on the Kubernetes target reaches besides the objects it applies: the unit's ready pods and
a request to a pod's port through the API server's pod proxy (`Pods`), and an adapter folder of a packaged release
as the location the pods fetch it from, that release's archive put in the package store once per command
(`ReleaseArchives`)."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from tritonpkg import safepath
from tritonpkg.deploy.drivers import package_store as store_mod
from tritonpkg.errors import TritonpkgError
from tritonpkg.serve import adapter_list as followed


class Pods:
    """A unit's pods through the API server. `core` is a CoreV1Api (or anything with its methods and `api_client`)."""

    def __init__(self, core: Any, namespace: str) -> None:
        self.core, self.namespace = core, namespace

    def ready(self, unit: str) -> list[str]:
        """The unit's pods that are Ready and not terminating, by name."""
        pods = self.core.list_namespaced_pod(namespace=self.namespace, label_selector=f"tritonpkg.io/unit={unit}")
        ready = []
        for pod in pods.items:
            if pod.metadata.deletion_timestamp is not None:
                continue
            conditions = (pod.status.conditions or []) if pod.status else []
            if any(c.type == "Ready" and c.status == "True" for c in conditions):
                ready.append(pod.metadata.name)
        return sorted(ready)

    def request(self, method: str, pod: str, port: int, path: str,
                body: dict[str, Any] | None = None) -> tuple[int, str]:
        """A request to a pod's port through the API server (`pods/<pod>:<port>/proxy/<path>`), sent by the official
        client's ApiClient (its connect_*_proxy methods take no request body); (status, text). The client's two
        generations differ here: `param_serialize` + `call_api` (which answers any status), or the older
        `call_api(resource_path, method, ...)` (which raises ApiException for a status outside 2xx)."""
        api = self.core.api_client
        resource = f"/api/v1/namespaces/{self.namespace}/pods/{pod}:{port}/proxy/{path}"
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        try:
            if hasattr(api, "param_serialize"):
                _, url, headers, data, _ = api.param_serialize(method, resource, header_params=headers, body=body,
                                                               auth_settings=["BearerToken"])
                resp = api.call_api(method, url, header_params=headers, body=data, _request_timeout=120)
                resp.read()
                return int(resp.status), bytes(resp.data).decode(errors="replace")
            resp = api.call_api(resource, method, header_params=headers, body=body, auth_settings=["BearerToken"],
                                _return_http_data_only=True, _preload_content=False, _request_timeout=120)
        except Exception as exc:
            status = getattr(exc, "status", None)
            if not status:  # no answer from the API server at all
                raise
            return int(status), str(getattr(exc, "body", "") or exc)
        return 200, bytes(resp.data).decode(errors="replace")


class ReleaseArchives:
    """Adapter folders of packaged releases as archive locations; `upload` puts an archive in the store."""

    def __init__(self, package_store: str | None, upload: Any) -> None:
        self.package_store, self.upload = package_store, upload
        self._archives: dict[Path, followed.ArchiveLocation] = {}  # repository -> its archive, once per command

    def location(self, model: str, name: str, value: str) -> followed.Location:
        """A list entry as the pods fetch it: an archive location or a remote source as given, or an adapter folder
        of a packaged repository (`<repository>/<model>/<N>/adapters/<name>`) as the location in its archive."""
        if "://" in value:
            return followed.parse_location(name, value)
        folder = Path(value)
        field = f"adapters.{name}"
        if not folder.is_absolute() or len(folder.parts) < 5 or folder.parts[-2] != "adapters" \
                or folder.parts[-4] != model or not folder.parts[-3].isdigit():
            raise TritonpkgError(f"{value!r} is not an adapter folder of a packaged release", field=field,
                                 expected=followed.EXPECTED)
        repository = folder.parents[3]
        inside = folder.relative_to(repository).as_posix()
        if not (repository / "tritonpkg.lock.json").is_file() or not folder.is_dir() \
                or not safepath.within(folder, repository):
            raise TritonpkgError(f"{value!r} is not an adapter folder of a packaged release", field=field,
                                 expected=followed.EXPECTED)
        archive = self._archives.get(repository) or self._put(model, int(folder.parts[-3]), repository)
        return followed.ArchiveLocation(url=archive.url, file=archive.file, sha256=archive.sha256,
                                        path=safepath.check_name(inside, source=value, what=field))

    def _put(self, model: str, version: int, repository: Path) -> followed.ArchiveLocation:
        """The packaged release's archive (its files and lock) in the store; the location of its repository."""
        from tritonpkg.deploy.release import Release

        store = store_mod.check_store(self.package_store)
        release = Release(model=model, version=version, repository=repository)
        with tempfile.TemporaryDirectory(prefix="tritonpkg-archive-") as scratch:
            path = Path(scratch) / "package.tar.gz"
            ref = store_mod.archive_ref(store, model, version, store_mod.write_archive(release, path))
            self.upload(path, ref)
        self._archives[repository] = followed.ArchiveLocation(url=ref.url, file=ref.file, sha256=ref.sha256, path="")
        return self._archives[repository]
