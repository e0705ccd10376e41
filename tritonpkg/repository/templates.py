"""Jinja2 rendering of a template's files (the templates and their typed parameters are
tritonpkg.template_params, which the spec also checks against).

Generated Python is where a spec's values turn into code, so there is one way in: the `pyliteral` filter,
which writes a value as a Python literal. A `.py` template that outputs anything else fails to render, so
no value can reach model.py raw (not in code, a string or a docstring). Each template's parameters are a
pydantic model built from the types template.yaml declares, checked before anything is rendered."""

from __future__ import annotations

import ast
import math
from collections.abc import Sequence
from functools import cache
from typing import Any

import jinja2

from tritonpkg import __version__
from tritonpkg.errors import SpecError
from tritonpkg.template_params import Template, available, describe, load, resolve_parameters, short_repr, source_digest

__all__ = ["PyLiteral", "Template", "available", "code_shape", "describe", "expected_shape", "first_difference",
           "load", "pyliteral", "render", "resolve_parameters", "sample_context", "source_digest"]

MAX_LITERAL_DEPTH = 32


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
            raise SpecError(f"mapping keys must be strings: {short_repr(value)}", field="python.parameters",
                            expected="a mapping with string keys")
        return "{" + ", ".join(f"{k!a}: {_literal(value[k], depth + 1)}" for k in sorted(value)) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_literal(v, depth + 1) for v in value) + "]"
    if isinstance(value, str):
        return ascii(value)
    if isinstance(value, float) and not math.isfinite(value):
        raise SpecError(f"{value!r} has no Python literal", field="python.parameters", expected="a finite number")
    if isinstance(value, int) and not isinstance(value, bool):
        try:
            return repr(value)
        except ValueError:  # past Python's digit limit (sys.get_int_max_str_digits), which source code has too
            raise SpecError(f"an integer of {value.bit_length()} bits has no Python literal",
                            field="python.parameters", expected="an integer of at most 4300 digits") from None
    if value is None or isinstance(value, (bool, float)):
        return repr(value)
    raise SpecError(f"template parameter value {short_repr(value)} is not a plain literal", field="python.parameters",
                    expected="strings, numbers, booleans, null, lists and mappings")


def _only_literals(value: Any) -> str:
    """finalize of `.py` templates: every `{{ ... }}` must end in `| pyliteral`."""
    if isinstance(value, PyLiteral):
        return value
    raise jinja2.TemplateRuntimeError(f"a value reaches generated Python without | pyliteral: {short_repr(value)}")


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


@cache
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


@cache
def _environment(folder: str, python: bool) -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(folder),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,  # noqa: S701  renders Python source and pbtxt, not HTML; values go through pyliteral
        finalize=_only_literals if python else None,
    )
    env.filters["pyliteral"] = pyliteral
    return env
