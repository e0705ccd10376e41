"""A generate response read from Triton's protobuf directly agrees with tritonclient's own reading of it."""

from __future__ import annotations

import json

import numpy as np
from tritonclient.grpc import InferResult, service_pb2
from tritonclient.utils import serialize_byte_tensor

from tritonpkg.frontend.triton import parse_output


def _response(**outputs) -> service_pb2.ModelInferResponse:
    response = service_pb2.ModelInferResponse(model_name="tiny_llm", id="fe-1")
    for name, array in outputs.items():
        tensor = response.outputs.add()
        tensor.name = name
        tensor.shape.extend(array.shape)
        if array.dtype == np.object_:
            tensor.datatype = "BYTES"
            response.raw_output_contents.append(serialize_byte_tensor(array).item())
        else:
            tensor.datatype = {np.dtype(np.uint32): "UINT32", np.dtype(np.int64): "INT64"}[array.dtype]
            response.raw_output_contents.append(array.tobytes())
    return response


def test_two_choices_with_counts_reasons_and_logprobs() -> None:
    logprobs = [{"7": {"logprob": -0.5, "rank": 1, "decoded_token": "é"}}]
    response = _response(
        text_output=np.array(["h\u00e9llo \u2014 w\u00f6rld".encode(), b""], dtype=np.object_),
        finish_reason=np.array([b"length", b""], dtype=np.object_),
        num_input_tokens=np.array([9], dtype=np.uint32),
        num_output_tokens=np.array([4, 70000], dtype=np.uint32),
        logprobs=np.array([json.dumps(logprobs).encode(), b"null"], dtype=np.object_),
    )
    out = parse_output(response)
    reference = InferResult(response)
    assert out.texts == [v.decode() for v in reference.as_numpy("text_output")] == ["h\u00e9llo \u2014 w\u00f6rld", ""]
    assert out.finish_reasons == ["length", None]
    assert out.prompt_tokens == 9
    assert out.completion_tokens == reference.as_numpy("num_output_tokens").tolist() == [4, 70000]
    assert out.logprobs == [[{"sampled": {"id": 7, "token": "é", "logprob": -0.5, "rank": 1},
                              "top": [{"id": 7, "token": "é", "logprob": -0.5, "rank": 1}]}], None]


def test_absent_outputs_and_other_integer_types() -> None:
    out = parse_output(_response(text_output=np.array([b"x"], dtype=np.object_),
                                 num_output_tokens=np.array([2**40], dtype=np.int64)))
    assert (out.texts, out.finish_reasons, out.prompt_tokens, out.logprobs) == (["x"], [None], None, None)
    assert out.completion_tokens == [2**40]
