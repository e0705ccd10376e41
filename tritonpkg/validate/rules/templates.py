"""model.py of a template-rendered model against the template that rendered it. The packager writes every
value as a literal assignment (tritonpkg.repository.templates), so any render of a template has the same
statements; a model.py with other statements was edited after packaging, or carries code that a value
smuggled in. Triton runs that code when it loads the model, so it is an error, not drift."""

from __future__ import annotations

from collections.abc import Iterator

from tritonpkg.errors import TritonpkgError
from tritonpkg.repository import templates
from tritonpkg.validate.context import Context
from tritonpkg.validate.loaded import LoadedModel, read_text
from tritonpkg.validate.report import Problem
from tritonpkg.validate.rules.versions import loaded_versions


def template_code(m: LoadedModel, ctx: Context) -> Iterator[Problem]:
    """Only versions the lock says were rendered from the template as it is now (its sources' sha256)."""
    if m.config is None or m.backend != "python":
        return
    model = ctx.lock()["models"].get(m.name) if ctx.lock() else None
    versions = model.get("versions") if isinstance(model, dict) else None
    for v in sorted(loaded_versions(m)):
        entry = versions.get(str(v)) if isinstance(versions, dict) else None
        if not isinstance(entry, dict):
            continue
        role = entry.get("role")
        if not isinstance(role, str) or role not in templates.available() \
                or entry.get("template_sha256") != templates.source_digest(role):
            continue
        src = m.versions[v] / (m.config.default_model_filename or "model.py")
        try:
            expected = templates.expected_shape(role)
            line = templates.first_difference(read_text(src), expected) if expected else None
        except (OSError, SyntaxError, RecursionError, MemoryError, TritonpkgError):
            continue  # a missing or unparsable model.py is reported by the layout and backend rules
        if line is not None:
            yield m.problem("template.code", "error",
                            f"code that the {role!r} template does not make, from line {line} (edited after "
                            "packaging, or injected); Triton runs it when it loads the model",
                            file=src, at=(line, 1), field=None,
                            expected=f"the model.py tritonpkg package renders from templates/{role}; package again")


RULES = [template_code]
