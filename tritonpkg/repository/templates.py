"""Template metadata (templates/<name>/template.yaml), typed template parameters, and Jinja2 rendering of a
template's files.

Generated Python is where a spec's values turn into code, so there is one way in: the `pyliteral` filter,
which writes a value as a Python literal. A `.py` template that outputs anything else fails to render, so
no value can reach model.py raw (not in code, a string or a docstring). Each template's parameters are a
pydantic model built from the types template.yaml declares, checked before anything is rendered."""

from __future__ import annotations

import ast
import difflib
import keyword
import math
from dataclasses import dataclass, field
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any, Literal, Optional

import jinja2
import yaml
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr, ValidationError
from pydantic import create_model

from tritonpkg import __version__, paths
from tritonpkg.errors import SpecError
from tritonpkg.safepath import MAX_NAME_BYTES, MAX_SEGMENT_BYTES, quote

MAX_LITERAL_DEPTH = 32
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


@lru_cache(maxsize=None)
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


@lru_cache(maxsize=None)
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
    if "default" in decl and decl["default"] is None or decl.get("nullable"):
        ann = Optional[ann]
    return ann


def describe(decl: dict[str, Any]) -> str:
    """What a parameter accepts, in the words of an error's `expected`."""
    kind = decl.get("type", "")
    if kind == "choice":
        return "one of " + ", ".join("null" if c is None else str(c) for c in decl["choices"])
    text = _TYPES.get(kind, (None, kind))[1]
    if "minimum" in decl and kind in ("integer", "integer_list"):
        text += f" >= {decl['minimum']}" if kind == "integer" else f" (each >= {decl['minimum']})"
    if "default" in decl and decl["default"] is None or decl.get("nullable"):
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
    assert template.parameter_model is not None
    try:
        return template.parameter_model.model_validate(given).model_dump()
    except ValidationError as exc:
        err = exc.errors()[0]
        key = str(err["loc"][0])
        decl = declared[key]
        where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in err["loc"])
        if err["type"] == "missing":
            raise SpecError(f"template {template.name!r} needs parameter {key!r}: {decl.get('description', '')}",
                            file=file, field=f"python.parameters.{key}", expected="a value") from None
        raise SpecError(f"{_short(err['input'])} is not allowed", file=file, field=f"python.parameters{where}",
                        expected=describe(decl)) from None


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:80] + f"... ({len(text)} characters)"


class PyLiteral(str):
    """Python source text of one literal, as `pyliteral` wrote it."""


def pyliteral(value: Any) -> PyLiteral:
    """The one escaping filter for generated Python: `value` as a Python literal that evaluates back to it.
    Strings are written with `ascii()` (every quote, backslash, newline, U+2028/U+2029, NUL or lone
    surrogate escaped, so the literal cannot end early and the file stays ASCII); mapping keys sorted, so
    output is deterministic; only JSON-like values (no NaN or infinity, which have no literal)."""
    return PyLiteral(_literal(value, 0))


def _literal(value: Any, depth: int) -> str:
    if depth > MAX_LITERAL_DEPTH:
        raise SpecError(f"template parameter value nested deeper than {MAX_LITERAL_DEPTH} levels",
                        field="python.parameters", expected="a flatter value")
    if isinstance(value, dict):
        if not all(isinstance(k, str) for k in value):
            raise SpecError(f"mapping keys must be strings: {_short(value)}", field="python.parameters",
                            expected="a mapping with string keys")
        return "{" + ", ".join(f"{ascii(k)}: {_literal(value[k], depth + 1)}" for k in sorted(value)) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_literal(v, depth + 1) for v in value) + "]"
    if isinstance(value, str):
        return ascii(value)
    if isinstance(value, float) and not math.isfinite(value):
        raise SpecError(f"{value!r} has no Python literal", field="python.parameters", expected="a finite number")
    if value is None or isinstance(value, (bool, int, float)):
        return repr(value)
    raise SpecError(f"template parameter value {_short(value)} is not a plain literal", field="python.parameters",
                    expected="strings, numbers, booleans, null, lists and mappings")


def _only_literals(value: Any) -> str:
    """finalize of `.py` templates: every `{{ ... }}` must end in `| pyliteral`."""
    if isinstance(value, PyLiteral):
        return value
    raise jinja2.TemplateRuntimeError(f"a value reaches generated Python without | pyliteral: {_short(value)}")


def code_shape(source: str) -> list[str]:
    """`ast.dump` of each top-level statement of a module, with the value of every top-level
    `NAME = <literal>` masked: the statements a template makes, whatever values it was rendered with.
    Templates put every value in such an assignment, so two renders of one template have the same shape,
    and code that a value (or a hand edit) added does not. SyntaxError when `source` is not Python."""
    return [ast.dump(node, include_attributes=False) for node in _masked(ast.parse(source))]


def first_difference(source: str, expected: Sequence[str]) -> int | None:
    """The line of the first top-level statement of `source` whose shape differs from `expected`
    (the line after the last one when statements are missing); None when the shapes are equal."""
    nodes = _masked(ast.parse(source))
    for i, node in enumerate(nodes):
        if i >= len(expected) or ast.dump(node, include_attributes=False) != expected[i]:
            return node.lineno
    return None if len(nodes) == len(expected) else (nodes[-1].end_lineno or 0) + 1 if nodes else 1


def _masked(tree: ast.Module) -> list[ast.stmt]:
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            try:
                ast.literal_eval(node.value)
            except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                continue
            node.value = ast.Constant(value="<literal>")
    return tree.body


def sample_context(template: Template) -> dict[str, Any]:
    """A context any of the template's renders has the code shape of (values are masked by code_shape)."""
    params = {k: ("x" if d.get("required") else d.get("default")) for k, d in template.parameters.items()}
    tensor = {"name": "X", "data_type": "TYPE_FP32", "dims": [1], "optional": False}
    return {"name": "m", "version": 1, "params": params, "inputs": [tensor], "outputs": [tensor],
            "max_batch_size": 0, "weights": None}


@lru_cache(maxsize=None)
def expected_shape(name: str, filename: str = "model.py") -> tuple[str, ...] | None:
    """The code shape of `filename` as template `name` renders it (None: the template has no such file)."""
    template = load(name)
    data = render(template, sample_context(template)).get(filename)
    return tuple(code_shape(data.decode())) if data is not None else None


def render(template: Template, context: dict[str, Any]) -> dict[str, bytes]:
    """Every *.j2 of the template rendered with `context`; file names lose the .j2 suffix. In a `.py`
    source every output goes through `pyliteral` (anything else fails the render)."""
    ctx = {"tritonpkg_version": __version__, **context}
    out: dict[str, bytes] = {}
    for src in template.sources():
        target = src.name.removesuffix(".j2")
        try:
            text = _environment(str(template.folder), target.endswith(".py")).get_template(src.name).render(**ctx)
        except jinja2.TemplateError as exc:
            raise SpecError(f"template {template.name}/{src.name} failed to render: {exc}",
                            field="python.parameters") from exc
        out[target] = text.encode()
    return out


@lru_cache(maxsize=None)
def _environment(folder: str, python: bool) -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(folder),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
        finalize=_only_literals if python else None,
    )
    env.filters["pyliteral"] = pyliteral
    return env
