"""Tool calling and reasoning through the OpenAI frontend, parsed by vLLM's own hermes and deepseek_r1
parsers, with the official `openai` SDK, against examples/mock-tool-llm: a deterministic Python-backend
model with the vLLM backend's I/O in the session's tritonserver (no engine). It answers with
`<think>...</think>` and one Hermes `<tool_call>` of get_weather when offered tools, with the final text
once a tool has answered."""

from __future__ import annotations

import json

import pytest

from tests.support.paths import EXAMPLES

pytestmark = pytest.mark.integration

MODEL = "mock_tool_llm"
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "unit": {"type": "string"}},
                   "required": ["city"]}}}
TIME = {"type": "function", "function": {
    "name": "get_time", "parameters": {"type": "object", "properties": {"tz": {"type": "string"}}}}}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
ARGS = {"city": "Paris", "unit": "celsius"}
REASONING = "The user asks for the weather, so I call the tool."


@pytest.fixture(scope="module")
def frontend(python_server, python_repo):
    from tritonpkg.frontend import FrontendServer, FrontendSettings

    with FrontendServer(FrontendSettings(triton_grpc_url=python_server.grpc_url, port=0, model_repository=python_repo,
                                         triton_admin_key=python_server.admin_key)) as fe:
        yield fe


@pytest.fixture(scope="module")
def client(frontend):
    import openai

    return openai.OpenAI(base_url=f"{frontend.url}/v1", api_key="unused", max_retries=0, timeout=60)


def _stream(client, **kwargs):
    """A streamed chat reassembled as a client does: content, reasoning, tool calls by index."""
    content, reasoning, calls, reasons, ids = "", "", {}, [], set()
    for chunk in client.chat.completions.create(**{"model": MODEL, "stream": True, **kwargs}):
        for choice in chunk.choices:
            delta = choice.delta
            content += delta.content or ""
            reasoning += (delta.model_extra or {}).get("reasoning_content") or ""
            for call in delta.tool_calls or []:
                slot = calls.setdefault(call.index, {"name": "", "arguments": ""})
                if call.id:
                    ids.add(call.id)
                if call.function and call.function.name:
                    slot["name"] += call.function.name
                if call.function and call.function.arguments:
                    slot["arguments"] += call.function.arguments
            if choice.finish_reason:
                reasons.append(choice.finish_reason)
    return content, reasoning, calls, reasons, ids


@pytest.mark.parametrize("choice", [None, "auto"])
def test_automatic_tool_choice_calls_the_tool(client, choice):
    extra = {} if choice is None else {"tool_choice": choice}
    answer = client.chat.completions.create(model=MODEL, messages=ASK, tools=[WEATHER, TIME], **extra)
    (only,) = answer.choices
    assert only.finish_reason == "tool_calls"
    (call,) = only.message.tool_calls
    assert call.type == "function" and call.id and call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == ARGS
    assert not only.message.content
    assert only.message.model_extra["reasoning_content"] == REASONING


def test_required_with_two_tools(client):
    answer = client.chat.completions.create(model=MODEL, messages=ASK, tools=[WEATHER, TIME], tool_choice="required")
    (call,) = answer.choices[0].message.tool_calls
    assert call.function.name == "get_weather" and json.loads(call.function.arguments) == ARGS
    assert answer.choices[0].finish_reason == "tool_calls"


def test_a_named_tool_finishes_with_stop(client):
    answer = client.chat.completions.create(model=MODEL, messages=ASK, tools=[WEATHER, TIME],
                                            tool_choice={"type": "function", "function": {"name": "get_weather"}})
    (call,) = answer.choices[0].message.tool_calls
    assert call.function.name == "get_weather" and answer.choices[0].finish_reason == "stop"


def test_the_follow_up_turn_answers_with_the_tools_result(client):
    first = client.chat.completions.create(model=MODEL, messages=ASK, tools=[WEATHER, TIME])
    call = first.choices[0].message.tool_calls[0]
    messages = [*ASK, first.choices[0].message.model_dump(exclude_none=True, include={"role", "content", "tool_calls"}),
                {"role": "tool", "tool_call_id": call.id, "content": json.dumps({"sky": "sunny", "celsius": 21})}]
    answer = client.chat.completions.create(model=MODEL, messages=messages, tools=[WEATHER, TIME])
    (only,) = answer.choices
    assert only.finish_reason == "stop" and not only.message.tool_calls
    assert only.message.content.strip() == "It is sunny in Paris, 21 °C."
    assert only.message.model_extra["reasoning_content"] == "The tool answered."


def test_tool_choice_none_leaves_the_text_unparsed(client):
    answer = client.chat.completions.create(model=MODEL, messages=ASK, tools=[WEATHER], tool_choice="none")
    assert not answer.choices[0].message.tool_calls and answer.choices[0].finish_reason == "stop"
    assert "<tool_call>" in answer.choices[0].message.content


def test_streamed_tool_call_deltas(client):
    content, reasoning, calls, reasons, ids = _stream(client, messages=ASK, tools=[WEATHER, TIME])
    assert reasons == ["tool_calls"] and len(ids) == 1
    assert list(calls) == [0] and calls[0]["name"] == "get_weather" and json.loads(calls[0]["arguments"]) == ARGS
    assert reasoning == REASONING and not content.strip()


STREAMING = "mock_tool_llm_stream"  # the same answers, one token per response (tests/support/mock_stream.py)


def test_streamed_tool_call_deltas_arrive_incrementally_as_openai_sends_them(client):
    """Text that arrives a token at a time: the first tool-call delta carries the index, id, type and
    name, the later ones argument fragments only; joined, the fragments are the non-streamed arguments."""
    whole = client.chat.completions.create(model=STREAMING, messages=ASK, tools=[WEATHER, TIME])
    (expected,) = whole.choices[0].message.tool_calls
    assert json.loads(expected.function.arguments) == ARGS and whole.choices[0].finish_reason == "tool_calls"
    calls, reasoning, reasons, content = [], [], [], ""
    for chunk in client.chat.completions.create(model=STREAMING, messages=ASK, tools=[WEATHER, TIME], stream=True):
        for choice in chunk.choices:
            content += choice.delta.content or ""
            reasoning += [r] if (r := (choice.delta.model_extra or {}).get("reasoning_content")) else []
            calls += choice.delta.tool_calls or []
            reasons += [choice.finish_reason] if choice.finish_reason else []
    assert calls, (content, reasoning, reasons)
    first, *rest = calls
    assert (first.index, first.type, first.function.name) == (0, "function", "get_weather") and first.id
    assert rest and all(c.index == 0 and c.id is None and c.function.name is None for c in rest)
    fragments = [c.function.arguments or "" for c in calls]
    assert len([f for f in fragments if f]) > 3, fragments  # the arguments stream, not one delta
    assert "".join(fragments) == expected.function.arguments
    assert len(reasoning) > 3 and "".join(reasoning) == REASONING
    assert reasons == ["tool_calls"] and not content.strip()


def test_a_streamed_answer_after_the_tool_matches_the_whole_one(client):
    messages = [*ASK, {"role": "assistant", "tool_calls": [{"id": "call_1", "type": "function", "function": {
        "name": "get_weather", "arguments": json.dumps(ARGS)}}]},
                {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 21"}]
    content, reasoning, calls, reasons, _ = _stream(client, messages=messages, tools=[WEATHER], model=STREAMING)
    assert (content.strip(), reasoning, calls, reasons) == ("It is sunny in Paris, 21 °C.", "The tool answered.", {},
                                                           ["stop"])


def test_streamed_reasoning_and_content_without_tools(client):
    content, reasoning, calls, reasons, _ = _stream(client, messages=[{"role": "user", "content": "hi"}])
    assert (content.strip(), reasoning, calls, reasons) == ("Hello! How can I help?", "A greeting.", {}, ["stop"])


def test_reasoning_in_a_plain_answer(client):
    answer = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}])
    message = answer.choices[0].message
    assert message.content.strip() == "Hello! How can I help?"
    assert message.model_extra["reasoning_content"] == message.model_extra["reasoning"] == "A greeting."


def test_the_chat_template_receives_the_tools(client, frontend):
    """The prompt the model saw offered the tools: the mock answers with a call only when it did."""
    answer = client.chat.completions.create(model=MODEL, messages=ASK)
    assert answer.choices[0].message.content.strip() == "Hello! How can I help?"


def test_spec_parsers_are_recorded_in_the_lock(python_repo):
    lock = json.loads((python_repo / "tritonpkg.lock.json").read_text())
    serving = lock["models"][MODEL]["versions"]["1"]["serving"]
    assert serving == {"execution_mode": "embedded", "openai": True,
                       "openai_parsers": {"tool_call_parser": "hermes", "reasoning_parser": "deepseek_r1"}}
    assert (EXAMPLES / "mock-tool-llm" / "tritonpkg.yaml").is_file()


def test_a_langchain_bind_tools_agent_loop_of_two_turns(frontend):
    """LangChain's ChatOpenAI with bind_tools (automatic tool choice): the call, the tool's answer, the reply."""
    from langchain_core.messages import HumanMessage, ToolMessage
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI

    @tool
    def get_weather(city: str, unit: str = "celsius") -> str:
        """The weather in a city."""
        return json.dumps({"city": city, "sky": "sunny", "celsius": 21})

    llm = ChatOpenAI(model=MODEL, base_url=f"{frontend.url}/v1", api_key="unused", max_retries=0, timeout=60)
    agent = llm.bind_tools([get_weather])
    messages = [HumanMessage("What is the weather in Paris?")]
    first = agent.invoke(messages)
    (call,) = first.tool_calls
    assert call["name"] == "get_weather" and call["args"] == ARGS
    messages += [first, ToolMessage(get_weather.invoke(call["args"]), tool_call_id=call["id"])]
    final = agent.invoke(messages)
    assert not final.tool_calls and final.content.strip() == "It is sunny in Paris, 21 °C."
    streamed = list(agent.stream(messages[:1]))  # the streamed first turn: the same call, assembled by LangChain
    merged = streamed[0]
    for chunk in streamed[1:]:
        merged += chunk
    assert [(c["name"], c["args"]) for c in merged.tool_calls] == [("get_weather", ARGS)]


def test_retrieve_a_model_and_the_list_carries_vllms_card_fields(frontend, client):
    card = client.models.retrieve(MODEL)
    assert (card.id, card.object, card.model_extra["root"], card.model_extra["parent"]) == (MODEL, "model", MODEL, None)
    assert "max_model_len" in card.model_extra  # null: a Python-backend model declares no context
    listed = {m.id: m.model_extra for m in client.models.list().data}
    assert listed[MODEL] == card.model_extra
    import openai

    with pytest.raises(openai.NotFoundError) as info:
        client.models.retrieve("no_such_model")
    assert info.value.body["code"] == "model_not_found" and info.value.body["param"] == "model"


def test_fields_that_do_not_change_the_output_are_accepted(client):
    answer = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}], store=False,
                                            metadata={"team": "a"}, user="u-1", max_tokens=50,
                                            max_completion_tokens=40)
    assert answer.choices[0].message.content.strip() == "Hello! How can I help?"


def test_reasoning_effort_is_refused_when_the_chat_template_ignores_it(client):
    import openai

    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}],
                                       reasoning_effort="low")
    assert info.value.body["param"] == "reasoning_effort"


PYTHONIC, PLAIN = "mock_pythonic_llm", "mock_plain_llm"  # pythonic answers: vLLM's pythonic parser, no parser
NAMED = {"type": "function", "function": {"name": "get_weather"}}
TOOL_CHOICES = {"auto": "auto", "required": "required", "named": NAMED, "none": "none"}
PYTHONIC_CALL = '[get_weather(city="Paris", unit="celsius")]'


def _raw(frontend, body: dict) -> dict | list[dict]:
    """The frontend's answer as sent: a body, or a stream's chunks ([DONE] checked and dropped)."""
    import urllib.request

    request = urllib.request.Request(f"{frontend.url}/v1/chat/completions", json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        raw = response.read().decode()
    if not body.get("stream"):
        return json.loads(raw)
    events = [line[6:] for line in raw.splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]", events[-3:]
    return [json.loads(event) for event in events[:-1]]


def _joined(chunks: list[dict]) -> dict:
    """A stream's choice 0 joined as the non-streamed message: content, tool calls by index, finish_reason."""
    content, calls, reasons = "", {}, []
    for chunk in chunks:
        for choice in chunk["choices"]:
            content += choice["delta"].get("content") or ""
            for call in choice["delta"].get("tool_calls") or []:
                slot = calls.setdefault(call["index"], {"name": "", "arguments": ""})
                slot["name"] += (call.get("function") or {}).get("name") or ""
                slot["arguments"] += (call.get("function") or {}).get("arguments") or ""
            reasons += [choice["finish_reason"]] if choice["finish_reason"] else []
    return {"content": content, "tool_calls": [calls[i] for i in sorted(calls)], "finish_reasons": reasons}


def _message(body: dict) -> dict:
    (choice,) = body["choices"]
    calls = [{"name": c["function"]["name"], "arguments": c["function"]["arguments"]}
             for c in choice["message"].get("tool_calls") or []]
    return {"content": choice["message"]["content"] or "", "tool_calls": calls,
            "finish_reasons": [choice["finish_reason"]]}


# (model, tool_choice) -> (content, calls, finish_reason) as vLLM's server answers it
EXPECTED = {
    (PYTHONIC, "auto"): ("", [("get_weather", ARGS)], "tool_calls"),
    (PYTHONIC, "required"): ("", [("get_weather", ARGS)], "tool_calls"),
    (PYTHONIC, "named"): ("", [("get_weather", ARGS)], "stop"),
    (PYTHONIC, "none"): (PYTHONIC_CALL, [], "stop"),
    (STREAMING, "auto"): ("", [("get_weather", ARGS)], "tool_calls"),
    (STREAMING, "required"): ("", [("get_weather", ARGS)], "tool_calls"),
    (STREAMING, "named"): ("", [("get_weather", ARGS)], "stop"),
    (PLAIN, "required"): ("", [("get_weather", ARGS)], "tool_calls"),
    (PLAIN, "named"): ("", [("get_weather", ARGS)], "stop"),
    (PLAIN, "none"): ("Hello! How can I help?", [], "stop"),
}


@pytest.mark.parametrize(("model", "choice"), sorted(EXPECTED), ids=[f"{m}-{c}" for m, c in sorted(EXPECTED)])
def test_streamed_and_whole_answers_give_the_same_calls_for_every_tool_choice(frontend, model, choice):
    """With vLLM's pythonic parser (no reasoning parser), with hermes + deepseek_r1, and with no parser: the
    stream joins to the non-streamed answer, which is vLLM's (a forced choice's content is "", not null)."""
    tools = [WEATHER] if model == PLAIN and choice == "required" else [WEATHER, TIME]
    body = {"model": model, "messages": ASK, "tools": tools, "tool_choice": TOOL_CHOICES[choice]}
    whole = _raw(frontend, body)
    streamed = _joined(_raw(frontend, {**body, "stream": True}))
    content, calls, reason = EXPECTED[model, choice]
    message = whole["choices"][0]["message"]
    assert message["content"] == (None if choice == "auto" else content)
    got = _message(whole)
    assert [(c["name"], json.loads(c["arguments"])) for c in got["tool_calls"]] == calls
    assert got["finish_reasons"] == [reason]
    assert streamed["content"].strip() == content.strip() == got["content"].strip()
    assert streamed["tool_calls"] == got["tool_calls"], (streamed, got)
    assert streamed["finish_reasons"] == got["finish_reasons"]


@pytest.mark.parametrize("choice", ["named", "required"])
@pytest.mark.parametrize("model", [PYTHONIC, PLAIN])
def test_a_streamed_forced_call_has_the_chunk_structure_vllm_sends(frontend, model, choice):
    """The role chunk (content ""), then tool-call deltas only: the first with index, id, type and the name, the
    later ones argument fragments that join to the non-streamed arguments; no content delta."""
    tools = [WEATHER] if model == PLAIN else [WEATHER, TIME]
    body = {"model": model, "messages": ASK, "tools": tools, "tool_choice": TOOL_CHOICES[choice]}
    (expected,) = _raw(frontend, body)["choices"][0]["message"]["tool_calls"]
    chunks = _raw(frontend, {**body, "stream": True})
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    assert deltas[0] == {"role": "assistant", "content": ""}
    calls = [call for d in deltas[1:] for call in d.get("tool_calls") or []]
    assert all(set(d) <= {"tool_calls"} for d in deltas[1:]), deltas
    first, *rest = calls
    assert set(first) == {"index", "id", "type", "function"} and first["id"]
    assert (first["index"], first["type"], first["function"]["name"]) == (0, "function", "get_weather")
    assert rest and all(set(c) == {"index", "function"} and c["index"] == 0 and not c["function"].get("name")
                        for c in rest), rest
    fragments = [c["function"]["arguments"] for c in calls]
    assert len([f for f in fragments if f]) > 3, fragments  # the arguments stream, not one delta
    assert "".join(fragments) == expected["function"]["arguments"]
    assert json.loads("".join(fragments)) == ARGS
    assert chunks[-1]["choices"][0]["finish_reason"] == ("stop" if choice == "named" else "tool_calls")
