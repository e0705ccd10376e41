"""A model's tokenizer as the frontend uses it (prompt token counts, the chat template), read from the
files of a Hugging Face tokenizer folder without importing transformers.

transformers' AutoTokenizer imports torch and scikit-learn for this: ~5 s and ~500 MB per frontend
process here, and ~450k long-lived objects for the garbage collector. `tokenizers` encodes from
tokenizer.json (its post-processor adds BOS/EOS exactly as transformers' fast tokenizer does), and
jinja2 renders the template under the rules transformers applies to chat templates: a sandbox,
`trim_blocks` and `lstrip_blocks`, loop controls, the `{% generation %}` tag, `raise_exception`,
`strftime_now`, a `tojson` that keeps non-ASCII and does not escape HTML, and the named special tokens
as variables. Where the template comes from follows transformers too: `chat_template.jinja` and
`additional_chat_templates/*.jinja` before tokenizer_config.json's `chat_template` (a string or a list
of named templates; with tools, `tool_use` is preferred to `default`).

A folder without tokenizer.json (a slow, sentencepiece-only tokenizer) still loads through transformers."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from pathlib import Path
from typing import Any

NAMED_TOKENS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")
TEMPLATE_FILE = "chat_template.jinja"
TEMPLATE_DIR = "additional_chat_templates"


@dataclass
class ChatTokenizer:
    tokenizer: Any  # tokenizers.Tokenizer
    chat_template: str | dict[str, str] | None
    special_tokens: dict[str, str]  # template variables: bos_token, eos_token, ... and model-specific *_token

    @property
    def bos_token(self) -> str | None:
        return self.special_tokens.get("bos_token")

    @property
    def bos_token_id(self) -> int | None:
        return self.tokenizer.token_to_id(self.bos_token) if self.bos_token is not None else None

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=add_special_tokens).ids

    def apply_chat_template(self, messages: list[dict], tools: list[dict] | None = None,
                            add_generation_prompt: bool = False, tokenize: bool = False) -> str:
        """The prompt text (`tokenize` must stay False: callers count tokens with `encode`)."""
        if tokenize:
            raise ValueError("ChatTokenizer renders text only; encode() the result")
        template = _template(self.chat_template, tools)
        return _compiled(template).render(messages=messages, tools=tools, documents=None,
                                          add_generation_prompt=add_generation_prompt, **self.special_tokens)


def load_chat_tokenizer(path: str | Path) -> Any:
    """A ChatTokenizer for a local tokenizer folder; transformers' AutoTokenizer where the folder has no
    tokenizer.json or `path` is not a folder (a Hub id)."""
    folder = Path(path)
    if not (folder / "tokenizer.json").is_file():
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(str(path))
    from tritonpkg.embedding.tokenize import load_tokenizer

    config = _json(folder / "tokenizer_config.json")
    tokens = _special_tokens(config)
    for key, value in _special_tokens(_json(folder / "special_tokens_map.json")).items():
        tokens.setdefault(key, value)
    return ChatTokenizer(load_tokenizer(str(folder / "tokenizer.json")), _templates(folder, config), tokens)


def _json(path: Path) -> dict:
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path}: not readable JSON ({exc})") from None
    return data if isinstance(data, dict) else {}


def _special_tokens(config: dict) -> dict[str, str]:
    """Named tokens and model-specific `*_token` entries; a token is a string or {"content": ...}."""
    out = {}
    for key, value in config.items():
        if not (key in NAMED_TOKENS or key.endswith("_token")):
            continue
        if isinstance(value, dict):
            value = value.get("content")
        if isinstance(value, str):
            out[key] = value
    return out


def _templates(folder: Path, config: dict) -> str | dict[str, str] | None:
    files = {}
    if (folder / TEMPLATE_FILE).is_file():
        files["default"] = (folder / TEMPLATE_FILE).read_text(encoding="utf-8")
    if (folder / TEMPLATE_DIR).is_dir():
        for f in sorted((folder / TEMPLATE_DIR).glob("*.jinja")):
            files[f.stem] = f.read_text(encoding="utf-8")
    if files:
        return files["default"] if list(files) == ["default"] else files
    found = config.get("chat_template")
    if isinstance(found, list):
        return {t["name"]: t["template"] for t in found if isinstance(t, dict) and "name" in t and "template" in t}
    return found if isinstance(found, str) else None


def _template(templates: str | dict[str, str] | None, tools: list[dict] | None) -> str:
    if isinstance(templates, str):
        return templates
    if not templates:
        raise ValueError("the tokenizer has no chat template")
    if tools is not None and "tool_use" in templates:
        return templates["tool_use"]
    if "default" in templates:
        return templates["default"]
    raise ValueError(f"the tokenizer has several chat templates and none named 'default': {sorted(templates)}")


@lru_cache(maxsize=16)
def _compiled(source: str):
    import jinja2
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class Generation(jinja2.ext.Extension):
        """`{% generation %}...{% endgeneration %}` marks assistant text for training masks; rendering keeps it."""

        tags = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return jinja2.nodes.CallBlock(self.call_method("_keep"), [], [], body).set_lineno(lineno)

        def _keep(self, caller):
            return caller()

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[Generation, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env.from_string(source)
