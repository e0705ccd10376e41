"""Every JSON-schema constraint the frontend sends lets no unescaped control character into a string:
response_format, guided_json (a dict or its JSON text), structured_outputs.json, a forced tool's
parameters, and the schema vLLM's own tool parser builds for `required` and named tool choices."""

from __future__ import annotations

import json

import pytest

from tests.support.paths import EXAMPLES
from tritonpkg.frontend.mapping import NO_CONTROL, chat_plan, completion_plan, strict_json_strings
from tritonpkg.frontend.protocol import ChatCompletionRequest, CompletionRequest

NAME = {"type": "string", "maxLength": 12}
PARAMS = {"type": "object", "properties": {"name": NAME, "tags": {"type": "array", "items": {
    "type": "string", "minLength": 1, "maxLength": 6}}}, "required": ["name"]}
TOOLS = [{"type": "function", "function": {"name": "set_name", "parameters": PARAMS}},
         {"type": "function", "function": {"name": "other", "parameters": {"type": "object"}}}]
USER = [{"role": "user", "content": "x"}]


def bounded_strings(schema) -> list[dict]:
    """Every string schema with a length bound and no pattern, wherever it sits."""
    found = []
    if isinstance(schema, dict):
        if schema.get("type") == "string" and ("maxLength" in schema or "minLength" in schema):
            found.append(schema)
        for value in schema.values():
            found += bounded_strings(value)
    elif isinstance(schema, list):
        for item in schema:
            found += bounded_strings(item)
    return found


def patterns(schema) -> list[str]:
    if isinstance(schema, dict):
        own = [schema["pattern"]] if "pattern" in schema else []
        return own + [p for v in schema.values() for p in patterns(v)]
    if isinstance(schema, list):
        return [p for v in schema for p in patterns(v)]
    return []


def test_bounded_strings_become_patterns_without_control_characters():
    out = strict_json_strings(PARAMS)
    assert not bounded_strings(out)
    assert patterns(out) == [f"^{NO_CONTROL}{{0,12}}$", f"^{NO_CONTROL}{{1,6}}$"]
    assert PARAMS["properties"]["name"] == NAME  # the caller's schema is left as it was


def test_a_schema_sent_as_json_text_is_rewritten_too():
    assert patterns(strict_json_strings(json.dumps(PARAMS))) == patterns(strict_json_strings(PARAMS))
    assert strict_json_strings("not json") == "not json"


def test_structured_outputs_json_is_strict():
    plan = completion_plan(CompletionRequest(model="m", prompt="x", structured_outputs={"json": PARAMS}))
    assert not bounded_strings(plan.params["structured_outputs"]) and len(patterns(plan.params)) == 2


@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "set_name"}}])
def test_a_forced_tool_without_a_parser_is_strict(choice):
    tools = TOOLS[:1] if choice == "required" else TOOLS
    plan = chat_plan(ChatCompletionRequest(model="m", messages=USER, tools=tools, tool_choice=choice))
    assert not bounded_strings(plan.params["guided_json"]) and len(patterns(plan.params)) == 2


@pytest.fixture(scope="module")
def hermes():
    pytest.importorskip("vllm")
    from tritonpkg.frontend.parsing import load_parsers

    return load_parsers({"tool_call_parser": "hermes"}, str(EXAMPLES / "mock-tool-llm"), "mock")


@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "set_name"}}, "auto"])
def test_the_constraint_vllms_tool_parser_builds_is_strict(hermes, choice):
    """vLLM's hermes parser constrains a call with a structural tag whose tags hold each strict tool's
    parameters as a JSON schema (for required, named and auto); the frontend sends those schemas strict."""
    from tritonpkg.frontend.parsing import ChatParse

    tools = [{**TOOLS[0], "function": {**TOOLS[0]["function"], "strict": True}}, TOOLS[1]]
    body = ChatCompletionRequest(model="m", messages=USER, tools=tools, tool_choice=choice)
    plan = chat_plan(body, tool_parser=True)
    parse = ChatParse(hermes, body, 1, lambda text: [])
    parse.sampling_overrides(plan.params)
    built = json.loads(parse.request.structured_outputs.structural_tag)
    sent = json.loads(plan.params["structured_outputs"]["structural_tag"])
    assert bounded_strings(built)  # what vLLM built: maxLength strings
    assert not bounded_strings(sent) and patterns(sent) and set(patterns(sent)) == set(patterns(
        strict_json_strings(PARAMS))), sent
    assert {k: v for k, v in sent.items() if k != "format"} == {k: v for k, v in built.items() if k != "format"}


@pytest.mark.parametrize("tag", [
    {"type": "structural_tag", "format": {"type": "tag", "begin": "<a>", "end": "</a>",
                                          "content": {"type": "json_schema", "json_schema": PARAMS}}},
    # the older form vLLM 0.32 still compiles (xgrammar's StructuralTagItem): begin, schema, end, and triggers
    {"type": "structural_tag", "structures": [{"begin": "<a>", "schema": PARAMS, "end": "</a>"}], "triggers": ["<a>"]},
], ids=["format", "structures"])
@pytest.mark.parametrize("as_text", [False, True], ids=["object", "text"])
def test_a_clients_structural_tag_is_strict_in_either_form(tag, as_text):
    sent = json.dumps(tag) if as_text else tag
    plan = completion_plan(CompletionRequest(model="m", prompt="x", structured_outputs={"structural_tag": sent}))
    out = plan.params["structured_outputs"]["structural_tag"]
    out = json.loads(out) if as_text else out
    assert not bounded_strings(out) and len(patterns(out)) == 2, out
    assert bounded_strings(tag)  # the client's own object is left as it was
