"""The templates of templates/<name>/ (their template.yaml) and their typed parameters: a pydantic model
built from the types template.yaml declares. Low on purpose: the spec checks its parameters against it,
and the packager (tritonpkg.repository.templates) renders with what it resolves."""

from __future__ import annotations

import difflib
import keyword
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
    ValidationError,
    create_model,
)

from tritonpkg import paths
from tritonpkg.errors import SpecError
from tritonpkg.safepath import MAX_NAME_BYTES, MAX_SEGMENT_BYTES, quote

MAX_STRING = 4096
MAX_LIST = 1024
INT64_MAX = 2**63 - 1


@dataclass(frozen=True)
class Template:
    name: str
    folder: Path
    meta: dict[str, Any]
    parameter_model: type[BaseModel] | None = field(default=None, compare=False, hash=False)

    @property
    def parameters(self) -> dict[str, dict[str, Any]]:
        return self.meta.get("parameters") or {}

    def default_io(self, key: str) -> tuple[list[dict], list[dict]]:
        default_io = self.meta.get("default_io") or {}
        io = default_io.get(key) or default_io.get("default") or {}
        return io.get("inputs", []), io.get("outputs", [])

    def sources(self) -> list[Path]:
        return sorted(self.folder.glob("*.j2"))


def available() -> list[str]:
    root = paths.templates_dir()
    return sorted(p.parent.name for p in root.glob("*/template.yaml"))


@cache
def load(name: str) -> Template:
    """A template of templates/ by its folder name; any other name (`../x`, a path) is unknown, since a
    template is code the packager runs (Jinja2) and writes into every model it makes."""
    if name not in available():
        raise SpecError(
            f"unknown template {quote(name)}",
            field="python.template",
            expected=f"one of {', '.join(available())} (folders of {paths.templates_dir()})",
        )
    folder = paths.templates_dir() / name
    meta = yaml.safe_load((folder / "template.yaml").read_text()) or {}
    return Template(name, folder, meta, _parameter_model(name, meta.get("parameters") or {}))


@cache
def source_digest(name: str) -> str:
    """sha256 of a template's sources (template.yaml and every *.j2): the lock records it, so validate
    compares a model.py only with the template that rendered it."""
    import hashlib

    template = load(name)
    digest = hashlib.sha256()
    for path in [template.folder / "template.yaml", *template.sources()]:
        data = path.read_bytes()
        digest.update(f"{path.name}\0{len(data)}\0".encode() + data)
    return digest.hexdigest()


def _identifier(value: str) -> str:
    if not value.isidentifier() or keyword.iskeyword(value):
        raise ValueError("not a Python identifier")
    return value


def _python_file(value: str) -> str:
    """`hooks.py`: a file beside model.py whose name is also an importable module name."""
    parts = value.split(".")
    if len(parts) < 2 or parts[-1] != "py" or not all(p.isidentifier() and not keyword.iskeyword(p)
                                                       for p in parts[:-1]):
        raise ValueError("not a Python file name")
    return value


def _path(value: str) -> str:
    """Only the shape of a path (the packager reads it under the one path rule, tritonpkg.safepath)."""
    if not value or any(ord(c) < 0x20 or c == "\x7f" for c in value):
        raise ValueError("empty, or a NUL or control character")
    if len(value.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES or any(
            len(part.encode("utf-8", "surrogatepass")) > MAX_SEGMENT_BYTES for part in value.split("/")):
        raise ValueError("too long for a path")
    return value


# template.yaml `type:` -> (pydantic type, what the error says is expected)
_TYPES: dict[str, tuple[Any, str]] = {
    "integer": (StrictInt, "an integer"),
    "boolean": (StrictBool, "true or false"),
    "string": (Annotated[StrictStr, Field(max_length=MAX_STRING)], "a string"),
    "identifier": (Annotated[StrictStr, Field(max_length=255), AfterValidator(_identifier)], "a Python identifier"),
    "python_file": (Annotated[StrictStr, Field(max_length=255), AfterValidator(_python_file)],
                    "a Python file name such as hooks.py (identifiers joined by dots, ending in .py)"),
    "path": (Annotated[StrictStr, Field(max_length=MAX_STRING), AfterValidator(_path)],
             "a path relative to the spec"),
    "integer_list": (list, "a list of integers"),
    "choice": (None, "one of"),
}


def _annotation(key: str, decl: dict[str, Any]) -> Any:
    kind = decl.get("type")
    if kind not in _TYPES:
        raise SpecError(f"template parameter {key!r} declares type {kind!r}", field=f"parameters.{key}.type",
                        expected=", ".join(sorted(_TYPES)))
    bounds = {"ge": decl.get("minimum"), "le": decl.get("maximum", INT64_MAX)}
    bounds = {k: v for k, v in bounds.items() if v is not None}
    if kind == "choice":
        ann: Any = Literal[tuple(decl["choices"])]
    elif kind == "integer":
        ann = Annotated[StrictInt, Field(**bounds)]
    elif kind == "integer_list":
        ann = Annotated[list[Annotated[StrictInt, Field(**bounds)]], Field(max_length=MAX_LIST)]
    else:
        ann = _TYPES[kind][0]
    if ("default" in decl and decl["default"] is None) or decl.get("nullable"):
        ann = ann | None
    return ann


def describe(decl: dict[str, Any]) -> str:
    """What a parameter accepts, in the words of an error's `expected`."""
    kind = decl.get("type", "")
    if kind == "choice":
        return "one of " + ", ".join("null" if c is None else str(c) for c in decl["choices"])
    text = _TYPES.get(kind, (None, kind))[1]
    if "minimum" in decl and kind in ("integer", "integer_list"):
        text += f" >= {decl['minimum']}" if kind == "integer" else f" (each >= {decl['minimum']})"
    if ("default" in decl and decl["default"] is None) or decl.get("nullable"):
        text += " or null"
    return text


def _parameter_model(name: str, declared: dict[str, dict[str, Any]]) -> type[BaseModel]:
    fields: dict[str, Any] = {}
    for key, decl in declared.items():
        default = ... if decl.get("required") else decl.get("default")
        fields[key] = (_annotation(key, decl), default)
    config = ConfigDict(extra="forbid", strict=True, protected_namespaces=())
    return create_model(f"{name}_parameters", __config__=config, **fields)


def resolve_parameters(template: Template, given: dict[str, Any], file: Path | None) -> dict[str, Any]:
    """Template defaults overlaid with the spec's parameters, validated by the template's parameter model:
    an unknown, missing or mistyped value is a SpecError naming `python.parameters.<key>`."""
    declared = template.parameters
    for key in given:
        if key not in declared:
            close = difflib.get_close_matches(str(key), list(declared), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise SpecError(f"template {template.name!r} has no parameter {quote(key)}{hint}", file=file,
                            field=f"python.parameters.{key}", expected=", ".join(sorted(declared)))
    model = template.parameter_model
    if model is None:
        raise SpecError(f"template {template.name!r} carries no parameter model", file=file,
                        field="python.parameters", expected="a template read by templates.load()")
    try:
        return model.model_validate(given).model_dump()
    except ValidationError as exc:
        err = exc.errors()[0]
        key = str(err["loc"][0])
        decl = declared[key]
        where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in err["loc"])
        if err["type"] == "missing":
            raise SpecError(f"template {template.name!r} needs parameter {key!r}: {decl.get('description', '')}",
                            file=file, field=f"python.parameters.{key}", expected="a value") from None
        raise SpecError(f"{short_repr(err['input'])} is not allowed", file=file, field=f"python.parameters{where}",
                        expected=describe(decl)) from None


def short_repr(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:80] + f"... ({len(text)} characters)"
