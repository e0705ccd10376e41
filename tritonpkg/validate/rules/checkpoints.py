"""Models of the `embedding` and `scoring` templates (a version holding the vendored `embedcore/`): the
checkpoint folder their model.py names is loaded by the engine in initialize(), so a folder it cannot
serve (another model_type, no tokenizer.json, a two-label classifier, a sentence-transformers module it
does not run) fails Triton's load. The packager checked the folder when it wrote the model; this checks
it again on the host that validates, since weights folders change after packaging."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from tritonpkg import safepath
from tritonpkg.validate.context import Context
from tritonpkg.validate.loaded import LoadedModel, read_text
from tritonpkg.validate.report import Problem
from tritonpkg.validate.rules.versions import loaded_versions


def template_weights(m: LoadedModel, ctx: Context) -> Iterator[Problem]:
    if m.config is None or m.backend != "python":
        return
    from tritonpkg.embedding.checkpoint import read_checkpoint
    from tritonpkg.embedding.errors import EmbeddingInputError

    for v in sorted(loaded_versions(m)):
        src = m.versions[v] / (m.config.default_model_filename or "model.py")
        weights = _settings_weights(src) if (m.versions[v] / "embedcore").is_dir() else None
        if weights is None:
            continue
        if not safepath.is_dir(weights):
            yield m.problem("checkpoint.missing", "warning", f"weights folder {weights} is not on this host",
                            file=src, field="weights",
                            expected="the folder on the serving host (materialized there), or the model's load fails")
            continue
        try:
            read_checkpoint(weights, scoring="ScoringModel" in read_text(src))
        except EmbeddingInputError as exc:
            yield m.problem("checkpoint.unloadable", "error", exc.message, file=src, field=exc.field,
                            expected=exc.expected)


def _settings_weights(src: Path) -> str | None:
    """SETTINGS["weights"] of a template's model.py (a literal the packager wrote)."""
    try:
        tree = ast.parse(read_text(src))
    except (OSError, SyntaxError, RecursionError, MemoryError):
        return None  # backend.python-syntax reports it
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "SETTINGS" for t in node.targets):
            try:
                value = ast.literal_eval(node.value).get("weights")
            except (ValueError, AttributeError):
                return None
            return value if isinstance(value, str) else None
    return None


RULES = [template_weights]
