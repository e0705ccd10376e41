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

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=False)

    def count(self, text: str, add_special_tokens: bool = True) -> int:
        """len(encode(text)), for a worker thread: `encode` holds the GIL throughout (a 2 MB prompt stalled the
        event loop 4-5 s here), the batch call releases it, and the fast one skips the offsets (half the time)."""
        batch = getattr(self.tokenizer, "encode_batch_fast", None) or self.tokenizer.encode_batch
        return len(batch([text], add_special_tokens=add_special_tokens)[0])

    def apply_chat_template(self, messages: list[dict], tools: list[dict] | None = None,
                            add_generation_prompt: bool = False, tokenize: bool = False, **kwargs: Any) -> str:
        """The prompt text (`tokenize` must stay False: callers count tokens with `encode`); `kwargs` are
        template variables, as transformers passes them (vLLM's reasoning_effort)."""
        if tokenize:
            raise ValueError("ChatTokenizer renders text only; encode() the result")
        template = _template(self.chat_template, tools)
        return _compiled(template).render(**{**self.special_tokens, **kwargs}, messages=messages, tools=tools,
                                          documents=None, add_generation_prompt=add_generation_prompt)


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


# How many input bytes a normalizer may fold into one byte of what the model sees: composition (NFC),
# compatibility forms (NFKC: a 3-byte fullwidth letter -> 1 byte) and case (the 3-byte Kelvin sign -> 'k').
_FOLDING = {"NFC": 3, "NFD": 3, "NFKC": 3, "NFKD": 3, "Lowercase": 3, "Prepend": 1}
# Pre-tokenizers that keep every byte (whitespace splitters drop what they split on).
_KEEPING = {"ByteLevel", "Metaspace", "Digits", "Punctuation", "UnicodeScripts", "Split"}


def bytes_per_token(tokenizer: Any) -> int | None:
    """The most prompt bytes (UTF-8) one token can stand for, so that a prompt of more than
    max_model_len times this many bytes cannot fit the context however it tokenizes; None where no such
    bound holds (an unknown token that swallows a whole word, a normalizer or pre-tokenizer that deletes
    text, an added token that strips whitespace, or a tokenizer this module did not load)."""
    inner = getattr(tokenizer, "tokenizer", None) if isinstance(tokenizer, ChatTokenizer) else None
    if inner is None:
        return None
    spec = json.loads(inner.to_str())
    model = spec.get("model") or {}
    fused_unknowns = model.get("unk_token") and model.get("fuse_unk") and not model.get("byte_fallback")
    if model.get("type") != "BPE" or fused_unknowns:
        return None  # WordPiece/WordLevel/Unigram unknowns and fused BPE unknowns cover any length of text
    if any(t.get("lstrip") or t.get("rstrip") for t in spec.get("added_tokens") or []):
        return None
    folding = _normalizer_folding(spec.get("normalizer"))
    if folding is None or not _keeps_bytes(spec.get("pre_tokenizer")):
        return None
    longest = max((len(token.encode("utf-8")) for token in inner.get_vocab(with_added_tokens=True)), default=1)
    return max(longest, 4) * folding  # an unknown character (BPE without fusing) is one token of <= 4 bytes


def _normalizer_folding(normalizer: dict | None) -> int | None:
    if not normalizer:
        return 1
    kind = normalizer.get("type")
    if kind == "Sequence":
        total = 1
        for part in normalizer.get("normalizers") or []:
            factor = _normalizer_folding(part)
            if factor is None:
                return None
            total *= factor
        return total
    if kind == "Replace":
        pattern, content = normalizer.get("pattern") or {}, normalizer.get("content") or ""
        if "String" not in pattern or not content:
            return None  # a regex, or a replacement that deletes
        return max(1, -(-len(pattern["String"].encode()) // len(content.encode())))
    return _FOLDING.get(kind) if isinstance(kind, str) else None


def _keeps_bytes(pre: dict | None) -> bool:
    if not pre:
        return True
    if pre.get("type") == "Sequence":
        return all(_keeps_bytes(p) for p in pre.get("pretokenizers") or [])
    if pre.get("type") == "Split":
        return str(pre.get("behavior", "")).lower() != "removed"
    return pre.get("type") in _KEEPING


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
        token = value.get("content") if isinstance(value, dict) else value
        if isinstance(token, str):
            out[key] = token
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

        tags = {"generation"}  # noqa: RUF012  jinja2's Extension declares `tags` as a plain attribute

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
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)  # noqa: DTZ005  templates get the local date, as in transformers
    return env.from_string(source)
