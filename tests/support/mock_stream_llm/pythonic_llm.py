"""The answers a model in the pythonic tool-call format (Llama 3.2, ToolACE) gives, deterministic, for the
streaming mock (model.py): what its constraint asks for when the request sets one, as a constrained engine
would produce it, else what its prompt asks for.

- a JSON schema of an array (vLLM's constraint for `tool_choice: required`): the array of calls;
- a JSON schema of an object (a named tool: vLLM's constraint with a parser, the frontend's without): the
  arguments;
- a prompt with a tool's answer (`<tool_response>`): the final text;
- a prompt that offers tools (`<tools>`): one pythonic call of get_weather;
- anything else: a greeting."""

import json

ARGS = {"city": "Paris", "unit": "celsius"}
CALL = '[get_weather(city="Paris", unit="celsius")]'
AFTER_TOOL = "It is sunny in Paris, 21 °C."
GREETING = "Hello! How can I help?"


def constraint(params):
    """The JSON schema the request constrains its output to, if any."""
    schema = (params.get("structured_outputs") or {}).get("json") or params.get("guided_json")
    return json.loads(schema) if isinstance(schema, str) else schema


def answer(prompt, params):
    schema = constraint(params)
    if isinstance(schema, dict) and schema.get("type") == "array":
        return json.dumps([{"name": "get_weather", "parameters": ARGS}])
    if isinstance(schema, dict):
        return json.dumps(ARGS)
    if "<tool_response>" in prompt:
        return AFTER_TOOL
    if "<tools>" in prompt:
        return CALL
    return GREETING
