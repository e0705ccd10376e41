"""A followed adapter list: how a Kubernetes pod's `tritonpkg serve --adapter-list FILE` serves the LoRA adapters
its deploy driver names, its engine kept.

The driver writes a unit's desired list into a ConfigMap mounted read-only in the pod (the kubelet replaces the
file by a rename when the object changes). Each entry is one of:

- an adapter inside a release's package archive in the package store:
  `s3://BUCKET/PREFIX/<model>/<sha256[:16]>/<file>.tar.gz#sha256=<sha256>&path=<model>/<N>/adapters/<name>`
  (fetched as the init container fetches the pod's own archive, its sha256 checked, unpacked with serve's
  bounds and every repository file verified against its lock, the plugin wheels the lock lists not required:
  nothing is installed from it, and the driver rebuilds the archive from the packaged repository, which keeps
  none; the pod's own archive is the repository it already serves);
- a remote source, `s3://...` or `hf://...`, materialized as serve materializes remote adapters.

A host path is refused: a pod has none. `Follower` polls the file; each new content is fetched, verified and
written as the served version's multi_lora.json (absolute folders, by a rename the vLLM backend never sees half
of); the backend loads what changed into the running engine and acknowledges the list. What the follower has
applied is in STATUS (beside the lock at the served repository's top, where the OpenAI frontend reads it:
`GET /health/adapters`, and readiness waits for the first list)."""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tritonpkg import adapter_names, boundedio, safepath, version_files
from tritonpkg.errors import TritonpkgError
from tritonpkg.plugins.wheel import sha256_file

STATUS = version_files.ADAPTER_LIST_STATUS  # at the served repository's top: the follower's state, the frontend's read
MAX_LIST_BYTES = 1 << 20  # a ConfigMap's data cannot be larger
MOUNT = "/etc/tritonpkg/adapters"  # where a pod mounts its unit's ConfigMap
KEY = "adapters.json"  # the ConfigMap's data key: the file the follower reads
_STORE_URL = re.compile(r"s3://[a-z0-9.\-]{3,63}(/[A-Za-z0-9_.\-]+)+")
_FILE = re.compile(r"[A-Za-z0-9_.\-]+\.tar\.gz")
_SHA = re.compile(r"[0-9a-f]{64}")
EXPECTED = ("s3://<store>/<model>/<sha256[:16]>/<file>.tar.gz#sha256=<sha256>&path=<folder in the archive's "
            "repository>, or a remote s3:// / hf:// adapter source")


@dataclass(frozen=True)
class ArchiveLocation:
    """An adapter folder inside a release's package archive in the store."""

    url: str  # the prefix `materialize` copies (the archive alone lies under it)
    file: str
    sha256: str
    path: str  # the folder, relative to the archive's repository

    @property
    def revision(self) -> str:
        return self.sha256[:16]

    def text(self) -> str:
        return f"{self.url}/{self.file}#sha256={self.sha256}&path={self.path}"


Location = ArchiveLocation | str  # a str: a remote source


def parse_location(name: str, value: object, source: str | Path | None = None) -> Location:
    """One entry's location, or a TritonpkgError naming the adapter (the field) and what is accepted."""
    field = f"adapters.{adapter_names.shown(name)}"
    if not isinstance(value, str) or not value:
        raise TritonpkgError("an adapter without a location", file=source, field=field, expected=EXPECTED)
    if "#" in value:
        key_url, _, fragment = value.partition("#")
        parts = dict(p.partition("=")[::2] for p in fragment.split("&"))
        url, _, file = key_url.rpartition("/")
        sha, path = parts.get("sha256", ""), parts.get("path", "")
        if (set(parts) != {"sha256", "path"} or not _STORE_URL.fullmatch(url) or not _FILE.fullmatch(file)
                or not _SHA.fullmatch(sha) or url.rsplit("/", 1)[1] != sha[:16]):
            raise TritonpkgError(f"{safepath.quote(value)} is not an archive location", file=source, field=field,
                                 expected=EXPECTED)
        return ArchiveLocation(url=url, file=file, sha256=sha,
                               path=safepath.check_name(path, source=source, what=field))
    if value.startswith(("s3://", "hf://")):
        safepath.check_name(value.split("://", 1)[1].rstrip("/") or "/", source=source, what=field)
        return value
    raise TritonpkgError(f"{safepath.quote(value)} is not a location a pod can fetch (a pod has no host folder)",
                         file=source, field=field, expected=EXPECTED)


def parse(data: bytes, source: str | Path | None = None) -> dict[str, Location]:
    """A list's bytes (a JSON object: adapter name -> location), every name and location checked."""
    try:
        listing = version_files.adapter_list(data)
    except ValueError as exc:
        raise TritonpkgError(f"not an adapter list: {exc}", file=source, field="adapters",
                             expected="a JSON object of adapter name -> location") from None
    out: dict[str, Location] = {}
    for name, value in listing.items():
        why = adapter_names.name_problem(name)
        if why is not None:
            raise TritonpkgError(f"adapter name '{adapter_names.shown(name)}' {why}", file=source,
                                 field=f"adapters.{adapter_names.shown(name)}",
                                 expected=f"a name of {adapter_names.RULE}")
        out[name] = parse_location(name, value, source)
    return out


def render(listing: Mapping[str, Location]) -> bytes:
    """The bytes a ConfigMap carries (the follower's acknowledgement names their sha256)."""
    return (json.dumps({n: loc.text() if isinstance(loc, ArchiveLocation) else loc
                        for n, loc in listing.items()}, indent=2) + "\n").encode()


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


file_sha256 = sha256_file  # an archive's digest, streamed (plugins.wheel's)


read_status = version_files.read_adapter_list_status


class Follower:
    """Serves the list in `list_file` from `repository` (the one serve unpacked and owns). `own_sha256`: the
    archive serve unpacked (an entry naming it is a folder of `repository`); `work`: where other archives are
    fetched and unpacked; `weights_root`: where remote adapters are materialized."""

    def __init__(self, list_file: Path, repository: Path, *, work: Path, weights_root: Path,
                 own_sha256: str | None = None, poll_s: float = 1.0, ack_timeout: float = 120.0,
                 retry_s: float = 10.0, log: Callable[[str], None] = print) -> None:
        self.list_file, self.repository = list_file, repository
        self.work, self.weights_root, self.own_sha256 = work, weights_root, own_sha256
        self.poll_s, self.ack_timeout, self.retry_s, self.log = poll_s, ack_timeout, retry_s, log
        self.status: dict[str, Any] = {"ready": False, "list_sha256": None, "applied_sha256": None, "error": None}
        self._failed_at = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def pending(self) -> None:
        """Readiness waits for the first list from now on (written before the OpenAI API starts)."""
        self._write_status()

    def start(self) -> Follower:
        self._thread = threading.Thread(target=self._loop, name="adapter-list", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.ack_timeout + 5)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.step()
            self._stop.wait(self.poll_s)

    def step(self) -> None:
        """Apply the file's list when it changed since the last one applied (a failed one again after retry_s)."""
        try:
            data = boundedio.read_file(self.list_file, MAX_LIST_BYTES)
        except FileNotFoundError:
            if not self.status["ready"]:  # no list (yet): the package's own adapters are served
                self.status.update(ready=True)
                self._write_status()
            return
        except OSError as exc:
            self._fail(None, f"cannot read {self.list_file}: {exc}")
            return
        sha = digest(data)
        if sha == self.status["applied_sha256"]:
            return
        if sha == self.status["list_sha256"] and self.status["error"] and \
                time.monotonic() - self._failed_at < self.retry_s:
            return
        self.status.update(list_sha256=sha, error=None)
        try:
            served = self.apply(parse(data, self.list_file))
        except TritonpkgError as exc:
            self._fail(sha, str(exc))
            return
        except Exception as exc:  # a fetch or unpack failure: said in the status, retried later
            self._fail(sha, f"{type(exc).__name__}: {exc}")
            return
        self.status.update(ready=True, applied_sha256=sha, error=None, **served)
        self._write_status()
        self.log(f"adapter list {sha[:12]} applied: serving {', '.join(served['served']) or 'no adapters'}")

    def _fail(self, sha: str | None, why: str) -> None:
        self._failed_at = time.monotonic()
        self.status.update(list_sha256=sha, error=why)
        self._write_status()
        self.log(f"adapter list {(sha or '')[:12]} not applied: {why}")

    def _write_status(self) -> None:
        version_files.write_json(self.repository / STATUS, self.status)

    def apply(self, listing: Mapping[str, Location]) -> dict[str, Any]:
        """Fetch and verify what `listing` names, write it as the served version's multi_lora.json and wait for
        the backend's acknowledgement; returns what the backend serves and refused."""
        folders = {name: str(self._folder(loc)) for name, loc in listing.items()}
        version = self._served_version()
        want = version_files.write_adapter_list(version, folders)
        deadline = time.monotonic() + self.ack_timeout
        while version_files.served_digest(version) != want:
            if time.monotonic() > deadline or self._stop.is_set():
                raise TritonpkgError(f"the backend did not acknowledge the list within {self.ack_timeout:g} s",
                                     file=version / version_files.SERVED, field="adapters",
                                     expected="the toolkit's vLLM backend (it follows multi_lora.json)")
            time.sleep(0.2)
        ack = version_files.read_served(version)
        return {"served": sorted(ack.get("served") or []), "refused": dict(ack.get("refused") or {})}

    def _served_version(self) -> Path:
        versions = version_files.version_folders(self.repository, version_files.MULTI_LORA)
        if len(versions) != 1:
            raise TritonpkgError(f"{len(versions)} model versions with an adapter list", file=self.repository,
                                 field="adapters", expected="one LoRA model version in the served repository")
        return versions[0]

    def _folder(self, location: Location) -> Path:
        if not isinstance(location, ArchiveLocation):
            from tritonpkg.serve import weights

            return weights.fetch_adapter(location, self.weights_root)
        repository = self.repository if location.sha256 == self.own_sha256 else self._unpacked(location)
        folder = safepath.join_under(repository, location.path, source=location.text(), what="path")
        if not folder.is_dir() or not safepath.within(folder, repository):
            raise TritonpkgError(f"no adapter folder {location.path!r} in the archive", file=location.text(),
                                 field="path", expected="a folder of the archive's repository")
        return folder

    def _unpacked(self, location: ArchiveLocation) -> Path:
        """The archive's repository, fetched, its sha256 checked, unpacked with serve's bounds and verified against
        its lock (once per archive)."""
        from tritonpkg.repository.archive import REPO_PREFIX
        from tritonpkg.serve.unpack import unpack_archive, verify_unpacked
        from tritonpkg.storage import materialize

        target = self.work / "unpacked" / location.revision
        if target.is_dir():  # unpack_archive publishes whole, and a failed verification removes it
            return target / REPO_PREFIX
        fetched = materialize(location.url, self.work / "archives", name="package", revision=location.revision)
        archive = Path(fetched.path) / location.file
        actual = file_sha256(archive) if archive.is_file() else None
        if actual != location.sha256:
            import shutil

            shutil.rmtree(fetched.path, ignore_errors=True)  # not kept: a later list naming it fetches it again
            raise TritonpkgError(f"the archive's sha256 is {actual}", file=location.text(), field="sha256",
                                 expected=f"{location.sha256} (the list's): the object changed in the store")
        package = unpack_archive(archive, target)
        try:
            verify_unpacked(package, archive, wheels=False)  # adapter folders only: no plugin is installed from it
        except BaseException:
            import shutil

            shutil.rmtree(target, ignore_errors=True)
            raise
        return package.repository
