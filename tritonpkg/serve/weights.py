"""Start-up step 2: every vLLM model's weights are on this machine before Triton starts.

A packaged vLLM model names its weights in `<model>/<version>/model.json` (`model`, plus `revision` for a
Hub model). A local path must exist. A remote source (s3://, hf://, any fsspec URL; a bare `org/name`
is what `package` writes for hf://org/name) is materialized under the weights root — complete and
sha256-verified, or not at all (tritonpkg.storage.materialize) — and model.json is pointed at the local
copy, so vLLM never downloads at start-up. Local weights are only checked to exist, not hashed.

LoRA adapters listed in `<model>/<version>/multi_lora.json` (NVIDIA's name -> folder) are handled the same
way: a local folder must exist (a relative one inside its model version), a remote one is materialized under
the same root with the same guarantees, and its entry is pointed at the local copy."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from tritonpkg import adapter_names, boundedio, safepath, version_files
from tritonpkg.errors import RuntimeSetupError

MODEL_JSON = version_files.ENGINE_ARGS
_HUB_ID = re.compile(r"[A-Za-z0-9][\w.\-]*/[\w.\-]+")


@dataclass(frozen=True)
class WeightsAction:
    model_json: str  # repository-relative path of the model.json
    kind: Literal["local", "materialize"]
    location: str  # local: the path; materialize: the source URL


def plan_weights(engine_args: dict[str, dict[str, Any]]) -> list[WeightsAction]:
    """`engine_args` maps each model.json (repository-relative) to its content; pure."""
    actions = []
    for rel, args in sorted(engine_args.items()):
        model = args.get("model")
        if not isinstance(model, str) or not model:
            raise RuntimeSetupError("no weights named", file=rel, field="model",
                                    expected="a weights path or an s3:// / hf:// source")
        if model.startswith("file://"):
            actions.append(WeightsAction(rel, "local", model.removeprefix("file://")))
        elif "://" in model:
            actions.append(WeightsAction(rel, "materialize", model))
        elif model.startswith((".", "/", "~")):
            local = model if model.startswith(("/", "~")) else str(Path(rel).parent / model)
            actions.append(WeightsAction(rel, "local", local))
        elif _HUB_ID.fullmatch(model):
            revision = args.get("revision")
            actions.append(WeightsAction(rel, "materialize", f"hf://{model}" + (f"@{revision}" if revision else "")))
        else:
            raise RuntimeSetupError(f"weights {model!r} are neither a path nor a source", file=rel, field="model",
                                    expected="an absolute path, ./relative (to the model version), s3://..., "
                                             "hf://org/name or org/name")
    return actions


def read_engine_args(repo: Path) -> dict[str, dict[str, Any]]:
    """Every vLLM model.json of the repository, repository-relative path -> parsed content."""
    found: dict[str, dict[str, Any]] = {}
    for version in version_files.version_folders(repo, MODEL_JSON):
        path = version / MODEL_JSON
        try:
            found[path.relative_to(repo).as_posix()] = version_files.read_engine_args(version)
        except (OSError, ValueError) as exc:
            raise RuntimeSetupError(f"cannot read engine arguments: {exc}", file=path,
                                    expected="a JSON object") from exc
    return found


@dataclass
class WeightsResult:
    model_json: str
    kind: str
    source: str
    path: str
    detail: str


def ensure_weights(repo: Path, actions: list[WeightsAction], weights_root: Path,
                   materialize: Callable[..., Any] | None = None) -> list[WeightsResult]:
    """Run `actions` against the repository at `repo`; model.json files of materialized weights are
    rewritten in place, so `repo` must be the serving copy, not the user's folder."""
    fetch = _fetcher(materialize)
    results = []
    for action in actions:
        path = repo / action.model_json
        if action.kind == "local":
            local = _local_path(repo, action.location, path, "model")
            if not local.exists():
                raise RuntimeSetupError(f"weights not found: {local}", file=path, field="model",
                                        expected="an existing weights folder on this machine, or a remote "
                                                 "source (s3://, hf://) to materialize under --weights-root")
            results.append(WeightsResult(action.model_json, "local", action.location, str(local), "exists"))
            continue
        done = fetch(action.location, weights_root)
        args = version_files.read_engine_args(path.parent)
        args["model"] = str(done.path)
        args.pop("revision", None)  # the local copy is that revision
        path.write_text(json.dumps(args, indent=2, sort_keys=True) + "\n")
        detail = "reused" if done.reused else f"{done.bytes_downloaded} bytes fetched"
        results.append(WeightsResult(action.model_json, "materialized", action.location, str(done.path), detail))
    return results


MULTI_LORA = version_files.MULTI_LORA


@dataclass(frozen=True)
class AdapterAction:
    multi_lora: str  # repository-relative path of the multi_lora.json
    name: str  # the adapter's name (its key there)
    kind: Literal["local", "materialize"]
    location: str  # local: the path (relative ones: to the model version); materialize: the source URL


def read_multi_lora(repo: Path) -> dict[str, dict[str, Any]]:
    """Every multi_lora.json (NVIDIA's adapter list beside a model.json), repository-relative path -> content."""
    found: dict[str, dict[str, Any]] = {}
    for version in version_files.version_folders(repo, MULTI_LORA):
        path = version / MULTI_LORA
        try:
            found[path.relative_to(repo).as_posix()] = version_files.read_adapter_list(version)
        except (OSError, ValueError) as exc:
            raise RuntimeSetupError(f"cannot read the adapter list: {exc}", file=path,
                                    expected="a JSON object of adapter name -> folder") from exc
    return found


def plan_adapters(lists: dict[str, dict[str, Any]]) -> list[AdapterAction]:
    """Each adapter of each multi_lora.json: a local folder to check or a remote source to materialize; pure.
    A relative folder names a place inside its model version (`./adapters/<name>`, as package writes it)."""
    actions = []
    for rel, entries in sorted(lists.items()):
        for name, location in entries.items():
            field = adapter_names.shown(name)
            why = adapter_names.name_problem(name)
            if why is not None:
                raise RuntimeSetupError(f"adapter name '{field}' {why}", file=rel, field=field,
                                        expected=f"a name of {adapter_names.RULE}")
            if not isinstance(location, str) or not location:
                raise RuntimeSetupError("an adapter without a folder", file=rel, field=field,
                                        expected="a folder path or an s3:// / hf:// source")
            if location.startswith("file://"):
                actions.append(AdapterAction(rel, name, "local", location.removeprefix("file://")))
            elif "://" in location:
                actions.append(AdapterAction(rel, name, "materialize", location))
            elif location.startswith(("/", "~")):
                actions.append(AdapterAction(rel, name, "local", location))
            else:
                version = Path(rel).parent
                if not safepath.lexically_within(version / location, version):
                    raise RuntimeSetupError(f"adapter folder {location!r} leads outside its model version",
                                            file=rel, field=field,
                                            expected="./<folder> inside the version, an absolute path, "
                                                     "s3:// or hf://")
                actions.append(AdapterAction(rel, name, "local", str(version / location)))
    return actions


def ensure_adapters(repo: Path, actions: list[AdapterAction], weights_root: Path,
                    materialize: Callable[..., Any] | None = None) -> list[WeightsResult]:
    """Local adapter folders must exist; remote ones are materialized under the weights root, as weights are,
    and their multi_lora.json entries rewritten in place to the local copy (`repo` is the serving copy)."""
    fetch = _fetcher(materialize)
    results = []
    for action in actions:
        path = repo / action.multi_lora
        label = f"{action.multi_lora}#{action.name}"
        if action.kind == "local":
            local = _local_path(repo, action.location, path, action.name)
            relative = not action.location.startswith(("/", "~"))
            if relative and not safepath.within(local, repo / Path(action.multi_lora).parent):
                raise RuntimeSetupError(f"adapter folder {local} is a link that leaves its model version",
                                        file=path, field=action.name,
                                        expected="a folder inside the model version, or an absolute path")
            if not local.is_dir():
                raise RuntimeSetupError(f"adapter folder not found: {local}", file=path, field=action.name,
                                        expected="an existing adapter folder on this machine, or a remote source "
                                                 "(s3://, hf://) to materialize under --weights-root")
            _check_rank(repo, action, local)
            results.append(WeightsResult(label, "local", action.location, str(local), "exists"))
            continue
        done = fetch(action.location, weights_root)
        _check_rank(repo, action, Path(done.path))
        entries = version_files.read_adapter_list(path.parent)
        entries[action.name] = str(done.path)
        path.write_text(json.dumps(entries, indent=2) + "\n")
        detail = "reused" if done.reused else f"{done.bytes_downloaded} bytes fetched"
        results.append(WeightsResult(label, "materialized", action.location, str(done.path), detail))
    return results


def _check_rank(repo: Path, action: AdapterAction, folder: Path) -> None:
    """An adapter whose rank is above the engine's max_lora_rank fails its first request in vLLM: refused here,
    before the engine starts (package cannot know a remote adapter's rank)."""
    from tritonpkg.repository.adapters import ADAPTER_CONFIG, MAX_CONFIG_BYTES, VLLM_DEFAULT_MAX_LORA_RANK, config_rank

    try:
        rank = config_rank(boundedio.read_file(folder / ADAPTER_CONFIG, MAX_CONFIG_BYTES))
        args = version_files.read_engine_args(repo / Path(action.multi_lora).parent)
    except (OSError, ValueError):
        return  # no config, or no model.json to compare with: validate and the engine report it
    limit = args.get("max_lora_rank", VLLM_DEFAULT_MAX_LORA_RANK)
    if rank is not None and isinstance(limit, int) and rank > limit:
        raise RuntimeSetupError(f"adapter {action.name!r} ({action.location}) has rank {rank}, above the engine's "
                                f"max_lora_rank {limit}", file=repo / Path(action.multi_lora).parent / MODEL_JSON,
                                field="max_lora_rank", expected=f"max_lora_rank >= {rank} in the spec's engine_args")


def default_weights_root() -> Path:
    """Where weights and adapters are materialized without --weights-root: the user's cache."""
    from tritonpkg import paths

    return paths.cache_dir() / "weights"


def fetch_adapter(location: str, weights_root: Path) -> Path:
    """A remote adapter's local copy (materialized now, or the verified one already there)."""
    return Path(_fetcher(None)(location, weights_root).path)


def _fetcher(materialize: Callable[..., Any] | None) -> Callable[..., Any]:
    """`storage.materialize` unless a caller (a test) hands its own."""
    if materialize is not None:
        return materialize
    from tritonpkg.storage import materialize as fetch

    return fetch


def _local_path(repo: Path, location: str, file: Path, field: str) -> Path:
    """A local location as model.json or multi_lora.json write it (`file`, at `field`): absolute or ~, else relative
    to the repository."""
    try:
        return (repo / location if not location.startswith(("/", "~")) else Path(location)).expanduser()
    except RuntimeError:
        raise RuntimeSetupError(f"{location!r} names the home folder of no user of this host", file=file,
                                field=field, expected="an existing folder on this machine") from None
