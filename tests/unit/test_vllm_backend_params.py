"""backends/vllm/request_params.py: how request JSON becomes SamplingParams kwargs. Runs without
vLLM or Triton (the field tables are passed in), so the mapping rules are checked on every commit."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

SRC = Path(__file__).resolve().parents[2] / "backends" / "vllm" / "request_params.py"
_spec = importlib.util.spec_from_file_location("vllm_backend_request_params", SRC)
rp = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(rp)

FIELDS = {"max_tokens": False, "temperature": False, "stop": True, "structured_outputs": False,
          "extra_args": False, "logit_bias": False, "allowed_token_ids": False}
STRUCTURED = {"json", "regex", "choice", "grammar", "json_object", "disable_any_whitespace",
              "disable_additional_properties", "whitespace_pattern", "structural_tag"}
SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}}}


def norm(params):
    return rp.normalize_sampling(params, FIELDS, STRUCTURED)


@pytest.mark.parametrize(("params", "expected"), [
    ({"guided_json": SCHEMA}, {"json": SCHEMA}),
    ({"guided_json": json.dumps(SCHEMA)}, {"json": SCHEMA}),
    ({"guided_regex": "[ab]+"}, {"regex": "[ab]+"}),
    ({"guided_choice": '["x", "y"]'}, {"choice": ["x", "y"]}),
    ({"guided_grammar": 'root ::= "a"'}, {"grammar": 'root ::= "a"'}),
    ({"guided_decoding": {"regex": "a"}}, {"regex": "a"}),
    ({"structured_outputs": json.dumps({"choice": ["a"]})}, {"choice": ["a"]}),
    ({"response_format": {"type": "json_object"}}, {"json_object": True}),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "t", "schema": SCHEMA, "strict": True}}},
     {"json": SCHEMA}),
    ({"guided_regex": "a", "guided_whitespace_pattern": " ?"}, {"regex": "a", "whitespace_pattern": " ?"}),
])
def test_every_spelling_maps_to_structured_outputs(params, expected):
    assert norm({"max_tokens": 5, **params}) == {"max_tokens": 5, "structured_outputs": expected}


def test_plain_text_response_format_sets_no_constraint():
    assert norm({"response_format": {"type": "text"}}) == {}


@pytest.mark.parametrize(("params", "named"), [
    ({"temprature": 1}, "temprature"),
    ({"structured_outputs": {"jsn": {}}}, "jsn"),
    ({"response_format": {"type": "xml"}}, "xml"),
    ({"response_format": {"type": "json_schema", "json_schema": {"schema": {}, "strictly": 1}}}, "strictly"),
    ({"response_format": {"type": "json_object", "schema": {}}}, "schema"),
    ({"guided_regex": "a", "guided_choice": ["a"]}, "guided_choice"),
    ({"guided_json": SCHEMA, "response_format": {"type": "json_object"}}, "response_format"),
    ({"structured_outputs": {"regex": "a", "choice": ["a"]}}, "choice"),
    ({"guided_whitespace_pattern": " "}, "guided_whitespace_pattern"),
    ({"extra_args": {"k": 1}, "vllm_xargs": {"k": 2}}, "'k'"),
    ({"logit_bias": "{not json"}, "logit_bias"),
])
def test_unknown_or_conflicting_keys_are_errors_naming_them(params, named):
    with pytest.raises(rp.ParamError, match=named):
        norm(params)


def test_logits_processor_args_reach_extra_args():
    assert norm({"vllm_xargs": {"ban": [1, 2]}, "extra_args": '{"mode": "x"}'}) == {
        "extra_args": {"ban": [1, 2], "mode": "x"}}


def test_string_fields_are_not_json_decoded():
    assert norm({"stop": "[END]", "allowed_token_ids": "[1, 2]"}) == {"stop": "[END]", "allowed_token_ids": [1, 2]}


def test_logprobs_json_has_nvidias_shape_and_survives_minus_infinity():
    lp = SimpleNamespace
    text = rp.logprobs_json([{5: lp(logprob=-0.5, rank=1, decoded_token="a"),
                              7: lp(logprob=float("-inf"), rank=9, decoded_token="b")}])
    assert json.loads(text) == [{"5": {"logprob": -0.5, "rank": 1, "decoded_token": "a"},
                                 "7": {"logprob": None, "rank": 9, "decoded_token": "b"}}]
    assert rp.logprobs_json(None) == "null"


def test_candidate_logprob_sums_the_candidate_positions_only():
    lp = SimpleNamespace
    prompt_logprobs = [None, {3: lp(logprob=-9.0)}, {4: lp(logprob=-1.0)}, {6: lp(logprob=-0.25), 1: lp(logprob=-2)}]
    assert rp.candidate_logprob(prompt_logprobs, 2, [4, 6]) == pytest.approx(-1.25)
    with pytest.raises(rp.ParamError, match="position 3"):
        rp.candidate_logprob(prompt_logprobs, 2, [4, 7])


def test_kserve_json_schemas_get_the_frontends_strict_strings():
    """A bounded string of any spelling's JSON schema becomes the frontend's control-free pattern (issue 44)."""
    from tritonpkg.frontend.mapping import strict_json_strings

    schema = {"type": "object", "properties": {"s": {"type": "string", "maxLength": 8},
                                               "t": {"type": "string", "pattern": "^a$", "maxLength": 3}}}
    rf = {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}
    for params in ({"guided_json": schema}, {"structured_outputs": {"json": json.dumps(schema)}},
                   {"response_format": rf}):
        got = norm(params)["structured_outputs"]["json"]
        assert got == strict_json_strings(schema), params
        assert got["properties"]["s"] == {"type": "string", "pattern": "^[^\\x00-\\x1f]{0,8}$"}
        assert got["properties"]["t"] == schema["properties"]["t"]
    assert norm({"guided_json": schema}) == norm({"guided_json": strict_json_strings(schema)})
