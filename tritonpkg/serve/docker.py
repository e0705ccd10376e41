"""The `docker run` that serves a repository on a GPU host, in one of two images of a release:

* `ngc`: NVIDIA's stock `<release>-vllm-python-py3`, NVIDIA's vLLM backend, `tritonserver` alone. The container
  sees the repository at /models and every folder its model.json and multi_lora.json files name (weights,
  tokenizer, adapters) read-only at fixed container paths; remote weights and adapters are materialized on the
  host first, as `serve` does. Those files are rewritten to the container paths in a serving copy (state dir)
  mounted over the repository's own, which is never modified. NVIDIA's backend hands an adapter folder to vLLM
  as written, so relative ones become absolute container paths too.
* `toolkit`: the toolkit image (tritonpkg.image), whose entrypoint `tritonpkg serve` runs the whole start
  procedure in the container. A folder is mounted as in `ngc` (local folders at container paths, remote sources
  left for the container to materialize); an archive is mounted as it is, and unpacked and verified inside.

`plan_view` is pure (what to mount and rewrite); `prepare` runs it against the disk; the command builders only
render argv. Nothing here starts a container."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Literal

from tritonpkg.errors import RuntimeSetupError
from tritonpkg.runtime import admin

CONTAINER_REPO = "/models"
CONTAINER_WEIGHTS = "/weights"  # /weights/<model>/<version>
CONTAINER_TOKENIZERS = "/tokenizers"  # /tokenizers/<model>/<version>
CONTAINER_ADAPTERS = "/adapters"  # /adapters/<model>/<version>/<adapter>
CONTAINER_PACKAGE = "/package"  # an archive, for the toolkit image to unpack
CONTAINER_PORTS = {"http": 8000, "grpc": 8001, "metrics": 8002, "openai": 9000}
PATH_KEYS = ("model", "tokenizer")
"""model.json keys that name a folder the engine reads (vLLM's EngineArgs)."""
MAX_JSON_BYTES = 16 << 20  # an archive's model.json / multi_lora.json read to check its folders
ImageKind = Literal["ngc", "toolkit"]


@dataclass(frozen=True)
class Mount:
    host: str
    container: str

    def volume(self) -> str:
        return f"{self.host}:{self.container}:ro"


@dataclass
class ContainerView:
    """What the container sees: `mounts` (read-only) and the repository files rewritten for it (repository-relative
    path -> new content), each mounted over the repository's own at /models/<path>."""

    mounts: list[Mount] = field(default_factory=list)
    rewrites: dict[str, dict[str, Any]] = field(default_factory=dict)
    remote: list[str] = field(default_factory=list)  # sources left for the container to materialize


def _is_remote(location: str) -> bool:
    from tritonpkg.serve.weights import _HUB_ID

    return ("://" in location and not location.startswith("file://")) or bool(_HUB_ID.fullmatch(location))


def _local(location: str, base: PurePosixPath) -> str | None:
    """A local folder as an absolute path or one relative to `base` (repository-relative); None: not local."""
    text = location.removeprefix("file://")
    if text.startswith(("/", "~")):
        return os.path.expanduser(text)
    if text.startswith("."):
        return str(base / text)
    return None


def plan_view(repo: Path, engine_args: dict[str, dict[str, Any]], lora_lists: dict[str, dict[str, Any]],
              *, materialized: dict[str, str] | None = None) -> ContainerView:
    """The container view of `repo` (mounted at /models): each local folder a model.json or multi_lora.json names
    gets a fixed container path (inside /models when it lies in the repository); `materialized` maps a remote
    source to its host copy (ngc), else remote sources stay as written (toolkit). Pure."""
    view = ContainerView()
    fetched = materialized or {}
    root = os.path.abspath(repo)
    by_host: dict[str, str] = {}

    def container_path(host: str, container: str) -> str:
        host = os.path.normpath(host if os.path.isabs(host) else os.path.join(root, host))
        if host == root or host.startswith(root + os.sep):
            return str(PurePosixPath(CONTAINER_REPO) / os.path.relpath(host, root))
        if host not in by_host:
            by_host[host] = container
            view.mounts.append(Mount(_mountable(host, "weights"), _mountable(container, "model")))
        return by_host[host]

    for rel, args in sorted(engine_args.items()):
        model, version = PurePosixPath(rel).parts[:2]
        new = dict(args)
        for key, base in zip(PATH_KEYS, (CONTAINER_WEIGHTS, CONTAINER_TOKENIZERS), strict=True):
            value = args.get(key)
            if not isinstance(value, str) or not value:
                continue
            if value in fetched:
                new[key] = container_path(fetched[value], f"{base}/{model}/{version}")
                if key == "model":
                    new.pop("revision", None)  # the host copy is that revision
                continue
            local = _local(value, PurePosixPath(rel).parent)
            if local is not None:
                new[key] = container_path(local, f"{base}/{model}/{version}")
            elif key == "model" and _is_remote(value):
                view.remote.append(value)
        if new != args:
            view.rewrites[rel] = new
    for rel, entries in sorted(lora_lists.items()):
        model, version = PurePosixPath(rel).parts[:2]
        new = dict(entries)
        for name, location in entries.items():
            if not isinstance(location, str):
                continue
            if location in fetched:
                new[name] = container_path(fetched[location], f"{CONTAINER_ADAPTERS}/{model}/{version}/{name}")
                continue
            remote = "://" in location and not location.startswith("file://")  # serve's rule for adapter folders
            local = None if remote else _local(location, PurePosixPath(rel).parent)
            if local is None and not remote:
                local = str(PurePosixPath(rel).parent / location)  # `adapters/x`: inside the version as well
            if local is not None:
                new[name] = container_path(local, f"{CONTAINER_ADAPTERS}/{model}/{version}/{name}")
            else:
                view.remote.append(location)
        if new != entries:
            view.rewrites[rel] = new
    return view


def _mountable(path: str, what: str) -> str:
    """`-v` splits on ':', and a mount needs an absolute path."""
    if ":" in path:
        raise RuntimeSetupError("a path with ':' cannot be mounted with docker -v", file=path, field=what,
                                expected="a path without ':'")
    return path


@dataclass
class PreparedSource:
    """A source ready for `docker run`: the folder mounted at /models (or the archive at /package/<name>), the view
    of it and the folder that holds the rewritten files."""

    repository: Path | None
    archive: Path | None
    view: ContainerView
    serving_dir: Path | None
    notes: list[str] = field(default_factory=list)


def default_state_dir(source: Path, release: str, image: ImageKind) -> Path:
    """One serving folder per (source, release, image) in the user cache: the printed command outlives this
    process, so what it mounts must too."""
    from tritonpkg import paths

    key = hashlib.sha256(f"{os.path.abspath(source)}\0{release}\0{image}".encode()).hexdigest()[:12]
    return paths.cache_dir() / "docker" / f"{source.name}-{key}"


def prepare(source: Path, image: ImageKind, state_dir: Path, weights_root: Path | None = None,
            install_plugins: bool = True) -> PreparedSource:
    """Unpack and verify an archive (ngc), materialize remote weights and adapters on the host (ngc), write the
    serving copy's rewritten files under `state_dir` (whole or not at all) and return what to mount."""
    from tritonpkg.repository.atomic import staged_directory

    source = source.absolute()
    if not (source.is_dir() or source.is_file()):
        raise RuntimeSetupError("nothing to serve here", file=source,
                                expected="a model repository folder or a `tritonpkg package --archive` file")
    if source.is_file() and image == "toolkit":
        _check_archive_for_toolkit(source)
        return PreparedSource(None, source, ContainerView(), None,
                              ["the container unpacks the archive and checks it against its lock"])
    if source.is_dir():
        view = _plan_source(source, source, image, weights_root)
        if view.rewrites:
            with staged_directory(state_dir, copy_existing=False) as staging:
                _write_view(view, staging / "view")
        return PreparedSource(source, None, view, state_dir / "view", _remote_note(view))
    with staged_directory(state_dir, copy_existing=False) as staging:
        from tritonpkg.serve.unpack import unpack_archive, verify_unpacked

        unpacked = unpack_archive(source, staging / "package")
        verify_unpacked(unpacked, source)
        if unpacked.wheels and install_plugins:
            raise RuntimeSetupError(f"the package bundles {len(unpacked.wheels)} plugin wheel(s), which NVIDIA's "
                                    "stock image cannot install", file=source, field="wheels",
                                    expected="--image toolkit (its start procedure installs them), or --no-plugins")
        repository = state_dir / unpacked.repository.relative_to(staging)  # where it is once swapped in
        view = _plan_source(unpacked.repository, repository, image, weights_root)
        _write_view(view, staging / "view")
    return PreparedSource(repository, None, view, state_dir / "view", _remote_note(view))


def _plan_source(scan: Path, repository: Path, image: ImageKind, weights_root: Path | None) -> ContainerView:
    """Read the files at `scan` (where the repository is now), materialize remote sources for ngc, and plan the view
    of `repository` (where the command mounts it from)."""
    from tritonpkg.serve import weights as w

    engine_args, lora_lists = w.read_engine_args(scan), w.read_multi_lora(scan)
    w.plan_adapters(lora_lists)  # names and relative folders checked before anything is fetched
    materialized: dict[str, str] = {}
    if image == "ngc":
        root = weights_root or w.default_weights_root()
        for action in w.plan_weights(engine_args):
            if action.kind == "materialize":
                materialized[_model_value(engine_args[action.model_json])] = _fetch(action.location, root)
        for adapter in w.plan_adapters(lora_lists):
            if adapter.kind == "materialize":
                materialized[adapter.location] = str(w.fetch_adapter(adapter.location, root))
    return plan_view(repository, engine_args, lora_lists, materialized=materialized)


def _write_view(view: ContainerView, root: Path) -> None:
    for rel, content in view.rewrites.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(content, indent=2, sort_keys=True) + "\n")


def _remote_note(view: ContainerView) -> list[str]:
    if not view.remote:
        return []
    return [f"the container materializes {len(view.remote)} remote source(s): " + ", ".join(view.remote)]


def _model_value(args: dict[str, Any]) -> str:
    return str(args.get("model"))


def _fetch(location: str, root: Path) -> str:
    from tritonpkg.storage import materialize

    return str(materialize(location, root).path)


def _check_archive_for_toolkit(archive: Path) -> None:
    """The container cannot see a host folder that an archive's model.json names (rewriting it would break the
    lock): such an archive is refused, naming the file and field."""
    import tarfile

    from tritonpkg.serve.weights import MULTI_LORA

    try:
        with tarfile.open(archive) as tar:
            for member in tar:
                parts = PurePosixPath(member.name).parts
                wanted = member.isfile() and parts and parts[-1] in ("model.json", MULTI_LORA)
                if not wanted or member.size > MAX_JSON_BYTES:
                    continue
                handle = tar.extractfile(member)
                data = json.loads(handle.read()) if handle is not None else None
                if not isinstance(data, dict):
                    continue
                values = {k: data.get(k) for k in PATH_KEYS} if parts[-1] == "model.json" else data
                for key, value in values.items():
                    if isinstance(value, str) and value.startswith(("/", "~", "file://")):
                        raise RuntimeSetupError(f"{value!r} is a host folder, which the container does not have",
                                                file=f"{archive}#{member.name}", field=str(key),
                                                expected="s3:// or hf:// sources in an archive for --image toolkit "
                                                         "(or serve the repository folder, whose local folders are "
                                                         "mounted)")
    except (OSError, tarfile.TarError, ValueError) as exc:
        raise RuntimeSetupError(f"cannot read the archive: {exc}", file=archive,
                                expected="a `tritonpkg package --archive` file") from exc


def _common(gpus: str | None, shm_size: str) -> list[str]:
    argv = ["docker", "run", "--rm"]
    if gpus:
        # docker parses --gpus as CSV: a device list needs its own quotes (--gpus '"device=0,1"').
        argv += ["--gpus", f'"{gpus}"' if "," in gpus and not gpus.startswith('"') else gpus]
    return [*argv, f"--shm-size={shm_size}", "--ulimit", "memlock=-1", "--ulimit", "stack=67108864"]


def _volumes(prepared: PreparedSource) -> list[str]:
    argv: list[str] = []
    if prepared.archive is not None:
        archive = _mountable(str(prepared.archive), "source")
        return ["-v", f"{archive}:{CONTAINER_PACKAGE}/{prepared.archive.name}:ro"]
    if prepared.repository is None:
        raise RuntimeSetupError("no repository to mount", field="source", expected="a folder or an archive")
    argv += ["-v", Mount(_mountable(str(prepared.repository), "repo"), CONTAINER_REPO).volume()]
    for mount in prepared.view.mounts:
        argv += ["-v", mount.volume()]
    if prepared.serving_dir is not None:
        for rel in sorted(prepared.view.rewrites):
            host = _mountable(str(prepared.serving_dir / rel), "serving copy")
            argv += ["-v", f"{host}:{CONTAINER_REPO}/{rel}:ro"]
    return argv


def _publish(host: str, ports: Iterable[tuple[int, str]]) -> list[str]:
    bind = _publish_host(host)
    argv: list[str] = []
    for port, name in ports:
        argv += ["-p", f"{bind}:{port}:{CONTAINER_PORTS[name]}"]
    return argv


def ngc_command(prepared: PreparedSource, release: str, *, http_port: int = 8000, grpc_port: int = 8001,
                metrics_port: int = 8002, gpus: str | None = "all", shm_size: str = "2g", host: str = "127.0.0.1",
                admin_key: str | None = None) -> list[str]:
    """argv for `docker run` of NVIDIA's image with the prepared view. Ports are published on `host` only (docker's
    default would be every interface), and Triton's admin APIs answer only to `admin_key` (runtime/admin.py;
    None: a new one, readable back from the argv)."""
    from tritonpkg.compat import get_release
    from tritonpkg.validate.rules.toolkit_backend import refuse_release

    image = get_release(release).ngc_image
    if prepared.repository is not None and prepared.repository.is_dir():  # toolkit-only I/O: NVIDIA's cannot load it
        refuse_release(prepared.repository, release)
    argv = _common(gpus, shm_size)
    argv += _publish(host, ((http_port, "http"), (grpc_port, "grpc"), (metrics_port, "metrics")))
    argv += _volumes(prepared)
    return [*argv, image, "tritonserver", f"--model-repository={CONTAINER_REPO}",
            *admin.server_args(admin_key or admin.new_key())]


def toolkit_command(prepared: PreparedSource, image: str, *, http_port: int = 8000, grpc_port: int = 8001,
                    metrics_port: int = 8002, openai_port: int = 9000, gpus: str | None = "all",
                    shm_size: str = "2g", host: str = "127.0.0.1", serve_args: Iterable[str] = ()) -> list[str]:
    """argv for `docker run` of the toolkit image: its entrypoint `tritonpkg serve` gets the mounted source and
    listens on the container's interfaces (the host publishes on `host` only); `serve_args` are passed on."""
    argv = _common(gpus, shm_size)
    argv += _publish(host, ((http_port, "http"), (grpc_port, "grpc"), (metrics_port, "metrics"),
                            (openai_port, "openai")))
    argv += _volumes(prepared)
    inside = (f"{CONTAINER_PACKAGE}/{prepared.archive.name}" if prepared.archive is not None else CONTAINER_REPO)
    # the container's own interfaces: what reaches them is what the host publishes (on `host` only)
    return [*argv, image, inside, "--host", "0.0.0.0", *serve_args]  # noqa: S104


def docker_command(repo: Path, release: str, *, weights: Iterable[Path] = (), http_port: int = 8000,
                   grpc_port: int = 8001, metrics_port: int = 8002, gpus: str | None = "all", shm_size: str = "2g",
                   host: str = "127.0.0.1", admin_key: str | None = None) -> list[str]:
    """NVIDIA's image over `repo` as it is (no view): `weights` mounted at their own paths. What `ngc_command`
    renders for a repository whose files name no folder; kept for callers that mount by hand."""
    view = ContainerView()
    seen: set[str] = set()
    for w in weights:
        path = _mountable(os.path.abspath(os.fspath(w)), "weights")
        if path not in seen:
            seen.add(path)
            view.mounts.append(Mount(path, path))
    return ngc_command(PreparedSource(Path(_mountable(os.path.abspath(os.fspath(repo)), "repo")), None, view, None),
                       release, http_port=http_port, grpc_port=grpc_port, metrics_port=metrics_port, gpus=gpus,
                       shm_size=shm_size, host=host, admin_key=admin_key)


def _publish_host(host: str) -> str:
    """The address part of `-p ADDRESS:HOST_PORT:CONTAINER_PORT` (IPv6 in brackets)."""
    import ipaddress

    text = (host or "").strip().strip("[]")
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        raise RuntimeSetupError(f"{host!r} is not an IP address docker can publish on", field="--host",
                                expected="an IP address such as 127.0.0.1 (the default) or 0.0.0.0") from None
    return f"[{address}]" if address.version == 6 else str(address)
