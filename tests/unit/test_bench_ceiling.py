"""The embeddings bench's compute ceiling: FLOPs counted on the model itself (attention included), a GEMM
rate measured here, and the table stating each throughput's share of the ceiling and what a goal needs."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from tests.support.minilm import MINILM
from tritonpkg.benchmarks import ceiling
from tritonpkg.benchmarks.ceiling import Ceiling
from tritonpkg.benchmarks.embeddings import Row, table

torch = pytest.importorskip("torch")


def analytic_gflop(config: dict, tokens: int, pooler: int) -> float:
    """A BERT encoder's multiply-adds x 2: its linear layers over every token, the pooler's over [CLS], and
    attention's two products (scores and the weighted sum), each tokens^2 x hidden per layer."""
    h, inner, layers = config["hidden_size"], config["intermediate_size"], config["num_hidden_layers"]
    per_token_layer = 4 * h * h + 2 * h * inner
    return (2 * tokens * layers * per_token_layer + 2 * pooler + 4 * layers * tokens * tokens * h) / 1e9


@pytest.mark.parametrize("tokens", [64, 200])
def test_flops_of_minilm_match_its_architecture(tokens):
    import json

    config = json.loads((MINILM / "config.json").read_text())
    counted = ceiling.embedding_gflop(ceiling.load(MINILM), tokens)
    assert counted == pytest.approx(analytic_gflop(config, tokens, config["hidden_size"] ** 2), rel=1e-9)


def test_gemm_rate_is_measured_on_the_model_shapes():
    shapes = ceiling.model_shapes(ceiling.load(MINILM), rows=64)
    assert (64, 384, 1536) in shapes and (64, 1536, 384) in shapes and (64, 384, 384) in shapes
    assert shapes[-1] == (ceiling.SQUARE,) * 3
    rate = ceiling.gemm_gflops([(256, 384, 1536)], repeats=2)
    assert 0.1 < rate < 1e5  # GFLOP/s of any CPU this runs on


def render(rows: list[Row], bound: Ceiling | None) -> str:
    out = io.StringIO()
    Console(file=out, width=400).print(table(rows, [], "float32", bound))
    return out.getvalue()


def test_table_states_each_throughput_as_a_share_of_the_ceiling_and_what_the_goal_needs():
    bound = Ceiling(tokens=512, gflop_per_embedding=10.0, gemm_gflops=200.0, threads=2, dtype="float32")
    assert bound.embeddings_per_s == 20.0 and bound.share(5.0) == 0.25
    scenario = "throughput batch 100 x 4 clients @ 512 tok"
    rows = [Row(scenario, "tritonpkg (Triton + gateway)", {"emb_per_s": 12.0}),
            Row(scenario, "vLLM server (pooling)", {"emb_per_s": 10.0})]
    shown = render(rows, bound)
    assert "MISSED (>= 3.00x = 150% of the ceiling)" in shown  # 3 x 10 emb/s against 20
    assert "12.0 (60% of the ceiling)" in shown and "10.0 (50% of the ceiling)" in shown
    assert "20.0 embeddings/s" in shown and "200 GFLOP/s" in shown
    assert "ceiling" not in render(rows, None)
