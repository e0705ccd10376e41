"""A deterministic stand-in for an LLM behind the vLLM backend's I/O (text_input, stream,
sampling_parameters, exclude_input_in_output -> text_output, finish_reason), as NVIDIA's `mock_llm`
test model is: it answers in the Hermes / Qwen format a tool-call and a reasoning parser read, so the
OpenAI frontend's tool calling and reasoning can be tested without an engine.

- a prompt with a tool's answer (`<tool_response>`): reasoning, then the final text;
- a prompt that offers tools (`<tools>`): reasoning, then one `<tool_call>` of get_weather;
- anything else: reasoning, then a greeting."""

import numpy as np

THINK_TOOL = "<think>The user asks for the weather, so I call the tool.</think>\n"
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}\n</tool_call>'
AFTER_TOOL = "<think>The tool answered.</think>\nIt is sunny in Paris, 21 °C."
GREETING = "<think>A greeting.</think>\nHello! How can I help?"


def answer(prompt: str) -> str:
    if "<tool_response>" in prompt:
        return AFTER_TOOL
    if "<tools>" in prompt:
        return THINK_TOOL + CALL
    return GREETING


def model(inputs):
    prompt = inputs["text_input"].reshape(-1)[0]
    prompt = prompt.decode("utf-8") if isinstance(prompt, bytes) else str(prompt)
    return {"text_output": np.array([answer(prompt).encode("utf-8")], dtype=object),
            "finish_reason": np.array([b"stop"], dtype=object)}
