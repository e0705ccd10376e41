"""The toolkit's own vLLM backend against the target release's vLLM. A `backend: "vllm"` model whose config.pbtxt
declares a tensor only the toolkit's backend has (io_contract.json's `toolkit_only`: the embedding I/O, candidates,
prompt logprobs, token-id prompts) needs that backend wherever it runs; on a release whose vLLM is outside the range
the matrix declares for it (toolkit_features), the backend does not import there, so the model cannot load. The
local runtime runs the pinned vLLM, inside the range."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from tritonpkg import compat, vllm_io
from tritonpkg.errors import CompatError
from tritonpkg.validate.context import Context
from tritonpkg.validate.loaded import LoadedModel, load_repository
from tritonpkg.validate.report import Problem


def toolkit_tensors(m: LoadedModel) -> list[tuple[str, str]]:
    """(field, name) of each toolkit-only tensor the config declares as written (auto-complete's additions are the
    serving backend's own, not a demand of the repository)."""
    cfg = m.written if m.written is not None else m.config
    if cfg is None or cfg.backend != "vllm":
        return []
    only = vllm_io.load_toolkit().toolkit_only()
    return [(f"{kind}[{i}]", t.name) for kind, tensors in (("input", cfg.input), ("output", cfg.output))
            for i, t in enumerate(tensors) if t.name in only]


def finding(m: LoadedModel, release: str) -> tuple[str, str, str] | None:
    """(field, message, expected) when `m` needs the toolkit's backend and `release`'s vLLM is outside its range."""
    found = toolkit_tensors(m)
    refusal = compat.toolkit_backend_refusal(release) if found else None
    if not refusal:
        return None
    field, name = found[0]
    names = ", ".join(n for _, n in found)
    expected = (f"a target release with vLLM {compat.toolkit_backend_range()}, or no {name} (NVIDIA's backend's "
                "inputs and outputs only)")
    return field, f"declares {names}, which only the toolkit's vLLM backend serves; {refusal}", expected


def vllm_range(m: LoadedModel, ctx: Context) -> Iterator[Problem]:
    if ctx.is_local:
        return
    found = finding(m, ctx.target)
    if found:
        field, message, expected = found
        yield m.problem("toolkit_backend.vllm-range", "error", message, field=field, expected=expected)


def refuse_release(repo: Path, release: str) -> None:
    """Raise what vllm_range reports, for the first model of `repo` it hits (`serve --target-release`, `package`):
    config.pbtxt as written, no auto-complete, no other rule."""
    for m in load_repository(repo):
        found = finding(m, release)
        if found:
            field, message, expected = found
            raise CompatError(f"model {m.name!r} {message}", file=m.path / "config.pbtxt", field=field,
                              expected=expected)


RULES = [vllm_range]
