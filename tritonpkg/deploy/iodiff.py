"""`tritonpkg diff OLD NEW`: the I/O schema of two model versions, and whether clients of the old one
keep working against the new one. That answer picks the strategy of `deploy --strategy auto`.

Rules (old client, new server): a removed or newly required input, a changed dtype, a dim that no
longer accepts what the old one did, a removed output, or a batching change breaks clients; an added
optional input, an added output, or a dim widened to -1 does not."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel

from tritonpkg.errors import TritonpkgError
from tritonpkg.repository.build import build_models
from tritonpkg.repository.config import parse_pbtxt
from tritonpkg.spec import load_spec


class Tensor(BaseModel):
    name: str
    data_type: str
    dims: list[int]
    optional: bool = False


class Schema(BaseModel):
    model: str
    version: int | None = None
    max_batch_size: int = 0
    inputs: list[Tensor]
    outputs: list[Tensor]


class Change(BaseModel):
    where: str  # "input X", "output Y", "max_batch_size"
    old: str
    new: str
    breaking: bool
    why: str


class Diff(BaseModel):
    old: Schema
    new: Schema
    changes: list[Change]

    @property
    def compatible(self) -> bool:
        return not any(c.breaking for c in self.changes)

    def reasons(self) -> list[str]:
        return [f"{c.where}: {c.why}" for c in self.changes if c.breaking]


def _dims_accept(old: list[int], new: list[int]) -> bool:
    return len(old) == len(new) and all(n == -1 or n == o for o, n in zip(old, new, strict=True))


def _fmt(t: Tensor | None) -> str:
    if t is None:
        return "-"
    return f"{t.data_type.removeprefix('TYPE_')}{t.dims}" + (" optional" if t.optional else "")


def diff(old: Schema, new: Schema) -> Diff:
    changes: list[Change] = []
    if (old.max_batch_size > 0) != (new.max_batch_size > 0):
        changes.append(Change(where="max_batch_size", old=str(old.max_batch_size), new=str(new.max_batch_size),
                              breaking=True, why="batching on/off changes every tensor's shape"))
    for kind, olds, news in (("input", old.inputs, new.inputs), ("output", old.outputs, new.outputs)):
        o_map, n_map = {t.name: t for t in olds}, {t.name: t for t in news}
        for name in sorted(set(o_map) | set(n_map)):
            o, n = o_map.get(name), n_map.get(name)
            where = f"{kind} {name}"
            if o is not None and n is not None and o == n:
                continue
            if n is None:
                changes.append(Change(where=where, old=_fmt(o), new="-", breaking=True,
                                      why="removed: old clients " + ("send" if kind == "input" else "read") + " it"))
            elif o is None:
                breaking = kind == "input" and not n.optional
                changes.append(Change(where=where, old="-", new=_fmt(n), breaking=breaking,
                                      why="added and required: old clients do not send it" if breaking
                                      else "added" + (" as optional" if kind == "input" else "")))
            else:
                if o.data_type != n.data_type:
                    changes.append(Change(where=where, old=_fmt(o), new=_fmt(n), breaking=True, why="dtype changed"))
                if o.dims != n.dims:
                    ok = _dims_accept(o.dims, n.dims) if kind == "input" else _dims_accept(n.dims, o.dims)
                    changes.append(Change(where=where, old=_fmt(o), new=_fmt(n), breaking=not ok,
                                          why="dims widened" if ok else "dims no longer match"))
                if kind == "input" and o.optional and not n.optional:
                    changes.append(Change(where=where, old=_fmt(o), new=_fmt(n), breaking=True,
                                          why="optional input became required"))
                elif kind == "input" and n.optional and not o.optional:
                    changes.append(Change(where=where, old=_fmt(o), new=_fmt(n), breaking=False,
                                          why="required input became optional"))
    return Diff(old=old, new=new, changes=changes)


def from_config(cfg: Any, version: int | None = None) -> Schema:
    """From a ModelConfig protobuf (config.pbtxt parsed with Triton's schema)."""
    from tritonclient.grpc import model_config_pb2 as mc

    def tensors(items: Any) -> list[Tensor]:
        return [Tensor(name=t.name, data_type=mc.DataType.Name(t.data_type), dims=list(t.dims),
                       optional=bool(getattr(t, "optional", False))) for t in items]

    return Schema(model=cfg.name, version=version, max_batch_size=cfg.max_batch_size,
                  inputs=tensors(cfg.input), outputs=tensors(cfg.output))


def load(path: str | Path) -> Schema:
    """A spec (tritonpkg.yaml or its folder), a model repository, a model folder or a config.pbtxt."""
    p = Path(path)
    if p.is_file() and p.name == "config.pbtxt":
        return from_config(parse_pbtxt(p.read_text()), _latest_version(p.parent))
    if p.is_dir() and (p / "config.pbtxt").is_file():
        return load(p / "config.pbtxt")
    if p.is_dir() and (p / "tritonpkg.lock.json").is_file():
        return load(repository_model(p)[0] / "config.pbtxt")
    if (p.is_dir() and (p / "tritonpkg.yaml").is_file()) or p.suffix in (".yaml", ".yml"):
        spec = load_spec(p)
        built = build_models(spec)
        main = next((m for m in built if m.name == spec.name), built[0])
        return from_config(main.config, spec.version)
    raise TritonpkgError("cannot read an I/O schema here", file=p,
                         expected="a tritonpkg.yaml, a model repository, a model folder or a config.pbtxt")


def repository_model(repo: Path) -> tuple[Path, int]:
    """The top-level model of a packaged repository (the one named like its package) and its version."""
    import json

    lock = json.loads((repo / "tritonpkg.lock.json").read_text())
    models = lock.get("models", {})
    for name, entry in sorted(models.items()):
        versions = entry.get("versions", {})
        packages = {v.get("package") for v in versions.values()}
        if name in packages or len(models) == 1:
            return repo / name, max(int(v) for v in versions)
    raise TritonpkgError("the lock names no model that matches its package", file=repo / "tritonpkg.lock.json",
                         field="models", expected="a model named like its package")


def _latest_version(model_dir: Path) -> int | None:
    versions = [int(d.name) for d in model_dir.iterdir() if d.is_dir() and d.name.isdigit()]
    return max(versions) if versions else None
