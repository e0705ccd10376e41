"""Template metadata (templates/<name>/template.yaml) and Jinja2 rendering of a template's files."""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import jinja2
import yaml

from tritonpkg import __version__, paths
from tritonpkg.errors import SpecError


@dataclass(frozen=True)
class Template:
    name: str
    folder: Path
    meta: dict[str, Any]

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
    folder = paths.templates_dir() / name
    meta_file = folder / "template.yaml"
    if not meta_file.is_file():
        raise SpecError(
            f"unknown template {name!r}",
            field="python.template",
            expected=f"one of {', '.join(available())} (folders of {paths.templates_dir()})",
        )
    return Template(name, folder, yaml.safe_load(meta_file.read_text()) or {})


def resolve_parameters(template: Template, given: dict[str, Any], file: Path | None) -> dict[str, Any]:
    """Template defaults overlaid with the spec's parameters; unknown, missing or out-of-choice values are errors."""
    declared = template.parameters
    for key in given:
        if key not in declared:
            close = difflib.get_close_matches(key, list(declared), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise SpecError(f"template {template.name!r} has no parameter {key!r}{hint}", file=file,
                            field=f"python.parameters.{key}", expected=", ".join(sorted(declared)))
    params: dict[str, Any] = {}
    for key, decl in declared.items():
        if key in given:
            value = given[key]
        elif decl.get("required"):
            raise SpecError(f"template {template.name!r} needs parameter {key!r}: {decl.get('description', '')}",
                            file=file, field=f"python.parameters.{key}", expected="a value")
        else:
            value = decl.get("default")
        choices = decl.get("choices")
        if choices and value not in choices:
            raise SpecError(f"{value!r} is not allowed", file=file, field=f"python.parameters.{key}",
                            expected=f"one of {', '.join(map(str, choices))}")
        if decl.get("type") == "integer" and value is not None and (
                isinstance(value, bool) or not isinstance(value, int) or value < decl.get("minimum", value)):
            minimum = f" >= {decl['minimum']}" if "minimum" in decl else ""
            raise SpecError(f"{value!r} is not allowed", file=file, field=f"python.parameters.{key}",
                            expected=f"an integer{minimum} or null")
        params[key] = value
    return params


def python_literal(value: Any) -> str:
    """A Python literal for a rendered model.py (dict keys sorted so output is deterministic)."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{python_literal(k)}: {python_literal(value[k])}" for k in sorted(value)) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(python_literal(v) for v in value) + "]"
    if value is None or isinstance(value, (bool, int, float, str)):
        return repr(value)
    raise SpecError(f"template parameter value {value!r} is not a plain literal", field="python.parameters",
                    expected="strings, numbers, booleans, null, lists and mappings")


def render(template: Template, context: dict[str, Any]) -> dict[str, bytes]:
    """Every *.j2 of the template rendered with `context`; file names lose the .j2 suffix."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(template.folder)),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
    )
    env.filters["py"] = python_literal
    ctx = {"tritonpkg_version": __version__, **context}
    out: dict[str, bytes] = {}
    for src in template.sources():
        try:
            text = env.get_template(src.name).render(**ctx)
        except jinja2.TemplateError as exc:
            raise SpecError(f"template {template.name}/{src.name} failed to render: {exc}",
                            field="python.parameters") from exc
        out[src.name.removesuffix(".j2")] = text.encode()
    return out
