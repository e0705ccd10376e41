"""Structured outputs through KServe hold the OpenAI frontend's strict-JSON rule (issue 44): twenty json_schema
outputs of the tiny LLM at temperature 1.0, asked over Triton's HTTP generate endpoint with `response_format` in
the request's parameters, all pass the strict json.loads (RFC 8259: no raw U+0000-U+001F inside strings).
Before the backend applied the rule, 7 of 10 passed. Uses the shared Triton + vLLM server."""

from __future__ import annotations

import json
import urllib.request

import pytest

from tests.integration.test_openai_frontend import STRINGS, strict_json_failures

pytestmark = [pytest.mark.integration, pytest.mark.slow]

MODEL = "tiny_llm"


def test_twenty_kserve_json_schema_outputs_at_temperature_1_are_strict_json(vllm_server):
    fmt = {"type": "json_schema", "json_schema": {"name": "answer", "schema": STRINGS}}
    contents = []
    for seed in range(20):
        params = {"max_tokens": 160, "temperature": 1.0, "seed": seed, "response_format": json.dumps(fmt)}
        body = {"text_input": "give me json", "parameters": {**params, "exclude_input_in_output": True}}
        req = urllib.request.Request(f"{vllm_server.http_url}/v2/models/{MODEL}/generate",
                                     data=json.dumps(body).encode(), method="POST")
        with urllib.request.urlopen(req, timeout=120) as resp:
            contents.append(json.loads(resp.read())["text_output"])
    failures = strict_json_failures(contents, STRINGS)
    assert not failures, (len(failures), failures[:3])
