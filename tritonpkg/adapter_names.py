"""The rule for a LoRA adapter's name, wherever a name comes from: the spec's `adapters[].name`, and every
multi_lora.json the toolkit reads (validate, serve, the OpenAI catalog). The vLLM backend runs in Triton's
stub without tritonpkg and keeps a copy (backends/vllm/lora.py, `name_problem`); a unit test holds the two equal.

A name is a request's `lora_name`, an OpenAI model id, a log field and a folder of the repository: ASCII letters,
digits, `_ . -`, starting with a letter, at most MAX_NAME characters. A served list may also hold
`<name>@<version>`, the name an adapter rollout gives a release's adapter beside the live one."""

from __future__ import annotations

import re

NAME_PATTERN = r"[A-Za-z][A-Za-z0-9_.-]*"
SPEC_PATTERN = f"^{NAME_PATTERN}$"  # pydantic's (Rust) regex: `$` is the end of the text
MAX_NAME = 64
MAX_VERSION = 2**63 - 1  # a Triton model version (int64)
RULE = (f"ASCII letters, digits, '_', '.' or '-', starting with a letter, at most {MAX_NAME} characters "
        "(a rollout's list adds '@<version>')")
_NAME = re.compile(NAME_PATTERN)
_VERSION = re.compile(r"[1-9][0-9]{0,18}")


def name_problem(name: object) -> str | None:
    """Why `name`, read from an adapter list, is not an adapter name (a predicate: "is empty"); None when it is one."""
    if not isinstance(name, str):
        return f"is a {type(name).__name__}, not a string"
    base, at, version = name.partition("@")
    if not base:
        return "is empty" if not at else "has no name before '@'"
    if not base[0].isascii() or not base[0].isalpha():
        return "does not start with an ASCII letter"
    if _NAME.fullmatch(base) is None:
        return "holds a character other than ASCII letters, digits, '_', '.' or '-'"
    if len(base) > MAX_NAME:
        return f"is longer than {MAX_NAME} characters"
    if at and (_VERSION.fullmatch(version) is None or int(version) > MAX_VERSION):
        return "has an '@' not followed by a model version"
    return None


def shown(name: str, limit: int = MAX_NAME) -> str:
    """`name` as a finding or a log line names it: escaped (a NUL or a newline stays visible), at most `limit`
    characters of it."""
    text = name if len(name) <= limit else name[:limit]
    escaped = text.encode("unicode_escape").decode("ascii")
    return escaped if len(name) <= limit else escaped + f"... ({len(name)} characters)"
