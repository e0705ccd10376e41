"""Every rule, in report order. Model rules see one model (plus the Context); repo rules see all."""

from __future__ import annotations

from collections.abc import Iterator

from tritonpkg.validate import autocomplete
from tritonpkg.validate.context import Context
from tritonpkg.validate.loaded import LoadedModel
from tritonpkg.validate.report import Problem
from tritonpkg.validate.rules import (
    backend,
    batching,
    checkpoints,
    defects,
    engine_args,
    ensemble,
    instances,
    layout,
    lora,
    openai_parsers,
    plugins,
    runtime,
    schedulers,
    templates,
    tensors,
    toolkit_backend,
    versions,
)


def config_syntax(m: LoadedModel, ctx: Context) -> Iterator[Problem]:
    """config.pbtxt must parse as Triton's ModelConfig (the server: 'failed to read text proto')."""
    if m.parse_error is not None:
        msg, line, col = m.parse_error
        yield m.problem("config.syntax", "error", msg, at=(line, col) if line else None,  # type: ignore[arg-type]
                        expected="text-format ModelConfig (see model_config.proto)")


def auto_complete(m: LoadedModel, ctx: Context) -> Iterator[Problem]:
    """What Triton's auto-complete itself says (autocomplete.py): an error when it fails the load."""
    if m.auto_finding is not None:
        yield m.auto_finding


MODEL_RULES = [config_syntax, auto_complete, *layout.RULES, *versions.RULES, *backend.RULES, *checkpoints.RULES,
               *tensors.RULES, *batching.RULES, *schedulers.RULES, *instances.RULES, *ensemble.RULES,
               *engine_args.RULES, *toolkit_backend.RULES, *lora.RULES, *defects.RULES, *runtime.RULES,
               *templates.RULES, *openai_parsers.RULES]
REPO_RULES = [*runtime.REPO_RULES, *plugins.REPO_RULES, *lora.REPO_RULES]


def run_rules(models: list[LoadedModel], ctx: Context) -> list[Problem]:
    autocomplete.apply(models, ctx.backends_dir, enabled=ctx.auto_complete)
    runtime.prewarm(models, ctx)
    problems: list[Problem] = []
    for m in models:
        for rule in MODEL_RULES:
            problems.extend(rule(m, ctx))
    for repo_rule in REPO_RULES:
        problems.extend(repo_rule(models, ctx))
    return problems
