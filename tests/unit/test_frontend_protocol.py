"""The OpenAI frontend's pure parts: request -> sampling_parameters, every rejected field, error
bodies and the shaping of backend outputs. No server: the app is only used for request validation,
which runs before any route touches Triton."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from tritonpkg.frontend import FrontendSettings, create_app
from tritonpkg.frontend.errors import APIError, field_path, from_triton
from tritonpkg.frontend.mapping import chat_plan, completion_plan, default_max_tokens
from tritonpkg.frontend.protocol import HARMLESS, UNSUPPORTED, ChatCompletionRequest, CompletionRequest
from tritonpkg.frontend.responses import chat_logprobs, completion_body, completion_logprobs
from tritonpkg.frontend.triton import Output, _positions

SCHEMA = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
USER = [{"role": "user", "content": "hi"}]


def completion(**fields) -> CompletionRequest:
    return CompletionRequest(**{"model": "m", "prompt": "p", **fields})


def chat(**fields) -> ChatCompletionRequest:
    return ChatCompletionRequest(**{"model": "m", "messages": USER, **fields})


def rejected(build, **fields) -> APIError:
    with pytest.raises(APIError) as info:
        build(**fields)
    assert info.value.status == 400
    return info.value


def test_openai_fields_map_onto_sampling_parameters():
    plan = completion_plan(completion(
        max_tokens=7, temperature=0.5, top_p=0.9, stop=["\n"], seed=3, presence_penalty=0.1,
        frequency_penalty=-0.2, logit_bias={"5": -100, "7": 2.5}, top_k=4, min_p=0.1, repetition_penalty=1.1,
        min_tokens=1, ignore_eos=True, stop_token_ids=[2], vllm_xargs={"constraint": "x"}, logprobs=2))
    assert plan.params == {
        "max_tokens": 7, "temperature": 0.5, "top_p": 0.9, "stop": ["\n"], "seed": 3, "presence_penalty": 0.1,
        "frequency_penalty": -0.2, "logit_bias": {"5": -100, "7": 2.5}, "top_k": 4, "min_p": 0.1,
        "repetition_penalty": 1.1, "min_tokens": 1, "ignore_eos": True, "stop_token_ids": [2], "n": 1,
        "vllm_xargs": {"constraint": "x"}, "logprobs": 2,
    }
    assert plan.prompts == ["p"] and plan.logprobs == 2 and not plan.stream


def test_unset_fields_are_not_sent():
    assert completion_plan(completion()).params == {"n": 1}


@pytest.mark.parametrize(("fmt", "expected"), [
    ({"type": "json_object"}, {"type": "json_object"}),
    ({"type": "json_schema", "json_schema": {"name": "s", "schema": SCHEMA, "strict": True}},
     {"type": "json_schema", "json_schema": {"name": "s", "schema": SCHEMA, "strict": True}}),
    ({"type": "text"}, {"type": "text"}),
])
def test_response_format_goes_to_the_backend_as_openai_spells_it(fmt, expected):
    assert chat_plan(chat(response_format=fmt)).params["response_format"] == expected


def test_forced_tool_becomes_a_json_schema_constraint():
    tools = [{"type": "function", "function": {"name": "f", "parameters": SCHEMA}},
             {"type": "function", "function": {"name": "g"}}]
    plan = chat_plan(chat(tools=tools, tool_choice={"type": "function", "function": {"name": "f"}}))
    assert plan.tool == "f" and plan.params["guided_json"] == SCHEMA
    assert [t["function"]["name"] for t in plan.tools] == ["f", "g"]
    plan = chat_plan(chat(tools=tools[1:], tool_choice="required"))
    assert plan.tool == "g" and plan.params["guided_json"] == {"type": "object"}
    plan = chat_plan(chat(tools=tools, tool_choice="none"))
    assert plan.tool is None and "guided_json" not in plan.params


def test_chat_token_limits_and_logprobs():
    assert chat_plan(chat(max_completion_tokens=9)).params["max_tokens"] == 9
    assert chat_plan(chat(max_tokens=9, max_completion_tokens=9)).params["max_tokens"] == 9
    assert chat_plan(chat(max_tokens=3, max_completion_tokens=4)).params["max_tokens"] == 4  # OpenAI: the latter wins
    plan = chat_plan(chat(logprobs=True, top_logprobs=3))
    assert plan.params["logprobs"] == 3 and plan.logprobs == 3
    assert chat_plan(chat(logprobs=True)).params["logprobs"] == 0
    assert "logprobs" not in chat_plan(chat()).params


@pytest.mark.parametrize(("build", "fields", "param"), [
    (completion, {"stream_options": {"include_usage": True}}, "stream_options"),
    (completion, {"logit_bias": {"abc": 1}}, "logit_bias"),
    (completion, {"logit_bias": {"3": 101}}, "logit_bias"),
    (completion, {"guided_regex": "a+", "guided_choice": ["a"]}, "guided_choice"),
    (completion, {"response_format": {"type": "json_object"}, "guided_json": SCHEMA}, "guided_json"),
    (completion, {"response_format": {"type": "json_schema"}}, "response_format.json_schema"),
    (completion, {"response_format": {"type": "text", "json_schema": {"name": "s", "schema": SCHEMA}}},
     "response_format.json_schema"),
    (chat, {"top_logprobs": 2}, "top_logprobs"),
    (chat, {"tools": [{"type": "function", "function": {"name": "f"}}]}, "tools"),
    (chat, {"tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": "auto"}, "tool_choice"),
    (chat, {"tool_choice": "required"}, "tool_choice"),
    (chat, {"tools": [{"type": "function", "function": {"name": "f"}}, {"type": "function", "function": {"name": "g"}}],
            "tool_choice": "required"}, "tool_choice"),
    (chat, {"tools": [{"type": "function", "function": {"name": "f"}}],
            "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice"),
    (chat, {"tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": "required",
            "response_format": {"type": "json_object"}}, "response_format"),
])
def test_fields_the_backend_cannot_honour_are_rejected_by_name(build, fields, param):
    plan = completion_plan if build is completion else chat_plan
    error = rejected(lambda **f: plan(build(**f)), **fields)
    assert error.param == param, error.message
    assert error.body()["error"]["type"] == "invalid_request_error"


UNSUPPORTED_VALUES = {"suffix": "s", "best_of": 2, "functions": [{"name": "f"}], "function_call": "auto",
                      "audio": {"voice": "x"}, "modalities": ["text", "audio"], "prediction": {"type": "content"},
                      "store": True, "metadata": {"a": "b"}, "service_tier": "flex", "reasoning_effort": "low",
                      "web_search_options": {}}


@pytest.mark.parametrize(("cls", "name"), [(cls, name) for cls, table in UNSUPPORTED.items() for name in table])
def test_every_known_unsupported_openai_field_is_a_400_naming_it(cls, name):
    build, plan = (completion, completion_plan) if cls is CompletionRequest else (chat, chat_plan)
    error = rejected(lambda **f: plan(build(**f)), **{name: UNSUPPORTED_VALUES[name]})
    assert error.param == name and "not supported" in error.message
    for harmless in HARMLESS.get(name, ()):  # OpenAI's defaults ask for nothing and pass
        plan(build(**{name: harmless}))


@pytest.fixture(scope="module")
def client():
    return TestClient(create_app(FrontendSettings(triton_grpc_url="127.0.0.1:1")), raise_server_exceptions=False)


@pytest.mark.parametrize(("route", "body", "param"), [
    ("/v1/completions", {"model": "m", "prompt": "p", "temprature": 0}, "temprature"),
    ("/v1/completions", {"model": "m", "prompt": [1, "a"]}, "prompt"),
    ("/v1/completions", {"model": "m", "prompt": [[1, 2], []]}, "prompt.1"),
    ("/v1/completions", {"model": "m", "prompt": "p", "temperature": -1}, "temperature"),
    ("/v1/chat/completions", {"model": "m", "messages": USER, "response_format": {"type": "json_schema",
                              "json_schema": {"name": "s", "schema": SCHEMA, "x": 1}}},
     "response_format.json_schema.x"),
    ("/v1/chat/completions", {"model": "m", "messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "http://x"}}]}]}, "messages.0.content"),
    ("/v1/chat/completions", {"model": "m", "messages": []}, "messages"),
    ("/v1/chat/completions", {"model": "m", "messages": USER, "stream_options": {"continuous_usage_stats": True}},
     "stream_options.continuous_usage_stats"),
    ("/v1/embeddings", {"model": "m", "input": "x", "encoding_format": "int8"}, "encoding_format"),
    ("/v1/embeddings", {"model": "m", "input": [[1, 2], "a"]}, "input"),
    ("/v1/embeddings", {"model": "m", "input": [[1, 2], [-3]]}, "input.1"),
])
def test_request_validation_is_a_400_in_openai_shape(client, route, body, param):
    response = client.post(route, json=body)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == param and error["type"] == "invalid_request_error"
    assert param.split(".")[-1].split("[")[0] in error["message"]


def test_a_body_that_is_not_json_is_a_400(client):
    response = client.post("/v1/completions", content=b"{not json", headers={"content-type": "application/json"})
    assert response.status_code == 400 and "JSON" in response.json()["error"]["message"]


def test_field_path_drops_union_branch_tags():
    assert field_path(("body", "messages", 0, "content", "list[TextPart]", 0, "type")) == "messages.0.content.0.type"


@pytest.mark.parametrize(("message", "status"), [
    ("Request for unknown model: 'x' is not found", 404),
    ("[vllm] unknown sampling parameter(s) 'bogus'", 400),
    ("[vllm] vLLM rejected the request: prompt too long", 400),
    ("[vllm] model 'm' is not ready: the vLLM engine died (EngineDeadError)", 503),
    ("[vllm] vLLM failed the request: RuntimeError: boom", 500),
    ("in ensemble 'e', something odd", 500),
])
def test_triton_errors_map_to_statuses(message, status):
    assert from_triton(message).status == status


BACKEND_LOGPROBS = json.dumps([
    {"9": {"logprob": -3.0, "rank": 7, "decoded_token": " b"}, "4": {"logprob": -0.5, "rank": 1, "decoded_token": " a"},
     "5": {"logprob": -1.0, "rank": 2, "decoded_token": " c"}},
    {"4": {"logprob": None, "rank": 1, "decoded_token": " a"},
     "5": {"logprob": -2.0, "rank": 2, "decoded_token": " c"}},
])


def test_logprobs_take_the_sampled_token_first_and_the_top_k_by_rank():
    positions = _positions(BACKEND_LOGPROBS)
    content = chat_logprobs(positions, 2)["content"]
    assert [c["token"] for c in content] == [" b", " a"]
    assert content[0]["logprob"] == -3.0 and content[0]["bytes"] == [32, 98]
    assert [t["token"] for t in content[0]["top_logprobs"]] == [" a", " c"]
    assert content[1]["logprob"] == -9999.0  # -inf in the backend
    assert chat_logprobs(positions, 0)["content"][0]["top_logprobs"] == []
    legacy = completion_logprobs(positions, 1, offset=5)
    assert legacy["tokens"] == [" b", " a"] and legacy["text_offset"] == [5, 7]
    # the sampled token and the top k: k+1 entries when it is not among them (OpenAI, vLLM)
    assert legacy["top_logprobs"] == [{" b": -3.0, " a": -0.5}, {" a": -9999.0}]
    assert completion_logprobs(positions, 0)["top_logprobs"] == [{" b": -3.0}, {" a": -9999.0}]  # was [{}, {}]


def _partial_utf8_outputs():
    """'中' is three byte-level tokens; vLLM's logprobs decode each alone ('\ufffd', one character), its
    streamed text holds them back until the character is whole."""
    def pos(tid, token):
        return json.dumps([{str(tid): {"logprob": -0.1, "rank": 1, "decoded_token": token}}])

    steps = [("a", "a", 5), ("", "\ufffd", 163), ("", "\ufffd", 119), ("中", "\ufffd", 258), ("b", "b", 6)]
    streamed = [Output(texts=[text], finish_reasons=["length" if i == len(steps) - 1 else None], prompt_tokens=1,
                       completion_tokens=[1], logprobs=[_positions(pos(tid, token))])
                for i, (text, token, tid) in enumerate(steps)]
    whole = Output(texts=["a中b"], finish_reasons=["length"], prompt_tokens=1, completion_tokens=[5],
                   logprobs=[[p for o in streamed for p in o.logprobs[0]]])
    return streamed, whole


def test_streamed_text_offsets_are_the_non_streamed_ones():
    import asyncio

    from tritonpkg.frontend.streaming import completion_events

    streamed, whole = _partial_utf8_outputs()
    expected = completion_body("c", 1, "m", ["p"], [whole], echo=False, logprobs=0)["choices"][0]["logprobs"]

    async def collect(echo):
        async def rest():
            for o in streamed[1:]:
                yield o

        plan = completion_plan(completion(stream=True, logprobs=0, echo=echo))
        offsets = []
        async for event in completion_events("c", 1, "m", plan, [(streamed[0], rest())], ["p"]):
            data = event.decode().removeprefix("data: ").strip()
            if data != "[DONE]" and json.loads(data)["choices"][0]["logprobs"]:
                offsets += json.loads(data)["choices"][0]["logprobs"]["text_offset"]
        return offsets

    assert expected["text_offset"] == [0, 1, 2, 3, 4]
    assert asyncio.run(collect(False)) == expected["text_offset"]  # was [0, 1, 1, 1, 2]


def test_completion_body_numbers_choices_across_prompts_and_sums_usage():
    out = [Output(texts=["x", "y"], finish_reasons=["length", "stop"], prompt_tokens=3, completion_tokens=[2, 1],
                  logprobs=None),
           Output(texts=["z"], finish_reasons=["length"], prompt_tokens=4, completion_tokens=[5], logprobs=None)]
    body = completion_body("cmpl-1", 1, "m", ["p", "q"], out, echo=True, logprobs=None)
    assert [(c["index"], c["text"], c["finish_reason"]) for c in body["choices"]] == [
        (0, "px", "length"), (1, "py", "stop"), (2, "qz", "length")]
    assert body["usage"] == {"prompt_tokens": 7, "completion_tokens": 8, "total_tokens": 15}


def test_an_aborted_generation_is_not_reported_as_a_normal_finish():
    out = Output(texts=["x"], finish_reasons=["abort"], prompt_tokens=1, completion_tokens=[1], logprobs=None)
    with pytest.raises(APIError) as info:
        completion_body("c", 1, "m", ["p"], [out], echo=False, logprobs=None)
    assert info.value.status == 503


def test_default_max_tokens_is_the_context_left():
    assert default_max_tokens(256, 20, "prompt") == 236
    assert default_max_tokens(None, 20, "prompt") is None
    with pytest.raises(APIError) as info:
        default_max_tokens(16, 16, "messages")
    assert info.value.param == "messages"


def test_requests_carry_raw_tensors_and_ask_for_the_final_flag():
    from tritonclient.utils import deserialize_bytes_tensor

    from tritonpkg.frontend.triton import build_request

    request = build_request("m", "fe-7",
                            [("text_input", "héllo"), ("stream", True), ("exclude_input_in_output", False)])
    assert request.model_name == "m" and request.id == "fe-7"
    assert [(t.name, t.datatype, list(t.shape)) for t in request.inputs] == [
        ("text_input", "BYTES", [1]), ("stream", "BOOL", [1]), ("exclude_input_in_output", "BOOL", [1])]
    assert deserialize_bytes_tensor(request.raw_input_contents[0])[0] == "héllo".encode()
    assert list(request.raw_input_contents[1:]) == [b"\x01", b"\x00"]
    assert request.parameters["triton_enable_empty_final_response"].bool_param
    documents = build_request("s", "fe-8", [("QUERY", "q"), ("DOCUMENTS", ["één", "", "three"])])
    assert [(t.name, list(t.shape)) for t in documents.inputs] == [("QUERY", [1]), ("DOCUMENTS", [3])]
    assert list(deserialize_bytes_tensor(documents.raw_input_contents[1])) == ["één".encode(), b"", b"three"]


def test_rerank_results_come_best_first_cut_to_top_n_and_keep_document_indices():
    from tritonpkg.frontend.responses import rerank_body

    docs = ["a", "b", "c", "d"]
    body = rerank_body("m", docs, [0.1, 0.9, 0.5, 0.9], 40, 3, True)
    assert [(r["index"], r["relevance_score"], r["document"]["text"]) for r in body["results"]] == [
        (1, 0.9, "b"), (3, 0.9, "d"), (2, 0.5, "c")]  # ties keep document order
    assert body["usage"] == {"total_tokens": 40} and body["id"].startswith("rerank-")
    bare = rerank_body("m", docs, [0.1, 0.9, 0.5, 0.2], 40, None, False)
    assert [r["index"] for r in bare["results"]] == [1, 2, 3, 0] and "document" not in bare["results"][0]


def test_a_template_bos_is_dropped_only_when_the_engine_adds_one_itself():
    from tritonpkg.frontend.mapping import without_added_bos

    assert without_added_bos("<s><|user|>\nhi", "<s>") == "<|user|>\nhi"
    assert without_added_bos("<s><|user|>\nhi", None) == "<s><|user|>\nhi"  # tokenizer adds no BOS (tiny model)
    assert without_added_bos("<|user|>\nhi", "<s>") == "<|user|>\nhi"


def test_a_streamed_request_is_one_backend_request_per_choice_as_vllm_splits_n():
    from tritonpkg.frontend.mapping import stream_requests

    plan = completion_plan(completion(prompt=["a", "b"], stream=True, n=2, seed=5, temperature=1.0))
    assert stream_requests(plan, plan.prompts) == [
        ("a", {**plan.params, "n": 1, "seed": 5}), ("a", {**plan.params, "n": 1, "seed": 6}),
        ("b", {**plan.params, "n": 1, "seed": 5}), ("b", {**plan.params, "n": 1, "seed": 6})]
    unseeded = completion_plan(completion(stream=True, n=3))
    assert [p for _, p in stream_requests(unseeded, ["x"])] == [{**unseeded.params, "n": 1}] * 3
    one = completion_plan(completion(stream=True, seed=5))
    assert stream_requests(one, ["x"]) == [("x", one.params)]


def test_streamed_choices_arrive_by_index_and_usage_counts_each_prompt_once():
    import asyncio

    from tritonpkg.frontend.streaming import completion_events

    def out(text, reason=None, n_in=3):
        return Output(texts=[text], finish_reasons=[reason], prompt_tokens=n_in, completion_tokens=[1], logprobs=None)

    async def collect():
        async def rest(*outputs):
            for o in outputs:
                await asyncio.sleep(0)
                yield o

        plan = completion_plan(completion(prompt=["p", "q"], stream=True, n=2, echo=True,
                                          stream_options={"include_usage": True}))
        streams = [(out("a"), rest(out("b", "length"))), (out("c"), rest(out("d", "stop"))),
                   (out("e", n_in=4), rest(out("f", "length", 4))), (out("g", n_in=4), rest(out("h", "length", 4)))]
        events = [e.decode().removeprefix("data: ").strip()
                  async for e in completion_events("c", 1, "m", plan, streams, ["p", "q"])]
        return [json.loads(e) for e in events[:-1]], events[-1]

    chunks, done = asyncio.run(collect())
    assert done == "[DONE]"
    texts: dict[int, str] = {}
    for chunk in chunks[:-1]:
        (choice,) = chunk["choices"]
        texts[choice["index"]] = texts.get(choice["index"], "") + choice["text"]
    assert texts == {0: "pab", 1: "pcd", 2: "qef", 3: "qgh"}
    assert chunks[-1]["usage"] == {"prompt_tokens": 7, "completion_tokens": 8, "total_tokens": 15}


@pytest.mark.parametrize(("prompt", "expected"), [
    ("a", ["a"]), (["a", "b"], ["a", "b"]), ([1, 2], [[1, 2]]), ([[1], [2, 3]], [[1], [2, 3]])])
def test_the_four_prompt_shapes(prompt, expected):
    assert completion_plan(completion(prompt=prompt)).prompts == expected


@pytest.mark.parametrize(("prompt", "param"), [([[1], []], "prompt.1"), ([[-1]], "prompt.0"), ([], "prompt")])
def test_a_bad_token_id_prompt_is_a_400_naming_it(prompt, param):
    with pytest.raises(APIError) as info:
        completion_plan(completion(prompt=prompt))
    assert info.value.param == param


def test_echo_with_logprobs_asks_the_backend_for_the_prompts_logprobs():
    plan = completion_plan(completion(echo=True, logprobs=2))
    assert plan.params["prompt_logprobs"] == 2 and plan.params["logprobs"] == 2
    assert "prompt_logprobs" not in completion_plan(completion(logprobs=2)).params


def test_echoed_prompt_logprobs_come_first_with_the_first_token_unscored():
    prompt = _positions(json.dumps([{"5": {"logprob": None, "rank": None, "decoded_token": "The"}},
                                    {"9": {"logprob": -2.5, "rank": 3, "decoded_token": " quick"},
                                     "4": {"logprob": -0.5, "rank": 1, "decoded_token": " a"}}]))
    answer = _positions(json.dumps([{"7": {"logprob": -0.1, "rank": 1, "decoded_token": " fox"}}]))
    out = Output(texts=[" fox"], finish_reasons=["length"], prompt_tokens=2, completion_tokens=[1], logprobs=[answer],
                 prompt_logprobs=prompt)
    lp = completion_body("c", 1, "m", ["The quick"], [out], echo=True, logprobs=1)["choices"][0]["logprobs"]
    assert lp == {"tokens": ["The", " quick", " fox"], "token_logprobs": [None, -2.5, -0.1],
                  "top_logprobs": [None, {" quick": -2.5, " a": -0.5}, {" fox": -0.1}], "text_offset": [0, 3, 9]}


def test_length_bounded_json_strings_exclude_control_characters():
    """xgrammar's minLength/maxLength strings let U+0000-U+001F through; the bounds become a pattern that
    excludes them. A string's own pattern or format stays; the request's schema is not changed."""
    schema = {"type": "object", "properties": {
        "a": {"type": "string", "maxLength": 3}, "b": {"type": "string", "minLength": 1, "pattern": "x"},
        "c": {"type": "array", "items": {"type": "string", "minLength": 2}}, "d": {"type": "string"}}}
    plan = completion_plan(completion(response_format={"type": "json_schema",
                                                       "json_schema": {"name": "s", "schema": schema}}))
    sent = plan.params["response_format"]["json_schema"]["schema"]["properties"]
    assert sent["a"] == {"type": "string", "pattern": "^[^\\x00-\\x1f]{0,3}$"}
    assert sent["b"] == schema["properties"]["b"] and sent["d"] == {"type": "string"}
    assert sent["c"]["items"] == {"type": "string", "pattern": "^[^\\x00-\\x1f]{2,}$"}
    assert schema["properties"]["a"] == {"type": "string", "maxLength": 3}
    assert completion_plan(completion(guided_json=schema)).params["guided_json"]["properties"]["a"] == sent["a"]
