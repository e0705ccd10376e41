"""Every Python example and template, packaged by tritonpkg, answers in the real Triton 2.51 over
HTTP and gRPC with the official tritonclient."""

from __future__ import annotations

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tokenizers import Tokenizer

from tests.support.paths import EXAMPLES
from tritonpkg import smoke
from tritonpkg.spec import load_spec

pytestmark = pytest.mark.integration
TOKENIZER = Tokenizer.from_file(str(EXAMPLES / "tiny-llm" / "tokenizer" / "tokenizer.json"))


def text_input(module, name: str, texts: list[str], batched: bool = False):
    array = np.array([t.encode() for t in texts], dtype=np.object_)
    if batched:
        array = array.reshape(-1, 1)
    tensor = module.InferInput(name, list(array.shape), "BYTES")
    tensor.set_data_from_numpy(array)
    return tensor


def test_the_packaged_repository_validates_clean(python_repo):
    from tritonpkg.validate import validate_repository

    report = validate_repository(python_repo, target_release="24.10")
    assert [p for p in report.problems if p.severity == "error"] == []


def test_every_model_is_ready(python_server):
    client = httpclient.InferenceServerClient(python_server.http_url.removeprefix("http://"))
    for name in ("sentiment", "reverser", "reverser_tokenize", "reverser_model", "reverser_detokenize",
                 "batched_tokenizer", "double"):
        assert client.is_model_ready(name), name


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_custom_template_runs_the_users_hooks(python_server, protocol):
    module = httpclient if protocol == "http" else grpcclient
    url = python_server.http_url.removeprefix("http://") if protocol == "http" else python_server.grpc_url
    client = module.InferenceServerClient(url)
    result = client.infer("sentiment", [text_input(module, "TEXT", ["This is great and helpful, I love it"])])
    assert result.as_numpy("LABEL").tolist() == [b"positive"]
    score = float(result.as_numpy("SCORE")[0])
    assert score == pytest.approx(1 / (1 + np.exp(-(1.5 + 1.0 + 1.5))), rel=1e-6)
    neg = client.infer("sentiment", [text_input(module, "TEXT", ["slow and broken"])])
    assert neg.as_numpy("LABEL").tolist() == [b"negative"]


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_ensemble_tokenizes_reverses_and_detokenizes(python_server, protocol):
    module = httpclient if protocol == "http" else grpcclient
    url = python_server.http_url.removeprefix("http://") if protocol == "http" else python_server.grpc_url
    text = "hello triton, packaged by tritonpkg"
    result = module.InferenceServerClient(url).infer("reverser", [text_input(module, "TEXT", [text])])
    ids = TOKENIZER.encode(text, add_special_tokens=False).ids
    expected = TOKENIZER.decode(ids[::-1], skip_special_tokens=True)
    assert result.as_numpy("TEXT_OUTPUT").tolist() == [expected.encode()]
    assert expected != text


def test_batched_tokenizer_pads_and_masks(python_server):
    client = httpclient.InferenceServerClient(python_server.http_url.removeprefix("http://"))
    texts = ["a", "a longer sentence to tokenize"]
    result = client.infer("batched_tokenizer", [text_input(httpclient, "TEXT", texts, batched=True)])
    ids, mask = result.as_numpy("INPUT_IDS"), result.as_numpy("ATTENTION_MASK")
    for row, text in enumerate(texts):
        want = TOKENIZER.encode(text, add_special_tokens=False).ids
        assert ids[row, : len(want)].tolist() == want
        assert mask[row].sum() == len(want)


def test_batched_custom_model(python_server):
    client = grpcclient.InferenceServerClient(python_server.grpc_url)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    tensor = grpcclient.InferInput("X", [2, 3], "FP32")
    tensor.set_data_from_numpy(x)
    assert client.infer("double", [tensor]).as_numpy("Y").tolist() == (x * 2).tolist()


def test_a_hook_error_is_a_clear_error_response_not_a_crash(python_server):
    client = httpclient.InferenceServerClient(python_server.http_url.removeprefix("http://"))
    tensor = httpclient.InferInput("X", [1, 3], "FP32")
    tensor.set_data_from_numpy(-np.ones((1, 3), dtype=np.float32))
    with pytest.raises(Exception, match="ValueError: X must be non-negative"):
        client.infer("double", [tensor])
    assert client.is_model_ready("double")
    tensor.set_data_from_numpy(np.ones((1, 3), dtype=np.float32))
    assert client.infer("double", [tensor]).as_numpy("Y").tolist() == [[2.0, 2.0, 2.0]]


@pytest.mark.parametrize(("example", "model"), [("sentiment-custom", "sentiment"), ("reverse-ensemble", "reverser")])
def test_smoke_request_from_the_spec(python_server, example, model):
    spec = load_spec(EXAMPLES / example)
    answer = smoke.send(python_server.http_url, model, spec.deployment.smoke_request)
    assert answer and all(isinstance(v, list) and v for v in answer.values())
