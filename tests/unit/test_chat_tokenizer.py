"""The frontend's tokenizer (tokenizers + jinja2) against transformers' AutoTokenizer on the same folders:
the same prompt text from every chat template and the same token ids, so dropping transformers from the
frontend changes no prompt a model sees."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import jinja2
import pytest

from tritonpkg.frontend.chat_tokenizer import ChatTokenizer, load_chat_tokenizer

TINY = Path(__file__).resolve().parents[2] / "examples" / "tiny-llm" / "tokenizer"

# Written for these tests: each exercises one rule transformers applies to chat templates.
FEATURES = (
    "{{ bos_token }}{% for m in messages %}"
    "{% if m['role'] not in ('system', 'user', 'assistant', 'tool') %}"
    "{{ raise_exception('bad role ' + m['role']) }}{% endif %}"
    "{% if m['role'] == 'system' and loop.index0 > 0 %}{% continue %}{% endif %}"
    "<|{{ m['role'] }}|>\n"
    "  {% if m['content'] is string %}{{ m['content'] | trim }}{% endif %}\n"
    "{% if m.get('tool_calls') %}{% for c in m['tool_calls'] %}{{ c['function'] | tojson }}\n{% endfor %}{% endif %}"
    "{% if m['role'] == 'assistant' %}{% generation %}{{ m['content'] }}{% endgeneration %}{% endif %}"
    "{{ eos_token }}\n"
    "{% if loop.index > 6 %}{% break %}{% endif %}"
    "{% endfor %}"
    "{% if tools %}<|tools|>{{ tools | tojson(indent=2) }}\n{% endif %}"
    "{% if image_token is defined %}[{{ image_token }}]{% endif %}"
    "{{ strftime_now('%Y') }}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
TOOL_USE = ("{% for t in tools %}TOOL {{ t['function']['name'] }}\n{% endfor %}"
            "{% for m in messages %}{{ m['content'] }}\n{% endfor %}")
PLAIN = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"

TOOLS = [{"type": "function", "function": {"name": "weather", "description": "Wetter <b>heute</b> & morgen — °C",
                                           "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                          "required": ["city"]}}}]
CHATS = [
    [{"role": "user", "content": "hello"}],
    [{"role": "system", "content": "  be brief  "}, {"role": "user", "content": "Grüße, <tag> & \"quotes\""},
     {"role": "assistant", "content": "ok"}, {"role": "system", "content": "second system is skipped"},
     {"role": "user", "content": "again"}],
    [{"role": "user", "content": "weather in Zürich?"},
     {"role": "assistant", "content": None, "tool_calls": [
         {"id": "c1", "type": "function", "function": {"name": "weather", "arguments": "{\"city\": \"Zürich\"}"}}]},
     {"role": "tool", "content": "12 °C", "tool_call_id": "c1"}],
    [{"role": "user", "content": str(i)} for i in range(10)],
]


def _folder(tmp_path: Path, name: str, config_update: dict | None = None, files: dict[str, str] | None = None,
            bos_post_processor: bool = False) -> Path:
    folder = tmp_path / name
    shutil.copytree(TINY, folder)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config.update(config_update or {})
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    for rel, text in (files or {}).items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text(text)
    if bos_post_processor:
        tok = json.loads((folder / "tokenizer.json").read_text())
        tok["post_processor"] = {"type": "TemplateProcessing",
                                 "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                                            {"Sequence": {"id": "A", "type_id": 0}}],
                                 "pair": [{"Sequence": {"id": "A", "type_id": 0}},
                                          {"Sequence": {"id": "B", "type_id": 1}}],
                                 "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}}
        (folder / "tokenizer.json").write_text(json.dumps(tok))
    return folder


def _both(folder: Path):
    from transformers import AutoTokenizer

    ours = load_chat_tokenizer(folder)
    assert isinstance(ours, ChatTokenizer)
    return ours, AutoTokenizer.from_pretrained(str(folder))


def _render(tok, chat, tools=None, gen=True):
    return tok.apply_chat_template(chat, tools=tools, add_generation_prompt=gen, tokenize=False)


@pytest.mark.parametrize("variant", ["config", "jinja-file", "named-list", "template-dir"])
def test_prompts_equal_transformers(tmp_path, variant):
    folder = {
        "config": lambda: _folder(tmp_path, variant, {"chat_template": FEATURES, "image_token": "<image>"}),
        "jinja-file": lambda: _folder(tmp_path, variant, {"chat_template": PLAIN}, {"chat_template.jinja": FEATURES}),
        "named-list": lambda: _folder(tmp_path, variant, {"chat_template": [
            {"name": "default", "template": FEATURES}, {"name": "tool_use", "template": TOOL_USE}]}),
        "template-dir": lambda: _folder(tmp_path, variant, {"chat_template": PLAIN}, {
            "chat_template.jinja": FEATURES, "additional_chat_templates/tool_use.jinja": TOOL_USE}),
    }[variant]()
    ours, theirs = _both(folder)
    compared = 0
    for chat in CHATS:
        for tools in (None, TOOLS):
            for gen in (True, False):
                expected = _render(theirs, chat, tools, gen)
                assert _render(ours, chat, tools, gen) == expected
                compared += 1
    assert compared == 16
    if variant in ("named-list", "template-dir"):  # with tools the tool_use template, else the default
        assert _render(ours, CHATS[0], TOOLS).startswith("TOOL weather")
        assert _render(ours, CHATS[0]).startswith("<s><|user|>")


def test_the_examples_own_template_and_token_counts_equal_transformers():
    ours, theirs = _both(TINY)
    for chat in CHATS:
        assert _render(ours, chat) == _render(theirs, chat)
    texts = ["hello world", "Grüße aus Zürich — 12 °C", "<s>special</s> tokens <pad> inline", " leading space", ""]
    for text in texts:
        assert ours.encode(text) == theirs.encode(text)
        assert ours.encode(text, add_special_tokens=False) == theirs.encode(text, add_special_tokens=False)
    assert (ours.bos_token, ours.bos_token_id) == (theirs.bos_token, theirs.bos_token_id)


def test_a_post_processor_that_adds_bos_is_seen_by_both(tmp_path):
    ours, theirs = _both(_folder(tmp_path, "bos", bos_post_processor=True))
    assert ours.encode("a")[:1] == theirs.encode("a")[:1] == [ours.bos_token_id] == [1]
    assert ours.encode("a", add_special_tokens=False) == theirs.encode("a", add_special_tokens=False)


def test_a_template_error_is_raised_like_transformers(tmp_path):
    ours, theirs = _both(_folder(tmp_path, "err", {"chat_template": FEATURES}))
    bad = [{"role": "wizard", "content": "x"}]
    with pytest.raises(jinja2.TemplateError, match="bad role wizard"):
        _render(theirs, bad)
    with pytest.raises(jinja2.TemplateError, match="bad role wizard"):
        _render(ours, bad)


def test_the_sandbox_refuses_what_transformers_refuses(tmp_path):
    escape = "{{ messages.__class__.__mro__[1].__subclasses__() }}"
    ours, theirs = _both(_folder(tmp_path, "sandbox", {"chat_template": escape}))
    with pytest.raises(jinja2.exceptions.SecurityError):
        _render(theirs, CHATS[0])
    with pytest.raises(jinja2.exceptions.SecurityError):
        _render(ours, CHATS[0])


def test_several_templates_without_default_name_the_choices(tmp_path):
    ours = load_chat_tokenizer(_folder(tmp_path, "nodefault", {"chat_template": [
        {"name": "rag", "template": PLAIN}, {"name": "tool_use", "template": TOOL_USE}]}))
    with pytest.raises(ValueError, match=r"none named 'default': \['rag', 'tool_use'\]"):
        _render(ours, CHATS[0])
    assert _render(ours, CHATS[0], TOOLS).startswith("TOOL weather")


def test_loading_and_rendering_import_neither_transformers_nor_torch():
    code = ("import sys; from tritonpkg.frontend.chat_tokenizer import load_chat_tokenizer; "
            f"t = load_chat_tokenizer({str(TINY)!r}); "
            "p = t.apply_chat_template([{'role': 'user', 'content': 'hi'}], add_generation_prompt=True); "
            "print(len(t.encode(p)), sorted(m for m in ('transformers', 'torch', 'sklearn') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert int(out[0]) > 3 and out[1:] == ["[]"]
