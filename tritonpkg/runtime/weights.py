"""Start-up step 2: every vLLM model's weights are on this machine before Triton starts.

A packaged vLLM model names its weights in `<model>/<version>/model.json` (`model`, plus `revision` for a
Hub model). A local path must exist. A remote source (s3://, hf://, any fsspec URL; a bare `org/name`
is what `package` writes for hf://org/name) is materialized under the weights root — complete and
sha256-verified, or not at all (tritonpkg.storage.materialize) — and model.json is pointed at the local
copy, so vLLM never downloads at start-up. Local weights are only checked to exist, not hashed."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Literal

from tritonpkg.errors import RuntimeSetupError

MODEL_JSON = "model.json"
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
    for path in sorted(repo.glob(f"*/*/{MODEL_JSON}")):
        if not path.parent.name.isdigit():
            continue
        rel = path.relative_to(repo).as_posix()
        try:
            data = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise RuntimeSetupError(f"cannot read engine arguments: {exc}", file=path, expected="a JSON object") from exc
        if not isinstance(data, dict):
            raise RuntimeSetupError("engine arguments must be a JSON object", file=path, expected="a JSON object")
        found[rel] = data
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
    if materialize is None:
        from tritonpkg.storage import materialize
    results = []
    for action in actions:
        path = repo / action.model_json
        if action.kind == "local":
            local = (repo / action.location if not action.location.startswith(("/", "~"))
                     else Path(action.location)).expanduser()
            if not local.exists():
                raise RuntimeSetupError(f"weights not found: {local}", file=path, field="model",
                                        expected="an existing weights folder on this machine, or a remote "
                                                 "source (s3://, hf://) to materialize under --weights-root")
            results.append(WeightsResult(action.model_json, "local", action.location, str(local), "exists"))
            continue
        done = materialize(action.location, weights_root)
        args = json.loads(path.read_text())
        args["model"] = str(done.path)
        args.pop("revision", None)  # the local copy is that revision
        path.write_text(json.dumps(args, indent=2, sort_keys=True) + "\n")
        detail = "reused" if done.reused else f"{done.bytes_downloaded} bytes fetched"
        results.append(WeightsResult(action.model_json, "materialized", action.location, str(done.path), detail))
    return results
